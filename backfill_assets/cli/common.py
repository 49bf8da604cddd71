"""Helpers the subcommands share: the home, the warehouse connection, the actor's name."""

from __future__ import annotations

import argparse
import getpass
import os

from backfill_assets.home import Home, resolve_home


def home_of(args: argparse.Namespace) -> Home:
    return resolve_home(getattr(args, "home", None))


def add_home(parser: argparse.ArgumentParser) -> None:
    # --home is accepted after the subcommand too, since that is where people type it
    parser.add_argument("--home", default=argparse.SUPPRESS,
                        help="state folder (default: $BACKFILL_HOME or ./.backfill)")


def actor() -> str:
    return os.environ.get("BACKFILL_ACTOR") or getpass.getuser()
