"""Attack round (last): concurrent sessions on PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from backfill_assets import faults
from tests.test_graph import _cancelled_under_a_month
from tests.test_pg_concurrency import _stall, _until_reached, wait_for_waiters

pytestmark = pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)


def test_two_keep_computed_rollbacks_at_once_one_wins_whole_the_other_refuses_in_one_line(
        engine_world, monkeypatch, capsys):
    world = engine_world
    _cancelled_under_a_month(world, monkeypatch)
    month = world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue")
    capsys.readouterr()
    seen = _stall(monkeypatch, "rollback.before_commit")
    codes: dict[str, int] = {}
    first = threading.Thread(target=lambda: codes.update(first=world.cli(
        "rollback", "fix", "--keep-computed", "monthly_revenue")))
    first.start()
    try:
        _until_reached("rollback.before_commit", seen)
        second = threading.Thread(target=lambda: codes.update(second=world.cli(
            "rollback", "fix", "--keep-computed", "monthly_revenue")))
        second.start()
        wait_for_waiters(world, 1, ("advisory", "tuple", "transactionid", "relation"))
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, "rollback.before_commit")
    first.join(timeout=240)
    second.join(timeout=240)
    monkeypatch.delenv(faults.STALL_ENV)
    said = capsys.readouterr()
    assert codes == {"first": 0, "second": 1}, (codes, said.err)
    refusals = [line for line in said.err.splitlines() if line.startswith("backfill:")]
    assert len(refusals) == 1 and "Traceback" not in said.err, said.err
    assert world.phase("fix") == "rolled_back"
    assert world.sql("SELECT count(*) FROM backfill_control.evidence WHERE kind = 'rollback'")[0][0] == 1
    assert world.sql("SELECT sum(net_revenue) FROM published_monthly_revenue") == month
    assert world.cli("evidence", "verify") == 0


def test_an_approval_a_pause_and_a_publish_of_three_plans_at_once_each_append_to_one_chain(
        engine_world, monkeypatch, capsys):
    from tests.world import keys

    world = engine_world
    assert world.materialize(keys(1, 10), publish=True).success
    world.approved_plan("a", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert world.cli("run", "a", "--proof") == 0
    world.approved_plan("c", start="2026-01-08", end="2026-01-09", proof=("2026-01-08",))
    assert world.cli("run", "c", "--proof") == 0 and world.cli("run", "c") == 0
    assert world.phase("c") == "reconciled"
    path = world.plan("b", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    from tests.world import OWNER
    world.sign_into_file(path, OWNER, "alice")
    capsys.readouterr()
    seen = _stall(monkeypatch, "approve.before_commit")
    codes: dict[str, int] = {}
    approve = threading.Thread(target=lambda: codes.update(approve=world.cli(
        "plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"]))))
    approve.start()
    others = []
    try:
        _until_reached("approve.before_commit", seen)
        others = [threading.Thread(target=lambda: codes.update(pause=world.cli("pause", "a"))),
                  threading.Thread(target=lambda: codes.update(publish=world.cli("publish", "c")))]
        for t in others:
            t.start()
        wait_for_waiters(world, 2, ("advisory", "tuple", "transactionid", "relation"))
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, "approve.before_commit")
    for t in [approve, *others]:
        t.join(timeout=240)
    monkeypatch.delenv(faults.STALL_ENV)
    said = capsys.readouterr()
    assert codes == {"approve": 0, "pause": 0, "publish": 0}, (codes, said.err)
    assert world.phase("c") == "published" and world.phase("b") == "approved", said.err
    seqs = [s for (s,) in world.sql("SELECT seq FROM backfill_control.evidence ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))
    assert world.cli("evidence", "verify") == 0
    for plan in ("a", "b", "c"):
        assert world.cli("status", plan) == 0, capsys.readouterr().err


def test_a_status_read_while_plans_change_three_times_is_never_called_forged(engine_world, monkeypatch, capsys,
                                                                            tmp_path):
    """`backfill status` reads the chain index, then the plans' rows; each time a plan's change (a
    pause, a cancel) commits between the two reads, it reads again, and the third disagreement was
    called a forged record: on a busy warehouse an operator was told the record had been tampered
    with while every change was a command of theirs."""
    from tests.test_pg_concurrency import _backfill, _until
    from tests.world import keys

    world = engine_world
    assert world.materialize(keys(1, 10), publish=True).success
    world.approved_plan("a", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.approved_plan("b", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    assert world.cli("run", "a", "--proof") == 0 and world.cli("run", "b", "--proof") == 0
    capsys.readouterr()
    point = "record.all_plans.after_index"
    seen = faults.reached(point)
    monkeypatch.setenv(faults.STALL_ENV, ",".join(f"{point}@{seen + i}=120" for i in (1, 2, 3)))
    monkeypatch.delenv(faults.RELEASE_ENV, raising=False)
    codes: dict[str, int] = {}
    reader = threading.Thread(target=lambda: codes.update(status=world.cli("status")))
    reader.start()
    try:
        for i, change in enumerate((("pause", "a"), ("cancel", "a"), ("pause", "b")), start=1):
            _until_reached(point, seen + i - 1)  # the reader has read the index, not yet the plans
            if i == 3:  # it waits for the reader's last read, or commits between its two statements
                last = _backfill(world, tmp_path, *change, wait=False)
                _until(lambda last=last: last.poll() is not None or world.sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND wait_event = 'advisory'")[0][0] >= 1)
                monkeypatch.setenv(faults.RELEASE_ENV, point)
                _, err = last.communicate(timeout=240)
                assert last.returncode == 0, err
                break
            done = _backfill(world, tmp_path, *change)
            assert done.returncode == 0, done.stderr
            with world.warehouse().session() as held, held.transaction():
                held.execute("LOCK TABLE backfill_control.plans IN ACCESS EXCLUSIVE MODE")
                monkeypatch.setenv(faults.RELEASE_ENV, point)
                wait_for_waiters(world, 1, ("relation",))  # past the stall, waiting to read the plans
                monkeypatch.delenv(faults.RELEASE_ENV)
    finally:
        monkeypatch.setenv(faults.RELEASE_ENV, point)
        reader.join(timeout=240)
    monkeypatch.delenv(faults.STALL_ENV)
    said = capsys.readouterr()
    assert codes == {"status": 0}, (codes, said.err)
    assert "forged" not in said.err.lower() and world.cli("evidence", "verify") == 0
