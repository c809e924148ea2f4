#!/usr/bin/env bash
# remote_tar.sh OUTDIR: the same tar shards served by feedd from local disk and
# from s3:// 20 ms away, on one host, after scripts/build.sh build (BUILD is
# relative to the repository root).
#   STORE=nginx (default): Debian's nginx-light (path-style GET and HEAD with
#     Range, sendfile; it does not check SigV4) behind feed-delay-proxy
#     (bench/remote/delay_proxy.c: holds every chunk 10 ms each way; one
#     thread, epoll): an object server that costs little CPU.
#   STORE=s3rver: @20minutes/s3rver (SigV4 checked) behind a TCP proxy adding
#     20 ms per round trip (tests/remote/servers.js --latency-ms 20; needs its
#     node modules: npm ci in tests/remote). It spends ~2.4 ms of CPU per ranged
#     GET, so on 2 cores it, not feedd, sets the pace.
# feedd's S3 client is the same against either: it signs every request (AWS
# SigV4), HEADs and GETs ranges with its connection pool and read-ahead.
#
# DATA (the ImageNet sample by default) as 10 shards of 100 written by
# feed-pack, with their .idx files. Two feedd processes, $THREADS worker
# threads each, dataset 'bench': one reads the local shards (page cache), one
# reads s3://feed-test/shard-{000000..000009}.tar with --remote-connections
# $CONN and --remote-readahead $RA. feed-wire-bench --mode preproc (every
# sample read, decoded and augmented to 224x224, indices sweep the dataset)
# measures each for $SECONDS_PER_RUN s after 3 s of warm-up; $ROUNDS rounds,
# order alternating by round (ABBA). Writes rtt.txt, pack.txt, wire.txt,
# wire.csv, cpu.csv (CPU seconds of feedd, the store and the proxy per run),
# feedd-s3.log and table.md (images/s, median and range, remote/local per
# round) into OUTDIR.
#
# PIN=1 (results in OUTDIR/pinned): feedd on CPU 0 only (THREADS=1 by
# default); the store, the proxy and feed-wire-bench on CPU 1: images/s per
# feedd core, local against remote, with the object store off feedd's core as
# it would be on another host.
# Environment: BUILD (build), DATA, STORE (nginx), PIN (0), CONN (32), RA (64M),
# THREADS (2), ROUNDS (5), SECONDS_PER_RUN (10), TMPDIR.
set -euo pipefail
out=$(mkdir -p "${1:?usage: remote_tar.sh OUTDIR}" && cd "$1" && pwd)
cd "$(dirname "$0")/../.."
b=${BUILD:-build}
data=${DATA:-/work/shared/datasets/imagenet-sample}
STORE=${STORE:-nginx}
case $STORE in nginx | s3rver) ;; *) echo "STORE: nginx or s3rver" >&2; exit 2 ;; esac
PIN=${PIN:-0}
feedd_cpu=()
other_cpu=()
if [ "$PIN" = 1 ]; then
  out=$out/pinned
  THREADS=${THREADS:-1}
  feedd_cpu=(taskset -c 0)
  other_cpu=(taskset -c 1)
fi
mkdir -p "$out"
CONN=${CONN:-32}
RA=${RA:-64M}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
tmp=${TMPDIR:-/tmp}/remote-bench
rm -rf "$tmp"
mkdir -p "$tmp/data"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  exec 3>&- 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

"$b/server/tools/feed-pack" "$data" "$tmp/data/shard" --format tar --shard-samples 100 \
  > "$out/pack.txt"
shards="shard-{000000..000009}.tar"

