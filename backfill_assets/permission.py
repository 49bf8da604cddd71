"""The write permission: may this run write these partitions of this table?

The data decides, not who launched the run. A partition that holds rows, or held them once (the
ledger has a write of it, under a plan or not), or whose published table holds rows consumers
read, is history: it may be written only under an active
plan of record that covers it, in a phase that allows it (only the proof partitions until the proof
passed), that fits the table. A partition that holds no rows and was never written is new: any run
may fill it without a plan (the daily schedule, a UI backfill loading a new table's history,
`backfill load`), and its gates and publish apply as to any write. The watermark (the newest
partition written plan-free) no longer decides: a partition written out of order is judged by
its own history, not by its place before a later one. Tags are labels, never identity: they can
only narrow what a run may do (one tagged with a plan only writes that plan's partitions, never
plan-free); a run outside the plan may not write a partition an active plan holds (its claim).

`permit` decides before any write; `recheck` repeats the decision for the partitions of one write
transaction inside it, holding the plan's row, so a plan withdrawn, rolled back or closed between
the two, or a partition another run filled meanwhile, cannot be written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backfill_assets.control import authority, lease, ledger, publications, record
from backfill_assets.control.record import PlanState
from backfill_assets.errors import PartitionRefused, PlanProblem
from backfill_assets.identifiers import table_for_asset
from backfill_assets.lifecycle import rollback_named_by_status
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.fit import Fit, fit
from backfill_assets.plan.phases import ENDED, WRITABLE, Hold, Phase
from backfill_assets.table import TableSpec
from backfill_assets.tags import BACKFILL_TAG, LAUNCHER_TAG, PLAN_TAG
from backfill_assets.terminal import NEW_PLAN_FILE, partitions_option
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, fingerprints_like
from backfill_assets.warehouse.grouping import rows_in_no_key, rows_per_partition

if TYPE_CHECKING:
    from backfill_assets.graph import TableGraph



@dataclass(frozen=True)
class Permission:
    """What was allowed: the keys, and the plan they are written under (None: plan-free); `graph`
    is the loaded definitions' tables the decision was made against."""

    target: str
    keys: tuple[str, ...]
    plan: PlanState | None = None
    graph: TableGraph | None = field(default=None, compare=False)
    # the run's label of the lease holder that launched it (LAUNCHER_TAG), asked again by each write
    launcher: str | None = field(default=None, compare=False)

    @property
    def is_plan_write(self) -> bool:
        return self.plan is not None


def _refuse(message: str, plan_id: str | None, key: str, fix: str) -> PartitionRefused:
    return PartitionRefused(message, plan_id=plan_id, partition=key, fix=fix)


def _shared_table_refusal(session: Session, spec: TableSpec, key: str, graph: TableGraph | None,
                          claimed: Sequence[tuple[str, str | None]]) -> PartitionRefused | None:
    """A table is one asset's. Two asset keys naming one table (`Daily_Revenue` beside
    `daily_revenue` on DuckDB, which folds case; `finance__daily_revenue` beside `finance/daily_revenue`
    on both engines; a `publish_as` naming another asset's target or published table) would each
    ask "does this partition hold rows, was it written?" of its own key and partition column: a
    second definition partitioned by another column found every day of the first's history new
    and rewrote it, and its publish what consumers read, without a plan (found by two attacks).
    Asked of the loaded definitions' other tables and of the ledger: every target another asset
    wrote, and every published table another target's write was published into. Names compared
    without regard to case."""
    mine = {spec.table.lower(), spec.publish_table.lower()}
    claims: list[tuple[str, str]] = []  # (a table's asset name, the other asset that holds it)
    if graph is not None:
        claims += [(n, s.name) for s, _ in graph.tables.values() if s.name != spec.name for n in (s.name, s.publish_as)]
    for table, writer in claimed:
        if writer is not None and writer != spec.name:
            claims.append((table, writer))
        elif table_for_asset(table).lower() == spec.table.lower() and table != spec.name:
            claims.append((table, table))  # published (or put back) into this asset's target
    io_named = _io_manager_namesake(spec, graph) if graph is not None else None
    if io_named is not None:
        what, table, output = io_named
        return _refuse(f"{'op job output' if output else 'asset'} {what} of the loaded definitions names table "
                       f"{table} as dagster-duckdb's IO managers name tables, which is {spec.name}'s in the schema its "
                       "metadata or its IO manager's config (which a launch sets) gives: "
                       f"{'a run of the job' if output else 'a Materialize of it'} would write that table without a "
                       "plan or a gate", None, key,
                       f"give {what} {'a `table` metadata' if output else 'a key'} of its own, or `schema` metadata "
                       f"naming its own schema (or remove it); write {spec.name} through its plans")
    for name, other in sorted(set(claims)):
        table = table_for_asset(name)
        if table.lower() in mine:
            return _refuse(f"{spec.name} writes table {table}, which is asset {other}'s too: two assets cannot "
                           "share a table (each would take the other's history for new partitions)", None, key,
                           f"give {spec.name} a table of its own (its asset key or publish_as), or remove the "
                           "definition that repeats it")
    return None


