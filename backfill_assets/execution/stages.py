"""A backfill run as a list of small stages; `--dry-run` prints them and stops.

ProofStage runs the proof partitions twice; WindowStage runs the rest of the window in runs of
at most `partitions_per_run` contiguous partitions; then, for a plan over a graph, each downstream
table's mapped partitions, in dependency order (a table after the one it reads); PartitionsStage
re-runs named partitions of one table after a fix. Each run is one Dagster run over a partition
range of one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backfill_assets.partitions import PartitionScheme


@dataclass(frozen=True)
class Stage:
    name: str
    runs: tuple[tuple[str, ...], ...]
    repeats: int = 1
    asset: str | None = None  # the table it writes; None: the plan's target

    @property
    def partitions(self) -> list[str]:
        return [k for s in self.runs for k in s]

    def describe(self, limit: int = 4) -> str:
        times = f" x{self.repeats}" if self.repeats > 1 else ""
        lines = [f"{self.name}{times}: {len(self.partitions)} partition(s) in {len(self.runs)} run(s)"]
        if not self.runs:
            lines[0] += " (all written and passed)"
        shown = list(enumerate(self.runs))
        if len(shown) > limit:
            shown = shown[:limit - 1] + [shown[-1]]
        for i, (n, keys) in enumerate(shown):
            if i == limit - 1 and len(self.runs) > limit:
                lines.append(f"  ... {len(self.runs) - limit} more run(s)")
            span = keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]} ({len(keys)})"
            lines.append(f"  run {n + 1}: {span}")
        return "\n".join(lines)


def runs_of(keys: Sequence[str], size: int, scheme: PartitionScheme) -> tuple[tuple[str, ...], ...]:
    """The runs of a stage: contiguous ranges of the definition's keys, each of at most `size` (the
    plan's `partitions_per_run`)."""
    out: list[tuple[str, ...]] = []
    position = {k: i for i, k in enumerate(keys)}
    for first, last in scheme.runs(list(keys)):
        run = [k for k in scheme.ordered_keys[scheme.position(first):scheme.position(last) + 1]
               if k in position]
        out += [tuple(run[i:i + size]) for i in range(0, len(run), size)]
    return tuple(out)


def proof_stage(proof_keys: Sequence[str], size: int, scheme: PartitionScheme) -> Stage:
    return Stage("proof", runs_of(list(proof_keys), size, scheme), repeats=2)


def window_stage(window: Sequence[str], proof_keys: Sequence[str], done: set[str], size: int,
                 scheme: PartitionScheme) -> Stage:
    todo = [k for k in window if k not in proof_keys and k not in done]
    return Stage("window", runs_of(todo, size, scheme))


def partitions_stage(keys: Sequence[str], size: int, scheme: PartitionScheme, asset: str | None = None) -> Stage:
    return Stage("partitions" if asset is None else f"partitions of {asset}",
                 runs_of(list(keys), size, scheme), asset=asset)


def downstream_stage(asset: str, keys: Sequence[str], done: set[str], size: int,
                     scheme: PartitionScheme) -> Stage:
    """A table of the plan's graph: its mapped partitions not yet written and passed under the plan."""
    return Stage(asset, runs_of([k for k in keys if k not in done], size, scheme), asset=asset)
