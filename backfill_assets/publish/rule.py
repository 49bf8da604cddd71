"""The publish rule, enforced across runs (Dagster's blocking checks only hold inside one run).

A partition may be copied to the published table only if every gate passed on its latest write;
and a partition held by an active plan only once that plan's whole window reconciled and the
publish is the plan's own (tagged with the plan). Until then consumers keep the last good data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb

from backfill_assets.control import evidence_log, gate_record, record
from backfill_assets.errors import PublishBlocked, WarehouseError
from backfill_assets.plan import load_plan
from backfill_assets.plan.gate import PLAN_TAG
from backfill_assets.plan.phases import Phase
from backfill_assets.publish.notify import announce_reopen
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.connection import transaction
from backfill_assets.warehouse.fingerprints import as_date
from backfill_assets.warehouse.identifiers import quote
from backfill_assets.warehouse.snapshots import ensure_snapshot
from backfill_assets.warehouse.writes import ensure_table


def blockers(con: duckdb.DuckDBPyConnection, spec: TableSpec, keys: Sequence[str],
             tags: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    plans = record.active_plans(con, target=spec.name)
    for plan in plans:
        held = [k for k in keys if plan.covers(k)]
        if not held:
            continue
        if plan.phase is not Phase.RECONCILED:
            problems.append(f"{held[0]}..{held[-1]} paused by plan {plan.plan_id} ({plan.phase}): "
                            "publish reopens only after every gate of the window passed")
        elif tags.get(PLAN_TAG) != plan.plan_id:
            problems.append(f"{held[0]}..{held[-1]} belong to plan {plan.plan_id}: publish them "
                            f"with the plan (`backfill publish {plan.path}` or the sensor)")
    for key, entry in gate_record.latest(con, spec.name, keys).items():
        if entry is None:
            problems.append(f"{key}: {spec.name} has no recorded write to publish")
        elif not entry.passed:
            problems.append(f"{key}: gate(s) {', '.join(entry.failed) or 'not evaluated'} did not "
                            "pass on the latest materialization")
    return problems


def publish(con: duckdb.DuckDBPyConnection, spec: TableSpec, keys: Sequence[str],
            tags: Mapping[str, str], actor: str) -> int:
    """Copy the partitions into the published table in one transaction; refuse before any write."""
    problems = blockers(con, spec, keys, tags)
    if problems:
        raise PublishBlocked(f"publish of {spec.publish_as} refused: {'; '.join(problems)}",
                             fix="fix and re-materialize the failing partitions, then publish again")
    plan_id = tags.get(PLAN_TAG)
    target, published = quote(spec.table), quote(spec.publish_table)
    part = quote(spec.partition_column)
    cols = ", ".join(quote(c) for c in spec.columns)
    dates = [as_date(k) for k in keys]
    try:
        return _copy(con, spec, keys, dates, plan_id, actor, target, published, part, cols)
    except duckdb.Error as exc:
        raise WarehouseError(
            f"publish of {spec.publish_as} failed and was rolled back, consumers keep the previous "
            f"data: {str(exc).splitlines()[0]}", fix="fix the published table, then publish again"
        ) from None


def _copy(con: duckdb.DuckDBPyConnection, spec: TableSpec, keys: Sequence[str], dates: list,
          plan_id: str | None, actor: str, target: str, published: str, part: str,
          cols: str) -> int:
    with transaction(con):
        ensure_table(con, spec, spec.publish_table)
        if plan_id:
            for key in keys:
                ensure_snapshot(con, spec, spec.publish_table, plan_id, key, actor)
        con.execute(f"DELETE FROM {published} WHERE {part} = ANY(?)", [dates])
        con.execute(f"INSERT INTO {published} ({cols}) SELECT {cols} FROM {target} "
                    f"WHERE {part} = ANY(?)", [dates])
        copied = con.execute(f"SELECT count(*) FROM {published} WHERE {part} = ANY(?)",
                             [dates]).fetchone()[0]
        if plan_id:
            state = record.require(con, plan_id)
            evidence_log.append(con, plan_id=plan_id, kind="published", actor=actor, payload={
                "table": spec.publish_as, "partitions": list(keys), "rows": copied,
                "sha256": state.approved_sha256})
            if set(state.partition_keys) <= set(keys):
                record.transition(con, plan_id, Phase.PUBLISHED, actor,
                                  note=f"{len(keys)} partition(s) published")
                announce_reopen(con, load_plan(state.path), actor)
    return copied
