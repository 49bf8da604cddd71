"""The publish rule, enforced across runs (Dagster's blocking checks only hold inside one run).

A partition may be copied to the published table only if every gate passed on its latest write,
those gates checked exactly the data that write produced, and the data is still that data: in
the copy's transaction its current fingerprint must equal the write's. A partition held by an
active plan is published only with the plan's whole window, once the window reconciled; a plan
over a graph of tables publishes all of them in one transaction (its target's publish does it),
so consumers never see a fixed daily table beside a stale monthly one. A cutover plan's window is
published only once its dual run's streak is met: `shadow_days` consecutive partitions whose shadow
matched the published table, by their sealed results, against published bytes still as they were.
Anything else refuses the whole copy, names the partitions and tables, and leaves consumers on the
last good data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from backfill_assets import faults, lifecycle
from backfill_assets.control import authority, evidence_log, integrity, ledger, record
from backfill_assets.control.ledger import comparisons
from backfill_assets.control.record import PlanState
from backfill_assets.control.snapshots import ensure_snapshots
from backfill_assets.errors import PublishBlocked
from backfill_assets.gates.cutover import Streak, cutover_of, streak
from backfill_assets.gates.results import UNCHANGED_SINCE_CHECKED, Thresholds
from backfill_assets.impact import Impact, consumer_impact, consumer_impact_holds
from backfill_assets.partitions import PartitionScheme
from backfill_assets.permission import code_identity
from backfill_assets.plan.phases import ACTIVE, Hold, Phase
from backfill_assets.publish import published as published_record
from backfill_assets.publish.notify import announce_reopen
from backfill_assets.publish.source_check import source_moved
from backfill_assets.table import TableSpec
from backfill_assets.terminal import NEW_PLAN_FILE, partitions_option
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, fingerprints, fingerprints_like
from backfill_assets.warehouse.grouping import rows_per_partition
from backfill_assets.warehouse.writes import copy_partitions, ensure_table

if TYPE_CHECKING:
    from backfill_assets.graph import TableGraph


@dataclass
class Blockers:
    """What stands between partitions and the published table now (empty `problems`: nothing)."""

    problems: list[str] = field(default_factory=list)
    # key -> (fingerprint now, fingerprint written, write_id)
    changed: dict[str, tuple[Fingerprint, Fingerprint, int]] = field(default_factory=dict)
    plans: list[PlanState] = field(default_factory=list)
    latest: dict[str, ledger.LatestWrite | None] = field(default_factory=dict)  # what publish would copy
    shape: list[str] = field(default_factory=list)  # why the published table cannot hold the partitions
    # the other tables of a plan's graph (`plan_blockers`): asset -> (its spec, its blockers)
    others: dict[str, tuple[TableSpec, Blockers]] = field(default_factory=dict)
    # a cutover plan's dual-run streak, as judged now: plan_id -> streak
    cutover: dict[str, Streak] = field(default_factory=dict)
    # key -> how its source differs from what its gates compared (`source_check`), under publish's locks
    source_moved: dict[str, str] = field(default_factory=dict)

    @property
    def any_changed(self) -> bool:
        return bool(self.changed) or any(other.changed for _, other in self.others.values())


def blockers(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
             graph: TableGraph | None = None, with_graph: bool = False) -> Blockers:
    """Everything that blocks publishing `keys` of `spec` now; reads only (data fingerprints
    included). `with_graph`: `spec` is published as part of its plans' graphs (their target's
    publish copies all of their tables together); otherwise a graph's table is not published alone."""
    found = Blockers()
    keys = list(dict.fromkeys(keys))
    wanted = set(keys)
    for plan in record.active_plans(session, target=spec.name):
        held = [k for k in keys if plan.covers(k, spec.name)]
        if not held:
            continue
        found.plans.append(plan)
        # consumers see what the plan wrote only while its signatures still authorise it
        why = authority.refusal(session, plan.approved, code=code_identity(plan, spec, graph))
        if why:
            found.problems.append(f"plan {plan.plan_id}: {why}")
        name = "" if spec.name == plan.target else f"{spec.name} "
        if plan.hold is not None:
            # held to stop what comes next, and publish is what comes next (a cancelled plan was
            # published by `backfill publish` and by `run --and-publish`: found by an attack)
            found.problems.append(f"{name}{held[0]}..{held[-1]} frozen by plan {plan.plan_id} ({plan.phase}, "
                                  f"{plan.hold}): a {plan.hold} plan does not publish"
                                  + (" until `backfill run` resumes it" if plan.hold is Hold.PAUSED else ""))
        elif plan.phase is not Phase.RECONCILED:
            found.problems.append(f"{name}{held[0]}..{held[-1]} frozen by plan {plan.plan_id} ({plan.phase}): "
                                  "publish reopens only after every gate of the window passed")
        elif not set(plan.keys_of(spec.name)) <= wanted:
            found.problems.append(f"{name}{held[0]}..{held[-1]} belong to plan {plan.plan_id}, whose window "
                                  "is published whole: publish all of it (the sensor or `backfill publish`)")
        elif len(plan.assets) > 1 and not with_graph:
            found.problems.append(f"{name}{held[0]}..{held[-1]} belong to plan {plan.plan_id}, whose tables "
                                  f"({', '.join(plan.assets)}) are published together by {plan.target}'s "
                                  "publish (the sensor or `backfill publish`)")
    # which gates passed, on which bytes: a gate's figures are read only for a cutover plan's streak
    # (a window of thousands of partitions holds tens of thousands of them, ~90 MB of Python at 2,526)
    with_figures = any(cutover_of(plan.approved.plan, spec.name) is not None for plan in found.plans)
    latest = found.latest = ledger.latest(session, spec.name, keys, figures=with_figures)
    for plan in found.plans:
        dual = cutover_streak(session, spec, scheme, plan, latest)
        if dual is None or cut_over(session, plan):
            # once the window was published the cutover is done: the published table now holds the
            # shadow, so a repair's publish again answers to the gates, as any plan's does
            continue
        found.cutover[plan.plan_id] = dual
        if not dual.met:
            found.problems.append(f"{CUTOVER_REFUSED}{plan.plan_id} refused: {dual.line()}")
    now = fingerprints(session, spec.table, spec.columns, scheme, spec.partition_column, keys) \
        if session.engine.table_exists(session, spec.table) else {}
    for key in keys:
        entry = latest[key]
        if entry is None:
            found.problems.append(f"{key}: {spec.name} has no recorded write to publish")
            continue
        if not entry.passed:
            found.problems.append(f"{key}: gate(s) {', '.join(entry.failed) or 'not evaluated'} did not "
                                  "pass on the latest write")
        stale = sorted(g for g, fp in entry.checked.items() if fp != entry.fingerprint.digest)
        if stale:
            found.problems.append(f"{key}: the gates checked other data than the latest write produced")
        owner = next((p for p in found.plans if p.covers(key, spec.name)), None)
        if owner is not None and entry.code_identity != spec.code_identity:
            found.problems.append(f"{key}: written by code {entry.code_identity or 'unknown'}, but plan "
                                  f"{owner.plan_id} is approved for {spec.code_identity}")
        if entry.fingerprint.legacy:
            # a sum of md5s (before the upgrade): other rows with the same sum can be found
            found.problems.append(f"{key}: its write's fingerprint ({entry.fingerprint}) predates sha256 "
                                  "fingerprints and cannot show the data unchanged; write it again (a replay plan)")
            continue
        current = now.get(key, EMPTY)
        if current != entry.fingerprint:
            found.changed[key] = (current, entry.fingerprint, entry.write_id)
            found.problems.append(f"{key}: changed since its gates checked it (now {current}, checked "
                                  f"{entry.fingerprint})")
    planless = [k for k, entry in latest.items() if entry is not None and entry.plan_id is None]
    found.problems += ledger.rewrites_without_plan(session, spec.name, planless)
    found.problems += _kept_by_a_rollback(session, spec, {k: latest[k] for k in planless})
    found.problems += _computed_from_other_bytes(session, spec.name, keys)
    found.problems += _foreign_rows(session, spec, scheme, [k for k in keys
                                                            if not any(p.covers(k, spec.name) for p in found.plans)])
    return found


