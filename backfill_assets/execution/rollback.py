"""Ending a plan: rollback (every partition it wrote, target and published, back to its snapshot)
and withdraw (a plan that wrote nothing).

Rollback is whole or refused. It first checks that every partition the plan wrote has its snapshot
record and rows; then one transaction restores both tables, and the restored fingerprints must
equal those taken before the plan's first write, or nothing changes. It is refused, naming the
writer, when a later writer (another plan, or an incremental run) has since written the same
partitions.

Rolling back a plan whose data consumers already saw (published, repairing, closed) changes what
they see: it needs the plan's own approvals, if they still hold, or signatures of the policy's
approvers over a `rollback` statement; the downstream owners are told, and it is a chain row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backfill_assets import faults, lifecycle
from backfill_assets.control import authority, evidence_log, integrity, ledger, record
from backfill_assets.control.names import SCHEMA
from backfill_assets.control.record import PlanState
from backfill_assets.control.snapshots import NO_RECORD, incomplete, refill_from_published, restore, snapshotted
from backfill_assets.errors import ForgedRecord, PlanRefused, RollbackRefused, UsageError, WindowError
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.phases import SEEN_BY_CONSUMERS, Phase
from backfill_assets.publish import published as published_record
from backfill_assets.publish.notify import announce_end
from backfill_assets.publish.rule import publish_lock
from backfill_assets.table import TableSpec
from backfill_assets.trust.root import Candidate
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints_like
from backfill_assets.warehouse.state_store import ledger as ledger_store
from backfill_assets.warehouse.writes import ensure_table

if TYPE_CHECKING:
    from backfill_assets.graph import TableGraph


@dataclass
class RollbackReport:
    plan_id: str
    dry_run: bool
    tables: dict[str, dict[str, tuple[Fingerprint, Fingerprint]]] = field(default_factory=dict)
    refilled: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # table: (from, keys)
    kept: dict[str, list[str]] = field(default_factory=dict)  # computed since, left as it is: table: keys

    def lines(self, limit: int = 20) -> list[str]:
        verb = "would restore" if self.dry_run else "restored"
        refill = "would refill" if self.dry_run else "refilled"
        out = [f"{refill} the snapshot of {len(keys)} partition(s) of {table} ({', '.join(keys[:3])}"
               f"{', ...' if len(keys) > 3 else ''}) from {source}, whose rows are exactly the ones taken (their "
               "rows in the snapshot were gone)" for table, (source, keys) in self.refilled.items()]
        for table, parts in self.tables.items():
            span = f" ({next(iter(parts))}..{list(parts)[-1]})" if parts else ""
            if not self.dry_run:
                out.append(f"{verb} {len(parts)} partition(s) of {table}{span}; every fingerprint equals "
                           "the one taken before the plan's first write")
                continue
            out.append(f"{verb} {len(parts)} partition(s) of {table}{span}:")
            for key, (before, now) in list(parts.items())[:limit]:
                out.append(f"  {key}: now {now} -> {before}" + ("  (unchanged)" if now == before else ""))
            if len(parts) > limit:
                out.append(f"  ... {len(parts) - limit} more")
        for table, keys in self.kept.items():
            out.append(f"{'would leave' if self.dry_run else 'left'} {len(keys)} partition(s) of {table} "
                       f"({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''}) as computed from the partitions "
                       "restored (--keep-computed): recompute them under a plan whose graph lists the table")
        out.append(f"plan {self.plan_id} " + ("unchanged (dry run)" if self.dry_run else "is rolled_back"))
        return out


def written_keys(session: Session, spec: TableSpec, state: PlanState) -> list[str]:
    """Every partition of `spec` the plan wrote or snapshotted, whatever its window says now."""
    wrote = ledger_store.keys_of_plan(session, state.plan_id, spec.name)
    return sorted(wrote | set(snapshotted(session, state.plan_id, spec.table)))


def _refuse_later_writers(session: Session, state: PlanState, keys: list[str], asset: str | None = None) -> None:
    _refuse_writers(state, later_writers(session, state, keys, asset))


def _refuse_writers(state: PlanState, later: Sequence[tuple[str, str]]) -> None:
    """(writer, partition) of writes after the plan's: restoring its snapshots would erase them."""
    if later:
        who = sorted({w for w, _ in later})
        raise RollbackRefused(
            f"{', '.join(who)} wrote {len(later)} of plan {state.plan_id}'s partitions since "
            f"(first {later[0][1]}); restoring would erase that work",
            fix=f"roll back {who[0]} first, or replay the window with a new plan")