def _io_manager_namesake(spec: TableSpec, graph: TableGraph) -> tuple[str, str, bool] | None:
    """Another asset of the definitions (or an output of their op jobs) whose table, as dagster-duckdb's
    IO managers name it (the key's last part, in the schema its `schema` metadata names, else its IO
    manager's `schema`; an op output's `table` metadata, else its name), is
    or may be this table's target or published table (a test of `tests/test_team_graph.py` fails if
    Dagster moves what this reads of an asset node): a team's pandas asset keyed
    `main/published_revenue` replaced partitions consumers read, beside the definitions that declare
    the table (found by an attack). Only the metadata is fixed by the definitions: an IO manager's
    config is run config, so a launch sets its `schema` (`staging/published_revenue`, its IO manager
    configured `schema="staging"`, wrote main.published_revenue when launched with `schema: main`,
    found by an attack); an asset without `schema` metadata may write any schema's table."""
    from backfill_assets.graph import asset_key, key_name

    ours = {asset_key(n) for n in graph.tables} | {asset_key(s.publish_as) for s, _ in graph.tables.values()}
    mine = {spec.table.lower(), spec.publish_table.lower()}
    published = graph.asset_graph.get(asset_key(spec.publish_as)) if graph.asset_graph.has(
        asset_key(spec.publish_as)) else None
    home = _schema_read((published.metadata if published is not None else {}).get("schema") or "main")

    def may_be_home(schema: object | None) -> bool:
        read = None if schema is None else _schema_read(schema)
        return read is None or home is None or read == home

    for output in graph.op_outputs:
        # an op job's output, stored by the IO manager as a whole table (its rows deleted first): the
        # team's older job writing `published_revenue` replaced every partition consumers read, and
        # the table ran and published beside it (found by an attack)
        parts = _dotted(output.table)
        if parts is None:  # no identifiers: which table it names is not known here, so any it spells
            if any(name in output.table.lower() for name in mine):
                return output.where, output.table, True
            continue
        # `"published_revenue"`, `published_revenue ` and, under a catalog's `schema`, `main.published_revenue`
        # are main.published_revenue to DuckDB; compared as text, they were other tables (found by a review)
        if parts[-1] in mine and (may_be_home(parts[-2]) if len(parts) > 1 else may_be_home(output.schema)):
            return output.where, output.table, True
    for node in graph.asset_graph.asset_nodes:
        key = node.key
        # an external asset (a consumer's `deps` on `main/published_revenue`) is written by no IO manager
        if key in ours or key.path[-1].lower() not in mine or not node.is_materializable:
            continue
        schema = node.metadata.get("schema")
        if may_be_home(schema):
            return key_name(key), key.path[-1], False
    return None


_IDENTIFIER = re.compile(r'\s*(?:"((?:[^"]|"")*)"|([^\W\d][\w$]*))\s*(\.|$)')


def _schema_read(value: object) -> str | None:
    """A `schema` metadata value as the warehouse reads the `{schema}.{table}` dagster-duckdb writes:
    spaces around it and double quotes dropped, case folded (`"main"`, `main ` and ` Main` named
    main's table, compared as text they were another schema's: found by a review), and by its last
    dotted part, the schema a catalog-qualified name (`warehouse.main`) names in its catalog, which
    may be the warehouse's own (`warehouse.main.published_revenue` is main's table to DuckDB, and
    compared whole it was another schema's: found by an attack). None where it is no dotted name of
    plain or quoted identifiers, so that what schema it names is not known here: an empty one (the IO
    manager's config decides then) or one with a comment (`main/**/`, main to DuckDB) were read as
    schemas "" and "main/**/" and let the table run beside main's namesake (found by a review)."""
    parts = _dotted(str(getattr(value, "value", value)))
    return parts[-1] if parts is not None else None


def _dotted(text: str) -> list[str] | None:
    """The parts of a dotted name of plain or quoted identifiers, case folded; None if `text` is none."""
    parts: list[str] = []
    at = 0
    while at < len(text) or not parts:
        found = _IDENTIFIER.match(text, at)
        if found is None or (found.group(3) == "." and found.end() == len(text)):
            return None  # not identifiers and dots (a trailing dot too)
        parts.append((found.group(1).replace('""', '"') if found.group(1) is not None else found.group(2)).lower())
        at = found.end()
    return parts


def occupied(session: Session, spec: TableSpec, scheme: PartitionScheme,
             keys: Sequence[str]) -> dict[str, int]:
    """Rows each key holds in the target now (one grouped count for the slice)."""
    if not keys or not session.engine.table_exists(session, spec.table):
        return {}
    return rows_per_partition(session, spec.table, spec.partition_column, scheme, keys)


