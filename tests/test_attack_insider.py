"""An insider (warehouse write access, no evidence key) edits what the chain does not seal, or
seals only for the decisions that read it, to have a command show a false fact (attack,
2026-12-07). Each test failed on the code before its fix."""

from __future__ import annotations

import json

from backfill_assets.control import outbox
from backfill_assets.control.schema import ensure_schema
from tests.test_notices import Receiver, receiver  # noqa: F401 (a fixture)

CONTROL = "backfill_control"


def _queue(world, url: str | None, message: str) -> None:
    with world.warehouse().session() as session:
        ensure_schema(session)
        with session.transaction():
            outbox.enqueue(session, plan_id="fix", event="frozen", recipients=["#owners"], message=message,
                           body={}, webhook_url=url, actor="test")


def _block(out: str, text: str) -> str:
    """The lines `backfill notices` prints for the notice whose message holds `text`."""
    start = out.rindex("\nnotice ", 0, out.index(text)) if "\nnotice " in out[:out.index(text)] else 0
    end = out.find("\nnotice ", out.index(text))
    return out[start:end if end >= 0 else len(out)]


def test_a_notice_edited_in_the_outbox_is_not_listed_as_the_notice_backfill_queued(world, run_cli):
    """A team without a webhook reads its notices in `backfill notices`, its only channel. The
    insider typed over a freeze notice's text and recipients: it was listed as the notice backfill
    queued (the relay refuses to post such a row, and `evidence verify` names it, but the listing
    compared the row with no digest of the chain)."""
    _queue(world, None, "daily_revenue 2026-01-02 is frozen: keep reading the last published data")
    world.run_sql(f"UPDATE {CONTROL}.outbox SET message = 'daily_revenue reopened: consume freely', "
                  "recipients = '#consumers'")
    listed = run_cli("notices", "fix")
    assert listed.code == 0, listed.err
    shown = _block(listed.out, "consume freely")
    assert "NOT the notice backfill queued" in shown, listed.out
    assert "no webhook: read here" not in shown, listed.out


def test_a_notice_marked_delivered_without_its_delivery_in_the_chain_is_not_listed_as_delivered(
        world, run_cli, receiver):  # noqa: F811 (the fixture)
    """`UPDATE outbox SET delivered_at = ...` over a freeze notice its receiver never took: the
    relay posts it again, but `backfill notices` (and `status`'s count of undelivered notices),
    read before the relay, said it was delivered, at a time the insider typed."""
    url, server = receiver
    server.failures = 10**6  # the receiver is down
    _queue(world, url, "daily_revenue 2026-01-02 is frozen")
    [failed] = outbox.relay(world.warehouse())
    assert not failed.ok
    world.run_sql(f"UPDATE {CONTROL}.outbox SET delivered_at = '2026-01-01T00:00:00Z'")
    [shown] = json.loads(run_cli("notices", "fix", "--json").out)
    assert shown["delivered_at"] is None and "no delivery of it is in the evidence chain" in shown["delivery"], shown
    # the relay after that command tried it again (the receiver is still down): marked once more
    world.run_sql(f"UPDATE {CONTROL}.outbox SET delivered_at = '2026-01-01T00:00:00Z'")
    listed = run_cli("notices", "fix")
    assert listed.code == 0, listed.err
    assert "delivery: delivered at" not in listed.out, listed.out
    assert "no delivery of it is in the evidence chain" in listed.out, listed.out
    assert "1 undelivered" in listed.out, listed.out


def test_diff_refuses_a_snapshot_edited_to_hide_what_the_plan_changed(world, capsys):
    """`backfill diff`, what reviewers read before anyone sees the data, compares the target with
    the snapshot's rows as the table holds them. The insider copied the replayed rows over the
    snapshot's: diff said the plan changed nothing (the sealed fingerprint of each snapshot, which
    a rollback and `changes_as_expected` compare first, was never asked)."""
    from tests.test_diff import WINDOW, snapshot
    from tests.world import BUGGY

    assert world.materialize(WINDOW, spec=BUGGY).success  # the buggy release's daily runs
    path = world.approved_plan("fix", start=WINDOW[0], end=WINDOW[-1], proof=(WINDOW[0],), per_run=3)
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0
    capsys.readouterr()
    assert world.cli("diff", "fix") == 0
    assert "changed" in capsys.readouterr().out
    day = WINDOW[1]
    world.run_sql(f"DELETE FROM {snapshot('fix')} WHERE order_date = ?", [day])
    world.run_sql(f"INSERT INTO {snapshot('fix')} SELECT * FROM daily_revenue WHERE order_date = ?", [day])
    capsys.readouterr()
    code = world.cli("diff", "fix")
    captured = capsys.readouterr()
    assert code != 0, captured.out
    assert f"snapshot of daily_revenue {day}" in captured.err, captured.err


def test_a_cutover_compared_with_published_bytes_edited_since_their_publication_is_not_met(world, capsys):
    """A cutover's dual run compares the new pipeline with what the old one gave consumers. The
    insider typed the new pipeline's figure into the published day before the plan ran (the
    publication sealed what the old pipeline published): the day matched, the streak was met and
    the cutover published, its evidence saying the shadow matched, though the new pipeline's day
    differs from the one the old pipeline published by 1,000."""
    from tests.test_cutover import WINDOW, correct_source, cutover_plan, old_pipeline
    from tests.world import FIXED

    old_pipeline(world)
    day = WINDOW[2]
    region, _ = correct_source(world, day, 1000)  # the new pipeline's day differs from the published one
    world.run_sql(f"UPDATE {FIXED.publish_table} SET gross = gross + 1000, net_revenue = net_revenue + 1000 "
                  "WHERE order_date = ? AND region = ?", [day, region])
    path = cutover_plan(world, "cut")
    assert world.cli("run", str(path), "--proof") == 0
    assert world.cli("run", str(path)) == 0
    published = world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0]
    capsys.readouterr()
    assert world.cli("publish", "cut") != 0
    err = capsys.readouterr().err
    assert "cutover by plan cut refused" in err and f"reset at {day}: the published partition was edited" in err, err
    assert world.sql(f"SELECT sum(gross) FROM {FIXED.publish_table} WHERE order_date = ?", [day])[0][0] == published
