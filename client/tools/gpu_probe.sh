#!/bin/bash
# Client measurements on the GPU machine, from a bundle (see bench/results/client.md):
# test_client_gpu, then feed-client-probe against 1..3 local feedd servers with a
# warm augmented-sample cache, so what is measured is the client (receive, land,
# copy, normalise), not JPEG decoding.
#   client/tools/gpu_probe.sh BUNDLE_DIR
set -u
cd "$1" || exit 1
export FEED_BUILD_DIR=$PWD LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64
./tests/test_client_gpu 2>&1 | tail -9
ds=$(mktemp -d)
./server/tools/feed-gen-dataset "$ds/ds" --classes 10 --per-class 100 --seed 1 >/dev/null || exit 1
pids=()
for i in 0 1 2; do
    ./server/feedd --listen 127.0.0.1:0 --port-file "$ds/p$i" --dataset "d=$ds/ds" --threads 4 \
        --cache-bytes 8G --log-level warn &
    pids+=($!)
done
for i in 0 1 2; do
    for _ in $(seq 100); do [ -s "$ds/p$i" ] && break; sleep 0.1; done
done
P0=127.0.0.1:$(cat "$ds/p0"); P1=127.0.0.1:$(cat "$ds/p1"); P2=127.0.0.1:$(cat "$ds/p2")
probe() { echo "== feed-client-probe $*"; ./feed-client-probe --dataset d --batch 256 --size 224 "$@"; }
for P in $P0 $P1 $P2; do  # warm each server's cache with epoch 0
    ./feed-client-probe --dataset d --batch 256 --size 224 --target "$P" --batches 8 --same-epoch \
        --device host --dtype u8 --layout nhwc >/dev/null
done
probe --target "$P0" --batches 100 --same-epoch --device 0 --dtype fp16
probe --target "$P0" --target "$P1" --batches 150 --same-epoch --device 0 --dtype fp16
probe --target "$P0" --target "$P1" --target "$P2" --batches 200 --same-epoch --device 0 --dtype fp16
probe --target "$P0" --target "$P1" --target "$P2" --batches 200 --same-epoch --device 0 \
    --dtype fp16 --step-us 20000
kill "${pids[@]}"
rm -rf "$ds"