def history(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str]) -> dict[str, str]:
    """Why each of `keys` is history (rewriting it is a replay): it holds rows, or the ledger has a
    write of it (emptied since, by a delete, an empty recomputation or a rollback). Keys absent
    from the answer are new: no rows, never written."""
    # a table written partitioned by another column: which of its rows a key of this definition
    # holds, and whether they were written or published, cannot be told from its rows or writes
    # (a column name is one whatever its case, as the warehouse reads it)
    other = sorted(c for c in ledger.partitioned_by(session, spec.name)
                   if c.lower() != spec.partition_column.lower())
    if other:
        return dict.fromkeys(keys, f"is of a table written partitioned by {other[0]}, not by "
                             f"{spec.partition_column}: its rows may lie in partitions of that column history holds")
    held = occupied(session, spec, scheme, keys)
    written = ledger.ever_written(session, spec.name, keys)
    out = {}
    for key in keys:
        if held.get(key):
            out[key] = f"holds {held[key]} row(s)"
        elif key in written:
            out[key] = "was written before (it holds no rows now)"
    # rows consumers read already (a team's table adopted as `publish_as`, a cutover's old side):
    # filling the target would replace them at publish, which only a plan may do
    rest = [k for k in keys if k not in out]
    if rest and session.engine.table_exists(session, spec.publish_table):
        for key, n in rows_per_partition(session, spec.publish_table, spec.partition_column, scheme, rest).items():
            if n:
                out[key] = f"has {n} published row(s) in {spec.publish_table}, which consumers read"
    return out


_FITS: dict[tuple[Any, ...], Fit] = {}


def _fit(plan: PlanState, spec: TableSpec, scheme: PartitionScheme, graph: TableGraph | None) -> Fit:
    """A plan version's fit to its target and graph is fixed while the tables' keys are: computed
    once per run. `spec` and `scheme` are the plan's target's (the root of its graph)."""
    shape = tuple(sorted((n, s, len(graph.scheme(n).ordered_keys)) for n, (s, _) in graph.tables.items()
                         if plan.involves(n))) if graph is not None else ()
    key = (str(plan.approved_sha256), spec, len(scheme.ordered_keys), shape)  # frozen specs: hashed by value
    if key not in _FITS:
        if len(_FITS) > 64:
            _FITS.clear()
        _FITS[key] = fit(plan.approved.plan, spec, scheme, graph)
    return _FITS[key]


def _graph_fit(plan: PlanState, spec: TableSpec, scheme: PartitionScheme, graph: TableGraph | None) -> Fit:
    """The fit of the plan's whole graph, whichever of its tables is being written."""
    if spec.name == plan.target:
        return _fit(plan, spec, scheme, graph)
    if graph is None or plan.target not in graph.tables:
        return Fit([], [PlanProblem("target", plan.target, "the loaded definitions do not declare it")])
    return _fit(plan, graph.spec(plan.target), graph.scheme(plan.target), graph)


def _plan_refusal(plan: PlanState, key: str, spec: TableSpec, scheme: PartitionScheme,
                  *, starting: bool, graph: TableGraph | None = None, fitted: bool = False) -> PartitionRefused | None:
    """Why `plan` may not write `key` of `spec` (its target or a table of its graph) now, or None.
    `fitted`: the plan's fit to the tables loaded, the same for every key, already checked by this
    decision (checked for each key, it compared every partition the plan lists once for each key
    of the run: 60 times 2,526 partitions a run of 30, at 2,526)."""
    if plan.phase not in WRITABLE:
        return _refuse(f"plan {plan.plan_id} is {plan.phase}, so it cannot write {key} of {spec.name}",
                       plan.plan_id, key, f"see `backfill status {plan.plan_id}` for the next step")
    if plan.hold:
        # and in a run's later transactions too: a range run of a whole window (a single-run backfill
        # policy) wrote the rest of it under a pause typed after its first transaction (found by an attack)
        way_out = f"resume it with `backfill run {plan.plan_id}`" if plan.hold is Hold.PAUSED else \
            rollback_named_by_status(plan.plan_id)
        what = f"no new run may write {key}" if starting else \
            f"this run stops before writing {key} (what it wrote is whole)"
        return _refuse(f"plan {plan.plan_id} is {plan.hold}: {what}", plan.plan_id, key, way_out)
    if not plan.past_proof and (key not in plan.proof_keys or spec.name != plan.target):
        what = key if spec.name == plan.target else f"{key} of {spec.name} (its graph runs after the proof)"
        return _refuse(f"plan {plan.plan_id} is {plan.phase}: only its proof partitions "
                       f"({', '.join(plan.proof_keys)}) may run until the proof passes, not {what}",
                       plan.plan_id, key, f"run `backfill run {plan.plan_id} --proof` first")
    if fitted:
        return None
    fit_now = _graph_fit(plan, spec, scheme, graph)
    if not fit_now.ok:
        return _refuse(f"plan {plan.plan_id} does not fit {plan.target}'s graph: {fit_now.problems[0]}",
                       plan.plan_id, key, "withdraw it (`backfill plan withdraw`) and approve a plan "
                       "that fits the tables loaded now (`backfill plan validate` names what differs)")
    recorded = {a: list(k) for a, k in plan.approved.members}
    if fit_now.members != recorded:
        changed = next((a for a in {*recorded, *fit_now.members} if recorded.get(a) != fit_now.members.get(a)), "?")
        return _refuse(f"plan {plan.plan_id}'s plan of record lists other partitions of {changed} than the "
                       "definitions loaded now give it", plan.plan_id, key,
                       "approve the plan again for the definitions loaded now")
    return None


