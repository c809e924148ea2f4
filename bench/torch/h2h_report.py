"""h2h_report.py OUTDIR: the head-to-head's table (Markdown, to stdout) and its
three plots (throughput with range and % of the ceiling, NVML utilisation
over time, batch-wait CDF per source) from OUTDIR/h2h.jsonl and
OUTDIR/series-*.json written by run_h2h.sh / headtohead.py (or series-*.json.gz,
as the committed results keep them)."""

from __future__ import annotations

import glob
import gzip
import json
import os
import statistics
import sys
from collections import OrderedDict


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v, spec=".1f"):
    return "n/a" if v is None else format(v, spec)


def table(rows):
    by = OrderedDict()
    for r in rows:
        by.setdefault(r["label"], []).append(r)
    ceiling = {}
    for label, rs in by.items():
        if rs[0]["source"] == "synthetic":
            ceiling[rs[0]["model"]] = med(rs, "img_per_s")
    lines = ["| configuration | windows | images/s median (range) | % of ceiling | NVML util % | "
             "SM active % | DRAM BW % | stream idle % | wait p50 / p99 / max ms | "
             "stream gap p50 / p99 / max ms | host cores | GPU mem MiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    summary = {}
    for label, rs in by.items():
        ips = [r["img_per_s"] for r in rs]
        m = statistics.median(ips)
        c = ceiling.get(rs[0]["model"])
        summary[label] = m
        lines.append(
            f"| {label} | {len(rs)} | {m:,.0f} ({min(ips):,.0f}-{max(ips):,.0f}) | "
            f"{fmt(100 * m / c if c else None)} | {fmt(med(rs, 'nvml_util_pct'))} | "
            f"{fmt(med(rs, 'sm_active_pct'))} | {fmt(med(rs, 'dram_bw_util_pct'))} | "
            f"{fmt(med(rs, 'stream_idle_pct'))} | {fmt(med(rs, 'wait_p50_ms'), '.2f')} / "
            f"{fmt(med(rs, 'wait_p99_ms'), '.2f')} / {fmt(med(rs, 'wait_max_ms'), '.1f')} | "
            f"{fmt(med(rs, 'gap_p50_ms'), '.2f')} / {fmt(med(rs, 'gap_p99_ms'), '.2f')} / "
            f"{fmt(med(rs, 'gap_max_ms'), '.1f')} | "
            f"{fmt(med(rs, 'host_cores'))} | {fmt(med(rs, 'mem_used_mib'), '.0f')} |")
    unavailable = {k: v for r in rows for k, v in (r.get("unavailable") or {}).items()}
    for k, v in unavailable.items():
        lines.append(f"\n{k}: null ({v})")
    ratios = []
    for model in ("r18", "r50"):
        for data in ("orig", "reenc"):
            f, d = summary.get(f"{model}-feed-{data}"), summary.get(f"{model}-dl-{data}")
            if f and d:
                ratios.append(f"{model} {data}: feedclient / DataLoader = {f / d:.2f}x")
    return "\n".join(lines + [""] + ratios), by


def plots(out, by):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(by)
    meds = [statistics.median(r["img_per_s"] for r in by[k]) for k in labels]
    lo = [m - min(r["img_per_s"] for r in by[k]) for m, k in zip(meds, labels)]
    hi = [max(r["img_per_s"] for r in by[k]) - m for m, k in zip(meds, labels)]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    colors = ["#888888" if "synth" in k else "#d62728" if "-dl-" in k else "#1f77b4"
              for k in labels]
    ax.bar(range(len(labels)), meds, yerr=[lo, hi], color=colors, capsize=3)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_ylabel("images/s (median, range over windows)")
    ax.set_title("Real training loop on one H200: synthetic ceiling, DataLoader, feedclient")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "h2h_throughput.png"), dpi=110)
    plt.close(fig)

    series = {}
    for path in sorted(glob.glob(os.path.join(out, "series-*.json*"))):
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            s = json.load(f)
        series[s["label"]] = s
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for label, s in series.items():
        util = s.get("gpu", {}).get("nvml_util_pct") or []
        if util:
            t0 = util[0][0]
            axes[0].plot([t - t0 for t, _ in util], [v for _, v in util], label=label, lw=0.8)
        waits = sorted(w * 1e3 for _, w in s["waits"])
        if waits:
            n = len(waits)
            axes[1].plot([max(w, 1e-3) for w in waits], [(i + 1) / n for i in range(n)],
                         label=label, lw=1)
    axes[0].set_xlabel("seconds since start")
    axes[0].set_ylabel("NVML GPU utilisation %")
    axes[0].set_ylim(0, 105)
    axes[0].set_title("GPU utilisation over the run")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("batch wait, ms (log)")
    axes[1].set_ylabel("fraction of batches")
    axes[1].set_title("Batch wait CDF (measured windows)")
    for a in axes:
        a.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "h2h_util_and_wait.png"), dpi=110)
    plt.close(fig)


def main() -> int:
    out = sys.argv[1]
    rows = load(os.path.join(out, "h2h.jsonl"))
    text, by = table(rows)
    print(text)
    sweep = os.path.join(out, "sweep.jsonl")
    if os.path.exists(sweep):
        print("\nDataLoader workers sweep (resnet18, originals, one 10 s window each):")
        for r in load(sweep):
            print(f"- num_workers={r['workers']}: {r['img_per_s']:,.0f} img/s")
    plots(out, by)
    return 0


if __name__ == "__main__":
    sys.exit(main())
