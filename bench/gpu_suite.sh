#!/usr/bin/env bash
# gpu_suite.sh OUTDIR — the whole starvation comparison on the GPU machine,
# run from a bundle made by bench/make_gpu_bundle.sh (this script sits in it).
#
# Layout on a 16-core host with one GPU:
#   CPUs 0-3   the "GPU host": the training process — its training thread, the
#              local source's 4 loader threads and libfeedclient's receivers —
#              limited to 4 cores, as a job gets on a busy shared 8-GPU node
#              (about 4 spare cores per GPU once other jobs' processes run);
#   CPUs 4-9, 10-15   two feedd servers, 6 worker threads each, pinned.
# For each model preset (GPU time per image of a real training step), runs
# sync, local and remote on the same data with the same seed, writes
# OUTDIR/<model>/{summary.csv,summary.json,batches.csv,nvml.csv,*.png,table.txt}
# and prints a short table of all of them last.
#
# Settings by environment: MODELS ("resnet50 resnet18 vit-b16"), SECONDS_PER
# (20), BATCH (256), LOADER_CPUS (0-3), LOCAL_THREADS (4), SERVER_CPUS
# (4-9:10-15), SERVERS (2), SERVER_THREADS (6), DATA (the bundle's pack),
# FEED_BENCH_ARGS (appended to every feed-bench call, e.g. "--unordered").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: gpu_suite.sh OUTDIR}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

models=${MODELS:-resnet50 resnet18 vit-b16}
seconds=${SECONDS_PER:-20}
batch=${BATCH:-256}
loader_cpus=${LOADER_CPUS:-0-3}
local_threads=${LOCAL_THREADS:-4}
server_cpus=${SERVER_CPUS:-4-9:10-15}
servers=${SERVERS:-2}
server_threads=${SERVER_THREADS:-6}
data=${DATA:-$here/data/imagenet-sample-400-x50.pack}

if [ "$(nproc --all)" -lt 16 ]; then
  echo "gpu_suite: this host has $(nproc --all) CPUs; set LOADER_CPUS/SERVER_CPUS to fit" >&2
fi
if [ ! -e "$data" ]; then
  data=$out/data-default
  [ -d "$data" ] || "$here/bin/feed-gen-dataset" "$data" --classes 100 --per-class 20
fi
{ nvidia-smi || true; nproc --all; uname -a; } > "$out/host.txt" 2>&1

for m in $models; do
  mkdir -p "$out/$m"
  taskset -c "$loader_cpus" "$here/bin/feed-bench" --device cuda --model "$m" --data "$data" \
    --out "$out/$m" --batch "$batch" --seconds "$seconds" --local-threads "$local_threads" \
    --spawn-servers "$servers" --server-threads "$server_threads" --server-cpus "$server_cpus" \
    --feedd "$here/bin/feedd" ${FEED_BENCH_ARGS:-} 2> "$out/$m/stderr.log" | tee "$out/$m/table.txt" ||
    echo "gpu_suite: feed-bench failed for $m (see $out/$m/stderr.log)" >&2
  python3 "$here/plot.py" "$out/$m" || echo "gpu_suite: plots for $m failed" >&2
done

python3 - "$out" $models <<'PY'
import json, sys, os
out, models = sys.argv[1], sys.argv[2:]
print("\n== feed-bench GPU suite: loader CPUs %s, local threads %s, servers %s ==" % (
    os.environ.get("LOADER_CPUS", "0-3"), os.environ.get("LOCAL_THREADS", "4"),
    os.environ.get("SERVER_CPUS", "4-9:10-15")))
print("%-9s %-7s %9s %7s %9s %9s %9s %9s %7s" % ("model", "source", "images/s", "x sync",
      "gpu busy", "nvml util", "wait p99", "wait max", "loader"))
for m in models:
    try:
        s = json.load(open(os.path.join(out, m, "summary.json")))
    except (OSError, ValueError) as e:
        print("%-9s no results (%s)" % (m, e)); continue
    sync = next((r["images_per_s"] for r in s["runs"] if r["source"] == "sync" and r["status"] == "ok"), 0)
    for r in s["runs"]:
        if r["status"] != "ok":
            print("%-9s %-7s FAILED %s" % (m, r["source"], r["error"])); continue
        util = "%.1f%%" % r["nvml_util_mean"] if r["nvml_util_mean"] is not None else "n/a"
        print("%-9s %-7s %9.0f %7s %8.1f%% %9s %7.2fms %7.2fms %7.2f" % (
            m, r["source"], r["images_per_s"], "%.2f" % (r["images_per_s"] / sync) if sync else "-",
            100 * r["gpu_busy"], util, r["wait_p99_ms"], r["wait_max_ms"], r["loader_cores"]))
PY