def later_writers(session: Session, state: PlanState, keys: list[str],
                  asset: str | None = None) -> list[tuple[str, str]]:
    """Who wrote these partitions after the plan's first write. A later plan since rolled back does
    not count: its rollback restored its snapshot, which is this plan's rows (and it could itself
    be rolled back only while nobody had written after it)."""
    if not keys:
        return []
    return [(str(w), str(k)) for w, k in ledger_store.writers_since(
        session, asset or state.target, keys, state.plan_id, Phase.ROLLED_BACK.value)]




def authorisation(session: Session, state: PlanState, signatures: Sequence[Candidate], *,
                  published: bool = False, keep: Sequence[str] = ()) -> dict[str, Any]:
    """Who authorises the rollback: nobody needs to while consumers never saw the plan's data;
    after a publish, the plan's approvals if they still hold, else the signatures given, over a
    statement naming the tables `keep` leaves as they are, if any. `published`: the plan copied
    partitions into the published table (it may since have gone back to repairing, reconciled or
    running, and consumers still see its data)."""
    if state.phase not in SEEN_BY_CONSUMERS and not published:
        return {"by": "not published: no approval needed"}
    version = state.approved
    if authority.refusal(session, version, code=None) is None:
        return {"by": "the plan's approvals, which still hold",
                "approvers": authority.plan_tally(session, version, code=None).approvers}
    counted = authority.rollback_tally(session, version, list(signatures), keep)
    if not counted.approved:
        raise RollbackRefused(
            f"plan {state.plan_id} is {state.phase}: rolling it back changes what consumers see, and its own "
            f"approvals no longer hold; the rollback needs approvers' signatures"
            + (f" over a statement naming what it leaves computed ({authority.kept_text(keep)})" if keep else "")
            + f": {counted.describe()}",
            fix=f"have approvers sign `backfill rollback {state.plan_id} --print-statement"
                f"{authority.keep_options(keep)}`, then pass "
                "--statement FILE --signature NAME=SIG (or --sign NAME=KEY)")
    return {"by": "rollback signatures", "approvers": counted.approvers,
            "statement_sha256": hashlib.sha256(counted.counted[0].statement.message).hexdigest()}


def _whole(session: Session, spec: TableSpec, scheme: PartitionScheme,
           state: PlanState, report: RollbackReport) -> tuple[list[str], list[str]]:
    """The target and published partitions the plan wrote, each with its snapshot, or refuse. A
    target partition whose snapshot rows are gone is restored from the published copy where that
    copy is exactly the rows taken (never published over: the fingerprint sealed with the snapshot
    says so), its snapshot rows refilled from there first (`report.refilled`; not on a dry run)."""
    keys = sorted(written_keys(session, spec, state), key=scheme.position)
    _refuse_later_writers(session, state, keys, spec.name)
    published = sorted(snapshotted(session, state.plan_id, spec.publish_table), key=scheme.position)
    lacking = incomplete(session, spec, scheme, state.plan_id, spec.table, keys)
    refilled = refill_from_published(session, spec, scheme, state.plan_id,
                                     [k for k, why in lacking.items() if why != NO_RECORD],
                                     write=not report.dry_run) if lacking else []
    if refilled:
        report.refilled[spec.table] = (spec.publish_table, refilled)
    problems = [f"{k}: {why}" for k, why in lacking.items() if k not in refilled] + \
        [f"{k}: {why}" for k, why in incomplete(session, spec, scheme, state.plan_id, spec.publish_table,
                                                published).items()]
    if problems:
        raise RollbackRefused(f"plan {state.plan_id} cannot be rolled back whole: "
                              + "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5
                                                           else ""),
                              fix="nothing was changed; restore backfill_snapshots (and the control "
                                  "record) from backup before rolling back")
    return keys, published


