#!/usr/bin/env bash
# run_pair.sh TREE [OUT_DIR] [SECONDS]: on one machine, the engine and
# torchvision on the same ImageFolder TREE, then the engine on packs made from
# it (plain, and re-encoded to max side 320 and 256, quality 90, 4:2:0; made
# in $PACK_DIR, default /tmp/preproc-packs). Writes OUT_DIR/preproc.jsonl,
# OUT_DIR/preproc.csv, OUT_DIR/torchvision.jsonl and OUT_DIR/ratio.txt.
# Run with the build's binaries (or bench/make_gpu_bundle.sh's bin/) on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tree=$1 out=${2:-preproc-results} secs=${3:-10}
packs=${PACK_DIR:-/tmp/preproc-packs}
mkdir -p "$out" "$packs"
if [ -d "$here/bin" ]; then
  export PATH="$here/bin:$PATH" LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cores=$(nproc)
echo "== machine: $cores cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
feed-pack "$tree" "$packs/plain.pack" >/dev/null
feed-pack "$tree" "$packs/ms320.pack" --max-side 320 --quality 90 --subsample 420 >/dev/null
feed-pack "$tree" "$packs/ms256.pack" --max-side 256 --quality 90 --subsample 420 >/dev/null
echo "== engine on the tree"
feed-preproc-bench "$tree" --seconds "$secs" --json "$out/preproc.jsonl" --csv "$out/preproc.csv"
for p in plain ms320 ms256; do
  echo "== engine on $p.pack"
  feed-preproc-bench "$packs/$p.pack" --seconds "$secs" --json "$out/preproc.jsonl" --csv "$out/preproc.csv"
done
echo "== torchvision on the tree"
PYTHONUNBUFFERED=1 ${PYTHON:-python3} "$here/torchvision_bench.py" "$tree" --warmup --seconds "$secs" \
  --json "$out/torchvision.jsonl"
${PYTHON:-python3} "$here/ratio.py" "$out/preproc.jsonl" "$out/torchvision.jsonl" | tee "$out/ratio.txt"