def code_identity(plan: PlanState, spec: TableSpec, graph: TableGraph | None) -> str:
    """What the plan's signatures must bind of the code loaded now: its table's identity, or its
    graph's (every table it writes)."""
    assets = plan.approved.assets
    if list(assets) == [spec.name]:
        return spec.code_identity
    return graph.code_identity(assets) if graph is not None else f"unknown/{plan.target}"


# a plan whose last writes consumers were given and that writes no more (repairing may re-run)
PUBLISHED_FOR_GOOD = frozenset({Phase.PUBLISHED, Phase.CLOSED})


def _upstream_refusal(session: Session, spec: TableSpec, keys: Sequence[str], graph: TableGraph | None,
                      plan: PlanState | None, claimed: Sequence[tuple[str, str | None]], *,
                      holding: bool = False, source_inputs: Sequence[str] = ()) -> PartitionRefused | None:
    """A table computed from a replayable table reads only data its gates passed: every partition
    of the upstream table that `keys` read has a latest write whose gates all passed (under the
    plan, for the upstream partitions the plan replays). A replay therefore recomputes the graph in
    dependency order, whoever launched the runs."""
    if graph is None or spec.name not in graph.tables:
        return None
    parent = graph.upstream(spec.name)
    if parent is None:
        return _undeclared_upstream(spec, keys, plan, claimed, graph, source_inputs)
    upstream_exists = session.engine.table_exists(session, graph.spec(parent).table)
    if holding and upstream_exists:
        # inside the write's transaction: no other writer may change the upstream table until the
        # write that reads it commits (on a server engine each statement sees what committed before
        # it, so this check and the write's read would otherwise see two states)
        session.hold_table(graph.spec(parent).table)
    reads = {k: graph.upstream_keys(spec.name, k) for k in keys}
    wanted = sorted({u for us in reads.values() for u in us})
    ours = [u for u in wanted if plan is not None and plan.covers(u, parent)]
    latest = ledger.latest(session, parent, [u for u in wanted if u not in ours], figures=False) \
        if wanted else {}
    if ours:
        latest.update(ledger.latest(session, parent, ours, plan.plan_id, figures=False))  # type: ignore[union-attr]
    changed = _changed_since_passed(session, graph, parent, latest, upstream_exists)
    # another plan's write consumers have not seen is no input of a table they will see: a month
    # loaded plan-free read a cancelled (or not yet published) plan's days and was published beside
    # days that never showed them (found by an attack); a plan under repair may have written since
    # its publish (a re-run day's bytes were read so: found by an attack), so only a plan that
    # published and can write no more counts as seen
    others = {e.plan_id for u, e in latest.items() if e is not None and e.plan_id is not None and u not in ours}
    unpublished = {p: found for p in sorted(others)
                   if (found := record.get(session, p)) is not None and found.phase not in PUBLISHED_FOR_GOOD}
    # a write without a plan consumers have not seen either (the target materialized alone, not its
    # published table): a month loaded from the UI read such a day and was published beside days that
    # never showed it (found by an attack); the plan's own partitions are published with its graph
    seen = _published_as_written(session, graph.spec(parent), {u: e for u, e in latest.items() if u not in ours})
    for key, upstream in reads.items():
        legacy = [u for u in upstream if (e := latest.get(u)) is not None and e.passed and e.fingerprint.legacy]
        if legacy:
            # a sum of md5s (before the upgrade): other rows with the same sum can be found, so it
            # cannot show that the day still holds what its gates passed (publish's rule too)
            return _refuse(f"{spec.name} {key} reads {parent} {legacy[0]}, whose write's fingerprint "
                           f"({latest[legacy[0]].fingerprint}) predates sha256 fingerprints and cannot show "  # type: ignore[union-attr]
                           "the data unchanged" + (f" (+{len(legacy) - 1} more)" if len(legacy) > 1 else ""),
                           plan.plan_id if plan else None, key,
                           f"write {parent} {legacy[0]} again with a replay plan (`backfill plan new "
                           f"{NEW_PLAN_FILE} --target {parent}`), then write {spec.name} {key}")
        moved = [u for u in upstream if u in changed]
        if moved:
            now, then = changed[moved[0]]
            return _refuse(f"{spec.name} {key} reads {parent} {moved[0]}, which holds other rows ({now}) than its "
                           f"latest write, whose gates passed ({then}): it changed since, by a hand or a rollback"
                           + (f" (+{len(moved) - 1} more)" if len(moved) > 1 else ""),
                           plan.plan_id if plan else None, key,
                           f"replay {parent} {moved[0]} with a plan (`backfill plan new {NEW_PLAN_FILE} --target "
                           f"{parent}`) so its gates check what it holds, then write {spec.name} {key}")
        unseen = [u for u in upstream if u not in ours and (e := latest.get(u)) is not None
                  and e.plan_id is not None and e.plan_id in unpublished]
        if unseen:
            other = unpublished[latest[unseen[0]].plan_id]  # type: ignore[union-attr, index]
            return _refuse(f"{spec.name} {key} reads {parent} {unseen[0]}, whose latest write is plan "
                           f"{other.plan_id}'s, which consumers have not seen ({other.phase}"
                           f"{f', {other.hold}' if other.hold else ''})"
                           + (f" (+{len(unseen) - 1} more)" if len(unseen) > 1 else ""),
                           plan.plan_id if plan else None, key,
                           # a plan rolled back over bytes it wrote unchanged publishes nor rolls back again
                           f"replay {parent} {unseen[0]} with a plan (`backfill plan new {NEW_PLAN_FILE} --target "
                           f"{parent}`), then write {spec.name} {key}" if other.phase in ENDED else
                           f"publish plan {other.plan_id} (`backfill publish {other.plan_id}`) or roll it back "
                           f"(`backfill rollback {other.plan_id}`), then write {spec.name} {key}")
        bad = [u for u in upstream if latest.get(u) is None or not latest[u].passed]  # type: ignore[union-attr]
        if bad:
            entry = latest.get(bad[0])
            why = ("has no write" + (f" under plan {plan.plan_id}" if bad[0] in ours and plan else "")
                   if entry is None else f"failed {', '.join(entry.failed) or 'its gates'}")
            owner = record.get(session, entry.plan_id) if entry is not None and entry.plan_id else None
            fix = (f"run the plan's {parent} partitions first (`backfill run {plan.plan_id}`)"
                   if bad[0] in ours and plan else
                   # another plan's write failed: its repair comes first, and only its status names
                   # that (the bare "write it first" left this plan's proof to be run again, refused
                   # each time, while its status named that run: found by an attack)
                   f"{parent} {bad[0]}'s latest write is plan {owner.plan_id}'s ({owner.phase}): repair it "
                   f"through that plan first, as `backfill status {owner.plan_id}` names, then write {spec.name} "
                   f"{key}" if owner is not None and owner.phase not in ENDED
                   and owner.plan_id != (plan.plan_id if plan else None) else
                   f"write {parent} {bad[0]} first and let its gates pass")
            return _refuse(f"{spec.name} {key} reads {parent} "
                           f"{upstream[0] if len(upstream) == 1 else f'{upstream[0]}..{upstream[-1]}'}, and "
                           f"{parent} {bad[0]} {why}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""),
                           plan.plan_id if plan else None, key, fix)
        hidden = [u for u in upstream if u not in ours and u not in seen]
        if hidden:
            published = graph.spec(parent).publish_as
            more = f" (+{len(hidden) - 1} more)" if len(hidden) > 1 else ""
            return _refuse(f"{spec.name} {key} reads {parent} {hidden[0]}, whose latest write consumers have not seen "
                           f"({published} does not hold it){more}",
                           plan.plan_id if plan else None, key,
                           f"publish {parent} {hidden[0]} first (materialize {published} for it), then write "
                           f"{spec.name} {key}")
    stray = _read_outside_partitions(session, graph, spec.name, parent, reads) if upstream_exists else None
    if stray is not None:
        key, count, value = stray
        return _refuse(f"{spec.name} {key} reads {count} row(s) of {parent} ({graph.spec(parent).partition_column} "
                       f"{value}) that lie in no {parent} partition: no write, gate or fingerprint of {parent} "
                       "covers them", plan.plan_id if plan else None, key,
                       f"give {parent} partitions that hold those rows (its partitions definition) and write them "
                       f"there, or delete them from {graph.spec(parent).table}; then write {spec.name} {key}")
    return None


