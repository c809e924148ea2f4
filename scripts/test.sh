#!/usr/bin/env bash
# Builds everything with warnings as errors and runs every test, then builds
# again with AddressSanitizer + UBSan and runs the tests again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
if [ -f tests/interop/js/package.json ]; then
  (cd tests/interop/js && npm ci --no-audit --no-fund --loglevel=error)
fi
scripts/build.sh build -DFEED_WERROR=ON
(cd build && ctest --output-on-failure -j2 --timeout 600)
scripts/build.sh build-asan -DFEED_WERROR=ON -DFEED_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
(cd build-asan && ctest --output-on-failure -j2 --timeout 900)
