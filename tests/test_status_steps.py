"""`status` never names a command that cannot succeed: in each state, the command it names succeeds
or moves the plan on (three states where it did not, found by an attack; each test failed first)."""

from __future__ import annotations

import json
import re


def _next(run_cli, pid: str) -> str:
    result = run_cli("status", pid, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)["next"]


def _commands(hint: str) -> list[list[str]]:
    return [c.split()[1:] for c in re.findall(r"`(backfill [^`]*)`", hint)]


def test_a_paused_reconciled_plan_is_resumed_by_the_run_status_names(world, run_cli):
    """Paused once reconciled: `backfill run fix` had nothing to run and kept the pause, so status
    named the same run again and again."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--proof").code == 0
    assert run_cli("run", "fix").code == 0 and world.phase() == "reconciled"
    assert run_cli("pause", "fix").code == 0
    hint = _next(run_cli, "fix")
    assert hint.startswith("resume with `backfill run fix`"), hint
    resumed = run_cli(*_commands(hint)[0])
    assert resumed.code == 0, resumed.err
    # the suggested command must make progress: the hold lifted, or a different next step
    assert _next(run_cli, "fix") != hint, (resumed.out, world.sql("SELECT phase, hold FROM backfill_control.plans"))


def test_a_plan_paused_once_reconciled_is_not_published_until_the_step_status_names_resumes_it(world, run_cli):
    """Paused while reconciled (pause allows it): publish refuses a held plan (it used to ignore
    the hold, and a cancelled plan was published: found by an attack); the step status names
    resumes it, then publish goes ahead and status says close."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--proof").code == 0
    assert run_cli("run", "fix").code == 0
    assert run_cli("pause", "fix").code == 0
    refused = run_cli("publish", "fix")
    assert refused.code == 1 and "frozen by plan fix (reconciled, paused)" in refused.err
    hint = _next(run_cli, "fix")
    failures = []
    for command in _commands(hint)[:1]:  # the first: resume (the other is to end it)
        result = run_cli(*command)
        if result.code != 0:
            failures.append((command, result.err.strip()))
    assert not failures, (hint, failures)
    assert run_cli("publish", "fix").code == 0 and world.phase() == "published"
    assert "close" in _next(run_cli, "fix")


def _approve_expiring(world, path, seconds: int):
    import datetime as dt

    from backfill_assets.plan.identity import plan_sha256
    from backfill_assets.plan.loading import load_plan
    from backfill_assets.signing.statements import PLAN_APPROVAL, Statement
    from tests.test_trust import approve_offline, root_of
    from tests.world import FIXED, OWNER

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    soon = Statement.make(PLAN_APPROVAL, signed=now, expires=now + dt.timedelta(seconds=seconds),
                          plan=plan_sha256(load_plan(path)), code=FIXED.code_identity,
                          warehouse=root_of(world).warehouse_id)
    for who in (OWNER, "alice", "bob"):
        assert approve_offline(world, path, who, soon) == 0
    return soon.expires


def _wait_until(moment):
    import datetime as dt
    import time

    time.sleep(max(0.0, (moment - dt.datetime.now(dt.UTC)).total_seconds()) + 0.5)


def test_a_cancelled_repair_after_the_approvals_expired_is_told_the_signed_rollback(world, run_cli, tmp_path):
    """Published, then the published table edited: a reconcile moves the plan to repairing; cancelled
    there, and its approvals expire. Consumers saw its data, so a rollback needs approvers'
    signatures: status named the bare `backfill rollback fix`, which is refused."""
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    # the steps up to the expiry in this process (~0.5 s each, not a command's ~2 s): the window
    # they must fit in is what the test waits for
    expires = _approve_expiring(world, path, 12)  # 8 s failed once with three other test processes on the 2 cores
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    world.run_sql("UPDATE published_revenue SET orders = orders + 1 WHERE order_date = '2026-01-02'")
    assert world.cli("reconcile", "fix") == 0 and world.phase() == "repairing"
    assert world.cli("cancel", "fix") == 0
    _wait_until(expires)
    hint = _next(run_cli, "fix")
    assert "backfill rollback fix --print-statement" in hint, hint
    statement = tmp_path / "rollback.txt"
    printed = run_cli("rollback", "fix", "--print-statement")
    assert printed.code == 0, printed.err
    statement.write_text(printed.out)
    signed = run_cli("rollback", "fix", "--statement", str(statement),
                     "--sign", f"alice={world.keys['alice']}", "--sign", f"bob={world.keys['bob']}")
    assert signed.code == 0, signed.err
    assert world.phase() == "rolled_back"


def test_a_closed_plan_whose_published_table_was_edited_names_the_step_that_publishes_again(world, run_cli):
    """Closed, then the published table edited: status showed `EDITED since` but `next: nothing`, and
    `publish` said the plan was closed (found by an attack). A new plan over the window is the way."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--and-publish").code == 0
    assert run_cli("plan", "close", "fix").code == 0 and world.phase() == "closed"
    assert _next(run_cli, "fix") == "nothing: the plan is closed"
    world.run_sql("UPDATE published_revenue SET gross = gross + 1 WHERE order_date = '2026-01-02'")
    hint = _next(run_cli, "fix")
    assert "edited since the plan closed" in hint and "`backfill plan new plans/new-plan.yaml --target daily_revenue`" \
        in hint, hint


def test_a_cancelled_plan_once_rolled_back_names_no_rollback(world, run_cli):
    """Cancelled, then rolled back: status went on naming `backfill rollback fix`, which says the
    plan is already rolled back (found by a review)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-01",))
    assert run_cli("run", "fix", "--proof").code == 0
    assert run_cli("cancel", "fix").code == 0
    assert _next(run_cli, "fix") == "roll it back: `backfill rollback fix`"
    assert run_cli("rollback", "fix").code == 0 and world.phase() == "rolled_back"
    assert _next(run_cli, "fix") == ("nothing: the plan was rolled back; to retry, draft a new plan: `backfill plan "
                                     "new plans/fix-retry.yaml --id fix-retry --target daily_revenue --start "
                                     "2026-01-01 --end 2026-01-03`")
