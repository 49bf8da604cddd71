"""The rendered evidence says exactly what happened, and only that. An auditor
reads `backfill evidence PLAN` alone, months later, to decide whether the team's quorum approved a
replay, what consumers got, and what the gates' verdicts are about after a rollback."""

from __future__ import annotations

import datetime as dt
import hashlib

import yaml

from backfill_assets.control import record, trust_record
from backfill_assets.loaded_defs import load_defs
from backfill_assets.plan.approvals import plan_statement
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from backfill_assets.signing.sshsig import sign


def _render(world, capsys, plan_id: str = "fix") -> dict:
    capsys.readouterr()
    assert world.cli("evidence", plan_id) == 0
    return yaml.safe_load(capsys.readouterr().out)


def _sign_again(world, path, who: str, minutes_ago: int) -> None:
    """`who` signs a fresh statement of the same version (dated `minutes_ago`), given as files."""
    plan = load_plan(path)
    code = load_defs(None).table(plan.target).code_identity(plan.assets)
    with world.warehouse().session() as session:
        root = trust_record.require(session)
        replaces = record.replaced_by(session, plan.plan_id, plan_sha256(plan))
    statement = plan_statement(plan, root, code, replaces=replaces,
                               signed=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes_ago))
    out = world.root / "again"
    out.mkdir(exist_ok=True)
    (out / f"{who}.txt").write_text(statement.text)
    (out / f"{who}.sig").write_text(sign(statement.message, world.keys[who]))
    assert world.cli("plan", "approve", str(path), "--by", who, "--statement", str(out / f"{who}.txt"),
                     "--signature", str(out / f"{who}.sig")) == 0


def test_each_approval_says_whether_it_counted_toward_the_quorum_the_policy_required(world, capsys):
    """The file listed every recorded signature as a bare `signed` line: the owner's (which never
    counts as an approver) and an approver's second signature (a principal counts once) read as
    four approvals of a plan two approvers and the owner authorised, and nothing said what quorum
    the pinned policy required nor whether it was met."""
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    _sign_again(world, path, "alice", minutes_ago=3)
    approvals = _render(world, capsys)["approvals"]

    quorum = approvals["quorum"]
    assert quorum["required"] == "2 approver(s) and the owner olivia's signature (trust root v1)", quorum
    assert quorum["met"] is True and quorum["counted"] == "alice, bob" and quorum["at"], quorum
    verdicts = {}
    for line in approvals["signed"]:
        verdicts.setdefault(line.split()[0], []).append(line.split(maxsplit=3)[3])
    assert verdicts["bob"] == ["counted"], approvals["signed"]
    assert verdicts["olivia"] == ["owner, required, never counted as an approver"], verdicts
    assert verdicts["alice"] == ["counted", "NOT counted, alice already counted; each approver counts once"]


def _published_digest(world, table: str, plan_id: str) -> str:
    """What consumers got from the plan's publish, as its `publication` rows hold it: one line a
    partition (key, rows, fingerprint), as the rollback digests what it restored."""
    rows = world.sql("SELECT partition_key, row_count, fingerprint FROM backfill_control.publications "
                     "WHERE asset = ? AND plan_id = ? ORDER BY partition_key", [table, plan_id])
    return hashlib.sha256("\n".join(f"{k} {n} {d}" for k, n, d in rows).encode()).hexdigest()


def test_the_published_section_ties_what_consumers_got_to_the_published_fingerprints(world, capsys):
    """`published` said when, by whom and how many rows: nothing tied what consumers got to the
    bytes the publish proved and recorded (the `publication` chain rows hold their fingerprints),
    so the file alone could not say which bytes were published."""
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", str(path), "--and-publish") == 0
    published = _render(world, capsys)["published"]
    [(seq,)] = world.sql("SELECT seq FROM backfill_control.evidence WHERE kind = 'publication'")
    assert published["fingerprints"] == {
        "published_revenue": {"partitions": 4, "sha256": _published_digest(world, "published_revenue", "fix"),
                              "evidence_row": seq}}, published


