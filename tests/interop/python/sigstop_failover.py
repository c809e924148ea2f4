#!/usr/bin/python3
"""Measures how long ordered delivery stops when one of two feedd servers is
SIGSTOPped mid-epoch: the longest gap between consecutive batches handed out
by feedclient.Loader after the stop, and when the loader counted the
failover. A measurement for the README, not a ctest test.

usage: sigstop_failover.py BUILD_DIR [ROUNDS]
(run with the feedclient package importable, e.g. PYTHONPATH=python/src
FEEDCLIENT_LIBRARY=BUILD_DIR/client/libfeedclient.so)
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import feedclient
import torch


def start(feedd, ds, workdir):
    port_file = os.path.join(workdir, "port")
    proc = subprocess.Popen([feedd, "--listen", "127.0.0.1:0", "--port-file", port_file,
                             "--dataset", "d=" + ds, "--threads", "1", "--log-level", "error"])
    while not os.path.exists(port_file):
        if proc.poll() is not None:
            raise RuntimeError("feedd exited")
        time.sleep(0.01)
    return proc, "127.0.0.1:%d" % int(open(port_file).read())


def one_round(targets, victim):
    gaps = []
    with feedclient.Loader(targets, "d", batch_size=4, seed=1, device="cpu", size=32,
                           dtype=torch.uint8, layout="NHWC", window_per_server=2) as loader:
        stopped_at = None
        last = time.monotonic()
        for i, _ in enumerate(loader):
            now = time.monotonic()
            if stopped_at is not None:
                gaps.append(now - last)
            last = now
            if i == 20:
                victim.send_signal(signal.SIGSTOP)
                stopped_at = time.monotonic()
            if stopped_at is not None and loader.stats()["failovers"] > 0 and len(gaps) > 40:
                break
        failovers = loader.stats()["failovers"]
    victim.send_signal(signal.SIGCONT)
    return max(gaps), failovers


def main():
    build = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    feedd = os.path.join(build, "server", "feedd")
    gen = os.path.join(build, "server", "tools", "feed-gen-dataset")
    tmp = tempfile.mkdtemp(prefix="sigstop-failover.")
    procs = []
    try:
        ds = os.path.join(tmp, "ds")
        subprocess.run([gen, ds, "--classes", "4", "--per-class", "100", "--seed", "2"],
                       check=True, stdout=subprocess.DEVNULL)
        for r in range(rounds):
            a = start(feedd, ds, tempfile.mkdtemp(dir=tmp))
            b = start(feedd, ds, tempfile.mkdtemp(dir=tmp))
            procs += [a[0], b[0]]
            gap, failovers = one_round([a[1], b[1]], b[0])
            print("round %d: longest gap between batches after SIGSTOP %.2f s, failovers %d"
                  % (r, gap, failovers))
            for p in (a[0], b[0]):
                p.kill()
                p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
