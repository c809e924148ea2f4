#!/bin/bash
# Copies what client/tools/gpu_probe.sh runs on the GPU machine into one folder:
# test_client_gpu, feedd, feed-gen-dataset, feed-client-probe and the shared
# libraries they need that the GPU machine lacks (not libc/libm/CUDA; see
# /work/shared/notes/gpu.md).
#   client/tools/make_gpu_bundle.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$1
out=$2
mkdir -p "$out/lib" "$out/server/tools" "$out/tests"
cp "$build/tests/client/test_client_gpu" "$out/tests/"
cp "$build/server/feedd" "$out/server/"
cp "$build/server/tools/feed-gen-dataset" "$out/server/tools/"
cp "$build/client/feed-client-probe" "$out/"
for f in "$out/tests/test_client_gpu" "$out/server/feedd" "$out/server/tools/feed-gen-dataset" \
    "$out/feed-client-probe"; do
    ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | grep -v -E 'libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|ld-linux|libcuda' |
    xargs -I{} cp -L {} "$out/lib/"
du -sh "$out"
