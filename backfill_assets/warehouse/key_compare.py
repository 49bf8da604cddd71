"""The pieces of SQL that compare two sides grouped by business key, metric by metric: the gate
`metrics_match_source` (the target against its source) and a cutover's dual run (the shadow against
the published table) join their sides group to group and judge each metric the same way.

Each side's metric `i` is the column `m{i}` of its alias inside the join, and `{prefix}m{i}` once
the joined row carries both. A difference is judged relative to the side the new one must match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from backfill_assets.warehouse.engine import Engine

Text = Callable[[str], str]  # the engine's cast of an expression to text


def metric_differs_sql(new: str, old: str, i: int) -> str:
    """Metric `i` of the aligned groups `new` and `old` differs beyond the tolerance, two bound
    parameters (absolute, then percent of `old`'s figure). NULL against a figure differs; NULL against
    NULL (no rows either side) does not. Every operand a double of its own: `... / 100.0` divided a
    double by a numeric, which no operator of PostgreSQL's takes exactly, so `/(double precision,
    numeric)` of one's own answered it and widened every tolerance (found by an attack)."""
    return (f"NOT coalesce({new}.m{i} IS NOT DISTINCT FROM {old}.m{i} OR CAST(abs({new}.m{i} - "  # not a join
            f"{old}.m{i}) AS DOUBLE PRECISION) <= greatest(CAST(? AS DOUBLE PRECISION), CAST(? AS DOUBLE "
            f"PRECISION) * CAST(abs({old}.m{i}) AS DOUBLE PRECISION) / CAST(100 AS DOUBLE PRECISION)), FALSE)")


def key_text_sql(text: Text, keys: Sequence[tuple[str, str]], new: str, old: str) -> str:
    """`name=value, ...` of the group's keys other than the partition, `(name, column)` each, from
    whichever side has the group."""
    return " || ', ' || ".join(
        f"'{k}=' || coalesce({text(f'coalesce({new}.{c}, {old}.{c})')}, 'NULL')" for k, c in keys
    ) or "'(partition)'"


def metrics_text_sql(text: Text, names: Sequence[str], new: str, old: str, after: str = "") -> str:
    """` name NEW vs OLD{after}` for each differing metric (`bad{i}`) of a joined row, whose
    figures are `{new}m{i}` and `{old}m{i}`."""
    return " || ".join(
        f"CASE WHEN bad{i} THEN ' {name} ' || coalesce({text(f'{new}m{i}')}, 'NULL') || ' vs ' || "
        f"coalesce({text(f'{old}m{i}')}, 'NULL'){after} ELSE '' END" for i, name in enumerate(names)) or "''"


def worst_sql(count: int, new: str, old: str) -> str:
    """How far a joined row's differing metrics are apart, summed, to name the worst groups first."""
    return " + ".join(f"CASE WHEN bad{i} THEN coalesce(CAST(abs({new}m{i} - {old}m{i}) AS DOUBLE PRECISION), "
                      "1e300) ELSE 0 END" for i in range(count)) or "0"


def worst_keys_sql(engine: Engine, new: str, old: str, metric_text: str, missing_new: str, missing_old: str,
                   limit: int) -> str:
    """An aggregate over joined rows ranked `rk`: the `limit` worst differing key groups as text,
    a group on one side only saying which (`missing_new` when the new side lacks it)."""
    return engine.joined_text_where_sql(
        f"CASE WHEN {new}n IS NULL THEN '(' || keytext || ') {missing_new}' "
        f"WHEN {old}n IS NULL THEN '(' || keytext || ') {missing_old}' "
        f"ELSE '(' || keytext || '):' || {metric_text} END", "'; '", "rk", f"anybad AND rk <= {int(limit)}")
