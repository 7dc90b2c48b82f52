"""Ticks from a file: JSON lines, or CSV with a header row of the contract's fields.

Every line is checked against the contract (``kiq.feeds.ticks``). A bad line is
reported with its line number and skipped, or, with ``strict``, stops the
replay with a :class:`ReplayError`. In CSV, empty ``last`` and ``last_size``
cells mean null (a tick without a trade). Blank lines are ignored.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson

from kiq.feeds.errors import InvalidTick, ReplayError
from kiq.feeds.ticks import FIELDS, PRICE_FIELDS, SIZE_FIELDS, Tick, validate

Format = Literal["jsonl", "csv"]

_SUFFIXES: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
}
_KEPT_BAD_LINES = 1000


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


class TickFile:
    """The valid ticks of ``path``, in file order; iterate once.

    ``format`` is taken from the suffix (.jsonl/.ndjson/.json, .csv), else from
    the first byte (``{`` means JSON lines). While iterating, ``bytes_read`` and
    ``size`` tell progress, ``bad`` counts skipped lines and ``bad_lines`` keeps
    the first thousand; ``on_bad`` hears of each as it is met.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        strict: bool = False,
        format: Format | None = None,
        on_bad: Callable[[BadLine], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.strict = strict
        self._on_bad = on_bad
        try:
            self.size = self.path.stat().st_size
            with self.path.open("rb") as fh:
                head = fh.read(64)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ReplayError(f"cannot read {self.path}: {reason}: check the file name") from exc
        self.format: Format = (
            format
            or _SUFFIXES.get(self.path.suffix.lower())
            or ("jsonl" if head.lstrip().startswith(b"{") else "csv")
        )
        self.bytes_read = 0
        self.bad = 0
        self.bad_lines: list[BadLine] = []

    def __iter__(self) -> Iterator[Tick]:
        with self.path.open("rb") as fh:
            yield from (self._jsonl(fh) if self.format == "jsonl" else self._csv(fh))

    def _jsonl(self, fh: BinaryIO) -> Iterator[Tick]:
        for number, raw in enumerate(fh, start=1):
            self.bytes_read += len(raw)
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                self._bad(number, f"not valid JSON ({exc})")
                continue
            if not isinstance(obj, dict):
                self._bad(number, f"not a JSON object but {type(obj).__name__}")
                continue
            try:
                yield validate(obj)
            except InvalidTick as exc:
                self._bad(number, exc.reason)

    def _csv(self, fh: BinaryIO) -> Iterator[Tick]:
        reader = csv.reader(self._decoded(fh))
        header: list[str] | None = None
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                self._bad(reader.line_num, f"not valid CSV ({exc})")
                continue
            if not row or not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = self._header(row, reader.line_num)
                continue
            if len(row) != len(header):
                self._bad(reader.line_num, f"{len(row)} cells, the header has {len(header)}")
                continue
            try:
                yield validate(_typed(dict(zip(header, row, strict=True))))
            except InvalidTick as exc:
                self._bad(reader.line_num, exc.reason)

    def _decoded(self, fh: BinaryIO) -> Iterator[str]:
        for raw in fh:
            self.bytes_read += len(raw)
            # Undecodable bytes survive as lone surrogates and fail validation of their cell.
            yield raw.decode("utf-8", "surrogateescape")

    def _header(self, row: list[str], number: int) -> list[str]:
        names = [cell.strip().lstrip("\ufeff") for cell in row]
        missing = [f for f in FIELDS if f not in names]
        unknown = [n for n in names if n not in FIELDS]
        if missing or unknown or len(set(names)) != len(names):
            raise ReplayError(
                f"{self.path}:{number}: the CSV header must name the fields "
                f"{','.join(FIELDS)} once each (in any order); "
                f"missing: {missing or 'none'}, unknown: {unknown or 'none'}"
            )
        return names

    def _bad(self, number: int, reason: str) -> None:
        bad = BadLine(number, reason)
        if self.strict:
            raise ReplayError(
                f"{self.path}:{bad.line}: {bad.reason} (--strict stops at the first bad line; "
                "without it bad lines are reported and skipped)"
            )
        self.bad += 1
        if len(self.bad_lines) < _KEPT_BAD_LINES:
            self.bad_lines.append(bad)
        if self._on_bad is not None:
            self._on_bad(bad)


def _typed(cells: dict[str, str]) -> dict[str, Any]:
    """CSV cells as the JSON types of the contract; an empty cell is null."""
    tick: dict[str, Any] = {}
    for name, raw in cells.items():
        cell = raw.strip()
        if not cell:
            tick[name] = None
        elif name in PRICE_FIELDS:
            tick[name] = _number(name, cell, float)
        elif name in SIZE_FIELDS or name == "ts":
            tick[name] = _number(name, cell, int)
        else:
            tick[name] = cell
    return tick


def _number(name: str, cell: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(cell)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise InvalidTick(f"{name} must be {what}, got {cell!r}") from None
