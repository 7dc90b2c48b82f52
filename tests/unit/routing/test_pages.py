"""PageCache: a made page answered again only while its replica is as it was read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kiq.replicas.aging import Aging
from kiq.routing.pages import ENTRY_BYTES, MadePage, PageCache, mark_of


def _replica(position: int = 10, aging: Aging | None = None) -> Any:
    return SimpleNamespace(store=object(), position=position, aging=aging)


def _page(size: int = 10) -> MadePage:
    return MadePage(b"x" * size, 1, b"k")


def test_a_page_is_answered_again_while_nothing_was_applied() -> None:
    cache, replica = PageCache(100_000), _replica()
    assert cache.get(replica, "a", mark_of(replica)) is None
    cache.put(replica, replica.store, mark_of(replica), "a", _page())
    assert cache.get(replica, "a", mark_of(replica)) == _page()
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_record_applied_a_store_reopened_or_another_replica_is_a_miss() -> None:
    cache, replica = PageCache(100_000), _replica()
    cache.put(replica, replica.store, mark_of(replica), "a", _page())
    replica.position += 1
    assert cache.get(replica, "a", mark_of(replica)) is None
    cache.put(replica, replica.store, mark_of(replica), "a", _page())
    replica.store = object()  # reopened after a refused write, or replaced by a restore
    assert cache.get(replica, "a", mark_of(replica)) is None
    cache.put(replica, replica.store, mark_of(replica), "a", _page())
    other = _replica(replica.position)
    other.store = replica.store
    assert cache.get(other, "a", mark_of(other)) is None
    assert cache.get(replica, "a", mark_of(replica)) is not None


def test_a_page_read_before_the_store_changed_is_not_kept_for_the_new_store() -> None:
    cache, replica = PageCache(100_000), _replica()
    store, mark = replica.store, mark_of(replica)
    replica.store = object()  # reopened while the page was read
    cache.put(replica, store, mark, "a", _page())
    assert cache.get(replica, "a", mark_of(replica)) is None


def test_a_key_aging_out_with_no_record_applied_is_a_miss() -> None:
    aging = Aging(None, "|")
    cache, replica = PageCache(100_000), _replica(aging=aging)
    cache.put(replica, replica.store, mark_of(replica), "a", _page())
    assert cache.get(replica, "a", mark_of(replica)) is not None
    aging.raise_below(5)  # the TTL cutoff moved: rows written below it are gone
    assert cache.get(replica, "a", mark_of(replica)) is None


def test_pages_are_kept_within_their_bytes_least_recent_dropped_first() -> None:
    entry = ENTRY_BYTES + 1 + 25  # overhead, the last key b"k", the body
    cache, replica = PageCache(4 * entry), _replica()
    mark = mark_of(replica)
    for key in "abc":
        cache.put(replica, replica.store, mark, key, _page(25))
    assert cache.get(replica, "a", mark) is not None  # a is now the most recent
    cache.put(replica, replica.store, mark, "d", _page(25))
    cache.put(replica, replica.store, mark, "e", _page(25))
    assert cache.size == 4 * entry and len(cache) == 4
    assert cache.get(replica, "b", mark) is None
    assert all(cache.get(replica, key, mark) is not None for key in "acde")
    cache.put(replica, replica.store, mark, "big", _page(entry))  # over a quarter: not kept
    assert cache.get(replica, "big", mark) is None and len(cache) == 4
    cache.put(replica, replica.store, mark, "a", _page(5))  # replaced: its bytes recounted
    assert cache.size == 4 * entry - 20


def test_an_empty_page_counts_what_its_entry_holds() -> None:
    # A flood of asks for keys with no windows: each a two-byte page, each counted whole.
    cache, replica = PageCache(100 * ENTRY_BYTES), _replica()
    mark = mark_of(replica)
    for i in range(1000):
        key = ("w", 0, b"E%05d|" % i, b"E%05d}" % i, 100, False)
        cache.put(replica, replica.store, mark, key, MadePage(b"[]", 0, b""))
    assert len(cache) < 100 and cache.size <= 100 * ENTRY_BYTES


def test_nothing_is_kept_at_zero_bytes() -> None:
    cache, replica = PageCache(0), _replica()
    cache.put(replica, replica.store, mark_of(replica), "a", _page(1))
    assert cache.get(replica, "a", mark_of(replica)) is None and len(cache) == 0
