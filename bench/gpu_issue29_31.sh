#!/usr/bin/env bash
# gpu_issue29_31.sh MODE ... — issues 29 to 32 on the GPU machine, one device
# call per mode (each under 9 minutes), from one bundle (copied into it as
# run_all.sh). Every mode writes under OUT and prints a short table last.
#
#   prep BUNDLE HEAD_BUILD BASE_BUILD   (here, not on the GPU machine; BASE_BUILD -:
#         no BASE, for calls without the wire and torch modes)
#         the bundle: LEAN=1 bench/make_gpu_bundle.sh of HEAD_BUILD (a Release
#         build with CUDA) with DATA_CLASSES (160) classes of
#         FEED_SAMPLE_DIR, plus BASE_BUILD's feedd and feed-wire-bench in
#         base/, wire/ab.sh and ab_gpu.sh, bin/feed-scale-client,
#         scale/hpa_sim.py and gpu_scale.sh, and this script as run_all.sh;
#         checks that BASE's libraries are in lib/ and prints the size. With
#         TESTS_BUILD (a tests-on CUDA build), also test_client_gpu, _gpujpeg and
#         _lane_gpu with libcmocka (run them with LD_LIBRARY_PATH=BUNDLE/lib,
#         FEED_FEEDD=BUNDLE/bin/feedd, FEED_SAMPLE_DIR=BUNDLE/data/tree).
#   wire OUT    issue 29: feed-wire-bench BASE vs HEAD, ab_gpu.sh wire, ROUNDS
#         (5) ABBA rounds, modes preproc and cache, 4 threads, 4 streams.
#         Time: per run about 2 x (1 s warm-up + 5 s window + start and cache
#         fill, ~3 s) = ~18 s; 4 runs a round: ~72 s a round, ~6 min for 5.
#   torch1 OUT / torch2 OUT    issue 29: resnet18 (run_h2h.sh r18-feed-reenc:
#         two feedd of 7 workers) with BASE's feedd vs HEAD's, ab_gpu.sh torch,
#         rounds 1-3 (torch1) and 4-5 (torch2), order alternating by round.
#         Time: per run ~15 s to start python, torch and the model + 8 s
#         warm-up + 15 s window + ~5 s to stop = ~45 s; 2 runs a round; torch1
#         ~4.5 min (plus ~10 s to re-encode the originals once), torch2 ~3 min.
#         (All 5 rounds in one call would be ~7.5 min: too close to 9.)
#   share OUT   issue 30: bench/fault/share.py (four jobs of a sweep on one feedd of
#         THREADS (8) workers: decode shared vs unshared, ROUNDS (5) rounds, then
#         the same four on a warm decoded cache against one job alone) on the
#         bundle's original JPEGs, each listed REPEAT (20) times (3,200 files).
#         Time: per round ~2 x (3 s to start the jobs + 2-8 s) ~20 s; ~3 min.
#   gputests OUT   the GPU tests (gpu_suite.sh's client stage: test_client_gpu,
#         test_client_gpujpeg, test_client_lane_gpu; a bundle prepared with TESTS_BUILD).
#   lanebench OUT  issue 32 in feed-bench: its resnet18 step fed by two spawned feedd
#         of 6 workers (4-9, 10-15; feed-bench on 0-3), the lane off and, for each
#         SHARE:THREADS of LANEBENCH ("off 0.3:2 0.4:3"), on the GPU's JPEG engines;
#         LANEBENCH_SECONDS (10) a run. Needs bin/feed-bench (not LEAN's removal).
#   scale OUT   issue 31: bench/scale/gpu_scale.sh all: the steady-state
#         desired size at 0.5x/1x/2x/4x (~2 min: calibration ~10 s, 4 x (20 s
#         + ~3 s drain)) and resnet18 against one feedd of 4 and of 12 workers
#         with the desired-size metric (~100 s each + 10 s tree): ~6 min. SCALE_WHAT
#         (all) picks steady or torch alone.
#   lane OUT    issue 32: resnet18 on the original JPEGs, no cache, two feedd of 6
#         workers on 12 cores (4-9, 10-15; training on 0-3), with feedclient's decode
#         lane off and at each share of SHARES ("0.3 0.5 adapt"; adapt: from 0.25,
#         adapted between epochs up to 1; SHARE:T runs it on T lane threads, else
#         LANE_THREADS, 0: the loader's 2) on the GPU's JPEG engines (run_h2h.sh
#         r18-feed-orig / r18-feed-orig-lane), ROUNDS (2) rounds in that order; per run
#         the images/s, GPU busy (100 - stream idle %), the step's own GPU time
#         (median) and the ratios to the lane off in the same round; the lane's
#         decisions are in each run's h2h.log; LANE_CEILING=1 first runs r18-synth (batches
#         already on the GPU: the step's ceiling). Time: ~45 s a run, 4 a round: ~6 min.
#
# On the GPU machine, from the repository root with the bundle carried:
#   bash gpu-bundle/run_all.sh wire "$OUT"
set -uo pipefail
mode=${1:?usage: gpu_issue29_31.sh prep BUNDLE HEAD_BUILD BASE_BUILD | wire|torch1|torch2|share|lane|scale OUT}
here=$(cd "$(dirname "$0")" && pwd)

