"""fleet_cache_summary.py RAWDIR (fleet_cache.sh's OUTDIR): median and range over
runs of the loader's images/s and the fleet's cache hit rate (hits / lookups
over the 4 servers, measured window), per epoch and owner-routing mode, and of
the on/off throughput ratio of each run (the two modes ran side by side)."""
import json
import os
import re
import statistics
import sys

raw = sys.argv[1]
rows = {}
for name in sorted(os.listdir(raw)):
    m = re.fullmatch(r"run(\d+)-epoch(\d+)-(on|off)", name)
    if not m:
        continue
    run = json.load(open(os.path.join(raw, name, "summary.json")))["runs"][0]
    caches = run["server_caches"]
    hits = sum(c["hits"] for c in caches)
    lookups = hits + sum(c["misses"] for c in caches)
    stood = sum(c["not_owned"] for c in caches)
    rows[(int(m[1]), int(m[2]), m[3])] = (run["images_per_s"], hits / lookups, stood, lookups)


def stat(v):
    return "median %.3g (range %.3g-%.3g, n=%d)" % (statistics.median(v), min(v), max(v), len(v))


for epoch in sorted({k[1] for k in rows}):
    print("epoch %d" % epoch)
    for mode in ("on", "off"):
        v = [rows[k] for k in sorted(rows) if k[1] == epoch and k[2] == mode]
        print("  routing %-3s images/s %s" % (mode, stat([x[0] for x in v])))
        print("             hit rate %s" % stat([100 * x[1] for x in v]))
        print("             stand-in misses %s of lookups %s" %
              (stat([x[2] for x in v]), stat([x[3] for x in v])))
    ratio = [rows[(r, epoch, "on")][0] / rows[(r, epoch, "off")][0]
             for (r, e, m) in sorted(rows) if e == epoch and m == "on" and (r, e, "off") in rows]
    print("  throughput on/off per run: %s" % stat(ratio))