def _published_as_written(session: Session, upstream: TableSpec,
                          latest: Mapping[str, ledger.LatestWrite | None]) -> set[str]:
    """Of `latest` (each partition's latest write), the partitions whose last publication gave
    consumers exactly that write's bytes."""
    written = {k: e.fingerprint for k, e in latest.items() if e is not None}
    found = publications.latest(session, upstream, list(written)) \
        if written and session.engine.table_exists(session, upstream.publish_table) else {}
    return {k for k, p in found.items() if p.fingerprint == written[k]}


def _read_outside_partitions(session: Session, graph: TableGraph, child: str, parent: str,
                             reads: Mapping[str, Sequence[str]]) -> tuple[str, int, Any] | None:
    """The first of `reads`' partitions of `child` whose SQL reads rows of `parent` in none of the
    partitions it reads (`upstream_keys`): its window's rows before `parent`'s first partition or
    after its last, or a static key `parent` does not declare; with (how many, the least value).
    Those rows are in no partition, so the checks above (passed, unchanged, seen by consumers) ask
    about none of them: a month starting before its days computed December from rows pasted by hand
    into the days' table, its gates compared it with those rows, and it was published (found by an
    attack). One statement for the run; the partition named is looked for only when one reads them."""
    upstream, scheme, own = graph.spec(parent), graph.scheme(parent), graph.scheme(child)

    def spans(keys: Sequence[str]) -> list[tuple[Any, Any]]:
        if own.span(keys[0])[1] is None:  # static keys: each its value
            return [own.span(k) for k in keys]
        return [(own.span(first)[0], own.span(last)[1]) for first, last in own.runs(keys)]

    def stray(keys: Sequence[str]) -> tuple[int, Any]:
        read = sorted({u for k in keys for u in reads[k]}, key=scheme.position)
        return rows_in_no_key(session, upstream.table, upstream.partition_column, spans(keys), scheme, read)

    if not reads or not stray(list(reads))[0]:
        return None
    for key in reads:
        count, value = stray([key])
        if count:
            return key, count, value
    return None


