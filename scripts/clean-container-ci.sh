#!/usr/bin/env bash
# The CI step for a new user's first hour: in a clean Debian 12 container (a
# debootstrap minbase image, as root, nothing installed beyond it), the
# README's commands verbatim, as a user pastes them, read from README.md here
# (the blocks marked `<!-- clean-container-ci: NAME -->`), so the README and
# this check cannot drift apart: its main command (scripts/main.sh: installs
# the packages, builds into build-main/, runs feed-bench on the embedded
# dataset); "Serve a dataset" (scripts/deps.sh, the Release build into build/,
# feed-pack and feedd on the embedded dataset as /data/imagenet/train) with
# feed-bench and feed-client-probe against that feedd (HOST: 127.0.0.1); the
# Python install block. Then, in the venv the README made,
# `python3 -c 'import feedclient'` and 2 epochs over the embedded dataset
# (tests/python/installed_loop.py) through the installed package and feedd,
# from / so nothing of the checkout helps. Last, the package's pytest suite
# (ctest's python_feedclient) on the packages `scripts/deps.sh test` installs
# on a fresh machine: the host's packages differ (an OpenBLAS that a fresh
# install selects, the host did not have), and the Python suite is the part of
# the tests that depends on them. The C suites run on the host
# (scripts/test.sh); here they would double CI time.
#
# The source is the working tree as a fresh clone has it (tracked and
# untracked-but-not-ignored files, no build folders), copied in with tar.
#
# Measured here (2 cores shared with other builds): before the serving blocks
# and the Python suite, 546, 602 and 231 s; with them 1651 s on a loaded
# machine (main command 905 s, serving blocks 253, Python route 211, test
# packages and the Python suite 228). The phases' times are printed at the end. Bounded by CLEAN_CONTAINER_TIMEOUT seconds (default 2400). Needs rootful
# podman (scripts/deps.sh compose, set up as scripts/compose-ci.sh does) and
# Debian's mirrors from inside the container (apt-get, as the README does);
# skips, exit 0 and saying why, where podman cannot run containers. The base
# image is shared with deploy/compose-test.sh (made once, kept in podman's
# store); the container itself starts from it every time.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${CLEAN_CONTAINER_TIMEOUT:-2400}
base=docker.io/library/debian:bookworm-slim
skip() { echo "clean container: SKIPPED: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman)"
deps_log=$(mktemp "${TMPDIR:-/tmp}/clean-container-deps.XXXXXX.log")
scripts/deps.sh compose > "$deps_log" 2>&1 ||
  skip "could not install podman, runc, debootstrap: $(tail -n 1 "$deps_log")"
conf=/etc/containers/containers.conf
if [ ! -e "$conf" ]; then
  mkdir -p "$(dirname "$conf")"
  printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n[network]\nnetwork_backend = "netavark"\n' \
    > "$conf"
fi
if ! why=$(podman info 2>&1 > /dev/null); then
  skip "podman cannot run here: $(printf '%s\n' "$why" | tail -n 1)"
fi
if ! podman image exists "$base"; then
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$rootfs" > /dev/null
  tar -C "$rootfs" -c . | podman import - localhost/debian-base:bookworm > /dev/null 2>&1
  podman tag localhost/debian-base:bookworm "$base"
  rm -rf "$rootfs"
fi

# The README's and the user guide's (docs/guide/) blocks, each marked `<!-- clean-container-ci: NAME -->` on the line before
# its ```sh fence: block NAME prints its lines. The top block's main command (its
# scripts/test.sh line would double CI time; its Python suite runs below), "Serve a
# dataset" and the two client commands after it, the Python install block.
block() {
  awk -v m="<!-- clean-container-ci: $1 -->" '$0 == m {s = 1; next}
    s && /^```sh/ {f = 1; next} f && /^```/ {exit} f' README.md docs/guide/*.md
}
main_cmd=$(block main | grep '^scripts/main.sh' || true)
serve=$(block serve)
measure=$(block measure)
probe=$(block probe)
py_block=$(block python)
for b in main_cmd serve measure probe py_block; do
  [ -n "${!b}" ] || { echo "clean container: README's block for $b not found"; exit 1; }
done
venv=$(printf '%s\n' "$py_block" | sed -n 's/^python3 -m venv --system-site-packages \([^ ]*\).*/\1/p')
[ -n "$venv" ] || { echo "clean container: README's Python block makes no venv"; exit 1; }
# What the serving blocks leave to the reader: HOST is this container, and the feedd line
# serves until stopped, so it runs in the background while the client commands use it.
serve=$(printf '%s\n' "$serve" | sed 's|^build/server/feedd .*|& \&|')
measure=${measure//HOST/127.0.0.1}
probe=${probe//HOST/127.0.0.1}
echo "clean container: the README lines run:"
printf '%s\n' "$main_cmd" "$serve" "$measure" "$probe" "$py_block"

inner=$(cat <<EOF
set -euxo pipefail
t0=\$(date +%s)
phase() { echo "clean-container phase: \$1 at \$(( \$(date +%s) - t0 )) s"; }
mkdir /src && tar -x -C /src && cd /src
$main_cmd
phase "main command done"
# "Serve a dataset" reads its tree from /data/imagenet/train: the embedded dataset here.
mkdir -p /data/imagenet && ln -s /src/data/default /data/imagenet/train
$serve
feedd_pid=\$!
for i in \$(seq 120); do (exec 3<>/dev/tcp/127.0.0.1/7878) 2>/dev/null && break; sleep 1; done
$measure
$probe
kill -TERM \$feedd_pid && wait \$feedd_pid
phase "serving blocks done"
$py_block
cd /
. $venv/bin/activate
python3 -c 'import feedclient'
python3 /src/tests/python/installed_loop.py /usr/local/bin/feedd /src/data/default 2
deactivate
phase "Python route done"
# The package's pytest suite as scripts/test.sh runs it, on what a fresh machine gets from
# scripts/deps.sh test (which BLAS, say), over the "Serve a dataset" build and its two test tools.
cd /src
scripts/deps.sh test > /tmp/deps-test.log
update-alternatives --query libblas.so.3-x86_64-linux-gnu | grep '^Value:'
cmake -S . -B build -DFEED_BUILD_TESTS=ON > /tmp/reconfigure.log
cmake --build build -j"\$(nproc)" --target feed-augment-tool feed-abi-dump > /tmp/tools.log
cd build
ctest -V -R '^python_feedclient\$' --timeout 1200 > /tmp/pytest.log 2>&1 ||
  { tail -n 150 /tmp/pytest.log; exit 1; }
# pytest's summary line and its skips (-rs), so a suite that skipped shows.
grep -E '^[0-9]+: (SKIPPED|[0-9]+ (passed|failed))' /tmp/pytest.log | sed 's/^[0-9]*: /pytest: /' || true
phase "Python suite done"
EOF
)
log=$(mktemp "${TMPDIR:-/tmp}/clean-container.XXXXXX.log")
# A timeout kills the podman client, not the container: it is removed by name on the way out.
name=feed-clean-$$
trap 'podman rm -f "$name" > /dev/null 2>&1 || true' EXIT
start=$(date +%s)
rc=0
git ls-files -z --cached --others --exclude-standard |
  tar --null --ignore-failed-read -T - -c 2> /dev/null |
  timeout --kill-after=60 "$limit" podman run --rm -i --name "$name" --pull=never "$base" \
    bash -c "$inner" > "$log" 2>&1 || rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -ne 0 ]; then
  grep "^clean-container phase:" "$log" || true
  tail -n 80 "$log"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "clean container: FAILED: did not finish within ${limit} s" >&2
  else
    echo "clean container: FAILED (exit $rc after ${took} s; log $log)" >&2
  fi
  exit "$rc"
fi
grep "^installed_loop:\|^clean-container phase:\|^pytest:" "$log"
echo "clean container: passed in ${took} s (log $log)"
