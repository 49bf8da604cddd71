"""Every state has a way out, and every piece of advice is a command that works, for
a hurried operator copy-pasting what a refusal or `backfill status` prints (found by an attack)."""

from __future__ import annotations

import re
import shlex

from tests.world import BUGGY, failure_text, keys


def _commands(text: str) -> list[list[str]]:
    """The `backfill ...` commands a line of advice names, as the shell splits them."""
    return [shlex.split(c)[1:] for c in re.findall(r"`(backfill [^`]+)`", text)]


def _next(run_cli, plan: str) -> str:
    shown = run_cli("status", plan)
    assert shown.code == 0, shown.err
    return next(line for line in shown.out.splitlines() if line.startswith("next "))


def test_a_publish_refused_after_a_rollback_names_a_command_that_runs(world, run_cli):
    """A plan is rolled back; a day of its window is then edited and a publish of it refused. The
    refusal said "re-run the changed partitions through the plan (`backfill run PLAN --partitions
    KEY`), or roll back": the rolled-back plan's run is refused, and its rollback too. It names a new
    replay plan, which no active plan stands in the way of."""
    window = keys(1, 4)
    assert world.materialize(window, spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert run_cli("rollback", "fix").code == 0
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-02'")
    refused = world.publish(keys(2, 2))
    said = failure_text(refused)
    assert not refused.success and "changed since its gates checked it" in said, said
    assert "backfill run PLAN" not in said and "`backfill run fix" not in said, said
    commands = _commands(said)
    assert commands and commands[0][:2] == ["plan", "new"], said
    path = world.root / "plans" / "again.yaml"
    drafted = run_cli("plan", "new", str(path), *commands[0][3:])
    assert drafted.code == 0 and path.exists(), drafted.err


def test_a_publish_refused_under_a_reconciled_plan_names_that_plans_run_not_itself(world, run_cli):
    """A reconciled plan's day is edited: `backfill publish fix` was refused with "see `backfill
    publish fix`", the refused command itself. It names the re-run through the plan, by its id."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-02'")
    refused = run_cli("publish", "fix")
    assert refused.code != 0 and "`backfill run fix --partitions 2026-01-02`" in refused.err, refused.err
    assert run_cli(*_commands(refused.err)[0]).code == 0
    assert run_cli("publish", "fix").code == 0


def _month_plan_beside_a_published_graph_plan_whose_day_failed(world, monkeypatch, run_cli) -> None:
    """Graph plan fix (days and their month) published; month-only plan q approved over its month;
    a late order for 2026-01-06 then fails fix's reconcile."""
    from tests.plans import complete_plan, write_plan
    from tests.test_graph import MONTH, buggy_january_published, graph_plan

    buggy_january_published(world, monkeypatch)
    world.approve(write_plan(world.root / "plans" / "fix.yaml", graph_plan(world)))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    document = complete_plan(plan_id="q", start=MONTH, end=MONTH, proof=(MONTH,), per_run=1,
                             target="monthly_revenue", source="daily_revenue")
    document["downstream"] = [{"asset": "published_monthly_revenue", "owners": ["finance-bi"]},
                              {"asset": "revenue_report", "owners": ["finance-bi"]}]
    world.approve(write_plan(world.root / "plans" / "q.yaml", document))
    world.run_sql("INSERT INTO orders VALUES (9999999, 42, 'north', TIMESTAMP '2026-01-06 12:00:00', "
                  "DATE '2026-01-06', 1000.00, 'completed')")
    assert run_cli("reconcile", "fix").code == 1


def test_a_published_graph_plan_never_holds_its_month_again_beside_a_month_plan(world, monkeypatch, run_cli):
    """A graph plan (days and their month) is published; a plan over the month alone is approved
    (a published plan no longer holds its window). Late data then fails the days' reconcile: the
    graph plan went back to repairing, so two active plans held the month; each one's run was
    refused ("plans fix and q both hold partition 2026-01-01"), while `status` named those runs.
    The published plan stays published until q ends, its status naming q; followed literally,
    every command the advice names runs."""
    _month_plan_beside_a_published_graph_plan_whose_day_failed(world, monkeypatch, run_cli)
    assert (world.phase("fix"), world.phase("q")) == ("published", "approved")  # one plan holds the month
    step = _next(run_cli, "fix")
    assert "plan q (approved) holds monthly_revenue 2026-01-01" in step, step
    followed = []
    for _ in range(12):  # the advice of fix's status taken literally, each command as printed
        if world.phase("fix") == "reconciled":
            break
        [command, *_] = _commands(step)
        followed.append(command)
        done = run_cli(*command)
        assert done.code == 0 or command[0] == "reconcile", (followed, done.out[-400:], done.err)
        step = _next(run_cli, "fix")
    assert world.phase("fix") == "reconciled" and world.phase("q") == "withdrawn", followed
    assert run_cli("publish", "fix").code == 0


def test_a_month_plans_proof_refused_over_a_day_another_plan_failed_names_that_plans_way_out(
        world, monkeypatch, run_cli):
    """The same month plan q, beside the published graph plan whose day 2026-01-06 failed its
    reconcile: q's proof was refused with "write daily_revenue 2026-01-06 first and let its gates
    pass", no command, and q's status named the same proof again, refused each time. The refusal
    names the plan whose write failed; its status names the way on, which runs."""
    _month_plan_beside_a_published_graph_plan_whose_day_failed(world, monkeypatch, run_cli)
    refused = run_cli("run", "q", "--proof")
    assert refused.code == 1, refused.err
    said = refused.out + refused.err
    assert "latest write is plan fix's (published)" in said and "`backfill status fix`" in said, said
    step = _next(run_cli, "fix")
    [command, *_] = _commands(step)
    assert command == ["plan", "withdraw", "q"], step
    assert run_cli(*command).code == 0 and world.phase("q") == "withdrawn"


def test_a_published_plan_whose_days_a_later_plan_holds_waits_for_it_and_both_get_out(world, run_cli):
    """Plan first (days 1..4) is published; plan second (days 3..5) is approved and proven. Consumers'
    copy of day 1 is then edited: `backfill reconcile first` sent first back to repairing, so two
    active plans held days 3..4, each one's publish frozen by the other. first stays published
    until second ends, its status naming second; each command printed, run as printed, runs."""
    assert world.materialize(keys(1, 8), spec=BUGGY, publish=True).success
    world.approved_plan("first", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "first", "--proof") == 0 and world.cli("run", "first") == 0
    assert world.cli("publish", "first") == 0
    world.approved_plan("second", start="2026-01-03", end="2026-01-05", proof=("2026-01-03",))
    assert world.cli("run", "second", "--proof") == 0
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-01'")
    assert run_cli("reconcile", "first").code == 0
    assert (world.phase("first"), world.phase("second")) == ("published", "proven")
    step = _next(run_cli, "first")
    assert "plan second (proven) holds daily_revenue 2026-01-03" in step and "`backfill status second`" in step, step
    for _ in range(3):  # second's way on, as its status names it
        [command, *_] = _commands(_next(run_cli, "second"))
        assert run_cli(*command).code == 0, command
        if world.phase("second") == "published":
            break
    for _ in range(4):  # then first's
        [command, *_] = _commands(_next(run_cli, "first"))
        assert run_cli(*command).code == 0, command
        if world.phase("first") == "published" and command[0] == "publish":
            break
    assert (world.phase("first"), world.phase("second")) == ("published", "published")
    assert world.fingerprints("published_revenue", keys(1, 5)) == world.fingerprints("daily_revenue", keys(1, 5))


def test_a_publish_refused_under_a_plan_not_yet_proven_names_its_next_run(world, run_cli):
    """A publish of a day an approved plan holds (its proof not run) was refused with "fix and re-run
    the failing partitions (`backfill run PLAN --partitions KEY`)": no plan is called PLAN, and a run
    of named partitions before the proof passed is refused. It names the plan's status, whose run runs."""
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    refused = world.publish(keys(2, 2))
    said = failure_text(refused)
    assert not refused.success and "frozen by plan fix (approved)" in said, said
    assert "PLAN" not in said and "--partitions" not in said and "`backfill status fix`" in said, said
    [command, *_] = _commands(_next(run_cli, "fix"))
    assert command == ["run", "fix", "--proof"] and run_cli(*command).code == 0
