"""How a target's Dagster partitions map onto its partition column.

Keys always come from the partitions definition itself; this module only says which rows of the
table belong to a key. Two shapes cover what Dagster offers:

- equality: the column holds the key's value (daily partitions on a DATE column, the day;
  static partitions, the key itself);
- range: the column falls in the key's time window `[start, end)` (hourly, weekly, monthly, and
  any time window with an offset or a time zone). DATE columns take the window's dates; TIMESTAMP
  columns its wall-clock times in the definition's time zone; TIMESTAMPTZ columns aware times.

A table's SQL sees `$partition` (the key's value, or its window start), and `$partition_start` /
`$partition_end` (the window, end exclusive).
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from backfill_assets.errors import WindowError

# A `$partition*` parameter of select_sql, found outside string literals, quoted identifiers and
# comments (which neither engine binds): only group 1 is a parameter's name.
_PARAM_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|\$(partition(?:_start|_end)?)\b",
                          re.DOTALL)


def partition_params(sql: str) -> list[str]:
    """The `$partition*` parameters `sql` binds, in first-use order."""
    return list(dict.fromkeys(m.group(1) for m in _PARAM_TOKEN.finditer(sql) if m.group(1)))


def rename_partition_params(sql: str, suffix: str) -> str:
    """`sql` with each `$partition*` parameter renamed `$<name><suffix>` (literals untouched)."""
    return _PARAM_TOKEN.sub(lambda m: f"${m.group(1)}{suffix}" if m.group(1) else m.group(0), sql)


@dataclass(frozen=True)
class PartitionScheme:
    """Rows of a key: `column = value` (equality) or `lo <= column < hi` (range)."""

    kind: str  # "equality" | "range"
    resolve: Callable[[str], tuple[Any, Any]]  # key -> (value or lo, hi)
    ordered_keys: tuple[str, ...]
    description: str
    _position: dict[str, int] = field(init=False, repr=False, compare=False)
    _cache: dict[str, tuple[Any, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_position", {k: i for i, k in enumerate(self.ordered_keys)})
        object.__setattr__(self, "_cache", {})

    def __contains__(self, key: object) -> bool:
        return key in self._position

    def position(self, key: str) -> int:
        """The key's place in the definition's order (-1 when it is not a key)."""
        return self._position.get(key, -1)

    def window(self, first: str, last: str) -> list[str]:
        """The keys from `first` to `last` inclusive, in the definition's order."""
        for key in (first, last):
            if key not in self._position:
                raise WindowError(
                    f"{key!r} is not a partition key of {self.description}",
                    fix=f"use keys between {self.ordered_keys[0]} and {self.ordered_keys[-1]}"
                    if self.ordered_keys else "the target has no partitions yet")
        start, end = self._position[first], self._position[last]
        if start > end:
            raise WindowError(f"window {first}..{last} runs backwards in {self.description}",
                              fix="swap start and end")
        return list(self.ordered_keys[start:end + 1])

    def value(self, key: str) -> Any:
        """What `$partition` is bound to: the key's value (equality) or its window start."""
        return self._bounds(key)[0]

    def params_for(self, sql: str, key: str) -> dict[str, Any]:
        """The `$partition*` parameters `sql` uses, bound for `key`."""
        lo, hi = self._bounds(key)
        available = {"partition": lo, "partition_start": lo, "partition_end": hi}
        return {name: available[name] for name in partition_params(sql)}

    def bounds(self, key: str) -> tuple[Any, Any]:
        """(value, None) for equality schemes, (start, end) of the window for range schemes."""
        lo, hi = self._bounds(key)
        return (lo, None) if self.kind == "equality" else (lo, hi)

    def span(self, key: str) -> tuple[Any, Any]:
        """The column values of `key`'s rows: `[lo, hi)` for a time window (a DATE column's daily
        key too), `(value, None)` for a static key; dates as midnights, so DATE and TIMESTAMP
        spans compare."""
        lo, hi = self._bounds(key)
        return _comparable(lo), _comparable(hi)

    def overlapping(self, lo: Any, hi: Any) -> list[str]:
        """The keys of a time-window scheme whose rows fall in `[lo, hi)` (values as `span` gives)."""
        keys = self.ordered_keys
        first = max(bisect.bisect_right(keys, lo, key=lambda k: self.span(k)[0]) - 1, 0)
        out = []
        for key in keys[first:]:
            start, end = self.span(key)
            if start >= hi:
                break
            if end > lo:
                out.append(key)
        return out

    def predicate_params(self, key: str) -> list[Any]:
        lo, hi = self._bounds(key)
        return [lo] if self.kind == "equality" else [lo, hi]

    def runs(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        """`keys` grouped into (first, last) runs of consecutive keys of the definition whose
        windows touch: one range `[start of first, end of last)` then holds the rows of its keys
        and no other's (a definition's `exclusions` leave gaps between consecutive keys)."""
        index = self._position
        out: list[tuple[str, str]] = []
        for key in sorted(keys, key=index.__getitem__):
            if out and index[key] == index[out[-1][1]] + 1 and (
                    self.kind == "equality" or self._bounds(out[-1][1])[1] == self._bounds(key)[0]):
                out[-1] = (out[-1][0], key)
            else:
                out.append((key, key))
        return out

    def key_of_value(self, keys: Sequence[str]) -> dict[Any, str]:
        """Equality schemes: the column value -> key, to read back a GROUP BY on the column."""
        return {self.value(k): k for k in keys}

    def _bounds(self, key: str) -> tuple[Any, Any]:
        found = self._cache.get(key)
        if found is None:
            if key not in self._position:
                raise WindowError(f"{key!r} is not a partition key of {self.description}",
                                  fix="name a key the partitions definition holds")
            found = self._cache[key] = self.resolve(key)
        return found


def _comparable(value: Any) -> Any:
    """A DATE as its midnight, so that it compares with TIMESTAMP values as the warehouse compares them."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return dt.datetime.combine(value, dt.time())
    return value


@lru_cache(maxsize=32)
def _keys(partitions_def: Any, last_key: str | None) -> tuple[str, ...]:
    """All keys, listed once per definition until it gains a key (hourly history is long)."""
    if last_key is not None and _plain_utc_days(partitions_def):
        # one key a calendar day, first to last: Dagster walks its cron for each (~10 us a key,
        # 0.1-0.2 s a command for a history since 1992); the same keys by date arithmetic
        first = dt.date.fromisoformat(partitions_def.get_first_partition_key())
        days = (dt.date.fromisoformat(last_key) - first).days
        return tuple((first + dt.timedelta(days=i)).isoformat() for i in range(days + 1))
    return tuple(partitions_def.get_partition_keys())


def _plain_utc_days(partitions_def: Any) -> bool:
    """Daily at midnight UTC, keys formatted %Y-%m-%d, nothing excluded (`is_basic_daily`)."""
    return (getattr(partitions_def, "is_basic_daily", False) and partitions_def.fmt == "%Y-%m-%d"
            and partitions_def.timezone == "UTC")


def scheme_for(partitions_def: Any, column_type: str, *, name: str) -> PartitionScheme:
    """The scheme of a Dagster partitions definition over a column of `column_type`: built once
    per definition, column type and last key (a time window gains a key every period, and then a
    new scheme is built), since listing and indexing a long history costs milliseconds a time."""
    import dagster as dg

    # the kind first: a dynamic definition cannot even list its keys without an instance
    if not isinstance(partitions_def, dg.StaticPartitionsDefinition | dg.TimeWindowPartitionsDefinition):
        raise WindowError(f"{name} uses {type(partitions_def).__name__}, which a replayable table "
                          "does not support", fix="use time-window (hourly, daily, weekly, monthly, "
                          "cron) or static partitions")
    return _scheme(partitions_def, partitions_def.get_last_partition_key(), column_type, name)


# the column types a static key's text is compared with as text, on DuckDB and PostgreSQL
_TEXT_KINDS = frozenset({"VARCHAR", "TEXT", "STRING", "CHAR", "CHARACTER", "CHARACTER VARYING", "BPCHAR"})


@lru_cache(maxsize=64)
def _scheme(partitions_def: Any, last_key: str | None, column_type: str, name: str) -> PartitionScheme:
    import dagster as dg

    kind = column_type.upper().split("(")[0].strip()
    keys = _keys(partitions_def, last_key)
    if isinstance(partitions_def, dg.StaticPartitionsDefinition):
        if kind not in _TEXT_KINDS:
            # a key is bound and read back as its text: over a DATE column the warehouse cast it, and the
            # grouped count read back a date that was no key (a run ended in a KeyError traceback)
            raise WindowError(f"{name} uses static partitions, whose keys are text, but its partition column "
                              f"has type {column_type}", fix="partition on a VARCHAR column, or use time-window "
                              "partitions for a DATE or TIMESTAMP column")
        return PartitionScheme("equality", lambda k: (k, None), keys, f"{name} (static partitions)")
    window = partitions_def.time_window_for_partition_key
    cadence = type(partitions_def).__name__.replace("PartitionsDefinition", "").lower() or "time"
    what = f"{name} ({cadence} partitions)"
    if kind == "DATE":
        sample = window(keys[0]) if keys else None
        if sample is not None and sample.end - sample.start < dt.timedelta(days=1):
            raise WindowError(f"{name}'s partition column is a DATE, but its partitions are shorter "
                              "than a day", fix="partition on a TIMESTAMP column")
        if isinstance(partitions_def, dg.DailyPartitionsDefinition):
            # rows match the day itself; the window's end is still bound as $partition_end
            return PartitionScheme("equality", lambda k: (window(k).start.date(), window(k).end.date()), keys, what)
        return PartitionScheme("range", lambda k: (window(k).start.date(), window(k).end.date()),
                               keys, what)
    if kind in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE"):
        return PartitionScheme("range", lambda k: (window(k).start, window(k).end), keys, what)
    if kind in ("TIMESTAMP", "DATETIME", "TIMESTAMP WITHOUT TIME ZONE"):
        return PartitionScheme("range", lambda k: (window(k).start.replace(tzinfo=None),
                                                   window(k).end.replace(tzinfo=None)), keys, what)
    raise WindowError(f"{name}'s partition column has type {column_type}, which cannot hold a time "
                      "window", fix="declare it DATE, TIMESTAMP or TIMESTAMPTZ")
