"""Re-running the gates of a plan's window on the data as it is now, and recording them.

Results judge each partition's latest write under the plan; a partition edited after its write
fails `unchanged_since_checked` (and whatever else the edit broke), which blocks publish, and
after a publish moves the plan to `repairing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backfill_assets.control import ledger
from backfill_assets.control.record import PlanState
from backfill_assets.errors import PlanRefused
from backfill_assets.execution.advance import advance, plan_tables
from backfill_assets.execution.audit import judge
from backfill_assets.gates.results import GATE_NAMES, UNCHANGED_SINCE_CHECKED, GateResult
from backfill_assets.partitions import PartitionScheme
from backfill_assets.publish.source_check import remember_compared
from backfill_assets.table import TableSpec
from backfill_assets.warehouse import SLICE_PARTITIONS
from backfill_assets.warehouse.engine import Session

if TYPE_CHECKING:
    from backfill_assets.graph import TableGraph

SHORT = dict(zip(GATE_NAMES, ("rows", "dupes", "metrics", "contract", "version", "source", "same",
                                 "expect"),
                 strict=True))


@dataclass(frozen=True)
class Reconciliation:
    state: PlanState
    results: dict[str, list[GateResult] | None]  # None: partition not written under the plan
    # the other tables of the plan's graph, each the same way: asset -> partition -> results
    graph: dict[str, dict[str, list[GateResult] | None]] = field(default_factory=dict)
    # asset -> partition -> results, of the partitions whose judged write is what the table holds
    # (the partition's latest write, a later plan's if it wrote since): what the UI's checks show
    current: dict[str, dict[str, list[GateResult]]] = field(default_factory=dict)
    # of those, where a gate's verdict is not the one recorded before: what the UI shows from the
    # runs and publish refusals is no longer the gates' last word there
    changed: dict[str, dict[str, list[GateResult]]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r is not None and all(g.passed for g in r)
                   for results in (self.results, *self.graph.values()) for r in results.values())

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for key, results in self.results.items():
            if results is None:
                out.append({"partition": key, "written": False, "passed": False, "gates": {}})
                continue
            out.append({"partition": key, "written": True, "passed": all(g.passed for g in results),
                        "gates": {g.gate: g.to_json() for g in results}})
        return out

    def table(self, limit: int = 40) -> str:
        text = _table(self.results, limit)
        for asset, results in self.graph.items():
            text += f"\n\n{asset}\n" + _table(results, limit)
        return text


def _table(found: dict[str, list[GateResult] | None], limit: int) -> str:
    header = f"{'partition':<18}" + "".join(f"{SHORT[g]:>9}" for g in GATE_NAMES)
    lines, failures = [header], []
    shown = 0
    for key, results in found.items():
        bad = results is None or not all(g.passed for g in results)
        if results is not None:
            failures += [f"  {key} {g.gate}: {g.detail}" for g in results if not g.passed]
        if shown < limit or bad:
            shown += 1
            if results is None:
                lines.append(f"{key:<18}" + f"{'-':>9}" * len(GATE_NAMES) + "  (not written)")
            else:
                lines.append(f"{key:<18}" + "".join(f"{'ok' if g.passed else 'FAIL':>9}" for g in results))
    hidden = len(found) - shown
    if hidden > 0:
        lines.append(f"... {hidden} more partition(s), all passed")
    return "\n".join(lines + failures[:60])


def _latest_signed(session: Session, spec: TableSpec, state: PlanState,
                   keys: list[str]) -> dict[str, ledger.LatestWrite | None]:
    """The plan's latest write of each partition, once the definitions judging them are code that
    wrote some partition of the window (and so code the plan's approvals bound, as every write's
    permission asked): else PlanRefused, before any verdict is recorded. Definitions nobody signed
    (a metric loosened to pass what the signed code failed, passed with --defs) recorded passing
    verdicts on failed bytes, which publish then copied (found by an attack)."""
    latest = ledger.latest(session, spec.name, keys, state.plan_id, figures=False)
    wrote = {e.code_identity for e in latest.values() if e is not None}
    if wrote and None not in wrote and spec.code_identity not in wrote:  # None: written before it was recorded
        labels = ", ".join(sorted({w.split("/", 1)[0] for w in wrote if w}))
        raise PlanRefused(
            f"the definitions loaded judge {spec.name} as code {_short(spec.code_identity)}, which wrote none of "
            f"plan {state.plan_id}'s window (written by code version {labels}): its gates are not the ones its "
            "approvals bind",
            fix="reconcile with the definitions that wrote the window (deployed, or passed with --defs)")
    return latest


def _short(identity: str) -> str:
    label, _, digest = identity.partition("/")
    return f"{label} ({digest[:12]})" if digest else label


def _judged(session: Session, spec: TableSpec, scheme: PartitionScheme, state: PlanState,
            latest: dict[str, ledger.LatestWrite | None], actor: str,
            slice_size: int) -> dict[str, list[GateResult] | None]:
    # the gates run again on each latest write: its id and fingerprint, never its earlier figures
    results: dict[str, list[GateResult] | None] = {k: None for k in latest}
    written = [(k, e) for k, e in latest.items() if e is not None]
    for i in range(0, len(written), slice_size):
        part = written[i:i + slice_size]
        results.update(judge(session, spec, scheme, state,
                             {k: (e.write_id, e.fingerprint) for k, e in part}, actor))
        # the source as the gates just compared it: `run --and-publish`'s publish, next in this
        # process, asks it again only if the process let go of the warehouse meanwhile
        remember_compared(session, spec, {k: e.write_id for k, e in part})
    return results


def reconcile(session: Session, spec: TableSpec, scheme: PartitionScheme, state: PlanState,
              actor: str, slice_size: int = SLICE_PARTITIONS, graph: TableGraph | None = None,
              every_current: bool = True) -> Reconciliation:
    """The gates of the plan's window again, on the data as it is now; for a plan over a graph, of
    every table it wrote (`graph`: the loaded definitions). `every_current` False: `current` holds
    only the partitions whose verdicts changed (a reconcile right after the plan's own runs, which
    showed theirs: no statement more when nothing changed)."""
    tables = plan_tables(state, spec, scheme, graph)
    latest = [_latest_signed(session, t, state, list(keys)) for t, _, keys in tables]  # every table's, first
    results = _judged(session, spec, scheme, state, latest[0], actor, slice_size)
    downstream = {t.name: _judged(session, t, s, state, found, actor, slice_size)
                  for (t, s, _), found in zip(tables[1:], latest[1:], strict=True)}
    current: dict[str, dict[str, list[GateResult]]] = {}
    changed: dict[str, dict[str, list[GateResult]]] = {}
    for (t, _, _), found, judged in zip(tables, latest, [results, *downstream.values()], strict=True):
        judged_writes = {k: (e, r) for k, r in judged.items() if r is not None and (e := found.get(k)) is not None}
        differ = {k for k, (e, r) in judged_writes.items() if _differs(e, r)}
        wanted = sorted(judged_writes) if every_current else sorted(differ)
        # a later plan's write of a partition is what its table holds and its checks show: a verdict
        # on this plan's older write shown there failed the check of a write whose gates passed
        # (found by an attack); unless the table holds this write's very bytes again and not the
        # later write's (the later plan rolled back: a rollback restores bytes without a write, and
        # its failed verdict stayed shown on them, found by an attack; a later write of identical
        # bytes is what the table holds too, and its own verdicts stand: found by an attack)
        holding = ledger.latest(session, t.name, wanted, figures=False) if wanted else {}
        current[t.name] = {k: judged_writes[k][1] for k in wanted
                           if (now := holding.get(k)) is not None
                           and (now.write_id == judged_writes[k][0].write_id
                                or (now.fingerprint != judged_writes[k][0].fingerprint
                                    and _holds_its_bytes(judged_writes[k][1])))}
        changed[t.name] = {k: r for k, r in current[t.name].items() if k in differ}
    return Reconciliation(advance(session, state, actor, spec, scheme, graph), results, downstream,
                          {a: parts for a, parts in current.items() if parts},
                          {a: parts for a, parts in changed.items() if parts})


def _holds_its_bytes(results: list[GateResult]) -> bool:
    """Whether the gates found the table holding exactly the judged write's bytes."""
    return any(g.gate == UNCHANGED_SINCE_CHECKED and g.passed for g in results)


def _differs(before: ledger.LatestWrite, after: list[GateResult]) -> bool:
    """Whether the gates' verdicts now are not the ones the write had."""
    return {g.gate: g.passed for g in after} != {gate: passed for gate, (passed, _) in before.gates.items()}
