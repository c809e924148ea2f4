#!/usr/bin/env bash
# rcall.sh NAME CONFIG...: head-to-head configurations of torchvision's v2
# recipe (resnet50 at 176, bench/torch/run_h2h.sh), 5 windows of 30 s, into
# $OUT/NAME. Run from the repository root with the bundle in gpu-bundle/.
set -u
name=$1
shift
o=$OUT/$name
mkdir -p "$o"
git rev-parse HEAD > "$o/commit.txt" 2>/dev/null
nproc > "$o/nproc.txt"
REPEAT=295 MAX_INFLIGHT=2 WARMUP=15 CACHE_WARMUP=45 SECONDS_PER=30 WINDOWS=5 \
  bash gpu-bundle/torch/run_h2h.sh "$o" "$@"