def _kept_by_a_rollback(session: Session, spec: TableSpec,
                        planless: dict[str, ledger.LatestWrite | None]) -> list[str]:
    """A partition written without a plan that a rollback left computed from the partitions it
    restored (`--keep-computed`), not written since: its figures are of bytes consumers no longer
    see. Published without a plan, consumers read a month that does not add up to the restored days
    beside it (found by an attack); it is recomputed under a plan first."""
    if not planless:
        return []
    found = evidence_log.rows(session, kind="rollback")
    if found and evidence_log.can_verify(session):
        found = evidence_log.verified(session, found)
    out = []
    for key, entry in planless.items():
        by = next((r for r in found if entry is not None and r.seq > entry.seq and isinstance(
            r.payload.get("kept_computed"), dict) and key in (r.payload["kept_computed"].get(spec.name) or ())), None)
        if by is not None:
            out.append(f"{key}: left computed by plan {by.plan_id}'s rollback (--keep-computed, evidence row {by.seq}) "
                       f"from partitions it restored; recompute {spec.name} {key} with a plan whose graph lists it")
    return out


def _computed_from_other_bytes(session: Session, asset: str, keys: Sequence[str]) -> list[str]:
    """What the chain says was computed from other bytes than the ones these partitions hold: each
    write records the partitions it read (`reads`), so this holds whatever definitions are loaded.
    A partition of `asset` whose latest write read a partition written again since (a month computed
    before a plan rewrote its days) would be published beside days it does not add up to; and a
    partition of another table whose latest write read one of `keys` before that one's latest write
    (a published month computed from the days a plan run with definitions without the month
    replaced) would be left beside days it does not add up to once these are published (found by an
    attack: the graph was asked of the loaded definitions only). Writes of plans rolled back do not
    count: their rollback put back the bytes before them."""
    top = evidence_log.last_before_reading(session)
    writes = [c for c in ledger.chained_writes(session, top) if c.kind == "write"] if top else []
    if not any(c.reads for c in writes):
        return []
    plans = record.all_plans(session)
    ended = {p.plan_id for p in plans if p.phase is Phase.ROLLED_BACK}
    active = {p.plan_id: p for p in plans if p.phase in ACTIVE}
    newest: dict[tuple[str, str], ledger.Chained] = {}
    for c in sorted(writes, key=lambda c: c.seq):
        if c.plan_id is None or c.plan_id not in ended:
            newest.update({(c.table, k): c for k in c.keys})
    out = []
    for key in keys:
        own = newest.get((asset, key))
        if own is None:
            continue
        for parent in sorted(own.reads):
            since = sorted(u for u in own.read_of(parent, key)
                           if (w := newest.get((parent, u))) is not None and w.seq > own.seq)
            if since:
                out.append(f"{key}: computed from {parent} {since[0]} (evidence row {own.seq}), which was written "
                           f"again since (evidence row {newest[(parent, since[0])].seq}); compute {asset} {key} "
                           f"again from it with a plan whose graph lists {asset}")
                break
    wanted = set(keys)
    for (table, key), c in sorted(newest.items()):
        if table == asset:
            continue
        since = sorted(u for u in c.read_of(asset, key) & wanted
                       if (w := newest.get((asset, u))) is not None and w.seq > c.seq)
        if since:
            writer = newest[(asset, since[0])]
            before = (f"{since[0]}: {table} {key} was computed from it (evidence row {c.seq}) before its latest "
                      f"write (evidence row {writer.seq}); ")
            owner = active.get(writer.plan_id) if writer.plan_id else None
            if owner is not None and owner.hold is not Hold.CANCELLED and owner.covers(key, table):
                # the plan that rewrote the day lists the month: it computes it again before its publish
                # (mid-run, the advice to roll it back was shown on every publish the UI or automation tried)
                out.append(before + f"plan {owner.plan_id} computes {table} {key} again before it publishes both "
                           f"(`backfill run {owner.plan_id}`)")
                continue
            out.append(before + f"publishing {asset} without it would "
                       f"leave consumers {table} computed from bytes they no longer see: roll back the plan that "
                       f"wrote {since[0]} and replay with a plan whose graph lists {table} (definitions that "
                       "declare it)")
    return out


