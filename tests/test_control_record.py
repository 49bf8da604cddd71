"""The control record: phases, transitions and the hash-chained evidence log on a real file."""

from __future__ import annotations

import duckdb
import pytest

from backfill_assets.control import evidence_log, record
from backfill_assets.control.schema import ensure_schema
from backfill_assets.errors import EvidenceChainBroken, PhaseError
from backfill_assets.plan import load_plan, tally
from backfill_assets.plan.phases import Phase
from backfill_assets.warehouse.connection import connection, transaction
from tests.plans import complete_plan, write_plan


@pytest.fixture
def con(tmp_path):
    with connection(tmp_path / "warehouse.duckdb") as con:
        ensure_schema(con)
        yield con


def test_phases_move_in_order_and_illegal_moves_are_refused(tmp_path, con):
    path = write_plan(tmp_path / "p.yaml", complete_plan())
    plan = load_plan(path)
    record.register(con, plan, tally(plan).sha256, path, "olivia")
    with pytest.raises(PhaseError, match="cannot move from drafted to running"):
        record.transition(con, plan.plan_id, Phase.RUNNING, "olivia")
    for phase in (Phase.APPROVED, Phase.PROVING, Phase.PROVEN, Phase.RUNNING):
        record.transition(con, plan.plan_id, phase, "olivia")
    state = record.transition(con, plan.plan_id, Phase.ROLLED_BACK, "olivia", note="drill")
    assert state.phase is Phase.ROLLED_BACK and not state.active
    with pytest.raises(PhaseError, match="finished"):
        record.transition(con, plan.plan_id, Phase.APPROVED, "olivia")
    moves = [(r.payload["from"], r.payload["to"], r.actor)
             for r in evidence_log.rows(con, plan.plan_id, "transition")]
    assert moves[0] == ("drafted", "approved", "olivia")
    assert moves[-1] == ("running", "rolled_back", "olivia")


def test_a_failed_transaction_records_nothing(tmp_path, con):
    path = write_plan(tmp_path / "p.yaml", complete_plan())
    plan = load_plan(path)
    with pytest.raises(RuntimeError), transaction(con):
        record.register(con, plan, tally(plan).sha256, path, "olivia")
        raise RuntimeError("crash after the first statement")
    assert record.get(con, plan.plan_id) is None
    assert evidence_log.rows(con) == []


def test_evidence_chain_verifies_and_detects_an_edited_row(tmp_path):
    db = tmp_path / "warehouse.duckdb"
    with connection(db) as con:
        ensure_schema(con)
        for i in range(5):
            evidence_log.append(con, plan_id="p", kind="note", actor="a", payload={"i": i})
        assert evidence_log.verify(con) == 5
    # an edit made outside backfill, by a plain SQL client
    raw = duckdb.connect(str(db))
    raw.execute("UPDATE backfill_control.evidence SET payload = '{\"i\":99}' WHERE seq = 3")
    raw.close()
    with connection(db) as con, pytest.raises(EvidenceChainBroken, match="evidence row 3"):
        evidence_log.verify(con)


def test_evidence_chain_detects_a_deleted_row_and_a_relinked_row(tmp_path):
    db = tmp_path / "warehouse.duckdb"
    with connection(db) as con:
        ensure_schema(con)
        for i in range(4):
            evidence_log.append(con, plan_id="p", kind="note", actor="a", payload={"i": i})
        con.execute("DELETE FROM backfill_control.evidence WHERE seq = 2")
        with pytest.raises(EvidenceChainBroken, match="evidence row 2"):
            evidence_log.verify(con)
        # a forger who recomputes the edited row's own hash still breaks the next link
        con.execute("DELETE FROM backfill_control.evidence")
        for i in range(3):
            evidence_log.append(con, plan_id="p", kind="note", actor="a", payload={"i": i})
        row = con.execute("SELECT seq, recorded_at, plan_id, kind, actor, prev_hash "
                          "FROM backfill_control.evidence WHERE seq = 2").fetchone()
        forged = evidence_log._row_hash(row[5], 2, row[1], row[2], row[3], row[4], '{"i":7}')
        con.execute("UPDATE backfill_control.evidence SET payload = '{\"i\":7}', row_hash = ? "
                    "WHERE seq = 2", [forged])
        with pytest.raises(EvidenceChainBroken, match="evidence row 3"):
            evidence_log.verify(con)
