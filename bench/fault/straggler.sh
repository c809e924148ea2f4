#!/usr/bin/env bash
# straggler.sh OUTDIR — issue 11's straggler, in real processes: three feedd of
# one worker each on 127.0.0.1 (port 0), one of them throttled by a SIGSTOP/
# SIGCONT duty cycle that this script plays or by a CPU quota, against the
# two healthy servers alone, side by side in one run: for each window and each
# round, the client (feed-client-probe, host delivery, uint8 NHWC) takes
# BATCHES batches from
#   healthy2   the two healthy servers alone
#   stop90     all three, the third stopped 90 ms of every 100 ms
#   stop95     all three, the third stopped 95 ms of every 100 ms
#   quota10    all three, the third in a cgroup of its own with a CPU quota
#              of a tenth of a core (10 ms of every 100 ms; cgroup v1's
#              cpu.cfs_quota_us or v2's cpu.max; needs root)
# once with each client binary named in PROBES, in the order of CASES every
# round.
# Every run's output is OUTDIR/<probe>-w<window>-<case>-r<round>.txt; the
# summary (median and range of img/s over the rounds, and the ratio of each
# throttled case to healthy2 of the same client and window) is
# OUTDIR/summary.md.
#
# Environment:
#   PROBES   "NAME=PATH ..." client binaries (default: after=build/ of this
#            checkout's feed-client-probe)
#   FEEDD    the server (default build/server/feedd)
#   DATA     an ImageFolder tree or pack (default the shared ImageNet sample)
#   WINDOWS  "4 16"   ROUNDS 5   BATCHES 240   BATCH 16   SIZE 224
#   CASES    "healthy2 stop90 stop95" (and quota10)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: straggler.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
probes=${PROBES:-after=$root/build/client/feed-client-probe}
feedd=${FEEDD:-$root/build/server/feedd}
data=${DATA:-/work/shared/datasets/imagenet-sample}
windows=${WINDOWS:-4 16}
rounds=${ROUNDS:-5} batches=${BATCHES:-240} batch=${BATCH:-16} size=${SIZE:-224}
cases=${CASES:-healthy2 stop90 stop95}
work=$(mktemp -d)
cg_root= cg=
pids=()
throttler=
stop_throttle() {
  if [ -n "$throttler" ]; then
    kill "$throttler" 2> /dev/null
    wait "$throttler" 2> /dev/null
    throttler=
  fi
  kill -CONT "${pids[2]}" 2> /dev/null
  [ -n "$cg" ] && echo "${pids[2]}" > "$cg_root/cgroup.procs"
}
cleanup() {
  stop_throttle
  [ -n "$cg" ] && rmdir "$cg" 2> /dev/null
  kill "${pids[@]}" 2> /dev/null
  wait 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT

ports=()
for s in 0 1 2; do
  "$feedd" --listen 127.0.0.1:0 --port-file "$work/port$s" --threads 1 \
    --dataset "bench=$data" --log-level warn > "$out/feedd-$s.log" 2>&1 &
  pids+=($!)
done
for s in 0 1 2; do
  for _ in $(seq 300); do [ -s "$work/port$s" ] && break; sleep 0.1; done
  [ -s "$work/port$s" ] || { echo "feedd $s did not start" >&2; exit 1; }
  ports+=("$(cat "$work/port$s")")
done

# throttle STOPPED_MS: the third server is stopped that many ms of every 100.
throttle() {
  local pid=${pids[2]} stopped running
  stopped=$(printf '0.%03d' "$1")
  running=$(printf '0.%03d' $((100 - $1)))
  (
    trap 'kill -CONT '"$pid"'; exit 0' TERM
    while :; do
      kill -STOP "$pid"
      sleep "$stopped"
      kill -CONT "$pid"
      sleep "$running"
    done
  ) &
  throttler=$!
}

# quota PERCENT: the third server limited to PERCENT of one core, in a
# cgroup of its own (made on first use, removed at exit).
quota() {
  local pid=${pids[2]}
  if [ -z "$cg" ]; then
    if [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
      cg_root=/sys/fs/cgroup/cpu
    elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2> /dev/null; then
      cg_root=/sys/fs/cgroup
      echo +cpu > "$cg_root/cgroup.subtree_control" 2> /dev/null
    else
      echo "straggler.sh: no writable cgroup cpu controller for $c" >&2
      exit 1
    fi
    cg=$cg_root/feedd-straggler-$$
    mkdir "$cg" || exit 1
    if [ -e "$cg/cpu.max" ]; then
      echo "$(($1 * 1000)) 100000" > "$cg/cpu.max"
    else
      echo 100000 > "$cg/cpu.cfs_period_us"
      echo $(($1 * 1000)) > "$cg/cpu.cfs_quota_us"
    fi
  fi
  echo "$pid" > "$cg/cgroup.procs"
}

{
  echo "# straggler.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores"
  echo "# data $data, batch $batch, size $size, $batches batches a run, $rounds rounds"
  echo "# probes: $probes"
  echo "# feedd: $feedd, ports ${ports[*]}"
} > "$out/runs.tsv"
echo -e "probe\twindow\tcase\tround\timg_per_s" >> "$out/runs.tsv"

for w in $windows; do
  for ((r = 0; r < rounds; r++)); do
    for p in $probes; do
      pname=${p%%=*} ppath=${p#*=}
      for c in $cases; do
        targets=(--target "127.0.0.1:${ports[0]}" --target "127.0.0.1:${ports[1]}")
        case $c in
        stop90) throttle 90 ;;
        stop95) throttle 95 ;;
        quota10) quota 10 ;;
        esac
        [ "$c" = healthy2 ] || targets+=(--target "127.0.0.1:${ports[2]}")
        f="$out/$pname-w$w-$c-r$r.txt"
        echo "$ppath ${targets[*]} --dataset bench --batch $batch --size $size" \
          "--batches $batches --window $w --dtype u8 --layout nhwc" > "$f"
        "$ppath" "${targets[@]}" --dataset bench --batch "$batch" --size "$size" \
          --batches "$batches" --window "$w" --dtype u8 --layout nhwc >> "$f" 2>&1
        # The quota's proof: the cgroup's throttling counters so far.
        [ "$c" = quota10 ] && sed 's/^/# cgroup cpu.stat: /' "$cg/cpu.stat" >> "$f"
        stop_throttle
        rate=$(awk '/img\/s/ {for (i = 1; i <= NF; i++) if ($i == "img/s") print $(i - 1)}' "$f")
        echo -e "$pname\t$w\t$c\t$r\t${rate:-NA}" >> "$out/runs.tsv"
      done
    done
  done
done

python3 - "$out/runs.tsv" > "$out/summary.md" << 'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith("#")][1:]
runs = {}
for probe, w, case, _, rate in rows:
    if rate != "NA":
        runs.setdefault((probe, int(w), case), []).append(float(rate))
print("| client | window | case | img/s median (min-max) | runs | vs healthy2 |")
print("| --- | ---: | --- | --- | ---: | ---: |")
for (probe, w, case), v in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    med = statistics.median(v)
    base = runs.get((probe, w, "healthy2"))
    ratio = f"{med / statistics.median(base):.2f}" if base else ""
    print(f"| {probe} | {w} | {case} | {med:.0f} ({min(v):.0f}-{max(v):.0f}) | {len(v)} | {ratio} |")
EOF
cat "$out/summary.md"
