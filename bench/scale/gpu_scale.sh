#!/usr/bin/env bash
# gpu_scale.sh BUNDLE OUTDIR [steady|torch|all] — issue 31 on the GPU machine,
# from a bench/make_gpu_bundle.sh bundle that also holds bin/feed-scale-client
# and scale/hpa_sim.py (bench/gpu_issue29_31.sh prep puts them there):
#   steady  the metric at a known demand: hpa_sim.py --steady with real feedd
#           (one worker thread) and real feed-scale-client processes, one job at
#           0.5x, 1x, 2x, 4x of one server's measured capacity, STEADY_SECONDS
#           (20) each; table of ideal vs feedd_fleet_desired_servers (second
#           half of the windows). About 2 min.
#   torch   a real PyTorch resnet18 (bench/torch/headtohead.py, training pinned
#           to TRAIN_CPUS 0-1) through feedclient against ONE feedd of W worker
#           threads pinned to W cores from 2 up, for each W in WORKERS_LIST
#           ("4 12"), on the bundle's original ImageNet JPEGs (each listed
#           REPEAT times); /metrics scraped every 5 s; after the warm-up
#           (WARMUP 40 s: feedd's capacity takes 3 of its 10 s windows) WINDOWS (3)
#           windows of SECONDS_PER (10) s. Prints, per W: images/s, GPU busy
#           (NVML) and idle % of the training stream, feedd_fleet_desired_servers
#           and _raw, and cores per GPU from the metric = desired servers x W
#           (and raw x W). About 100 s per W, plus 10 s to build the tree.
#   all     both (default). About 6 min with the defaults.
# Everything lands in OUTDIR (steady/, torch-wW/ with metrics.jsonl, h2h.jsonl,
# feedd.log); the last lines on stdout are the tables (also OUTDIR/summary.txt).
set -uo pipefail
b=$(cd "${1:?usage: gpu_scale.sh BUNDLE OUTDIR [steady|torch|all]}" && pwd)
mkdir -p "${2:?}"
out=$(cd "$2" && pwd)
what=${3:-all}
export LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$b/python${PYTHONPATH:+:$PYTHONPATH}"
export FEEDCLIENT_LIBRARY=${FEEDCLIENT_LIBRARY:-$b/lib/libfeedclient.so}
work=${SCALE_WORK:-/tmp/feedd-gpu-scale}
stamp() { echo "== $(date -u +%T) $*" >&2; }
: > "$out/summary.txt"

steady() {
  # hpa_sim.py finds its binaries in a build tree: a small one of links into the bundle.
  local fake=$work/build
  mkdir -p "$fake/server/tools" "$fake/bench/scale"
  ln -sf "$b/bin/feedd" "$fake/server/feedd"
  ln -sf "$b/bin/feed-gen-dataset" "$fake/server/tools/feed-gen-dataset"
  ln -sf "$b/bin/feed-scale-client" "$fake/bench/scale/feed-scale-client"
  mkdir -p "$out/steady"
  stamp "steady: 0.5x 1x 2x 4x of one server, ${STEADY_SECONDS:-20} s each"
  python3 "$b/scale/hpa_sim.py" "$out/steady" --build "$fake" --steady 0.5,1,2,4 \
    --steady-seconds "${STEADY_SECONDS:-20}" > "$out/steady/stdout.txt" 2>&1
  local rc=$?
  python3 - "$out/steady/steady.jsonl" "$rc" <<'PY' | tee -a "$out/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if sys.argv[2] == "0" else []
if not rows:
    print(f"steady: hpa_sim.py failed (status {sys.argv[2]}): see steady/stdout.txt")
    sys.exit()
print(f"steady: one server (1 worker thread), capacity {rows[0]['capacity_calibrated']:,.0f} samples/s")
print("demand  ideal  desired_servers  within 1  desired_servers_raw  job wait fraction")
for r in rows:
    ok = all(d is not None and abs(d - r["ideal"]) <= 1 for d in r["desired"])
    print(f"{r['multiple']:5g}x  {r['ideal']:5d}  {','.join(f'{d:g}' for d in r['desired']):>15}"
          f"  {'yes' if ok else 'NO':>8}  {min(r['raw']):.2f}-{max(r['raw']):.2f}{'':9}"
          f"  {min(r['wait']):.2f}-{max(r['wait']):.2f}")
PY
}

# tree SRC DST: every image of SRC listed REPEAT times in DST (as run_h2h.sh does).
tree() {
  [ -d "$2" ] || python3 - "$1" "$2" "${REPEAT:-167}" <<'PY'
import os, sys
src, dst, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
for c in sorted(os.listdir(src)):
    if os.path.isdir(os.path.join(src, c)):
        os.makedirs(os.path.join(dst + ".tmp", c))
        for f in os.listdir(os.path.join(src, c)):
            for r in range(repeat):
                os.symlink(os.path.join(src, c, f), os.path.join(dst + ".tmp", c, f"r{r}_{f}"))
os.rename(dst + ".tmp", dst)
PY
}

