"""Does a plan fit its target? Checked at approval, by the guard and `plan validate` when the
definitions load, and again by the write permission in every run.

A plan that cannot run is never approved: its target must be a replayable table, its window and
proof partitions keys of that table's partitions, its business keys the table's, its metrics ones
the table and every table of its graph declare, and its source of truth the table's source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from backfill_assets.errors import PlanProblem, WindowError
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.loading import MAX_WINDOW_ENV, max_window_partitions
from backfill_assets.plan.model import Plan
from backfill_assets.table import TableSpec

if TYPE_CHECKING:
    from backfill_assets.graph import TableGraph


@dataclass(frozen=True)
class Fit:
    keys: list[str]              # the window's partition keys, in order
    problems: list[PlanProblem]
    # every table the plan writes and its partitions, the target first (its graph's in order)
    members: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _expect_problems(plan: Plan, spec: TableSpec, keys: list[str]) -> list[PlanProblem]:
    """`expect:` names the target's value columns and metrics, and partitions of its window."""
    if plan.expect is None:
        return []
    problems = []
    columns, metrics = set(spec.value_columns), {m.name for m in spec.metrics}
    for change in plan.expect.changes:
        if change.name in spec.business_keys:
            problems.append(PlanProblem("expect.changes.name", change.name,
                                        "is a business key: a row whose key changes is one removed and one "
                                        "added; say rows_added / rows_removed instead"))
        elif change.name not in columns | metrics:
            problems.append(PlanProblem("expect.changes.name", change.name,
                                        f"{spec.name} has no such value column or metric; use one of: "
                                        f"{', '.join(sorted(columns | metrics))}"))
        elif change.name not in metrics and (change.direction or change.per_partition or change.window):
            problems.append(PlanProblem("expect.changes.name", change.name,
                                        f"direction and bounds judge a metric, and {spec.name} declares no "
                                        f"metric {change.name}; declare one or remove them"))
    inside = set(keys)
    for key in plan.expect.partitions or []:
        if keys and key not in inside:
            problems.append(PlanProblem("expect.partitions", key,
                                        f"is not a partition of the window {plan.window.start}.."
                                        f"{plan.window.end}; pick keys inside it"))
    return problems


