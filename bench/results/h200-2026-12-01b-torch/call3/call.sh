#!/usr/bin/env bash
# call 3: resnet18 feedclient on re-encoded data with 4 training cores and
# 12 server cores (5 x 60 s), and DataLoader on the originals (3 x 60 s).
set -u
b=$(cd "$(dirname "$0")" && pwd)
o=$OUT/c3; mkdir -p "$o"
export H2H_WORK=/tmp/h2h
MAX_INFLIGHT=2 WARMUP=15 SECONDS_PER=60 WINDOWS=5 TRAIN_CPUS=0-3 SERVER_CPUS="4-9 10-15" SERVER_THREADS=6 "$b/torch/run_h2h.sh" "$o/h2h" r18-feed-reenc
MAX_INFLIGHT=2 WARMUP=15 SECONDS_PER=60 WINDOWS=3 "$b/torch/run_h2h.sh" "$o/h2h" r18-dl-orig
python3 "$b/torch/h2h_report.py" "$o/h2h" > "$o/h2h/summary.md" 2>&1
cd "$OUT" && tar czf c3.tgz c3 && rm -rf c3
