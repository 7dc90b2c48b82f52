"""A property-based fuzz of the live API from its own OpenAPI document.

Two `kiq serve` processes against the real broker, serving a JSON table, a raw
table, the stock tables and the word counts, each holding a few records.
Schemathesis reads GET /openapi.json from one node and sends each operation
generated requests (valid and invalid): no answer may be a 5xx, and every answer
must match the document (status, content type, body schema).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from kiq.kafka import create_topics, delete_topics
from kiq.partitioning import partition_for
from kiq.runtime.broker import LocalBroker
from kiq.runtime.nodes import LocalNode
from tests.integration.kafka_io import produce

pytestmark = pytest.mark.integration

PARTITIONS = 4
WAITED = "min_offset not reached within wait_ms"
MAX_WAIT_MS = 200  # read-your-writes waits, shortened so that a run stays short


@schemathesis.check
def no_server_error(ctx: Any, response: Any, case: Any) -> None:
    """No 5xx, but for the documented 503 of a read-your-writes wait that ran out (a random
    min_offset is far beyond what the table holds): the cluster is healthy throughout."""
    if response.status_code < 500:
        return
    if response.status_code == 503:
        try:
            if json.loads(response.content).get("reason") == WAITED:
                return
        except ValueError:
            pass
    raise AssertionError(f"{response.status_code}: {response.content[:500]!r}")


# Per operation and mode (valid requests, then invalid ones); more: KIQ_FUZZ_EXAMPLES.
EXAMPLES = int(os.environ.get("KIQ_FUZZ_EXAMPLES", "25"))
CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
QUOTE = {
    "symbol": "AAPL",
    "exchanges": {"NYSE": {"bid": 189.0, "ask": 189.2, "bid_size": 1, "ask_size": 2, "ts": 1}},
    "best_bid": {"price": 189.0, "size": 1, "exchange": "NYSE"},
    "best_ask": {"price": 189.2, "size": 2, "exchange": "NYSE"},
    "last": {"price": 189.1, "size": 5, "exchange": "NYSE", "ts": 1795000000000},
    "updated_at": 1795000000000,
}


def _fill(bootstrap: str, suffix: str) -> list[str]:
    """Topics with a few records each; the --table arguments that serve them."""
    topics = {
        name: f"fuzz-{name}-{suffix}"
        for name in ("prices", "blobs", "quotes", "days", "bars", "counts")
    }
    create_topics(bootstrap, dict.fromkeys(topics.values(), PARTITIONS))
    create_topics(bootstrap, {"words": PARTITIONS})  # where POST /v1/words writes

    def by_prefix(key: str) -> int:
        return partition_for(key.split("|")[0], PARTITIONS)

    prices = [(s, json.dumps({"symbol": s, "px": i})) for i, s in enumerate(["A", "B", "C"])]
    produce(bootstrap, topics["prices"], prices)
    produce(bootstrap, topics["blobs"], [("blob", "\u00ff\u0000bytes")])
    produce(bootstrap, topics["quotes"], [("AAPL", json.dumps(QUOTE))])
    # Windowed keys, SYMBOL|START|END, as the stock pipeline writes them.
    day = {
        "symbol": "AAPL",
        "date": "2026-11-18",
        "open": 1.0,
        "high": 2.0,
        "low": 0.5,
        "volume": 9,
    }
    day_key = "AAPL|2026-11-18T00:00:00.000Z|2026-11-19T00:00:00.000Z"
    produce(bootstrap, topics["days"], [(day_key, json.dumps(day))], by_prefix)
    bars = [
        (
            f"AAPL|2026-11-18T14:{m:02d}:00.000Z|2026-11-18T14:{m + 1:02d}:00.000Z",
            json.dumps({"open": 1.0, "high": 2.0, "low": 0.5}),
        )
        for m in range(5)
    ]
    produce(bootstrap, topics["bars"], bars, by_prefix)
    produce(bootstrap, topics["counts"], [("kafka", json.dumps({"word": "kafka", "count": 3}))])
    return [
        f"prices={topics['prices']}",
        f"blobs={topics['blobs']},format=raw",
        f"stock-quotes={topics['quotes']}",
        # retention= makes a table windowed where no pipeline declares it (not ranked: a
        # /v1/stocks/top here is the documented 400)
        f"stock-day-stats={topics['days']},sep=|,retention=7 days",
        f"stock-bars-1m={topics['bars']},sep=|,retention=2 days",
        f"word-counts={topics['counts']}",
    ]


@pytest.fixture(scope="module")
def live(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two ready nodes; the URL of the first."""
    root = Path(tmp_path_factory.mktemp("fuzz"))
    suffix = uuid.uuid4().hex[:6]
    tables = _fill(broker.bootstrap, suffix)
    env = {
        "KIQ_SERVE_SESSION_TIMEOUT_MS": "3000",
        "KIQ_SERVE_VIEW_REFRESH_MS": "200",
        # An application of its own: the shipped table names on topics of its own, whatever
        # the shipped pipelines of other tests declared in the table catalog.
        "KIQ_APP_NAME": f"fuzz-{suffix}",
    }
    nodes = [
        LocalNode(
            node_id=f"f{i}",
            bootstrap=broker.bootstrap,
            tables=tables,
            data_dir=root / f"f{i}",
            log_file=root / f"f{i}.log",
            extra_args=["--cluster", f"fuzz-{suffix}"],
            env=env,
        )
        for i in (1, 2)
    ]
    try:
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_ready(90)
        url = nodes[0].url
        # Both nodes hold some partitions, so lookups are both local and forwarded.
        assert httpx.get(f"{url}/v1/tables/prices/keys/A").status_code == 200
        yield url
    finally:
        for node in nodes:
            node.stop()
        # The word endpoint's topic has a fixed name: the word-count test makes its own.
        delete_topics(broker.bootstrap, ["words"])