def _undeclared_upstream(spec: TableSpec, keys: Sequence[str], plan: PlanState | None,
                         claimed: Sequence[tuple[str, str | None]], graph: TableGraph,
                         source_inputs: Sequence[str] = ()) -> PartitionRefused | None:
    """A table whose `source` is a replayable table (the ledger holds writes of it) that the loaded
    definitions do not declare: they cannot say which of its partitions a partition reads, so
    nothing here can check them (passed, unchanged, seen by consumers), nor record what was read.
    A code location declaring the month alone computed it from a cancelled plan's days and
    published it beside days that never showed them (found by an attack)."""
    source = table_for_asset(spec.source).lower()
    if source == spec.table.lower():
        return None
    key = keys[0] if keys else "?"
    # the days' table named in another case (or by its table's name): DuckDB reads it so, but the graph matches
    # names exactly, so the month is no member of its graph; it was refused as computed from a table
    # the definitions "do not declare", telling the team to declare what they had declared
    namesake = next((s for s, _ in graph.tables.values() if s.name != spec.name and spec.source != s.name
                     and source in (s.name.lower(), s.table.lower())), None)
    if namesake is not None:
        how = "in another case" if spec.source.lower() == namesake.name.lower() else "by its table's name"
        return _refuse(f"{spec.name}'s source {spec.source} names {namesake.name} {how}: the asset graph "
                       f"matches asset names exactly, so no check of {namesake.name}'s partitions would cover "
                       f"{spec.name} {key}", plan.plan_id if plan else None, key,
                       f"write {spec.name}'s source as {namesake.name}")
    # a replayable table's published table (the days consumers read) is a table backfill writes too:
    # a month computed from it was no member of the days' graph and recorded no reads, and a plan
    # over the days published new days beside it (found by an attack)
    published = next((s.name for s, _ in graph.tables.values() if s.name != spec.name
                      and s.publish_table.lower() == source), None)
    if published is not None or any(writer is not None and table_for_asset(table).lower() == source
                                    and table_for_asset(writer).lower() != source for table, writer in claimed):
        upstream = published or "the replayable table it is published from"
        return _refuse(f"{spec.name} is computed from {spec.source}, a table backfill publishes into: no plan over "
                       f"its upstream would recompute or hold back {spec.name} {key}, nor record which of its "
                       "partitions were read", plan.plan_id if plan else None, key,
                       f"declare {spec.name}'s source as {upstream} and compute it from that table (its graph then "
                       "replays and publishes both together)")
    # or computed from such a table through a team's own asset (`clean_days`, their SQL over the
    # published days): a raw source to the gates, yet no plan over the days would recompute it
    through = graph.written_ancestor(spec.source) if spec.source not in graph.tables else None
    if through is None and spec.source not in graph.tables:
        # or through an asset of another code location (an external asset here, no deps to walk):
        # what the instance recorded its materializations were computed from (a month over another
        # location's `clean_days` was loaded from the published days as from a raw source, found by an attack)
        from backfill_assets.graph import _read_table, asset_key

        written = {table_for_asset(n).lower() for s, _ in graph.tables.values() for n in (s.name, s.publish_as)}
        written |= {table_for_asset(n).lower() for pair in claimed for n in pair if n is not None}
        through = next((i for i in source_inputs if _read_table(asset_key(i)) in written), None)
    if through is not None:
        return _refuse(f"{spec.name} is computed from {spec.source}, which is computed from {through}, a table "
                       f"backfill writes: no plan over it would recompute or hold back {spec.name} {key}, nor "
                       "record which of its partitions were read", plan.plan_id if plan else None, key,
                       f"declare {spec.name}'s source as the replayable table {spec.source} reads and compute "
                       "it from that table (its graph then replays and publishes both together)")
    # the targets the ledger and the chain say backfill wrote, as the shared table check beside it
    # reads them (one read for both): asked of the ledger alone, its writes of the days relabelled
    # by an insider while the month loaded had the days taken for a raw source, and a month
    # computed from a cancelled plan's days was published (found by an attack)
    if not any(writer is not None and table_for_asset(writer).lower() == source for _, writer in claimed):
        return None  # a raw source: compared with it by the gates, as any replayable table is
    return _refuse(f"{spec.name} is computed from {spec.source}, a replayable table backfill writes, which the "
                   f"loaded definitions do not declare: which {spec.source} partitions {spec.name} {key} reads, "
                   "and whether they passed their gates and consumers saw them, cannot be checked",
                   plan.plan_id if plan else None, key,
                   f"write {spec.name} through definitions that declare {spec.source} too (--defs, BACKFILL_DEFS, "
                   "or the code location that holds both)")


