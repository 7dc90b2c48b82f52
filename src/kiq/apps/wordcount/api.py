"""Word count (seed 001): POST words in, GET a word's count out.

POST /v1/words  {"word": "kafka"} or {"text": "..."}   → 202, where each word was written
GET  /v1/words/{word}                                   → {"word", "count"}, 404 if never seen

Words are lowercased runs of letters, digits, ' and -; the Spark word-count pipeline
turns topic ``words`` into table ``word-counts``.
"""

from __future__ import annotations

import asyncio
import re

from kiq import (
    BadRequest,
    Reply,
    Request,
    Routes,
    Unavailable,
    UnknownTable,
    WriteFailed,
    json_reply,
)

WORDS_TOPIC = "words"
COUNTS = "word-counts"
MAX_WORDS = 10_000
_WORD = re.compile(r"[\w'-]+")


def routes(app: Routes) -> None:
    app.post("/v1/words", post_words)
    app.get("/v1/words/{word}", word_count)


def split_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.strip("'-")]


async def word_count(request: Request) -> Reply:
    if not request.tables.serves(COUNTS):
        raise UnknownTable(f"this cluster does not serve {COUNTS}", table=COUNTS)
    raw = request.path_params["word"]
    words = split_words(raw)
    if len(words) != 1:
        raise BadRequest(f"{raw!r} is not one word")
    return request.lookup(COUNTS, words[0])


async def post_words(request: Request) -> Reply:
    data = await request.json('body must be JSON: {"word": "..."} or {"text": "..."}')
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
        acks = await asyncio.gather(*(request.write(WORDS_TOPIC, w, w) for w in words))
    except WriteFailed as exc:
        raise Unavailable(str(exc), reason="the words topic did not take the write") from exc
    written = [
        {"word": w, "partition": p, "offset": o} for w, (p, o) in zip(words, acks, strict=True)
    ]
    return json_reply({"words": len(words), "written": written}, status=202)
