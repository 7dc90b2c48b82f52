"""``consistent`` in a table's catalog record: recorded, read back, shown by ``GET /v1/tables``,
False in a record written before it was recorded, and a change of it is compatible."""

from __future__ import annotations

import msgspec

from kiq.api.bodies import Declaration
from kiq.tables.compatible import compatible_changes, incompatible
from kiq.tables.declared import Declared, declared_fields, decode_catalog

ACCOUNTS = Declared(
    table="accounts", topic="accounts", key=("account",), partitions=6, pipeline="bank"
)


def _read(value: bytes) -> Declared | None:
    return decode_catalog({ACCOUNTS.catalog_key: value}).get("accounts")


def test_a_consistent_table_is_recorded_and_read_back():
    marked = msgspec.structs.replace(ACCOUNTS, consistent=True)
    assert b'"consistent":true' in marked.encode()
    assert _read(marked.encode()) == marked
    assert _read(ACCOUNTS.encode()) == ACCOUNTS and not ACCOUNTS.consistent


def test_a_record_from_before_consistent_reads_as_not_consistent():
    old = msgspec.json.decode(ACCOUNTS.encode())
    del old["consistent"]
    read = _read(msgspec.json.encode(old))
    assert read is not None and read.consistent is False


def test_a_record_whose_consistent_is_not_a_boolean_is_refused():
    bad = msgspec.json.decode(ACCOUNTS.encode())
    bad["consistent"] = "yes"
    assert _read(msgspec.json.encode(bad)) is None


def test_get_tables_shows_it_beside_rank_by():
    marked = msgspec.structs.replace(ACCOUNTS, consistent=True)
    fields = declared_fields(marked)
    assert fields["consistent"] is True and declared_fields(ACCOUNTS)["consistent"] is False
    shown = msgspec.convert(fields, Declaration)  # the schema GET /v1/tables documents
    assert shown.consistent is True


def test_turning_it_on_or_off_is_a_compatible_change_that_is_logged():
    marked = msgspec.structs.replace(ACCOUNTS, consistent=True)
    assert incompatible(ACCOUNTS, marked) == []
    assert compatible_changes(ACCOUNTS, marked) == ["consistent: False → True"]