def _changed_since_passed(session: Session, graph: TableGraph, parent: str,
                          latest: Mapping[str, ledger.LatestWrite | None], exists: bool
                          ) -> dict[str, tuple[Fingerprint, Fingerprint]]:
    """The upstream partitions whose latest write passed its gates but whose bytes are not that
    write's now (edited by hand, or rolled back, which restores bytes without a write), or whose
    gates checked other bytes: {key: (now, written)}, from one fingerprint pass in the engine. A
    verdict in the ledger is about the bytes it checked, not about what the table holds now."""
    passed = {k: e for k, e in latest.items() if e is not None and e.passed and not e.fingerprint.legacy}
    if not passed:
        return {}
    upstream = graph.spec(parent)
    expected = {k: e.fingerprint for k, e in passed.items()}
    now = fingerprints_like(session, upstream.table, upstream.columns, graph.scheme(parent),
                            upstream.partition_column, expected) if exists else {}
    out = {}
    for key, entry in passed.items():
        current = now.get(key, EMPTY)
        if current != entry.fingerprint or any(fp != entry.fingerprint.digest for fp in entry.checked.values()):
            out[key] = (current, entry.fingerprint)
    return out


def _approval_refusal(session: Session, plan: PlanState, key: str, spec: TableSpec,
                      graph: TableGraph | None = None) -> PartitionRefused | None:
    """The signatures themselves, every time: they bind this plan, its tables' code, this warehouse
    and an expiry; a row inserted into `approvals` is a signature that does not verify."""
    why = authority.refusal(session, plan.approved, code=code_identity(plan, spec, graph))
    if why:
        return _refuse(f"plan {plan.plan_id} may not write {key} of {spec.name}: {why}", plan.plan_id, key,
                       "have it signed again for the code loaded now (`backfill plan statement PLAN` shows what "
                       f"to sign), or see `backfill status {plan.plan_id}`")
    return None


