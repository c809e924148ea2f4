#!/usr/bin/env bash
# fleet.sh OUTDIR — how many server cores keep K GPUs busy? K simulated GPU
# clients (feed-bench --device none: the step sleeps the model's measured GPU
# time per image, so one host holds many clients) run as ranks 0..K-1 of one
# job against S feedd servers of T worker threads, for each model step time
# and each data set; each client reports its images/s and the share of time
# its simulated GPU computed (busy). fleet_report.py turns OUTDIR/runs.jsonl
# into the table and the cores per GPU needed for every client >= 98% busy.
#
# Environment (defaults for a 2-core machine; the GPU machine's 16 cores take
# e.g. CLIENTS=4 SERVERS=2 THREADS="2 3 4 6" SERVER_CPUS="4-9:10-15"):
#   DATA     "NAME=PATH ..." data sets (ImageFolder trees or packs); default: a
#            generated tree and its re-encoded pack (feed-pack --max-side 400)
#   MODELS   "resnet18 resnet50 vit-b16"   CLIENTS K (2)   SERVERS S (1)
#   THREADS  worker threads per server to try ("1 2")
#   SERVER_CPUS  ':'-separated CPU list per server (unpinned when empty)
#   CLIENT_CPUS  CPU list for all the clients (unpinned when empty)
#   SECONDS_PER (8), WARMUP batches (3), BATCH (64), SIZE (224)
#   BIN      folder with feed-bench, feedd, feed-gen-dataset, feed-pack
#            (default: build/ of this checkout)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: fleet.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${BIN:-}
tool() { # name relpath-in-build
  if [ -n "$bin" ]; then echo "$bin/$1"; else echo "$root/build/$2"; fi
}
bench=$(tool feed-bench bench/e2e/feed-bench)
feedd=$(tool feedd server/feedd)
gen=$(tool feed-gen-dataset server/tools/feed-gen-dataset)
pack=$(tool feed-pack server/tools/feed-pack)
clients=${CLIENTS:-2} servers=${SERVERS:-1}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$work"' EXIT

data=${DATA:-}
if [ -z "$data" ]; then
  "$gen" "$work/tree" --classes 10 --per-class 40 > /dev/null
  "$pack" "$work/tree" "$work/reenc.pack" --max-side 400 --quality 90 --subsample 420 > /dev/null
  data="original=$work/tree reencoded=$work/reenc.pack"
fi

for d in $data; do
  dname=${d%%=*} dpath=${d#*=}
  for t in ${THREADS:-1 2}; do
    targets=() pids=()
    for ((s = 0; s < servers; s++)); do
      cpus=$(echo "${SERVER_CPUS:-}" | cut -d: -f$((s + 1)))
      pin=()
      [ -n "$cpus" ] && pin=(taskset -c "$cpus")
      rm -f "$work/port$s"
      "${pin[@]}" "$feedd" --listen 127.0.0.1:0 --port-file "$work/port$s" --threads "$t" \
        --dataset "fleet=$dpath" --log-level warn > "$out/feedd-$dname-$t-$s.log" 2>&1 &
      pids+=($!)
    done
    for ((s = 0; s < servers; s++)); do
      for _ in $(seq 300); do [ -s "$work/port$s" ] && break; sleep 0.1; done
      targets+=("127.0.0.1:$(cat "$work/port$s")")
    done
    list=$(IFS=,; echo "${targets[*]}")
    for m in ${MODELS:-resnet18 resnet50 vit-b16}; do
      tag=$dname-$m-s${servers}t$t-k$clients
      echo "== $(date -u +%T) $tag" >&2
      cpin=()
      [ -n "${CLIENT_CPUS:-}" ] && cpin=(taskset -c "$CLIENT_CPUS")
      for ((k = 0; k < clients; k++)); do
        "${cpin[@]}" "$bench" --device none --model "$m" --source remote --servers "$list" \
          --dataset fleet --data "$dpath" --rank "$k" --world "$clients" \
          --batch "${BATCH:-64}" --size "${SIZE:-224}" --seconds "${SECONDS_PER:-8}" \
          --warmup "${WARMUP:-3}" --out "$work/$tag-r$k" > "$out/$tag-r$k.log" 2>&1 &
      done
      wait $(jobs -p | grep -v -F -x -f <(printf '%s\n' "${pids[@]}")) 2> /dev/null
      python3 "$here/fleet_collect.py" "$work" "$tag" "$dname" "$m" "$servers" "$t" \
        "$clients" >> "$out/runs.jsonl"
    done
    kill "${pids[@]}" 2> /dev/null
    wait "${pids[@]}" 2> /dev/null
  done
done
python3 "$here/fleet_report.py" "$out/runs.jsonl" | tee "$out/fleet.md"
