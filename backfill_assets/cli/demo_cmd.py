"""`backfill demo`: runs the demo pipeline's story (see examples/demo.py)."""

from __future__ import annotations

import argparse

from backfill_assets.cli.common import add_home, home_of


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="the whole story on the embedded DuckDB (examples/)")
    add_home(demo)
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from examples.demo import run_demo

    return run_demo(home_of(args))
