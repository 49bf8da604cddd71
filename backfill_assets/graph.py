"""The asset graph a plan covers: replayable tables downstream of its target, and their consumers.

A replayable table whose `source` is another replayable table is recomputed from it: a partition
of it reads the upstream partitions its SQL and gates read (those of its own key, or whose windows
overlap its own), and those the partition mapping Dagster holds for that edge gives (daily ->
monthly is a `TimeWindowPartitionMapping` by default; static -> static the identity), whatever a
team's mapping says; an edge whose reads the definitions cannot tell (read by another column than
the upstream's partition column, static keys over time windows, two time zones) is refused. A plan
over a target therefore covers, in dependency order, the target's window and those partitions of
every replayable table downstream of it; the plan lists them (`graph:`), and every decision
compares that list with the graph derived here from the definitions actually loaded, so a table
added downstream later is not covered until the plan is signed again. Assets downstream of the
graph that are not replayable (a pandas report, an extract) are its consumers: named in the plan,
requested after the graph's publish.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import dagster as dg

from backfill_assets.errors import PlanProblem, WindowError
from backfill_assets.partitions import PartitionScheme, scheme_for
from backfill_assets.table import TableSpec, code_identity_of

if TYPE_CHECKING:
    from dagster._core.definitions.assets.graph.asset_graph import AssetGraph  # no public name; types only
    from dagster._core.instance import DynamicPartitionsStore  # no public name; types only


@dataclass(frozen=True)
class Member:
    """A table the plan writes, with the partitions it writes; `upstream` is the member it reads."""

    asset: str
    keys: tuple[str, ...]
    upstream: str | None = None


@dataclass(frozen=True)
class Consumer:
    """An asset downstream of the graph that is not replayable: refreshed after the publish.
    `keys` is None for an unpartitioned asset."""

    asset: str
    keys: tuple[str, ...] | None
    reads: str
    # dynamic partitions, which Dagster lists only from an instance: `keys` is () where none was given
    dynamic: bool = False


SPEC_METADATA = "backfill_assets/spec"  # a replayable target carries its TableSpec as JSON


def tables_of_graph(asset_graph: AssetGraph) -> dict[str, tuple[TableSpec, dg.PartitionsDefinition]]:
    """The replayable tables of an asset graph, from the spec each target carries."""
    found = {}
    for asset in asset_graph.asset_nodes:
        raw = asset.metadata.get(SPEC_METADATA)
        if raw is None:
            continue
        text = raw.value if hasattr(raw, "value") else raw
        spec = TableSpec.from_json(str(text))
        assert asset.partitions_def is not None  # make_replayable_table's target is always partitioned
        found[spec.name] = (spec, asset.partitions_def)
    return found


def find_tables(definitions: dg.Definitions) -> dict[str, tuple[TableSpec, dg.PartitionsDefinition]]:
    """The replayable tables of loaded definitions, from the spec each target carries."""
    return tables_of_graph(definitions.resolve_asset_graph())


def asset_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(name.split("/"))


def key_name(key: dg.AssetKey) -> str:
    return "/".join(key.path)


def _read_table(key: dg.AssetKey) -> str:
    """The table a key names as the warehouse reads it: case folded, `main/x` being main's x."""
    path = [p.lower() for p in key.path]
    return "__".join(path[1:] if len(path) == 2 and path[0] == "main" else path)


def _latest_computed(instance: dg.DagsterInstance, key: dg.AssetKey, scan: int = 100) -> dg.AssetMaterialization | None:
    """The latest materialization of `key` that Dagster computed as the asset (a step of it, which
    tags its code version and data provenance), skipping those reported: the UI's "Report
    materialization" (`report_runless_asset_event`) and an op's logged `AssetMaterialization` carry
    no provenance, and one on top of a computed one hid what it read (found by an attack)."""
    def computed(materialization: dg.AssetMaterialization | None) -> bool:
        return materialization is not None and "dagster/code_version" in (materialization.tags or {})

    event = instance.get_latest_materialization_event(key)  # the asset's record: one indexed read
    if event is None or computed(event.asset_materialization):
        return event.asset_materialization if event is not None else None
    records = instance.fetch_materializations(key, limit=scan).records
    return next((r.asset_materialization for r in records if computed(r.asset_materialization)), None)