torch_one() { # torch_one W
  local w=$1 d=$out/torch-w$1 pid mport
  mkdir -p "$d"
  rm -f "$work/port" "$work/mport"
  taskset -c "2-$((1 + w))" "$b/bin/feedd" --listen 127.0.0.1:0 --port-file "$work/port" \
    --metrics-listen 127.0.0.1:0 --metrics-port-file "$work/mport" --threads "$w" \
    --dataset "orig=$work/orig" --log-level warn > "$d/feedd.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do [ -s "$work/port" ] && [ -s "$work/mport" ] && break; sleep 0.1; done
  mport=$(cat "$work/mport")
  # /metrics every 5 s, one JSON line each: {t, feedd_fleet_* samples}.
  python3 - "$mport" "$d/metrics.jsonl" <<'PY' &
import json, sys, time, urllib.request
port, path = sys.argv[1], sys.argv[2]
t0 = time.time()
while True:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        break
    m = {l.rpartition(" ")[0]: float(l.rpartition(" ")[2]) for l in text.splitlines()
         if l.startswith("feedd_fleet_")}
    m["t"] = round(time.time() - t0, 2)
    with open(path, "a") as f:
        f.write(json.dumps(m) + "\n")
    time.sleep(5)
PY
  local scraper=$!
  stamp "torch: resnet18, one feedd of $w workers on CPUs 2-$((1 + w))"
  taskset -c "${TRAIN_CPUS:-0-1}" python3 "$b/torch/headtohead.py" --label "r18-feed-w$w" \
    --source feedclient --model resnet18 --dataset orig --targets "127.0.0.1:$(cat "$work/port")" \
    --pids "$pid" --warmup "${WARMUP:-40}" --seconds "${SECONDS_PER:-10}" --windows "${WINDOWS:-3}" \
    --batch "${BATCH:-256}" --device "${DEVICE:-cuda:0}" --json "$d/h2h.jsonl" \
    > "$d/h2h.log" 2>&1
  local rc=$?
  # One more scrape after the last window (the scraper's last may be 5 s old).
  sleep 1
  kill "$scraper" 2>/dev/null
  wait "$scraper" 2>/dev/null
  python3 -c 'import json, sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
print(text)' "$mport" > "$d/metrics-end.txt" 2>&1
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  tail -2 "$d/h2h.log" >&2
  return $rc
}

torch_all() {
  mkdir -p "$work"
  tree "$b/data/tree" "$work/orig"
  local ws=${WORKERS_LIST:-4 12}
  for w in $ws; do torch_one "$w"; done
  python3 - "$out" "${WARMUP:-40}" $ws <<'PY' | tee -a "$out/summary.txt"
import json, os, statistics, sys
out, warmup, ws = sys.argv[1], float(sys.argv[2]), [int(w) for w in sys.argv[3:]]
print("torch: resnet18 through feedclient, one feedd of W workers (W cores), original JPEGs;")
print("metric = median over the scrapes after the warm-up; cores per GPU from the metric = desired x W")
print("W   img/s  GPU busy %  stream idle %  host cores  desired  raw    capacity/s  demand/s  wait  "
      "cores/GPU (desired x W)  (raw x W)")
for w in ws:
    d = os.path.join(out, f"torch-w{w}")
    try:
        wins = [json.loads(l) for l in open(os.path.join(d, "h2h.jsonl"))]
        ms = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    except OSError as e:
        print(f"{w:<3} no result ({e}): see {d}/h2h.log")
        continue
    ms = [m for m in ms if m["t"] >= warmup] or ms[-1:]
    def med(key, src=ms):
        v = [m[key] for m in src if m.get(key) is not None]
        return statistics.median(v) if v else float("nan")
    wait = med(next((k for k in ms[-1] if k.startswith("feedd_fleet_job_wait_fraction")), "none"))
    desired, raw = med("feedd_fleet_desired_servers"), med("feedd_fleet_desired_servers_raw")
    print(f"{w:<3} {med('img_per_s', wins):6,.0f}  {med('nvml_util_pct', wins):10.0f}  "
          f"{med('stream_idle_pct', wins):13.1f}  {med('host_cores', wins):11.1f}  {desired:7g}  "
          f"{raw:5.2f}  {med('feedd_fleet_capacity_samples_per_second'):10,.0f}  "
          f"{med('feedd_fleet_demand_samples_per_second'):8,.0f}  {wait:4.2f}  "
          f"{desired * w:23g}  {raw * w:9.1f}")
PY
}

case "$what" in
  steady) steady ;;
  torch) torch_all ;;
  all) steady; torch_all ;;
  *) echo "gpu_scale.sh: steady, torch or all" >&2; exit 2 ;;
esac
echo "== summary ($out/summary.txt)"
cat "$out/summary.txt"
