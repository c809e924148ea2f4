#!/usr/bin/env bash
# fairness_runs.sh OUTDIR: RUNS runs of fairness.py (CLIENTS feedclient
# loaders on one feedd of THREADS workers and MAX_MEMORY, batch BATCH,
# 224x224, SECONDS_PER_RUN per run), run from anywhere after scripts/build.sh build;
# with DEADLINES (e.g. "10 60") each run takes every batch deadline in turn
# (interleaved), without it the library's default. Appends OUTDIR/runs.jsonl
# (one JSON line per run, its command included) and writes OUTDIR/table.md
# (fairness_table.py).
#   2026-12-01:  DEADLINES="10 60" SECONDS_PER_RUN=45 fairness_runs.sh OUT
#   2026-12-01b: SECONDS_PER_RUN=90 SETTLE=10 fairness_runs.sh OUT
# Environment: BUILD (build), DATA (the shared ImageNet sample), RUNS (5),
# SECONDS_PER_RUN (45), SETTLE (fairness.py's default), DEADLINES, CLIENTS (64),
# BATCH (48), THREADS (2), MAX_MEMORY (32M).
set -euo pipefail
out=$(mkdir -p "${1:?usage: fairness_runs.sh OUTDIR}" && cd "$1" && pwd)
cd "$(dirname "$0")/../.."
b=${BUILD:-build}
export PYTHONPATH=python/src FEEDCLIENT_LIBRARY=$b/client/libfeedclient.so
settle=()
[ -n "${SETTLE:-}" ] && settle=(--settle "$SETTLE")
for i in $(seq "${RUNS:-5}"); do
  for d in ${DEADLINES:-default}; do
    deadline=()
    [ "$d" != default ] && deadline=(--batch-deadline "$d")
    echo "run $i deadline $d" >&2
    /usr/bin/python3 bench/fault/fairness.py --feedd "$b/server/feedd" \
      --data "${DATA:-/work/shared/datasets/imagenet-sample}" --clients "${CLIENTS:-64}" \
      --batch "${BATCH:-48}" --seconds "${SECONDS_PER_RUN:-45}" ${settle[@]+"${settle[@]}"} \
      --threads "${THREADS:-2}" --max-memory "${MAX_MEMORY:-32M}" ${deadline[@]+"${deadline[@]}"} \
      --json "$out/runs.jsonl" > /dev/null 2>&1
  done
done
python3 bench/fault/fairness_table.py "$out/runs.jsonl" | tee "$out/table.md"
