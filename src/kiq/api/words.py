"""Word count (seed 001): POST words in, GET a word's count out.

POST /v1/words  {"word": "kafka"} or {"text": "..."}   → 202, where each word was written
GET  /v1/words/{word}                                   → {"word", "count"}, 404 if never seen

Words are lowercased runs of letters, digits, ' and -; the Spark word-count
pipeline turns topic ``words`` into table ``word-counts``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from kiq import catalog
from kiq.api.asgi import Send
from kiq.api.errors import BadRequest, Unavailable, UnknownTable
from kiq.api.lookups import Lookups
from kiq.errors import WriteFailed
from kiq.tables import TableRuntime

WORDS_TOPIC = catalog.WORDS
COUNTS = catalog.WORD_COUNTS
MAX_WORDS = 10_000
_WORD = re.compile(r"[\w'-]+")


def split_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.strip("'-")]


class RecordWriter(Protocol):
    """Where words are written (``kiq.node_build.LogWriter``: the Kafka topic)."""

    async def send(self, topic: str, key: bytes, value: bytes) -> tuple[int, int]:
        """(partition, offset) once the log has the record; raises ``WriteFailed``."""
        ...

    def close(self) -> None: ...


class Words:
    def __init__(
        self, tables: Mapping[str, TableRuntime], lookups: Lookups, writer: RecordWriter
    ) -> None:
        self._tables = tables
        self._lookups = lookups
        self._writer = writer

    def close(self) -> None:
        self._writer.close()

    async def count(self, scope: dict[str, Any], send: Send, raw_word: str) -> None:
        if COUNTS not in self._tables:
            raise UnknownTable(f"this cluster does not serve {COUNTS}", table=COUNTS)
        words = split_words(raw_word)
        if len(words) != 1:
            raise BadRequest(f"{raw_word!r} is not one word")
        await self._lookups.get(scope, send, COUNTS, words[0].encode())

    async def post(self, body: bytes) -> bytes:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest('body must be JSON: {"word": "..."} or {"text": "..."}') from exc
        if not isinstance(data, dict) or not (
            isinstance(data.get("word"), str) or isinstance(data.get("text"), str)
        ):
            raise BadRequest('body must be {"word": "..."} or {"text": "..."}')
        words = split_words(data["word"] if isinstance(data.get("word"), str) else data["text"])
        if not words:
            raise BadRequest("no words in the request")
        if len(words) > MAX_WORDS:
            raise BadRequest(f"at most {MAX_WORDS} words per request", count=len(words))
        try:
            acks = await asyncio.gather(
                *(self._writer.send(WORDS_TOPIC, w.encode(), w.encode()) for w in words)
            )
        except WriteFailed as exc:
            raise Unavailable(str(exc), reason="the words topic did not take the write") from exc
        return orjson.dumps(
            {
                "words": len(words),
                "written": [
                    {"word": w, "partition": p, "offset": o}
                    for w, (p, o) in zip(words, acks, strict=True)
                ],
            }
        )
