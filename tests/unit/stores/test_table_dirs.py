"""Where a table's stores live, and what deleting them may touch: only a directory strictly
inside ``data_dir/tables`` named by a table's name, made readable by the node's user alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiq.errors import KiqError
from kiq.stores import (
    MemoryBudget,
    internal_name_ok,
    open_partition_store,
    private_dir,
    remove_table_stores,
    table_dir,
)
from kiq.tables import checks

PATHS = ["/abs/outside", "..", ".", "../outside", "a/b", "a\\b", "x\x00", "", "..@v2", "t@../x"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A data dir with a table's stores, and a directory beside it that must survive."""
    data_dir = tmp_path / "node"
    (data_dir / "tables" / "totals@v2" / "0").mkdir(parents=True)
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    return data_dir, outside


@pytest.mark.parametrize("name", PATHS)
def test_a_name_that_is_a_path_names_no_store_and_deletes_nothing(
    layout: tuple[Path, Path], name: str
):
    data_dir, outside = layout
    with pytest.raises(KiqError, match="is not a table name"):
        table_dir(data_dir, name)
    assert remove_table_stores(data_dir, name) is False
    assert remove_table_stores(data_dir, str(outside)) is False
    assert (outside / "keep").is_dir() and (data_dir / "tables" / "totals@v2" / "0").is_dir()


def test_a_tables_stores_are_deleted_and_nothing_else(layout: tuple[Path, Path]):
    data_dir, outside = layout
    assert remove_table_stores(data_dir, "totals@v2") is True
    assert not (data_dir / "tables" / "totals@v2").exists()
    assert remove_table_stores(data_dir, "totals@v2") is False  # gone already
    assert (outside / "keep").is_dir() and (data_dir / "tables").is_dir()


def test_a_link_in_tables_is_never_followed_out(layout: tuple[Path, Path]):
    data_dir, outside = layout
    (data_dir / "tables" / "linked").symlink_to(outside, target_is_directory=True)
    assert remove_table_stores(data_dir, "linked") is False
    # tables itself a link elsewhere: its entries are not strictly inside data_dir/tables
    elsewhere = data_dir.parent / "elsewhere"
    (elsewhere / "t").mkdir(parents=True)
    other = data_dir.parent / "other-node"
    other.mkdir()
    (other / "tables").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "inner").symlink_to(outside, target_is_directory=True)
    assert remove_table_stores(other, "inner") is False
    assert (outside / "keep").is_dir()


def test_stores_are_made_readable_by_the_nodes_user_alone(tmp_path: Path):
    data_dir = tmp_path / "fresh" / "node"
    store = open_partition_store("rocksdb", data_dir, "totals", 0, MemoryBudget())
    try:
        for path in (data_dir, data_dir / "tables", data_dir / "tables" / "totals"):
            assert mode(path) == 0o700, path
    finally:
        store.close()
    # A data dir that was there is left as it is; kiq's own directories are made 0700 again.
    given_dir = tmp_path / "given"
    (given_dir / "tables" / "t").mkdir(parents=True)
    for path in (given_dir, given_dir / "tables", given_dir / "tables" / "t"):
        os.chmod(path, 0o755)
    store = open_partition_store("rocksdb", given_dir, "t", 0, MemoryBudget())
    store.close()
    assert mode(given_dir) == 0o755
    assert mode(given_dir / "tables") == mode(given_dir / "tables" / "t") == 0o700
    assert private_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=12),
        st.text(alphabet="a.@/v2-_\\", max_size=12),
        st.sampled_from(PATHS),
    )
)
def test_the_stores_rule_is_the_catalogs_rule(name: str):
    # kiq.stores keeps its own copy of the table-name rule (it sits beside kiq.tables).
    assert internal_name_ok(name) == checks.internal_name_ok(name)
