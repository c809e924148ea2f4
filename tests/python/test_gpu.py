"""feedclient.Loader on the GPU path (skips without a CUDA device): the tensor's
device, dtype and layout; the same values as the host path; zero copies (data
pointers cycle over the loader's slots); ordering on torch's current stream,
including a non-default one; and a slot released on the stream the step used
is not overwritten before that stream has passed the release, even when the
step is still running long after the tensor is dropped; and the steps' own GPU
times measured on the default stream (stats()["steps_timed"])."""

from __future__ import annotations

import pytest
import torch

import feedclient

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (torch.cuda.is_available() is False)")


def make(server, device, **kw):
    args = dict(batch_size=8, seed=5, size=64, dtype=torch.bfloat16, layout="channels_last")
    args.update(kw)
    return feedclient.Loader([server.target], "small", device=device, **args)


def test_device_dtype_layout_and_values(server):
    with make(server, "cpu") as host:
        want = [(i.clone(), l) for i, l in host]
    with make(server, "cuda:0") as loader:
        got = []
        for images, labels in loader:
            assert images.device == torch.device("cuda", 0)
            assert labels.device == torch.device("cuda", 0)
            assert images.dtype == torch.bfloat16
            assert images.shape[1:] == (3, 64, 64)
            assert images.is_contiguous(memory_format=torch.channels_last)
            got.append((images.cpu(), labels.cpu()))
    assert len(got) == len(want)
    for (gi, gl), (wi, wl) in zip(got, want):
        assert torch.equal(gi, wi)
        assert torch.equal(gl, wl)


def test_zero_copy_slots_cycle(server):
    with make(server, "cuda:0", prefetch=2, window_per_server=1) as loader:
        ptrs = {images.data_ptr() for images, _ in loader}
    # Every batch lands in one of a few delivery slots (prefetch + 1 + window): views, never
    # copies.
    assert len(ptrs) <= 2 + 1 + 1


def test_side_stream_ordering(server):
    with make(server, "cpu", dtype=torch.float32, layout="NCHW") as host:
        want = [i.sum().item() for i, _ in host]
    side = torch.cuda.Stream()
    got = []
    with make(server, "cuda:0", dtype=torch.float32, layout="NCHW") as loader:
        with torch.cuda.stream(side):
            for images, _ in loader:
                torch.cuda._sleep(1_000_000)  # the step runs late on this stream
                got.append(images.sum())
        torch.cuda.synchronize()
    assert [g.item() for g in got] == pytest.approx(want, rel=1e-6)


def test_steps_timed_on_the_default_stream(server):
    """The step's own GPU time (the demand's wait and the decode lane's share rest on it) is
    measured on torch's default stream too, not only on a side stream."""
    with make(server, "cuda:0", dtype=torch.float32, layout="NCHW") as loader:
        assert torch.cuda.current_stream().cuda_stream == 0
        steps = 0
        for epoch in range(3):
            loader.set_epoch(epoch)
            for images, _ in loader:
                images.sum()
                torch.cuda.synchronize()  # each step ends before its slot comes round again
                steps += 1
        timed = loader.stats()["steps_timed"]
    assert 0 < timed <= steps


def test_release_waits_for_the_step_stream(server):
    """Drop the tensor while the stream that reads it is still busy: the loader must not
    copy a later batch into that slot before the stream gets there."""
    with make(server, "cpu", dtype=torch.float32, layout="NCHW") as host:
        want = [i.sum().item() for i, _ in host]
    sums = []
    with make(server, "cuda:0", dtype=torch.float32, layout="NCHW", prefetch=2,
              window_per_server=1) as loader:
        for images, _ in loader:
            torch.cuda._sleep(50_000_000)  # ~tens of ms of "step" before the read
            sums.append(images.sum())
            del images  # released on the current stream, behind the read
        torch.cuda.synchronize()
    assert [s.item() for s in sums] == pytest.approx(want, rel=1e-6)


def test_holding_past_prefetch_copies_then_raises_at_the_cap(server):
    with make(server, "cuda:0", prefetch=2, held_memory_limit=0) as loader:
        it = iter(loader)
        a, _ = next(it)
        b, _ = next(it)
        with pytest.raises(feedclient.StateError, match="held_memory_limit"):
            next(it)
        del a, b
        next(it)
    with make(server, "cuda:0", prefetch=2) as loader:
        kept = [images for images, _ in loader]
        assert all(k.is_cuda for k in kept)
        assert loader.stats()["copied_batches"] == len(kept) - 2