def recorded_inputs(instance: dg.DagsterInstance, asset: str, limit: int = 64) -> tuple[str, ...]:
    """The assets Dagster's instance records `asset` as computed from, and theirs, in any code
    location: the data provenance tags (`dagster/input_data_version/<key>`) of each one's latest
    materialization Dagster computed (`_latest_computed`). An asset no Dagster run computed, or one
    that declares no deps, records none."""
    prefixes = ("dagster/input_data_version/", "dagster/input_event_pointer/")
    found: list[str] = []
    todo = [asset]
    while todo and len(found) < limit:
        materialization = _latest_computed(instance, asset_key(todo.pop()))
        for tag in sorted((materialization.tags or {}) if materialization is not None else {}):
            name = next((tag[len(p):] for p in prefixes if tag.startswith(p)), None)
            if name is not None and name != asset and name not in found:
                found.append(name)
                todo.append(name)
    return tuple(found)


@dataclass(frozen=True)
class OpOutput:
    """An op's output that is no asset (an op job's, or an op's inside a graph-backed asset) as
    dagster-duckdb's IO managers name its table: its `table` metadata, else the output's name, in the
    schema its `schema` metadata names (else the IO manager's, which run config sets). `where` is
    `job/op.output`."""

    where: str
    table: str
    schema: object | None


def _kept_off_the_warehouse(job: dg.JobDefinition, io_manager_key: str) -> bool:
    """Whether the IO manager of `io_manager_key` is one of Dagster's that keep outputs as pickles or in
    memory, never in a table, whatever a launch configures: an op output `published_revenue` kept
    with `FilesystemIOManager` refused every load of daily_revenue (found by a review). Dagster's
    default `io_manager` is not one of them: an environment variable may name another."""
    resource = job.resource_defs.get(io_manager_key)
    if resource is None:
        return False
    if resource is dg.fs_io_manager or resource is dg.mem_io_manager:
        return True
    cls = getattr(resource, "configurable_resource_cls", None)
    return isinstance(cls, type) and issubclass(cls, dg.FilesystemIOManager)


def op_outputs(jobs: Iterable[dg.JobDefinition]) -> tuple[OpOutput, ...]:
    """The outputs of the ops of `jobs` that are neither an asset nor an asset check, each once;
    none that one of Dagster's file or memory IO managers keeps."""
    found: dict[tuple[str, str], OpOutput] = {}
    for job in jobs:
        layer = job.asset_layer
        for handle in job.graph.iterate_node_handles():
            op_def = job.graph.get_node(handle).definition
            if not isinstance(op_def, dg.OpDefinition):
                continue
            for out in op_def.output_defs:
                if (str(handle), out.name) in found or out.dagster_type.is_nothing \
                        or layer.get_asset_key_for_node_output(handle, out.name) is not None \
                        or layer.get_asset_check_key_for_node_output(handle, out.name) is not None \
                        or _kept_off_the_warehouse(job, out.io_manager_key):
                    continue
                metadata = out.metadata or {}
                table = metadata.get("table") or out.name
                found[(str(handle), out.name)] = OpOutput(f"{job.name}/{handle}.{out.name}",
                                                          str(getattr(table, "value", table)), metadata.get("schema"))
    return tuple(found.values())


