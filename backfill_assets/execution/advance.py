"""Moving a plan forward (or back) on evidence: proving → proven, running ⇄ reconciled,
published → repairing → reconciled. This module reads the evidence into verdicts; the moves they
make are `backfill_assets.lifecycle`'s.

The CLI, `reconcile` and the reopen sensor all call `advance`, so a backfill launched from the
Dagster UI moves through the same phases on the same evidence as one launched by `backfill run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from backfill_assets import lifecycle
from backfill_assets.control import ledger
from backfill_assets.control.record import PlanState
from backfill_assets.gates.results import UNCHANGED_SINCE_CHECKED
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.phases import Phase
from backfill_assets.publish import published as published_record
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY

if TYPE_CHECKING:
    from backfill_assets.graph import TableGraph


def plan_tables(state: PlanState, spec: TableSpec, scheme: PartitionScheme,
                graph: TableGraph | None) -> list[tuple[TableSpec, PartitionScheme, tuple[str, ...]]]:
    """Each table the plan writes with its scheme and partitions: the target (`spec`, `scheme`),
    then its graph's tables as `graph` loads them (a table it lacks is left out)."""
    out = [(spec, scheme, tuple(state.partition_keys))]
    if graph is not None:
        out += [(graph.spec(a), graph.scheme(a), state.keys_of(a)) for a in state.assets[1:] if a in graph.tables]
    return out


@dataclass(frozen=True)
class Verdict:
    passed: bool
    blockers: list[str] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)   # partition of the target -> failed gates
    missing: list[str] = field(default_factory=list)             # partitions of the target not written yet
    # the same for the other tables of the plan's graph: asset -> partition -> failed gates / missing
    failed_downstream: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    missing_downstream: dict[str, list[str]] = field(default_factory=dict)
    # the proof: every proof partition was written twice, identically, with no rows
    empty_proof: bool = False


def proof_verdict(session: Session, state: PlanState) -> Verdict:
    """Every proof partition written at least twice with identical fingerprints, all gates passed,
    and at least one of them holding rows (unless the plan allows empty partitions)."""
    blockers: list[str] = []
    empty: list[str] = []
    for key in state.proof_keys:
        prints = ledger.fingerprints_written(session, state.target, state.plan_id, key)
        if len(prints) < 2:
            blockers.append(f"{key}: materialized {len(prints)} time(s), the proof needs 2")
        elif prints[-1] != prints[-2]:
            blockers.append(f"{key}: fingerprints differ between the last two runs "
                            f"({prints[-2][-12:]} vs {prints[-1][-12:]}); the write is not idempotent")
        elif prints[-1] == EMPTY.digest:
            empty.append(key)
    plan = state.version.plan if state.version is not None else None
    empty_proof = bool(empty) and len(empty) == len(state.proof_keys) and not (
        plan is not None and plan.execution.allow_empty_partitions)
    if empty_proof:
        # nothing written twice is identical whatever the write does: a proof on a day the source
        # holds no rows for passed, and the whole window was replayed on it (the seed's red flag, no
        # bounded slice proof before the full window); a plan that may empty partitions is proven so
        blockers.append(f"{', '.join(empty)}: the proof wrote no rows (the source holds none there), which proves "
                        "nothing of the write; run the proof again once the source holds rows there, list a proof "
                        "partition that holds data under execution.proof_partitions and approve that version, "
                        f"or `backfill cancel {state.plan_id}`")
    latest = ledger.latest(session, state.target, list(state.proof_keys), state.plan_id, figures=False)
    failed = {k: e.failed or ["not evaluated"] for k, e in latest.items() if e is not None and not e.passed}
    blockers += [f"{k}: gates failed: {', '.join(g)}" for k, g in failed.items()]
    return Verdict(not blockers, blockers, failed, empty_proof=empty_proof)


