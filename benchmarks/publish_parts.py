"""Publish's pieces at 2,500 partitions, in process: the fingerprint check, the consumers' impact
(computed before the lock), its recheck under the lock, and the whole publish rule.

    .venv/bin/python benchmarks/publish_parts.py

Prepares a plan home like benchmarks/scale.py (2,500 daily partitions, 1,000 orders a day), runs
the window, then times each piece once. A benchmark, not a test.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # noqa: E402

from backfill_assets import impact  # noqa: E402
from backfill_assets.loaded_defs import load_defs  # noqa: E402
from backfill_assets.publish import rule  # noqa: E402
from backfill_assets.warehouse import open_warehouse  # noqa: E402

WINDOW = 2500


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="publish-parts-") as tmp:
        ph = c.prepare_plan_home(Path(tmp), WINDOW, 1000)
        c.must(c.cli(ph.home, "run", str(ph.plan), log=ph.log), "backfill run", ph.log)
        os.environ["BACKFILL_HOME"] = str(ph.home.root)
        with c.quiet(Path(tmp) / "defs.log"):
            table = load_defs(c.DEFS).table(c.TARGET)
        spec, scheme, keys = table.spec, table.scheme(), [ph.proof, *ph.window]
        with open_warehouse(ph.home).session() as s:
            check, _ = timed(lambda: rule.blockers(s, spec, scheme, keys))
            computed, seen = timed(lambda: impact.consumer_impact(s, spec, scheme, keys))
            recheck, holds = timed(lambda: impact.consumer_impact_holds(s, spec, scheme, seen))
            whole, _ = timed(lambda: rule.publish(s, spec, scheme, keys, actor="bench"))
    print(f"{len(keys)} partitions, {seen.totals['partitions_changed']} changed for consumers")
    print(f"fingerprint check {check:.2f} s; consumers' impact {computed:.2f} s; its recheck {recheck:.2f} s "
          f"(holds: {holds}); the whole publish rule {whole:.2f} s")


if __name__ == "__main__":
    main()
