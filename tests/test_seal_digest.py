"""A seal's digest is computed faster than at first, and must stay the same bytes: every seal in
every home was made by the first definition, kept here as the reference."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from backfill_assets.control.seals import digest


def first_definition(table: str, rows: list[list[object]]) -> str:
    def value(v: object) -> object:
        return v if v is None or isinstance(v, bool | int) else str(v)

    normal = sorted(([value(v) for v in row] for row in rows), key=lambda r: json.dumps(r, default=str))
    return hashlib.sha256(json.dumps([table, normal], separators=(",", ":")).encode("utf-8")).hexdigest()


# what ledger rows hold: texts with commas, quotes, spaces and any character, numbers, flags, times
VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12),
                   st.sampled_from(["a", "a,", "a, b", '"', "\\", ",", " ", "é", "\u2028", "1"]),
                   st.decimals(allow_nan=False, allow_infinity=False), st.floats(allow_nan=False),
                   st.datetimes(timezones=st.just(dt.UTC)))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["writes", "gate_results", 'we"ird']),
       st.lists(st.lists(VALUES, min_size=0, max_size=5), max_size=8))
def test_the_digest_is_the_first_definitions_for_any_rows(table, rows):
    assert digest(table, rows) == first_definition(table, rows)


def test_rows_that_differ_right_after_a_comma_keep_their_order():
    rows = [["a", "b"], ["a,", "b"], ["a", " b"], [1, 2], [12], [1, Decimal("2.0")], [None, True], ["", ""]]
    for start in range(len(rows)):
        turned = rows[start:] + rows[:start]
        assert digest("writes", turned) == first_definition("writes", turned) == digest("writes", rows)
