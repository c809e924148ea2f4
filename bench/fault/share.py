#!/usr/bin/env python3
"""share.py: four jobs of a sweep on one feedd, decode shared or not, and on a warm cache.

A sweep's jobs read one dataset in the same order (one seed) with their own crops (aug_seed
0..3). Each job is a process of its own (a feedclient.Loader, host path, uint8) that reads one
epoch once told to go; all four go together. Two parts, each in one feedd started here:

  share   feedd --threads T serving DATA with share=SIDE (no decoded cache): per round the
          four jobs with one share name ("shared") and without ("unshared"), the order of the
          two alternating between rounds. Per mode: the aggregate images/s (all samples over
          the time from the go to the last job's end) and each job's images/s.
  cache   feedd --threads T --cache-bytes C serving DATA with cache=SIDE, warmed by one epoch:
          per round one job alone ("single") and the four together ("cache4"), alternating.

One JSON line per round and mode (--json appends them). Needs the feedclient package
importable (PYTHONPATH=python/src, FEEDCLIENT_LIBRARY=build/client/libfeedclient.so):

    python3 bench/fault/share.py --feedd build/server/feedd --data DIR --rounds 5 \\
        --threads 2 --side 256 [--share-window-bytes N] [--parts share,cache] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

JOBS = 4
SEED = 1


def start_feedd(args, workdir, dataset_opt, extra):
    port_file = os.path.join(workdir, "port")
    log_path = os.path.join(workdir, "feedd.log")
    cmd = [args.feedd, "--listen", "127.0.0.1:0", "--port-file", port_file,
           "--threads", str(args.threads), "--max-memory", args.max_memory,
           "--dataset", f"d={args.data}{dataset_opt}", "--log-level", "warn", *extra]
    proc = subprocess.Popen(cmd, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)
    for _ in range(1200):
        if os.path.exists(port_file) and os.path.getsize(port_file):
            return proc, f"127.0.0.1:{int(open(port_file).read())}", " ".join(cmd)
        if proc.poll() is not None:
            sys.exit(f"feedd exited: {open(log_path).read()}")
        time.sleep(0.05)
    sys.exit("feedd wrote no port file")


def worker(args):
    """One job: says "ready" once imported, waits for "go" on stdin, reads one epoch, prints
    its count and end time."""
    import torch

    import feedclient

    print("ready", flush=True)
    sys.stdin.readline()
    go = time.monotonic()
    n = 0
    with feedclient.Loader([args.target], "d", batch_size=args.batch, seed=SEED,
                           aug_seed=args.aug_seed, share=args.share or None,
                           job=f"sweep-{args.aug_seed}", device="cpu", size=args.size,
                           dtype=torch.uint8, layout="NHWC", epoch=args.epoch,
                           window_per_server=args.window, unavailable_timeout=600,
                           batch_deadline=600) as loader:
        for images, _ in loader:
            n += images.shape[0]
    print(json.dumps({"samples": n, "go": go, "end": time.monotonic()}), flush=True)


def run_jobs(args, target, count, share, epoch):
    """count jobs at once; each job's images/s and the aggregate."""
    procs = []
    for k in range(count):
        cmd = [sys.executable, __file__, "--worker", "--target", target, "--aug-seed", str(k),
               "--share", share, "--epoch", str(epoch), "--batch", str(args.batch),
               "--size", str(args.size), "--window", str(args.window)]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    for p in procs:  # each has imported torch and feedclient
        if p.stdout.readline().strip() != "ready":
            sys.exit("a job failed to start")
    go = time.monotonic()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    res = []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        if p.returncode:
            sys.exit(f"a job failed ({p.returncode})")
        res.append(json.loads(out.strip().splitlines()[-1]))
    rates = [r["samples"] / (r["end"] - max(go, r["go"])) for r in res]
    total = sum(r["samples"] for r in res)
    return {"jobs": count, "samples": total, "job_rates": rates,
            "aggregate": total / (max(r["end"] for r in res) - go)}


def part(args, name, dataset_opt, extra, modes, rows):
    with tempfile.TemporaryDirectory() as work:
        proc, target, feedd_cmd = start_feedd(args, work, dataset_opt, extra)
        try:
            if name == "cache":
                run_jobs(args, target, 1, "", 0)  # warms the cache: every sample once
            for rnd in range(args.rounds):
                order = modes if rnd % 2 == 0 else modes[::-1]
                for mode, count, share in order:
                    res = run_jobs(args, target, count, share, rnd + 1)
                    res.update({"part": name, "mode": mode, "round": rnd, "feedd": feedd_cmd,
                                "batch": args.batch, "size": args.size,
                                "threads": args.threads, "command": " ".join(sys.argv)})
                    print(json.dumps(res), flush=True)
                    rows.append(res)
                    if args.json:
                        with open(args.json, "a") as f:
                            f.write(json.dumps(res) + "\n")
        finally:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    ap.add_argument("--aug-seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--share", default="", help=argparse.SUPPRESS)
    ap.add_argument("--epoch", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--feedd")
    ap.add_argument("--data")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--side", type=int, default=256, help="share=SIDE and cache=SIDE")
    ap.add_argument("--share-window-bytes", default="",
                    help="feedd --share-window-bytes (default: feedd's own)")
    ap.add_argument("--cache-bytes", default="2G")
    ap.add_argument("--max-memory", default="1G")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--parts", default="share,cache")
    ap.add_argument("--json", help="append each round's result as one JSON line")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if not args.feedd or not args.data:
        ap.error("--feedd and --data are needed")
    rows = []
    parts = args.parts.split(",")
    if "share" in parts:
        extra = (["--share-window-bytes", args.share_window_bytes]
                 if args.share_window_bytes else [])
        part(args, "share", f",share={args.side}", extra,
             [("shared", JOBS, "sweep"), ("unshared", JOBS, "")], rows)
    if "unshared" in parts:  # a feedd without the share window: the unshared case alone
        part(args, "share", "", [], [("unshared", JOBS, "")], rows)
    if "cache" in parts:
        part(args, "cache", f",cache={args.side}", ["--cache-bytes", args.cache_bytes],
             [("single", 1, ""), ("cache4", JOBS, "")], rows)


if __name__ == "__main__":
    main()