def _foreign_rows(session: Session, spec: TableSpec, scheme: PartitionScheme, free: Sequence[str]) -> list[str]:
    """Partitions published outside any plan whose published table holds rows this tool never
    published (a team's table adopted as `publish_as`, a cutover's old side, rows another writer
    added after the load): consumers read them, and only a plan may replace them."""
    if not free or not session.engine.table_exists(session, spec.publish_table):
        return []
    # a count first (one pass, usually nothing: new partitions), then the sealed publications of
    # only the partitions that hold rows
    held = {k: n for k, n in rows_per_partition(session, spec.publish_table, spec.partition_column, scheme,
                                                free).items() if n}
    ours = published_record.latest(session, spec, list(held)) if held else {}
    # a rollback's restore is the last publication of what it put back, which may be rows backfill
    # never published: a cutover published and rolled back left the old side's rows replaceable by a
    # publish without a plan, which had refused them before the cutover (found by an attack)
    restored = {k: p.fingerprint for k, p in ours.items() if p.write_id is None}
    given = published_record.given_by_a_publish(session, spec, restored)
    ours = {k: p for k, p in ours.items() if k not in restored or k in given}
    return [f"{key}: {spec.publish_table} holds {n} row(s) of it that backfill never published, which consumers "
            f"read; replacing them takes a replay plan (`backfill plan new {NEW_PLAN_FILE} --target {spec.name}`)"
            for key, n in held.items() if key not in ours]