if [ "$STORE" = s3rver ]; then
  # The servers: S3 + latency proxy. Commands on fd 3; "ready ..." on its stdout.
  export FEED_TEST_S3_KEY=BENCHKEY FEED_TEST_S3_SECRET=bench-secret
  mkfifo "$tmp/ctl"
  ${other_cpu[@]+"${other_cpu[@]}"} node tests/remote/servers.js --data "$tmp/data" --bucket feed-test --latency-ms 20 \
    < "$tmp/ctl" > "$tmp/servers.out" 2> "$tmp/servers.err" &
  pids+=($!)
  exec 3> "$tmp/ctl"
  until grep -q '^ready' "$tmp/servers.out"; do
    kill -0 "${pids[0]}" || { cat "$tmp/servers.err"; exit 1; }
    sleep 0.2
  done
  s3=$(sed -n 's/.* s3=\([0-9]*\).*/\1/p' "$tmp/servers.out")
  latency=$(sed -n 's/.*latency=\([0-9]*\).*/\1/p' "$tmp/servers.out")
  store_pid=${pids[0]}
  latency_pid=$(pgrep -P "$store_pid" | head -1)
  store_name="S3 server + proxy"
else
  # The servers: nginx on a free port, the delay proxy in front of it.
  command -v nginx > /dev/null || { echo "nginx not installed (apt-get install nginx-light)"; exit 1; }
  mkdir -p "$tmp/www/feed-test" "$tmp/nginx"
  cp "$tmp"/data/shard-* "$tmp/www/feed-test/"
  nport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat > "$tmp/nginx/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  server {
    listen 127.0.0.1:$nport;
    root $tmp/www;
    location / { }
  }
}
CONF
  ${other_cpu[@]+"${other_cpu[@]}"} nginx -c "$tmp/nginx/nginx.conf" -p "$tmp/nginx" &
  pids+=($!)
  cc -O2 -Wall -Wextra -Werror -o "$tmp/feed-delay-proxy" bench/remote/delay_proxy.c
  ${other_cpu[@]+"${other_cpu[@]}"} "$tmp/feed-delay-proxy" --upstream "$nport" --rtt-ms 20 \
    --port-file "$tmp/proxy.port" > /dev/null &
  pids+=($!)
  until [ -s "$tmp/proxy.port" ] && curl -sf -o /dev/null -I "http://127.0.0.1:$nport/feed-test/shard-000000.tar"; do
    sleep 0.2
  done
  s3=$nport
  latency=$(cat "$tmp/proxy.port")
  store_pid=$(pgrep -P "$(cat "$tmp/nginx/nginx.pid")" | head -1)  # the worker
  latency_pid=${pids[1]}
  store_name="nginx + delay proxy"
fi

# The added round trip, as curl sees it: 5 HEADs direct and through the proxy.
for port in "$s3" "$latency"; do
  for i in 1 2 3 4 5; do
    curl -s -o /dev/null -I -w "$port %{time_connect} %{time_starttransfer}\n" \
      "http://127.0.0.1:$port/feed-test/shard-000000.tar.idx"
  done
done > "$out/rtt.txt"

start_feedd() { # NAME DATASET [ARGS...]
  local name=$1 ds=$2
  shift 2
  ${feedd_cpu[@]+"${feedd_cpu[@]}"} "$b/server/feedd" --listen 127.0.0.1:0 --port-file "$tmp/$name.port" --threads "$THREADS" \
    --dataset "bench=$ds" "$@" > "$tmp/$name.log" 2>&1 &
  pids+=($!)
  feedd_pid[$name]=$!
  until [ -s "$tmp/$name.port" ]; do sleep 0.2; done
}
declare -A feedd_pid
start_feedd local "$tmp/data/$shards"
AWS_ACCESS_KEY_ID=BENCHKEY AWS_SECRET_ACCESS_KEY=bench-secret \
  start_feedd s3 "s3://feed-test/$shards" --s3-endpoint "http://127.0.0.1:$latency" \
  --remote-connections "$CONN" --remote-readahead "$RA"