def _tables(state: PlanState, spec: TableSpec, scheme: PartitionScheme,
            graph: TableGraph | None) -> list[tuple[TableSpec, PartitionScheme]]:
    """Every table the plan wrote: the target, then the tables of its graph (whole or refused)."""
    from backfill_assets.execution.advance import plan_tables

    missing = [a for a in state.assets[1:] if graph is None or a not in graph.tables]
    if missing:
        raise RollbackRefused(f"plan {state.plan_id} also wrote {', '.join(missing)}, which the loaded definitions "
                              "do not declare; a rollback restores every table of the plan or none",
                              fix="load the definitions that declare them (--defs)")
    return [(s, sc) for s, sc, _ in plan_tables(state, spec, scheme, graph)]


def rollback(session: Session, spec: TableSpec, scheme: PartitionScheme, state: PlanState, actor: str,
             *, dry_run: bool = False, signatures: Sequence[Candidate] = (),
             graph: TableGraph | None = None, keep_computed: Sequence[str] = ()) -> RollbackReport:
    """Every table the plan wrote (its target and its graph's tables, `graph`: the loaded
    definitions), target and published, back to the snapshots, in one transaction. `keep_computed`:
    tables computed since from the plan's partitions that the operator leaves as they are (each
    named; otherwise such a table refuses the rollback)."""
    if state.phase in (Phase.ROLLED_BACK, Phase.WITHDRAWN):
        raise RollbackRefused(f"plan {state.plan_id} is already {state.phase}", fix="nothing to do")
    report = RollbackReport(state.plan_id, dry_run)
    tables = _tables(state, spec, scheme, graph)
    keep = _kept_tables(keep_computed, graph, [t.name for t, _ in tables])
    if dry_run:
        # what it says it would restore is what the chain recorded, as the rollback checks it
        top = evidence_log.last_before_reading(session)  # a run of the plan may be writing meanwhile
        whole = [(table_spec, table_scheme, *_whole(session, table_spec, table_scheme, state, report))
                 for table_spec, table_scheme in tables]
        report.kept = _refuse_what_the_ledger_lost(session, state, whole, top, graph, keep)
        for table_spec, table_scheme, keys, published in whole:
            for table, table_keys in {table_spec.table: keys, table_spec.publish_table: published}.items():
                expected = snapshotted(session, state.plan_id, table)
                if table_keys and session.engine.table_exists(session, table):
                    now = fingerprints_like(session, table, table_spec.columns, table_scheme,
                                            table_spec.partition_column, {k: expected[k] for k in table_keys})
                    report.tables[table] = {k: (expected[k], now[k]) for k in table_keys}
        return report
    # it restores from records: all of them against the keyed chain first
    integrity.verify_record(session)
    with session.transaction():
        for table_spec, _ in sorted(tables, key=lambda t: t[0].publish_table):
            session.lock(publish_lock(table_spec))  # a publish copying into the published table meanwhile waits
        # the plan's row, held for update: a run of the plan writing now holds it shared (its
        # transaction ends first), and one starting later finds the plan rolled back; the partitions
        # are listed only then, inside this transaction, so none written meanwhile is left out
        state = record.require(session, state.plan_id, exclusive=True)
        if state.phase in (Phase.ROLLED_BACK, Phase.WITHDRAWN):
            raise RollbackRefused(f"plan {state.plan_id} is already {state.phase}", fix="nothing to do")
        whole = [(table_spec, table_scheme, *_whole(session, table_spec, table_scheme, state, report))
                 for table_spec, table_scheme in tables]
        # decided on the plan as it is now, under its row's lock: a publish that landed since the
        # command started makes this a rollback consumers see
        authorised = authorisation(session, state, signatures,
                                   published=any(published for _, _, _, published in whole), keep=sorted(keep))
        for table_spec, _, keys, _ in whole:  # and a writer of these partitions outside the plan, as runs take turns
            for key in sorted(keys):
                session.lock(f"write:{table_spec.name}:{key}")
        # and the tables it restores, as a writer holds them, before the chain is read: a write
        # computed from them (a month loaded without a plan) holds them shared until it commits, so
        # it is in the chain read below, or it starts after this commits and finds the restored
        # bytes; read before, a month that had read the plan's days committed while the restore
        # waited for them, and was left (and published) computed from bytes rolled back (found by
        # an attack)
        for table in sorted({t.table for t, _, _, _ in whole}):
            if session.engine.table_exists(session, table):
                session.hold_table(table, writing=True)
        # a published table it restores into holds the contract's kinds of value, as publish refuses
        # it otherwise: DECIMAL put back into a column retyped VARCHAR beside it keeps its texts, all
        # a fingerprint sees, and was recorded as consumers seeing the snapshot's bytes again while
        # they read strings (found by an attack)
        for table_spec, _, _, published in sorted(whole, key=lambda w: w[0].publish_table):
            if published:
                if not session.engine.table_exists(session, table_spec.publish_table):
                    # gone (a job or a person dropped it): made again from the contract in this
                    # transaction, which holds it until it commits, so consumers get their partitions
                    # back; passed over, the rollback ended in a bare "table does not exist", and a
                    # table made again by another session meanwhile was neither held nor checked
                    ensure_table(session, table_spec, table_spec.publish_table)
                session.hold_table(table_spec.publish_table, writing=True)  # no ALTER until it commits
                shape = published_record.shape_problems(session, table_spec)
                if shape:
                    raise RollbackRefused(
                        f"rollback of plan {state.plan_id} refused, nothing was changed: "
                        f"{table_spec.publish_table} cannot hold the snapshot's partitions: {'; '.join(shape[:3])}",
                        fix=f"make {table_spec.publish_table}'s columns what the contract declares, then roll back "
                            "again")
        # what it restores, checked against the chain once every lock is held: the plan's own writes
        # cannot commit meanwhile (its row is held exclusive), and a later writer's that committed
        # while this waited for a partition's lock is found too; rows hidden after this are found by
        # `restore`, which reads the snapshot records again and refuses one gone since (a whole
        # group of them hidden while it waited was left out: found by an attack)
        report.kept = _refuse_what_the_ledger_lost(session, state, whole, evidence_log.last_before_reading(session),
                                                   graph, keep)
        for table_spec, table_scheme, keys, published in whole:
            _refuse_later_writers(session, state, keys, table_spec.name)  # again, now that no one can write them
            for table, table_keys in {table_spec.table: keys, table_spec.publish_table: published}.items():
                restored = restore(session, table_spec, table_scheme, table, state.plan_id, table_keys)
                if restored:
                    report.tables[table] = restored
            # consumers see the snapshot's bytes again: their last publication now, not an edit
            published_record.record_restored(session, table_spec, table_scheme, published, state.plan_id, actor)
        faults.checkpoint("rollback.before_commit")
        evidence_log.append(session, plan_id=state.plan_id, kind="rollback", actor=actor, payload={
            **{t: {"partitions": len(parts), "fingerprints_sha256": _digest(parts)}
               for t, parts in report.tables.items()}, "authorised": authorised,
            **({"refilled": {t: {"from": source, "partitions": keys}
                             for t, (source, keys) in report.refilled.items()}} if report.refilled else {}),
            **({"kept_computed": report.kept} if report.kept else {})})
        told = state.active or state.phase in SEEN_BY_CONSUMERS or bool(published)
        lifecycle.rolled_back(session, state, actor)
        if told and state.version is not None:
            announce_end(session, state.version.plan, actor, "rolled_back")
    return report