def cut_over(session: Session, plan: PlanState) -> bool:
    """The plan's approved version was published (its chain row, checked against its keyed hash)."""
    rows = evidence_log.rows(session, plan.plan_id, "published")
    return any(r.kind == "published" and r.plan_id == plan.plan_id and r.payload.get("sha256") == plan.approved_sha256
               for r in evidence_log.verified(session, rows))


def cutover_streak(session: Session, spec: TableSpec, scheme: PartitionScheme, plan: PlanState,
                   latest: dict[str, ledger.LatestWrite | None] | None = None, *,
                   recheck: bool = True) -> Streak | None:
    """A cutover plan's streak over its window (None for another plan, or another table of it), from
    the sealed results of each partition's latest write (`latest` when already read). `recheck`: a
    comparison made against published bytes that have changed since counts as not made, so the
    published partitions are fingerprinted again, one pass over the window (cutover plans only);
    after the cutover the published table holds the shadow, and the streak is the one it met."""
    scenario = cutover_of(plan.approved.plan, spec.name)
    if scenario is None or scenario.shadow_days is None:
        return None
    keys = list(plan.keys_of(spec.name))
    if latest is None or not set(keys) <= set(latest):
        latest = ledger.latest(session, spec.name, keys, plan.plan_id)
    found = comparisons({k: latest[k] for k in keys})
    if not recheck:
        return streak(keys, found, scenario.shadow_days)
    exists = bool(found) and session.engine.table_exists(session, spec.publish_table)
    now = fingerprints(session, spec.publish_table, spec.columns, scheme, spec.partition_column, list(found)) \
        if exists else {}
    stale = {k: f"the published partition changed since it was compared (now {now.get(k, EMPTY)})"
             for k, c in found.items() if c.published_fingerprint != now.get(k, EMPTY).digest}
    # and it is what consumers were given: a published partition edited since its last publication
    # (the insider typed the new pipeline's figures into the old side) matched, and the cutover was
    # published on a comparison with no pipeline's bytes (found by an attack); partitions backfill
    # never published (the old pipeline's own) have no record to compare with
    given = {k: p.fingerprint for k, p in published_record.latest(session, spec, list(found)).items()}
    legacy = {k: fp for k, fp in given.items() if fp.legacy}
    seen = {**now, **(fingerprints_like(session, spec.publish_table, spec.columns, scheme, spec.partition_column,
                                        legacy) if legacy and exists else {})}
    stale.update({k: f"{EDITED_SINCE_PUBLISHED} (now {seen.get(k, EMPTY)}, published {fp})"
                  for k, fp in given.items() if k not in stale and seen.get(k, EMPTY) != fp})
    return streak(keys, found, scenario.shadow_days, stale)


def plan_blockers(session: Session, state: PlanState, spec: TableSpec, scheme: PartitionScheme,
                  graph: TableGraph | None = None) -> Blockers:
    """What blocks publishing a plan now: its target's window and, for a plan over a graph, every
    other table's partitions, as the target's publish would copy them together (reads only)."""
    found = blockers(session, spec, scheme, list(state.partition_keys), graph, with_graph=True)
    for asset in state.assets[1:]:
        if graph is None or asset not in graph.tables:
            found.problems.append(f"{asset}: not in the loaded definitions, so it cannot be published with "
                                  f"{state.target}")
            continue
        other = blockers(session, graph.spec(asset), graph.scheme(asset), list(state.keys_of(asset)), graph,
                      with_graph=True)
        found.problems += [f"{asset} {p}" for p in other.problems]
        found.others[asset] = (graph.spec(asset), other)
    # and publish's own last check, the source's: the sensor asked without it, requested three publish
    # runs bound to fail over a late row, and `status` named `backfill publish`, not the reconcile that
    # finds the row (found by an attack)
    if not found.problems:
        refuse_moved_source(session, spec, scheme, list(state.keys_of(spec.name)), found)
    for asset, (other_spec, other) in found.others.items():
        if not found.problems and graph is not None:
            refuse_moved_source(session, other_spec, graph.scheme(asset), list(state.keys_of(asset)), other)
            found.problems += [f"{asset} {p}" for p in other.problems]
    return found


@dataclass(frozen=True)
class Published:
    rows: int
    partitions: list[str]
    plans_published: list[str]
    # what consumers see change: the published table before the copy against after; None when it
    # could not be computed (a report: publish does not depend on it)
    impact: Impact | None
    impact_error: str = ""
    # published partitions someone had edited since their last publish, which this one replaced
    replaced_edits: dict[str, tuple[Fingerprint, Fingerprint]] = field(default_factory=dict)
    # the other tables of a plan's graph, published in the same transaction: asset -> keys copied
    graph: dict[str, list[str]] = field(default_factory=dict)
    # what consumers of each of those tables see change (None: not computed, and why)
    graph_impact: dict[str, tuple[Impact | None, str]] = field(default_factory=dict)


