"""feedclient: PyTorch batches from feedd servers, through libfeedclient.

    import feedclient
    loader = feedclient.Loader(["dns:///feedd:7878"], "imagenet", batch_size=256, seed=1,
                               device="cuda:0", dtype=torch.bfloat16, layout="channels_last")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:
            ...

See Loader for the arguments and the batch lifetime rules.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple, Tuple

from . import _lib
from .errors import (
    AuthError,
    BadSampleError,
    CanceledError,
    CorruptError,
    CudaError,
    EndOfEpochError,
    FeedError,
    FeedIOError,
    FeedTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    OutOfMemoryError,
    ProtocolError,
    ResourceExhaustedError,
    ServerReason,
    StateError,
    TooBigError,
    UnavailableError,
    UnsupportedError,
    error_class,
)
from . import elastic
from .loader import HeldBatchesWarning, Loader

__version__ = "0.6.0"
library_path = _lib.path


def library_version() -> str:
    """The loaded libfeedclient's version string."""
    return _lib.lib.feed_client_version().decode()


def sample_status_name(status: int) -> str:
    """Name of a per-sample status as the server reports it ("ok", "corrupt", ...)."""
    return _lib.sample_status_name(status)


class SamplePlan(NamedTuple):
    x: int
    y: int
    w: int
    h: int
    flip: bool


def plan_sample(img_w: int, img_h: int, seed: int, epoch: int, index: int, *,
                transform: str = "train", size: Tuple[int, int] = (224, 224),
                scale: Tuple[float, float] = (0.08, 1.0),
                ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0), flip_prob: float = 0.5,
                resize_size: int = 256) -> SamplePlan:
    """The crop box (source pixels) and flip feedd applies to one sample: the library's own
    feed_plan_sample, the same function every server runs."""
    t = _lib.Transform()
    if transform == "eval":
        _lib.lib.feed_transform_default_eval(ctypes.byref(t))
        t.resize_size = resize_size
    else:
        _lib.lib.feed_transform_default_train(ctypes.byref(t))
        t.scale_min, t.scale_max = scale
        t.ratio_min, t.ratio_max = ratio
        t.flip_prob = flip_prob
    t.out_h, t.out_w = size
    msg = ctypes.create_string_buffer(128)
    rc = _lib.lib.feed_transform_validate(ctypes.byref(t), msg, len(msg))
    if rc:
        raise error_class(rc)(rc, "feedclient.plan_sample", msg.value.decode())
    p = _lib.SamplePlan()
    _lib.lib.feed_plan_sample(ctypes.byref(t), img_w, img_h, seed, epoch, index, ctypes.byref(p))
    return SamplePlan(p.crop.x, p.crop.y, p.crop.w, p.crop.h, bool(p.flip))


__all__ = [
    "Loader", "HeldBatchesWarning", "elastic", "SamplePlan", "plan_sample", "library_version",
    "library_path", "sample_status_name",
    "FeedError", "InvalidArgumentError", "OutOfMemoryError", "FeedIOError", "NotFoundError",
    "CorruptError", "TooBigError", "UnsupportedError", "UnavailableError", "FeedTimeoutError",
    "ProtocolError", "CanceledError", "EndOfEpochError", "BadSampleError", "CudaError",
    "ResourceExhaustedError", "StateError", "AuthError", "ServerReason", "error_class",
]
