#!/usr/bin/env bash
# Before / after the lock changes of issue 22 (finding 8), side by side on one
# machine and the same data: feed-client-probe pulls 2,000 batches of 32 at
# 64x64 (uint8, host) of the ImageNet sample, served from feedd's decoded
# cache (cache=64, warmed by one pass first) so that the client and the
# server's send path, not decoding, set the pace. Each round starts both
# servers afresh (a process's placement on this machine's 2 cores moved one
# server's rate by 20-40% for its whole life) and runs two comparisons, order
# alternating by round (ABBA), 5 rounds:
#   client: the new feedd, probe of BASE vs of HEAD (the dispatch thread);
#   server: the new probe, feedd of BASE vs of HEAD (ops out of the stream lock).
# BASE: a build of 651acf6 (BASE_BUILD), HEAD: this tree's build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
new=${BUILD:-build}
old=${BASE_BUILD:?a build of 651acf6}
data=${DATA:-/work/shared/datasets/imagenet-sample}
out=bench/results/locks-2core-2026-12-04
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill $p 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
start() { # build name -> port
  "$1/server/feedd" --listen 127.0.0.1:0 --port-file "$tmp/$2.port" --threads 2 --log-level warn \
    --dataset "s=$data,cache=64" --cache-bytes 1G > "$out/feedd-$2.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$tmp/$2.port" ] && break; sleep 0.1; done
  cat "$tmp/$2.port"
}
probe() { # probe-build port -> img/s,next() CPU us p50,next() wait ms p99
  "$1/client/feed-client-probe" --target "127.0.0.1:$2" --dataset s --batch 32 --size 64 \
    --batches 2000 --dtype u8 --layout nhwc --same-epoch > "$tmp/probe.txt" 2>&1
  cat "$tmp/probe.txt" >> "$out/raw.txt"
  awk '/img\/s/ {for (i = 1; i < NF; i++) if ($(i + 1) == "img/s") r = $i}
       /next\(\) CPU us/ {c = $5} /next\(\) wait ms/ {w = $7}
       END {print r "," c "," w}' "$tmp/probe.txt"
}
: > "$out/raw.txt"; : > "$out/runs.csv"
echo "comparison,round,variant,img_s,next_cpu_us_p50,next_wait_ms_p99" >> "$out/runs.csv"
cat /proc/loadavg > "$out/loadavg.txt"
for round in 1 2 3 4 5; do
  rm -f "$tmp"/*.port
  pnew=$(start "$new" new); pold=$(start "$old" old)
  probe "$new" "$pnew" > /dev/null; probe "$new" "$pold" > /dev/null
  if [ $((round % 2)) = 1 ]; then order=(base head); else order=(head base); fi
  for v in "${order[@]}"; do
    pb=$new; [ $v = base ] && pb=$old
    echo "client,$round,$v,$(probe "$pb" "$pnew")" >> "$out/runs.csv"
  done
  for v in "${order[@]}"; do
    port=$pnew; [ $v = base ] && port=$pold
    echo "server,$round,$v,$(probe "$new" "$port")" >> "$out/runs.csv"
  done
  for p in "${pids[@]}"; do kill $p 2>/dev/null || true; wait $p 2>/dev/null || true; done
  pids=()
done
cat /proc/loadavg >> "$out/loadavg.txt"
python3 - "$out/runs.csv" > "$out/table.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| comparison | base img/s median (range) | head img/s median (range) | head / base img/s (per-round ratios: median, range) | next() CPU us p50, base / head (medians) |")
print("|---|---|---|---|---|")
for c in ("client", "server"):
    v = {k: {int(r["round"]): float(r["img_s"]) for r in rows if r["comparison"] == c and r["variant"] == k} for k in ("base", "head")}
    f = lambda xs: f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"
    ratios = [v["head"][k] / v["base"][k] for k in v["base"]]
    cpu = {k: statistics.median(float(r["next_cpu_us_p50"]) for r in rows if r["comparison"] == c and r["variant"] == k) for k in ("base", "head")}
    print(f"| {c} | {f(list(v['base'].values()))} | {f(list(v['head'].values()))} | {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | {cpu['base']:.1f} / {cpu['head']:.1f} |")
PY
cat "$out/table.md"
