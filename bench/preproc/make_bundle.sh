#!/usr/bin/env bash
# make_bundle.sh BUILD_DIR OUT_DIR: copies feed-preproc-bench, feed-pack and the
# shared libraries they need that a stock GPU machine lacks (libjpeg.so.62)
# into OUT_DIR/bin and OUT_DIR/lib, with the two benchmark scripts, so that
# OUT_DIR/run_pair.sh runs there (see bench/results/preproc.md).
set -euo pipefail
build=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/bin" "$out/lib"
cp "$build/bench/preproc/feed-preproc-bench" "$build/server/tools/feed-pack" "$out/bin/"
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}' | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' || true
done | sort -u | while read -r lib; do cp -L "$lib" "$out/lib/"; done
cp "$here/torchvision_bench.py" "$here/run_pair.sh" "$here/ratio.py" "$out/"
echo "bundle in $out:"; ls -l "$out" "$out/bin" "$out/lib"
