"""Server-Sent Events parsed from bytes however the network splits them."""

from __future__ import annotations

import random

from kiq.client.sse import Event, SseParser

STREAM = (
    b": hb\n"
    b'id: 41\nevent: value\ndata: {"key": "a", "value": 1}\n\n'
    b": hb\n\n"
    b'id: 42\r\nevent: delete\r\ndata: {"key": "a",\r\ndata:  "value": null}\r\n\r\n'
    b'event: dropped\rdata: {"reason": "slow"}\r\r'
) + ('id: 43\nevent: value\ndata: "ünï"\n\n'.encode())
EXPECTED = [
    Event("value", '{"key": "a", "value": 1}', "41"),
    Event("delete", '{"key": "a",\n "value": null}', "42"),
    Event("dropped", '{"reason": "slow"}', "42"),
    Event("value", '"ünï"', "43"),
]


def parse(chunks: list[bytes]) -> tuple[list[Event], SseParser]:
    parser = SseParser()
    events = [e for chunk in chunks for e in parser.feed(chunk)]
    return events, parser


def test_a_whole_stream_at_once():
    events, parser = parse([STREAM])
    assert events == EXPECTED
    assert parser.comments == 2
    assert parser.last_id == "43"


def test_every_split_of_the_stream_gives_the_same_events():
    # byte by byte: CRLF and UTF-8 sequences split across chunks
    assert parse([STREAM[i : i + 1] for i in range(len(STREAM))])[0] == EXPECTED
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(1, 30)))
        chunks = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        assert parse(chunks)[0] == EXPECTED


def test_a_cr_then_lf_in_the_next_chunk_is_one_line_end():
    events, _ = parse([b"event: value\r", b"\ndata: 1\r", b"\n\r", b"\n"])
    assert events == [Event("value", "1", None)]


def test_an_event_cut_off_is_not_dispatched_nor_is_its_id_taken():
    events, parser = parse([b"id: 1\ndata: a\n\nid: 2\ndata: b\n"])
    assert events == [Event("message", "a", "1")]
    assert parser.last_id == "1"  # a reconnection resumes after 1, so 2 is sent again


def test_fields_the_standard_ignores_or_names():
    events, parser = parse(
        [
            b"\xef\xbb\xbfdata\n\n"  # a BOM first; a field with no colon: empty data
            b"retry: 2500\nretry: soon\nid: a\0b\nfoo: bar\ndata:x\n\n"
            b"id: 9\n\n"  # no data: nothing dispatched, the id still taken
            b"data: y\n\n"
        ]
    )
    assert events == [
        Event("message", "", None),
        Event("message", "x", None),
        Event("message", "y", "9"),
    ]
    assert parser.retry_ms == 2500
