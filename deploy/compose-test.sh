#!/usr/bin/env bash
# deploy/compose-test.sh: builds both images and runs deploy/compose.yaml's
# GPU-less route (service bench-cpu: feed-bench on plain Debian, no GPU
# reservation, CPU step) with podman, then checks that every source delivered
# batches. Needs root and the
# packages podman, runc, debootstrap, podman-compose; no image registry:
# the Debian base image is made locally once (debootstrap) and kept.
# See ../shared/notes/containers.md for why runc and no default ulimits.
set -euo pipefail
cd "$(dirname "$0")"
if ! podman image exists docker.io/library/debian:bookworm-slim; then
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$rootfs" > /dev/null
  tar -C "$rootfs" -c . | podman import - localhost/debian-base:bookworm
  podman tag localhost/debian-base:bookworm docker.io/library/debian:bookworm-slim
  rm -rf "$rootfs"
fi
export BENCH_SECONDS=${BENCH_SECONDS:-5}
rm -rf out && mkdir -p out
# Tagged by the sources' content (image-tag.sh), and compose.yaml runs that tag: never an
# image left by an earlier run or another checkout under "latest".
FEED_IMAGE_TAG=$(./image-tag.sh ..)
export FEED_IMAGE_TAG
echo "compose test: images tagged $FEED_IMAGE_TAG"
# Bounded store: per image, the 3 newest tags stay (a run of another checkout keeps its own).
for repo in localhost/feedd localhost/feed-bench-cpu; do
  podman images --filter "reference=$repo" --format '{{.CreatedAt}}	{{.Repository}}:{{.Tag}}' |
    sort -r | tail -n +4 | cut -f2 | xargs -r podman rmi > /dev/null 2>&1 || true
done
podman build --pull=never -q -f ../docker/feedd.Dockerfile -t "localhost/feedd:$FEED_IMAGE_TAG" ..
podman build --pull=never -q -f ../docker/bench.Dockerfile --build-arg BASE=debian:bookworm-slim \
  -t "localhost/feed-bench-cpu:$FEED_IMAGE_TAG" ..
# A project of this run's own: podman-compose 1.0.3 (Debian 12) ignores compose.yaml's `name:`
# and names containers after the folder (deploy_feedd-1_1), the same in every checkout, so
# two runs at once on one machine (CI and a developer, two worktrees) shared containers: one
# run's `down` removed the other's just created feedd-1 ("no container with name or ID
# deploy_feedd-1_1 found"), or its `create` failed on the name and it started the other's.
# Its network goes too: podman-compose's down leaves networks, one per run here.
project=feedd-test-$$
cleanup() {
  podman-compose -p "$project" -f compose.yaml down > /dev/null 2>&1 || true
  podman network rm -f "${project}_feed" > /dev/null 2>&1 || true
}
trap cleanup EXIT
# Naming bench-cpu starts it and the servers it depends on, not the GPU bench.
podman-compose -p "$project" -f compose.yaml up --no-build --exit-code-from bench-cpu bench-cpu \
  > out/compose.log 2>&1 || { tail -n 40 out/compose.log; exit 1; }
python3 - out/summary.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
runs = {r["source"]: r for r in s["runs"]}
for src in ("sync", "local", "remote"):
    r = runs.get(src)
    assert r and r["status"] == "ok" and r["images"] > 0, "source %s: %r" % (src, r)
    print("%-7s %8.1f images/s  (%s step)" % (src, r["images_per_s"], s["meta"]["device"]))
print("compose test: passed")
PY
