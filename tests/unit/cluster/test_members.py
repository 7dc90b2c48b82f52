"""Node identity carried in a Kafka client.id: encode, decode, reject."""

from __future__ import annotations

import pytest

from kiq.cluster import Member, decode_client_id, encode_client_id
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
