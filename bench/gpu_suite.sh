#!/usr/bin/env bash
# gpu_suite.sh OUTDIR [STAGE...] — every GPU test and benchmark in one go, on
# the GPU machine, from a bundle made by bench/make_gpu_bundle.sh (this script
# sits in it). Stages (default: all, in this order):
#   client   test_client_gpu: normalize kernel vs host reference, copy/compute
#            overlap timeline, next() CPU cost, stream_wait, no CUDA allocation
#            on the training thread (libfeedclient); test_client_gpujpeg: the
#            GPU JPEG decode (nvJPEG hardware backend) against the server's
#            engine on the bundle's ImageNet JPEGs, PSNR within the stated
#            tolerance, bad images failing cleanly (must open: no skip);
#            test_client_lane_gpu: the loader's decode lane on the JPEG engines
#            against feedd (order, labels, the servers' samples exact, the
#            engines' within the tolerance, step times measured)
#   python   the feedclient package's pytest suite on the GPU path and the host
#            path (tests/python/test_gpu.py, test_loader.py) against real feedd
#   preproc  feed-preproc-bench (1 and N threads, with the full-decode
#            reference, and from the decoded-sample cache) and torchvision's
#            transform (1 and N processes) on the same original JPEGs,
#            PREPROC_RUNS times
#   split    feed-engine-split: the engine's time split (Huffman, the rest of
#            a full decode, the engine's decode and resize), SPLIT_RUNS times
#   wire     feed-wire-bench: one server as threads grow (wire only and with
#            preprocessing), then several servers -> one client
#   e2e      feed-bench sync / local / remote per model preset, RUNS times
#            (separate processes), summarised by e2e_report.py: median and
#            range, % of the GPU-only ceiling
# Each stage writes OUTDIR/<stage>/; a short table of everything comes last.
#
# e2e layout on a 16-core host with one GPU:
#   CPUs 0-3   the "GPU host": the training process (training thread, the
#              local source's 4 loader threads, libfeedclient's receivers),
#              limited to 4 cores, as a job gets on a busy shared 8-GPU node;
#   CPUs 4-9, 10-15   two feedd servers, 6 worker threads each, pinned.
# Data: the bundle's original ImageNet JPEGs, packed unchanged by feed-pack,
# each image listed REPEAT times (repeat_pack.py) so an epoch has a realistic
# number of batches; the same data, transform and seed for every source.
#
# Settings by environment: MODELS ("resnet50 resnet18"), SECONDS_PER (10),
# BATCH (256), LOADER_CPUS (0-3), LOCAL_THREADS (4), SERVER_CPUS (4-9:10-15),
# SERVERS (2), SERVER_THREADS (6), REPEAT (40), RUNS (5), PREPROC_SECONDS (5),
# PREPROC_RUNS (5), PREPROC_CACHE (2G), CACHE_SIDE (256), SPLIT_RUNS (5),
# WIRE_SECONDS (3), FEED_BENCH_ARGS (appended to every feed-bench call).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: gpu_suite.sh OUTDIR [client preproc wire e2e]}
shift
stages=${*:-client python preproc split wire e2e}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$here/bin:$PATH"
bin=$here/bin
tree=$here/data/tree
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{ nvidia-smi || true; nproc --all; uname -a; grep -m1 'model name' /proc/cpuinfo; } \
  > "$out/host.txt" 2>&1
if [ ! -d "$tree" ]; then
  tree=$work/tree
  feed-gen-dataset "$tree" --classes 100 --per-class 3 > /dev/null
fi
stamp() { echo "== $(date -u +%T) $*" >&2; }

stage_client() {
  stamp "client: test_client_gpu"
  mkdir -p "$out/client" "$work/fake-build/server/tools"
  ln -sf "$bin/feedd" "$work/fake-build/server/feedd"
  ln -sf "$bin/feed-gen-dataset" "$work/fake-build/server/tools/feed-gen-dataset"
  FEED_BUILD_DIR=$work/fake-build "$bin/test_client_gpu" > "$out/client/test_client_gpu.txt" 2>&1
  echo "rc=$?" >> "$out/client/test_client_gpu.txt"
  stamp "client: test_client_gpujpeg"
  FEED_SAMPLE_DIR=$tree FEED_GPUJPEG_REQUIRED=1 "$bin/test_client_gpujpeg" \
    > "$out/client/test_client_gpujpeg.txt" 2>&1
  echo "rc=$?" >> "$out/client/test_client_gpujpeg.txt"
  stamp "client: test_client_lane_gpu"
  FEED_BUILD_DIR=$work/fake-build FEED_SAMPLE_DIR=$tree FEED_GPUJPEG_REQUIRED=1 \
    "$bin/test_client_lane_gpu" > "$out/client/test_client_lane_gpu.txt" 2>&1
  echo "rc=$?" >> "$out/client/test_client_lane_gpu.txt"
}

stage_python() {
  stamp "python: feedclient pytest (GPU and host paths)"
  mkdir -p "$out/python" "$work/fake-build/server/tools"
  ln -sf "$bin/feedd" "$work/fake-build/server/feedd"
  ln -sf "$bin/feed-gen-dataset" "$work/fake-build/server/tools/feed-gen-dataset"
  local pp=$here/python
  python3 -c "import pytest" 2> /dev/null || pp=$pp:$here/pylib
  (cd "$here/tests/python" && FEED_BUILD_DIR=$work/fake-build PYTHONPATH=$pp \
    FEEDCLIENT_LIBRARY=$here/lib/libfeedclient.so python3 -m pytest -q -rs -p no:cacheprovider \
    test_gpu.py test_loader.py) > "$out/python/pytest.txt" 2>&1
  echo "rc=$?" >> "$out/python/pytest.txt"
}

