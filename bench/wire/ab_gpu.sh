#!/usr/bin/env bash
# ab_gpu.sh BUNDLE OUTDIR [wire|torch] [ROUNDS] — issue 29's one-owner stream
# (feedd's stream moved to its completion-queue thread) against the feedd
# before it, on the GPU machine, side by side:
#   wire   bench/wire/ab.sh: feed-wire-bench of BASE and HEAD in ABBA rounds
#          (default 5) on the bundle's ImageNet JPEGs, 4 worker threads,
#          4 streams, modes preproc (decode) and cache (decoded-cache hits).
#   torch  a real PyTorch resnet18 (run_h2h.sh r18-feed-reenc: training on
#          CPUs 0-1, two feedd of 7 workers on 2-8 and 9-15), feedd of BASE
#          (BUNDLE/base/server/feedd) against HEAD (BUNDLE/bin/feedd), the
#          same libfeedclient (HEAD); order alternating by round; WARMUP 8 s,
#          one 15 s window a run.
# FIRST_ROUND (1): the first round's number, so that one set of rounds can be
# split over two device calls (torch: FIRST_ROUND=4 ... 5 runs rounds 4 and 5).
# BUNDLE: bench/make_gpu_bundle.sh of HEAD with BASE's feedd and
# feed-wire-bench in BUNDLE/base/{server,bench/wire}/.
set -uo pipefail
b=$(cd "${1:?usage: ab_gpu.sh BUNDLE OUTDIR [wire|torch] [ROUNDS]}" && pwd)
out=${2:?}
what=${3:-wire}
rounds=${4:-5}
mkdir -p "$out"
export LD_LIBRARY_PATH=$b/lib:/usr/local/cuda/lib64
tree=$b/data/tree
case "$what" in
  wire)
    mkdir -p "$b/head/server" "$b/head/bench/wire"
    # Hard links (or copies), not symbolic ones: feed-wire-bench finds its feedd from
    # /proc/self/exe (../../server/feedd), which a symbolic link resolves to bin/.
    for f in server/feedd bench/wire/feed-wire-bench; do
      ln -f "$b/bin/$(basename "$f")" "$b/head/$f" 2> /dev/null || cp -f "$b/bin/$(basename "$f")" "$b/head/$f"
    done
    bash "$b/wire/ab.sh" "$b/base" "$b/head" "$out/wire" "$rounds" --dataset "$tree" \
      --threads 4 --mode preproc,cache --seconds 5 --warmup 1 --streams 4
    ;;
  torch)
    mkdir -p "$out/torch"
    for r in $(seq "${FIRST_ROUND:-1}" "$rounds"); do
      if [ $((r % 2)) = 1 ]; then order="base head"; else order="head base"; fi
      for v in $order; do
        feedd=$b/bin/feedd
        [ "$v" = base ] && feedd=$b/base/server/feedd
        echo "== $(date -u +%T) round $r $v" >&2
        FEEDD=$feedd WARMUP=8 SECONDS_PER=15 WINDOWS=1 \
          bash "$b/torch/run_h2h.sh" "$out/torch/$v-r$r" r18-feed-reenc > "$out/torch/$v-r$r.log" 2>&1
        tail -3 "$out/torch/$v-r$r.log"
      done
    done
    ;;
  *) echo "ab_gpu.sh: wire or torch" >&2; exit 2 ;;
esac
