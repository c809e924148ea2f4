#!/usr/bin/env bash
# run_pytest.sh BUILD_DIR SOURCE_DIR [SANITIZE]: installs the feedclient package
# with pip into a fresh virtual environment under BUILD_DIR (Debian's torch
# through the system site packages; no index, nothing downloaded) and runs its
# pytest suite against BUILD_DIR's libfeedclient and feedd.
set -euo pipefail
build=$1 src=$2 sanitize=${3:-OFF}
venv=$build/python-venv
rm -rf "$venv" "$build/python-pkg"
/usr/bin/python3 -m venv --system-site-packages "$venv"
# A copy, so pip's build leaves nothing in the source tree.
cp -r "$src/python" "$build/python-pkg"
"$venv/bin/pip" install --quiet --no-index --no-build-isolation --no-deps "$build/python-pkg"
export FEEDCLIENT_LIBRARY=$build/client/libfeedclient.so
export FEED_BUILD_DIR=$build
cd "$src/tests/python"
if [ "$sanitize" = ON ]; then
  # The library is instrumented, the interpreter is not: the runtimes come first, and leak
  # checking is off (CPython and torch keep memory until exit by design).
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0
fi
# Its own temp root: pytest prunes all but the newest 3 under /tmp/pytest-of-USER, which
# removed a live run's datasets when other pytest runs shared the machine.
exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider --basetemp "$build/pytest-tmp" .
