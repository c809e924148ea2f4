#!/usr/bin/env bash
# 64 feedclient loaders on one feedd (2 workers, --max-memory 32M), batch 48,
# 224x224, ImageNet sample, 90 s per run, the default batch deadline (60 s),
# 5 runs on the 2-core CI machine (shared with other jobs). Beside the whole
# run's slowest/fastest batches, the steady-state ratio: batches after the
# first 10 s. Raw lines in runs.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=bench/results/fairness-2core-2026-12-01b
export PYTHONPATH=python/src FEEDCLIENT_LIBRARY=build/client/libfeedclient.so
for i in 1 2 3 4 5; do
  /usr/bin/python3 bench/fault/fairness.py --feedd build/server/feedd \
    --data "${DATA:-/work/shared/datasets/imagenet-sample}" --clients 64 --batch 48 \
    --seconds 90 --settle 10 --threads 2 --max-memory 32M \
    --json "$out/runs.jsonl" > /dev/null 2>&1
done
python3 - "$out/runs.jsonl" <<'PY' | tee "$out/table.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| run | slowest/fastest, whole run | steady state (after 10 s) | failovers | longest wait s | batches | min / max batches |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for i, r in enumerate(rows, 1):
    print(f"| {i} | {r['slowest_over_fastest']:.2f} | {r['steady_slowest_over_fastest']:.2f} | "
          f"{r['failovers']} | {r['longest_wait_s']:.1f} | {r['batches_total']} | "
          f"{r['batches_min']} / {r['batches_max']} |")
for k in ("slowest_over_fastest", "steady_slowest_over_fastest"):
    v = [r[k] for r in rows]
    print(f"\n{k}: median {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
PY
