#!/usr/bin/env bash
# bench/make_gpu_bundle.sh DIR [BUILD_DIR]
#
# Makes a self-contained folder to run the GPU comparison on the GPU machine
# (which has the CUDA libraries, NVML and python3 with matplotlib, but no
# gRPC, protobuf-c or libjpeg-turbo and no package registry):
#   DIR/bin   feed-bench, feedd, feed-pack, feed-gen-dataset (debug info stripped)
#   DIR/lib   their shared libraries, minus the C library family, the loader,
#             libstdc++/libgcc_s (the GPU machine's are newer) and the CUDA/NVML
#             libraries (the GPU machine has its own in /usr/local/cuda/lib64)
#   DIR/data  the ImageNet sample ($FEED_SAMPLE_DIR) packed and re-encoded to a
#             longer side of at most 400 px, quality 90, 4:2:0 (originals are
#             110 MB and do not fit the 60 MiB budget), each image listed 50
#             times (bench/e2e/repeat_pack.py) so an epoch is 195 batches of 256
#   DIR/gpu_suite.sh, plot.py, calibrate_presets.py
# Build first with CUDA (scripts/build.sh build): feed-bench must have its CUDA step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:?usage: make_gpu_bundle.sh DIR [BUILD_DIR]}
build=${2:-$root/build}
sample=${FEED_SAMPLE_DIR:-$root/../shared/datasets/imagenet-sample}
max_mib=60

rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib" "$dir/data"
for b in bench/e2e/feed-bench server/feedd server/tools/feed-pack server/tools/feed-gen-dataset; do
  [ -x "$build/$b" ] || { echo "make_gpu_bundle: $build/$b missing; build first" >&2; exit 1; }
  cp -L "$build/$b" "$dir/bin/"
  strip --strip-debug "$dir/bin/$(basename "$b")"
done
if ! ldd "$dir/bin/feed-bench" | grep -q libcublas; then
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

cp "$root/bench/gpu_suite.sh" "$root/bench/plot.py" "$root/bench/e2e/calibrate_presets.py" "$dir/"
if [ -d "$sample" ]; then
  "$dir/bin/feed-pack" "$sample" "$dir/data/sample-400.pack" --max-side 400 \
    --quality 90 --subsample 420 --threads "$(nproc)"
  # 50 index entries per image (own crop and flip each): epochs of 195 batches of 256.
  python3 "$root/bench/e2e/repeat_pack.py" "$dir/data/sample-400.pack" \
    "$dir/data/imagenet-sample-400-x50.pack" --times 50
  rm "$dir/data/sample-400.pack"
else
  echo "make_gpu_bundle: no ImageNet sample at $sample; the suite will use a generated dataset" >&2
fi

size=$(du -sm "$dir" | cut -f1)
echo "make_gpu_bundle: $dir is ${size} MiB ($(ls "$dir/lib" | wc -l) libraries)"
if [ "$size" -gt "$max_mib" ]; then
  echo "make_gpu_bundle: over the ${max_mib} MiB budget" >&2
  exit 1
fi
