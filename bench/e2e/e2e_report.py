#!/usr/bin/env python3
"""e2e_report.py DIR: feed-bench's repeated runs in DIR/run*/summary.json as
one table (Markdown, to stdout): per source, the median (range) over the runs
of images/s, % of the GPU-only ceiling (the calibrated step alone: batch /
step time, what the model would do with data always ready), GPU busy from
CUDA events, NVML utilisation, GPM SM activity, and wait p50/p99 (medians of
the runs'). Used by gpu_suite.sh's e2e stage (RUNS=N)."""
from __future__ import annotations

import glob
import json
import os
import statistics
import sys


def fmt(vals, spec=",.0f"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    m = statistics.median(vals)
    if len(vals) == 1:
        return format(m, spec)
    return f"{format(m, spec)} ({format(min(vals), spec)}-{format(max(vals), spec)})"


def main() -> int:
    runs = []
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "run*", "summary.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        print(f"e2e_report: no run*/summary.json in {sys.argv[1]}", file=sys.stderr)
        return 1
    meta = runs[0]["meta"]
    ceiling = (1000.0 * meta["batch"] / meta["step_calibrated_ms"]
               if meta.get("step_calibrated_ms") else None)
    print(f"feed-bench, model {meta['model']} ({meta['device']}, {meta['device_name']}), "
          f"batch {meta['batch']}, {len(runs)} runs of {meta['seconds']:g} s per source; "
          f"ceiling {ceiling:,.0f} img/s (batch / calibrated step time)\n" if ceiling else "")
    print("| source | runs | images/s | % of ceiling | GPU busy % | NVML util % | SM active % | "
          "wait p50 ms | wait p99 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    sources = [r["source"] for r in runs[0]["runs"]]
    for src in sources:
        rs = [x for run in runs for x in run["runs"] if x["source"] == src and x["status"] == "ok"]
        ips = [x["images_per_s"] for x in rs]
        pct = [100 * v / ceiling for v in ips] if ceiling else []
        print(f"| {src} | {len(rs)} | {fmt(ips)} | {fmt(pct, '.1f')} | "
              f"{fmt([100 * x['gpu_busy'] for x in rs], '.1f')} | "
              f"{fmt([x.get('nvml_util_mean') for x in rs], '.1f')} | "
              f"{fmt([x.get('sm_active_pct') for x in rs], '.1f')} | "
              f"{fmt([x['wait_p50_ms'] for x in rs], '.3f')} | "
              f"{fmt([x['wait_p99_ms'] for x in rs], '.3f')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
