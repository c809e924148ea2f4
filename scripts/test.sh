#!/usr/bin/env bash
# test.sh [ctest args...]: builds everything with warnings as errors and runs
# every test, then builds again with AddressSanitizer + UBSan and runs the
# tests again (ctest args, e.g. -R NAME, narrow both runs). Both builds always
# run: a failure in the first (a build error, a failing test) is reported and
# the second still runs, so one failure never hides the sanitizer result. Ends
# with how many tests of each build ran, passed and were skipped, and why,
# then each step that failed; exit status 1 if any did.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
for js in tests/interop/js tests/deploy tests/remote; do
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
done

tested=()
failed=()
summary() {
  if ((${#tested[@]})); then
    echo "==== test summary ===="
    for dir in "${tested[@]}"; do python3 scripts/ctest_summary.py "$dir" || true; done
  fi
  for f in "${failed[@]}"; do echo "FAILED: $f"; done
}
trap summary EXIT

# run_tests DIR TIMEOUT [ctest args]: ctest in DIR, its results in
# DIR/ctest-junit.xml (passed tests' output whole, for the skip lines at its end).
run_tests() {
  local dir=$1 timeout=$2
  shift 2
  rm -f "$dir/ctest-junit.xml"
  tested+=("$dir")
  (cd "$dir" && ctest --output-on-failure -j2 --timeout "$timeout" --output-junit ctest-junit.xml \
     --test-output-size-passed 1048576 "$@")
}

# build_and_test DIR TIMEOUT [cmake args] -- [ctest args]: a failure is noted, not fatal.
build_and_test() {
  local dir=$1 timeout=$2 cmake_args=()
  shift 2
  while (($#)) && [ "$1" != -- ]; do cmake_args+=("$1"); shift; done
  shift
  if ! scripts/build.sh "$dir" "${cmake_args[@]}"; then
    failed+=("$dir: the build")
  elif ! run_tests "$dir" "$timeout" "$@"; then
    failed+=("$dir: tests (ctest's list above; $dir/ctest-junit.xml)")
  fi
}

# Tests ON said, not assumed: build/ may hold the README's "Serve a dataset" build (tests OFF).
build_and_test build 600 -DFEED_WERROR=ON -DFEED_BUILD_TESTS=ON -- "$@"
build_and_test build-asan 900 -DFEED_WERROR=ON -DFEED_BUILD_TESTS=ON -DFEED_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug -- "$@"
((${#failed[@]} == 0))
