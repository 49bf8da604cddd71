"""Which allowed_signers file a warehouse's approvals are checked against: pinned in the record.

Anyone can point `plan approve` at an allowed_signers file of their own (`--allowed-signers`, or
an `approvers/` folder beside their plan) listing their own keys under other people's names. An
approval counts only if it verified against the team's reviewed file, so the control record pins
that file's sha256: `backfill init --allowed-signers FILE` pins it, or else the first approval
recorded does; from then on an approval checked against any other file is refused. A team that
changes its approvers re-pins explicitly (`backfill approvers pin FILE`); the pin records who and
when, and the guard refuses while the file it reads differs from the pinned one, so CI sees it.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import ApprovalError
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.warehouse.engine import Session

PIN_KEY = "approvers_pin"


@dataclass(frozen=True)
class Pin:
    sha256: str
    source: str
    by: str
    at: str

    def describe(self) -> str:
        return f"{self.source} (sha256 {self.sha256[:12]}, pinned by {self.by} at {self.at})"


def pinned(session: Session) -> Pin | None:
    raw = session.scalar(f"SELECT value FROM {SCHEMA}.meta WHERE key = ?", [PIN_KEY])
    return Pin(**json.loads(raw)) if raw else None


def pin(session: Session, signers: AllowedSigners, actor: str) -> Pin:
    """Pin `signers` (call inside a transaction)."""
    new = Pin(signers.sha256, str(signers.source), actor,
              dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat())
    session.execute(f"INSERT INTO {SCHEMA}.meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [PIN_KEY, json.dumps(new.__dict__, sort_keys=True)])
    return new


def require_pinned(session: Session, signers: AllowedSigners, actor: str) -> Pin:
    """The pin `signers` matches, pinning it when none is (call inside the approval's transaction)."""
    current = pinned(session)
    if current is None:
        return pin(session, signers, actor)
    if current.sha256 != signers.sha256:
        raise ApprovalError(
            f"{signers.source} (sha256 {signers.sha256[:12]}) is not the allowed_signers this warehouse's "
            f"approvals are checked against: {current.describe()}",
            fix="approve with the team's reviewed approvers/allowed_signers; if the team changed its "
                "approvers, re-pin it with `backfill approvers pin FILE`")
    return current
