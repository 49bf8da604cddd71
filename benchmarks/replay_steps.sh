#!/usr/bin/env bash
# The TPC-H replay's four timed commands (proof, run, reconcile, publish) on a home made by
# benchmarks/prepare_home.py, in place, with TREE's code first on PYTHONPATH; one line a command
# (wall, CPU, peak RSS) and the total, appended to /tmp/replay-TAG.txt. Run two at once to compare
# two trees under the same load:
#   benchmarks/replay_steps.sh /work/old-tree /tmp/preOld old & benchmarks/replay_steps.sh "$PWD" /tmp/preNew new & wait
set -u
tree=$1; folder=$2; tag=$3
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=/tmp/replay-$tag.txt
started=$(date +%s.%N)
cd /tmp  # never the repository: its folder on the import path would shadow TREE
for step in "run tpch-replay --proof" "run tpch-replay" "reconcile tpch-replay" "publish tpch-replay"; do
  # shellcheck disable=SC2086  # the step is words on purpose
  BACKFILL_DEFS="$root/benchmarks/peers/tpch_defs.py" BENCH_PARTITIONS_PER_RUN=30 PYTHONPATH="$tree" \
    /usr/bin/time -a -o "$out" -f "$tag ${step% tpch-replay*}${step##*replay} %e s %U+%S cpu %M KB" \
    "$root/.venv/bin/backfill" --home "$folder/home" $step > /dev/null 2>&1 || echo "FAILED: $tag $step" >&2
done
echo "$tag end to end $(echo "$(date +%s.%N) - $started" | bc) s" >> "$out"
