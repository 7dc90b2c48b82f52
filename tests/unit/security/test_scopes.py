"""The ``scope`` claim and what it grants."""

from __future__ import annotations

from kiq.security import Grants, read_scope


def test_kiq_read_reads_every_table():
    g = Grants.parse("kiq:read")
    assert g.may_read("kv") and g.may_read("stock-quotes")
    assert not g.write and not g.admin


def test_kiq_read_table_reads_that_table_only():
    g = Grants.parse("kiq:read:kv kiq:read:stock-quotes")
    assert g.may_read("kv") and g.may_read("stock-quotes")
    assert not g.may_read("other") and not g.may_read("")
    assert not g.read_all


def test_write_and_admin_are_their_own_scopes():
    g = Grants.parse("kiq:write kiq:admin")
    assert g.write and g.admin and not g.may_read("kv")


def test_unknown_and_malformed_scopes_grant_nothing():
    for claim in (None, 42, "", "read kiq:readers kiq:read: kiq:Read kiq:admins", {"a": 1}):
        g = Grants.parse(claim)
        assert g == Grants(), claim


def test_a_list_claim_is_read_too():
    assert Grants.parse(["kiq:read:kv", 3, "kiq:write"]) == Grants(
        read=frozenset({"kv"}), write=True
    )


def test_the_scope_a_refusal_names():
    assert read_scope("kv") == "kiq:read:kv"
