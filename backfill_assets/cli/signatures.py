"""Signatures given on the command line for a statement several people sign: a change of the trust
root (`approvers pin`) or the rollback of a published plan (`rollback`).

Each signer either signs here with their key (`--sign alice=~/.ssh/id_ed25519`) or signs the
printed statement offline with OpenSSH and passes the file (`--signature bob=bob.sig`, with
`--statement statement.txt`, the exact text they signed).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from backfill_assets.bounded import expanded, read_bounded
from backfill_assets.errors import SignatureError, UsageError
from backfill_assets.signing import sshsig
from backfill_assets.signing.statements import Statement
from backfill_assets.trust.root import Candidate

_FIX = "give NAME=PATH, e.g. --sign alice=~/.ssh/id_ed25519 or --signature bob=bob.sig"


def add_signature_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sign", action="append", default=[], metavar="NAME=KEY",
                        help="sign here as NAME with this unencrypted SSH private key (repeatable)")
    parser.add_argument("--signature", action="append", default=[], metavar="NAME=FILE",
                        help="NAME's `ssh-keygen -Y sign -n backfill-plan` signature of --statement (repeatable)")
    parser.add_argument("--statement", help="the statement the --signature files sign (see --print-statement)")
    parser.add_argument("--print-statement", action="store_true",
                        help="print the statement to sign (for ssh-keygen -Y sign), and change nothing")


def _pair(raw: str, option: str) -> tuple[str, Path]:
    name, sep, path = raw.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise UsageError(f"{option} {raw!r} is not NAME=PATH", fix=_FIX)
    return name.strip(), expanded(path.strip(), option)


def _read(path: Path, what: str, limit: int = 64 * 1024) -> str:
    try:
        return read_bounded(path, limit, what, _FIX).decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path} ({exc.strerror})", fix=_FIX) from None


def candidates(args: argparse.Namespace, fresh: Callable[[], Statement],
               printed_by: str | None = None) -> list[Candidate]:
    """The signatures the command was given, over `--statement` when one is given, else over the
    statement `fresh()` makes now (which `--sign` signs). `printed_by`: the command that prints the
    statement, named by a refusal of the file (a rollback's statement edited by hand was refused
    naming `backfill plan statement`, which prints no rollback statement: found by an attack)."""
    if args.signature and not args.statement:
        raise UsageError("--signature needs --statement, the text that was signed",
                         fix="pass --statement FILE as printed by --print-statement")
    try:
        statement = Statement.parse(_read(Path(args.statement), "statement file")) if args.statement else fresh()
    except SignatureError as exc:
        if printed_by is None or not args.statement:
            raise
        raise SignatureError(f"{args.statement}: {exc.message}",
                             fix=f"sign the statement `{printed_by}` prints, unchanged") from None
    out = []
    for raw in args.sign:
        name, key = _pair(raw, "--sign")
        out.append(Candidate(name, statement.text, sshsig.sign(statement.message, key)))
    for raw in args.signature:
        name, path = _pair(raw, "--signature")
        out.append(Candidate(name, statement.text, _read(path, "signature file")))
    return out
