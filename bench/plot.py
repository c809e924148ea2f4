#!/usr/bin/env python3
"""Draws feed-bench's three plots from the files it wrote into a results folder.

    python3 bench/plot.py OUT_DIR

Reads OUT_DIR/summary.json, batches.csv and nvml.csv; writes
  throughput.png  images/s by source (bars), GPU busy share written on each bar
  gpu_util.png    GPU utilisation over time: NVML samples when there were any,
                  with GPM's SM activity (Hopper) dashed beside them;
                  otherwise the step's busy share per second from its own
                  timings, and the plot's title says so (nothing is made up);
                  only whole seconds of each source's measured window (a last
                  partial second would read as a drop)
  batch_wait.png  how long the training loop waited for each batch, as
                  distributions per source: a box plot (median, quartiles,
                  whiskers at p1 and p99, the rest as points) and beside it
                  the CDF; the raw series in batch order is not drawn (its
                  zigzag between 0 and the next batch's wait reads as noise);
                  waits of 0 are drawn at 0 (symlog axis), not floored
Needs matplotlib (Debian: python3-matplotlib) and nothing else.
"""
import csv
import json
import os
import sys

try:
    import matplotlib
except ImportError:
    # A python3 earlier on PATH (pyenv, a venv) may lack Debian's matplotlib:
    # run again under the system interpreter that deps.sh installed it for.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"sync": "#d62728", "local": "#ff7f0e", "remote": "#2ca02c"}


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def by_source(rows):
    out = {}
    for r in rows:
        out.setdefault(r["source"], []).append(r)
    return out


def subtitle(meta):
    dev = meta.get("device_name", "?")
    kind = meta.get("device", "?")
    step = "CPU step" if kind == "cpu" else f"GPU step ({dev})"
    return (f"{step}, model {meta.get('model')}, batch {meta.get('batch')}, "
            f"{meta.get('data_samples')} images; host CPUs for loading: "
            f"{meta.get('affinity_cpus')}")


