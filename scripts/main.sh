#!/usr/bin/env bash
# The main job: installs what is missing, builds, generates the embedded
# default dataset and runs the end-to-end starvation benchmark on it (CPU
# step when this machine has no GPU), then draws the plots into out/main.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build-main -DCMAKE_BUILD_TYPE=Release -DFEED_BUILD_TESTS=OFF
build-main/bench/e2e/feed-bench --out out/main "$@"
python3 bench/plot.py out/main