class _Refused(Exception):
    def __init__(self, found: Blockers, spec: TableSpec) -> None:
        self.found = found
        self.spec = spec


@dataclass
class _Table:
    """One table a publish copies: the one asked for first, then its plans' graph."""

    spec: TableSpec
    scheme: PartitionScheme
    keys: list[str]
    impact: Impact | None = None
    impact_error: str = ""
    found: Blockers | None = None


def _tables(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: list[str],
            graph: TableGraph | None) -> list[_Table]:
    """The table asked for, and every other table of the graph of a plan whose target it is and whose
    window `keys` hold: a graph is published whole, in one transaction."""
    tables = [_Table(spec, scheme, keys)]
    wanted = set(keys)
    for plan in record.active_plans(session, target=spec.name):
        if plan.target != spec.name or len(plan.assets) < 2 or not set(plan.partition_keys) <= wanted:
            continue
        if graph is None:
            raise PublishBlocked(f"plan {plan.plan_id} covers {', '.join(plan.assets)}, which are published "
                                 "together, and this publish was given no definitions to find them in",
                                 fix="publish through the definitions that declare them (the sensor or "
                                     "`backfill publish PLAN`)")
        for asset in plan.assets[1:]:
            if asset not in graph.tables:
                raise PublishBlocked(f"plan {plan.plan_id} covers {asset}, which the loaded definitions do not "
                                     "declare", fix="load the definitions that declare every table of the plan")
            if all(t.spec.name != asset for t in tables):
                tables.append(_Table(graph.spec(asset), graph.scheme(asset), list(plan.keys_of(asset))))
    return tables


def publish(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
            actor: str, graph: TableGraph | None = None) -> Published:
    """Copy the partitions into the published table in one transaction, or refuse before any write;
    with the other tables of an active plan over a graph (`graph`: the loaded definitions)."""
    keys = list(dict.fromkeys(keys))
    tables = _tables(session, spec, scheme, keys, graph)
    with session.transaction():
        for table in tables:
            ensure_table(session, table.spec, table.spec.publish_table)
    # the impact is computed before the locks, where its cost holds no one up, and only checked
    # under them (two hash passes): if either table moved in between, it is left out, not redone
    # there (a report must neither hold writers up nor fail the publish)
    for table in tables:
        table.impact, table.impact_error = _impact_or_why(session, table.spec, table.scheme, table.keys)
    # what consumers will see rests on the record: all of it against the keyed chain first (a row
    # removed or hidden is found only this way), outside the lock, then its links again under it
    integrity.verify_record(session)
    try:
        with session.transaction():
            # publishes (and rollbacks) of one table take turns: on a server engine two copies at
            # once would each delete what the other had not committed yet, then both insert; the
            # tables of a graph in one order, so two publishes never wait on each other in a circle
            for table in sorted(tables, key=lambda t: t.spec.publish_table):
                session.lock(publish_lock(table.spec))
            # the rows of the plans its window holds before the tables and the chain, the order every
            # writer takes them in: publish appended to the chain before it moved the plan, a cancel
            # took the plan's row before appending, and PostgreSQL killed one of them, `deadlock
            # detected` (found by an attack); only those plans (another's row, taken here, met an
            # approval of that plan holding the chain: found by the next attack)
            moved = {p.plan_id for t in tables for p in record.active_plans(session, target=t.spec.name)
                     if any(p.covers(k, t.spec.name) for k in t.keys)}
            for plan_id in sorted(moved):
                record.get(session, plan_id, exclusive=True)
            for table in sorted(tables, key=lambda t: t.spec.table):
                session.hold_table(table.spec.table)  # no writer may change a target between check and copy
            for table in sorted(tables, key=lambda t: t.spec.publish_table):
                # made above (committed) and gone now: another session dropped it, and one it makes
                # again after this read would be neither held nor checked against the contract (on
                # PostgreSQL a `net_revenue VARCHAR` made while publish waited took the DECIMAL values
                # as their texts, all a fingerprint sees: found by an attack)
                if not session.engine.table_exists(session, table.spec.publish_table):
                    raise PublishBlocked(
                        f"publish of {spec.publish_as} refused, consumers keep the last good data: "
                        f"{table.spec.publish_table} was dropped while publish began",
                        fix="find who drops it (a job, a person); then publish again: it is made from the contract")
                # nor add rows of its own to what consumers read (see `_foreign_rows`), nor change it
                session.hold_table(table.spec.publish_table)
            # and the chain's turn, the last lock every writer takes, before the verdicts are read:
            # a reconcile's failing results committed after this read and before the commit had the
            # partition published over its latest verdict (found by an attack)
            evidence_log.hold(session)
            evidence_log.check_links(session)
            for table in tables:
                found = table.found = blockers(session, table.spec, table.scheme, table.keys, graph,
                                            with_graph=len(tables) > 1)
                found.shape = published_record.shape_problems(session, table.spec)
                if found.shape:
                    found.problems.append(f"{table.spec.publish_table} cannot hold the contract's partitions: "
                                          + "; ".join(found.shape[:3]))
                if not found.problems:
                    refuse_moved_source(session, table.spec, table.scheme, table.keys, found)
                if found.problems:
                    raise _Refused(found, table.spec)
            for table in tables:
                if table.impact is not None and not consumer_impact_holds(session, table.spec, table.scheme,
                                                                          table.impact):
                    table.impact, table.impact_error = None, (
                        "the published or target table changed while it was computed; `backfill diff PLAN` "
                        "reports the plan's impact")
            published = _copy(session, tables, actor)
    except published_record.CopyChanged as changed:
        raise PublishBlocked(f"publish of {spec.publish_as} refused, consumers keep the last good data: {changed}",
                             fix="drop the triggers, rules and foreign keys on the published tables that change "
                                 "other tables, then publish again" if changed.at_commit else
                                 "make the published table's columns what the contract declares (or drop it: "
                                 "publish creates it from the contract), then publish again") from None
    except _Refused as refused:
        record_changed(session, refused.spec, refused.found, actor)
        problems = refused.found.problems
        where = spec.publish_as if refused.spec is spec else f"{spec.publish_as} with {refused.spec.publish_as}"
        error = PublishBlocked(f"publish of {where} refused, consumers keep the last good data: "
                               + "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)"
                                                            if len(problems) > 5 else ""),
                               fix=_fix(refused.found, refused.spec))
        # the refused table's partitions changed since its gates ran, by its asset: the UI shows them
        error.changed = {refused.spec.name: refused.found.changed}  # type: ignore[attr-defined]
        raise error from None
    return dataclasses.replace(published, impact_error=tables[0].impact_error)


