#!/usr/bin/env bash
# Per server through feedd: one feedd (2 workers) serves the ImageNet sample
# as a tree (`tree`) and as the 10 shards run.sh wrote (`shards`);
# feed-client-probe pulls 30 batches of 64 at 224x224 (uint8, host) from one
# and then the other, order alternating by round (ABBA), 5 rounds. For each
# run: the probe's img/s and feedd's CPU time per image (utime + stime from
# /proc/PID/stat around the run), which the other jobs on the machine move
# far less than wall time. Run after run.sh (it makes the shards).
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build}
data=${DATA:-/work/shared/datasets/imagenet-sample}
out=bench/results/tar-2core-2026-12-03
tmp=${TMPDIR:-/tmp}/tar-bench
shards="$tmp/shard-{000000..000009}.tar"
test -f "$tmp/shard-000009.tar.idx"
rm -f "$tmp/port"
"$b/server/feedd" --listen 127.0.0.1:0 --port-file "$tmp/port" --threads 2 --log-level warn \
  --dataset "tree=$data" --dataset "shards=$shards" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
target=127.0.0.1:$(cat "$tmp/port")
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
tck=$(getconf CLK_TCK)
rm -f "$out/feedd.jsonl" "$out/feedd.txt"
cat /proc/loadavg > "$out/feedd_loadavg.txt"
for round in 1 2 3 4 5; do
  if [ $((round % 2)) = 1 ]; then order=(tree shards); else order=(shards tree); fi
  for ds in "${order[@]}"; do
    c0=$(cpu)
    line=$("$b/client/feed-client-probe" --target "$target" --dataset "$ds" --batch 64 \
      --batches 30 --size 224 --dtype u8 --device host | tee -a "$out/feedd.txt" | head -1)
    c1=$(cpu)
    python3 -c 'import json,sys; l=sys.argv[2].split(); i=int(l[3]); print(json.dumps({"dataset": sys.argv[1], "round": int(sys.argv[3]), "images": i, "img_per_s": float(l[6]), "feedd_cpu_ms_per_image": (int(sys.argv[5]) - int(sys.argv[4])) * 1000.0 / int(sys.argv[6]) / i}))' \
      "$ds" "$line" "$round" "$c0" "$c1" "$tck" >> "$out/feedd.jsonl"
  done
done
cat /proc/loadavg >> "$out/feedd_loadavg.txt"
python3 - "$out/feedd.jsonl" > "$out/feedd_table.md" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def pick(ds, key):
    return [r[key] for r in sorted((r for r in rows if r["dataset"] == ds), key=lambda r: r["round"])]
def med(v, d):
    return f"{statistics.median(v):,.{d}f} ({min(v):,.{d}f}-{max(v):,.{d}f})"
print("| through feedd, per server | tree | tar shards | shards / tree, per round |")
print("| --- | ---: | ---: | ---: |")
a, b = pick("tree", "img_per_s"), pick("shards", "img_per_s")
r = [y / x for x, y in zip(a, b)]
print(f"| img/s (probe) | {med(a, 1)} | {med(b, 1)} | {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f}) |")
a, b = pick("tree", "feedd_cpu_ms_per_image"), pick("shards", "feedd_cpu_ms_per_image")
r = [x / y for x, y in zip(a, b)]
print(f"| feedd CPU ms per image | {med(a, 3)} | {med(b, 3)} | {statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f}) (images per CPU-s) |")
print()
print("median (range) of 5 rounds of 30 batches of 64, train 224x224 uint8")
PY
cat "$out/feedd_table.md"