def test_after_a_rollback_the_gates_say_which_bytes_their_verdicts_are_about(world, capsys):
    """After a rollback the file still said `gates: passed: 4` and `reconciled_at` as if they were
    about what consumers read; only `phase: rolled_back` said otherwise. The gates now say which
    bytes their verdicts judged: the published ones (by their digest), or, rolled back, none that
    is in the table or the published table any more."""
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", str(path), "--and-publish") == 0
    document = _render(world, capsys)
    digest = document["published"]["fingerprints"]["published_revenue"]["sha256"]
    assert document["gates"]["about"] == (f"the plan's latest writes, which the publish gave consumers "
                                          f"(published_revenue {digest[:16]})"), document["gates"]
    assert world.cli("rollback", "fix") == 0
    document = _render(world, capsys)
    assert document["plan"]["phase"] == "rolled_back"
    about = document["gates"]["about"]
    assert about.startswith(f"the plan's writes, rolled back at {document['rollback']['at']}: none of their "
                            "bytes is in daily_revenue or published_revenue now"), about
    # the publish stays described as it happened, and says it was undone
    assert document["published"]["fingerprints"]["published_revenue"]["sha256"] == digest
    assert document["published"]["undone"] == f"rolled back at {document['rollback']['at']}", document["published"]


def test_a_graph_plans_file_names_each_tables_publication_and_rollback(world, monkeypatch, capsys):
    """A graph plan (days and their month): the file ties each published table to its bytes, lists
    each table the rollback restored, and says the gates of both tables are about bytes no longer
    there; `evidence verify --against` passes on the file written."""
    from tests.plans import write_plan
    from tests.test_graph import buggy_january_published, graph_plan

    buggy_january_published(world, monkeypatch)
    path = write_plan(world.root / "plans" / "fix.yaml", graph_plan(world))
    world.approve(path)
    assert world.cli("run", "fix", "--and-publish") == 0
    published = _render(world, capsys)["published"]["fingerprints"]
    assert set(published) == {"published_revenue", "published_monthly_revenue"}, published
    assert published["published_monthly_revenue"]["partitions"] == 1
    assert published["published_monthly_revenue"]["sha256"] == _published_digest(
        world, "published_monthly_revenue", "fix")
    assert world.cli("rollback", "fix") == 0
    out = world.root / "evidence.yaml"
    assert world.cli("evidence", "fix", "--out", str(out)) == 0
    document = yaml.safe_load(out.read_text())
    assert {"daily_revenue", "monthly_revenue", "published_revenue", "published_monthly_revenue"} <= set(
        document["rollback"]["restored"]), document["rollback"]
    about = document["gates"]["about"]
    for table in ("daily_revenue", "monthly_revenue", "published_revenue", "published_monthly_revenue"):
        assert table in about.split(" now;")[0], about
    assert world.cli("evidence", "verify", "--against", str(out)) == 0


def test_a_replaced_plan_names_every_version_which_signatures_adopted_each_and_what_each_wrote(world, capsys):
    """A plan approved as v1, then replaced by v2 (a shorter window, other approvers) before it ran:
    the file named v2 alone (its sha256 and its signatures), so an auditor could not see that v1
    had been the plan of record on other signatures, nor that every write ran under v2."""
    from tests.test_plan_replacement import _fix_version

    assert world.cli("init") == 0
    v1 = world.approve(_fix_version(world, "v1", "2026-01-04", "v1: four days"))
    v2 = world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"), "carol", "bob")
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    document = _render(world, capsys)
    shas = [plan_sha256(load_plan(p)) for p in (v1, v2)]
    assert document["plan"]["sha256"] == shas[1]
    versions = document["versions"]
    assert [v["sha256"] for v in versions] == shas, versions
    assert [v["counted"] for v in versions] == ["alice, bob", "carol, bob"], versions
    assert all(v["adopted_at"] for v in versions), versions
    assert versions[0]["wrote"] == {} and versions[0]["replaced_at"], versions
    assert versions[1]["wrote"] == {"daily_revenue": "3 partition(s) 2026-01-01..2026-01-03"}, versions
    assert "replaced_at" not in versions[1], versions
    quorum = document["approvals"]["quorum"]  # the plan of record's, counted as its adoption counted them
    assert (quorum["met"], quorum["counted"]) == (True, "carol, bob"), document["approvals"]
    assert all(line.endswith(("counted", "never counted as an approver")) for line in document["approvals"]["signed"])
    assert [v["file"] for v in versions] == [str(v1.resolve()), str(v2.resolve())], versions


