#!/usr/bin/env bash
# 64 feedclient loaders on one feedd (2 workers, --max-memory 32M), batch 48,
# 224x224, ImageNet sample, 45 s per run; the old batch deadline (10 s) and
# the new default (60 s) interleaved, 5 runs each, on the 2-core CI machine
# (shared with other jobs). Raw lines in runs.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/fairness-2core-2026-12-01
export PYTHONPATH=python/src FEEDCLIENT_LIBRARY=build/client/libfeedclient.so
for i in 1 2 3 4 5; do
  for d in 10 60; do
    /usr/bin/python3 bench/fault/fairness.py --feedd build/server/feedd \
      --data "${DATA:-/work/shared/datasets/imagenet-sample}" --clients 64 --batch 48 \
      --seconds 45 --threads 2 --max-memory 32M --batch-deadline "$d" \
      --json "$out/runs.jsonl" > /dev/null 2>&1
  done
done
python3 - "$out/runs.jsonl" <<'PY' | tee "$out/table.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| batch deadline | runs | slowest/fastest | failovers | longest wait s | batches |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for d in sorted({r["batch_deadline_s"] for r in rows}):
    rs = [r for r in rows if r["batch_deadline_s"] == d]
    def f(k, spec):
        v = [r[k] for r in rs]
        return f"{format(statistics.median(v), spec)} ({format(min(v), spec)}-{format(max(v), spec)})"
    print(f"| {d:g} s | {len(rs)} | {f('slowest_over_fastest', '.2f')} | {f('failovers', '.0f')} | "
          f"{f('longest_wait_s', '.1f')} | {f('batches_total', '.0f')} |")
PY
