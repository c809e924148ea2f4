"""fleet_report.py RUNS.jsonl: the fleet table (per configuration: server
cores per GPU, images/s of the slowest and of all clients, busy of the
slowest client) and, per model and data set, the fewest server cores per GPU
that kept every client >= 98% busy (or that none did, with the best seen)."""

import json
import sys


def main() -> int:
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    print("| data | model | servers x threads | clients | server cores / GPU | busy, slowest client |"
          " busy, mean | images/s, all clients | images/s per server core | wait p99 ms, worst |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    best = {}
    for r in rows:
        ok = [c for c in r["per_client"] if "error" not in c]
        if len(ok) != r["clients"]:
            print(f"| {r['data']} | {r['model']} | {r['servers']} x {r['threads']} | "
                  f"{r['clients']} | failed: {[c.get('error') for c in r['per_client']]} |")
            continue
        cores = r["servers"] * r["threads"]
        per_gpu = cores / r["clients"]
        slow = min(c["busy"] for c in ok)
        mean = sum(c["busy"] for c in ok) / len(ok)
        ips = sum(c["images_per_s"] for c in ok)
        p99 = max(c["wait_p99_ms"] for c in ok)
        print(f"| {r['data']} | {r['model']} | {r['servers']} x {r['threads']} | {r['clients']} | "
              f"{per_gpu:.2f} | {100 * slow:.1f}% | {100 * mean:.1f}% | {ips:,.0f} | "
              f"{ips / cores:,.0f} | {p99:.1f} |")
        key = (r["data"], r["model"])
        b = best.setdefault(key, {"enough": None, "best": None})
        if slow >= 0.98 and (b["enough"] is None or per_gpu < b["enough"]):
            b["enough"] = per_gpu
        if b["best"] is None or slow > b["best"][1]:
            b["best"] = (per_gpu, slow)
    print()
    for (data, model), b in sorted(best.items()):
        if b["enough"] is not None:
            print(f"- {data}, {model}: every client >= 98% busy from {b['enough']:.2f} server "
                  f"cores per GPU")
        else:
            print(f"- {data}, {model}: no configuration kept every client >= 98% busy (best: "
                  f"{100 * b['best'][1]:.1f}% at {b['best'][0]:.2f} cores per GPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
