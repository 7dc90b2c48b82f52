"""Node identity carried in a Kafka client.id: encode, decode, reject."""

from __future__ import annotations

import pytest

from kiq.cluster import Member, admitted, decode_client_id, encode_client_id
from kiq.errors import ConfigError


@pytest.mark.parametrize(
    ("node_id", "url"),
    [
        ("n1", "http://10.0.0.1:8080"),
        ("node-A.b_c", "https://kiq.example:443"),
        ("x" * 64, "http://[::1]:9000"),
    ],
)
def test_round_trip(node_id: str, url: str):
    assert decode_client_id(encode_client_id(node_id, url)) == Member(node_id, url)


def test_trailing_slash_is_dropped():
    client_id = encode_client_id("n1", "http://h:1///")
    assert decode_client_id(client_id) == Member("n1", "http://h:1")


@pytest.mark.parametrize("node_id", ["", "x" * 65, "a b", "a|b", "é", "a/b", "n1\n"])
def test_bad_node_id_is_a_config_error(node_id: str):
    with pytest.raises(ConfigError, match="node id"):
        encode_client_id(node_id, "http://h:1")


@pytest.mark.parametrize("url", ["", "h:1", "ftp://h:1", "HTTP//h", "http://h:1/a|b"])
def test_bad_url_is_a_config_error(url: str):
    with pytest.raises(ConfigError, match="URL"):
        encode_client_id("n1", url)


@pytest.mark.parametrize(
    "client_id",
    [
        "",
        "rdkafka",
        "kiq",
        "kiq|n1",
        "other|n1|http://h:1",
        "KIQ|n1|http://h:1",
        "kiq|bad id|http://h:1",
        "kiq||http://h:1",
        "kiq|n1|http://h:1|extra",
    ],
)
def test_foreign_client_ids_decode_to_none(client_id: str):
    assert decode_client_id(client_id) is None


def test_members_order_by_node_id():
    assert sorted([Member("b", "http://b"), Member("a", "http://z")])[0].node_id == "a"


ME = Member("n1", "http://10.0.0.1:8080")


def test_every_distinct_member_is_admitted_this_node_first():
    kept, refused = admitted(ME, [Member("n2", "http://10.0.0.2:8080"), ME])
    assert kept == [ME, Member("n2", "http://10.0.0.2:8080")] and refused == []


def test_a_node_id_claimed_at_two_urls_is_refused_both_times():
    claims = [Member("n2", "http://10.0.0.2:8080"), Member("n2", "http://elsewhere:9999")]
    kept, refused = admitted(ME, [ME, *claims])
    assert kept == [ME]
    assert refused == [
        "node id n2 claimed by several members: http://10.0.0.2:8080, http://elsewhere:9999"
    ]


def test_this_nodes_own_id_claimed_elsewhere_keeps_this_node():
    kept, refused = admitted(ME, [ME, Member("n1", "http://elsewhere:9999")])
    assert kept == [ME] and "http://elsewhere:9999" in refused[0]


def test_a_plain_http_member_in_a_tls_cluster_is_refused():
    me = Member("n1", "https://n1:8443")
    kept, refused = admitted(
        me, [me, Member("n2", "http://n2:8080"), Member("n3", "https://n3:8443")]
    )
    assert kept == [me, Member("n3", "https://n3:8443")]
    assert refused == ["node n2 at http://n2:8080: plain http in a cluster that uses TLS"]
