"""`backfill approvers show | statement | pin`: the trust root approvals are counted under.

The first root is pinned by `backfill init`. Changing it (another allowed_signers or policy) takes
the signatures of the current root's quorum over a `trust root` statement: `approvers statement
NEW_FILE` prints it, each approver signs it, `approvers pin NEW_FILE --signature ...` pins it.
"""

from __future__ import annotations

import argparse

from backfill_assets.cli.common import actor, add_home, note_unverified_statement, reading, writing
from backfill_assets.cli.signatures import add_signature_options, candidates
from backfill_assets.control import trust_record
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.trust.policy import POLICY_FILE, Policy


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("approvers", help="the trust root: allowed_signers and the policy approvals count under")
    actions = group.add_subparsers(dest="approvers_action", required=True, metavar="{show,statement,pin}")
    show = actions.add_parser("show", help="the pinned trust root and its history")
    add_home(show)
    show.set_defaults(handler=cmd_show)
    for name, text in (("statement", "print the statement the current approvers sign to pin new files"),
                       ("pin", "pin new files, with the signatures of the current root's quorum")):
        cmd = actions.add_parser(name, help=text)
        cmd.add_argument("allowed_signers", help="the new allowed_signers file")
        cmd.add_argument("--policy", help=f"the new policy (default: {POLICY_FILE} beside it, else the pinned one)")
        if name == "pin":
            add_signature_options(cmd)
        else:
            cmd.add_argument("--valid-days", type=int, help="how long the signatures may be used")
        add_home(cmd)
        cmd.set_defaults(handler=cmd_pin if name == "pin" else cmd_statement,
                         keep_open=name == "pin", data_out=name == "statement")  # signed as printed


def load_files(signers_path: str, policy_path: str | None, fallback: Policy | None = None
               ) -> tuple[AllowedSigners, Policy]:
    """allowed_signers and its policy: --policy, else policy.yaml beside the file, else `fallback`
    (the pinned policy when re-pinning, the default one at init)."""
    import os
    from pathlib import Path

    signers = AllowedSigners.load(signers_path)
    beside = Path(signers_path).parent / POLICY_FILE
    if policy_path:
        policy = Policy.load(policy_path)
    elif os.path.lexists(beside):
        # present, whatever it is: read (or refused in one line) as the team's policy, never
        # passed over for the default one (a dangling link, a pipe, a folder)
        policy = Policy.load(beside)
    else:
        policy = fallback or Policy.default()
    return signers, policy


def cmd_show(args: argparse.Namespace) -> int:
    from backfill_assets import terminal
    from backfill_assets.control.evidence_log import can_verify

    with reading(args) as session:
        found = trust_record.history(session)
        verified = can_verify(session)
    if found and not verified:  # the rows as typed: a forged first pin was shown as the root (found by an attack)
        terminal.note(terminal.UNVERIFIED.format(what="trust root",
                                                  fix="compare it with the reviewed files where the key is"))
    if not found:
        print("approvers: no trust root pinned yet: `backfill init --allowed-signers FILE [--policy FILE]`")
        return 0
    for pinned in found:
        print(("current    " if pinned is found[-1] else "earlier    ") + pinned.describe())
    for why in found[-1].root.signers.skipped:  # a line an earlier release read, refused today
        print(f"skipped    {why}: it allows nothing, as OpenSSH skips it")
    policy = found[-1].root.policy.model
    print(f"policy     at least {policy.approvals.minimum} approver signature(s) and the owner's on every plan; "
          f"valid {policy.approvals.valid_days} day(s); {policy.trust_root.quorum} to change the root")
    return 0


def cmd_statement(args: argparse.Namespace) -> int:
    with reading(args) as session:
        root = trust_record.require(session)
        note_unverified_statement(session, root.warehouse_id)
    signers, policy = load_files(args.allowed_signers, args.policy, root.policy)
    statement = trust_record.change_statement(root, signers, policy, valid_days=args.valid_days)
    print(statement.text, end="")
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    with writing(args) as session:
        root = trust_record.require(session)
        signers, policy = load_files(args.allowed_signers, args.policy, root.policy)
        if args.print_statement:
            print(trust_record.change_statement(root, signers, policy).text, end="")
            return 0
        given = candidates(args, lambda: trust_record.change_statement(root, signers, policy))
        with session.transaction():
            pinned, counted = trust_record.repin(session, signers, policy, given, actor())
    print(f"pinned {pinned.describe()}; was {root.describe()}")
    return 0