def _table_verdict(session: Session, state: PlanState, asset: str, keys: list[str],
                   upstream_newest: tuple[tuple[int, int], str] | None = None
                   ) -> tuple[dict[str, list[str]], list[str], tuple[tuple[int, int], str] | None]:
    """(failed gates by key, keys not written, the newest of the latest writes: its (chain row, id)
    and what it wrote). `upstream_newest`: that of the tables the plan lists before this one: a partition
    written before it may have read what that write replaced."""
    latest = ledger.latest(session, asset, keys, state.plan_id, figures=False)
    missing = [k for k, e in latest.items() if e is None]
    failed: dict[str, list[str]] = {}
    for key, entry in latest.items():
        if entry is None:
            continue
        bad = entry.failed or ([] if entry.gates else ["not evaluated"])
        if upstream_newest is not None and (entry.seq, entry.write_id) < upstream_newest[0]:
            # runs go in dependency order; a table it reads was written again since (a re-run of a
            # day after its month): the month's gates compared it with days that are gone
            bad = [*bad, f"{STALE}{upstream_newest[1]} was written again"]
        stale = [g for g, checked in entry.checked.items() if checked != entry.fingerprint.digest]
        if stale and UNCHANGED_SINCE_CHECKED not in bad:
            bad = [*bad, UNCHANGED_SINCE_CHECKED]
        if bad:
            failed[key] = bad
    newest = max((((e.seq, e.write_id), f"{asset} {k}") for k, e in latest.items() if e is not None), default=None)
    return failed, missing, newest


STALE = "computed before "  # a downstream partition's note among its failed gates' names


def _failures(where: str, failed: list[str]) -> str:
    gates = [g for g in failed if not g.startswith(STALE)]
    notes = [g for g in failed if g.startswith(STALE)]
    return f"{where}: " + "; ".join(([f"{', '.join(gates)} failed"] if gates else []) + notes)


def window_verdict(session: Session, state: PlanState) -> Verdict:
    """Every partition of the window written under the plan, and every gate passed on the data its
    latest write produced: of the target and of every table of the plan's graph."""
    failed, missing, upstream = _table_verdict(session, state, state.target, list(state.partition_keys))
    blockers = []
    if missing:
        blockers.append(f"{len(missing)} partition(s) not written yet: {', '.join(missing[:5])}"
                        + (" ..." if len(missing) > 5 else ""))
    blockers += [_failures(k, g) for k, g in list(failed.items())[:20]]
    failed_downstream, missing_downstream = {}, {}
    for asset in state.assets[1:]:
        bad, absent, newest = _table_verdict(session, state, asset, list(state.keys_of(asset)), upstream)
        if newest is not None and (upstream is None or newest > upstream):
            upstream = newest
        if absent:
            missing_downstream[asset] = absent
            blockers.append(f"{asset}: {len(absent)} partition(s) not written yet: {', '.join(absent[:5])}"
                            + (" ..." if len(absent) > 5 else ""))
        if bad:
            failed_downstream[asset] = bad
            blockers += [_failures(f"{asset} {k}", g) for k, g in list(bad.items())[:20]]
    return Verdict(not blockers, blockers, failed, missing, failed_downstream, missing_downstream)


def published_edits(session: Session, state: PlanState, spec: TableSpec, scheme: PartitionScheme,
                    graph: TableGraph | None = None) -> list[str]:
    """Each published partition of the plan's tables ("TABLE KEY") that consumers read edited since
    published. `advance` sends such a plan to repairing, except while another plan holds one of its
    partitions: then the plan stays published over the edit, and a close or a publish must say so."""
    return [f"{t.publish_as} {k}" for t, s, keys in plan_tables(state, spec, scheme, graph)
            for k in published_record.edited(session, t, s, list(keys))]


def advance(session: Session, state: PlanState, actor: str, spec: TableSpec | None = None,
            scheme: PartitionScheme | None = None, graph: TableGraph | None = None) -> PlanState:
    """Take every step the evidence allows; each step is recorded in the evidence log. With the
    table's spec and partitions, a published plan whose published partitions were edited
    since goes back to repairing, so the next publish puts the checked bytes back (with `graph`,
    the published tables of every table the plan wrote)."""
    # the verdicts are read here, inside the lifecycle's transaction for the move they make; each
    # only in the phases it can move, as reading the ledger for a whole window is not free
    state = lifecycle.proof_judged(session, state, lambda now: proof_verdict(session, now), actor)
    state = lifecycle.window_judged(session, state, lambda now: window_verdict(session, now), actor)
    # still published: the window passed, and what consumers read is checked against what was published
    if state.phase is Phase.PUBLISHED and spec is not None and scheme is not None:
        for table, table_scheme, keys in plan_tables(state, spec, scheme, graph):
            edits_now = partial(published_record.edited, session, table, table_scheme, list(keys))
            state = lifecycle.publication_checked(session, state, table.publish_as, edits_now, actor)
            if state.phase is not Phase.PUBLISHED:
                break
    return state
