#!/usr/bin/env bash
# ab.sh BASE_BUILD HEAD_BUILD OUT [ROUNDS] [feed-wire-bench args...]: feed-wire-bench of two
# builds side by side on the same data, in ABBA rounds (BASE HEAD HEAD BASE, ROUNDS times,
# default 5), each run's rows appended to OUT/wire.csv with its build and round; then
# OUT/summary.txt: HEAD/BASE images/s per mode and threads, median and range of the rounds.
# Default bench arguments: --threads 1 --mode preproc,cache --seconds 5 --streams 2.
set -euo pipefail
base=$(cd "$1" && pwd); head=$(cd "$2" && pwd); out=$3; rounds=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
args=("$@")
((${#args[@]})) || args=(--threads 1 --mode preproc,cache --seconds 5 --streams 2)
mkdir -p "$out"
echo "build,round,mode,servers,threads,streams,batch,side,window,gbps,imgps,srv_cores,cli_cores" \
  > "$out/wire.csv"
run() { # run LABEL BUILD ROUND
  local tmp; tmp=$(mktemp)
  "$2/bench/wire/feed-wire-bench" "${args[@]}" --csv "$tmp" >> "$out/$1-$3.log" 2>&1
  sed "s/^/$1,$3,/" "$tmp" >> "$out/wire.csv"
  rm -f "$tmp"
}
for r in $(seq 1 "$rounds"); do
  run base "$base" "$r"; run head "$head" "$r"; run head "$head" "$r"; run base "$base" "$r"
done
python3 - "$out/wire.csv" > "$out/summary.txt" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
rate = "imgps"
by = {}
for r in rows:
    key = (r["mode"], r["threads"])
    by.setdefault(key, {}).setdefault(r["round"], {}).setdefault(r["build"], []).append(float(r[rate]))
print("mode threads  HEAD/BASE median (range) over rounds  BASE img/s median  HEAD img/s median")
for (mode, threads), rounds in sorted(by.items()):
    ratios = [statistics.mean(v["head"]) / statistics.mean(v["base"]) for v in rounds.values()]
    b = statistics.median(x for v in rounds.values() for x in v["base"])
    h = statistics.median(x for v in rounds.values() for x in v["head"])
    print(f"{mode:7} {threads:>3}  {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
          f"  {b:,.0f}  {h:,.0f}")
PY
cat "$out/summary.txt"
