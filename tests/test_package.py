"""The package works when installed from its wheel, not only from this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import BIN, ROOT


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    # the fresh environment's commands may cache their bytecode (CI sets PYTHONDONTWRITEBYTECODE): the
    # first compiles Dagster's modules once, instead of each command compiling them again from source
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})})
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc.stdout + proc.stderr


def test_the_wheel_installs_and_its_commands_work_from_a_fresh_environment(tmp_path):
    uv = BIN / "uv"
    out = tmp_path / "dist"
    # a copy of the source: setuptools writes build/ beside the sources it builds
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".backfill", "docs"))
    if uv.exists():
        run([str(uv), "build", "--wheel", "--out-dir", str(out), str(source)], cwd=tmp_path)
    else:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(source)], cwd=tmp_path)
    [wheel] = list(out.glob("backfill_assets-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "backfill_assets/templates/backfill-plan.yaml" in names
    assert "backfill_assets/demo/definitions.py" in names
    assert not [n for n in names if n.split("/")[0] in ("examples", "tests", "benchmarks")]
    venv = tmp_path / "venv"
    if uv.exists():
        run([str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)], cwd=tmp_path)
        run([str(uv), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)], cwd=tmp_path)
    else:
        run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
        run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], cwd=tmp_path)
    work = tmp_path / "elsewhere"  # far from this checkout, so nothing is imported from it
    work.mkdir()
    backfill = str(venv / "bin" / "backfill")
    run([backfill, "plan", "new", "plans/p.yaml", "--id", "p", "--target", "daily_revenue", "--start",
         "2026-01-02", "--end", "2026-01-03", "--owner", "olivia"], cwd=work)
    text = (work / "plans" / "p.yaml").read_text()
    assert "plan_id: p" in text and "start: 2026-01-02" in text
    filled = text.replace("reason: TODO", "reason: a test").replace("source_of_truth: TODO", "source_of_truth: orders")
    for line in ("- asset: TODO", "owners: [TODO]", "mode: TODO", "idempotency: TODO", "proof_partitions: [TODO]",
                 "watermark: TODO", "metrics_comparable: TODO", "notify: [TODO]", "strategy: TODO",
                 "- name: TODO"):
        filled = filled.replace(line, line.replace("[TODO]", "[x]").replace("TODO", {
            "- asset: TODO": "published_revenue", "mode: TODO": "overwrite", "proof_partitions: [TODO]": "",
            "- name: TODO": "net_revenue"}.get(line, "written")))
    filled = filled.replace("proof_partitions: [x]", 'proof_partitions: ["2026-01-02"]')
    (work / "plans" / "p.yaml").write_text(filled)
    validated = run([backfill, "plan", "validate", "plans/p.yaml", "--defs",
                     "backfill_assets.demo.daily"], cwd=work)
    assert "complete and fits daily_revenue" in validated
    (tmp_path / "dh").mkdir()
    checked = run([str(venv / "bin" / "dagster"), "definitions", "validate", "-m", "backfill_assets.demo.definitions"],
                  cwd=work, env={"DAGSTER_HOME": str(tmp_path / "dh")})
    assert "passed validation" in checked


CONSOLE_PROBE = """
import gc, sys
from backfill_assets import console
assert "backfill_assets.cli" not in sys.modules and "dagster" not in sys.modules, "imported too early"
sys.argv = ["backfill", "--help"]
try:
    console.entrypoint()
except SystemExit as exc:
    print(exc.code, gc.get_threshold())
"""


def test_the_console_script_sets_the_collector_before_it_imports_the_command(tmp_path):
    script = (BIN / "backfill").read_text()
    assert "from backfill_assets.console import entrypoint" in script
    out = run([str(BIN / "python"), "-c", CONSOLE_PROBE], cwd=tmp_path)
    from backfill_assets.console import GC_THRESHOLDS

    assert out.splitlines()[-1].split() == ["0", *str(GC_THRESHOLDS).split()], out
