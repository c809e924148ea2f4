#!/usr/bin/env bash
# dcall.sh NAME WARMUP CONFIG: one head-to-head configuration, 5 windows of
# 60 s after WARMUP s, into $OUT/NAME (tarred to $OUT/NAME.tgz).
set -u
cd "$(dirname "$0")"
name=$1 warm=$2 cfg=$3
o=$OUT/$name
mkdir -p "$o"
git -C .. rev-parse HEAD > "$o/commit.txt" 2>/dev/null
REPEAT=193 MAX_INFLIGHT=2 WARMUP=$warm SECONDS_PER=60 WINDOWS=5 bash torch/run_h2h.sh "$o" "$cfg"
rc=$?
tar czf "$OUT/$name.tgz" -C "$OUT" "$name"
exit $rc
