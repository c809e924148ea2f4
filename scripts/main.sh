#!/usr/bin/env bash
# The main job: installs what is missing, builds, generates the embedded
# default dataset and runs the end-to-end starvation benchmark on it (CPU
# step when this machine has no GPU), then draws the plots into out/main.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=build-main/bench/e2e/feed-bench
for a in "$@"; do
  if [ "$a" = -h ] || [ "$a" = --help ]; then
    cat <<'HELP'
usage: scripts/main.sh [feed-bench options]

Installs the packages the main job needs (scripts/deps.sh main), builds into
build-main/, runs feed-bench --out out/main with the given options (sync,
local and remote loading on the generated default dataset data/default) and
draws throughput.png, gpu_util.png and batch_wait.png into out/main.
Prints this and stops, building nothing, with -h or --help.
HELP
    if [ -x "$bench" ]; then
      echo; echo "feed-bench options (from $bench --help):"; "$bench" --help
    else
      echo; echo "feed-bench's options: $bench --help, once built."
    fi
    exit 0
  fi
done
scripts/deps.sh main
scripts/build.sh build-main -DCMAKE_BUILD_TYPE=Release -DFEED_BUILD_TESTS=OFF
"$bench" --out out/main "$@"
python3 bench/plot.py out/main
