#!/usr/bin/env bash
# run_h2h.sh OUTDIR [CONFIG...] — the PyTorch head-to-head on the GPU machine,
# from the bundle (bench/make_gpu_bundle.sh puts this script in it as
# torch/run_h2h.sh). Configurations (default: all, in this order):
#   r18-synth r18-dl-orig r18-feed-orig r18-dl-reenc r18-feed-reenc
#   r50-synth r50-dl-orig r50-feed-orig  dl-sweep
# and, named only: r18-feed-orig-cache r50-feed-orig-cache, r18-feed-orig-lane (the
# originals with feedclient's decode lane: DECODE_LANE (gpu) decodes DECODE_SHARE (0.5) of
# the samples in the training process, from encoded bytes the servers send; DECODE_SHARE_MAX
# above 0: the share adapts between epochs up to it; DECODE_LANE_THREADS (0: the loader's
# 2) lane threads, each with its own GPU decoder), and torchvision's
# v2 recipe at its train size 176 (headtohead.py --recipe): r50-synth-recipe
# r50-dl-recipe r50-feed-recipe r50-feed-recipe-cache (originals).
# r18/r50: torchvision resnet18/resnet50; synth: batches already on the GPU
# (the ceiling); dl: torchvision ImageFolder + DataLoader(num_workers=K);
# feed: feedclient.Loader over two feedd servers. orig: the bundle's original
# ImageNet JPEGs; reenc: the same images re-encoded once (max side 400, q90,
# 4:2:0) by reencode.py. Each tree lists every image REPEAT times (symbolic
# links), so an epoch has >= 50,000 samples; DataLoader and feedd read the
# same files. feed-orig-cache: the originals served from feedd's decoded-sample
# cache (--dataset orig=...,cache=CACHE_SIDE, --cache-bytes CACHE_BYTES per
# server), after a warm-up of CACHE_WARMUP s in which both servers' caches
# fill (each server caches what it is asked for, so both must see every
# sample); the servers' cache metrics are saved as metrics-CONFIG-N.txt at
# the end. dl-sweep: DataLoader with K in SWEEP_WORKERS, one short window
# each, to show the K used is its best.
#
# Cores (16): DataLoader and synthetic runs use the whole machine; for feed
# runs the training process is pinned to CPUs 0-1 and the two feedd servers
# (7 workers each) to 2-8 and 9-15, so both sources get the same 16 cores.
#
# Environment: REPEAT (167), WARMUP (15 s), SECONDS_PER (20 s), WINDOWS (5),
# WORKERS (DataLoader K, 15), SWEEP_WORKERS ("8 12 15"), BATCH (256),
# TRAIN_CPUS (0-1), SERVER_CPUS ("2-8 9-15"), SERVER_THREADS (7), DEVICE (cuda:0),
# MAX_INFLIGHT (0: the loop never waits for the GPU; N: at most N steps queued),
# WINDOW (4) and PREFETCH (6): feedclient's window_per_server and prefetch;
# CACHE_SIDE (256), CACHE_BYTES (24G), CACHE_WARMUP (60 s); FEEDCLIENT_LIBRARY (the bundle's
# lib/libfeedclient.so: another build of the library to compare); FEEDD (the bundle's bin/feedd:
# another build of the server to compare).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: run_h2h.sh OUTDIR [CONFIG...]}
shift
configs=${*:-r18-synth r18-dl-orig r18-feed-orig r18-dl-reenc r18-feed-reenc r50-synth r50-dl-orig r50-feed-orig dl-sweep}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}"
export FEEDCLIENT_LIBRARY=${FEEDCLIENT_LIBRARY:-$here/lib/libfeedclient.so}
repeat=${REPEAT:-167}
common=(--warmup "${WARMUP:-15}" --seconds "${SECONDS_PER:-20}" --windows "${WINDOWS:-5}"
        --batch "${BATCH:-256}" --device "${DEVICE:-cuda:0}" --json "$out/h2h.jsonl"
        --max-inflight "${MAX_INFLIGHT:-0}")
work=${H2H_WORK:-/tmp/feedd-h2h}
stamp() { echo "== $(date -u +%T) $*" >&2; }

# tree SRC DST: every image of SRC listed REPEAT times in DST (same classes).
tree() {
  [ -d "$2" ] || python3 - "$1" "$2" "$repeat" <<'PY'
import os, sys
src, dst, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
for c in sorted(os.listdir(src)):
    if os.path.isdir(os.path.join(src, c)):
        os.makedirs(os.path.join(dst + ".tmp", c))
        for f in os.listdir(os.path.join(src, c)):
            for r in range(repeat):
                os.symlink(os.path.join(src, c, f), os.path.join(dst + ".tmp", c, f"r{r}_{f}"))
os.rename(dst + ".tmp", dst)
PY
}

mkdir -p "$work"
if [ ! -d "$work/reenc-src" ]; then
  stamp "re-encoding the originals (max side 400, q90, 4:2:0)"
  python3 "$here/torch/reencode.py" "$here/data/tree" "$work/reenc-src.tmp" &&
    mv "$work/reenc-src.tmp" "$work/reenc-src"
