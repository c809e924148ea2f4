#!/usr/bin/env bash
# run.sh BUNDLE OUTDIR [ROUNDS] — the lock changes of issue 22 (finding 8) on
# the GPU machine, in a real PyTorch job: torchvision resnet18 trained on the
# bundle's ImageNet JPEGs re-encoded once (run_h2h.sh's r18-feed-reenc:
# training process on CPUs 0-1, two feedd with 7 workers on 2-8 and 9-15),
# libfeedclient of BASE (651acf6, BUNDLE/lib-base) against HEAD
# (BUNDLE/lib), ROUNDS rounds (default 3), order alternating by round (ABBA).
# The same feedd (HEAD) serves both. Each run: WARMUP 8 s, one 15 s window.
set -uo pipefail
b=$(cd "${1:?usage: run.sh BUNDLE OUTDIR [ROUNDS]}" && pwd)
out=${2:?}
rounds=${3:-3}
mkdir -p "$out"
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="base head"; else order="head base"; fi
  for v in $order; do
    lib=$b/lib/libfeedclient.so
    [ "$v" = base ] && lib=$b/lib-base/libfeedclient.so
    echo "== $(date -u +%T) round $r $v" >&2
    FEEDCLIENT_LIBRARY=$lib WARMUP=8 SECONDS_PER=15 WINDOWS=1 \
      bash "$b/torch/run_h2h.sh" "$out/$v-r$r" r18-feed-reenc > "$out/$v-r$r.log" 2>&1
    tail -3 "$out/$v-r$r.log"
  done
done