class TableGraph:
    """The replayable tables of a set of definitions, and the partition mappings between them;
    `op_outputs`, the outputs of its op jobs (where the definitions' jobs are known)."""

    def __init__(self, asset_graph: AssetGraph,
                 tables: Mapping[str, tuple[TableSpec, dg.PartitionsDefinition]],
                 op_outputs: Iterable[OpOutput] = ()) -> None:
        self.asset_graph = asset_graph
        self.tables = dict(tables)
        self.op_outputs = tuple(op_outputs)

    @classmethod
    def of(cls, asset_graph: AssetGraph) -> TableGraph:
        return cls(asset_graph, tables_of_graph(asset_graph))

    def spec(self, name: str) -> TableSpec:
        return self.tables[name][0]

    def partitions_def(self, name: str) -> dg.PartitionsDefinition:
        return self.tables[name][1]

    def scheme(self, name: str) -> PartitionScheme:
        spec, partitions_def = self.tables[name]
        return scheme_for(partitions_def, spec.column(spec.partition_column).type, name=spec.name)

    @cached_property
    def _children(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, (spec, _) in sorted(self.tables.items()):
            if spec.source in self.tables and spec.source != name:
                out.setdefault(spec.source, []).append(name)
        return out

    def children(self, name: str) -> list[str]:
        """Replayable tables computed from `name`."""
        return list(self._children.get(name, []))

    def upstream(self, name: str) -> str | None:
        """The replayable table `name` is computed from, if any."""
        source = self.spec(name).source
        return source if source in self.tables and source != name else None

    def written_ancestor(self, name: str) -> str | None:
        """A replayable table, or a published one, that the asset `name` is computed from through
        other assets of these definitions (a team's plain asset between them), or None. A table whose
        `source` is such an asset reads backfill's data with no plan over it to recompute or hold it
        back: a month computed from the team's `clean_days`, a copy of the published days, was left
        beside the days a plan published since (found by an attack). Only the deps these definitions
        declare are walked; an asset of another code location (an external asset here) is followed by
        `recorded_inputs`; one that reads the table by SQL with no `deps`, or a table filled outside
        Dagster, is not seen (README, "A limit")."""
        # by the table DuckDB reads (case folded, `main/published_revenue` is main's published_revenue):
        # a team's `deps` on the published days so named walked past them (found by an attack)
        ours = {_read_table(asset_key(n)): n for n in self.tables}
        ours.update({_read_table(asset_key(s.publish_as)): s.publish_as for s, _ in self.tables.values()})
        start = asset_key(name)
        seen, todo = {start}, [start]
        while todo:
            key = todo.pop()
            if not self.asset_graph.has(key):
                continue
            for parent in sorted(self.asset_graph.get(key).parent_keys, key=key_name):
                if _read_table(parent) in ours:
                    return ours[_read_table(parent)]
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return None

    def code_identity(self, assets: Iterable[str]) -> str:
        """What a plan writing `assets` binds of their code (`table.code_identity_of`); a table the
        definitions lack has no identity, so no signature can bind it."""
        assets = list(assets)
        missing = [a for a in assets if a not in self.tables]
        if missing:
            return f"missing/{missing[0]}"
        return code_identity_of([self.spec(a) for a in assets])

    def _read_rule(self, child: str, parent: str) -> None:
        """Refuse an edge whose reads the definitions cannot tell. A child partition's `select_sql`
        and gates read the upstream rows whose `source_partition_column` falls in its own key (its
        value, or its window's `[start, end)`); those rows are the upstream partitions of that key or
        window only when that column is the upstream's partition column, both tables are partitioned
        alike (static keys, or time windows of one time zone) and their columns compare alike."""
        cspec, pspec = self.spec(child), self.spec(parent)
        cdef, pdef = self.partitions_def(child), self.partitions_def(parent)
        if cspec.source_partition_column.lower() != pspec.partition_column.lower():
            raise WindowError(f"{child} reads {parent} by {cspec.source_partition_column}, but {parent} is partitioned "
                              f"by {pspec.partition_column}: which {parent} partitions a {child} partition reads "
                              "cannot be told from the definitions, so none could be checked",
                              fix=f"read {parent} by its partition column (source_partition_column="
                              f"{pspec.partition_column!r}), or compute {child} from a table partitioned by "
                              f"{cspec.source_partition_column}")
        static = isinstance(cdef, dg.StaticPartitionsDefinition)
        if static != isinstance(pdef, dg.StaticPartitionsDefinition):
            kinds = ("static", "time-window") if static else ("time-window", "static")
            raise WindowError(f"{child} has {kinds[0]} partitions and reads {parent}, which has {kinds[1]} ones: its "
                              f"keys name no {parent} partition", fix=f"partition {child} as {parent} is partitioned "
                              "(static keys, or time windows)")
        if static:
            return
        assert isinstance(cdef, dg.TimeWindowPartitionsDefinition)
        assert isinstance(pdef, dg.TimeWindowPartitionsDefinition)
        if cdef.timezone != pdef.timezone:
            raise WindowError(f"{child}'s partitions are in {cdef.timezone} and {parent}'s in {pdef.timezone}: Dagster "
                              "maps no time window across time zones", fix=f"give {child}'s partitions definition "
                              f"timezone={pdef.timezone!r}")
        aware = [spec.column(spec.partition_column).type.upper().split("(")[0].strip()
                 in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE") for spec in (cspec, pspec)]
        if aware[0] != aware[1]:
            raise WindowError(f"{child}'s partition column {cspec.partition_column} is "
                              f"{cspec.column(cspec.partition_column).type} and {parent}'s "
                              f"{pspec.partition_column} {pspec.column(pspec.partition_column).type}: which rows "
                              f"a {child} window reads depends on the session's time zone",
                              fix="declare both with a time zone (TIMESTAMPTZ) or both without")

    def _mapped(self, child: str, parent: str, keys: Callable[[dg.PartitionMapping], Iterable[str]]) -> set[str]:
        """The keys the edge's partition mapping gives, or a one-line refusal where it fails."""
        mapping = self.asset_graph.get_partition_mapping(asset_key(child), asset_key(parent))
        try:
            return set(keys(mapping))
        except Exception as exc:  # noqa: BLE001 - a team's mapping may raise anything
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise WindowError(f"{child}'s partition mapping from {parent} ({type(mapping).__name__}) fails: {why}",
                              fix=f"give {child} a mapping Dagster can apply to both tables' partitions "
                              "(or none: the default)") from None

    def downstream_keys(self, parent: str, keys: Iterable[str], child: str) -> tuple[str, ...]:
        """The partitions of `child` that read any of `keys` of `parent`, in `child`'s order: those
        the edge's mapping gives, and those whose SQL and gates read `keys`' rows (their value, or a
        window that overlaps, whatever the mapping says). A team's mapping naming other partitions
        let a rollup be checked against upstream partitions it did not read, and be computed from
        one that failed its gates (a month mapped to the month before, a region copy mapped to
        another region; found by two attacks)."""
        self._read_rule(child, parent)
        parent_def, child_def = self.partitions_def(parent), self.partitions_def(child)
        pscheme, scheme = self.scheme(parent), self.scheme(child)
        keys = [k for k in keys if k in pscheme]
        if isinstance(child_def, dg.StaticPartitionsDefinition):
            found = {k for k in keys if k in scheme}
        else:
            found = {k for first, last in pscheme.runs(keys)
                     for k in scheme.overlapping(pscheme.span(first)[0], pscheme.span(last)[1])}
        subset = parent_def.subset_with_partition_keys(keys)
        found |= self._mapped(child, parent, lambda m: m.get_downstream_partitions_for_partitions(
            subset, parent_def, child_def).get_partition_keys())
        return tuple(sorted((k for k in found if k in scheme), key=scheme.position))

    def upstream_keys(self, child: str, key: str) -> tuple[str, ...]:
        """The partitions of `child`'s upstream table that partition `key` of `child` reads: the rows
        its SQL and gates read (`downstream_keys`), and those the edge's mapping gives."""
        parent = self.upstream(child)
        if parent is None:
            return ()
        self._read_rule(child, parent)
        parent_def, child_def = self.partitions_def(parent), self.partitions_def(child)
        scheme = self.scheme(parent)
        if isinstance(child_def, dg.StaticPartitionsDefinition):
            found = {key}
        else:
            found = set(scheme.overlapping(*self.scheme(child).span(key)))
        found |= self._mapped(child, parent, lambda m: m.get_upstream_mapped_partitions_result_for_partitions(
            child_def.subset_with_partition_keys([key]), child_def, parent_def).partitions_subset.get_partition_keys())
        return tuple(sorted((k for k in found if k in scheme), key=scheme.position))

    def derive(self, root: str, keys: Iterable[str]) -> list[Member]:
        """The members of a plan over `keys` of `root`: the root, then every replayable table
        downstream of it with its mapped partitions, each after the table it reads."""
        members = [Member(root, tuple(keys))]
        index = 0
        while index < len(members):
            parent = members[index]
            for child in self.children(parent.asset):
                if any(m.asset == child for m in members):
                    continue  # reached twice (a diamond) cannot happen: one source per table
                mapped = self.downstream_keys(parent.asset, parent.keys, child)
                if mapped:
                    members.append(Member(child, mapped, parent.asset))
            index += 1
        return members

    def consumers(self, members: Iterable[Member], store: DynamicPartitionsStore | None = None) -> list[Consumer]:
        """Assets that read a member's target or published table and are not themselves replayable
        targets or publish assets, with the partitions that read the members' partitions. `store`
        (the Dagster instance) lists a dynamic definition's keys; without it a dynamically partitioned
        consumer is named with no keys (`Consumer.dynamic`): Dagster cannot list them, and a per-client
        extract over the published days stopped `plan validate`, every run of the plan and the reopen
        sensor with an internal error (found by an attack)."""
        members = list(members)
        ours = {asset_key(m.asset) for m in members}
        ours |= {asset_key(self.spec(m.asset).publish_as) for m in members}
        replayable = {asset_key(n) for n in self.tables} | {asset_key(s.publish_as) for s, _ in self.tables.values()}
        found: dict[str, Consumer] = {}
        for member in members:
            spec = self.spec(member.asset)
            for parent_key in (asset_key(member.asset), asset_key(spec.publish_as)):
                if not self.asset_graph.has(parent_key):
                    continue
                for child_key in sorted(self.asset_graph.get(parent_key).child_keys, key=key_name):
                    if child_key in ours or child_key in replayable or not isinstance(child_key, dg.AssetKey):
                        continue
                    name = key_name(child_key)
                    dynamic = _dynamic(self.asset_graph.get(child_key).partitions_def)
                    keys = () if dynamic and store is None else self._consumer_keys(child_key, parent_key, member,
                                                                                      store)
                    before = found.get(name)
                    if before is not None and before.keys is not None and keys is not None:
                        keys = tuple(dict.fromkeys((*before.keys, *keys)))
                    found[name] = Consumer(name, keys, key_name(parent_key), dynamic)
        return list(found.values())

    def readers_by_another_key(self, members: Iterable[Member]) -> list[tuple[str, str, str]]:
        """Assets that read a member's target or published table through another asset key naming
        that table as the warehouse reads it (`main/published_weekly_revenue`, another case: the key
        a team's `deps` gives a table of dagster-duckdb's `main` schema), as (asset, key, the
        table's own asset). `consumers` follows the table's own key only, so such a report was left
        out of a plan's `downstream:`, its owners never told and no run refreshing it after a publish
        or a rollback (found by an attack); the reopen sensor can request only assets downstream of
        the table's own key."""
        own: dict[str, dg.AssetKey] = {}
        for member in members:
            for key in (asset_key(member.asset), asset_key(self.spec(member.asset).publish_as)):
                own[_read_table(key)] = key
        replayable = {asset_key(n) for n in self.tables} | {asset_key(s.publish_as) for s, _ in self.tables.values()}
        found: list[tuple[str, str, str]] = []
        for key in sorted(self.asset_graph.get_all_asset_keys(), key=key_name):
            table = _read_table(key)
            if table not in own or key == own[table]:
                continue
            for child_key in sorted(self.asset_graph.get(key).child_keys, key=key_name):
                if isinstance(child_key, dg.AssetKey) and child_key not in replayable:
                    found.append((key_name(child_key), key_name(key), key_name(own[table])))
        return found

    def _consumer_keys(self, child_key: dg.AssetKey, parent_key: dg.AssetKey, member: Member,
                       store: DynamicPartitionsStore | None = None) -> tuple[str, ...] | None:
        child = self.asset_graph.get(child_key)
        if child.partitions_def is None:
            return None
        parent_def = self.partitions_def(member.asset)
        mapping = self.asset_graph.get_partition_mapping(child_key, parent_key)
        try:
            with dg.partition_loading_context(dynamic_partitions_store=store):
                mapped = mapping.get_downstream_partitions_for_partitions(
                    parent_def.subset_with_partition_keys(list(member.keys)), parent_def, child.partitions_def)
                return tuple(sorted(mapped.get_partition_keys()))
        except Exception as exc:  # noqa: BLE001 - Dagster's mappings and a team's may raise anything
            if isinstance(child.partitions_def, dg.TimeWindowPartitionsDefinition) \
                    and isinstance(parent_def, dg.TimeWindowPartitionsDefinition):
                # Dagster maps no window across time zones (a New York daily extract over the UTC days),
                # and that refusal stopped every plan with an internal error (found by an attack): the
                # consumer's windows that overlap the members' read them
                return self._overlapping(child.partitions_def, member)
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise WindowError(f"{key_name(child_key)}'s partition mapping from {key_name(parent_key)} "
                              f"({type(mapping).__name__}) fails: {why}", fix=f"give {key_name(child_key)} a mapping "
                              "Dagster can apply to both assets' partitions (or none: the default)") from None

    def _overlapping(self, child_def: dg.TimeWindowPartitionsDefinition, member: Member) -> tuple[str, ...]:
        """The keys of `child_def` whose windows overlap those of `member`'s keys (instants, any time zone)."""
        parent_def = self.partitions_def(member.asset)
        assert isinstance(parent_def, dg.TimeWindowPartitionsDefinition)
        found: set[str] = set()
        for first, last in self.scheme(member.asset).runs(member.keys):
            start = parent_def.time_window_for_partition_key(first).start
            end = parent_def.time_window_for_partition_key(last).end
            # the windows starting inside, and the one holding `start` (New York's day before a UTC day)
            found.update(child_def.get_partition_keys_in_time_window(dg.TimeWindow(start, end)))
            found.add(child_def.get_partition_key_for_timestamp(start.timestamp()))
        return tuple(sorted(k for k in found if child_def.has_partition_key(k)))

    def plan_problems(self, root: str, keys: Iterable[str], listed: Mapping[str, tuple[str, ...]]) -> list[PlanProblem]:
        """What differs between the graph a plan lists ({asset: keys}, the root left out) and the
        one derived from these definitions."""
        derived = {m.asset: m.keys for m in self.derive(root, keys)[1:]}
        problems: list[PlanProblem] = []
        for asset, mapped in derived.items():
            if asset not in listed:
                problems.append(PlanProblem(
                    "graph", asset, f"{asset} is computed from {self.upstream(asset)} and reads the replayed "
                    f"partitions; add `- {{asset: {asset}, window: {{start: {mapped[0]}, end: {mapped[-1]}}}}}` "
                    "under graph: (consumers would otherwise see it stale beside the fixed data)"))
            elif tuple(listed[asset]) != tuple(mapped):
                problems.append(PlanProblem(
                    "graph.window", asset, f"{asset} recomputes {_span(mapped)} for this window, not "
                    f"{_span(listed[asset])}; give window: {{start: {mapped[0]}, end: {mapped[-1]}}}"))
        for asset in listed:
            if asset not in derived:
                where = ("is not a replayable table in the definitions" if asset not in self.tables
                         else f"is not downstream of {root}")
                problems.append(PlanProblem("graph", asset, f"{asset} {where}; remove it from graph:"))
        return problems


def _dynamic(partitions_def: dg.PartitionsDefinition | None) -> bool:
    """Whether Dagster lists the definition's keys only from an instance (dynamic, or a multi-partition
    definition with a dynamic dimension)."""
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return any(_dynamic(d.partitions_def) for d in partitions_def.partitions_defs)
    return isinstance(partitions_def, dg.DynamicPartitionsDefinition)


def _span(keys: tuple[str, ...]) -> str:
    if not keys:
        return "no partition"
    return keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]} ({len(keys)})"


