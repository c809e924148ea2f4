#!/usr/bin/env bash
# h2h_call.sh NAME CONFIG...: one call on the GPU machine of the PyTorch
# head-to-head, from the bundle (bench/make_gpu_bundle.sh puts this script in
# it as torch/h2h_call.sh): run_h2h.sh beside it runs CONFIG... into
# $OUT/NAME, with the checkout's commit (commit.txt) and the core count
# (nproc.txt), then packs $OUT/NAME.tgz so that a call cut off at its time
# limit still brings back one file. The environment goes to run_h2h.sh; the
# defaults here are those of the H200 passes: REPEAT 193, MAX_INFLIGHT 2,
# WARMUP 15, SECONDS_PER 60, WINDOWS 5. E.g.
#   WARMUP=10 gpu-bundle/torch/h2h_call.sh r18-synth r18-synth
#   REPEAT=295 CACHE_WARMUP=45 SECONDS_PER=30 gpu-bundle/torch/h2h_call.sh c2 r50-feed-recipe
set -u
here=$(cd "$(dirname "$0")" && pwd)
name=${1:?usage: h2h_call.sh NAME CONFIG...}
shift
[ $# -gt 0 ] || { echo "usage: h2h_call.sh NAME CONFIG..." >&2; exit 2; }
o=${OUT:?OUT: the folder to write into}/$name
mkdir -p "$o"
git -C "$here" rev-parse HEAD > "$o/commit.txt" 2>/dev/null
nproc > "$o/nproc.txt"
REPEAT=${REPEAT:-193} MAX_INFLIGHT=${MAX_INFLIGHT:-2} WARMUP=${WARMUP:-15} \
  SECONDS_PER=${SECONDS_PER:-60} WINDOWS=${WINDOWS:-5} bash "$here/run_h2h.sh" "$o" "$@"
rc=$?
tar czf "$OUT/$name.tgz" -C "$OUT" "$name"
exit $rc
