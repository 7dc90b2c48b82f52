"""The bank test (Jepsen's, on kiq): reads as of one micro-batch never see half a batch.

A consistent pipeline (``tests/integration/bank/pipeline.py``) keeps 1,000 accounts on 6
partitions from random transfers; a transfer's debit and credit are one input record, so
the balances sum to 0 at every batch boundary. Three nodes serve the table; one is
restarted and another stopped (SIGSTOP) while a reader loops for two minutes over
``multiget`` and ``range`` of every account with ``?consistent=batch``, entering through
each live node in turn: every answer must sum to 0. The same loop without it is shown to
see sums that are not 0, so the test can fail.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from kiq.client import Client, Unavailable
from kiq.kafka import create_topics, topic_partitions
from kiq.runtime.pipelines import LocalPipeline
from tests.integration.bank.feed import ACCOUNTS, account, feed
from tests.integration.bank.pipeline import INTERVAL, PARTITIONS
from tests.integration.test_serving import Cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PIPELINE = Path(__file__).parent / "bank" / "pipeline.py"
IDS = [account(i) for i in range(ACCOUNTS)]
BODY = orjson.dumps({"keys": IDS})
LOOP_S = 120.0
RESTART_AT_S, STOP_AT_S, STOPPED_S = 25.0, 65.0, 8.0


class Tally:
    """What the reader saw, by kind of read."""

    def __init__(self) -> None:
        self.answers: dict[str, int] = {}
        self.wrong: dict[str, list[tuple[int | None, int]]] = {}
        self.refused: dict[str, int] = {}
        self.batches: set[int] = set()

    def saw(self, kind: str, total: int, batch: int | None) -> None:
        self.answers[kind] = self.answers.get(kind, 0) + 1
        if total != 0:
            self.wrong.setdefault(kind, []).append((batch, total))
        if batch is not None:
            self.batches.add(batch)


def balances_total(kind: str, answer: dict) -> int:
    if kind.startswith("multiget"):
        return sum(v["balance"] for v in answer["found"].values())
    return sum(item["value"]["balance"] for item in answer["items"])


def read_once(client: httpx.Client, url: str, kind: str, tally: Tally) -> None:
    consistent = kind.endswith("batch")
    params = {"consistent": "batch"} if consistent else {}
    try:
        if kind.startswith("multiget"):
            resp = client.post(f"{url}/v1/tables/accounts/multiget", params=params, content=BODY)
        else:
            params["limit"] = str(ACCOUNTS)
            resp = client.get(f"{url}/v1/tables/accounts/range", params=params)
    except httpx.HTTPError:
        tally.refused[kind] = tally.refused.get(kind, 0) + 1  # the node entered is stopped
        return
    if resp.status_code == 503:  # no batch every partition holds yet: ask again
        assert resp.headers.get("retry-after"), resp.text
        tally.refused[kind] = tally.refused.get(kind, 0) + 1
        return
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    if kind.startswith("range"):
        assert answer["next_cursor"] is None or len(answer["items"]) == ACCOUNTS
    batch = answer.get("batch")
    if consistent:
        assert batch is not None and resp.headers["x-kiq-batch"] == str(batch), answer
        if kind.startswith("multiget"):
            assert not answer.get("unavailable"), answer
    tally.saw(kind, balances_total(kind, answer), batch)


def test_reads_as_of_a_batch_never_see_half_a_transfer(bootstrap: str, tmp_path: Path) -> None:
    create_topics(bootstrap, {"transfers": PARTITIONS})
    pipeline = LocalPipeline(
        (f"{PIPELINE}:build",),
        bootstrap,
        tmp_path / "checkpoints",
        tmp_path / "pipeline.log",
        trigger="microbatch",
        partitions=PARTITIONS,
        extra_args=["--interval", INTERVAL],
    )
    cluster = Cluster(bootstrap, tmp_path, ["accounts=accounts"])
    fed: list[int] = []
    feeding = threading.Thread(
        target=lambda: fed.append(
            len(feed(bootstrap, count=200 * 200, rate=200, max_seconds=LOOP_S + 90))
        ),
        daemon=True,
    )
    tally = Tally()
    try:
        pipeline.start()
        feeding.start()
        _until_topic(bootstrap, pipeline)
        for i in (1, 2, 3):
            cluster.add(f"n{i}")
        cluster.wait_ready(timeout_s=180)
        nodes = list(cluster.nodes.values())
        reader = Client([n.url for n in nodes], timeout_s=5)
        with httpx.Client(timeout=5) as client, reader:
            _until_batches(client, nodes[0].url, pipeline)
            began = time.monotonic()
            restarted = stopped = False
            stopped_node = None
            i = 0
            while (elapsed := time.monotonic() - began) < LOOP_S:
                if not restarted and elapsed > RESTART_AT_S:
                    nodes[1].stop()
                    nodes[1].start()
                    restarted = True
                if not stopped and elapsed > STOP_AT_S:
                    stopped_node = nodes[2]
                    assert stopped_node.proc is not None
                    os.kill(stopped_node.proc.pid, signal.SIGSTOP)
                    stopped, stopped_at = True, time.monotonic()
                if stopped_node is not None and time.monotonic() - stopped_at > STOPPED_S:
                    assert stopped_node.proc is not None
                    os.kill(stopped_node.proc.pid, signal.SIGCONT)
                    stopped_node = None
                live = [n for n in nodes if n.running and n is not stopped_node]
                url = live[i % len(live)].url
                for kind in ("multiget-batch", "range-batch", "multiget-plain"):
                    read_once(client, url, kind, tally)
                if i % 10 == 0:  # kiq.client, every key in one request as of one batch
                    try:
                        many = reader.multiget("accounts", IDS, consistent="batch")
                    except Unavailable:
                        tally.refused["client-batch"] = tally.refused.get("client-batch", 0) + 1
                    else:
                        total = sum(v["balance"] for v in many.found.values())
                        assert many.batch is not None and not many.unavailable
                        tally.saw("client-batch", total, many.batch)
                i += 1
            if stopped_node is not None and stopped_node.proc is not None:
                os.kill(stopped_node.proc.pid, signal.SIGCONT)
        assert pipeline.running, pipeline.stopped()
    finally:
        for node in cluster.nodes.values():
            if node.proc is not None and node.running:
                os.kill(node.proc.pid, signal.SIGCONT)
        pipeline.stop()
        cluster.shutdown()
        feeding.join(5)
    summary = (
        f"answers={tally.answers} wrong={ {k: len(v) for k, v in tally.wrong.items()} } "
        f"refused={tally.refused} batches={len(tally.batches)}"
    )
    print(summary)
    assert tally.answers.get("multiget-batch", 0) >= 100, summary
    assert tally.answers.get("range-batch", 0) >= 100, summary
    assert tally.answers.get("client-batch", 0) >= 10, summary
    batch_kinds = ("multiget-batch", "range-batch", "client-batch")
    assert not any(tally.wrong.get(k) for k in batch_kinds), (
        f"reads as of a batch saw half a batch: {tally.wrong}"
    )
    assert len(tally.batches) >= 30, summary  # the answers moved on with the pipeline
    # The same loop without ?consistent=batch sees half batches: the test can fail.
    assert tally.wrong.get("multiget-plain"), f"plain reads never saw half a batch: {summary}"


def _until_topic(bootstrap: str, pipeline: LocalPipeline) -> None:
    """Until the pipeline made the table's topic (nodes serve only a topic that exists)."""
    deadline = time.monotonic() + 180
    while topic_partitions(bootstrap, "accounts") != PARTITIONS:
        assert pipeline.running, pipeline.stopped()
        assert time.monotonic() < deadline, "the pipeline did not create accounts"
        time.sleep(0.5)


def _until_batches(client: httpx.Client, url: str, pipeline: LocalPipeline) -> None:
    """Until the table answers as of a batch (the pipeline's first markers are in)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert pipeline.running, pipeline.stopped()
        resp = client.post(
            f"{url}/v1/tables/accounts/multiget", params={"consistent": "batch"}, content=BODY
        )
        if resp.status_code == 200 and resp.json().get("batch") is not None:
            return
        time.sleep(1)
    raise AssertionError("no answer as of a batch within 240 s: are markers written?")
