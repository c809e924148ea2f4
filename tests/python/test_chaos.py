"""Chaos through the real stack: four feedd processes, and during six epochs
the training loop itself kills, stops and restarts them at fixed points of
the epoch (kill -9 and restart on the same port, SIGSTOP/SIGCONT, two at
once, all at once). Every epoch must come out exactly once, in plan order,
with bytes identical to a fault-free run with the same seed: what the
scheduler's failover, re-issue and late-duplicate rules promise. The faults
are placed by batch count, not by time, so the outcome cannot depend on the
machine's speed; only how long it takes does (bounded: a stopped server is
failed over after batch_deadline, a restarted one is reconnected within the
client's backoff)."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch

import feedclient
from conftest import Server

EPOCHS = 6
KW = dict(batch_size=4, seed=9, device="cpu", size=32, dtype=torch.uint8, with_indices=True,
          window_per_server=2, prefetch=3)


def run(targets: List[str], faults: Dict[int, Callable[[], None]] = {}, stats: Dict = None,
        **kw) -> List[Tuple[int, List[int], List[int], str]]:
    """(epoch, indices, labels, sha256 of the pixels) per batch; faults[k] runs after batch k;
    stats, when given, gets the loader's stats at the end."""
    out = []
    k = 0
    with feedclient.Loader(targets, "small", **KW, **kw) as loader:
        for epoch in range(EPOCHS):
            loader.set_epoch(epoch)
            for images, labels, indices in loader:
                out.append((epoch, indices.tolist(), labels.tolist(),
                            hashlib.sha256(images.numpy().tobytes()).hexdigest()))
                if k in faults:
                    faults[k]()
                k += 1
        if stats is not None:
            stats.update(loader.stats())
    return out


class Fleet:
    """Four feedd serving `small`, each restartable on its own port."""

    def __init__(self, data: Path, workdir: Path):
        self.args = ["--dataset", f"small={data}", "--threads", "1"]
        self.workdir = workdir
        self.servers = [Server(self.args, workdir / f"s{i}") for i in range(4)]
        self.ports = [s.port for s in self.servers]
        self.restarts = 0

    def targets(self) -> List[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def kill(self, *which: int) -> None:
        for i in which:
            self.servers[i].stop()

    def restart(self, *which: int) -> None:
        for i in which:
            self.restarts += 1
            self.servers[i] = Server(self.args, self.workdir / f"s{i}-r{self.restarts}",
                                     listen=f"127.0.0.1:{self.ports[i]}")

    def kill_restart(self, *which: int) -> Callable[[], None]:
        return lambda: (self.kill(*which), self.restart(*which))

    def send(self, sig: int, *which: int) -> Callable[[], None]:
        return lambda: [self.servers[i].signal(sig) for i in which]

    def stop_all_then_continue(self) -> Callable[[], None]:
        """Every server stopped at once, then continued once the kernel reports each stopped
        (waitpid WUNTRACED). Not SIGCONT after the next batch: with every server stopped, that
        batch comes only if it was finished before, which depends on the machine's speed."""
        def fault() -> None:
            running = [s for s in self.servers if s.proc.poll() is None]
            for s in running:
                s.signal(signal.SIGSTOP)
            for s in running:
                os.waitpid(s.proc.pid, os.WUNTRACED)
            for s in running:
                s.signal(signal.SIGCONT)
        return fault

    def stop_all(self) -> None:
        for s in self.servers:
            s.signal(signal.SIGCONT)
            s.stop()


def test_chaos_every_epoch_exactly_once_in_order_same_bytes(spawn, data_dir, tmp_path):
    reference = run([spawn().target])
    per_epoch = len(reference) // EPOCHS
    fleet = Fleet(data_dir / "small", tmp_path / "fleet")
    try:
        faults = {
            2: fleet.kill_restart(0),                      # kill -9 and restart, epoch 0
            per_epoch + 3: fleet.send(signal.SIGSTOP, 1),  # a hung server, epoch 1
            per_epoch + 9: fleet.send(signal.SIGCONT, 1),
            2 * per_epoch + 1: fleet.kill_restart(2, 3),   # two at once, epoch 2
            3 * per_epoch + 4: fleet.send(signal.SIGSTOP, 0, 2),
            3 * per_epoch + 5: fleet.kill_restart(1),      # a kill while two are stopped
            3 * per_epoch + 12: fleet.send(signal.SIGCONT, 0, 2),
            4 * per_epoch + 2: fleet.kill_restart(0, 1, 2, 3),  # all at once, epoch 4
            5 * per_epoch - 1: fleet.kill_restart(3),      # at an epoch boundary
            5 * per_epoch + 6: fleet.stop_all_then_continue(),
        }
        stats: Dict = {}
        chaotic = run(fleet.targets(), faults, stats, batch_deadline=2.0,
                      unavailable_timeout=120.0)
    finally:
        fleet.stop_all()
    assert fleet.restarts == 9
    assert stats["failovers"] >= 5, stats
    assert [b[:3] for b in chaotic] == [b[:3] for b in reference], "order or membership differs"
    assert chaotic == reference, "same samples, different pixels"
    for epoch in range(EPOCHS):
        seen = sorted(i for e, idx, _, _ in chaotic if e == epoch for i in idx)
        assert seen == sorted(set(seen)) and len(seen) == per_epoch * KW["batch_size"]
