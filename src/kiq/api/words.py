"""Word count (seed 001): POST words in, GET a word's count out.

POST /v1/words  {"word": "kafka"} or {"text": "..."}   → 202, where each word was written
GET  /v1/words/{word}                                   → {"word", "count"}, 404 if never seen

Words are lowercased runs of letters, digits, ' and -; the Spark word-count
pipeline turns topic ``words`` into table ``word-counts``.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson

from kiq import catalog
from kiq.api.asgi import Send
from kiq.api.errors import BadRequest, Unavailable, UnknownTable
from kiq.api.lookups import Lookups
from kiq.kafka.writer import AsyncProducer, ProduceFailed

WORDS_TOPIC = catalog.WORDS
COUNTS = catalog.WORD_COUNTS
MAX_WORDS = 10_000
_WORD = re.compile(r"[\w'-]+")


def split_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.strip("'-")]


class Words:
    def __init__(self, lookups: Lookups, bootstrap: str) -> None:
        self.lookups = lookups
        self.node = lookups.node
        self._bootstrap = bootstrap
        self._producer: AsyncProducer | None = None

    @property
    def enabled(self) -> bool:
        return COUNTS in self.node.tables

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()

    async def count(self, scope: dict[str, Any], send: Send, raw_word: str) -> None:
        if not self.enabled:
            raise UnknownTable(f"this cluster does not serve {COUNTS}", table=COUNTS)
        words = split_words(raw_word)
        if len(words) != 1:
            raise BadRequest(f"{raw_word!r} is not one word")
        await self.lookups.get(scope, send, COUNTS, words[0].encode())

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
        if self._producer is None:
            self._producer = AsyncProducer(self._bootstrap)
        try:
            acks = await asyncio.gather(
                *(self._producer.send(WORDS_TOPIC, w.encode(), w.encode()) for w in words)
            )
        except ProduceFailed as exc:
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
