"""A backfill run as a list of small stages; `--dry-run` prints them and stops.

ProofStage runs the proof partitions twice; WindowStage runs the rest of the window in slices of
at most max_concurrent_partitions; PartitionsStage re-runs named partitions after a fix. Each
slice becomes Dagster runs over contiguous partition ranges.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    slices: tuple[tuple[str, ...], ...]
    repeats: int = 1

    @property
    def partitions(self) -> list[str]:
        return [k for s in self.slices for k in s]

    def describe(self) -> str:
        times = f" x{self.repeats}" if self.repeats > 1 else ""
        lines = [f"{self.name}{times}: {len(self.partitions)} partition(s) in "
                 f"{len(self.slices)} slice(s)"]
        lines += [f"  slice {i + 1}: {', '.join(s)}" for i, s in enumerate(self.slices)]
        return "\n".join(lines)


def slices_of(keys: Sequence[str], size: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(keys[i:i + size]) for i in range(0, len(keys), size))


def contiguous_ranges(keys: Sequence[str]) -> list[tuple[str, str]]:
    """Daily keys grouped into (first, last) runs of consecutive days: one Dagster run each."""
    ranges: list[tuple[str, str]] = []
    for key in sorted(keys):
        if ranges and dt.date.fromisoformat(key) - dt.date.fromisoformat(ranges[-1][1]) == \
                dt.timedelta(days=1):
            ranges[-1] = (ranges[-1][0], key)
        else:
            ranges.append((key, key))
    return ranges


def proof_stage(proof_keys: Sequence[str], size: int) -> Stage:
    return Stage("proof", slices_of(list(proof_keys), size), repeats=2)


def window_stage(window: Sequence[str], proof_keys: Sequence[str], done: set[str],
                 size: int) -> Stage:
    todo = [k for k in window if k not in proof_keys and k not in done]
    return Stage("window", slices_of(todo, size))


def partitions_stage(keys: Sequence[str], size: int) -> Stage:
    return Stage("partitions", slices_of(list(keys), size))