def plot_throughput(meta, runs, out_dir):
    ok = [r for r in runs if r["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    names = [r["source"] for r in ok]
    vals = [r["images_per_s"] for r in ok]
    bars = ax.bar(names, vals, color=[COLOURS.get(n, "#1f77b4") for n in names])
    busy_label = "GPU busy" if meta.get("device") == "cuda" else "CPU step share"
    for bar, r in zip(bars, ok):
        ax.annotate(f"{r['images_per_s']:.0f} img/s\n{busy_label} {100 * r['gpu_busy']:.1f}%",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("images / s")
    ax.set_ylim(0, max(vals + [1]) * 1.25)
    ax.set_title("Throughput by source\n" + subtitle(meta), fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "throughput.png"), dpi=120)
    plt.close(fig)


def wall_by_source(runs):
    return {r["source"]: float(r.get("wall_s") or 0.0) for r in runs if r["status"] == "ok"}


def plot_util(meta, nvml, batches, runs, out_dir):
    fig, ax = plt.subplots(figsize=(8, 4.2))
    wall = wall_by_source(runs)
    if nvml:
        for src, rows in by_source(nvml).items():
            rows = [r for r in rows if float(r["t_s"]) <= wall.get(src, 0.0)]
            ax.plot([float(r["t_s"]) for r in rows], [float(r["gpu_util"]) for r in rows],
                    label=f"{src} NVML util", color=COLOURS.get(src), lw=1.2)
            gpm = [r for r in rows if r.get("sm_active_pct")]
            if gpm:
                ax.plot([float(r["t_s"]) for r in gpm], [float(r["sm_active_pct"]) for r in gpm],
                        label=f"{src} SM active (GPM)", color=COLOURS.get(src), lw=1.0,
                        ls="--", marker=".")
        ax.set_ylabel("%")
        title = "GPU utilisation over time (NVML every 100 ms"
        title += ("; GPM SM activity every 1 s)" if meta.get("gpm")
                  else f"; GPM: {meta.get('gpm_absent_reason') or 'absent'})")
    else:
        # No NVML: the step's own busy share per second, labelled as such.
        for src, rows in by_source(batches).items():
            buckets = {}
            for r in rows:
                if r["warmup"] == "1":
                    continue
                sec = int(float(r["t_s"]))
                buckets[sec] = buckets.get(sec, 0.0) + float(r["step_ms"]) / 10.0
            xs = [x for x in sorted(buckets) if x + 1 <= wall.get(src, 0.0)]
            ax.plot(xs, [min(buckets[x], 100.0) for x in xs], label=src,
                    color=COLOURS.get(src), lw=1.2, marker=".")
        ax.set_ylabel("step busy share per second (%)")
        why = meta.get("nvml_absent_reason") or "absent"
        title = f"Step busy share over time (NVML not available: {why})"
    ax.set_xlabel("seconds into the measured window")
    ax.set_ylim(0, 105)
    ax.legend()
    ax.set_title(title + "\n" + subtitle(meta), fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "gpu_util.png"), dpi=120)
    plt.close(fig)


def wait_figure(meta, batches, runs):
    """The batch-wait figure: per source, a box plot (left) and the CDF (right) of the waits
    in the measured window."""
    fig, (ax, cdf) = plt.subplots(1, 2, figsize=(11, 4.6), width_ratios=[2, 3])
    stats = {r["source"]: r for r in runs}
    top = 0.0
    names, series = [], []
    for src, rows in by_source(batches).items():
        waits = [float(r["wait_ms"]) for r in rows if r["warmup"] == "0"]
        if not waits:
            continue
        s = stats.get(src, {})
        label = (f"{src}: p50 {s.get('wait_p50_ms', 0):.3g} / p99 {s.get('wait_p99_ms', 0):.3g}"
                 f" / max {s.get('wait_max_ms', 0):.3g} ms")
        colour = COLOURS.get(src)
        names.append(src)
        series.append(waits)
        ordered = sorted(waits)
        n = len(ordered)
        cdf.step(ordered, [(i + 1) / n for i in range(n)], where="post", color=colour,
                 lw=1.4, label=label)
        top = max(top, ordered[-1])
    if series:
        box = ax.boxplot(series, whis=(1, 99), patch_artist=True, widths=0.5,
                         flierprops={"marker": ".", "markersize": 3, "alpha": 0.5})
        for patch, src in zip(box["boxes"], names):
            patch.set_facecolor(COLOURS.get(src, "#7f7f7f"))
            patch.set_alpha(0.6)
        ax.set_xticks(range(1, len(names) + 1), names)
    # symlog: linear below 0.01 ms, so waits of 0 sit on the axis instead of a made-up floor.
    for a in (ax, cdf):
        a.grid(True, which="major", alpha=0.3)
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylim(0, max(top, 0.01) * 2)
    ax.set_xlabel("source")
    ax.set_ylabel("wait for the batch (ms, symlog)")
    ax.set_title("Per-batch wait: median, quartiles, p1-p99", fontsize=9)
    cdf.set_xscale("symlog", linthresh=0.01)
    cdf.set_xlim(0, max(top, 0.01) * 2)
    cdf.set_ylim(0, 1.02)
    cdf.set_xlabel("wait for the batch (ms, symlog)")
    cdf.set_ylabel("fraction of batches waiting at most this long")
    cdf.set_title("Distribution (CDF)", fontsize=9)
    fig.suptitle("Batch wait in the training loop\n" + subtitle(meta), fontsize=9)
    handles, labels = cdf.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def plot_wait(meta, batches, runs, out_dir):
    fig = wait_figure(meta, batches, runs)
    fig.savefig(os.path.join(out_dir, "batch_wait.png"), dpi=120)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    meta, runs = summary["meta"], summary["runs"]
    batches = read_csv(os.path.join(out_dir, "batches.csv"))
    nvml = read_csv(os.path.join(out_dir, "nvml.csv"))
    plot_throughput(meta, runs, out_dir)
    plot_util(meta, nvml, batches, runs, out_dir)
    plot_wait(meta, batches, runs, out_dir)
    print(f"plots in {out_dir}: throughput.png gpu_util.png batch_wait.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
