#!/usr/bin/env bash
# Creates the two peer virtualenvs used by benchmarks/diff_peers.py, idempotently:
#   benchmarks/.venv-datadiff  data-diff 0.11.2 (joindiff) + dbt-core 1.7.x + DuckDB 2.0.1
#   benchmarks/.venv-sqlmesh   SQLMesh 0.236.4 + DuckDB 1.5.6 (SQLMesh requires duckdb < 2)
# Versions are pinned in benchmarks/peers/requirements-{datadiff,sqlmesh}.txt.
# A venv that exists and imports its packages is left alone; a broken one is rebuilt.
# Installs with uv when the project venv has it (.venv/bin/uv), else (or with PEER_INSTALLER=pip)
# with pip.
#
#   bash benchmarks/peers/setup.sh [--force] [datadiff|sqlmesh ...]
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
    datadiff|sqlmesh) names+=("$arg") ;;
    *) echo "usage: $0 [--force] [datadiff|sqlmesh ...]" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(datadiff sqlmesh)

import_check() {
  case "$1" in
    datadiff) echo "import duckdb, data_diff; from data_diff.joindiff_tables import JoinDiffer" ;;
    sqlmesh) echo "import duckdb, sqlmesh; from sqlmesh.core.context import Context; assert duckdb.__version__ < '2'" ;;
  esac
}

status=0
for name in "${names[@]}"; do
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
