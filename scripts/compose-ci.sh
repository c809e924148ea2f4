#!/usr/bin/env bash
# The CI step for containers: deploy/compose-test.sh (both images, the
# GPU-less compose route, every source checked) with rootful podman, bounded
# by COMPOSE_TEST_TIMEOUT seconds (default 1800). Installs podman and its
# helpers (scripts/deps.sh compose) and, where no containers.conf exists yet,
# writes the settings ../shared/notes/containers.md found necessary (runc, no
# default ulimits) and netavark, whose aardvark-dns lets the containers find
# each other by service name (the CNI backend alone has no DNS). Skips, exit 0 and saying why, where podman cannot run
# containers (not root, packages not installable, no usable engine: CI inside
# an unprivileged container, say). The Debian base image that compose-test.sh
# makes with debootstrap stays in podman's store, so later runs on one
# machine reuse it and only rebuild the project's images.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${COMPOSE_TEST_TIMEOUT:-1800}
skip() { echo "compose test: SKIPPED: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman)"
scripts/deps.sh compose > /tmp/compose-ci-deps.log 2>&1 ||
  skip "could not install podman, runc, debootstrap, podman-compose: $(tail -n 1 /tmp/compose-ci-deps.log)"
conf=/etc/containers/containers.conf
if [ ! -e "$conf" ]; then
  mkdir -p "$(dirname "$conf")"
  printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n[network]\nnetwork_backend = "netavark"\n' \
    > "$conf"
fi
if ! why=$(podman info 2>&1 > /dev/null); then
  skip "podman cannot run here: $(printf '%s\n' "$why" | tail -n 1)"
fi
if podman image exists docker.io/library/debian:bookworm-slim; then
  echo "compose test: reusing the cached Debian base image"
fi
echo "compose test: deploy/compose-test.sh, at most ${limit} s"
rc=0
timeout --kill-after=60 "$limit" deploy/compose-test.sh || rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "compose test: FAILED: did not finish within ${limit} s" >&2
fi
exit "$rc"
