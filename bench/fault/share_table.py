#!/usr/bin/env python3
"""share_table.py RUNS.jsonl: the table of a share.py run (bench/fault/share_runs.sh).

Decode sharing: per round the shared mode's aggregate images/s over the unshared mode's of
the same round, median and range; each mode's aggregate; each job's rate over the mean of the
four jobs of its round (the worst of every round: within 10% is the goal). Warm cache: each
of the four jobs' rate over a quarter of the single job's rate of the same round (the worst
job of every round: at least 0.90 is the goal)."""
from __future__ import annotations

import json
import statistics
import sys


def span(values, fmt):
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    by = {}
    for r in rows:
        by.setdefault((r["part"], r["mode"]), {})[r["round"]] = r
    print("| measure | median (range) | rounds |")
    print("| --- | --- | --- |")
    for mode in ("shared", "unshared", "single", "cache4"):
        got = by.get(("share" if mode in ("shared", "unshared") else "cache", mode), {})
        if got:
            agg = [r["aggregate"] for r in got.values()]
            print(f"| {mode}: aggregate images/s | {span(agg, '{:.0f}')} | {len(agg)} |")
    for mode in ("shared", "unshared", "cache4"):
        part = "cache" if mode == "cache4" else "share"
        got = by.get((part, mode), {})
        if got:
            worst = [max(abs(x / statistics.mean(r["job_rates"]) - 1) for x in r["job_rates"])
                     for r in got.values()]
            print(f"| {mode}: worst job's distance from the mean of its round | "
                  f"{span([100 * w for w in worst], '{:.1f}%')} | {len(worst)} |")
    shared, unshared = by.get(("share", "shared"), {}), by.get(("share", "unshared"), {})
    common = sorted(set(shared) & set(unshared))
    if common:
        ratio = [shared[k]["aggregate"] / unshared[k]["aggregate"] for k in common]
        print(f"| shared / unshared aggregate images/s (goal >= 2) | {span(ratio, '{:.2f}')} "
              f"| {len(common)} |")
    single, four = by.get(("cache", "single"), {}), by.get(("cache", "cache4"), {})
    common = sorted(set(single) & set(four))
    if common:
        worst = [min(four[k]["job_rates"]) / (single[k]["aggregate"] / 4) for k in common]
        print(f"| warm cache: slowest of 4 jobs / (single job / 4) (goal >= 0.90) | "
              f"{span(worst, '{:.2f}')} | {len(common)} |")


if __name__ == "__main__":
    main()
