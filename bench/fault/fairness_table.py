"""fairness_table.py RUNS.jsonl: the markdown table of fairness.py's runs (one
JSON line each). With several batch deadlines among the runs: one row per
deadline, median (range) over its runs. With one: one row per run, the
steady-state ratio (batches after --settle) beside the whole run's, then the
medians of both."""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
deadlines = sorted({r["batch_deadline_s"] for r in rows})
if len(deadlines) > 1:
    print("| batch deadline | runs | slowest/fastest | failovers | longest wait s | batches |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for d in deadlines:
        rs = [r for r in rows if r["batch_deadline_s"] == d]

        def f(k, spec, rs=rs):
            v = [r[k] for r in rs]
            return f"{format(statistics.median(v), spec)} ({format(min(v), spec)}-{format(max(v), spec)})"
        print(f"| {d:g} s | {len(rs)} | {f('slowest_over_fastest', '.2f')} | {f('failovers', '.0f')} | "
              f"{f('longest_wait_s', '.1f')} | {f('batches_total', '.0f')} |")
else:
    settle = rows[0]["settle_s"]
    print(f"| run | slowest/fastest, whole run | steady state (after {settle:g} s) | failovers | "
          "longest wait s | batches | min / max batches |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(rows, 1):
        print(f"| {i} | {r['slowest_over_fastest']:.2f} | {r['steady_slowest_over_fastest']:.2f} | "
              f"{r['failovers']} | {r['longest_wait_s']:.1f} | {r['batches_total']} | "
              f"{r['batches_min']} / {r['batches_max']} |")
    for k in ("slowest_over_fastest", "steady_slowest_over_fastest"):
        v = [r[k] for r in rows]
        print(f"\n{k}: median {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
