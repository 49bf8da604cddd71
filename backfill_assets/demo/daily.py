"""The demo's daily table alone, without its monthly rollup and report: the world of most tests,
and a plan over one table (`--defs backfill_assets.demo.daily`)."""

from __future__ import annotations

from backfill_assets.demo.definitions import build_definitions

defs = build_definitions()
