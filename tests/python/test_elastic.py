"""Resuming an epoch at another world size (feedclient.elastic), against two real feedd
processes: 8 ranks consume part of an epoch unevenly, their states are combined and saved, one
server is killed (SIGKILL), 6 ranks resume and consume part, their states are combined again, 8
ranks finish the epoch. Every sample is handed out, none of them in two phases, repeats only
for the padding of the last phase as documented, and every sample's pixels and label are those
of an uninterrupted single-rank run. Then the refusals of states that do not fit."""

from __future__ import annotations

import math
import signal
from collections import defaultdict

import pytest
import torch

import feedclient
from feedclient import elastic

from conftest import CLASSES, PER_CLASS

N = CLASSES * PER_CLASS  # 84
BATCH = 4
SEED = 5
EPOCH = 3


def make(targets, dataset="small", **kw):
    args = dict(batch_size=BATCH, seed=SEED, device="cpu", size=32, dtype=torch.uint8,
                layout="NHWC", with_indices=True, epoch=EPOCH, unavailable_timeout=120.0)
    args.update(kw)
    return feedclient.Loader(targets, dataset, **args)


def consume(loader, batches, out):
    """Takes `batches` batches (None: the rest of the epoch) and records each sample's bytes;
    returns the sample indices in the order they came."""
    it = iter(loader)
    taken = 0
    order = []
    while batches is None or taken < batches:
        try:
            images, labels, indices = next(it)
        except StopIteration:
            break
        for i, idx in enumerate(indices.tolist()):
            out[idx].append((images[i].numpy().tobytes(), int(labels[i])))
            order.append(idx)
        taken += 1
        del images
    return order


def run_phase(targets, world, plan, resume):
    """One job of `world` ranks (one loader each, in turn); rank r takes plan[r] batches.
    Returns what it handed out by sample, and the combined state of its ranks."""
    got = defaultdict(list)
    states = []
    for rank in range(world):
        with make(targets, rank=rank, world=world, resume=resume) as loader:
            if resume is not None:
                # The loader runs its share of the rest of the epoch.
                share = elastic.resume_plan(resume, rank, world)
                assert len(loader) == math.ceil(len(share) / BATCH)
            consume(loader, plan[rank], got)
            states.append(loader.state_dict())
    states.reverse()  # any order
    return got, elastic.combine(states)


def test_resume_8_6_8_with_a_server_killed(spawn, tmp_path):
    a, b = spawn(), spawn()
    targets = [a.target, b.target]
    # The uninterrupted single-rank run: the bytes every sample must have.
    ref = defaultdict(list)
    with make(targets) as loader:
        assert len(consume(loader, None, ref)) == N
    assert sorted(ref) == list(range(N))

    # 8 ranks plan 11 samples each (3 batches, the last short): uneven, one rank finishes
    # (its last sample a padding copy), one consumed nothing.
    got1, combined = run_phase(targets, 8, [0, 1, 2, 0, 1, 2, 0, None], None)
    elastic.save(combined, tmp_path / "after8.state")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=30)
    resume = elastic.load(tmp_path / "after8.state")
    got2, combined = run_phase(targets, 6, [1, 0, 2, 1, 0, 1], resume)
    elastic.save(combined, tmp_path / "after6.state")
    got3, _ = run_phase(targets, 8, [None] * 8, elastic.load(tmp_path / "after6.state"))

    phases = [got1, got2, got3]
    seen = set()
    for got in phases:
        assert not seen & set(got), "a sample consumed before a resume came again after it"
        seen |= set(got)
    assert seen == set(range(N))
    # Repeats only within the last phase, and exactly its padding: what was left, padded to a
    # multiple of 8.
    left = N - len(set(got1) | set(got2))
    repeats3 = sum(len(v) - 1 for v in got3.values())
    assert repeats3 == (8 - left % 8) % 8
    assert all(len(v) == 1 for v in got1.values()) and all(len(v) == 1 for v in got2.values())
    for got in phases:
        for idx, copies in got.items():
            for data, label in copies:
                assert data == ref[idx][0][0], f"sample {idx}: pixels differ"
                assert label == ref[idx][0][1]


def test_same_world_rank_state_in_a_resumed_epoch(spawn):
    """A rank state taken inside an epoch resumed at another world size resumes at the same
    world and rank, inside that epoch's plan."""
    srv = spawn()
    targets = [srv.target]
    _, combined = run_phase(targets, 3, [1, 0, 2], None)
    with make(targets, rank=1, world=2, resume=combined) as loader:
        whole = consume(loader, None, defaultdict(list))
    assert whole == elastic.resume_plan(combined, 1, 2)
    with make(targets, rank=1, world=2, resume=combined) as loader:
        head = consume(loader, 2, defaultdict(list))
        state = loader.state_dict()
    assert state["batch"] == 2
    with make(targets, rank=1, world=2, resume=state) as loader:
        tail = consume(loader, None, defaultdict(list))
    assert head + tail == whole


