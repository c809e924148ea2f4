#!/usr/bin/env bash
# Device call 1 (run from the bundle's directory): the resnet18 ceiling, the
# re-encoded data with 4 training cores (issue 10's p99 wait after 5bb8f01),
# and the originals from warm decoded-sample caches (issue 9).
set -u
cd "$(dirname "$0")"
o=$OUT/c1
mkdir -p "$o"
export REPEAT=193 MAX_INFLIGHT=2
four=(TRAIN_CPUS=0-3 "SERVER_CPUS=4-9 10-15" SERVER_THREADS=6)
pack() { tar czf "$OUT/c1.tgz" -C "$OUT" c1; }
WARMUP=10 SECONDS_PER=10 WINDOWS=5 bash torch/run_h2h.sh "$o/synth" r18-synth; pack
env "${four[@]}" WARMUP=15 SECONDS_PER=60 WINDOWS=5 bash torch/run_h2h.sh "$o/reenc4" r18-feed-reenc; pack
env "${four[@]}" CACHE_WARMUP=40 SECONDS_PER=15 WINDOWS=5 bash torch/run_h2h.sh "$o/cache4" r18-feed-orig-cache; pack
grep -c "no progress" "$o"/*/feedd*.log
grep -h "^feedd_cache_\(hits\|misses\|bytes\)" "$o"/cache4/metrics-*.txt