_GRAPHS: dict[int, TableGraph] = {}
# the op jobs' outputs of the definitions an asset graph was resolved from, where they are known:
# a code location's runs and sensors (their repository), and the CLI's runs in process (`implicit_job`)
_OP_OUTPUTS: dict[int, tuple[AssetGraph, tuple[OpOutput, ...]]] = {}


def graph_of(asset_graph: AssetGraph) -> TableGraph:
    """The tables of an asset graph (built once per graph object)."""
    key = id(asset_graph)
    found = _GRAPHS.get(key)
    if found is None or found.asset_graph is not asset_graph:
        if len(_GRAPHS) > 16:
            _GRAPHS.clear()
        known = _OP_OUTPUTS.get(key)
        outputs = known[1] if known is not None and known[0] is asset_graph else ()
        found = _GRAPHS[key] = TableGraph(asset_graph, tables_of_graph(asset_graph), outputs)
    return found


def _remember_jobs(asset_graph: AssetGraph, jobs_of: Callable[[], Iterable[dg.JobDefinition]]) -> None:
    key = id(asset_graph)
    known = _OP_OUTPUTS.get(key)
    if known is None or known[0] is not asset_graph:
        if len(_OP_OUTPUTS) > 16:
            _OP_OUTPUTS.clear()
        with warnings.catch_warnings():
            # building every job warns as Dagster would when the team uses it (a job's varying backfill
            # policies): said here, on a check's reading, it reached the demo's terminal
            warnings.simplefilter("ignore")
            jobs = list(jobs_of())
        _OP_OUTPUTS[key] = (asset_graph, op_outputs(jobs))
        _GRAPHS.pop(key, None)


