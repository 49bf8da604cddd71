"""Peers that run as plain SQL in the project's own DuckDB (same connection as "ours").

Every function answers the same question as `ours_sql.ours` and returns
{partition value: (added, removed, changed)} for the partitions with a difference.

* `except_all`: ``A EXCEPT ALL B`` and ``B EXCEPT ALL A``, then the two residues are matched on
  the keys (in both residues = changed, only in A's = removed, only in B's = added).
* `full_join`: one FULL OUTER JOIN on the keys over the whole table, every value column compared
  with IS DISTINCT FROM (= `ours_sql.classify` with no partition filter).
* `audit_compare_relations` / `audit_compare_all_columns`: the SQL that dbt-audit-helper's
  macros of the same names generate for DuckDB (dbt-labs/dbt-audit-helper 0.12.2, commit
  3bd0ca4; DuckDB has no dispatch of its own there, so these are the ``default__`` versions with
  dbt-core's default ``except``/``intersect``; identifiers quoted as ``adapter.quote`` does).
  The macro's result is rows, so a small wrapper counts them per partition; the macro's SQL is
  run unchanged inside it.

Not included: audit-helper's newer ``compare_and_classify_relation_rows`` (and
``compare_which_relation_columns_differ``'s sibling), whose ``default__`` SQL uses
``count(distinct a, b) over (...)``, which DuckDB rejects: "No function matches ...
'count(INTEGER, INTEGER)'" (DuckDB 2.0.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from .ours_sql import classify, q

Result = dict[Any, tuple[int, int, int]]


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> Result:
    return {part: (int(added), int(removed), int(changed))
            for part, added, removed, changed in con.execute(sql).fetchall()}


def _classify_residues(keys: Sequence[str], partition_column: str, residues: str) -> str:
    """SQL counting per partition from `residues`: rows with the keys, the partition column and
    booleans in_a / in_b (a row only in A, or only in B). A key in both is a changed row."""
    k = ", ".join(q(c) for c in keys)
    p = q(partition_column)
    return (f"WITH per_key AS (SELECT {k}, max({p}) AS _part, bool_or(in_a) AS in_a, "
            f"bool_or(in_b) AS in_b FROM ({residues}) GROUP BY {k}) "
            "SELECT _part, count(*) FILTER (WHERE in_b AND NOT in_a), "
            "count(*) FILTER (WHERE in_a AND NOT in_b), count(*) FILTER (WHERE in_a AND in_b) "
            "FROM per_key GROUP BY 1 ORDER BY 1")


def except_all(con: duckdb.DuckDBPyConnection, a_table: str, b_table: str, keys: Sequence[str],
               partition_column: str, value_columns: Sequence[str]) -> Result:
    cols = ", ".join(q(c) for c in dict.fromkeys([*keys, partition_column, *value_columns]))
    a, b = q(a_table), q(b_table)
    return _rows(con, _classify_residues(
        keys, partition_column,
        f"SELECT *, true AS in_a, false AS in_b FROM "
        f"(SELECT {cols} FROM {a} EXCEPT ALL SELECT {cols} FROM {b}) "
        f"UNION ALL SELECT *, false, true FROM "
        f"(SELECT {cols} FROM {b} EXCEPT ALL SELECT {cols} FROM {a})"))


def full_join(con: duckdb.DuckDBPyConnection, a_table: str, b_table: str, keys: Sequence[str],
              partition_column: str, value_columns: Sequence[str]) -> Result:
    return classify(con, a_table, b_table, keys, partition_column, value_columns, None)


# --- dbt-audit-helper -------------------------------------------------------------------------

def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """dbt_utils.get_filtered_columns_in_relation: the relation's columns, in order."""
    return [r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
        "AND table_schema = current_schema() ORDER BY ordinal_position", [table]).fetchall()]


