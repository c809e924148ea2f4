#!/usr/bin/env bash
# call 1: resnet18 ceiling and feedclient on re-encoded data, loop with at most 2 steps queued
set -u
b=$(cd "$(dirname "$0")" && pwd)
o=$OUT/c1; mkdir -p "$o"
nproc > "$o/nproc.txt"; nvidia-smi -L >> "$o/nproc.txt" 2>&1
export H2H_WORK=/tmp/h2h
MAX_INFLIGHT=2 WARMUP=10 SECONDS_PER=15 WINDOWS=5 "$b/torch/run_h2h.sh" "$o/h2h" r18-synth
MAX_INFLIGHT=2 WARMUP=15 SECONDS_PER=60 WINDOWS=5 "$b/torch/run_h2h.sh" "$o/h2h" r18-feed-reenc
mkdir -p "$o/h2h-mi0"
MAX_INFLIGHT=0 WARMUP=10 SECONDS_PER=20 WINDOWS=1 "$b/torch/run_h2h.sh" "$o/h2h-mi0" r18-feed-reenc
python3 "$b/torch/h2h_report.py" "$o/h2h" > "$o/h2h/summary.md" 2>&1
python3 "$b/torch/h2h_report.py" "$o/h2h-mi0" > "$o/h2h-mi0/summary.md" 2>&1
cd "$OUT" && tar czf c1.tgz c1 && rm -rf c1
