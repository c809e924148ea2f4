#!/usr/bin/env bash
# jobs_runs.sh OUTDIR: RUNS runs of jobs.py (an 8-rank job and a 1-rank job on
# one feedd of THREADS workers; per-connection, jobs 1:1 and weighted 2:1 each
# on a fresh server, SECONDS_PER_RUN per mode, counted after SETTLE), run from
# anywhere after scripts/build.sh build. Appends OUTDIR/runs.jsonl (one JSON
# line per mode and run, its command included) and writes OUTDIR/table.md:
# per mode the median of the 8-rank job's share of the samples and its range.
# Environment: BUILD (build), DATA (the shared ImageNet sample), RUNS (5),
# SECONDS_PER_RUN (30), SETTLE (8), THREADS (1).
set -euo pipefail
out=$(mkdir -p "${1:?usage: jobs_runs.sh OUTDIR}" && cd "$1" && pwd)
cd "$(dirname "$0")/../.."
b=${BUILD:-build}
export PYTHONPATH=python/src FEEDCLIENT_LIBRARY=$b/client/libfeedclient.so
for i in $(seq "${RUNS:-5}"); do
  echo "run $i" >&2
  /usr/bin/python3 bench/fault/jobs.py --feedd "$b/server/feedd" \
    --data "${DATA:-/work/shared/datasets/imagenet-sample}" --seconds "${SECONDS_PER_RUN:-30}" \
    --settle "${SETTLE:-8}" --threads "${THREADS:-1}" --json "$out/runs.jsonl" > /dev/null
done
/usr/bin/python3 - "$out/runs.jsonl" <<'PY' | tee "$out/table.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| mode | big job's weight | target share | median share of the 8-rank job | range | runs |")
print("| --- | --- | --- | --- | --- | --- |")
for mode in ("per-connection", "jobs", "weighted"):
    r = [x for x in rows if x["mode"] == mode]
    if r:
        s = [x["big_share"] for x in r]
        print(f"| {mode} | {r[0]['big_weight']} | {r[0]['target']:.3f} | {statistics.median(s):.3f} "
              f"| {min(s):.3f}-{max(s):.3f} | {len(s)} |")
PY
