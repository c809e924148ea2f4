#!/bin/sh
# ctest client_install: `cmake --install` libfeedclient into a temp prefix,
# build consumer.c with `pkg-config --cflags --libs feedclient` and with
# find_package(feedclient), run both, and check the library exports only the
# feed_ API. Both run without LD_LIBRARY_PATH, linked as the README says for a
# custom prefix: pkg-config's libdir as rpath; CMake's build-tree rpath.
# Then every component (feedd, the tools) into another prefix, each binary run
# from there; and the Python package as the README installs it (a venv with
# the system site packages, pip install of python/, libfeedclient installed
# into the venv's prefix): imported with no FEEDCLIENT_LIBRARY, it loads the
# installed library and runs 2 epochs against the installed feedd
# (tests/python/installed_loop.py). That part is skipped under the sanitizers
# (an instrumented library in an uninstrumented interpreter needs LD_PRELOAD;
# the plain build covers it).
# Args: BUILD_DIR CONSUMER_DIR C_COMPILER [SANITIZE=ON|OFF]
set -eu
build=$1
src=$2
cc=$3
san=${4:-OFF}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/feedclient-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
extra=""
if [ "$san" = ON ]; then
    extra="-fsanitize=address,undefined"
fi

cmake --install "$build" --prefix "$tmp/prefix" --component feedclient >/dev/null
pc=$(find "$tmp/prefix" -name feedclient.pc | head -n 1)
[ -n "$pc" ] || { echo "feedclient.pc not installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
libdir=$(pkg-config --variable=libdir feedclient)

# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror $extra -o "$tmp/consumer" "$src/consumer.c" \
    $(pkg-config --cflags --libs feedclient) -Wl,-rpath,"$libdir"
env -u LD_LIBRARY_PATH "$tmp/consumer"

exported=$(nm -D --defined-only "$libdir/libfeedclient.so" | awk '{print $3}')
others=$(printf '%s\n' "$exported" | grep -v '^feed_' | grep -v '^_init$' | grep -v '^_fini$' || true)
if [ -n "$others" ]; then
    echo "libfeedclient.so exports non-API symbols:"; printf '%s\n' "$others" | head -20
    exit 1
fi
if printf '%s\n' "$exported" | grep -q '^feed__v1'; then
    echo "libfeedclient.so exports protobuf-c symbols"; exit 1
fi
printf '%s\n' "$exported" | grep -q '^feed_loader_open$' || { echo "feed_loader_open not exported"; exit 1; }

cmake -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_C_FLAGS="$extra" >/dev/null
cmake --build "$tmp/cm" >/dev/null
env -u LD_LIBRARY_PATH "$tmp/cm/consumer"

cmake --install "$build" --prefix "$tmp/all" >/dev/null
for tool in feedd feed-gen-dataset feed-pack feed-client-probe feed-bench; do
    [ -x "$tmp/all/bin/$tool" ] || { echo "$tool not installed in bin/"; exit 1; }
done
env -u LD_LIBRARY_PATH "$tmp/all/bin/feedd" --version >/dev/null
env -u LD_LIBRARY_PATH "$tmp/all/bin/feed-bench" --help >/dev/null
"$tmp/all/bin/feed-gen-dataset" "$tmp/data" --classes 3 --per-class 11 --seed 4 >/dev/null
echo "client_install: pkg-config and find_package consumers built and ran; feedd and the tools installed"

if [ "$san" = ON ]; then
    echo "client_install: the Python part is skipped under the sanitizers (see the header)"
    exit 0
fi
repo=$(cd "$src/../../.." && pwd)
venv=$tmp/venv
/usr/bin/python3 -m venv --system-site-packages "$venv"
cp -r "$repo/python" "$tmp/python"
"$venv/bin/pip" install --quiet --no-index --no-build-isolation --no-deps "$tmp/python"
cmake --install "$build" --prefix "$venv" --component feedclient >/dev/null
# From a folder outside the checkout: the package must not find the build tree.
(cd "$tmp" && env -u FEEDCLIENT_LIBRARY -u LD_LIBRARY_PATH "$venv/bin/python" \
    "$repo/tests/python/installed_loop.py" "$tmp/all/bin/feedd" "$tmp/data" 2) | tee "$tmp/loop.out"
grep -q "from $venv/lib" "$tmp/loop.out" || { echo "feedclient did not load the venv's library"; exit 1; }
echo "client_install: the Python package loaded the installed library and ran 2 epochs"
