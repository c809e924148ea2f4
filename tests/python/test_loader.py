"""feedclient.Loader on the host path against real feedd processes: every
sample of an epoch exactly once with its ImageFolder label, resume through
state_dict() byte for byte, the DistributedSampler rank rules, len, set_epoch,
dtype/layout against the library's own uint8 output, batch lifetime (slots
held by tensors, StateError past the copy cap, close with live tensors), the bad
sample policies, the errors, and logging through Python while another
thread waits in next()."""

from __future__ import annotations

import gc
import logging
import math
import re
import signal
import threading
import time
import urllib.request

import pytest
import torch

import feedclient
from conftest import CLASSES, PER_CLASS, Server, class_dirs, copy_tree

N = CLASSES * PER_CLASS


def make(server, dataset="small", **kw):
    args = dict(batch_size=8, seed=7, device="cpu", size=32, dtype=torch.uint8, layout="NHWC")
    args.update(kw)
    return feedclient.Loader([server.target], dataset, **args)


def epoch_batches(loader):
    """(images copy, labels, indices) of every batch of one iteration."""
    out = []
    for images, labels, indices in loader:
        out.append((images.clone(), labels, indices))
    return out


def test_epoch_exactly_once_with_labels(server):
    with make(server, with_indices=True) as loader:
        assert len(loader) == math.ceil(N / 8)
        assert loader.dataset_size == N
        batches = epoch_batches(loader)
    assert len(batches) == len(loader)
    seen = torch.cat([b[2] for b in batches]).tolist()
    assert sorted(seen) == list(range(N))
    for images, labels, indices in batches:
        assert images.shape == (len(indices), 32, 32, 3)
        assert images.dtype == torch.uint8
        # ImageFolder order: classes sorted, files sorted within a class.
        assert (labels == indices // PER_CLASS).all()
    assert batches[-1][0].shape[0] == N % 8


def test_same_epoch_same_bytes_other_epoch_other_order(server):
    with make(server, with_indices=True) as loader:
        loader.set_epoch(3)
        first = epoch_batches(loader)
        loader.set_epoch(3)
        again = epoch_batches(loader)
        loader.set_epoch(4)
        other = epoch_batches(loader)
    for a, b in zip(first, again):
        assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])
    assert torch.cat([b[2] for b in first]).tolist() != torch.cat([b[2] for b in other]).tolist()


@pytest.mark.parametrize("stop_after", [0, 3, 11])
def test_resume_equals_uninterrupted(server, stop_after):
    with make(server, with_indices=True, epoch=2) as loader:
        loader.set_epoch(2)
        whole = epoch_batches(loader)
    with make(server, with_indices=True, epoch=2) as loader:
        loader.set_epoch(2)
        it = iter(loader)
        head = []
        for _ in range(stop_after):
            images, labels, indices = next(it)
            head.append((images.clone(), labels, indices))
            del images
        state = loader.state_dict()
    assert state["epoch"] == 2 and state["batch"] == stop_after
    with make(server, with_indices=True) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(2)  # the usual loop calls it; the loaded position is kept
        tail = epoch_batches(resumed)
        assert resumed.state_dict()["batch"] == len(resumed)
    joined = head + tail
    assert len(joined) == len(whole)
    for a, b in zip(joined, whole):
        assert torch.equal(a[0], b[0])
        assert torch.equal(a[1], b[1])
        assert torch.equal(a[2], b[2])


def test_state_dict_refuses_other_config(server):
    with make(server) as loader:
        state = loader.state_dict()
    with make(server, seed=8) as other:
        with pytest.raises(ValueError, match="seed"):
            other.load_state_dict(state)