def test_a_republish_that_put_back_an_edit_of_consumers_data_is_in_the_file(world, capsys):
    """Published, consumers' copy edited by hand, reconciled and published again: the publish put
    the checked bytes back and the chain says so (`published_edited`), but the file showed the last
    publish alone, as if consumers had read the plan's bytes all along: neither the first publish nor
    the edited day consumers read in between was in it."""
    assert world.cli("init") == 0
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix", "--and-publish") == 0
    [(first,)] = world.sql("SELECT recorded_at FROM backfill_control.evidence WHERE kind = 'published'")
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 "
                  "WHERE order_date = '2026-01-03' AND region = 'north'")
    assert world.cli("reconcile", "fix") == 0 and world.cli("publish", "fix") == 0
    published = _render(world, capsys)["published"]
    assert published["earlier"] == [str(first)], published
    assert published["put_back"] == {"published_revenue": ["2026-01-03"]}, published


def test_a_plan_short_of_its_quorum_lists_the_signatures_recorded_and_what_is_missing(world, capsys):
    """A plan the owner and one approver signed is not the plan of record: the file listed no
    signature at all (`signed: []`), while the chain holds two, and did not say what was missing."""
    assert world.cli("init") == 0
    world.approve(world.plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",)), "alice")
    document = _render(world, capsys)
    assert document["plan"]["phase"] == "drafted"
    approvals = document["approvals"]
    assert sorted(line.split()[0] for line in approvals["signed"]) == ["alice", "olivia"], approvals
    quorum = approvals["quorum"]
    assert (quorum["met"], quorum["at"], quorum["counted"]) == (False, None, "alice"), quorum
    assert quorum["missing"] == ["1 more approver signature(s)"], quorum


def test_the_published_digest_and_the_gates_after_a_rollback_read_alike_on_each_engine(engine_world, capsys):
    """The same file on DuckDB and on PostgreSQL (the publications read back by their seal's chain
    row, each engine's types): the digest of what consumers got, then what the gates are about once
    rolled back, and `evidence verify --against` passes on the file written."""
    world = engine_world
    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-04") == 0
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix", "--and-publish") == 0
    assert world.cli("rollback", "fix") == 0
    out = world.root / "evidence.yaml"
    assert world.cli("evidence", "fix", "--out", str(out)) == 0
    document = yaml.safe_load(out.read_text())
    assert document["published"]["fingerprints"]["published_revenue"]["sha256"] == _published_digest(
        world, "published_revenue", "fix")
    assert document["gates"]["about"].startswith("the plan's writes, rolled back at "), document["gates"]
    assert document["approvals"]["quorum"]["met"] is True
    assert world.cli("evidence", "verify", "--against", str(out)) == 0


def test_a_signature_whose_key_was_removed_before_the_adoption_is_not_shown_as_counted(world, capsys, tmp_path):
    """bob signs, then the team re-pins allowed_signers without him (his key leaked), and alice and
    carol's signatures make the version the plan of record: the adoption never counted bob's, so his
    line must not say `counted` beside a quorum of alice and carol (each line is judged by the
    decision that counted it: the adoption, for a signature recorded before it)."""
    from tests.test_trust import _drop_bob

    assert world.cli("init") == 0
    path = world.approve(world.plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",)), "bob")
    _drop_bob(world, tmp_path)
    for name in ("alice", "carol"):
        assert world.cli("plan", "approve", str(path), "--by", name, "--key", str(world.keys[name])) == 0
    approvals = _render(world, capsys)["approvals"]
    quorum = approvals["quorum"]
    assert (quorum["met"], quorum["counted"]) == (True, "alice, carol"), quorum
    assert quorum["required"].endswith("(trust root v2)"), quorum
    [bob] = [line for line in approvals["signed"] if line.startswith("bob ")]
    assert " NOT counted, signature refused" in bob, approvals["signed"]
