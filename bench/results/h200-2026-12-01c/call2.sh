#!/usr/bin/env bash
# Device call 2: issue 9's per-core numbers (engine vs torchvision, the
# decoded-sample cache, the engine's time split), 5 runs each, then feed-bench's
# e2e stage, 5 separate runs per model (issue 10's method for the README table).
set -u
cd "$(dirname "$0")"
o=$OUT/c2
mkdir -p "$o"
pack() { tar czf "$OUT/c2.tgz" -C "$OUT" c2; }
PREPROC_RUNS=5 PREPROC_SECONDS=3 SPLIT_RUNS=5 bash gpu_suite.sh "$o/suite" preproc split; pack
RUNS=5 MODELS="resnet50 resnet18" SECONDS_PER=8 bash gpu_suite.sh "$o/e2e" e2e; pack