fi
tree "$here/data/tree" "$work/orig"
tree "$work/reenc-src" "$work/reenc"
du -sL "$here/data/tree" "$work/reenc-src" > "$out/data-sizes.txt" 2>&1
find "$work/orig" -type l | wc -l > "$out/samples-per-epoch.txt"

pids=() targets=() mports=()
# start_servers [cache]: two feedd serving orig and reenc; with "cache", orig
# from the decoded-sample cache.
start_servers() {
  [ ${#pids[@]} -gt 0 ] && return
  local i=0 orig="orig=$work/orig" extra=()
  if [ "${1:-}" = cache ]; then
    orig="$orig,cache=${CACHE_SIDE:-256}"
    extra=(--cache-bytes "${CACHE_BYTES:-24G}")
  fi
  for cpus in ${SERVER_CPUS:-2-8 9-15}; do
    rm -f "$work/port$i" "$work/mport$i"
    taskset -c "$cpus" "${FEEDD:-$here/bin/feedd}" --listen 127.0.0.1:0 --port-file "$work/port$i" \
      --metrics-listen 127.0.0.1:0 --metrics-port-file "$work/mport$i" \
      --threads "${SERVER_THREADS:-7}" --dataset "$orig" --dataset "reenc=$work/reenc" \
      "${extra[@]}" --log-level warn >> "$out/feedd$i.log" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done
  for i in 0 1; do
    for _ in $(seq 600); do [ -s "$work/port$i" ] && [ -s "$work/mport$i" ] && break; sleep 0.1; done
    targets+=("127.0.0.1:$(cat "$work/port$i")")
    mports+=("$(cat "$work/mport$i")")
  done
}
# save_metrics CONFIG: each server's /metrics as metrics-CONFIG-N.txt.
save_metrics() {
  local i=0
  for p in "${mports[@]}"; do
    python3 -c 'import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode())' \
      "$p" > "$out/metrics-$1-$i.txt" 2>&1
    i=$((i + 1))
  done
}
stop_servers() {
  mports=()
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  pids=() targets=()
}
trap stop_servers EXIT

run() { # label args...
  local label=$1
  shift
  stamp "$label"
  ${PIN:-} python3 "$here/torch/headtohead.py" --label "$label" --series "$out/series-$label.json" \
    "$@" 2>&1 | tee -a "$out/h2h.log" | grep -E "median|Error|error" >&2
}

for cfg in $configs; do
  case $cfg in
    r18-*) model=resnet18 ;;
    r50-*) model=resnet50 ;;
  esac
  recipe=()
  case $cfg in
    *-recipe*) recipe=(--recipe --size 176) ;;
  esac
  case $cfg in
    r*-synth|r*-synth-recipe)
      run "$cfg" --source synthetic --model "$model" "${common[@]}" "${recipe[@]}" ;;
    r*-dl-orig|r*-dl-reenc|r*-dl-recipe)
      tree=${cfg##*-}
      [ "$tree" = recipe ] && tree=orig
      run "$cfg" --source dataloader --model "$model" --tree "$work/$tree" \
        --workers "${WORKERS:-15}" "${common[@]}" "${recipe[@]}" ;;
    r*-feed-orig|r*-feed-reenc|r*-feed-orig-cache|r*-feed-recipe|r*-feed-recipe-cache|r*-feed-orig-lane)
      ds=${cfg#r*-feed-} warm=() lane=()
      ds=${ds/recipe/orig}
      if [ "$ds" = orig-lane ]; then
        ds=orig lane=(--decode-lane "${DECODE_LANE:-gpu}" --decode-share "${DECODE_SHARE:-0.5}"
                      --decode-share-max "${DECODE_SHARE_MAX:-0}"
                      --decode-lane-threads "${DECODE_LANE_THREADS:-0}")
      fi
      if [ "$ds" = orig-cache ]; then
        ds=orig warm=(--warmup "${CACHE_WARMUP:-60}")
        start_servers cache
      else
        start_servers
      fi
      PIN="taskset -c ${TRAIN_CPUS:-0-1}" run "$cfg" --source feedclient --model "$model" \
        --dataset "$ds" --targets "$(IFS=,; echo "${targets[*]}")" \
        --window "${WINDOW:-4}" --prefetch "${PREFETCH:-6}" \
        --pids "$(IFS=,; echo "${pids[*]}")" "${common[@]}" "${warm[@]}" "${recipe[@]}" \
        "${lane[@]}"
      save_metrics "$cfg"
      stop_servers ;;
    dl-sweep)
      for k in ${SWEEP_WORKERS:-8 12 15}; do
        python3 "$here/torch/headtohead.py" --label "sweep-k$k" --source dataloader \
          --model resnet18 --tree "$work/orig" --workers "$k" --warmup 10 --seconds 10 \
          --device "${DEVICE:-cuda:0}" --batch "${BATCH:-256}" \
          --windows 1 --json "$out/sweep.jsonl" 2>&1 | tee -a "$out/h2h.log" | grep median >&2
      done ;;
    *) echo "run_h2h: unknown configuration $cfg" >&2 ;;
  esac
done
python3 "$here/torch/h2h_report.py" "$out" > "$out/summary.md" 2>&1
cat "$out/summary.md"
