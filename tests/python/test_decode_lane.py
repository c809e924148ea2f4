"""feedclient.Loader(decode_lane=...) on the host path against a real feedd: the CPU decode
lane gives the same tensors as the lane off, bit for bit (normalised float32 NCHW and uint8),
over two epochs and on the dataset with a non-JPEG and an empty file; its counters; the
arguments' checks; "auto" without a GPU is off and "gpu" without one is refused; an adapting
share (decode_share_max) keeps its share on the host path."""

from __future__ import annotations

import pytest
import torch

import feedclient


def make(server, dataset="small", **kw):
    args = dict(batch_size=8, seed=3, device="cpu", size=32, with_indices=True)
    args.update(kw)
    return feedclient.Loader([server.target], dataset, **args)


def epochs(loader, count=2):
    """(images, labels, indices) of every batch of `count` epochs, and the loader's stats."""
    out = []
    for epoch in range(count):
        loader.set_epoch(epoch)
        for images, labels, indices in loader:
            out.append((images.clone(), labels.clone(), indices.clone()))
    return out, loader.stats()


def assert_same(a, b):
    assert len(a) == len(b)
    for (ia, la, xa), (ib, lb, xb) in zip(a, b):
        assert torch.equal(xa, xb)
        assert torch.equal(la, lb)
        assert torch.equal(ia, ib)


@pytest.mark.parametrize("dtype,layout", [(torch.float32, "NCHW"), (torch.uint8, "NHWC")])
def test_cpu_lane_same_tensors(server, dtype, layout):
    with make(server, dtype=dtype, layout=layout) as loader:
        off, off_stats = epochs(loader)
    with make(server, dtype=dtype, layout=layout, decode_lane="cpu", decode_share=0.5,
              decode_lane_threads=2) as loader:
        on, stats = epochs(loader)
    assert_same(off, on)
    samples = sum(len(x) for _, _, x in on)
    assert 0 < stats["lane_decoded"] < samples
    assert stats["lane_rerequested"] == 0
    assert off_stats["lane_decoded"] == 0


def test_cpu_lane_bad_samples(server):
    """A non-JPEG (corrupt, found by the lane's decode) and an empty file (EMPTY in the
    encoded reply: asked of the servers again, decoded) as on the network path, substitutes
    and all."""
    kw = dict(dtype=torch.uint8, layout="NHWC")
    with make(server, "bad", **kw) as loader:
        off, off_stats = epochs(loader)
    with make(server, "bad", decode_lane="cpu", decode_share=1.0, **kw) as loader:
        on, stats = epochs(loader)
    assert_same(off, on)
    assert stats["sample_errors"] == off_stats["sample_errors"]
    assert stats["sample_errors"]["empty"] == 2  # once an epoch
    assert stats["lane_rerequested"] == 2
    assert stats["lane_decoded"] == sum(len(x) for _, _, x in on) - 2


def test_lane_arguments(server):
    with pytest.raises(ValueError, match="decode_lane"):
        make(server, decode_lane="fpga")
    with pytest.raises(ValueError, match="decode_share"):
        make(server, decode_lane="cpu", decode_share=1.5)
    with pytest.raises(ValueError, match="decode_lane_threads"):
        make(server, decode_lane="cpu", decode_lane_threads=17)
    with pytest.raises(ValueError, match="decode_share_max"):
        make(server, decode_lane="cpu", decode_share_max=-0.1)
    # The GPU lane needs a CUDA device; auto without one is off.
    with pytest.raises(ValueError):
        make(server, decode_lane="gpu", decode_share=0.5)
    with make(server, decode_lane="auto", decode_share=0.5) as loader:
        _, stats = epochs(loader, 1)
    assert stats["lane_decoded"] == 0


def test_cpu_lane_adapting_share(server):
    # An adapting share reaches the library (the log says so at open) and, with no GPU step
    # time on the host path, keeps its share: the same tensors as the lane off.
    with make(server) as loader:
        off, _ = epochs(loader)
    with make(server, decode_lane="cpu", decode_share=0.5, decode_share_max=1.0) as loader:
        on, stats = epochs(loader)
    assert_same(off, on)
    assert stats["lane_decoded"] > 0
