"""Attack m: the newest command-line behaviour (rollback --keep-computed and its signatures, holds,
the status that names the way out) as a hurried user and an operator would meet it."""

from __future__ import annotations

import pytest

from backfill_assets.signing.statements import Statement
from tests.test_graph import _cancelled_under_a_month
from tests.test_trust import _drop_bob, sign_file


def _next(world, capsys) -> str:
    capsys.readouterr()
    assert world.cli("status", "fix") == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("next")]
    return line


def test_status_of_a_cancelled_plan_whose_rollback_must_keep_a_month_names_the_rollback_that_ends_it(
        world, monkeypatch, capsys):
    """A cancelled plan whose days a month was computed from since (a load without a plan): `status`
    said `backfill rollback fix`, which is refused for the month; the step that ends the plan is
    the rollback with `--keep-computed monthly_revenue`."""
    _cancelled_under_a_month(world, monkeypatch)
    step = _next(world, capsys)
    assert "--keep-computed monthly_revenue" in step, step
    command = step.split("`")[1].split()
    assert world.cli(*command[1:]) == 0
    assert world.phase("fix") == "rolled_back"


def test_status_of_a_cancelled_plan_needing_signatures_has_them_sign_the_statement_its_rollback_takes(
        world, monkeypatch, tmp_path, capsys):
    """Its own approvals no longer hold, so the rollback needs approvers' signatures: `status` had
    them sign `backfill rollback fix --print-statement`, a whole rollback's statement, which never
    authorises the rollback that keeps the month (the only one that can end the plan): a signing
    round wasted on a statement no command accepts."""
    _cancelled_under_a_month(world, monkeypatch)
    _drop_bob(world, tmp_path)
    step = _next(world, capsys)
    assert "--print-statement --keep-computed monthly_revenue" in step, step
    assert "`backfill rollback fix --keep-computed monthly_revenue --statement FILE" in step, step


@pytest.mark.parametrize("named", ["nosuch", "MONTHLY_REVENUE", "daily_revenue", ""])
def test_print_statement_refuses_a_keep_computed_name_the_rollback_refuses(world, monkeypatch, tmp_path,
                                                                          capsys, named):
    """`--print-statement --keep-computed NAME` printed (exit 0) a statement naming a table the
    rollback then refuses (no table of the definitions, a case or a typo away from one, a table
    the plan wrote): approvers signed a statement no rollback accepts. The empty name was refused
    naming `backfill plan statement`, which prints no rollback statement. One line naming the
    option, exit 2, nothing printed to sign."""
    _cancelled_under_a_month(world, monkeypatch)
    _drop_bob(world, tmp_path)
    capsys.readouterr()
    code = world.cli("rollback", "fix", "--keep-computed", named, "--print-statement")
    said = capsys.readouterr()
    assert code == 2, (code, said.out)
    assert said.out == "" and said.err.count("\n") == 1 and f"--keep-computed {named}" in said.err, said.err
    assert "plan statement" not in said.err, said.err


def test_a_rollback_statement_edited_by_hand_is_refused_naming_the_command_that_prints_it(
        world, monkeypatch, tmp_path, capsys):
    """A `rollback keeping computed` statement saved with CRLF line ends (an editor on Windows) or
    a trailing space: refused in one line whose fix named `backfill plan statement` (or `approvers
    statement`), neither of which prints a rollback's statement."""
    _cancelled_under_a_month(world, monkeypatch)
    _drop_bob(world, tmp_path)
    capsys.readouterr()
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--print-statement") == 0
    keeping = Statement.parse(capsys.readouterr().out)
    text, sig = sign_file(world, "carol", keeping, tmp_path)
    for edited in (keeping.text.replace("\n", "\r\n"), keeping.text.replace("\n", " \n", 1)):
        text.write_bytes(edited.encode())
        code = world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--statement", str(text),
                         "--signature", f"carol={sig}", "--sign", f"alice={world.keys['alice']}")
        said = capsys.readouterr()
        assert code != 0 and said.err.count("\n") == 1, said.err
        assert "--print-statement" in said.err and "plan statement" not in said.err, said.err
        assert world.phase("fix") == "repairing"


def test_keep_computed_of_a_month_the_loaded_definitions_do_not_declare_names_the_definitions_to_load(
        world, monkeypatch, capsys):
    """The month was loaded by a deployment with the rollup; the operator rolls back with the
    definitions the plan was made with (the daily table alone). The refusal said `leave
    monthly_revenue as it is with --keep-computed monthly_revenue`, which was refused in turn with
    `name one of the tables they declare (daily_revenue)`: a loop of two fixes that never ends the
    plan. Each says to load definitions declaring the month (--defs), and that rollback ends it."""
    from tests.test_graph import FULL_DEFS

    _cancelled_under_a_month(world, monkeypatch)
    monkeypatch.setenv("BACKFILL_DEFS", "backfill_assets.demo.daily")
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "--keep-computed monthly_revenue" in said and "--defs" in said, said
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue") == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "--defs" in said, said
    assert world.phase("fix") == "repairing"
    assert world.cli("rollback", "fix", "--keep-computed", "monthly_revenue", "--defs", FULL_DEFS) == 0
    assert world.phase("fix") == "rolled_back"
