#!/usr/bin/env bash
# Device call 3: resnet50's ceiling and the originals through feedclient
# (2 training cores, 2 x 7 server cores) at 60 s windows.
set -u
cd "$(dirname "$0")"
o=$OUT/c3
mkdir -p "$o"
export REPEAT=193 MAX_INFLIGHT=2
pack() { tar czf "$OUT/c3.tgz" -C "$OUT" c3; }
WARMUP=10 SECONDS_PER=10 WINDOWS=5 bash torch/run_h2h.sh "$o/synth" r50-synth; pack
WARMUP=15 SECONDS_PER=60 WINDOWS=5 bash torch/run_h2h.sh "$o/r50" r50-feed-orig; pack
grep -c "no progress" "$o"/*/feedd*.log
