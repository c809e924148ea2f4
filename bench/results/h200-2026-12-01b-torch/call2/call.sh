#!/usr/bin/env bash
# call 2: resnet18 feedclient on the original JPEGs (5 x 60 s), and two 60 s
# probes of what bounds the host wait on re-encoded data: a deeper client
# window, and 4 training cores / 12 server cores.
set -u
b=$(cd "$(dirname "$0")" && pwd)
o=$OUT/c2; mkdir -p "$o"
export H2H_WORK=/tmp/h2h
MAX_INFLIGHT=2 WARMUP=15 SECONDS_PER=60 WINDOWS=5 "$b/torch/run_h2h.sh" "$o/h2h" r18-feed-orig
MAX_INFLIGHT=2 WARMUP=10 SECONDS_PER=60 WINDOWS=1 WINDOW=8 PREFETCH=10 "$b/torch/run_h2h.sh" "$o/probe-w8" r18-feed-reenc
MAX_INFLIGHT=2 WARMUP=10 SECONDS_PER=60 WINDOWS=1 TRAIN_CPUS=0-3 SERVER_CPUS="4-9 10-15" SERVER_THREADS=6 "$b/torch/run_h2h.sh" "$o/probe-4cores" r18-feed-reenc
for d in h2h probe-w8 probe-4cores; do python3 "$b/torch/h2h_report.py" "$o/$d" > "$o/$d/summary.md" 2>&1; done
cd "$OUT" && tar czf c2.tgz c2 && rm -rf c2
