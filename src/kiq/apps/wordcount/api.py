"""Word count (seed 001): POST words in, GET a word's count out.

POST /v1/words  {"word": "kafka"} or {"text": "..."}   → 202, where each word was written
GET  /v1/words/{word}                                   → {"word", "count"}, 404 if never seen
GET  /v1/words/top?n=10                                 → {"words": [{"word", "count"}, ...]}

Words are lowercased runs of letters, digits, ' and -; the Spark word-count pipeline
turns topic ``words`` into table ``word-counts``, ranked by ``count`` (the most frequent
words first, ties in word order, across every partition: ``Tables.top``).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

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
MAX_TOP = 1000
_WORD = re.compile(r"[\w'-]+")


def routes(app: Routes) -> None:
    app.post("/v1/words", post_words, POST_DOC)
    app.get("/v1/words/top", top_words, TOP_DOC)  # before {word}, which would take "top"
    app.get("/v1/words/{word}", word_count, COUNT_DOC)


# -- the routes' OpenAPI operations (GET /openapi.json) ------------------------------------

_TEXT = {"type": "string"}
_INT = {"type": "integer"}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(description, {"$ref": "#/components/schemas/Error"})


POST_DOC = {
    "summary": "Write words to the words topic, to be counted",
    "tags": ["words"],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"word": _TEXT, "text": _TEXT},
                    "description": '{"word": "..."} or {"text": "..."}',
                }
            }
        },
    },
    "responses": {
        "202": _json(
            "where each word was written",
            {
                "type": "object",
                "required": ["words", "written"],
                "properties": {
                    "words": _INT,
                    "written": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["word", "partition", "offset"],
                            "properties": {"word": _TEXT, "partition": _INT, "offset": _INT},
                        },
                    },
                },
            },
        ),
        "400": _error("not JSON, no word or text, no words in it, or too many"),
        "413": _error("a body over the node's limit"),
        "503": _error("Kafka did not take the words"),
    },
}
COUNT_DOC = {
    "summary": "How often a word was seen",
    "tags": ["words"],
    "parameters": [
        {
            "name": "word",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "minLength": 1},
        }
    ],
    "responses": {
        "200": _json(
            "the count (X-Kiq-* headers as a lookup)",
            {"type": "object", "properties": {"word": _TEXT, "count": _INT}},
        ),
        "400": _error("not one word"),
        "404": _error("never seen, or the cluster does not serve word-counts"),
        "503": _error("no replica could answer; retry shortly"),
    },
}


TOP_DOC = {
    "summary": "The most frequent words, across every partition",
    "tags": ["words"],
    "parameters": [
        {
            "name": "n",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TOP, "default": 10},
        }
    ],
    "responses": {
        "200": _json(
            "the n most frequent words, highest count first, ties in word order",
            {
                "type": "object",
                "required": ["words"],
                "properties": {
                    "words": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["word", "count"],
                            "properties": {"word": _TEXT, "count": _INT},
                        },
                    }
                },
            },
        ),
        "400": _error(f"n not from 1 to {MAX_TOP}"),
        "404": _error("the cluster does not serve word-counts"),
        "503": _error("a partition had no replica that could answer; retry shortly"),
    },
}


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


async def top_words(request: Request) -> Reply:
    if not request.tables.serves(COUNTS):
        raise UnknownTable(f"this cluster does not serve {COUNTS}", table=COUNTS)
    n = request.int_param("n", 1, MAX_TOP) or 10
    top = await request.tables.top(COUNTS, n)
    words = [
        {"word": word, "count": value["count"]}
        for word, value in zip(top.keys(), top.parsed(), strict=True)
    ]
    return json_reply({"words": words})


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
