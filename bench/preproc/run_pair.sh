#!/usr/bin/env bash
# run_pair.sh TREE [OUT_DIR] [SECONDS]: on one machine, the engine and
# torchvision on the same ImageFolder TREE, then the engine on packs made from
# it (plain, and re-encoded to max side 320 and 256, quality 90, 4:2:0).
# Writes OUT_DIR/preproc.jsonl and OUT_DIR/torchvision.jsonl and prints the
# ratios (ratio.py). Run from a bundle (make_bundle.sh) or with the build's
# binaries on PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tree=$1 out=${2:-preproc-results} secs=${3:-10}
mkdir -p "$out"
if [ -d "$here/bin" ]; then
  export PATH="$here/bin:$PATH" LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cores=$(nproc)
echo "== machine: $cores cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
feed-pack "$tree" "$out/plain.pack" >/dev/null
feed-pack "$tree" "$out/ms320.pack" --max-side 320 --quality 90 --subsample 420 >/dev/null
feed-pack "$tree" "$out/ms256.pack" --max-side 256 --quality 90 --subsample 420 >/dev/null
echo "== engine on the tree"
feed-preproc-bench "$tree" --seconds "$secs" --json "$out/preproc.jsonl" --csv "$out/preproc.csv"
for p in plain ms320 ms256; do
  echo "== engine on $p.pack"
  feed-preproc-bench "$out/$p.pack" --seconds "$secs" --json "$out/preproc.jsonl" --csv "$out/preproc.csv"
done
echo "== torchvision on the tree"
per=$(( secs * 300 ))
PYTHONUNBUFFERED=1 python3 "$here/torchvision_bench.py" "$tree" --warmup --images-per-proc "$per" \
  --json "$out/torchvision.jsonl"
python3 "$here/ratio.py" "$out/preproc.jsonl" "$out/torchvision.jsonl" | tee "$out/ratio.txt"
