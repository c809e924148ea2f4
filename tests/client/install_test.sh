#!/bin/sh
# ctest client_install: `cmake --install` libfeedclient into a temp prefix,
# build consumer.c with `pkg-config --cflags --libs feedclient` and with
# find_package(feedclient), run both, and check the library exports only the
# feed_ API. Both run without LD_LIBRARY_PATH, linked as the README says for a
# custom prefix: pkg-config's libdir as rpath; CMake's build-tree rpath.
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
echo "client_install: pkg-config and find_package consumers built and ran"