stage_preproc() {
  local secs=${PREPROC_SECONDS:-5} r
  mkdir -p "$out/preproc"
  for r in $(seq "${PREPROC_RUNS:-5}"); do
    stamp "preproc run $r: engine on the original JPEGs, uncached and from the decoded-sample cache"
    feed-preproc-bench "$tree" --seconds "$secs" --decoded-cache "${PREPROC_CACHE:-2G}" \
      --cache-side "${CACHE_SIDE:-256}" --json "$out/preproc/preproc-r$r.jsonl" \
      > "$out/preproc/engine-r$r.txt" 2>&1
    stamp "preproc run $r: torchvision on the same JPEGs"
    python3 "$here/torchvision_bench.py" "$tree" --warmup --seconds "$secs" \
      --json "$out/preproc/torchvision-r$r.jsonl" > "$out/preproc/torchvision-r$r.txt" 2>&1
    python3 "$here/ratio.py" "$out/preproc/preproc-r$r.jsonl" "$out/preproc/torchvision-r$r.jsonl" \
      > "$out/preproc/ratio-r$r.txt" 2>&1
  done
  cat "$out"/preproc/ratio-r*.txt > "$out/preproc/ratio.txt"
}

stage_split() {
  mkdir -p "$out/split"
  stamp "split: where the engine's time goes, ${SPLIT_RUNS:-5} runs"
  grep -o 'avx512[a-z]*' /proc/cpuinfo | sort -u | tr '\n' ' ' > "$out/split/cpu-flags.txt"
  for r in $(seq "${SPLIT_RUNS:-5}"); do
    feed-engine-split "$tree" 3 >> "$out/split/runs.txt" 2>&1
  done
}

stage_wire() {
  local secs=${WIRE_SECONDS:-3}
  mkdir -p "$out/wire"
  stamp "wire: one server, threads 1,4,8,16"
  feed-wire-bench --dataset "$tree" --threads 1,4,8,16 --streams 4 --seconds "$secs" --warmup 1 \
    --feedd "$bin/feedd" --csv "$out/wire/wire.csv" > "$out/wire/scaling.txt" 2>&1
  stamp "wire: 4 servers x 3 threads -> one client, wire only"
  feed-wire-bench --dataset "$tree" --servers 4 --streams 2 --threads 3 --mode cache \
    --seconds "$secs" --warmup 1 --feedd "$bin/feedd" --csv "$out/wire/wire.csv" \
    > "$out/wire/multi.txt" 2>&1
}

stage_e2e() {
  local data=$work/e2e.pack
  feed-pack "$tree" "$work/plain.pack" > /dev/null &&
    python3 "$here/repeat_pack.py" "$work/plain.pack" "$data" --times "${REPEAT:-40}" > /dev/null
  for m in ${MODELS:-resnet50 resnet18}; do
    for r in $(seq "${RUNS:-5}"); do
      stamp "e2e: $m, run $r of ${RUNS:-5}"
      local o=$out/e2e/$m/run$r
      mkdir -p "$o"
      taskset -c "${LOADER_CPUS:-0-3}" "$bin/feed-bench" --device cuda --model "$m" --data "$data" \
        --out "$o" --batch "${BATCH:-256}" --seconds "${SECONDS_PER:-10}" \
        --local-threads "${LOCAL_THREADS:-4}" --spawn-servers "${SERVERS:-2}" \
        --server-threads "${SERVER_THREADS:-6}" --server-cpus "${SERVER_CPUS:-4-9:10-15}" \
        --feedd "$bin/feedd" ${FEED_BENCH_ARGS:-} 2> "$o/stderr.log" \
        > "$o/table.txt" || echo "gpu_suite: feed-bench failed for $m, run $r" >&2
    done
    python3 "$here/plot.py" "$out/e2e/$m/run1" > /dev/null 2>&1 || echo "gpu_suite: plots for $m failed" >&2
    python3 "$here/e2e_report.py" "$out/e2e/$m" > "$out/e2e/$m/table.md" 2>&1
  done
}

for s in $stages; do
  "stage_$s"
done

echo
echo "#### feedd GPU suite ($(nproc --all) CPUs): stages $stages"
for s in $stages; do
  case $s in
    client) echo "## client"; tail -n 12 "$out/client/test_client_gpu.txt"
      tail -n 12 "$out/client/test_client_gpujpeg.txt"
      tail -n 12 "$out/client/test_client_lane_gpu.txt" ;;
    python) echo "## python"; tail -n 8 "$out/python/pytest.txt" ;;
    preproc) echo "## preproc (engine vs torchvision, same JPEGs)"; grep -v '^{' "$out/preproc/ratio.txt"
      grep -h '^{' "$out"/preproc/preproc-r*.jsonl | python3 -c 'import json,sys
for l in sys.stdin:
    d = json.loads(l)
    print("cached/uncached 1t %.2fx  nt %.2fx  hit %s" % (d["cached_img_per_s_1t"] / d["fast_img_per_s_1t"],
          d["cached_img_per_s_nt"] / d["fast_img_per_s_nt"], d["cached_hit_rate"]))' ;;
    split) echo "## split"; grep -E "^(full|engine|huffman)" "$out/split/runs.txt" ;;
    wire) echo "## wire"; cat "$out/wire/scaling.txt" "$out/wire/multi.txt" | grep -v '^#' | tail -n 20 ;;
    e2e)
      echo "## e2e"
      for m in ${MODELS:-resnet50 resnet18}; do echo "# $m"; cat "$out/e2e/$m/table.md"; done ;;
  esac
done