def graph_of_repository(repository_def: dg.RepositoryDefinition) -> TableGraph:
    """The graph of the definitions a sensor or a run belongs to, with their op jobs' outputs."""
    _remember_jobs(repository_def.asset_graph, repository_def.get_all_jobs)
    return graph_of(repository_def.asset_graph)


def implicit_job(definitions: dg.Definitions) -> dg.JobDefinition:
    """The definitions' implicit asset job, for runs in this process: Dagster sets no repository on
    them, so their graph (`graph_of_run`, the job's asset graph) knows the definitions' op jobs
    through this. The op jobs and the implicit job only: an asset job's outputs are the implicit job's
    (a graph-backed asset's ops included), and building each asset job to read them cost every
    command seconds on definitions with many (found by a review)."""
    job = definitions.resolve_implicit_global_asset_job_def()
    repository = definitions.get_repository_def()

    def jobs_of() -> list[dg.JobDefinition]:  # each with the definitions' resources, as the repository built it
        return [job, *(repository.get_job(j.name) for j in definitions.jobs or ()
                       if isinstance(j, dg.JobDefinition) and j.name != job.name)]

    _remember_jobs(job.asset_layer.asset_graph, jobs_of)
    return job


def graph_of_run(context: dg.AssetExecutionContext) -> TableGraph:
    """The graph of the definitions a run belongs to: its repository's where Dagster set one (runs of a
    code location: the UI, the daemon), else its job's (a job run in process holds every asset of
    the definitions it was resolved from; their op jobs where the job came from `implicit_job`)."""
    try:
        return graph_of_repository(context.repository_def)
    except Exception:  # noqa: BLE001 - Dagster raises a CheckError when no repository was set
        job = context.job_def
        while job.asset_selection_data is not None:  # a run of some assets: the job they were selected from
            job = job.asset_selection_data.parent_job_def
        return graph_of(job.asset_layer.asset_graph)
