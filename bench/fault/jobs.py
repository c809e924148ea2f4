#!/usr/bin/env python3
"""jobs.py: an 8-rank job and a 1-rank job on one capped feedd. Starts one
feedd (--threads T) serving DATA, then 9 feedclient.Loader instances in this
process, one thread each, iterating epochs for S seconds: 8 are the ranks of
job "big" (rank k of world 8), 1 is job "small" (world 1). Reports each job's
share of the samples the server made between --settle seconds and the end,
read from feedd's own counters (feedd_job_samples_total), in three modes run
back to back on fresh servers:

  per-connection  each of the 8 ranks names a job of its own (big-0..big-7):
                  the server shares per connection, as before jobs
  jobs            the 8 ranks share job "big", weights 1:1 (target 0.5)
  weighted        the same with big weighted 2 (target 0.67)

    python3 bench/fault/jobs.py --feedd build/server/feedd --data DIR \\
        --seconds 40 --settle 10 --threads 1 [--json OUT]

Needs the feedclient package importable (PYTHONPATH=python/src and
FEEDCLIENT_LIBRARY=build/client/libfeedclient.so from a build tree).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import torch

import feedclient

MODES = {"per-connection": (None, 1), "jobs": ("big", 1), "weighted": ("big", 2)}


def start_feedd(args, workdir):
    port_file = os.path.join(workdir, "port")
    mport_file = os.path.join(workdir, "mport")
    log = open(os.path.join(workdir, "feedd.log"), "wb")
    proc = subprocess.Popen([args.feedd, "--listen", "127.0.0.1:0", "--port-file", port_file,
                             "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", mport_file,
                             "--threads", str(args.threads), "--max-memory", args.max_memory,
                             "--dataset", f"d={args.data}", "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if all(os.path.exists(f) and os.path.getsize(f) for f in (port_file, mport_file)):
            return (proc, f"127.0.0.1:{int(open(port_file).read())}",
                    f"http://127.0.0.1:{int(open(mport_file).read())}/metrics")
        if proc.poll() is not None:
            sys.exit(f"feedd exited: {open(os.path.join(workdir, 'feedd.log')).read()}")
        time.sleep(0.05)
    sys.exit("feedd wrote no port file")


def job_samples(url):
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r'^feedd_job_samples_total\{job="([^"]*)"\} (\d+)$', text, re.M)}


def client(target, args, stop, out, k, job, weight, rank, world):
    rec = {"client": k, "job": job, "batches": 0, "error": None}
    try:
        with feedclient.Loader([target], "d", batch_size=args.batch, seed=1, device="cpu",
                               size=args.size, dtype=torch.uint8, drop_last=True,
                               rank=rank, world=world, window_per_server=args.window,
                               job=job, job_weight=weight,
                               unavailable_timeout=args.seconds + 60) as loader:
            epoch = 0
            while not stop.is_set():
                loader.set_epoch(epoch)
                for _ in loader:
                    rec["batches"] += 1
                    if stop.is_set():
                        break
                epoch += 1
    except Exception as e:  # reported, not raised: the other clients go on
        rec["error"] = f"{type(e).__name__}: {e}"
    out[k] = rec


def run_mode(args, mode):
    big, weight = MODES[mode]
    with tempfile.TemporaryDirectory() as work:
        proc, target, url = start_feedd(args, work)
        try:
            stop = threading.Event()
            out = [None] * 9
            specs = [((big or f"big-{k}"), weight, k, 8) for k in range(8)]
            specs.append(("small", 1, 0, 1))
            threads = [threading.Thread(target=client, args=(target, args, stop, out, k, *s))
                       for k, s in enumerate(specs)]
            for t in threads:
                t.start()
            time.sleep(args.settle)
            a = job_samples(url)
            time.sleep(args.seconds - args.settle)
            b = job_samples(url)
            stop.set()
            for t in threads:
                t.join(timeout=args.seconds + 120)
        finally:
            proc.kill()
            proc.wait()
    delta = {j: b.get(j, 0) - a.get(j, 0) for j in b}
    big_n = sum(v for j, v in delta.items() if j.startswith("big"))
    small_n = delta.get("small", 0)
    return {"mode": mode, "big_weight": weight, "big_samples": big_n, "small_samples": small_n,
            "big_share": big_n / (big_n + small_n) if big_n + small_n else 0.0,
            "target": {"per-connection": 8 / 9, "jobs": 0.5, "weighted": 2 / 3}[mode],
            "errors": [r["error"] for r in out if r and r["error"]][:3]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--feedd", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=160)
    ap.add_argument("--window", type=int, default=8, help="window_per_server of every loader")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds after the start before the count begins")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-memory", default="1G")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", help="append each mode's result as one JSON line")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        res = run_mode(args, mode)
        res.update({"batch": args.batch, "size": args.size, "window": args.window,
                    "seconds": args.seconds, "settle_s": args.settle, "threads": args.threads,
                    "command": " ".join(sys.argv)})
        print(json.dumps(res))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
