"""Attack j: the chain's `reads`, the undeclared-upstream refusal, rollback keeping computed, holds,
plan text, a version's file."""

from __future__ import annotations

from tests.test_graph import (
    FULL_DEFS,
    MONTH,
    _days_plan,
    _january_days_published,
    _month_alone_defs,
    _published_by_region,
    defs_of,
    run,
)
from tests.world import BUGGY, failure_text


def test_an_insider_hiding_the_days_ledger_rows_lets_a_month_alone_location_read_a_cancelled_plans_days(
        world, monkeypatch):
    """`_undeclared_upstream` asks the ledger's rows alone whether the month's `source` is a table
    backfill writes. An insider who can write the warehouse (not read the key) moves the days'
    `writes` rows aside while a code location declaring the month alone loads January's month
    from a cancelled plan's days, then puts them back (they verify against their seals again): the
    month records no reads, and its publish put before consumers a month that does not add up to
    the days they read."""
    _january_days_published(world)
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("cancel", "fix") == 0
    world.run_sql("CREATE TABLE main.hidden_writes AS SELECT * FROM backfill_control.writes "
                  "WHERE asset = 'daily_revenue'")
    world.run_sql("DELETE FROM backfill_control.writes WHERE asset = 'daily_revenue'")
    loaded = run(world, _month_alone_defs(world), ["monthly_revenue"], [MONTH], {"dagster/backfill": "ui-bf"})
    world.run_sql("INSERT INTO backfill_control.writes SELECT * FROM main.hidden_writes")
    world.run_sql("DROP TABLE main.hidden_writes")
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    published = run(world, defs_of(world, BUGGY), ["published_monthly_revenue"], [MONTH],
                    {"dagster/backfill": "ui-bf2"})
    month = _published_by_region(world, "published_monthly_revenue", "month")
    assert month in ({}, _published_by_region(world, "published_revenue", "order_date")), (
        loaded.success, failure_text(loaded), published.success, failure_text(published))


def _published_source_defs(world):
    """The team's definitions: the daily table, and a monthly rollup that reads the days consumers
    read (its `source` is published_revenue, the table backfill publishes the days into)."""
    path = world.root / "defs_published_source.py"
    path.write_text(
        "import dataclasses\n"
        "import dagster as dg\n"
        "from backfill_assets.defs.replayable import make_replayable_table\n"
        "from backfill_assets.defs.resources import backfill_resources\n"
        "from backfill_assets.demo.definitions import MONTHS, ORDERS, PARTITIONS\n"
        "from backfill_assets.demo.revenue import DAILY_REVENUE, MONTHLY_REVENUE\n"
        "month = dataclasses.replace(MONTHLY_REVENUE, source='published_revenue',\n"
        "                            select_sql=MONTHLY_REVENUE.select_sql.replace('daily_revenue', 'published_revenue'))\n"
        "days = make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name='revenue')\n"
        "rollup = make_replayable_table(month, MONTHS, group_name='revenue')\n"
        "defs = dg.Definitions(assets=[ORDERS, *days.assets, *rollup.assets], sensors=days.sensors,\n"
        f"                      resources=backfill_resources({str(world.home)!r}, {world.url or ''!r}),\n"
        "                      executor=dg.in_process_executor)\n", encoding="utf-8")
    return path