def plan_sources_moved(session: Session, state: PlanState, spec: TableSpec, scheme: PartitionScheme,
                       graph: TableGraph | None) -> list[str]:
    """`KEY: TABLE changed since its gates compared it (...)` for each partition of the plan's tables
    (the month's prefixed by its asset) whose source is not what its latest verdicts compared, the
    plan's other checks aside: what `plan close` asks before confirming a published window (it closed
    over a late row, and once closed nothing compares the window again: found by an attack)."""
    tables = [(spec, scheme)] + [(graph.spec(a), graph.scheme(a)) for a in state.assets[1:]
                                 if graph is not None and a in graph.tables]
    out = []
    for table, table_scheme in tables:
        found = Blockers(plans=[state])
        refuse_moved_source(session, table, table_scheme, list(state.keys_of(table.name)), found)
        out += [("" if table.name == state.target else f"{table.name} ") + p for p in found.problems]
    return out


SOURCE_MOVED = "changed since its gates compared it"  # a plan's partition whose source moved (`status` names reconcile)


def refuse_moved_source(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
                       found: Blockers) -> None:
    """The partitions an active plan holds are published only while their source is what their gates
    compared (`source_check`), by its plan's thresholds; the bytes' checks passed."""
    thresholds = {p.plan_id: Thresholds.from_plan(p.approved.plan) for p in found.plans}
    held = {k: thresholds[owner.plan_id] for k in keys
            if (owner := next((p for p in found.plans if p.covers(k, spec.name)), None)) is not None}
    found.source_moved = source_moved(session, spec, scheme, held, found.latest) if held else {}
    found.problems += [f"{key}: {spec.source_table} {SOURCE_MOVED} ({why})" for key, why in found.source_moved.items()]


def publish_lock(spec: TableSpec) -> str:
    """The lock every writer of the published table holds: publish, and rollback's restore."""
    return f"publish:{spec.publish_table}"


def _impact_or_why(session: Session, spec: TableSpec, scheme: PartitionScheme,
                   keys: list[str]) -> tuple[Impact | None, str]:
    try:
        return consumer_impact(session, spec, scheme, keys), ""
    except Exception as exc:  # noqa: BLE001 - a report never blocks a publish the gates allow
        return None, f"{type(exc).__name__}: {exc}"


