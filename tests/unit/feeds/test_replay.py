from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kiq.feeds import BadLine, ReplayError, TickFile
from tests.unit.feeds.samples import TRADE

HEADER = "symbol,exchange,ts,bid,ask,bid_size,ask_size,last,last_size\n"

QUOTE = {**TRADE, "symbol": "BRK.B", "exchange": "NYSE", "last": None, "last_size": None}


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_jsonl_with_trades_and_quotes(tmp_path):
    lines = [orjson.dumps(TRADE), b"", orjson.dumps(QUOTE), b"   "]
    source = TickFile(write(tmp_path / "t.jsonl", b"\n".join(lines) + b"\n"))
    assert source.format == "jsonl"
    assert list(source) == [TRADE, QUOTE]
    assert source.bad == 0
    assert source.bytes_read == source.size


def test_csv_with_empty_trade_cells_as_null(tmp_path):
    text = (
        HEADER
        + "AAPL,NASDAQ,1795300000123,189.12,189.14,300,200,189.13,100\n"
        + "\n"
        + "BRK.B,NYSE,1795300000123,189.12,189.14,300,200,,\n"
    )
    source = TickFile(write(tmp_path / "t.csv", text))
    assert source.format == "csv"
    assert list(source) == [TRADE, QUOTE]
    assert source.bytes_read == source.size


def test_csv_columns_in_any_order_with_a_bom_and_spaces(tmp_path):
    text = (
        "\ufeffts, symbol ,exchange,ask,bid,ask_size,bid_size,last_size,last\r\n"
        "1795300000123, AAPL ,NASDAQ,189.14,189.12,200,300,100,189.13\r\n"
    )
    assert list(TickFile(write(tmp_path / "t.csv", text))) == [TRADE]


def test_format_from_content_when_the_suffix_says_nothing(tmp_path):
    assert TickFile(write(tmp_path / "a.txt", orjson.dumps(TRADE))).format == "jsonl"
    assert TickFile(write(tmp_path / "b.txt", HEADER)).format == "csv"
    assert TickFile(write(tmp_path / "c.log", HEADER), format="jsonl").format == "jsonl"


def test_bad_jsonl_lines_are_reported_with_line_numbers_and_skipped(tmp_path):
    lines = [
        orjson.dumps(TRADE),  # 1
        b"{not json",  # 2
        orjson.dumps({**TRADE, "bid": 190.0}),  # 3: bid above ask
        b"[1, 2]",  # 4
        orjson.dumps(QUOTE),  # 5
        orjson.dumps({**TRADE, "last_size": None}),  # 6
        b"\xff\xfe",  # 7: not UTF-8
    ]
    seen: list[BadLine] = []
    source = TickFile(write(tmp_path / "t.jsonl", b"\n".join(lines)), on_bad=seen.append)
    assert list(source) == [TRADE, QUOTE]
    assert [b.line for b in source.bad_lines] == [2, 3, 4, 6, 7]
    assert seen == source.bad_lines and source.bad == 5
    reasons = {b.line: b.reason for b in source.bad_lines}
    assert "not valid JSON" in reasons[2]
    assert "above ask" in reasons[3]
    assert "not a JSON object" in reasons[4]
    assert "both" in reasons[6]
    assert str(source.bad_lines[1]).startswith("line 3: bid 190.0 is above ask")


def test_bad_csv_lines_are_reported_with_line_numbers_and_skipped(tmp_path):
    text = (
        HEADER  # 1
        + "AAPL,NASDAQ,1795300000123,189.12,189.14,300,200,189.13,100\n"  # 2
        + "MSFT,NASDAQ,1795300000123,abc,410.2,300,200,,\n"  # 3: bid not a number
        + "MSFT,NASDAQ,1795300000123,410.1,410.2,300,200\n"  # 4: too few cells
        + "MSFT,NASDAQ,1795300000123,410.1,410.2,300.5,200,,\n"  # 5: size not an integer
        + "msft,NASDAQ,1795300000123,410.1,410.2,300,200,,\n"  # 6: lower-case symbol
        + "MSFT,NASDAQ,,410.1,410.2,300,200,,\n"  # 7: no ts
        + "MSFT,NASDAQ,1795300000123,410.1,410.2,300,200,410.15,\n"  # 8: half a trade
        + "BRK.B,NYSE,1795300000123,189.12,189.14,300,200,,\n"  # 9
    )
    source = TickFile(write(tmp_path / "t.csv", text))
    assert list(source) == [TRADE, QUOTE]
    reasons = {b.line: b.reason for b in source.bad_lines}
    assert list(reasons) == [3, 4, 5, 6, 7, 8]
    assert reasons[3] == "bid must be a number, got 'abc'"
    assert "7 cells, the header has 9" in reasons[4]
    assert "bid_size must be an integer" in reasons[5]
    assert "symbol must match" in reasons[6]
    assert "missing field(s): ts" in reasons[7]
    assert "both" in reasons[8]


def test_strict_stops_at_the_first_bad_line(tmp_path):
    lines = [orjson.dumps(TRADE), b"{oops", orjson.dumps(QUOTE), b"{again"]
    source = TickFile(write(tmp_path / "t.jsonl", b"\n".join(lines)), strict=True)
    got = []
    with pytest.raises(ReplayError, match=r"t\.jsonl:2: not valid JSON.*--strict"):
        for tick in source:
            got.append(tick)
    assert got == [TRADE]


def test_strict_csv(tmp_path):
    text = HEADER + "AAPL,NASDAQ,1795300000123,2,1,100,100,,\n"
    with pytest.raises(ReplayError, match=r"t\.csv:2: bid 2\.0 is above ask 1\.0"):
        list(TickFile(write(tmp_path / "t.csv", text), strict=True))


def test_a_csv_header_without_the_contract_fields_is_refused(tmp_path):
    text = "symbol,exchange,ts,bid,ask,size\nAAPL,NASDAQ,1,1,1,1\n"
    with pytest.raises(ReplayError, match=r"t\.csv:1: the CSV header.*unknown: \['size'\]"):
        list(TickFile(write(tmp_path / "t.csv", text)))


def test_unreadable_files_are_refused_up_front(tmp_path):
    with pytest.raises(ReplayError, match=r"cannot read .*missing\.csv.*check the file name"):
        TickFile(tmp_path / "missing.csv")
    with pytest.raises(ReplayError, match="cannot read"):
        TickFile(tmp_path)


def test_an_empty_file_has_no_ticks(tmp_path):
    assert list(TickFile(write(tmp_path / "e.csv", ""))) == []
    assert list(TickFile(write(tmp_path / "e.jsonl", ""))) == []