# Path parameters naming what the tables hold: random ones mostly find nothing (404), and
# the answers with data (200, their schemas, raw bytes, forwarding) must be fuzzed too.
KNOWN = [
    {"table": "prices", "key": "A"},
    {"table": "prices", "key": "C"},
    {"table": "blobs", "key": "blob"},
    {"table": "stock-bars-1m"},
    {"symbol": "AAPL"},
    {"word": "kafka"},
]


def _strategy(operation: Any, mode: GenerationMode) -> Any:
    """Generated requests; half of them, where the path has parameters, with known ones."""
    names = {p.name for p in operation.path_parameters}
    known = {tuple(sorted((k, v) for k, v in values.items() if k in names)) for values in KNOWN} - {
        ()
    }
    default = operation.as_strategy(generation_mode=mode)
    if known:
        fixed = [
            operation.as_strategy(generation_mode=mode, path_parameters=dict(v)) for v in known
        ]
        default = st.one_of(default, st.one_of(*fixed))
    return default.map(_short_wait)


def _short_wait(case: Any) -> Any:
    wait = (case.query or {}).get("wait_ms")
    if isinstance(wait, int) and wait > MAX_WAIT_MS:
        case.query["wait_ms"] = MAX_WAIT_MS
    return case


def _fuzz(operation: Any, mode: GenerationMode) -> None:
    @given(case=_strategy(operation, mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=CHECKS, timeout=30)

    check()


def _streams(operation: Any) -> bool:
    """Whether the operation answers with Server-Sent Events (a watch)."""
    ok = operation.definition.raw.get("responses", {}).get("200", {})
    return "text/event-stream" in ok.get("content", {})


def fuzz(url: str) -> list[str]:
    """Every operation of the document at ``url``, with valid and invalid requests; the
    failures, one line each."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if _streams(operation):
            continue  # an answer that never ends (tests/integration/test_watch.py has them)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _fuzz(operation, mode)
            except Unsatisfiable:
                pass  # nothing invalid to send: no parameters, or only path ones
            except Exception as exc:  # every operation is tried; all failures are reported
                failures.append(f"{operation.method.upper()} {operation.path} ({mode}): {exc}")
    return failures


def test_the_live_api_answers_as_its_document_says(live: str) -> None:
    failures = fuzz(live)
    assert not failures, "\n\n".join(failures)


if __name__ == "__main__":  # against nodes already running: python -m ... URL
    import sys

    print("\n\n".join(fuzz(sys.argv[1])) or "no failures")