prep() {
  local dir=$1 head base="" root checked=()
  head=$(cd "$2" && pwd)
  [ "$3" != - ] && base=$(cd "$3" && pwd)
  root=$(cd "$here/.." && pwd)
  LEAN=1 FEED_SAMPLE_DIR=${FEED_SAMPLE_DIR:-/work/shared/datasets/imagenet-sample} \
    DATA_CLASSES=${DATA_CLASSES:-160} "$root/bench/make_gpu_bundle.sh" "$dir" "$head" || return 1
  mkdir -p "$dir/wire" "$dir/scale"
  if [ -n "$base" ]; then
    mkdir -p "$dir/base/server" "$dir/base/bench/wire"
    cp -L "$base/server/feedd" "$dir/base/server/feedd"
    cp -L "$base/bench/wire/feed-wire-bench" "$dir/base/bench/wire/feed-wire-bench"
    strip --strip-debug "$dir/base/server/feedd" "$dir/base/bench/wire/feed-wire-bench"
    checked=("$dir/base/server/feedd" "$dir/base/bench/wire/feed-wire-bench")
  fi
  cp -L "$head/bench/scale/feed-scale-client" "$dir/bin/"
  strip --strip-debug "$dir/bin/feed-scale-client"
  # Room for the GPU tests in the 64 MiB a call carries: no tool these modes leave unused, and
  # no symbol tables. feed-scale-client's libfeedclient.so.0 is made a link on the GPU machine.
  rm -f "$dir/bin/feed-client-probe" "$dir/bin/feed-engine-split" "$dir/bin/feed-preproc-bench" \
    "$dir/bin/feed-pack"
  cp "$root/bench/wire/ab.sh" "$root/bench/wire/ab_gpu.sh" "$dir/wire/"
  cp "$root/bench/scale/hpa_sim.py" "$root/bench/scale/gpu_scale.sh" "$dir/scale/"
  mkdir -p "$dir/share"
  cp "$root/bench/fault/share.py" "$root/bench/fault/share_table.py" "$dir/share/"
  cp "$root/bench/gpu_issue29_31.sh" "$dir/run_all.sh"
  # TESTS_BUILD (a tests-on build with CUDA): the GPU tests and the libraries they need
  # beyond the bundle's (cmocka).
  if [ -n "${TESTS_BUILD:-}" ]; then
    for t in test_client_gpu test_client_gpujpeg test_client_lane_gpu; do
      cp -L "$TESTS_BUILD/tests/client/$t" "$dir/bin/" && strip --strip-debug "$dir/bin/$t"
    done
    cp -L "$(ldd "$dir/bin/test_client_gpu" | awk '/libcmocka/{print $3}')" "$dir/lib/"
  fi
  strip -s "$dir"/bin/*
  strip --strip-unneeded "$dir/lib/libfeedclient.so"
  local missing=0 lib
  for f in "${checked[@]}"; do
    for lib in $(ldd "$f" | awk '/=> \//{print $3}'); do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*) continue ;;
        libstdc++.so*|libgcc_s.so*) continue ;;
        libcuda.so*|libcudart*|libcublas*|libnvidia-ml*|libnvrtc*|libnvJitLink*) continue ;;
      esac
      if ! cmp -s "$lib" "$dir/lib/$(basename "$lib")"; then
        echo "prep: $(basename "$f") needs $lib, not (the same) in $dir/lib" >&2
        missing=1
      fi
    done
  done
  [ "$missing" = 0 ] && echo "prep: every library BASE's binaries need is in $dir/lib"
  du -sh "$dir"
  return "$missing"
}

# torch_table OUT: BASE vs HEAD images/s per round from ab_gpu.sh torch's runs.
torch_table() {
  python3 - "$1/torch" <<'PY'
import glob, json, os, re, statistics, sys
d = sys.argv[1]
runs = {}
for p in glob.glob(os.path.join(d, "*-r*", "h2h.jsonl")):
    v, r = re.match(r"(base|head)-r(\d+)$", os.path.basename(os.path.dirname(p))).groups()
    wins = [json.loads(l) for l in open(p)]
    if wins:
        runs.setdefault(int(r), {})[v] = (statistics.median(w["img_per_s"] for w in wins),
                                          statistics.median(w.get("nvml_util_pct") or 0 for w in wins))
print("round  BASE img/s (GPU %)  HEAD img/s (GPU %)  HEAD/BASE")
ratios = []
for r in sorted(runs):
    b, h = runs[r].get("base"), runs[r].get("head")
    ratio = h[0] / b[0] if b and h else None
    if ratio:
        ratios.append(ratio)
    fmt = lambda x: f"{x[0]:8,.0f} ({x[1]:3.0f})" if x else f"{'-':>14}"
    print(f"{r:5d}  {fmt(b):>18}  {fmt(h):>18}  {ratio if ratio else float('nan'):9.3f}")
if ratios:
    print(f"HEAD/BASE median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})"
          f" over {len(ratios)} rounds of this call")
PY
}

# lane_table OUT: per round and share, images/s, GPU busy and step time against the lane off.
lane_table() {
  python3 - "$1" <<'PY'
import glob, json, os, re, statistics, sys
runs = {}
for p in glob.glob(os.path.join(sys.argv[1], "r*-s*", "h2h.jsonl")):
    r, s = re.match(r"r(\d+)-s(.+)$", os.path.basename(os.path.dirname(p))).groups()
    wins = [json.loads(l) for l in open(p)]
    if wins:
        med = lambda k: statistics.median(w.get(k) or 0 for w in wins)
        runs.setdefault(s, {})[int(r)] = (med("img_per_s"), 100 - med("stream_idle_pct"),
                                          med("step_p50_ms"))
print("share:threads  round  img/s  GPU busy %  step ms  img/s vs off  step vs off")
def order(k):
    share = k.split(":")[0]
    return (share == "adapt", float(share) if share != "adapt" else 0, k)
for s in sorted(runs, key=order):
    for r in sorted(runs[s]):
        v, off = runs[s][r], runs.get("0", {}).get(r)
        ri = f"{v[0] / off[0]:.3f}" if off and off[0] else "-"
        rs = f"{v[2] / off[2]:.3f}" if off and off[2] else "-"
        print(f"{s:>7}  {r:5d}  {v[0]:6,.0f}  {v[1]:10.1f}  {v[2]:7.2f}  {ri:>12}  {rs:>11}")
PY
}

# repeat_tree: $tree, the bundle's original JPEGs each listed REPEAT (20) times (symbolic links).
repeat_tree() {
  tree=/tmp/feedd-share-tree
  [ -d "$tree" ] || python3 - "$here/data/tree" "$tree" "${REPEAT:-20}" <<'PY'
import os, sys
src, dst, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
for c in sorted(os.listdir(src)):
    os.makedirs(os.path.join(dst, c))
    for f in os.listdir(os.path.join(src, c)):
        for r in range(repeat):
            os.symlink(os.path.join(src, c, f), os.path.join(dst, c, f"r{r}_{f}"))
PY
}

[ "$mode" != prep ] && mkdir -p "${2:?OUT}"
case "$mode" in
  prep) prep "${2:?BUNDLE}" "${3:?HEAD_BUILD}" "${4:?BASE_BUILD}" ;;
  wire)
    out=${2:?OUT}
    bash "$here/wire/ab_gpu.sh" "$here" "$out" wire "${ROUNDS:-5}" > "$out/wire.log" 2>&1
    echo "== issue 29, feed-wire-bench BASE vs HEAD (log: $out/wire.log)"
    cat "$out/wire/summary.txt" ;;
  torch1|torch2)
    out=${2:?OUT}
    first=1 last=3
    [ "$mode" = torch2 ] && first=4 last=5
    FIRST_ROUND=${FIRST_ROUND:-$first} bash "$here/wire/ab_gpu.sh" "$here" "$out" torch \
      "${ROUNDS:-$last}" 2>&1 | tee "$out/torch.log"
    echo "== issue 29, resnet18 with BASE's feedd vs HEAD's (r18-feed-reenc)"
    torch_table "$out" | tee "$out/torch-summary.txt" ;;
  share)
    out=${2:?OUT}
    repeat_tree
    export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PYTHONPATH="$here/python" FEEDCLIENT_LIBRARY="$here/lib/libfeedclient.so"
    python3 "$here/share/share.py" --feedd "$here/bin/feedd" --data "$tree" \
      --rounds "${ROUNDS:-5}" --threads "${THREADS:-8}" --side 256 --size 224 \
      --json "$out/runs.jsonl" > "$out/share.log" 2>&1
    echo "== issue 30, decode shared vs unshared, four jobs, feedd --threads ${THREADS:-8} (log: $out/share.log)"
    python3 "$here/share/share_table.py" "$out/runs.jsonl" | tee "$out/table.md" ;;
  lane)
    out=${2:?OUT}
    if [ -n "${LANE_CEILING:-}" ]; then # the synthetic ceiling: batches already on the GPU
      TRAIN_CPUS=0-3 WARMUP=8 SECONDS_PER=15 WINDOWS=1 \
        bash "$here/torch/run_h2h.sh" "$out/ceiling" r18-synth > "$out/ceiling.log" 2>&1
      tail -1 "$out/ceiling.log"
    fi
    for r in $(seq 1 "${ROUNDS:-2}"); do
      for share in 0 ${SHARES:-0.3 0.5 adapt}; do
        threads=${LANE_THREADS:-0}
        case $share in *:*) threads=${share#*:} ;; esac
        cfg=r18-feed-orig-lane start=${share%%:*} max=0
        [ "$share" = 0 ] && cfg=r18-feed-orig
        [ "$start" = adapt ] && start=0.25 max=1.0
        echo "== $(date -u +%T) round $r share $share" >&2
        DECODE_SHARE=$start DECODE_SHARE_MAX=$max DECODE_LANE_THREADS=$threads \
          SERVER_CPUS="4-9 10-15" SERVER_THREADS=6 TRAIN_CPUS=0-3 \
          WARMUP=8 SECONDS_PER=15 WINDOWS=1 \
          bash "$here/torch/run_h2h.sh" "$out/r$r-s$share" "$cfg" > "$out/r$r-s$share.log" 2>&1
        tail -2 "$out/r$r-s$share.log"
      done
    done
    echo "== issue 32, resnet18 cold on 12 feedd cores, decode lane off vs on"
    lane_table "$out" | tee "$out/lane-summary.txt" ;;
  gputests)
    out=${2:?OUT}
    bash "$here/gpu_suite.sh" "$out" client
    for t in test_client_gpu test_client_gpujpeg test_client_lane_gpu; do
      echo "== $t: $(tail -n 1 "$out/client/$t.txt") $(grep -E 'PASSED|FAILED|SKIPPED' "$out/client/$t.txt" | tr '\n' ' ')"
    done ;;
  lanebench)
    out=${2:?OUT}
    repeat_tree
    export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # feed-bench's own mode: its resnet18 step (a synthetic GPU step of the preset's time per
    # image) fed by two spawned feedd of 6 workers, lane off and on the GPU's JPEG engines.
    for run in ${LANEBENCH:-off 0.3:2 0.4:3}; do
      lane=()
      [ "$run" != off ] && lane=(--decode-lane gpu --decode-share "${run%%:*}"
                                 --decode-lane-threads "${run#*:}")
      taskset -c 0-3 "$here/bin/feed-bench" --device cuda --model resnet18 --source remote \
        --data "$tree" --spawn-servers 2 --server-threads 6 --server-cpus 4-9:10-15 \
        --feedd "$here/bin/feedd" --seconds "${LANEBENCH_SECONDS:-10}" --warmup 20 \
        --out "$out/lanebench-$run" "${lane[@]}" > "$out/lanebench-$run.log" 2>&1
      echo "== feed-bench lane $run (rc $?)"
      grep -A3 "^source" "$out/lanebench-$run.log" | tail -2
      grep "decode lane" "$out/lanebench-$run.log"
    done ;;
  scale)
    out=${2:?OUT}
    ln -sf libfeedclient.so "$here/lib/libfeedclient.so.0" # feed-scale-client's soname
    bash "$here/scale/gpu_scale.sh" "$here" "$out/scale" "${SCALE_WHAT:-all}" ;;
  *) echo "gpu_issue29_31.sh: prep, wire, torch1, torch2, share, lane or scale" >&2; exit 2 ;;
esac
