"""The execution commands, registered after the plan commands (they load Dagster lazily)."""

from __future__ import annotations

from types import ModuleType


def modules() -> list[ModuleType]:
    from backfill_assets.cli import (
        approvers_cmd,
        demo_cmd,
        init_cmd,
        load_cmd,
        notices_cmd,
        report_cmds,
        run_cmds,
        sample_cmd,
    )

    return [init_cmd, sample_cmd, approvers_cmd, run_cmds, load_cmd, report_cmds, notices_cmd, demo_cmd]
