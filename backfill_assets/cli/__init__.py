"""The `backfill` command: thin argument parsing over the library, one error handler."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from backfill_assets.cli import guard_cmd, plan_cmds
from backfill_assets.errors import BackfillError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other misuse
        sys.stderr.write(f"backfill: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="backfill", description="Safe, plan-gated backfills on Dagster.")
    parser.add_argument("--home", help="state folder (default: $BACKFILL_HOME or ./.backfill)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in _command_modules():
        module.register(sub)
    return parser


def _command_modules() -> list:
    from backfill_assets.cli import ops_cmds

    return [plan_cmds, guard_cmd, *ops_cmds.modules()]


def _red(text: str) -> str:
    return f"\033[31m{text}\033[0m" if sys.stderr.isatty() else text


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except BackfillError as exc:
        sys.stderr.write(_red(f"backfill: {exc}") + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("backfill: interrupted; every partition is either old or new\n")
        return 130


def entrypoint() -> None:
    raise SystemExit(main())