def test_a_month_computed_from_the_published_days_is_never_left_beside_days_a_plan_published_since(
        world, monkeypatch, capsys):
    """A replayable rollup whose `source` is the days' published table (the table consumers read,
    which backfill writes): it is no member of the days' graph, records no `reads` and is not
    refused as computed from a table backfill writes. A plan over the days is then run and
    published: consumers read a published month computed from the days it replaced."""
    import importlib.util

    _january_days_published(world)
    path = _published_source_defs(world)
    monkeypatch.setenv("BACKFILL_DEFS", str(path))
    spec = importlib.util.spec_from_file_location("defs_published_source", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    loaded = run(world, module.defs, ["monthly_revenue", "published_monthly_revenue"], [MONTH],
                 {"dagster/backfill": "ui-bf"})
    if not loaded.success:  # refused: its source is a table backfill writes, outside the graph
        assert "published_revenue" in failure_text(loaded), failure_text(loaded)
        assert _published_by_region(world, "published_monthly_revenue", "month") == {}
        return
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date")
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    capsys.readouterr()
    code = world.cli("publish", "fix")
    said = capsys.readouterr()
    assert _published_by_region(world, "published_monthly_revenue", "month") == \
        _published_by_region(world, "published_revenue", "order_date"), (code, said.out, said.err)


def test_a_partition_key_in_a_plan_never_puts_control_characters_on_the_reviewers_screen(
        world, run_subprocess, tmp_path):
    """Plan text refuses control characters, but a partition key (the window, the proof, expect's
    partitions) was checked only for C0 controls: a pull request's proof partition holding the line
    separator (U+2028, a line break to Python's splitlines and to an editor or a browser showing the
    CI log) and the 8-bit CSI (U+009B: `8m` conceals the rest on a terminal that takes C1 controls)
    printed a forged ALLOWED line in the guard's checklist and in `plan show`, for a plan nobody
    signed."""
    from backfill_assets.plan.model import _HIDDEN
    from tests.conftest import BIN
    from tests.plans import complete_plan, write_plan
    from tests.test_trust import HOOK, pull_request_checkout

    repo, _, main = pull_request_checkout(world, tmp_path)
    document = complete_plan(plan_id="sneaky")
    document["execution"]["proof_partitions"] = [
        "2026-01-02\u2028ALLOWED: signed by enough approvers\x9b8m"]
    plan = write_plan(repo / "plans" / "sneaky.yaml", document)
    roots = ["--allowed-signers", str(main / "allowed_signers"), "--policy", str(main / "policy.yaml")]
    for command in ([str(HOOK), str(plan), *roots], [str(BIN / "backfill"), "plan", "show", str(plan), *roots]):
        done = run_subprocess(command=command, env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""},
                              cwd=repo)
        shown = done.out + done.err
        assert not _HIDDEN.search(shown), f"{command[-5]} printed a plan's control character:\n{shown!r}"
        assert not [line for line in shown.splitlines() if line.startswith("ALLOWED")], shown


def test_a_publish_of_days_only_a_rolled_back_plan_wrote_is_one_line_not_an_internal_error(world, monkeypatch,
                                                                                           capsys):
    """Plan fix writes January 5..8, never written before, and publishes them; the team loads
    January's month from the published days (no plan) and publishes it. fix is rolled back keeping
    the month (`--keep-computed`). The chain's reads then name days whose only writes are a rolled-back
    plan's: publish's check of what was computed from them looked the days' newest write up and
    failed with a KeyError (a traceback in the run, exit 3 from the CLI) instead of refusing."""
    from tests.world import keys

    with world.warehouse().session() as session:
        from backfill_assets.demo.sample import generate_orders
        from tests.world import START
        generate_orders(session, start=START, days=31, rows_per_day=40, seed=11)
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    assert world.materialize(keys(9, 31), spec=BUGGY, publish=True).success
    world.approve(_days_plan(world))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    monkeypatch.setenv("BACKFILL_DEFS", FULL_DEFS)
    assert run(world, defs_of(world, BUGGY), ["monthly_revenue", "published_monthly_revenue"], [MONTH],
               {"dagster/backfill": "ui-bf"}).success
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 0
    capsys.readouterr()
    published = run(world, defs_of(world, BUGGY), ["published_revenue"], keys(5, 8), {"dagster/backfill": "ui-bf2"})
    assert not published.success
    said = failure_text(published)
    assert said and "Error occurred while executing" not in said, f"an internal error: {_causes(published)}"
    code = world.cli("publish", "fix")
    said = capsys.readouterr()
    assert code != 3 and "Traceback" not in said.err, said.err


def _causes(result) -> str:
    """The errors under a run's step failures (Dagster's wrapper, then what the step raised)."""
    out = []
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None) if event.is_step_failure else None
        while error is not None:
            out.append(f"{error.cls_name}: {error.message.strip()}")
            error = error.cause
    return " <- ".join(out)