def permit(session: Session, spec: TableSpec, scheme: PartitionScheme, keys: Sequence[str],
           tags: Mapping[str, str], graph: TableGraph | None = None,
           source_inputs: Sequence[str] = ()) -> Permission:
    """Decide for a whole run before it writes anything; refuse naming the partition and the fix.
    `graph`: the definitions the run belongs to (a plan over a graph is checked against it);
    `source_inputs`: what Dagster's instance records the table's source as computed from
    (`graph.recorded_inputs`)."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        raise _refuse(f"a run of {spec.name} named no partition", None, "?",
                      "launch it for a partition or a partition range")
    claimed = ledger.tables_claimed(session)
    shared = _shared_table_refusal(session, spec, keys[0], graph, claimed)
    if shared is not None:
        raise shared
    wanted = tags.get(PLAN_TAG)
    tagged = BACKFILL_TAG in tags or wanted is not None
    plans = record.active_plans(session, target=spec.name)
    if wanted is not None and not any(p.plan_id == wanted for p in plans):
        state = record.get(session, wanted)
        why = f"is {state.phase}" if state else "is not in the control record"
        raise _refuse(f"plan {wanted} {why}, so it cannot write {spec.name}", wanted, keys[0],
                      "approve the plan (backfill plan approve) or name an active one")
    # only partitions outside every plan can be written plan-free; a plan's own run pays nothing for it
    uncovered = [k for k in keys if not any(p.covers(k, spec.name) for p in plans)]
    old = history(session, spec, scheme, uncovered) if uncovered and wanted is None else {}
    chosen: PlanState | None = None
    free: str | None = None  # the first key written plan-free: a run is all plan or all plan-free
    for key in keys:
        covering = [p for p in plans if p.covers(key, spec.name)]
        if len(covering) > 1:
            raise _refuse(f"plans {' and '.join(p.plan_id for p in covering)} both hold partition {key} "
                          f"of {spec.name}", None, key, "withdraw or roll back one of them")
        if covering:
            plan = covering[0]
            if wanted is not None and plan.plan_id != wanted:
                raise _refuse(f"partition {key} of {spec.name} belongs to plan {plan.plan_id}, not {wanted}",
                              wanted, key, f"run it under {plan.plan_id}")
            if not tagged:
                # a cancelled plan runs no more: it holds its window until it is rolled back
                cancelled = plan.hold is Hold.CANCELLED
                raise _refuse(f"partition {key} of {spec.name} is claimed by active plan {plan.plan_id} "
                              f"({plan.phase}{', cancelled' if cancelled else ''}); a run outside the plan may "
                              "not write it", plan.plan_id, key,
                              rollback_named_by_status(plan.plan_id) if cancelled else
                              f"write it as part of the plan: `backfill run {plan.plan_id} "
                              + ("" if spec.name == plan.target else f"--asset {spec.name} ")
                              + f"{partitions_option([key])}`, or let the plan finish")
            if free is not None:
                raise _refuse(f"partitions of {spec.name} mix plan {plan.plan_id} ({key}) and plan-free "
                              f"writes ({free})", plan.plan_id, key, "launch one run per plan")
            if chosen is not None and chosen.plan_id != plan.plan_id:
                raise _refuse(f"partitions {keys[0]}..{key} span plans {chosen.plan_id} and {plan.plan_id}",
                              plan.plan_id, key, "launch one run per plan")
            refusal = _plan_refusal(plan, key, spec, scheme, starting=True, graph=graph, fitted=chosen is not None)
            if refusal is None and chosen is None:
                refusal = _approval_refusal(session, plan, key, spec, graph)
            if refusal is not None:
                raise refusal
            chosen = plan
            continue
        if wanted is not None:
            raise _refuse(f"plan {wanted} does not cover partition {key} of {spec.name}", wanted, key,
                          "name partitions inside the plan's window")
        if key in old:
            raise _refuse(f"no approved replay plan covers partition {key} of {spec.name}, and it {old[key]}: "
                          "rewriting it is a replay", None, key,
                          f"draft one with `backfill plan new {NEW_PLAN_FILE} --target {spec.name}`, have "
                          "it approved, then `backfill run` it")
        if chosen is not None:
            raise _refuse(f"partitions of {spec.name} mix plan {chosen.plan_id} and plan-free writes "
                          f"({key})", chosen.plan_id, key, "launch one run per plan")
        free = free or key
    refusal = _upstream_refusal(session, spec, keys, graph, chosen, claimed, source_inputs=source_inputs)
    if refusal is not None:
        raise refusal
    return Permission(spec.name, tuple(keys), chosen, graph, tags.get(LAUNCHER_TAG))


def recheck(session: Session, spec: TableSpec, scheme: PartitionScheme, permission: Permission,
            keys: Sequence[str]) -> PlanState | None:
    """Inside their write transaction: is the write of `keys` still allowed? Returns the plan."""
    claimed = ledger.tables_claimed(session)
    shared = _shared_table_refusal(session, spec, keys[0], permission.graph, claimed) if keys else None
    if shared is not None:
        raise shared
    if permission.plan is None:
        for plan in record.active_plans(session, target=spec.name):
            for key in keys:
                if plan.covers(key, spec.name):
                    raise _refuse(f"partition {key} of {spec.name} was claimed by plan {plan.plan_id} "
                                  "while this run started", plan.plan_id, key, "write it as part of the plan")
        old = history(session, spec, scheme, keys)
        for key in keys:
            if key in old:
                raise _refuse(f"partition {key} of {spec.name} was written by someone else while this run "
                              f"started (it {old[key]}); rewriting it now is a replay", None, key, "use a replay plan")
        refusal = _upstream_refusal(session, spec, keys, permission.graph, None, claimed, holding=True)
        if refusal is not None:  # what it reads, again inside the transaction that reads it
            raise refusal
        return None
    plan = record.require(session, permission.plan.plan_id, lock=True)
    # and the plan's lease, as the run's start asked it: a worker left running after its `backfill
    # run` was killed wrote its run's later transactions beside the run that took the lease over
    # (found by an attack)
    lease.refuse_foreign_run(session, plan.plan_id, {LAUNCHER_TAG: permission.launcher} if permission.launcher
                             else {}, keys[0] if keys else "?")
    for i, key in enumerate(keys):
        if plan.approved_sha256 != permission.plan.approved_sha256 or not plan.covers(key, spec.name):
            raise _refuse(f"plan {plan.plan_id}'s plan of record changed while this run started", plan.plan_id,
                          key, "launch the run again")
        refusal = _plan_refusal(plan, key, spec, scheme, starting=False, graph=permission.graph, fitted=i > 0)
        if refusal is not None:
            raise refusal
    refusal = _approval_refusal(session, plan, keys[0], spec, permission.graph) if keys else None
    if refusal is None:
        refusal = _upstream_refusal(session, spec, keys, permission.graph, plan, claimed, holding=True)
    if refusal is not None:
        raise refusal
    return plan
