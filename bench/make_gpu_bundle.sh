#!/usr/bin/env bash
# bench/make_gpu_bundle.sh DIR [BUILD_DIR]
#
# The one folder every GPU test and benchmark runs from on the GPU machine
# (which has the CUDA libraries, NVML and python3 with torch, torchvision and
# matplotlib, but no gRPC, protobuf-c or libjpeg-turbo, and no package
# registry); bench/gpu_suite.sh, copied into it, runs them all:
#   DIR/bin    feed-bench, feedd, feed-pack, feed-gen-dataset, feed-preproc-bench, feed-engine-split,
#              feed-wire-bench, feed-client-probe, test_client_gpu, test_client_gpujpeg,
#              test_client_lane_gpu
#              (debug info stripped)
#   DIR/lib    their shared libraries, minus the C library family, the loader,
#              libstdc++/libgcc_s and the CUDA/NVML libraries (the GPU machine
#              has its own, see ../shared/notes/gpu.md)
#   DIR/data/tree  original ImageNet JPEGs from $FEED_SAMPLE_DIR, unchanged:
#              every image of the first DATA_CLASSES classes (default 300,
#              one image each; the whole 110 MB sample does not fit the 64 MiB
#              a device call carries). The suite packs them there.
#   DIR/lib/libfeedclient.so  for the Python package
#   DIR/python  the feedclient package; DIR/pylib  Debian's pytest (pure Python)
#              for the GPU machine, which has none
#   DIR/tests/python  the package's pytest suite; DIR/torch  the PyTorch
#              head-to-head (torch/run_h2h.sh; torch/h2h_call.sh NAME CONFIG...
#              for one device call of it); DIR/fleet  the fleet-sizing
#              benchmark (BIN=DIR/bin fleet/fleet.sh) and the fleet-sharded
#              cache's (BIN=DIR/bin fleet/fleet_cache.sh)
#   DIR/*.sh, *.py  the suite and the scripts it calls
# A device call carries the repository's tracked files and the bundle in
# 64 MiB together: the bundle must fit what the tracked files leave (checked
# at the end). LEAN=1 leaves out what only the client and python stages and
# the fleet benchmark need (test_client_gpu*, pylib, tests, fleet) for calls
# that run the head-to-head, preproc, split, wire and e2e stages.
# Build first with CUDA (scripts/build.sh BUILD_DIR -DCMAKE_BUILD_TYPE=Release).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: make_gpu_bundle.sh DIR [BUILD_DIR]}
build=${2:-$root/build}
sample=${FEED_SAMPLE_DIR:-$root/../shared/datasets/imagenet-sample}
classes=${DATA_CLASSES:-300}
tracked_mib=$(cd "$root" && git ls-files -z | xargs -0 du -cb 2> /dev/null |
  awk '$2 == "total" {t += $1} END {print int(t / 1048576) + 1}' || true)
max_mib=$((63 - tracked_mib))
lean=${LEAN:-0}

rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib" "$dir/data"
for b in bench/e2e/feed-bench server/feedd server/tools/feed-pack server/tools/feed-gen-dataset \
         bench/preproc/feed-preproc-bench bench/preproc/feed-engine-split bench/wire/feed-wire-bench client/feed-client-probe \
         tests/client/test_client_gpu tests/client/test_client_gpujpeg tests/client/test_client_lane_gpu; do
  # LEAN=1 bundles leave the client tests out, so a build without tests makes one.
  case "$b" in tests/client/*) [ "$lean" = 1 ] && continue ;; esac
  [ -x "$build/$b" ] || { echo "make_gpu_bundle: $build/$b missing; build first" >&2; exit 1; }
  cp -L "$build/$b" "$dir/bin/"
  strip --strip-debug "$dir/bin/$(basename "$b")"
done
if ! ldd "$dir/bin/feed-bench" | grep libcublas > /dev/null; then
  echo "make_gpu_bundle: feed-bench was built without CUDA; rebuild with nvcc available" >&2
  exit 1
fi

for b in "$dir"/bin/*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u |
  while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*) continue ;;
      libstdc++.so*|libgcc_s.so*) continue ;;
      libcuda.so*|libcudart*|libcublas*|libnvidia-ml*|libnvrtc*|libnvJitLink*) continue ;;
    esac
    cp -L "$lib" "$dir/lib/"
  done

cp -L "$build/client/libfeedclient.so" "$dir/lib/"
mkdir -p "$dir/python" "$dir/torch"
cp -r "$root/python/src/feedclient" "$dir/python/"
rm -rf "$dir/python/feedclient/__pycache__"
cp "$root"/bench/torch/*.py "$root"/bench/torch/*.sh "$dir/torch/"
if [ "$lean" != 1 ]; then
  mkdir -p "$dir/pylib" "$dir/tests" "$dir/fleet"
  cp -r "$root/tests/python" "$dir/tests/"
  rm -rf "$dir/tests/python/__pycache__"
  cp "$root"/bench/fleet/*.py "$root"/bench/fleet/*.sh "$dir/fleet/"
  for m in _pytest pytest pluggy iniconfig packaging attr attrs py py.py; do
    cp -r "/usr/lib/python3/dist-packages/$m" "$dir/pylib/"
  done
  find "$dir/pylib" -name __pycache__ -prune -exec rm -rf {} +
fi
cp "$root/bench/gpu_suite.sh" "$root/bench/plot.py" "$root/bench/e2e/calibrate_presets.py" \
   "$root/bench/e2e/e2e_report.py" \
   "$root/bench/e2e/repeat_pack.py" "$root/bench/preproc/torchvision_bench.py" \
   "$root/bench/preproc/ratio.py" "$dir/"
if [ -d "$sample" ]; then
  find "$sample" -mindepth 1 -maxdepth 1 -type d | sort | sed -n "1,${classes}p" |
    while read -r c; do
      mkdir -p "$dir/data/tree/$(basename "$c")"
      cp "$c"/* "$dir/data/tree/$(basename "$c")/"
    done
else
  echo "make_gpu_bundle: no ImageNet sample at $sample; the suite will use a generated dataset" >&2
fi

size=$(du -sm "$dir" | cut -f1)
echo "make_gpu_bundle: $dir is ${size} MiB ($(ls "$dir/lib" | wc -l) libraries," \
     "$(find "$dir/data" -type f | wc -l) images)"
if [ "$size" -gt "$max_mib" ]; then
  echo "make_gpu_bundle: over the ${max_mib} MiB the tracked files (${tracked_mib} MiB) leave" \
       "a device call; lower DATA_CLASSES or set LEAN=1" >&2
  exit 1
fi
