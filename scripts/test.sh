#!/usr/bin/env bash
# Builds everything with warnings as errors and runs every test, then builds
# again with AddressSanitizer + UBSan and runs the tests again. Ends with how
# many tests of each build ran, passed and were skipped, and why.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
for js in tests/interop/js tests/deploy tests/remote; do
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
done

tested=()
summary() {
  if ((${#tested[@]})); then
    echo "==== test summary ===="
    for dir in "${tested[@]}"; do python3 scripts/ctest_summary.py "$dir" || true; done
  fi
}
trap summary EXIT

# run_tests DIR TIMEOUT: ctest in DIR, its results in DIR/ctest-junit.xml
# (passed tests' output whole, for the skip lines at its end).
run_tests() {
  rm -f "$1/ctest-junit.xml"
  tested+=("$1")
  (cd "$1" && ctest --output-on-failure -j2 --timeout "$2" --output-junit ctest-junit.xml \
     --test-output-size-passed 1048576)
}

scripts/build.sh build -DFEED_WERROR=ON
run_tests build 600
scripts/build.sh build-asan -DFEED_WERROR=ON -DFEED_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
run_tests build-asan 900
