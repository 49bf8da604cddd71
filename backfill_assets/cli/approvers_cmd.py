"""`backfill approvers pin FILE | show`: the allowed_signers file approvals are checked against."""

from __future__ import annotations

import argparse

from backfill_assets.cli.common import actor, add_home, reading, writing
from backfill_assets.control import approvers
from backfill_assets.signing.allowed_signers import AllowedSigners


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("approvers", help="the team's allowed_signers file that approvals are checked against")
    actions = group.add_subparsers(dest="approvers_action", required=True, metavar="{pin,show}")
    pin = actions.add_parser("pin", help="pin (or re-pin, when the team changed its approvers) the reviewed file")
    pin.add_argument("allowed_signers")
    add_home(pin)
    pin.set_defaults(handler=cmd_pin)
    show = actions.add_parser("show", help="which file is pinned, by whom and when")
    add_home(show)
    show.set_defaults(handler=cmd_show)


def pin_and_say(session, signers: AllowedSigners) -> str:
    """Pin `signers` and say what changed (a re-pin names the file it replaced)."""
    with session.transaction():
        before = approvers.pinned(session)
        now = approvers.pin(session, signers, actor())
    if before is not None and before.sha256 != now.sha256:
        return f"re-pinned approvers: {now.describe()}; was {before.describe()}"
    return f"pinned approvers: {now.describe()}"


def cmd_pin(args: argparse.Namespace) -> int:
    signers = AllowedSigners.load(args.allowed_signers)
    with writing(args, create=True) as session:
        print(pin_and_say(session, signers))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with reading(args) as session:
        current = approvers.pinned(session)
    print(f"approvers: {current.describe()}" if current else
          "approvers: none pinned yet; the first `plan approve` (or `backfill approvers pin FILE`) pins its file")
    return 0
