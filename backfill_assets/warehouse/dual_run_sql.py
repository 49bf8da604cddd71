"""The dual run of a cutover as SQL inside the engine: the shadow (the plan's target, written by the
new pipeline and not yet published) against the published table (what the old pipeline gave
consumers), key by key, for a whole slice of partitions in one statement.

Both sides are grouped by partition and business keys and full-joined group to group, as the gate
`metrics_match_source` joins the target with its source; here both sides are the table's own
columns, so each metric is the same expression (`target_sql`) on each side. A key on one side only
is a mismatch, and so is a metric whose figures differ beyond the plan's tolerance (NULL against a
figure differs, NULL against NULL does not). The same statement fingerprints the published
partitions it compared, so publish can tell a comparison made against other published bytes.

Only per-partition counts, totals and the few worst keys as text come back, never rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backfill_assets.identifiers import quote
from backfill_assets.partitions import PartitionScheme
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, column_types, digest_sql
from backfill_assets.warehouse.grouping import Grouping, grouping
from backfill_assets.warehouse.key_compare import (
    key_text_sql,
    metric_differs_sql,
    metrics_text_sql,
    worst_keys_sql,
    worst_sql,
)

WORST_KEYS = 3  # keys named per mismatching partition


@dataclass(frozen=True)
class DualRunFigures:
    """What the statement returns for one partition."""

    shadow_keys: int
    published_keys: int
    missing: int                    # keys published, not in the shadow
    extra: int                      # keys in the shadow, not published
    differing: dict[str, int]       # metric -> keys whose figures differ beyond the tolerance
    mismatched: int                 # keys that differ in any way
    shadow: dict[str, object]       # metric -> the partition's figure in the shadow
    published: dict[str, object]    # metric -> the partition's figure published
    worst: str                      # the worst keys, as text
    published_fingerprint: Fingerprint  # of the published partition the comparison read

    @property
    def matched(self) -> bool:
        return not self.mismatched


def dual_run_figures(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
                     tolerance_abs: float, tolerance_pct: float,
                     shadow_source: str | None = None) -> dict[str, DualRunFigures]:
    """Run the slice's statement; every key gets figures (no rows on either side: a match).
    `shadow_source`: the shadow's rows as fingerprinted (`snapshots.session_copy`), else the target
    is read."""
    engine = session.engine
    text = engine.text_of
    metrics = list(spec.metrics)
    bkeys = list(spec.business_keys)
    kcols = [f"k{i}" for i in range(len(bkeys))]
    part = quote(spec.partition_column)
    published_exists = engine.table_exists(session, spec.publish_table)
    # a window never published has nothing to match: every shadow key is extra
    published = quote(spec.publish_table) if published_exists else \
        f"(SELECT {', '.join(quote(c) for c in spec.columns)} FROM {quote(spec.table)} WHERE FALSE)"
    s_group = grouping(session.engine, scheme, f"s.{part}", keys)
    p_group = grouping(session.engine, scheme, f"p.{part}", keys)

    def side(alias: str, table: str, group: Grouping) -> str:
        picked = [f"{group.key_sql} AS pkey"]
        picked += [f"{alias}.{quote(k)} AS {c}" for k, c in zip(bkeys, kcols, strict=True)]
        picked += ["count(*) AS n"] + [f"({session.engine.team_sql(m.target_sql)}) AS m{i}"
                                       for i, m in enumerate(metrics)]
        by = ", ".join(str(i + 1) for i in range(1 + len(bkeys)))
        return (f"SELECT {', '.join(picked)} FROM {table} AS {alias}{group.join_sql} "
                f"WHERE {group.where_sql} GROUP BY {by}")

    bad = []
    tolerance_params: list[object] = []
    for i in range(len(metrics)):
        # relative to the published (old) figure: the old pipeline is what the new one must match
        bad.append(metric_differs_sql("s", "p", i))
        tolerance_params += [tolerance_abs, tolerance_pct]
    non_partition = [(k, c) for k, c in zip(bkeys, kcols, strict=True) if k != spec.partition_column]
    key_text = key_text_sql(text, non_partition, "s", "p")
    metric_text = metrics_text_sql(text, [m.name for m in metrics], "s", "p", after=" || ' published'")
    any_bad = " OR ".join([f"bad{i}" for i in range(len(metrics))] + ["sn IS NULL", "pn IS NULL"])
    worst = worst_sql(len(metrics), "s", "p")
    if published_exists:  # the fingerprint is of the whole published partition: its own pass
        digest = digest_sql(session, spec.columns, column_types(session, spec.publish_table, spec.columns), "p")
        fp_cte = (f"f AS (SELECT {p_group.key_sql} AS pkey, count(*) AS n, {digest} AS fp FROM {published} AS p"
                  f"{p_group.join_sql} WHERE {p_group.where_sql} GROUP BY {p_group.key_sql}),")
        fp_params, fp_select = p_group.params, "f.n, f.fp FROM g LEFT JOIN f ON f.pkey = g.pkey"
    else:
        fp_cte, fp_params, fp_select = "", [], "0, NULL FROM g"
    join_on = f"s.pkey = p.pkey AND {engine.keys_match_sql('s', 'p', kcols, spec.key_types)}"
    bad_count = [engine.count_where_sql(f"bad{i}") for i in range(len(metrics))]
    count = engine.builtin("count")  # the engine's own, never one of the database's named alike
    sql = f"""
    WITH s AS ({side('s', shadow_source or quote(spec.table), s_group)}),
    p AS ({side('p', published, p_group)}),
    {fp_cte}
    j AS (
        SELECT coalesce(s.pkey, p.pkey) AS pkey, {key_text} AS keytext, s.n AS sn, p.n AS pn
               {''.join(f', s.m{i} AS sm{i}, p.m{i} AS pm{i}' for i in range(len(metrics)))}
               {''.join(f', {b} AS bad{i}' for i, b in enumerate(bad))}
        FROM s FULL OUTER JOIN p ON {join_on}),
    r AS (
        SELECT j.*, ({any_bad}) AS anybad,
               row_number() OVER (PARTITION BY pkey ORDER BY ({any_bad}) DESC, {worst} DESC, keytext) AS rk
        FROM j),
    g AS (
        SELECT pkey, {count}(sn), {count}(pn), {engine.count_where_sql("sn IS NULL")},
               {engine.count_where_sql("pn IS NULL")}, {engine.count_where_sql("anybad")}
               {''.join(f', {bad_count[i]}, sum(sm{i}), sum(pm{i})' for i in range(len(metrics)))},
               {worst_keys_sql(engine, "s", "p", metric_text, "published, not in the shadow",
                               "in the shadow, not published", WORST_KEYS)}
        FROM r GROUP BY pkey)
    SELECT g.*, {fp_select}
    """
    # placeholders bind in the order they appear: the shadow's slice, the published one's, the
    # published one's again (its fingerprint), then the tolerances
    params = [*s_group.params, *p_group.params, *fp_params, *tolerance_params]
    out: dict[str, DualRunFigures] = {}
    for row in session.rows(sql, params):
        key = s_group.key(row[0])
        shadow_keys, published_keys, missing, extra, mismatched = (int(v or 0) for v in row[1:6])
        rest = list(row[6:])
        differing, shadow, pub = {}, {}, {}
        for m in metrics:
            differing[m.name], shadow[m.name], pub[m.name] = int(rest.pop(0) or 0), rest.pop(0), rest.pop(0)
        worst_text = str(rest.pop(0) or "")
        rows, digest = rest
        fingerprint = Fingerprint(int(rows), str(digest)) if digest is not None else EMPTY
        out[key] = DualRunFigures(shadow_keys, published_keys, missing, extra, differing, mismatched, shadow, pub,
                                  worst_text, fingerprint)
    nothing = dict.fromkeys(m.name for m in metrics)
    empty = DualRunFigures(0, 0, 0, 0, dict.fromkeys(nothing, 0), 0, nothing, nothing, "", EMPTY)
    return {k: out.get(k, empty) for k in keys}
