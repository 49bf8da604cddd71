"""`backfill demo`: runs the demo pipeline's story (see backfill_assets/demo/story.py)."""

from __future__ import annotations

import argparse

from backfill_assets.cli.common import add_home, home_of


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="the whole story on the embedded DuckDB (backfill_assets/demo)")
    add_home(demo)
    demo.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from backfill_assets.demo.story import run_demo

    # the story drives the CLI as a person would; main hands itself in (`args.main`), because an
    # import of it from here would run back up to the module that registers this command
    return run_demo(home_of(args), backfill=args.main)
