"""Position tokens (kiq.positions): one token per position, and any other text a 400."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from kiq.errors import KiqError
from kiq.positions import (
    MAX_ENTRIES,
    MAX_TOKEN_CHARS,
    OFFSET_LIMIT,
    BadPosition,
    _decode,
    at,
    decode,
    encode,
    merge,
    of_table,
    offset_of,
)

POSITION = {("orders", 0): 12, ("orders", 3): 7, ("quotes@v2", 1): 0, ("a-b_c.d", 11): 2**40}


def test_a_position_survives_its_token():
    token = encode(POSITION)
    assert token == "a-b_c.d:11=1099511627776;orders:0=12,3=7;quotes@v2:1=0"
    assert decode(token) == POSITION
    assert encode({}) == "" and decode("") == {}


def test_the_same_position_has_one_token_whatever_its_order():
    shuffled = dict(reversed(list(POSITION.items())))
    assert encode(shuffled) == encode(POSITION)
    again = decode("quotes@v2:1=0;orders:3=7,0=12;a-b_c.d:11=1099511627776")
    assert encode(again) == encode(POSITION)


def test_an_entry_named_twice_keeps_its_largest_offset():
    assert decode("t:0=5,0=9,0=2") == {("t", 0): 9}
    assert decode("t:0=5;t:0=3") == {("t", 0): 5}


def test_merge_keeps_the_largest_offset_of_each_partition():
    a = {("t", 0): 5, ("t", 1): 9}
    b = {("t", 0): 8, ("u", 0): 1}
    assert merge(a, b) == {("t", 0): 8, ("t", 1): 9, ("u", 0): 1}
    assert merge(b, a) == merge(a, b)
    assert merge() == {} and merge(a) == a and merge(a, {}) == a
    assert a == {("t", 0): 5, ("t", 1): 9}  # the inputs are left as they were


def test_a_tables_offsets_and_a_position_of_known_offsets():
    assert of_table(POSITION, "orders") == {0: 12, 3: 7}
    assert of_table(POSITION, "nothing") == {}
    assert at("t", [(0, 4), (1, -1), (2, 0)]) == {("t", 0): 4, ("t", 2): 0}


@pytest.mark.parametrize(
    "token",
    [
        "t",  # no colon
        ":0=1",  # no table
        "t:",  # no entry
        "t:0",  # no offset
        "t:=5",  # no partition
        "t:0=",  # empty offset
        "t:0=1,",  # an empty entry
        "t:0=1;",  # an empty part
        ";t:0=1",
        "t:0=1;;u:0=1",
        "t:-1=5",  # negative numbers
        "t:0=-5",
        "t:0=+5",
        "t:0=5.0",
        "t:0=0x10",
        "t:0=1e3",
        "t:0= 5",
        "t:0=٣",  # a digit, but not an ASCII one
        "t:1234567890=1",  # a partition of 10 digits
        f"t:0={OFFSET_LIMIT}",  # past a Kafka offset
        f"t:0={10**30}",  # huge
        "t:0=" + "9" * 5000,
        "t:0=1=2",
        "t:0:1=2",
        "a b:0=1",  # bad table names
        "t/x:0=1",
        "t%00:0=1",
        "ü:0=1",
        "t\n:0=1",
        "x" * 101 + ":0=1",
    ],
)
def test_a_malformed_token_is_bad_position(token):
    with pytest.raises(BadPosition):
        decode(token)


def test_a_token_too_long_is_refused_before_it_is_parsed():
    long = "t:" + ",".join(f"{p}=1" for p in range(3000))
    assert len(long) > MAX_TOKEN_CHARS
    with pytest.raises(BadPosition, match="characters"):
        decode(long)


def test_a_token_of_too_many_entries_is_refused():
    many = "t:" + ",".join(f"{p}=1" for p in range(MAX_ENTRIES + 1))
    assert len(many) <= MAX_TOKEN_CHARS
    with pytest.raises(BadPosition, match="partitions"):
        decode(many)
    most = "t:" + ",".join(f"{p}=1" for p in range(MAX_ENTRIES))
    assert len(decode(most)) == MAX_ENTRIES


def test_the_largest_offset_and_partition_are_taken():
    top = f"t:999999999={OFFSET_LIMIT - 1}"
    assert decode(top) == {("t", 999999999): OFFSET_LIMIT - 1}


def test_bad_position_is_a_kiq_error_and_a_value_error():
    with pytest.raises(KiqError):
        decode("nonsense")
    with pytest.raises(ValueError):
        decode("nonsense")


def _outcome(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except BadPosition:
        return BadPosition


def test_the_quick_readings_agree_with_the_part_by_part_one():
    """``decode``'s and ``offset_of``'s one-match paths against the definition, on tokens
    near the valid ones: every change of a character of a valid token, and long ones."""
    rng = random.Random(40)
    alphabet = "t0u9:;,=@.-_ x٣"
    tokens = [
        "t:0=5,1=6;u@v2:3=9",
        "t:0=5,0=9;t:0=12",
        f"t:1={OFFSET_LIMIT - 1}",
        f"t:1={OFFSET_LIMIT}",
        "t:" + ",".join(f"{p}=1" for p in range(MAX_ENTRIES + 1)),
        "t:" + ",".join("0=1" for _ in range(MAX_ENTRIES + 1)),  # many entries, one key
    ]
    base = "t:0=5,1=6;u@v2:3=9"
    for _ in range(3000):
        chars = list(base)
        for _ in range(rng.randint(1, 3)):
            chars[rng.randrange(len(chars))] = rng.choice(alphabet)
        tokens.append("".join(chars))
    for token in tokens:
        expected = _outcome(lambda t=token: _decode(t))
        assert _outcome(lambda t=token: decode(t)) == expected, token
        for table, partition in (("t", 0), ("t", 1), ("u@v2", 3), ("x", 0)):
            got = _outcome(lambda t=token, a=table, p=partition: offset_of(t, a, p))
            want = expected if expected is BadPosition else expected.get((table, partition))
            assert got == want, (token, table, partition)
