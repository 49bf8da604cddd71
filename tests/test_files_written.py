"""The files a command writes for a hurried user: a plan file that is a link or others read, a
full disk under `plan new`, a long but legal file name, `--out` naming a folder not made yet, a key
path under a mistyped `~user`. Each test failed first (found by an attack)."""

from __future__ import annotations

import os
import stat

from tests.world import OWNER


def test_approving_a_plan_file_that_is_a_link_updates_the_file_it_names(world, run_cli):
    """A plan kept as a link into the reviewed checkout (`plans/fix.yaml -> ../checkout/fix.yaml`):
    the approval's rename replaced the link with a file of its own, so the checkout's file, which
    the guard reads, never got the signature, and `plan approve` said the file was in sync."""
    real = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    checkout = world.root / "checkout" / "fix.yaml"
    checkout.parent.mkdir()
    real.rename(checkout)
    real.symlink_to(checkout)
    done = run_cli("plan", "approve", str(real), "--by", OWNER, "--key", str(world.keys[OWNER]))
    assert done.code == 0, done.err
    assert real.is_symlink(), "the link was replaced by a file"
    assert "signature:" in checkout.read_text()


def test_approving_keeps_the_plan_files_mode(world, run_cli):
    """A plan file others read (0644 in a shared folder or a checkout): the approval's rewrite made
    it 0600, so the other approvers and the CI guard could no longer read it."""
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    path.chmod(0o644)
    done = run_cli("plan", "approve", str(path), "--by", OWNER, "--key", str(world.keys[OWNER]))
    assert done.code == 0, done.err
    assert "signature:" in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("backfill: "), err
    assert "internal error" not in err, err
    return err


def test_plan_new_on_a_full_disk_leaves_no_half_template_and_names_the_plan_file(tmp_path, run_subprocess):
    """`plan new` under a file size limit (a full disk) wrote the template's first kilobyte and
    stopped, blaming the home; the same `plan new` again then refused: the half template "already
    exists". And a folder that cannot be made (a file in the way) was an internal error."""
    from tests.conftest import BIN

    path = tmp_path / "plans" / "fix.yaml"
    limited = [str(BIN / "python"), "-c",
               "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000)); "
               "from backfill_assets.cli import main; sys.exit(main(sys.argv[1:]))", "plan", "new", str(path)]
    full = run_subprocess(command=limited)
    assert full.code == 2 and str(path) in _one_line(full.err), full.err
    assert not path.exists(), path.read_text()
    assert run_subprocess("plan", "new", str(path)).code == 0
    (tmp_path / "afile").write_text("")
    blocked = run_subprocess("plan", "new", str(tmp_path / "afile" / "fix.yaml"))
    assert blocked.code == 2 and "afile" in _one_line(blocked.err), blocked.err


def test_a_long_but_legal_file_name_takes_the_approval_and_the_evidence(world, run_cli):
    """A plan file named with 240 letters (the file system allows 255): the signature was recorded
    but never reached the file, "File name too long" for the temporary file written beside it, with
    the fix to make its folder writable, which it was; so was `evidence --out` such a name."""
    short = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    path = short.with_name("l" * 240 + ".yaml")
    short.rename(path)
    done = run_cli("plan", "approve", str(path), "--by", OWNER, "--key", str(world.keys[OWNER]))
    assert done.code == 0, done.err
    assert "signature:" in path.read_text()
    out = world.root / ("e" * 250)
    rendered = run_cli("evidence", "fix", "--out", str(out))
    assert rendered.code == 0 and out.read_text().startswith("#"), rendered.err


def test_evidence_out_a_folder_that_is_not_there_yet_is_refused_not_written_as_a_file(world, run_cli):
    """`evidence fix --out reports/` (a folder meant, not made yet): it wrote a file named `reports`
    and said "wrote evidence for fix to reports/", exit 0."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    folder = world.root / "reports"
    done = run_cli("evidence", "fix", "--out", f"{folder}/")
    assert done.code == 2 and f"{folder}/" in _one_line(done.err), (done.code, done.out, done.err)
    assert not folder.exists()


def test_a_key_under_a_home_that_is_no_ones_is_one_line(world, run_cli):
    """`--key ~alcie/.ssh/id_ed25519` (a user's name mistyped): Python cannot expand the `~`, and the
    command ended in an internal error; so did `--sign NAME=~alcie/...` and `--signature`."""
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    statement = world.root / "rollback.txt"
    printed = run_cli("rollback", "fix", "--print-statement")
    statement.write_text(printed.out)
    for args in (("plan", "approve", str(path), "--by", "carol", "--key", "~nosuchuser_x/.ssh/id_ed25519"),
                 ("rollback", "fix", "--sign", "alice=~nosuchuser_x/.ssh/id_ed25519"),
                 ("rollback", "fix", "--statement", str(statement), "--signature", "alice=~nosuchuser_x/sig")):
        done = run_cli(*args)
        assert done.code == 2 and "~nosuchuser_x" in _one_line(done.err), (args, done.err)
