#!/usr/bin/env bash
# run.sh [BUILD] [DATA]: the transport guard's cost on the wire path. One
# feedd (1 worker, ImageNet sample from its decoded-sample cache at side 64,
# so the wire and the client dominate, not decoding) and feed-client-probe
# taking 1,200 batches of 256 64x64 u8 images (the first epoch fills the
# cache); guard on (the default, --transport-memory 256M) and off
# (--transport-memory 0), interleaved, 5 runs each, on the same 2 cores.
# Prints one line per run and writes runs.txt beside this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
data=${2:-/work/shared/datasets/imagenet-sample}
out=$here/runs.txt
: > "$out"
for run in 1 2 3 4 5; do
  for mode in on off; do
    d=$(mktemp -d)
    extra=()
    [ "$mode" = off ] && extra=(--transport-memory 0)
    "$build/server/feedd" --listen 127.0.0.1:0 --port-file "$d/port" --threads 1 \
      --dataset "imagenet=$data,cache=64" --cache-bytes 512M "${extra[@]}" > "$d/log" 2>&1 &
    pid=$!
    while [ ! -s "$d/port" ]; do sleep 0.1; done
    line=$("$build/client/feed-client-probe" --target "127.0.0.1:$(cat "$d/port")" --dataset imagenet \
      --size 64 --dtype u8 --batches 1200 --same-epoch 2>&1 | grep "img/s")
    kill "$pid"; wait "$pid" || true
    echo "run $run guard $mode: $line" | tee -a "$out"
    rm -rf "$d"
  done
done