def _fix(found: Blockers, spec: TableSpec) -> str:
    if found.shape:
        return "make the published table's columns what the contract declares (or drop it: publish creates it)"
    waiting = next(((pid, s) for pid, s in found.cutover.items() if not s.met), None)
    if waiting is not None and only_cutover(found.problems):
        return cutover_fix(*waiting)
    if found.changed:
        key = next(iter(found.changed))
        return _rerun(found, spec, key, "re-run the changed partitions through the plan")
    owner = next((p for p in found.plans if any(p.covers(k, spec.name) for k in found.source_moved)), None)
    if owner is not None:
        return (f"compare the window with the source again, `backfill reconcile {owner.plan_id}`: it names the "
                "partitions to run again")
    return _rerun(found, spec, None, "fix and re-run the failing partitions, then publish again")


def _rerun(found: Blockers, spec: TableSpec, key: str | None, what: str) -> str:
    """A re-run named as a command that runs in the state the partitions are in: through the active
    plan holding them, by its id; a cancelled plan only rolls back; partitions no active plan holds
    (plan-free, or their plan rolled back or closed) are written again only by a new plan. The
    advice named `backfill run PLAN` whatever held them, and a rolled-back plan's run is refused
    (found by an attack)."""
    owner = next((p for p in found.plans if key is None or p.covers(key, spec.name)), None)
    partitions = partitions_option([key]) if key is not None else "--partitions KEY"
    asset = "" if owner is None or spec.name == owner.target else f" --asset {spec.name}"
    if owner is None:
        draft = f"`backfill plan new {NEW_PLAN_FILE} --target {spec.name}`"
        if key is None:  # a partition never written is materialized plan-free; one written is replayed
            return (f"write the failing partitions again and let their gates pass (a partition written before "
                    f"is replayed under a new plan, {draft}), then publish again")
        return f"{key}: no active plan holds it; write it again with a new replay plan ({draft}), then publish again"
    if owner.hold is Hold.CANCELLED:
        return f"plan {owner.plan_id} was cancelled: {lifecycle.rollback_named_by_status(owner.plan_id)}"
    if not owner.past_proof:  # before its proof passed, a run of named partitions is refused
        return f"plan {owner.plan_id} is {owner.phase}: `backfill status {owner.plan_id}` names its next run"
    return f"{what} (`backfill run {owner.plan_id}{asset} {partitions}`), or roll back (`backfill status " \
           f"{owner.plan_id}` names the rollback that applies)"


CUTOVER_REFUSED = "cutover by plan "
EDITED_SINCE_PUBLISHED = "the published partition was edited since its last publication"


def only_cutover(problems: list[str]) -> bool:
    """Nothing but a cutover's streak blocks the publish."""
    return bool(problems) and all(p.startswith(CUTOVER_REFUSED) for p in problems)


def cutover_fix(plan_id: str, dual: Streak) -> str:
    """What lets a cutover waiting for its streak go on: the partition that reset it, compared again
    once the cause is fixed (a re-run through the plan), or the way out."""
    if dual.broken_by is None:
        return f"run the rest of the dual run: `backfill run {plan_id}`"
    key, why = dual.broken_by
    if why.startswith(EDITED_SINCE_PUBLISHED):
        # a re-run compares again with the same edited bytes: only bytes a publish gave consumers
        # count, and an insider's edit and a pipeline writing the published table outside backfill
        # are the same bytes to the record
        return (f"{key}'s published rows are not the ones backfill published there: put its last publication "
                f"back (from backup) and re-run it, `backfill run {plan_id} {partitions_option([key])}`; if a pipeline "
                f"rewrote it outside backfill, roll back, `backfill rollback {plan_id}`, and replay {key} with a plan "
                "of its own (its publish seals the day, its impact shows what consumers see change) before "
                "planning the cutover again; consumers keep the old pipeline's data meanwhile")
    return (f"the streak counts from {key}: find why the shadow differs from the published table there, fix "
            f"the cause and re-run it, `backfill run {plan_id} {partitions_option([key])}`, or roll back, "
            f"`backfill rollback {plan_id}`; consumers keep the old pipeline's data meanwhile")


def record_changed(session: Session, spec: TableSpec, found: Blockers, actor: str) -> None:
    """A partition changed after its gates ran: a failed `unchanged_since_checked`, for the UI too."""
    for other_spec, other in found.others.values():
        record_changed(session, other_spec, other, actor)
    if not found.changed:
        return
    from backfill_assets.gates.verdicts import unchanged_result

    plan_of = {k: p.plan_id for p in found.plans for k in found.changed if p.covers(k, spec.name)}
    with session.transaction():
        for plan_id in sorted(set(plan_of.values()) | ({None} if len(plan_of) < len(found.changed) else set()),
                              key=lambda p: p or ""):
            judged = [(write_id, key, now, [unchanged_result(key, now, written)])
                      for key, (now, written, write_id) in found.changed.items() if plan_of.get(key) == plan_id]
            ledger.record_results(session, plan_id=plan_id, asset=spec.name, judged=judged, actor=actor,
                                  summary={"table": spec.name, "partitions": len(judged), "publish_refused": True})
        for plan_id in sorted(set(plan_of.values())):
            evidence_log.append(session, plan_id=plan_id, kind="publish_refused", actor=actor, payload={
                "gate": UNCHANGED_SINCE_CHECKED,
                "partitions": {k: {"now": str(n), "checked": str(w)} for k, (n, w, _) in found.changed.items()
                               if plan_of.get(k) == plan_id}})


