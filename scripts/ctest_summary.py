#!/usr/bin/env python3
"""Prints what one ctest run did, from the JUnit file ctest wrote.

    python3 scripts/ctest_summary.py BUILD_DIR [JUNIT_XML]

JUNIT_XML defaults to BUILD_DIR/ctest-junit.xml (ctest --output-junit).
One line with how many tests there were, ran, passed, failed and were
skipped; then each skipped test with the "SKIP: why" line it printed, each
passed test that skipped some of its cases (pytest -rs "SKIPPED [n] ...: why"
lines, cmocka "[  SKIPPED ] case" lines), and each failed one by name.
"""
import os
import sys
import xml.etree.ElementTree as ET


def skip_reason(case):
    out = case.findtext("system-out") or ""
    for line in out.splitlines():
        if line.startswith("SKIP:"):
            return line[len("SKIP:"):].strip()
    return "no reason printed"


def partial_skips(case):
    out = case.findtext("system-out") or ""
    return [line.strip() for line in out.splitlines()
            if line.startswith("SKIPPED [") or line.startswith("[  SKIPPED ] ")]


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    build = sys.argv[1]
    path = sys.argv[2] if len(sys.argv) == 3 else os.path.join(build, "ctest-junit.xml")
    if not os.path.exists(path):
        print(f"{build}: no test results ({path} missing: ctest did not finish)")
        return 1
    cases = ET.parse(path).getroot().iter("testcase")
    passed, failed, skipped, partial = [], [], [], []
    for c in cases:
        name = c.get("name")
        if c.find("skipped") is not None:
            skipped.append((name, skip_reason(c)))
        elif c.get("status") == "run":
            passed.append(name)
            partial += [(name, line) for line in partial_skips(c)]
        else:
            failed.append(name)
    total = len(passed) + len(failed) + len(skipped)
    print(f"{build}: {total} tests: {len(passed) + len(failed)} ran, {len(passed)} passed, "
          f"{len(failed)} failed, {len(skipped)} skipped")
    for name, why in skipped:
        print(f"  skipped {name}: {why}")
    for name, line in partial:
        print(f"  passed, part skipped, {name}: {line}")
    for name in failed:
        print(f"  FAILED  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