def test_incompatible_states_are_refused(spawn, data_dir):
    srv = spawn(["--dataset", f"bad={data_dir / 'bad'}"])
    targets = [srv.target]
    _, combined = run_phase(targets, 2, [1, 1], None)
    with make(targets, seed=SEED + 1) as other:
        with pytest.raises(ValueError, match="seed differs"):
            other.load_state_dict(combined)
    with make(targets, dataset="bad") as other:
        with pytest.raises(ValueError, match="dataset differs"):
            other.load_state_dict(combined)
    with make(targets, size=24) as other:
        with pytest.raises(ValueError, match="transform differs"):
            other.load_state_dict(combined)
    with make(targets, augment="RandomErasing(p=0.5)") as other:
        with pytest.raises(ValueError, match="transform differs"):
            other.load_state_dict(combined)
    with make(targets, rank=0, world=2) as loader:
        rank0 = loader.state_dict()
    with make(targets, rank=1, world=3) as loader:
        other_world = loader.state_dict()
    with pytest.raises(ValueError, match="rank 1 of world 2 is missing"):
        elastic.combine([rank0])
    with pytest.raises(ValueError, match="world differs"):
        elastic.combine([rank0, other_world])
    # One rank's own state at another world: it says how to do that.
    with make(targets, rank=0, world=4) as other:
        with pytest.raises(ValueError, match="combine the states of every rank"):
            other.load_state_dict(rank0)


def test_finished_epoch_and_the_next_one(spawn):
    """A combined state of a finished epoch gives every rank of any world an empty rest; the
    epoch after a resumed one is the normal plan of the new world."""
    srv = spawn()
    targets = [srv.target]
    _, done = run_phase(targets, 2, [None, None], None)
    with make(targets, rank=1, world=3, epoch=EPOCH + 1) as fresh:
        normal = consume(fresh, None, defaultdict(list))
    with make(targets, rank=1, world=3, resume=done) as loader:
        assert len(loader) == 0
        assert consume(loader, None, defaultdict(list)) == []
        loader.set_epoch(EPOCH + 1)
        assert len(loader) == math.ceil(math.ceil(N / 3) / BATCH)
        assert consume(loader, None, defaultdict(list)) == normal


def test_state_after_set_epoch_is_the_new_epochs_start(spawn):
    """state_dict() right after set_epoch(next epoch) is that epoch's batch 0, not the position
    the previous epoch ended at."""
    srv = spawn()
    with make([srv.target]) as loader:
        consume(loader, None, defaultdict(list))
        assert loader.state_dict()["batch"] == len(loader)
        loader.set_epoch(EPOCH + 1)
        state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (EPOCH + 1, 0)


_GATHER_JOB = r"""
import sys, torch, torch.distributed as dist, feedclient
from feedclient import elastic
rank, world, rdv, target, out = int(sys.argv[1]), 2, sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method="file://" + rdv, rank=rank, world_size=world)
with feedclient.Loader([target], "small", batch_size=4, seed=5, device="cpu", size=32,
                       dtype=torch.uint8, with_indices=True, epoch=3) as loader:
    it = iter(loader)
    seen = [i for _ in range(rank + 1) for i in next(it)[2].tolist()]
    state = elastic.gather_state(loader)
if rank == 0:
    elastic.save(state, out + ".state")
with open(out + f".{rank}", "w") as f:
    f.write(" ".join(map(str, seen)) + "\n" + state["combined"].hex())
dist.destroy_process_group()
"""


def test_gather_state_over_torch_distributed(spawn, tmp_path):
    """gather_state in a real 2-process gloo job (rank and world from torch.distributed):
    both ranks get the same combined state, and it leaves exactly what they did not consume."""
    import subprocess
    import sys

    srv = spawn()
    script = tmp_path / "job.py"
    script.write_text(_GATHER_JOB)
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path / "rdv"),
                               srv.target, str(out)]) for r in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0
    seen, blobs = [], []
    for r in range(2):
        indices, blob = (tmp_path / f"out.{r}").read_text().split("\n")
        seen += [int(i) for i in indices.split()]
        blobs.append(blob)
    assert blobs[0] == blobs[1]
    state = elastic.load(tmp_path / "out.state")
    assert state["combined"].hex() == blobs[0]
    assert len(seen) == 3 * BATCH
    rest = elastic.resume_plan(state, 0, 1)
    assert sorted(rest + seen) == list(range(N))


def test_state_of_a_closed_loader(spawn):
    """A closed loader still gives its position (as before rank_state); combining it says
    what is missing."""
    srv = spawn()
    loader = make([srv.target])
    consume(loader, 2, defaultdict(list))
    loader.close()
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (EPOCH, 2) and "rank_state" not in state
    with pytest.raises(ValueError, match="no rank_state"):
        elastic.combine([state])
    with make([srv.target]) as resumed:
        resumed.load_state_dict(state)
        assert len(consume(resumed, None, defaultdict(list))) == N - 2 * BATCH
