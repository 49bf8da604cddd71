"""The options that chose the warehouse and the definitions, carried into the commands a command prints.

A command run as `backfill --home TEAM status fix` printed "run the proof: `backfill run fix --proof`";
pasted as printed, the proof ran in $BACKFILL_HOME's warehouse (or ./.backfill), where a plan of the
same id may be (found by an attack). Each backticked `backfill ...` command printed as advice gets
the `--home` and `--defs` given on the command line, shell-quoted, where they differ from what the
environment would choose and the printed command accepts them.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path

from backfill_assets.errors import BackfillError
from backfill_assets.home import resolve_home
from backfill_assets.terminal import shell_word

_PRINTED = re.compile(r"`(backfill [^`\n]+)`")


def rewriter(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Callable[[str], str] | None:
    """What adds the options that chose this command's warehouse and definitions to the commands it
    prints; None when the environment alone chooses the same (a pasted command finds them too)."""
    carried: dict[str, str] = {}
    given_home = getattr(args, "home_once", None) or getattr(args, "home", None)
    if given_home is not None:
        try:
            home = resolve_home(given_home).root
            if home != resolve_home(None).root:
                carried["--home"] = str(home)  # absolute: the pasted command may run from another folder
        except BackfillError:
            pass  # the command itself says what is wrong with it
    defs = getattr(args, "defs", None)
    if defs:
        from backfill_assets.loaded_defs import DEFS_ENV  # Dagster's import: a command given --defs loads it anyway

        if defs != os.environ.get(DEFS_ENV):
            target, colon, attr = defs.partition(":")
            if target.endswith(".py") or os.sep in target:  # a file (as loaded_defs reads it): absolute too
                defs = f"{Path(target).resolve()}{colon}{attr}"
            carried["--defs"] = defs
    if not carried:
        return None

    def rewrite(text: str) -> str:
        return _PRINTED.sub(lambda found: f"`{_carrying(parser, found.group(1), carried)}`", text)

    return rewrite


def data_on_stdout(args: argparse.Namespace) -> bool:
    """Whether the command's stdout is data, not advice: rendered evidence (its header names `backfill
    evidence`), JSON, a statement approvers sign, the notices as sent. Those stay byte for byte as the
    product made them (a subcommand says so with `data_out`)."""
    return bool(getattr(args, "json", False) or getattr(args, "print_statement", False)
                or getattr(args, "data_out", False))


def _carrying(parser: argparse.ArgumentParser, command: str, carried: dict[str, str]) -> str:
    try:
        words = shlex.split(command)[1:]
    except ValueError:  # not a command the shell reads as written (a placeholder's quote): left as is
        return command
    accepts = _options_of(parser, words)
    added = [f"{option} {shell_word(value)}" for option, value in carried.items()
             if option in accepts and not any(w == option or w.startswith(f"{option}=") for w in words)]
    # after the command's own words, where its subcommand reads them (`plan new` takes no --home)
    return " ".join([command, *added])


def _options_of(parser: argparse.ArgumentParser, words: list[str]) -> set[str]:
    """The option strings of the (sub)command `words` name: empty for a name no parser knows."""
    for word in words:
        found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not found:
            break
        if word not in found[0].choices:
            return set()
        parser = found[0].choices[word]
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        return set()  # `backfill plan`: no command yet
    return set(parser._option_string_actions)
