#!/usr/bin/env python3
"""fairness.py: many clients of one busy feedd. Starts one feedd (--threads T,
--max-memory M) serving DATA, then C feedclient.Loader instances in this
process, one thread each, all iterating epochs for S seconds; reports per
client the batches received and the longest single wait in next(), the
slowest/fastest ratio of batches over the whole run and of rates in steady
state (batches between --settle seconds and the end, once every client is
connected and has its window filled), clients that waited longer than 30 s,
and the failovers the loaders counted (a failover here fails a healthy
server).

    python3 bench/fault/fairness.py --feedd build/server/feedd --data DIR \\
        --clients 64 --batch 48 --seconds 60 --threads 2 --max-memory 32M [--json OUT]

Needs the feedclient package importable (PYTHONPATH=python/src and
FEEDCLIENT_LIBRARY=build/client/libfeedclient.so from a build tree).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch

import feedclient


def start_feedd(args, workdir):
    port_file = os.path.join(workdir, "port")
    log = open(os.path.join(workdir, "feedd.log"), "wb")
    proc = subprocess.Popen([args.feedd, "--listen", "127.0.0.1:0", "--port-file", port_file,
                             "--threads", str(args.threads), "--max-memory", args.max_memory,
                             "--dataset", f"d={args.data}", "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(port_file) and os.path.getsize(port_file):
            return proc, f"127.0.0.1:{int(open(port_file).read())}"
        if proc.poll() is not None:
            sys.exit(f"feedd exited: {open(os.path.join(workdir, 'feedd.log')).read()}")
        time.sleep(0.05)
    sys.exit("feedd wrote no port file")


def client(target, args, stop, out, k, t_settle):
    rec = {"client": k, "batches": 0, "settled": 0, "max_wait_s": 0.0, "error": None,
           "failovers": 0}
    try:
        with feedclient.Loader([target], "d", batch_size=args.batch, seed=k, device="cpu",
                               size=args.size, dtype=torch.uint8, drop_last=True,
                               batch_deadline=args.batch_deadline,
                               unavailable_timeout=args.seconds + 60) as loader:
            epoch = 0
            while not stop.is_set():
                loader.set_epoch(epoch)
                it = iter(loader)
                while not stop.is_set():
                    t0 = time.monotonic()
                    try:
                        next(it)
                    except StopIteration:
                        break
                    t1 = time.monotonic()
                    rec["max_wait_s"] = max(rec["max_wait_s"], t1 - t0)
                    rec["batches"] += 1
                    rec["settled"] += t1 >= t_settle
                epoch += 1
            rec["failovers"] = loader.stats()["failovers"]
    except Exception as e:  # reported, not raised: the other clients go on
        rec["error"] = f"{type(e).__name__}: {e}"
    out[k] = rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--feedd", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds after the start before the steady-state count begins")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-memory", default="32M")
    ap.add_argument("--batch-deadline", type=float, default=None,
                    help="seconds (default: the library's)")
    ap.add_argument("--json", help="append the result as one JSON line")
    args = ap.parse_args()
    if args.batch_deadline is None:
        args.batch_deadline = feedclient.Loader.__init__.__kwdefaults__["batch_deadline"]
    with tempfile.TemporaryDirectory() as work:
        proc, target = start_feedd(args, work)
        try:
            stop = threading.Event()
            out = [None] * args.clients
            t0 = time.monotonic()
            threads = [threading.Thread(target=client,
                                        args=(target, args, stop, out, k, t0 + args.settle))
                       for k in range(args.clients)]
            for t in threads:
                t.start()
            time.sleep(args.seconds)
            stop.set()
            for t in threads:
                t.join(timeout=args.seconds + 120)
            wall = time.monotonic() - t0
        finally:
            proc.kill()
            proc.wait()
    done = [r for r in out if r]
    counts = [r["batches"] for r in done]
    res = {"clients": args.clients, "batch": args.batch, "seconds": args.seconds,
           "threads": args.threads, "max_memory": args.max_memory,
           "batch_deadline_s": args.batch_deadline, "wall_s": wall,
           "batches_total": sum(counts), "batches_min": min(counts), "batches_max": max(counts),
           "batches_median": statistics.median(counts),
           "slowest_over_fastest": min(counts) / max(counts) if max(counts) else 0.0,
           "settle_s": args.settle,
           "steady_slowest_over_fastest": (min(r["settled"] for r in done) /
                                           max(r["settled"] for r in done)
                                           if max(r["settled"] for r in done) else 0.0),
           "clients_waited_over_30s": sum(1 for r in done if r["max_wait_s"] > 30),
           "longest_wait_s": max(r["max_wait_s"] for r in done),
           "failovers": sum(r["failovers"] for r in done),
           "errors": [r["error"] for r in done if r["error"]][:5],
           "command": " ".join(sys.argv)}
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