@pytest.mark.parametrize("world", [1, 3, 5])
def test_rank_split_follows_distributed_sampler(server, world):
    """DistributedSampler(drop_last=False): the permutation is padded by wrapping around to a
    multiple of world, rank r takes positions r, r + world, ...; every rank gets ceil(n/world)
    samples, ranks are disjoint apart from the padding and together cover the dataset."""
    per_rank = math.ceil(N / world)
    ranks = []
    for rank in range(world):
        with make(server, with_indices=True, rank=rank, world=world) as loader:
            assert len(loader) == math.ceil(per_rank / 8)
            ranks.append(torch.cat([b[2] for b in epoch_batches(loader)]).tolist())
    assert all(len(r) == per_rank for r in ranks)
    padded = [ranks[p % world][p // world] for p in range(per_rank * world)]
    assert sorted(padded[:N]) == list(range(N))
    assert padded[N:] == padded[:per_rank * world - N]


def test_drop_last(server):
    with make(server, drop_last=True, with_indices=True) as loader:
        assert len(loader) == N // 8
        batches = epoch_batches(loader)
    assert all(b[0].shape[0] == 8 for b in batches)
    assert len(batches) == N // 8


def test_normalised_dtypes_and_layouts_match_uint8(server):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    with make(server, layout="NCHW", dtype=torch.uint8) as raw_loader:
        raw = [b[0].clone() for b in raw_loader]
    m = torch.tensor(mean).view(1, 3, 1, 1)
    s = torch.tensor(std).view(1, 3, 1, 1)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for layout in ("NCHW", "NHWC", "channels_last"):
            with make(server, dtype=dtype, layout=layout) as loader:
                for (images, _), r in zip(loader, raw):
                    assert images.dtype == dtype
                    if layout == "NHWC":
                        assert images.shape == (r.shape[0], 32, 32, 3)
                        images = images.permute(0, 3, 1, 2)
                    else:
                        assert images.shape == r.shape
                    if layout == "channels_last":
                        assert images.is_contiguous(memory_format=torch.channels_last)
                    want = ((r.float() / 255.0 - m) / s).to(dtype)
                    assert torch.equal(images, want), (dtype, layout)


def test_slot_lifetime(server):
    """A batch's images stay intact while referenced; with held_memory_limit=0 (no copies),
    holding prefetch batches makes the next one raise, naming the cap."""
    with make(server, prefetch=2, window_per_server=1, held_memory_limit=0) as loader:
        it = iter(loader)
        kept, _ = next(it)
        copy = kept.clone()
        view = kept[1:3]  # a view keeps the slot too
        del kept
        gc.collect()
        held, _ = next(it)
        with pytest.raises(feedclient.StateError, match="held_memory_limit=0"):
            next(it)
        del held
        for _ in range(4):
            next(it)  # slots cycle; the one under `view` is not among them
        assert torch.equal(view, copy[1:3])
        del view
        rest = sum(1 for _ in it)
        assert rest == len(loader) - 6


def test_close_with_live_tensors(server):
    loader = make(server)
    images, _ = next(iter(loader))
    copy = images.clone()
    loader.close()
    loader.close()
    assert torch.equal(images, copy)
    with pytest.raises(feedclient.StateError, match="closed"):
        iter(loader)
    with pytest.raises(feedclient.StateError):
        loader.stats()
    del images


def test_stats(server):
    with make(server) as loader:
        n = sum(b[0].shape[0] for b in loader)
        st = loader.stats()
    assert st["batches"] == len(loader)
    assert st["samples"] == n == N
    # Received includes what was prefetched of the next epoch.
    assert st["bytes_received"] >= N * 32 * 32 * 3 and st["bytes_received"] % (32 * 32 * 3) == 0
    assert st["servers_up"] == 1 and st["servers"][0]["target"] == server.target
    # The dataset's fingerprint as the server described it, and no server refused for it.
    assert re.fullmatch(r"[0-9a-f]{64}", st["dataset_fingerprint"])
    assert st["servers"][0]["fingerprint"] == st["dataset_fingerprint"]
    assert st["servers"][0]["fingerprint_differs"] is False and st["fingerprint_refused"] == 0
    assert set(st["sample_errors"]) >= {"corrupt", "truncated", "not_jpeg", "empty"}


def test_bad_samples_substitute_and_fail(server):
    with make(server, dataset="bad", batch_size=14, with_indices=True) as loader:
        (images, labels, indices), = list(loader)
        st = loader.stats()
    assert images.shape[0] == 14
    assert st["sample_errors"]["not_jpeg"] == 1 and st["sample_errors"]["empty"] == 1
    with make(server, dataset="bad", batch_size=14, bad_sample_policy="fail") as loader:
        with pytest.raises(feedclient.BadSampleError) as err:
            next(iter(loader))
    names = {feedclient.sample_status_name(s) for s in err.value.status if s}
    assert names == {"not_jpeg", "empty"}
    assert sorted(err.value.indices) == list(range(14))


def test_bad_sample_error_names_the_policy_in_force(server):
    # batch_size=1: a batch of one bad sample has no good one to substitute from.
    with make(server, dataset="bad", batch_size=1, bad_sample_policy="substitute") as loader:
        with pytest.raises(feedclient.BadSampleError) as err:
            for _ in loader:
                pass
    text = str(err.value)
    assert "fail policy" not in text and 'bad_sample_policy="substitute"' in text, text
    assert "no good sample" in text, text
    with make(server, dataset="bad", batch_size=14, bad_sample_policy="fail") as loader:
        with pytest.raises(feedclient.BadSampleError) as err:
            next(iter(loader))
    assert 'bad_sample_policy="fail"' in str(err.value), str(err.value)


def test_errors(server):
    with pytest.raises(feedclient.NotFoundError) as e:
        feedclient.Loader([server.target], "no-such-dataset", batch_size=4, device="cpu")
    assert isinstance(e.value, LookupError) and e.value.name == "FEED_ENOTFOUND"
    with pytest.raises(feedclient.UnavailableError) as e:
        feedclient.Loader(["127.0.0.1:1"], "small", batch_size=4, device="cpu",
                          unavailable_timeout=0.5)
    assert isinstance(e.value, ConnectionError)
    with pytest.raises(feedclient.InvalidArgumentError, match="batch_size"):
        feedclient.Loader([server.target], "small", batch_size=0, device="cpu")
    with pytest.raises(ValueError, match="shuffle"):
        feedclient.Loader([server.target], "small", shuffle=False, device="cpu")
    with pytest.raises(ValueError, match="rank"):
        feedclient.Loader([server.target], "small", rank=1, device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(feedclient.CudaError):
            feedclient.Loader([server.target], "small", device="cuda:0")


def test_server_killed_mid_epoch(spawn):
    a, b = spawn(), spawn()
    with feedclient.Loader([a.target, b.target], "small", batch_size=4, seed=3, device="cpu",
                           size=32, dtype=torch.uint8, with_indices=True,
                           window_per_server=2, prefetch=2) as loader:
        seen = []
        for k, (_, _, indices) in enumerate(loader):
            seen += indices.tolist()
            if k == 3:
                a.stop()
    assert sorted(seen) == list(range(N))


def test_log_callback_while_next_waits(server, caplog):
    """A dead second target makes the receivers log all along; the log callback takes the GIL
    while the training thread waits inside next() (GIL released by ctypes)."""
    caplog.set_level(logging.DEBUG, logger="feedclient")
    results = []

    def train():
        with make(server, dataset="small") as loader:
            loader2 = feedclient.Loader([server.target, "127.0.0.1:1"], "small", batch_size=8,
                                        device="cpu", size=32, dtype=torch.uint8)
            with loader2:
                for _ in range(3):
                    results.append(sum(1 for _ in loader2))
            results.append(sum(1 for _ in loader))

    t = threading.Thread(target=train)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "deadlock between the log callback and next()"
    assert results == [len(range(0, N, 8))] * 4
    assert any("127.0.0.1:1" in r.getMessage() for r in caplog.records)


def test_rank_world_from_torch_distributed(server, tmp_path):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0,
                            world_size=1)
    try:
        with make(server) as loader:
            assert loader.state_dict()["rank"] == 0 and loader.state_dict()["world"] == 1
    finally:
        dist.destroy_process_group()


def test_version_and_library():
    assert feedclient.library_version() == feedclient.__version__
    assert feedclient.library_path.endswith((".so", ".so.0")) or ".so." in feedclient.library_path


@pytest.mark.parametrize("routing, dataset, routed", [
    ("on", "small", True), ("off", "cached", False), ("auto", "cached", True),
    ("auto", "small", False)])
def test_owner_routing_reaches_the_library(spawn, data_dir, caplog, routing, dataset, routed):
    """owner_routing as the library takes it: "auto" routes once a server caches the dataset,
    "on" routes without a cache, "off" never; the library says when routing turns on, and the
    epoch is the same whole set of samples either way."""
    caplog.set_level(logging.INFO, logger="feedclient")
    srv = spawn(["--dataset", f"cached={data_dir / 'small'},cache=64", "--cache-bytes", "64M"])
    loader = feedclient.Loader([srv.target], dataset, batch_size=8, device="cpu", size=32,
                               dtype=torch.uint8, with_indices=True, owner_routing=routing)
    seen = sorted(int(i) for _, _, indices in loader for i in indices)
    loader.close()  # delivers every queued log line
    assert seen == list(range(N))
    said = any("owner routing on" in r.getMessage() for r in caplog.records)
    assert said == routed


@pytest.mark.parametrize("bad", ["yes", "ON", 1, None, ["on"], {"on": 1}])
def test_owner_routing_bad_value_named(bad):
    """Any value but the three names is a ValueError naming the keyword, an unhashable one too
    (it was a TypeError about hashing from the table lookup)."""
    with pytest.raises(ValueError, match="owner_routing"):
        feedclient.Loader(["127.0.0.1:1"], "small", owner_routing=bad)


def test_other_dataset_version_refused(data_dir, tmp_path, spawn):
    """A server serving another version of `small` (one image of another length, same name,
    count and classes) is refused by its fingerprint; when only it is left, the exception
    names it and says why."""
    other = copy_tree(data_dir / "small", tmp_path / "small-v2")
    changed = sorted(class_dirs(other)[1].iterdir())[0]
    changed.write_bytes(changed.read_bytes() + b"\0" * 16)  # still decodes; another length
    a = spawn()
    b = Server(["--dataset", f"small={other}", "--threads", "1"], tmp_path / "feedd-b")
    try:
        b.signal(signal.SIGSTOP)  # A answers first and sets the fingerprint
        loader = feedclient.Loader([a.target, b.target], "small", batch_size=8, device="cpu",
                                   unavailable_timeout=2.0)
        b.signal(signal.SIGCONT)
        for _ in range(3000):  # a hang guard: until B has answered Describe
            st = loader.stats()
            sb = next(s for s in st["servers"] if s["target"] == b.target)
            if sb["fingerprint"]:
                break
            time.sleep(0.02)
        assert sb["fingerprint_differs"] and sb["fingerprint"] != st["dataset_fingerprint"]
        assert st["fingerprint_refused"] == 1
        a.stop()
        with pytest.raises(feedclient.UnavailableError) as e:
            for _ in loader:
                pass
        assert b.target in e.value.servers
        assert "fingerprint" in e.value.servers[b.target].reason
        assert st["dataset_fingerprint"] in str(e.value) and sb["fingerprint"] in str(e.value)
        loader.close()
    finally:
        b.stop()


def spawn_with_metrics(spawn, tmp_path):
    """A feedd with its /metrics on a port of its own: (server, metrics URL)."""
    port_file = tmp_path / "metrics.port"
    srv = spawn(["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(port_file)])
    for _ in range(3000):  # hang guard: feedd writes it right after the gRPC port file
        if port_file.exists() and port_file.read_text().strip():
            break
        time.sleep(0.01)
    return srv, f"http://127.0.0.1:{int(port_file.read_text())}/metrics"


def test_demand_window_reaches_feedd(spawn, tmp_path):
    """demand_window= sets the window over which the loader measures its demand: with 0.2 s,
    windows close while the test reads and feedd exports the job's demand; bad values are
    ValueErrors."""
    srv, metrics_url = spawn_with_metrics(spawn, tmp_path)
    pattern = re.compile(r'^feedd_fleet_job_samples_per_second\{job="demand-w"\} (\S+)$', re.M)
    got = None
    with make(srv, job="demand-w", demand_window=0.2) as loader:
        start = time.monotonic()
        while got is None or float(got.group(1)) <= 0:
            assert time.monotonic() - start < 120, "feedd never exported the job's demand"
            for _ in loader:  # a request after a closed window carries the demand
                time.sleep(0.05)
            got = pattern.search(urllib.request.urlopen(metrics_url, timeout=30).read().decode())
    for bad in (0.05, 3601.0):
        with pytest.raises(ValueError, match="demand_window"):
            make(srv, demand_window=bad)


def test_job_name_and_weight_reach_feedd(spawn, tmp_path, monkeypatch):
    """job= and job_weight= go on every stream (feedd counts the samples under the job); the
    default name follows the launcher's environment; bad values are ValueErrors."""
    srv, metrics_url = spawn_with_metrics(spawn, tmp_path)
    with make(srv, job="team-a/sweep:3", job_weight=2) as loader:
        assert loader.job == "team-a/sweep:3"
        images, _ = next(iter(loader))
        assert images.shape[0] == 8
    text = urllib.request.urlopen(metrics_url, timeout=30).read().decode()
    got = re.search(r'^feedd_job_samples_total\{job="team-a/sweep:3"\} (\d+)$', text, re.M)
    assert got and int(got.group(1)) >= 8, text
    for var in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r-17")
    with make(srv) as loader:
        assert loader.job == "run-r-17"
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with make(srv) as a, make(srv, rank=1, world=2) as b:
        assert a.job == b.job and re.fullmatch(r"dist-[0-9a-f]{16}", a.job)
    with pytest.raises(ValueError, match="job"):
        make(srv, job="has space")
    with pytest.raises(ValueError, match="job_weight"):
        make(srv, job_weight=0)
    with pytest.raises(ValueError, match="job_weight"):
        make(srv, job_weight=101)


def _by_index(batches):
    """{sample index: image} and the order of one epoch's (images, labels, indices)."""
    order = torch.cat([b[2] for b in batches]).tolist()
    pixels = {int(i): img for images, _, idx in batches for img, i in zip(images, idx)}
    return order, pixels


def test_aug_seed_keys_pixels_and_seed_the_order(server):
    """aug_seed= keys the servers' crops, seed= the order; None is exactly seed (the pixels of
    a loader without it). A sweep's jobs keep one order with their own crops."""
    runs = {}
    for key, kw in {"plain": {}, "same": {"aug_seed": 7}, "other": {"aug_seed": 8},
                    "seed8": {"seed": 8}}.items():
        with make(server, with_indices=True, **kw) as loader:
            runs[key] = _by_index(epoch_batches(loader))
    (order, plain), (same_order, same), (other_order, other) = (
        runs["plain"], runs["same"], runs["other"])
    assert same_order == order and other_order == order
    assert all(torch.equal(plain[i], same[i]) for i in plain)
    assert sum(not torch.equal(plain[i], other[i]) for i in plain) > len(plain) // 2
    # seed 8 alone crops every sample as (seed 7, aug_seed 8) does, in another order.
    assert runs["seed8"][0] != order
    assert all(torch.equal(other[i], runs["seed8"][1][i]) for i in other)


def test_state_dict_refuses_other_aug_seed(server):
    with make(server, aug_seed=3) as loader:
        state = loader.state_dict()
    assert state["aug_seed"] == 3
    for kw in ({"aug_seed": 4}, {}):
        with make(server, **kw) as other:
            with pytest.raises(ValueError, match="aug_seed"):
                other.load_state_dict(state)
    with make(server, aug_seed=3) as same:
        same.load_state_dict(state)
    # A state from before aug_seed resumes where the aug seed is the seed.
    with make(server) as loader:
        old = {k: v for k, v in loader.state_dict().items() if k != "aug_seed"}
    with make(server, aug_seed=7) as same:
        same.load_state_dict(old)
    with make(server, aug_seed=9) as other:
        with pytest.raises(ValueError, match="aug_seed"):
            other.load_state_dict(old)


def test_share_and_aug_seed_arguments(server):
    with make(server, share="sweep/lr:7", aug_seed=2**64 - 1) as loader:
        images, _ = next(iter(loader))
        assert images.shape[0] == 8
    with pytest.raises(ValueError, match="share"):
        make(server, share="has space")
    with pytest.raises(TypeError, match="share"):
        make(server, share=3)
    with pytest.raises(ValueError, match="aug_seed"):
        make(server, aug_seed=-1)
    with pytest.raises(ValueError, match="aug_seed"):
        make(server, aug_seed=2**64)