cat "$tmp"/data/*.tar > /dev/null

# CPU seconds (user + system) of a process and its children so far.
cpu_s() { awk '{printf "%.2f", ($14 + $15 + $16 + $17) / 100}' "/proc/$1/stat"; }
rm -f "$out/wire.csv" "$out/wire.txt"
echo "round,name,feedd_cpu_s,s3server_cpu_s,latency_proxy_cpu_s" > "$out/cpu.csv"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order=(local s3); else order=(s3 local); fi
  for name in "${order[@]}"; do
    port=$(cat "$tmp/$name.port")
    fpid=${feedd_pid[$name]}
    c0=("$(cpu_s "$fpid")" "$(cpu_s "$store_pid")" "$(cpu_s "$latency_pid")")
    echo "# round $round $name" >> "$out/wire.txt"
    ${other_cpu[@]+"${other_cpu[@]}"} "$b/bench/wire/feed-wire-bench" --target "127.0.0.1:${port##*:}" --mode preproc \
      --threads 2 --seconds "$SECONDS_PER_RUN" --warmup 3 --csv "$tmp/row.csv" \
      >> "$out/wire.txt"
    echo "$round,$name,$(tail -1 "$tmp/row.csv")" >> "$out/wire.csv"
    c1=("$(cpu_s "$fpid")" "$(cpu_s "$store_pid")" "$(cpu_s "$latency_pid")")
    echo "$round,$name,$(echo "${c1[0]} - ${c0[0]}" | bc),$(echo "${c1[1]} - ${c0[1]}" | bc),$(echo "${c1[2]} - ${c0[2]}" | bc)" >> "$out/cpu.csv"
  done
done
cp "$tmp/s3.log" "$out/feedd-s3.log"

python3 - "$out/wire.csv" "$CONN" "$RA" "$out/cpu.csv" "$SECONDS_PER_RUN" "$THREADS" "$store_name" > "$out/table.md" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
cpu = {(int(r["round"]), r["name"]): r for r in csv.DictReader(open(sys.argv[4]))}
secs = float(sys.argv[5]) + 3  # CPU is counted over warm-up and measurement
# round, name, mode, servers, threads, streams, batch, side, window, gbps, imgps, srv, cli
by = {}
for r in rows:
    by.setdefault(int(r[0]), {})[r[1]] = float(r[10])
local = [by[k]["local"] for k in sorted(by)]
s3 = [by[k]["s3"] for k in sorted(by)]
ratio = [s / l for s, l in zip(s3, local)]

def med(v, f="{:,.1f}"):
    return f"{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})"

print("| | images/s |")
print("| --- | ---: |")
print(f"| local shards | {med(local)} |")
print(f"| s3:// shards, +20 ms RTT | {med(s3)} |")
print(f"| s3 / local, per round | {med(ratio, '{:.3f}')} |")
feedd_ms = {n: [float(cpu[(k, n)]["feedd_cpu_s"]) * 1000 / (by[k][n] * secs) for k in sorted(by)]
            for n in ("local", "s3")}
store_share = [(float(cpu[(k, "s3")]["s3server_cpu_s"]) + float(cpu[(k, "s3")]["latency_proxy_cpu_s"]))
               / (float(cpu[(k, "s3")]["s3server_cpu_s"]) + float(cpu[(k, "s3")]["latency_proxy_cpu_s"])
                  + float(cpu[(k, "s3")]["feedd_cpu_s"])) for k in sorted(by)]
print(f"| feedd CPU ms per image, local | {med(feedd_ms['local'], '{:.2f}')} |")
print(f"| feedd CPU ms per image, s3 | {med(feedd_ms['s3'], '{:.2f}')} |")
print(f"| {sys.argv[7]} share of the CPU used in the s3 runs | {med(store_share, '{:.2f}')} |")
print()
print(f"median (range) of {len(ratio)} rounds; remote-connections {sys.argv[2]}, "
      f"remote-readahead {sys.argv[3]}; feedd {sys.argv[6]} worker thread(s); batch 64 at 224x224")
PY
cat "$out/rtt.txt" "$out/table.md"
