"""Quotas per tenant (api/tenants.py): who a request counts against, and each quota."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from kiq.api.limits import REGIONS, count_node_wide
from kiq.api.node_buckets import BucketTable
from kiq.api.tenants import REQUEST, SCAN, WATCH, QuotaExceeded, Tenants, gate_lookups, kind_of
from kiq.metrics import NodeMetrics, RouteStats
from kiq.settings import LimitsSettings, TenantLimits, TenantQuota, load


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def token(**claims: object) -> bytes:
    """A token as the node sees it after verifying it: only its payload is read here."""
    payload = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=")
    return b"Bearer e30." + payload + b".sig"


def scope(subject: str | None = None, authorization: bytes | None = None) -> dict[str, object]:
    headers = [(b"authorization", authorization)] if authorization else []
    out: dict[str, object] = {"client": ("10.0.0.7", 5000), "headers": headers}
    if subject is not None:
        out["kiq.subject"] = subject
    return out


def test_a_tenant_is_the_claim_else_the_subject_else_the_address() -> None:
    by_org = Tenants(TenantLimits(claim="org", rate=10))
    assert by_org.tenant_of(scope()) == "10.0.0.7"
    assert by_org.tenant_of(scope("alice", token(sub="alice", org="acme"))) == "acme"
    assert by_org.tenant_of(scope("bob", token(sub="bob", org="acme"))) == "acme"
    assert by_org.tenant_of(scope("carol", token(sub="carol"))) == "carol"
    assert by_org.tenant_of(scope("dave", token(sub="dave", org=42))) == "42"
    assert by_org.tenant_of(scope("erin", token(sub="erin", org=["x"]))) == "erin"
    assert by_org.tenant_of(scope("peer-vouched")) == "peer-vouched"  # no token: a statement
    by_sub = Tenants(TenantLimits(rate=10))
    assert by_sub.tenant_of(scope("alice", token(sub="alice", org="acme"))) == "alice"


def test_a_tenant_past_its_rate_is_refused_and_another_is_not() -> None:
    clock = Clock()
    limits = TenantLimits(rate=2, burst=3, quotas={"big": TenantQuota(rate=100)})
    metrics = NodeMetrics()
    tenants = Tenants(limits, metrics, clock=clock)
    for _ in range(3):
        tenants.admit("noisy", REQUEST)
    with pytest.raises(QuotaExceeded) as refused:
        tenants.admit("noisy", REQUEST)
    assert refused.value.status == 429
    assert dict(refused.value.headers)[b"retry-after"] == b"1"
    assert "rate" in str(refused.value) and "noisy" in str(refused.value)
    tenants.admit("quiet", REQUEST)  # its own bucket
    for _ in range(50):
        tenants.admit("big", REQUEST)  # its own quota
    clock.now += 0.5  # one token back at 2/s
    tenants.admit("noisy", REQUEST)
    with pytest.raises(QuotaExceeded):
        tenants.admit("noisy", REQUEST)
    refusals = metrics.registry.get_sample_value(
        "kiq_tenant_refused_total", {"tenant": "noisy", "quota": "rate"}
    )
    assert refusals == 2
    assert metrics.registry.get_sample_value("kiq_tenant_requests_total", {"tenant": "big"}) == 50


def test_scans_and_watches_at_once_are_capped_and_given_back() -> None:
    tenants = Tenants(TenantLimits(scans=2, watches=1))
    held = [tenants.admit("t", SCAN), tenants.admit("t", SCAN)]
    with pytest.raises(QuotaExceeded, match="scans"):
        tenants.admit("t", SCAN)
    tenants.admit("t", REQUEST)  # a lookup is not a scan
    tenants.admit("u", SCAN)
    tenants.done("t", SCAN, held[0], 0)
    tenants.admit("t", SCAN)
    watch = tenants.admit("t", WATCH)
    with pytest.raises(QuotaExceeded, match="watches"):
        tenants.admit("t", WATCH)
    tenants.done("t", WATCH, watch, 0)
    tenants.admit("t", WATCH)


def test_bytes_past_a_seconds_worth_are_refused_until_paid_back() -> None:
    clock = Clock()
    tenants = Tenants(TenantLimits(bytes_rate=1000), clock=clock)
    quota = tenants.admit("t", REQUEST)
    tenants.done("t", REQUEST, quota, 900)  # 0.9 s of its rate: within the second's grace
    tenants.admit("t", REQUEST)
    tenants.done("t", REQUEST, quota, 1500)  # 2.4 s owed
    with pytest.raises(QuotaExceeded, match="bytes_rate") as refused:
        tenants.admit("t", REQUEST)
    assert dict(refused.value.headers)[b"retry-after"] == b"2"  # 1.4 s, rounded up
    tenants.admit("other", REQUEST)
    clock.now += 1.5
    tenants.admit("t", REQUEST)


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[BucketTable]:
    table = BucketTable.create(tmp_path / "limits", clients=64, regions=REGIONS)
    count_node_wide(table)
    try:
        yield table
    finally:
        count_node_wide(None)
        table.close()


def test_every_process_of_a_node_counts_in_one_table(shared: BucketTable) -> None:
    clock = Clock()
    limits = TenantLimits(rate=1, burst=3, scans=1, bytes_rate=100)
    home = Tenants(limits, clock=clock)
    count_node_wide(BucketTable.attach(shared.path))  # a read worker's own mapping
    worker = Tenants(limits, clock=clock)
    home.admit("t", REQUEST)
    worker.admit("t", REQUEST)
    home.admit("t", REQUEST)
    with pytest.raises(QuotaExceeded, match="rate"):
        worker.admit("t", REQUEST)
    clock.now += 10
    scan = home.admit("t", SCAN)
    with pytest.raises(QuotaExceeded, match="scans"):
        worker.admit("t", SCAN)
    home.done("t", SCAN, scan, 250)  # 2.5 s of bytes owed, charged node-wide
    with pytest.raises(QuotaExceeded, match="bytes_rate"):
        worker.admit("t", REQUEST)
    clock.now += 2
    worker.admit("t", SCAN)


def test_kinds_of_routes() -> None:
    assert kind_of("/v1/tables/{table}/range") == SCAN
    assert kind_of("/v1/tables/{table}/top") == SCAN
    assert kind_of("/v1/tables/{table}/keys/{key}/windows") == SCAN
    assert kind_of("/v1/tables/{table}/by/{field}/{value:path}") == SCAN
    assert kind_of("/v1/tables/{table}/keys/{key}/watch") == WATCH
    assert kind_of("/v1/tables/{table}/watch") == WATCH
    assert kind_of("/v1/tables/{table}/multiget") == REQUEST
    assert kind_of("/v1/stocks/{symbol}") == REQUEST


def test_quotas_come_from_the_toml_file(tmp_path: Path) -> None:
    config = tmp_path / "kiq.toml"
    config.write_text(
        "[limits.tenants]\nclaim = 'org'\nrate = 100\nscans = 4\n"
        "[limits.tenants.quotas.acme]\nrate = 1000\n"
    )
    limits = load(LimitsSettings, config).tenants
    assert (limits.claim, limits.rate, limits.scans) == ("org", 100, 4)
    assert limits.quotas["acme"].rate == 1000 and limits.quotas["acme"].scans is None
    assert limits.enabled and not TenantLimits().enabled
    assert Tenants.of(TenantLimits(), None, authenticated=False) is None


def test_the_lookup_path_counts_an_answers_bytes_and_refuses_past_them() -> None:
    clock = Clock()
    tenants = Tenants(TenantLimits(bytes_rate=100), clock=clock)
    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    async def get(scope: dict[str, object], out, table: str, key: bytes) -> None:
        await out({"type": "http.response.start", "status": 200, "headers": []})
        await out({"type": "http.response.body", "body": b"x" * 250})

    stats = RouteStats()
    gated = gate_lookups(tenants, get, stats)
    asyncio.run(gated(scope(), send, "t", b"k"))  # 250 bytes: 2.5 s of its rate
    assert sent[-1]["body"] == b"x" * 250
    asyncio.run(gated(scope(), send, "t", b"k"))
    assert sent[-2]["status"] == 429 and b"tenant_quota" in sent[-1]["body"]  # type: ignore[operator]
    assert stats.statuses == {429: 1}  # its refusals counted as the path's (its answers are get's)
    clock.now += 2
    asyncio.run(gated(scope(), send, "t", b"k"))
    assert sent[-1]["body"] == b"x" * 250
