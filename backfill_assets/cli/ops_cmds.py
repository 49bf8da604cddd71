"""The execution commands, registered after the plan commands."""

from __future__ import annotations


def modules() -> list:
    from backfill_assets.cli import run_cmds, sample_cmd

    return [run_cmds, sample_cmd]
