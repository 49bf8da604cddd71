"""The `backfill` command: thin argument parsing over the library, one error handler.

Every failure the product expects is one red line naming the problem and the fix, with exit code
1 (refused, incomplete, a gate failed) or 2 (unreadable input, misuse). Anything else is one line
too, with the traceback in the log file (`--verbose` prints it).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from backfill_assets import terminal as output
from backfill_assets.cli import carried, guard_cmd, plan_cmds
from backfill_assets.errors import INTERRUPTED, INTERRUPTED_EXIT, BackfillError
from backfill_assets.warehouse import kept_open, lock_wait

INTERNAL_ERROR = 3
PIPE_CLOSED = 141  # as a shell reports a command a closed pipe ended (128 + SIGPIPE)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other misuse
        sys.stderr.write(f"backfill: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


# Built once a process (~7 ms a build): `backfill demo` runs many commands through main. Parsing never
# changes it, and argparse copies an appending option's default list before adding to it.
@functools.cache
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="backfill", description="Safe, plan-gated backfills on Dagster.")
    parser.add_argument("--home", help="state folder (default: $BACKFILL_HOME or ./.backfill)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="show Dagster's own log lines and tracebacks instead of logging them")
    # every command may run others through the same door (`backfill demo` does): it is handed main
    parser.set_defaults(main=main)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in _command_modules():
        module.register(sub)
    return parser


def _command_modules() -> list[ModuleType]:
    from backfill_assets.cli import ops_cmds

    return [plan_cmds, guard_cmd, *ops_cmds.modules()]


def _red(text: str) -> str:
    return f"\033[31m{text}\033[0m" if sys.stderr.isatty() else text


def _relay(args: argparse.Namespace) -> None:
    """Deliver notices queued by the command, after its transactions committed."""
    if not getattr(args, "relay", False):
        return
    from backfill_assets.cli.common import warehouse_of
    from backfill_assets.publish.notify import deliver_pending

    try:
        # undelivered notices stay in the outbox; the sensor or the next command retries them
        deliver_pending(warehouse_of(args), wait_seconds=5.0)
    except BackfillError:
        pass  # no warehouse to open: nothing to relay from


def main(argv: Sequence[str] | None = None) -> int:
    with output.reader_may_leave():
        try:
            return _main(argv)
        except KeyboardInterrupt:
            # outside the command's own handler too: typed while its parser was built (Python's
            # traceback on the terminal, found by an attack), or while a refusal's notices were relayed
            sys.stderr.write(INTERRUPTED)
            return INTERRUPTED_EXIT


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # before the command runs: `run` and `publish` export the home they were given to their own runs
    rewrite = carried.rewriter(parser, args)
    if rewrite is None:  # a command `backfill demo` runs keeps the demo's (its home is the environment's)
        return _command(args)
    with output.advice_rewritten(rewrite, stdout=not carried.data_on_stdout(args)):
        return _command(args)


def _command(args: argparse.Namespace) -> int:
    output.set_verbose(args.verbose)
    lock_wait.set_reporter(lambda message: output.say(f"backfill: {message}"))
    try:
        # a short command that writes keeps its warehouse database open between its sessions (the
        # relay lets it go before a receiver is waited on). Not the others: a reading command keeps
        # to reading (other readers go on beside it, and it never rewrites the file), `reconcile`
        # and the reports print whole windows (a pager would hold the file), and `run`, `load` and
        # `demo` wait on runs and other processes
        with kept_open() if getattr(args, "keep_open", False) else contextlib.nullcontext():
            code = int(args.handler(args) or 0)
            _relay(args)  # reads the outbox on the open database; lets it go before any delivery
        return code
    except BackfillError as exc:
        _relay(args)
        if exc.details:
            if args.verbose:
                sys.stderr.write(exc.details)
            _log_details(args, exc.details)
        sys.stderr.write(_red(f"backfill: {exc}") + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED)
        return INTERRUPTED_EXIT
    except BrokenPipeError:
        # a descriptor written past the streams (`reader_may_leave` keeps the command going when its
        # reader leaves): the command stopped short of its end, which exit 0 would deny
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return PIPE_CLOSED
    except Exception as exc:  # a bug: one line here, the traceback in the log
        fault = _environment_fault(args, exc)
        if fault is not None:  # a full disk or a read-only home is the machine's, not a bug
            _log_traceback(args)
            sys.stderr.write(_red(f"backfill: {fault}") + "\n")
            return fault.exit_code
        if args.verbose:
            traceback.print_exc()
        where = _log_traceback(args)
        sys.stderr.write(_red(f"backfill: internal error: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") +
                         f" (traceback in {where})\n")
        return INTERNAL_ERROR


def _environment_fault(args: argparse.Namespace, exc: BaseException) -> BackfillError | None:
    from backfill_assets.cli.common import home_of
    from backfill_assets.environment import fault_of

    try:
        where = str(home_of(args).root)
    except BackfillError:
        where = "the backfill home"
    return fault_of(exc, where)


def _log_details(args: argparse.Namespace, text: str) -> str:
    from backfill_assets.cli.common import log_details

    return log_details(args, text)


def _log_traceback(args: argparse.Namespace) -> str:
    return _log_details(args, traceback.format_exc())


def entrypoint() -> None:
    raise SystemExit(main())