def compare_queries_sql(a_query: str, b_query: str, primary_key: str | None = None,
                        summarize: bool = True, limit: int | None = None) -> str:
    """audit_helper.default__compare_queries, rendered (dbt.intersect() / dbt.except() are the
    dbt-core defaults ``intersect`` / ``except``, which in DuckDB are the DISTINCT set forms)."""
    if summarize:
        final = """summary_stats as (

    select

        in_a,
        in_b,
        count(*) as count

    from all_records
    group by 1, 2

),

final as (

    select

        *,
        round(100.0 * count / sum(count) over (), 2) as percent_of_total

    from summary_stats
    order by in_a desc, in_b desc

)"""
    else:
        order = f"{primary_key}, " if primary_key is not None else ""
        final = f"""final as (

    select * from all_records
    where not (in_a and in_b)
    order by {order} in_a desc, in_b desc

)"""
    tail = f"\nlimit {limit}" if limit and not summarize else ""
    return f"""
with a as (

    {a_query}

),

b as (

    {b_query}

),

a_intersect_b as (

    select * from a
    intersect
    select * from b

),

a_except_b as (

    select * from a
    except
    select * from b

),

b_except_a as (

    select * from b
    except
    select * from a

),

all_records as (

    select
        *,
        true as in_a,
        true as in_b
    from a_intersect_b

    union all

    select
        *,
        true as in_a,
        false as in_b
    from a_except_b

    union all

    select
        *,
        false as in_a,
        true as in_b
    from b_except_a

),{final}

select * from final{tail}
"""


def compare_relations_sql(con: duckdb.DuckDBPyConnection, a_relation: str, b_relation: str,
                          exclude_columns: Sequence[str] = (), primary_key: str | None = None,
                          summarize: bool = True, limit: int | None = None) -> str:
    """audit_helper.compare_relations, rendered."""
    names = [c for c in _columns(con, a_relation) if c not in exclude_columns]
    selection = " \n      , \n    ".join(f'"{c}"' for c in names)
    a_query = f"select\n\n  {selection}\n\nfrom {q(a_relation)}"
    b_query = f"select\n\n  {selection}\n\nfrom {q(b_relation)}"
    return compare_queries_sql(a_query, b_query, primary_key, summarize, limit)


def audit_compare_relations(con: duckdb.DuckDBPyConnection, a_table: str, b_table: str,
                            keys: Sequence[str], partition_column: str,
                            value_columns: Sequence[str]) -> Result:
    """compare_relations(summarize=false, primary_key=<keys>): the rows in only one relation,
    then counted per partition by key (a key in both residues is a changed row)."""
    macro = compare_relations_sql(con, a_table, b_table, primary_key=", ".join(keys), summarize=False)
    return _rows(con, _classify_residues(keys, partition_column, macro))


def compare_column_values_verbose_sql(a_query: str, b_query: str, primary_key: str,
                                      column_to_compare: str) -> str:
    """audit_helper.default__compare_column_values_verbose, rendered (target is not postgres)."""
    pk, col = primary_key, column_to_compare
    return f"""with a_query as (
    {a_query}
),

b_query as (
    {b_query}
)
    select
        coalesce(a_query.{pk}, b_query.{pk}) as primary_key,

            '{col}' as column_name,

        coalesce(
            a_query.{col} = b_query.{col} and
                a_query.{pk} is not null and b_query.{pk} is not null,
            (a_query.{col} is null and b_query.{col} is null),
            false
        ) as perfect_match,
        a_query.{col} is null and a_query.{pk} is not null as null_in_a,
        b_query.{col} is null and b_query.{pk} is not null as null_in_b,
        a_query.{pk} is null as missing_from_a,
        b_query.{pk} is null as missing_from_b,
        coalesce(
            a_query.{pk} is not null and b_query.{pk} is not null and
            -- ensure that neither value is missing before considering it a conflict
            (
                a_query.{col} != b_query.{col} or -- two not-null values that do not match
                (a_query.{col} is not null and b_query.{col} is null) or -- null in b and not null in a
                (a_query.{col} is null and b_query.{col} is not null) -- null in a and not null in b
            ),
            false
        ) as conflicting_values
        -- considered a conflict if the values do not match AND at least one of the values is not null.

    from a_query

    full outer join b_query on (a_query.{pk} = b_query.{pk})
"""


