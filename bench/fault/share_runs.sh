#!/usr/bin/env bash
# share_runs.sh OUTDIR: one run of share.py (a 4-job sweep on one feedd of THREADS workers:
# decode shared vs unshared, ROUNDS rounds alternating, no decoded cache; then the same four
# jobs on a warm decoded cache against one job alone), run from anywhere after
# scripts/build.sh build. Appends OUTDIR/runs.jsonl (one JSON line per round and mode, its
# command and feedd's included) and writes OUTDIR/table.md: the shared/unshared aggregate
# images/s ratio (median and range over the rounds), each job's rate against the mean of the
# four, and on the warm cache each job's rate against a quarter of the single job's.
# Environment: BUILD (build), DATA (the shared ImageNet sample), ROUNDS (5), THREADS (2),
# SIDE (256: share=SIDE and cache=SIDE), SIZE (224: the jobs' output side),
# SHARE_WINDOW_BYTES (feedd's default),
# PARTS (share,cache; "unshared,cache" against a feedd without the share window).
set -euo pipefail
out=$(mkdir -p "${1:?usage: share_runs.sh OUTDIR}" && cd "$1" && pwd)
cd "$(dirname "$0")/../.."
b=${BUILD:-build}
export PYTHONPATH=python/src FEEDCLIENT_LIBRARY=$b/client/libfeedclient.so
/usr/bin/python3 bench/fault/share.py --feedd "$b/server/feedd" \
  --data "${DATA:-/work/shared/datasets/imagenet-sample}" --rounds "${ROUNDS:-5}" \
  --threads "${THREADS:-2}" --side "${SIDE:-256}" --size "${SIZE:-224}" \
  --share-window-bytes "${SHARE_WINDOW_BYTES:-}" --parts "${PARTS:-share,cache}" \
  --json "$out/runs.jsonl" > /dev/null
/usr/bin/python3 bench/fault/share_table.py "$out/runs.jsonl" | tee "$out/table.md"
