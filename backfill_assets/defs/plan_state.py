"""The plan-state entry on a table's asset in the Dagster UI: a markdown table of the table's plans
(phase, window, approvals, gates, publish, next step), recorded as an `AssetObservation`.

The reopen sensor records it on its ticks; the CLI records it right after a command changes a plan
(approve, run, publish, rollback, withdraw, close), so the UI does not wait for the next tick.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from backfill_assets.control import record
from backfill_assets.control.record import PlanState
from backfill_assets.graph import TableGraph, asset_key
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.phases import ACTIVE, ENDED, Phase
from backfill_assets.status import ended_status, markdown, plan_status
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session

PLAN_STATE_METADATA = "backfill_assets/plans"
ENDED_SHOWN = 5  # the table's last ended plans shown below its active ones


def _root(state: PlanState, spec: TableSpec | None, scheme: PartitionScheme | None,
          graph: TableGraph | None) -> tuple[TableSpec | None, PartitionScheme | None, TableGraph | None]:
    """The plan's target's spec and scheme (this table's, unless the plan is another table's graph)."""
    if spec is not None and state.target == spec.name:
        return spec, scheme, graph
    if graph is not None and state.target in graph.tables:
        return graph.spec(state.target), graph.scheme(state.target), graph
    return None, None, None


def plans_of_table(session: Session, table: str, spec: TableSpec | None = None, scheme: PartitionScheme | None = None,
                   graph: TableGraph | None = None) -> tuple[str, int]:
    """The markdown table of `table`'s plans (active first, then its last ended ones) and how many
    are active. Without the table's spec (definitions not loaded) the publish blockers are left out."""
    plans = sorted(record.all_plans(session, target=table), key=lambda s: s.updated_at)
    shown = [s for s in plans if s.phase not in ENDED] + [s for s in plans if s.phase in ENDED][-ENDED_SHOWN:]
    statuses = [ended_status(session, s) if s.phase in ENDED else
                plan_status(session, s, *_root(s, spec, scheme, graph)) for s in shown]
    return markdown(statuses), sum(1 for s in statuses if Phase(s.phase) in ACTIVE)


def observation(table: str, markdown_table: str, active: int, by: str) -> dg.AssetObservation:
    return dg.AssetObservation(asset_key=asset_key(table), metadata={
        PLAN_STATE_METADATA: dg.MetadataValue.md(markdown_table),
        "active_plans": dg.MetadataValue.int(active),
        "recorded_by": by,
    })


def observations(session: Session, tables: Iterable[str], by: str,
                 graph: TableGraph | None = None) -> list[dg.AssetObservation]:
    """Each table's plan state now, as the observation to record on its asset."""
    out = []
    for table in dict.fromkeys(tables):
        spec = graph.spec(table) if graph is not None and table in graph.tables else None
        scheme = graph.scheme(table) if spec is not None and graph is not None else None
        text, active = plans_of_table(session, table, spec, scheme, graph)
        out.append(observation(table, text, active, by))
    return out