def _copy(session: Session, tables: list[_Table], actor: str) -> Published:
    """Every table's copy, proven, then each plan moved to published once: one transaction."""
    at = evidence_log.now_iso()
    copied: dict[str, int] = {}
    replaced: dict[str, tuple[Fingerprint, Fingerprint]] = {}
    for table in tables:
        assert table.found is not None
        copied[table.spec.name], edits = _copy_table(session, table.spec, table.scheme, table.found, actor, at)
        if table is tables[0]:
            replaced = edits
    plans: dict[str, PlanState] = {}
    for table in tables:
        for plan in table.found.plans if table.found else []:
            plans.setdefault(plan.plan_id, plan)
    impacts = {t.spec.name: t.impact for t in tables}
    done = []
    for plan in plans.values():
        seen = impacts.get(plan.target)
        seen = seen.of(plan.plan_id, plan.partition_keys) if seen is not None else None
        graph = {a: {"table": t.spec.publish_as, "partitions": len(plan.keys_of(a)), "rows": copied.get(a),
                     "impact": (t.impact.of(plan.plan_id, plan.keys_of(a)).totals if t.impact else None)}
                 for a in plan.assets[1:] for t in tables if t.spec.name == a}
        root = next(t for t in tables if t.spec.name == plan.target or t is tables[0])
        dual = root.found.cutover.get(plan.plan_id) if root.found else None
        evidence_log.append(session, plan_id=plan.plan_id, kind="published", actor=actor, payload={
            "table": root.spec.publish_as, "partitions": len(plan.partition_keys),
            "first": plan.partition_keys[0], "last": plan.partition_keys[-1], "rows": copied.get(plan.target),
            "sha256": plan.approved_sha256, "impact": seen.totals if seen else None,
            **({"graph": graph} if graph else {}), **({"cutover": dual.to_json()} if dual else {})})
        lifecycle.published(session, plan, actor, with_graph=bool(graph))
        # what consumers will see change in every table the publish copies: the month a graph plan
        # recomputed changes for its readers as the days do (the notice told the days alone)
        told = seen.summary() if seen else None
        others = {a: (t.impact.of(plan.plan_id, plan.keys_of(a)).summary() if t.impact is not None
                      else {"table": t.spec.publish_as, "not_computed": t.impact_error})
                  for a in plan.assets[1:] for t in tables if t.spec.name == a}
        if others:
            told = {**(told or {}), "graph": others}
        announce_reopen(session, plan.approved.plan, actor, told, dual)
        done.append(plan.plan_id)
    faults.checkpoint("publish.before_commit")
    first = tables[0]
    return Published(copied[first.spec.name], first.keys, done, first.impact, replaced_edits=replaced,
                     graph={t.spec.name: t.keys for t in tables[1:]},
                     graph_impact={t.spec.name: (t.impact, t.impact_error) for t in tables[1:]})


def _copy_table(session: Session, spec: TableSpec, scheme: PartitionScheme, found: Blockers, actor: str,
                at: str) -> tuple[int, dict[str, tuple[Fingerprint, Fingerprint]]]:
    keys, plans = list(found.latest), found.plans
    replaced = published_record.edited(session, spec, scheme, keys)
    if replaced:  # consumers' data was changed outside backfill: said, and put right by this copy
        evidence_log.append(session, plan_id=None, kind="published_edited", actor=actor, payload={
            "table": spec.publish_as, "partitions": {k: {"now": str(n), "published": str(p)}
                                                      for k, (n, p) in replaced.items()}})
    for plan in plans:
        held = [k for k in keys if plan.covers(k, spec.name)]
        ensure_snapshots(session, spec, scheme, spec.publish_table, plan.plan_id, held, at, actor)
    copied = copy_partitions(session, spec, scheme, spec.table, spec.publish_table, keys,
                             between=lambda: faults.checkpoint("publish.between_delete_and_insert"))
    # the copy is proven: the published partitions hold exactly the bytes the gates checked
    checked = {k: (e.fingerprint, e.write_id, e.plan_id) for k, e in found.latest.items() if e is not None}
    published_record.prove_and_record(session, spec, scheme, checked, actor)
    return copied, replaced
