from __future__ import annotations

import pytest

from kiq.feeds import FIELDS, InvalidTick, validate
from tests.unit.feeds.samples import TRADE

GOOD = dict(TRADE)


def test_a_good_tick_comes_back_in_contract_order():
    shuffled = dict(reversed(GOOD.items()))
    assert list(validate(shuffled)) == list(FIELDS)
    assert validate(shuffled) == GOOD


def test_a_tick_without_a_trade_has_null_last_fields():
    quote = {**GOOD, "last": None, "last_size": None}
    assert validate(quote)["last"] is None
    missing = {k: v for k, v in GOOD.items() if k not in ("last", "last_size")}
    assert validate(missing) == quote


def test_integer_prices_become_floats():
    assert validate({**GOOD, "bid": 189, "ask": 190, "last": 190})["bid"] == 189.0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"bid": 189.2}, "above ask"),
        ({"bid": 0}, "bid must be positive"),
        ({"ask": -1.0}, "ask must be positive"),
        ({"last": float("nan")}, "last must be positive"),
        ({"bid": "189.12"}, "bid must be a number"),
        ({"bid_size": 0}, "bid_size must be positive"),
        ({"ask_size": 100.0}, "ask_size must be an integer"),
        ({"last_size": True}, "last_size must be an integer"),
        ({"last_size": None}, "both"),
        ({"symbol": "aapl"}, "symbol must match"),
        ({"symbol": "A" * 13}, "symbol must match"),
        ({"exchange": ""}, "exchange must match"),
        ({"exchange": "nyse"}, "exchange must match"),
        ({"ts": -5}, "ts must fall in 2000-2049"),
        ({"ts": 946_684_799_999}, "ts must fall in 2000-2049"),
        ({"ts": 2_524_608_000_000}, "ts must fall in 2000-2049"),
        ({"ts": 1.5}, "ts must be epoch milliseconds"),
        ({"venue": "X"}, "unknown field"),
        ({"ask": None}, "missing field(s): ask"),
    ],
)
def test_contract_violations_say_what_is_wrong(change, reason):
    with pytest.raises(InvalidTick) as info:
        validate({**GOOD, **change})
    assert reason in info.value.reason
