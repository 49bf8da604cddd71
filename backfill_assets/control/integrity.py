"""The whole control record against its keyed chain: what `evidence verify` checks, and what the
decisions consumers see (publish, a rollback) check before they act.

- every chain row under the evidence key, its links, and the heads logged outside the warehouse;
- every ledger row (writes, snapshots, gate results) against the seal of the chain row that
  recorded it, and no seal whose rows are gone; no write under no plan of a partition written before;
- every plan's row against the chain's last record of it, every version against its sha256, and
  every plan, version, approval and notice the chain recorded still there;
- the trust root's whole history (the first pin under the key, each change under its quorum).

Cheaper decisions (each run's permission, the sensor's tick) verify only the rows they read;
this is the check that also finds a row removed or hidden, whatever it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from backfill_assets.control import evidence_log, ledger, outbox, record, seals, trust_record
from backfill_assets.errors import ForgedRecord
from backfill_assets.warehouse.engine import Session


@dataclass(frozen=True)
class Verified:
    chain_rows: int
    ledger_rows: int
    plans: int
    trust_roots: int

    def describe(self) -> str:
        return (f"{self.chain_rows} chain row(s) intact, keyed, none cut off; {self.ledger_rows} ledger row(s) "
                f"match their seals; {self.plans} plan(s) and {self.trust_roots} trust root(s) match the chain")


def verify_record(session: Session, pinned: tuple[int, str] | None = None) -> Verified:
    """Raises EvidenceChainBroken or ForgedRecord naming the first row that does not verify."""
    rows = evidence_log.verify(session, pinned)
    ledger_rows = seals.verify_all(session)
    rewritten = ledger.rewrites_without_plan(session)
    if rewritten:
        raise ForgedRecord(f"{rewritten[0]}: only a plan rewrites history, so the ledger was edited to let it in",
                           fix=evidence_log.FORGED_FIX)
    plans = record.verify_all(session)
    outbox.verify_all(session)
    roots = trust_record.history(session)
    return Verified(rows, ledger_rows, len(plans), len(roots))