def fit(plan: Plan, spec: TableSpec, scheme: PartitionScheme, graph: TableGraph | None = None, *,
        drafting: bool = False) -> Fit:
    """`graph`: the loaded definitions' tables (`graph.TableGraph`); without it a plan that
    lists a graph cannot be checked, and does not fit. `drafting`: also what people get wrong while
    writing it (a `downstream` name that is no asset); the decisions of runs do not re-judge that,
    so a consumer renamed later does not stop a replay."""
    problems: list[PlanProblem] = []
    if plan.target != spec.name:
        problems.append(PlanProblem("target", plan.target, f"the loaded table is {spec.name}"))
    if plan.source_of_truth != spec.source:
        problems.append(PlanProblem("source_of_truth", plan.source_of_truth,
                                    f"{spec.name} is computed from {spec.source}; set source_of_truth: "
                                    f"{spec.source}"))
    keys_given = plan.execution.business_keys
    if keys_given is not None and set(keys_given) != set(spec.business_keys):
        problems.append(PlanProblem("execution.business_keys", keys_given,
                                    f"{spec.name}'s business keys are "
                                    f"[{', '.join(spec.business_keys)}]; give those or leave the key out"))
    declared = [m.name for m in spec.metrics]
    for metric in plan.gates.metrics:
        if metric.name not in declared:
            problems.append(PlanProblem("gates.metrics.name", metric.name,
                                        f"{spec.name} declares no such metric; use one of: "
                                        f"{', '.join(declared)}"))
    keys: list[str] = []
    try:
        keys = scheme.window(plan.window.start, plan.window.end)
    except WindowError as exc:
        problems.append(PlanProblem("window", f"{plan.window.start}..{plan.window.end}", str(exc)))
    limit = max_window_partitions()
    if len(keys) > limit:
        problems.append(PlanProblem("window", f"{plan.window.start}..{plan.window.end}",
                                    f"spans {len(keys):,} partitions of {spec.name}, more than the limit "
                                    f"of {limit:,}; split it into bounded plans (or raise {MAX_WINDOW_ENV})"))
    inside = set(keys)
    for key in plan.proof_keys:
        if keys and key not in inside:
            problems.append(PlanProblem("execution.proof_partitions", key,
                                        f"is not a partition of the window {plan.window.start}.."
                                        f"{plan.window.end}; pick keys inside it"))
    if len(keys) > 1 and set(keys) <= set(plan.proof_keys):
        # the proof is the bounded slice the window expands from only once it passed: a proof of
        # every partition is the full-window replay itself, with no slice proven before it (the
        # seed's red flag; a window of one partition is its own proof)
        problems.append(PlanProblem("execution.proof_partitions", list(plan.proof_keys),
                                    f"lists the whole window {plan.window.start}..{plan.window.end}, so no slice is "
                                    "proven before the full window is replayed; list fewer partitions"))
    problems += _expect_problems(plan, spec, keys)
    scenario = plan.scenario
    if scenario is not None and scenario.kind == "logic_change" and scenario.new_code_version != spec.code_version:
        problems.append(PlanProblem("scenario.new_code_version", scenario.new_code_version,
                                    f"the loaded {spec.name} is code version {spec.code_version}: the replay "
                                    "writes the new version, so deploy it first (or name the version it is)"))
    if scenario is not None and scenario.kind == "cutover" and keys and scenario.shadow_days is not None \
            and scenario.shadow_days > len(keys):
        # the streak counts partitions of the window: one longer than the window is never met
        problems.append(PlanProblem("scenario.shadow_days", scenario.shadow_days,
                                    f"the window {plan.window.start}..{plan.window.end} holds {len(keys)} "
                                    f"partition(s), so a streak of {scenario.shadow_days} can never be met; "
                                    "widen the window or lower shadow_days"))
    members = {plan.target: keys}
    if graph is None:
        if plan.graph:
            problems.append(PlanProblem("graph", [m.asset for m in plan.graph],
                                        "the plan's graph can be checked only with the definitions loaded "
                                        "(pass --defs)"))
        return Fit(keys, problems, members)
    listed: dict[str, tuple[str, ...]] = {}
    for member in plan.graph:
        if member.asset in listed or member.asset == plan.target:
            problems.append(PlanProblem("graph", member.asset, "listed twice; keep one entry"))
            continue
        if member.asset not in graph.tables:
            listed[member.asset] = ()
            continue
        try:
            listed[member.asset] = tuple(graph.scheme(member.asset).window(member.window.start, member.window.end))
        except WindowError as exc:
            problems.append(PlanProblem("graph.window", f"{member.window.start}..{member.window.end}",
                                        f"{member.asset}: {exc}"))
            listed[member.asset] = ()
    if keys and not problems:
        problems += graph.plan_problems(plan.target, keys, listed)
        if not problems:  # in dependency order: each table after the one it reads
            derived = graph.derive(plan.target, keys)
            members.update({m.asset: list(m.keys) for m in derived[1:]})
            # the gates judge every table of the graph by the plan's metrics: one a table lacks
            # halted its run after the days were written (found by a review)
            common = [n for n in declared if all(n in {m.name for m in graph.spec(table.asset).metrics}
                                                 for table in derived[1:])]
            for table in derived[1:]:
                there = {m.name for m in graph.spec(table.asset).metrics}
                problems += [PlanProblem("gates.metrics.name", metric.name,
                                         f"{table.asset}, of the plan's graph, declares no such metric; keep the "
                                         f"metrics every table of the graph declares: {', '.join(common)}")
                             for metric in plan.gates.metrics if metric.name in declared and metric.name not in there]
            listed_consumers = {c.asset for c in plan.downstream}
            for consumer in graph.consumers(derived):
                if consumer.asset not in listed_consumers:  # its owners are told, and it is refreshed
                    problems.append(PlanProblem(
                        "downstream", consumer.asset, f"{consumer.asset} reads {consumer.reads}, which the plan "
                        f"changes: add `- {{asset: {consumer.asset}, owners: [...]}}` under downstream:"))
            for reader, key, own in graph.readers_by_another_key(derived):
                problems.append(PlanProblem(
                    "downstream", reader, f"{reader} reads {own}'s table through the asset key {key}, which the "
                    f"plan changes, but nothing follows that key to tell its owners or refresh it after the "
                    f"publish: declare {reader}'s dependency on {own} itself (`deps=[{own!r}]`), then list it "
                    "under downstream:"))
    if drafting:  # after the graph's problems, which it does not hide
        known = {"/".join(k.path) for k in graph.asset_graph.get_all_asset_keys()}
        problems += [PlanProblem(f"downstream.{i}.asset", consumer.asset, "no such asset in the loaded definitions; "
                                 "name the asset key of a consumer (as the Dagster UI shows it)")
                     for i, consumer in enumerate(plan.downstream) if consumer.asset not in known]
    return Fit(keys, problems, members)