def compare_all_columns_sql(con: duckdb.DuckDBPyConnection, a_relation: str, b_relation: str,
                            primary_key: str, exclude_columns: Sequence[str] = (),
                            summarize: bool = True) -> str:
    """audit_helper.default__compare_all_columns, rendered: one FULL JOIN per column."""
    names = [c for c in _columns(con, a_relation) if c not in exclude_columns]
    query = "\n    select\n      *,\n      {pk} as dbt_audit_helper_pk\n    from {relation}\n  "
    a_query = query.format(pk=primary_key, relation=q(a_relation))
    b_query = query.format(pk=primary_key, relation=q(b_relation))
    parts = [f"( {compare_column_values_verbose_sql(a_query, b_query, 'dbt_audit_helper_pk', c)} )"
             for c in names]
    if summarize:
        final = """final as (
          select
            upper(column_name) as column_name,
            sum(case when perfect_match then 1 else 0 end) as perfect_match,
            sum(case when null_in_a then 1 else 0 end) as null_in_a,
            sum(case when null_in_b then 1 else 0 end) as null_in_b,
            sum(case when missing_from_a then 1 else 0 end) as missing_from_a,
            sum(case when missing_from_b then 1 else 0 end) as missing_from_b,
            sum(case when conflicting_values then 1 else 0 end) as conflicting_values
          from main
          group by 1
          order by column_name
        )"""
    else:
        final = """final as (
          select
            primary_key,
            upper(column_name) as column_name,
            perfect_match,
            null_in_a,
            null_in_b,
            missing_from_a,
            missing_from_b,
            conflicting_values
          from main
          order by primary_key
        )"""
    return ("\n      with main as ( \n" + "\n\n      union all\n\n".join(parts)
            + f"\n    ), \n    {final}\n\n      select * from final\n")


#: compare_all_columns takes one SQL expression as the primary key; a dbt user with a composite
#: key passes a concatenation. The partition is read back from its first field.
def _audit_pk(keys: Sequence[str]) -> str:
    return " || '|' || ".join(q(k) for k in keys)


def audit_compare_all_columns(con: duckdb.DuckDBPyConnection, a_table: str, b_table: str,
                              keys: Sequence[str], partition_column: str,
                              value_columns: Sequence[str]) -> Result:
    """compare_all_columns(summarize=false, primary_key=<keys joined by '|'>), counted per
    partition: a key missing from A is added, missing from B removed, else with any
    conflicting value changed. The partition column must be the first key."""
    if keys[0] != partition_column:
        raise ValueError("this wrapper reads the partition from the first key")
    macro = compare_all_columns_sql(con, a_table, b_table, _audit_pk(keys), summarize=False)
    sql = (f"WITH per_key AS (SELECT primary_key, bool_or(missing_from_a) AS added, "
           "bool_or(missing_from_b) AS removed, bool_or(conflicting_values) AS changed "
           f"FROM ({macro}) GROUP BY primary_key) "
           f"SELECT CAST(split_part(primary_key, '|', 1) AS "
           f"{_type_of(con, a_table, partition_column)}) AS part, "
           "count(*) FILTER (WHERE added), count(*) FILTER (WHERE removed), "
           "count(*) FILTER (WHERE changed AND NOT added AND NOT removed) "
           "FROM per_key WHERE added OR removed OR changed GROUP BY 1 ORDER BY 1")
    return _rows(con, sql)


def _type_of(con: duckdb.DuckDBPyConnection, table: str, column: str) -> str:
    return con.execute("SELECT data_type FROM information_schema.columns WHERE table_name = ? "
                       "AND column_name = ? AND table_schema = current_schema()",
                       [table, column]).fetchone()[0]


TOOLS = {
    "EXCEPT ALL both ways": except_all,
    "FULL OUTER JOIN on keys": full_join,
    "audit-helper compare_relations": audit_compare_relations,
    "audit-helper compare_all_columns": audit_compare_all_columns,
}