def _refuse_what_the_ledger_lost(session: Session, state: PlanState,
                                 whole: Sequence[tuple[TableSpec, PartitionScheme, list[str], list[str]]],
                                 top: int, graph: TableGraph | None = None,
                                 keep: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """What the rollback restores was read from the ledger; the chain says what the plan wrote and
    snapshotted, and who wrote its partitions after it: a partition it lists that the ledger lost
    would keep the plan's bytes, and a later writer lost would have its work erased. And who
    computed a table of the loaded `graph` from the plan's partitions since (`_refuse_computed_since`;
    those of `keep` are returned, left as they are)."""
    chained = ledger.chained_writes(session, top)
    mine = [c for c in chained if c.plan_id == state.plan_id]
    # every table the chain says the plan wrote or snapshotted is one the definitions loaded restore:
    # definitions naming another published table had a published plan's rollback find no published
    # snapshot, ask no signature, restore the target alone and end the plan while consumers still
    # read its bytes (found by an attack)
    covered = {(kind, table) for spec, _, _, _ in whole
               for kind, table in (("write", spec.name), ("snapshot", spec.table), ("snapshot", spec.publish_table))}
    stray = next((row for row in mine if (row.kind, row.table) not in covered), None)
    if stray is not None:
        raise RollbackRefused(
            f"plan {state.plan_id} {'wrote' if stray.kind == 'write' else 'snapshotted'} {stray.table} (evidence row "
            f"{stray.seq}), which the definitions loaded do not restore: a rollback restores every table of the "
            "plan or none", fix="roll back with the definitions the plan wrote with (deployed, or passed with --defs)")
    first = min((c.seq for c in mine if c.kind == "write"), default=None)
    later = _LaterWrites(session, chained, state, first)
    for spec, _, keys, published in whole:
        # every table the plan wrote is among `whole` (`_tables` refuses a plan with a table the
        # definitions lack), so a row of another table is checked in that table's turn
        listed = {("write", spec.name): set(keys), ("snapshot", spec.table): set(keys),
                  ("snapshot", spec.publish_table): set(published)}
        for row in mine:
            lost = sorted(row.keys - listed.get((row.kind, row.table), row.keys))
            if lost:
                where = f"{SCHEMA}.{'writes' if row.kind == 'write' else 'snapshots'}"
                raise ForgedRecord(f"plan {state.plan_id}'s {row.kind} of {row.table} {lost[0]} (evidence row "
                                   f"{row.seq}) is gone from {where}: a rollback would leave it",
                                   fix=evidence_log.FORGED_FIX)
        _refuse_writers(state, later.of(spec.name, keys))
    return _refuse_computed_since(state, whole, graph, later, keep)


class _LaterWrites:
    """The chain's writes after the plan's first write, by others (`incremental runs` for plan-free
    writes) but plans since rolled back."""

    def __init__(self, session: Session, chained: Sequence[ledger.Chained], state: PlanState,
                 first: int | None) -> None:
        self._session, self._state = session, state
        self._later = [] if first is None else [c for c in chained if c.kind == "write" and c.seq > first
                                                and c.plan_id != state.plan_id]
        self._phases: dict[str, Phase] = {}  # read once, when a later writer is a plan

    def _standing(self, c: ledger.Chained) -> bool:
        if c.plan_id is None:
            return True
        if not self._phases:
            self._phases.update({p.plan_id: p.phase for p in record.all_plans(self._session)})
        return self._phases.get(c.plan_id) is not Phase.ROLLED_BACK

    def of(self, table: str, keys: Sequence[str]) -> list[tuple[str, str]]:
        """(writer, partition) of the later writes of `keys` of `table`."""
        wanted = set(keys)
        found = {(c.plan_id or "incremental runs", k) for c in self._later
                 if c.table == table and c.keys & wanted and self._standing(c) for k in c.keys & wanted}
        return sorted(found, key=lambda w: w[1])

    def reading(self, table: str, keys: Sequence[str]) -> list[tuple[str, str, str]]:
        """(table written, writer, partition) of the later writes that recorded reading any of
        `keys` of `table`."""
        wanted = set(keys)
        found = {(c.table, c.plan_id or "incremental runs", k) for c in self._later
                 for k, read in c.reads.get(table, {}).items() if read & wanted and self._standing(c)}
        return sorted(found)


def kept_tables(state: PlanState, spec: TableSpec, scheme: PartitionScheme, graph: TableGraph | None,
                named: Sequence[str]) -> frozenset[str]:
    """`--keep-computed`'s tables as the rollback checks them, or a one-line refusal: checked before
    `--print-statement` prints a statement naming them (a typo, a table in another case or one the
    plan wrote was printed for approvers to sign, and the rollback then refused it)."""
    return _kept_tables(named, graph, [t.name for t, _ in _tables(state, spec, scheme, graph)])


def tables_to_keep(session: Session, spec: TableSpec, scheme: PartitionScheme, state: PlanState,
                   graph: TableGraph | None) -> list[str]:
    """The tables a rollback of the plan must leave computed now (`--keep-computed`), as its dry
    run finds them: what `status` names (it named `backfill rollback PLAN`, refused for a month
    computed from the plan's days, and had approvers sign a whole rollback's statement, which never
    authorises the one that keeps it: found by an attack). Nothing when the rollback is refused for
    another reason, which the rollback says."""
    from backfill_assets.errors import BackfillError

    try:
        tables = _tables(state, spec, scheme, graph)
        mine = {t.name for t, _ in tables}
        keep = frozenset(set(graph.tables) - mine) if graph is not None else frozenset()
        top = evidence_log.last_before_reading(session)
        # what the rollback lists, without its checks of the snapshots' rows (a status is not a dry run)
        whole = [(s, sc, sorted(written_keys(session, s, state), key=sc.position),
                  sorted(snapshotted(session, state.plan_id, s.publish_table), key=sc.position)) for s, sc in tables]
        return sorted(_refuse_what_the_ledger_lost(session, state, whole, top, graph, keep))
    except BackfillError:
        return []


def _kept_tables(named: Sequence[str], graph: TableGraph | None, restored: Sequence[str] = ()) -> frozenset[str]:
    """The tables `--keep-computed` names, each a table of the loaded definitions (a name mistyped
    would leave nothing kept, and the rollback refused as if it were not given) that the plan did
    not write (`restored`: a table it wrote is restored whatever the option says; naming one had the
    rollback restore it, saying nothing of the option it ignored: found by an attack)."""
    tables = set(graph.tables) if graph is not None else set()
    unknown = sorted(set(named) - tables)
    if unknown:
        known = ", ".join(sorted(tables)) or "none"
        # a table they lack is kept under definitions that declare it: the refusal naming the month
        # (found in the chain's reads whatever is loaded) and this one sent each other round, found by an attack
        raise UsageError(f"--keep-computed {unknown[0]}: the loaded definitions declare no replayable table of that "
                         "name", fix=f"name one of the tables they declare ({known}), or load definitions that declare "
                                     f"{unknown[0]} (--defs)")
    own = sorted(set(named) & set(restored))
    if own:
        raise UsageError(f"--keep-computed {own[0]}: the plan wrote {own[0]}, and a rollback restores every table "
                         "the plan wrote or none; nothing was changed",
                         fix="name only tables computed from the plan's partitions that the plan did not write "
                             "(`backfill rollback PLAN` names them), or leave the plan as it is")
    return frozenset(named)


def _refuse_computed_since(state: PlanState, whole: Sequence[tuple[TableSpec, PartitionScheme, list[str], list[str]]],
                           graph: TableGraph | None, later: _LaterWrites,
                           keep: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """A table the plan did not write, computed from one it did (a rollup deployed after the plan's
    publish and loaded from its days, a later plan's month), whose partitions reading the plan's
    were written after its first write: they hold figures of the plan's bytes, and restoring the
    plan's tables alone left consumers a month that does not add up to the days beside it (found by
    an attack). Found by the loaded `graph` and by what each write recorded reading (definitions
    without the month rolled the days back under it: found by an attack). Refused, unless the
    operator names the table (`keep`): a month loaded without a plan has no rollback of its own, and
    a cancelled plan that only rolls back had no way out (found by an attack). Returns what is left
    as it is: {table: partitions}."""
    kept: dict[str, list[str]] = {}
    mine = {spec.name for spec, _, _, _ in whole}
    for spec, _, keys, _ in whole:
        if not keys:
            continue
        since: dict[str, set[tuple[str, str]]] = {}
        if graph is not None:
            for child in graph.children(spec.name):
                try:
                    reading: Sequence[str] = graph.downstream_keys(spec.name, keys, child)
                except WindowError:
                    # an edge whose reads the definitions cannot tell (refused for every run): any of its
                    # partitions may read the plan's; the refusal stopped the rollback itself, a plan's way
                    # out (found by a review)
                    reading = graph.scheme(child).ordered_keys
                since.setdefault(child, set()).update(later.of(child, reading))
        for child, writer, key in later.reading(spec.name, keys):
            since.setdefault(child, set()).add((writer, key))
        for child, found in sorted(since.items()):
            if child in mine or not found:
                continue
            first = min(found, key=lambda w: w[1])
            who = sorted({w for w, _ in found})
            # only what has no rollback of its own is kept: a plan's partitions kept were left for
            # it to publish over the days restored (a reconciled plan's month, computed from the
            # rolled-back days, published afterwards: found by an attack)
            plans = [w for w in who if w != "incremental runs"]
            if child in keep and not plans:
                kept[child] = sorted({*kept.get(child, []), *(k for _, k in found)})
                continue
            raise RollbackRefused(
                f"{child} {first[1]} was computed from plan {state.plan_id}'s {spec.name} partitions since "
                f"(by {', '.join(who)}); restoring {spec.name} alone would leave {child} computed from bytes "
                "consumers no longer see" + (f" (--keep-computed keeps only what no plan wrote: plan {plans[0]} "
                                             "can be rolled back)" if plans and child in keep else ""),
                fix=(f"roll back {plans[0]} first (`backfill rollback {plans[0]}`), then this plan; or "
                     f"replay the window with a new plan that lists {child} in its graph" if plans else
                     f"replay the window with a new plan that lists {child} in its graph, or leave {child} as it "
                     f"is with --keep-computed {child}"
                     + ("" if graph is not None and child in graph.tables else
                        f" under definitions that declare {child} (--defs)")
                     + " (then recompute it under a plan)"))
    return kept


def _digest(parts: dict[str, tuple[Fingerprint, Fingerprint]]) -> str:
    text = "\n".join(f"{k} {v[0].rows} {v[0].digest}" for k, v in sorted(parts.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def withdraw(session: Session, state: PlanState, actor: str, note: str = "") -> PlanState:
    """End a plan that wrote nothing: lifts its claim and the publish freeze. Recorded in the evidence."""
    # "wrote nothing" is read from the ledger: all of it against the keyed chain first, so that
    # ledger rows deleted by hand never let a plan that wrote end without its rollback
    integrity.verify_record(session)
    with session.transaction():
        state = record.require(session, state.plan_id, exclusive=True)
        if state.phase in (Phase.ROLLED_BACK, Phase.WITHDRAWN, Phase.CLOSED):
            raise PlanRefused(f"plan {state.plan_id} has already ended ({state.phase})", fix="nothing to do")
        top = evidence_log.last_before_reading(session)
        wrote = ledger_store.count_keys_of_plan(session, state.plan_id)
        chained = [c for c in ledger.chained_writes(session, top) if c.kind == "write" and c.plan_id == state.plan_id]
        if chained and not wrote:
            raise ForgedRecord(f"plan {state.plan_id} wrote {chained[0].table} {min(chained[0].keys)} (evidence row "
                               f"{chained[0].seq}), which {SCHEMA}.writes no longer holds",
                               fix=evidence_log.FORGED_FIX)
        if wrote:
            raise PlanRefused(f"plan {state.plan_id} has written {wrote} partition(s); withdrawing would "
                              "leave them", fix=f"roll it back instead: `backfill rollback {state.plan_id}`")
        was_active = state.active
        ended = lifecycle.withdrawn(session, state, actor, note)
        if was_active and state.version is not None:
            announce_end(session, state.version.plan, actor, "withdrawn")
    return ended
