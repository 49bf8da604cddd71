#!/usr/bin/env bash
# Creates the peer virtualenvs of benchmarks/diff_peers.py and benchmarks/backfill_peers.py, idempotently:
#   benchmarks/.venv-datadiff  data-diff 0.11.2 (joindiff) + dbt-core 1.7.x + DuckDB 2.0.1 (diff_peers)
#   benchmarks/.venv-sqlmesh   SQLMesh 0.236.4 + DuckDB 1.5.6 (SQLMesh requires duckdb < 2; both)
#   benchmarks/.venv-dbt       dbt-duckdb 1.11.1 + dbt-core 1.11 + DuckDB 2.0.1 (backfill_peers)
#   benchmarks/.venv-tpchgen   tpchgen-cli 4.0.0, the TPC-H generator (backfill_peers' data)
#   benchmarks/.venv-pyinstrument  pyinstrument 5.1.3 as a plain folder (`pip install --target`): put on
#                              PYTHONPATH of the project's own Python by `backfill_peers.py --profile
#                              --profiler pyinstrument`; never a project dependency
# Versions are pinned in benchmarks/peers/requirements-{datadiff,sqlmesh,dbt,tpchgen}.txt.
# Default: datadiff and sqlmesh (diff_peers); backfill_peers needs sqlmesh dbt tpchgen.
# A venv that exists and imports its packages is left alone; a broken one is rebuilt.
# Installs with uv when the project venv has it (.venv/bin/uv), else (or with PEER_INSTALLER=pip)
# with pip.
#
#   bash benchmarks/peers/setup.sh [--force] [datadiff|sqlmesh|dbt|tpchgen|pyinstrument ...]
# --force rebuilds even a working venv. Prints the seconds each venv took to set up.
# Only PyPI is used. Nothing here runs in `make test`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
uv="$root/.venv/bin/uv"

force=0
names=()
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    datadiff|sqlmesh|dbt|tpchgen|pyinstrument) names+=("$arg") ;;
    *) echo "usage: $0 [--force] [datadiff|sqlmesh|dbt|tpchgen|pyinstrument ...]" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(datadiff sqlmesh)

import_check() {
  case "$1" in
    datadiff) echo "import duckdb, data_diff; from data_diff.joindiff_tables import JoinDiffer" ;;
    sqlmesh) echo "import duckdb, sqlmesh; from sqlmesh.core.context import Context; assert duckdb.__version__ < '2'" ;;
    dbt) echo "import duckdb, dbt.adapters.duckdb; from dbt.cli.main import dbtRunner" ;;
    tpchgen) echo "import shutil, sys, os; assert os.access(os.path.join(os.path.dirname(sys.executable), 'tpchgen-cli'), os.X_OK)" ;;
  esac
}

status=0
for name in "${names[@]}"; do
  if [ "$name" = pyinstrument ]; then  # a folder of packages, not a venv: see the header
    target="$root/benchmarks/.venv-pyinstrument"
    if [ "$force" = 0 ] && PYTHONPATH="$target" "$root/.venv/bin/python" -c "import pyinstrument" 2>/dev/null; then
      echo "pyinstrument: $target is present and imports; skipped (--force rebuilds it)"
      continue
    fi
    rm -rf "$target"
    if [ -x "$uv" ]; then
      "$uv" pip install --quiet --python "$root/.venv/bin/python" --target "$target" pyinstrument==5.1.3
    else
      "$root/.venv/bin/python" -m pip install --quiet --disable-pip-version-check --target "$target" pyinstrument==5.1.3
    fi
    echo "pyinstrument: installed into $target"
    continue
  fi
  venv="$root/benchmarks/.venv-$name"
  reqs="$here/requirements-$name.txt"
  check="$(import_check "$name")"
  if [ "$force" = 0 ] && [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "$name: $venv is present and imports; skipped (--force rebuilds it)"
    continue
  fi
  rm -rf "$venv"
  started=$(date +%s.%N)
  "$python" -m venv "$venv"
  if [ -x "$uv" ] && [ "${PEER_INSTALLER:-uv}" != pip ]; then
    how="uv pip install"
    "$uv" pip install --quiet --python "$venv/bin/python" -r "$reqs"
  else
    how="pip install"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
  fi
  if "$venv/bin/python" -c "$check"; then
    awk -v s="$started" -v e="$(date +%s.%N)" -v n="$name" -v v="$venv" -v h="$how" \
      'BEGIN { printf "%s: created %s with %s in %.1f s\n", n, v, h, e - s }'
  else
    echo "$name: $venv was installed but does not import" >&2
    status=1
  fi
done
exit $status
