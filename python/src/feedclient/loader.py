"""feedclient.Loader: a DataLoader-shaped iterable over libfeedclient.

Everything that decides (the epoch plan, the rank split, scheduling,
failover, normalisation) happens in libfeedclient; this module turns its
batches into torch tensors and its codes into exceptions.

Batch lifetime. ``images`` is a view of one of the loader's delivery slots
(device memory on the GPU path, host memory on the host path), with no copy.
The slot goes back to the loader when no tensor refers to that memory any
more — the last view, slice or reshape of ``images`` is freed — and on the
GPU it is released on the CUDA stream that was current when the batch was
handed out, so the copy of a later batch into it waits for the work queued
there. ``labels`` and ``indices`` are copies the caller owns. Holding images
of more than ``prefetch`` batches at once is an error (:class:`StateError`),
never a silent overwrite; ``close()`` with batches still referenced closes
the native loader once the last of them is freed.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import logging
import os
import threading
import weakref
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import _lib
from . import augment as _augment
from .errors import BadSampleError, StateError, make_error

logger = logging.getLogger("feedclient")

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)

_DTYPES = {
    torch.uint8: (_lib.DTYPE_UINT8, 1, "|u1"),
    torch.float16: (_lib.DTYPE_FP16, 2, "<f2"),
    # No array-interface type string for bfloat16: exposed as int16, then viewed.
    torch.bfloat16: (_lib.DTYPE_BF16, 2, "<i2"),
    torch.float32: (_lib.DTYPE_FP32, 4, "<f4"),
}
_LAYOUTS = {"NCHW": _lib.LAYOUT_NCHW, "NHWC": _lib.LAYOUT_NHWC, "channels_last": _lib.LAYOUT_NHWC}
_POLICIES = {"substitute": _lib.BAD_SAMPLE_SUBSTITUTE, "fail": _lib.BAD_SAMPLE_FAIL}
_PY_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}

_STATE_VERSION = 1
_FEED_EEOF = -12
_FEED_EBADSAMPLE = -13
_FEED_ESTATE = -16

_live_natives: "weakref.WeakSet[_Native]" = weakref.WeakSet()


class _Native:
    """One feed_loader*. Closed once close is asked for and no batch is held."""

    def __init__(self) -> None:
        self.ptr: Optional[int] = None
        self.held = 0
        self.close_requested = False
        self.mu = threading.Lock()
        self.last_error: Optional[str] = None
        # The callback object must outlive the native loader, which calls it.
        self.log_cb = _lib.LOG_FN(self._log)

    def _log(self, user: Any, level: int, message: bytes) -> None:
        try:
            text = message.decode("utf-8", "replace")
            logger.log(_PY_LEVELS.get(level, logging.DEBUG), "%s", text)
            if level == 0:
                self.last_error = text
        except Exception:  # a callback from C must not raise
            pass

    def hold(self) -> None:
        with self.mu:
            self.held += 1

    def release(self, batch: Any, stream: int) -> None:
        with self.mu:
            ptr = self.ptr
        if ptr is not None:
            _lib.lib.feed_loader_release(ptr, batch, ctypes.c_void_p(stream or None))
        with self.mu:
            self.held -= 1
            close_now = self.close_requested and self.held == 0
        if close_now:
            self._close_now()

    def request_close(self) -> None:
        with self.mu:
            self.close_requested = True
            close_now = self.held == 0
        if close_now:
            self._close_now()

    def _close_now(self) -> None:
        with self.mu:
            ptr, self.ptr = self.ptr, None
        if ptr is not None:
            _lib.lib.feed_loader_close(ptr)

    def __del__(self) -> None:
        self._close_now()


@atexit.register
def _close_all() -> None:
    # Before the interpreter tears down: a native loader's log thread must not
    # call into a finalising interpreter.
    for native in list(_live_natives):
        native._close_now()


class _BatchRef:
    """Returns one slot to the loader when the last tensor over it is freed."""

    __slots__ = ("native", "batch", "stream", "__weakref__")

    def __init__(self, native: _Native, batch: Any, stream: int) -> None:
        self.native = native
        self.batch = batch
        self.stream = stream

    def __del__(self) -> None:
        self.native.release(self.batch, self.stream)


class _SlotView:
    """Array interface over slot memory (numpy's on the host, CUDA's on the device) that keeps
    the slot's _BatchRef alive. The CUDA one has no stream key: the loader has already made the
    consumer's stream wait for the batch."""

    def __init__(self, ref: _BatchRef, ptr: int, shape: tuple, strides: tuple, typestr: str,
                 cuda: bool):
        self._ref = ref
        interface = {"shape": shape, "strides": strides, "typestr": typestr, "data": (ptr, False),
                     "version": 2 if cuda else 3}
        if cuda:
            self.__cuda_array_interface__ = interface
        else:
            self.__array_interface__ = interface


def _default_rank_world() -> Tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _parse_device(device: Union[str, int, torch.device, None]) -> torch.device:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"feedclient.Loader: device must be cpu or cuda, not {dev}")
    return dev


def _ms(seconds: float, name: str) -> int:
    ms = int(round(seconds * 1000))
    if not 0 < ms < 2**32:
        raise ValueError(f"feedclient.Loader: {name} must be > 0 s and < 49 days")
    return ms


class Loader:
    """Batches of (images, labels[, indices]) from feedd servers, one epoch per iteration.

    Like ``DataLoader`` + ``DistributedSampler``: the epoch is a seeded
    permutation of the dataset, split by ``rank``/``world`` (padded by
    wrapping around so every rank gets ``ceil(n / world)`` samples) and cut
    into ``batch_size`` batches; call :meth:`set_epoch` before each epoch
    (without it every iteration repeats the same epoch). The order is always
    shuffled: ``shuffle=False`` is refused.

    Arguments follow DataLoader's names where they mean the same thing
    (``batch_size``, ``drop_last``); ``transform`` is ``"train"``
    (RandomResizedCrop(size, scale, ratio) + horizontal flip with
    ``flip_prob``) or ``"eval"`` (resize the shorter side to ``resize_size``,
    centre crop ``size``). ``dtype`` other than ``torch.uint8`` normalises with
    ``mean``/``std`` (torchvision's Normalize on [0, 1] pixels). ``layout`` is
    ``"NCHW"``, ``"NHWC"`` (tensor shape N, H, W, C) or ``"channels_last"``
    (shape N, C, H, W in channels-last memory, as ``torch.channels_last``
    models want). ``device`` is ``"cuda[:i]"`` (zero-copy device tensors,
    ordered on torch's current stream) or ``"cpu"``; default: CUDA when
    available. ``rank``/``world`` default to ``torch.distributed``'s when it
    is initialised.

    Timeouts are in seconds: ``batch_deadline`` (a server silent this long
    while it owes batches is failed over), ``unavailable_timeout`` (no server
    for this long: iteration raises :class:`UnavailableError`),
    ``resolve_interval`` (DNS re-resolution of ``dns:///`` targets).

    Trust: ``token`` is the servers' bearer token (feedd ``--auth-token-file``),
    sent on every call; ``None`` takes ``$FEED_TOKEN`` if set. ``tls_ca`` (a
    PEM CA file) turns TLS on for every server (feedd ``--tls-cert``);
    ``tls_cert`` and ``tls_key`` add a client certificate for mutual TLS
    (feedd ``--tls-client-ca``). A server that refuses the token is failed
    (the others serve); when every server refuses it, the constructor or the
    next batch raises :class:`AuthError` at once, with the server's message. A
    failed TLS handshake counts as unavailable, and the error says why.

    ``augment`` names per-sample augmentations the servers make after the
    crop, as torchvision does (see :mod:`feedclient.augment`), e.g.
    ``"torchvision-v2-recipe"``.
    """

    def __init__(
        self,
        targets: Union[str, Sequence[str]],
        dataset: str,
        batch_size: int = 1,
        seed: int = 0,
        *,
        device: Union[str, int, torch.device, None] = None,
        transform: str = "train",
        size: Union[int, Tuple[int, int]] = 224,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        flip_prob: float = 0.5,
        resize_size: int = 256,
        dtype: torch.dtype = torch.float32,
        layout: str = "NCHW",
        mean: Sequence[float] = _IMAGENET_MEAN,
        std: Sequence[float] = _IMAGENET_STD,
        drop_last: bool = False,
        shuffle: bool = True,
        with_indices: bool = False,
        rank: Optional[int] = None,
        world: Optional[int] = None,
        epoch: int = 0,
        ordered: bool = True,
        window_per_server: int = 4,
        prefetch: int = 4,
        max_slots: int = 0,
        bad_sample_policy: str = "substitute",
        batch_deadline: float = 60.0,
        unavailable_timeout: float = 30.0,
        resolve_interval: float = 5.0,
        token: Optional[str] = None,
        tls_ca: Union[str, "os.PathLike[str]", None] = None,
        tls_cert: Union[str, "os.PathLike[str]", None] = None,
        tls_key: Union[str, "os.PathLike[str]", None] = None,
        augment: _augment.AugmentSpec = None,
    ) -> None:
        if isinstance(targets, str):
            targets = [targets]
        targets = list(targets)
        if not shuffle:
            raise ValueError(
                "feedclient.Loader: shuffle=False is not supported: every epoch is a seeded "
                "permutation (pass with_indices=True to see which samples a batch holds)"
            )
        if dtype not in _DTYPES:
            raise ValueError(f"feedclient.Loader: dtype must be one of {list(_DTYPES)}, not {dtype}")
        if layout not in _LAYOUTS:
            raise ValueError(f"feedclient.Loader: layout must be one of {list(_LAYOUTS)}")
        if transform not in ("train", "eval"):
            raise ValueError("feedclient.Loader: transform must be 'train' or 'eval'")
        if bad_sample_policy not in _POLICIES:
            raise ValueError(f"feedclient.Loader: bad_sample_policy must be one of {list(_POLICIES)}")
        if rank is None and world is None:
            rank, world = _default_rank_world()
        elif rank is None or world is None:
            raise ValueError("feedclient.Loader: give both rank and world, or neither")
        out_h, out_w = (size, size) if isinstance(size, int) else tuple(size)
        self._device = _parse_device(device)
        self._dtype = dtype
        self._layout = layout
        self._with_indices = with_indices
        self._prefetch = prefetch

        cfg = _lib.LoaderConfig()
        _lib.lib.feed_loader_config_default(ctypes.byref(cfg))
        self._targets_c = (ctypes.c_char_p * len(targets))(*[t.encode() for t in targets])
        self._dataset_c = dataset.encode()
        cfg.targets = self._targets_c
        cfg.num_targets = len(targets)
        cfg.dataset = self._dataset_c
        self._augment_c = _augment.describe(augment)
        cfg.augment = self._augment_c
        if transform == "eval":
            _lib.lib.feed_transform_default_eval(ctypes.byref(cfg.transform))
            cfg.transform.resize_size = resize_size
        else:
            cfg.transform.scale_min, cfg.transform.scale_max = scale
            cfg.transform.ratio_min, cfg.transform.ratio_max = ratio
            cfg.transform.flip_prob = flip_prob
        cfg.transform.out_h, cfg.transform.out_w = out_h, out_w
        cfg.batch_size = batch_size
        cfg.seed = seed
        cfg.epoch = epoch
        cfg.rank, cfg.world = rank, world
        cfg.drop_last = drop_last
        cfg.ordered = ordered
        cfg.window_per_server = window_per_server
        cfg.prefetch = prefetch
        cfg.max_slots = max_slots
        cfg.dtype = _DTYPES[dtype][0]
        cfg.layout = _LAYOUTS[layout]
        cfg.mean[:] = list(mean)
        cfg.std[:] = list(std)
        cfg.device = self._device.index if self._device.type == "cuda" else _lib.DEVICE_HOST
        cfg.bad_sample_policy = _POLICIES[bad_sample_policy]
        cfg.batch_deadline_ms = _ms(batch_deadline, "batch_deadline")
        cfg.unavailable_timeout_ms = _ms(unavailable_timeout, "unavailable_timeout")
        cfg.resolve_interval_ms = _ms(resolve_interval, "resolve_interval")

        # Read by feed_loader_open; kept alive until it returns.
        self._trust_c = [None if v is None else os.fsencode(v)
                         for v in (token, tls_ca, tls_cert, tls_key)]
        cfg.token, cfg.tls_ca_file, cfg.tls_cert_file, cfg.tls_key_file = self._trust_c

        native = _Native()
        cfg.log_fn = native.log_cb
        ptr = ctypes.c_void_p()
        rc = _lib.lib.feed_loader_open(ctypes.byref(cfg), ctypes.byref(ptr))
        if rc:
            raise make_error(rc, f"feedclient.Loader({targets!r}, {dataset!r})", native.last_error)
        native.ptr = ptr.value
        _live_natives.add(native)
        self._native = native
        self._config = {
            "dataset": dataset,
            "seed": seed,
            "batch_size": batch_size,
            "rank": rank,
            "world": world,
            "drop_last": drop_last,
            "transform": transform,
            "size": [out_h, out_w],
            "scale": list(scale) if transform == "train" else None,
            "ratio": list(ratio) if transform == "train" else None,
            "flip_prob": flip_prob if transform == "train" else None,
            "resize_size": resize_size if transform == "eval" else None,
        }
        self._len = _lib.lib.feed_loader_batches_per_epoch(native.ptr)
        self._dataset_size = _lib.lib.feed_loader_dataset_size(native.ptr)
        self._config["dataset_size"] = self._dataset_size
        # Where the native loader is: (epoch, next batch it hands out).
        self._native_pos = (epoch, 0)
        self._epoch = epoch
        self._resume: Optional[int] = None  # start batch for the next iteration of _epoch
        self._pos = 0  # batches of _epoch handed out by the current (or last) iteration
        self._iter_gen = 0

    # -- DataLoader-shaped surface -------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return self._len

    @property
    def dataset_size(self) -> int:
        """Samples in the dataset (all ranks)."""
        return self._dataset_size

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Use this epoch for the next iteration (DistributedSampler.set_epoch). A position
        loaded by load_state_dict for the same epoch is kept."""
        if epoch != self._epoch:
            self._resume = None
        self._epoch = epoch

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, ...]]:
        native = self._open_native()
        start = self._resume or 0
        self._resume = None
        if self._native_pos != (self._epoch, start):
            rc = _lib.lib.feed_loader_set_epoch(native.ptr, self._epoch, start)
            if rc:
                raise make_error(rc, f"feedclient.Loader.set_epoch({self._epoch}, {start})",
                                 native.last_error)
            self._native_pos = (self._epoch, start)
        self._pos = start
        self._iter_gen += 1
        return _Iter(self, self._iter_gen)

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is: the next iteration after load_state_dict continues from here, bit
        for bit (the same samples, augmentations and bytes)."""
        batch = self._resume if self._resume is not None else self._pos
        state = {"version": _STATE_VERSION, "epoch": self._epoch, "batch": batch}
        state.update(self._config)
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"feedclient.Loader: state version {state.get('version')!r} unknown")
        for key, value in self._config.items():
            if state.get(key) != value:
                raise ValueError(
                    f"feedclient.Loader.load_state_dict: {key} is {value!r} here but "
                    f"{state.get(key)!r} in the state; resuming would not repeat the sequence"
                )
        if not 0 <= state["batch"] <= self._len:
            raise ValueError(f"feedclient.Loader.load_state_dict: batch {state['batch']} out of range")
        self._epoch = int(state["epoch"])
        self._resume = int(state["batch"])
        self._pos = self._resume
        self._iter_gen += 1  # an iterator from before the load is stale

    def stats(self) -> Dict[str, Any]:
        """libfeedclient's counters (feed_loader_stats) and per-server state."""
        native = self._open_native()
        st = _lib.LoaderStats()
        rc = _lib.lib.feed_loader_get_stats(native.ptr, ctypes.byref(st), ctypes.sizeof(st))
        if rc:
            raise make_error(rc, "feedclient.Loader.stats")
        out: Dict[str, Any] = {name: getattr(st, name) for name, _ in _lib.LoaderStats._fields_}
        out["sample_errors"] = {
            _lib.sample_status_name(i): st.sample_errors[i]
            for i in range(1, _lib.SAMPLE_STATUS_COUNT)
        }
        servers = []
        for i in range(st.servers_known):
            ss = _lib.ServerStats()
            if _lib.lib.feed_loader_server_stats(native.ptr, i, ctypes.byref(ss),
                                                 ctypes.sizeof(ss)) == 0:
                servers.append({"target": ss.target.decode(), "up": ss.up,
                                "batches": ss.batches, "outstanding": ss.outstanding})
        out["servers"] = servers
        return out

    def close(self) -> None:
        """Stops the loader. Safe to call twice. Tensors still referenced stay valid: the
        native loader is freed after the last of them."""
        native = getattr(self, "_native", None)
        if native is not None:
            self._native = None
            native.request_close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _open_native(self) -> _Native:
        native = getattr(self, "_native", None)
        if native is None:
            raise StateError(-16, "feedclient.Loader", "the loader is closed")
        return native

    def _next(self, gen: int) -> Tuple[torch.Tensor, ...]:
        if gen != self._iter_gen:
            raise StateError(-16, "feedclient.Loader", "this iterator was replaced by a newer one")
        native = self._open_native()
        bp = ctypes.POINTER(_lib.Batch)()
        rc = _lib.lib.feed_loader_next(native.ptr, ctypes.byref(bp))
        if rc == _FEED_ESTATE:
            gc.collect()  # batches kept alive only by reference cycles
            rc = _lib.lib.feed_loader_next(native.ptr, ctypes.byref(bp))
            if rc == _FEED_ESTATE:
                raise StateError(
                    rc, "feedclient.Loader",
                    f"images of {self._prefetch} batches are still referenced (prefetch="
                    f"{self._prefetch}); drop references to old batches, copy what you keep "
                    f"(images.clone()), or raise prefetch")
        if rc == _FEED_EEOF:
            self._native_pos = (self._epoch, self._len)
            self._pos = self._len
            raise StopIteration
        if rc not in (0, _FEED_EBADSAMPLE):
            raise make_error(rc, "feedclient.Loader: next batch", native.last_error)
        native.hold()
        stream = 0
        if self._device.type == "cuda":
            stream = torch.cuda.current_stream(self._device).cuda_stream
        ref = _BatchRef(native, bp, stream)
        self._native_pos = (self._epoch, self._native_pos[1] + 1)
        self._pos += 1
        b = bp.contents
        if rc == _FEED_EBADSAMPLE:
            indices = [b.indices[i] for i in range(b.n)]
            status = [b.status[i] for i in range(b.n)]
            del ref  # nothing refers to the slot: it goes back now
            raise BadSampleError(rc, f"feedclient.Loader: batch {self._pos - 1}", indices, status)
        if stream:
            wrc = _lib.lib.feed_loader_stream_wait(native.ptr, bp, ctypes.c_void_p(stream))
            if wrc:
                raise make_error(wrc, "feedclient.Loader: stream wait", native.last_error)
        images = self._images(ref, b)
        labels = self._labels(ref, b)
        indices = torch.from_numpy(
            np.ctypeslib.as_array(b.indices, shape=(b.n,)).astype(np.int64))
        if self._with_indices:
            return images, labels, indices
        return images, labels

    def _images(self, ref: _BatchRef, b: Any) -> torch.Tensor:
        _, es, typestr = _DTYPES[self._dtype]
        n, c, h, w = b.n, b.c, b.h, b.w
        if self._layout == "NCHW":
            shape, strides = (n, c, h, w), (c * h * w * es, h * w * es, w * es, es)
        elif self._layout == "NHWC":
            shape, strides = (n, h, w, c), (h * w * c * es, w * c * es, c * es, es)
        else:
            shape, strides = (n, c, h, w), (h * w * c * es, es, w * c * es, c * es)
        if self._device.type == "cuda":
            t = torch.as_tensor(_SlotView(ref, b.data, shape, strides, typestr, True),
                                device=self._device)
        else:
            t = torch.from_numpy(np.asarray(_SlotView(ref, b.data, shape, strides, typestr, False)))
        if self._dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        return t

    def _labels(self, ref: _BatchRef, b: Any) -> torch.Tensor:
        if self._device.type == "cuda":
            ptr = ctypes.cast(b.labels_device, ctypes.c_void_p).value
            view = torch.as_tensor(_SlotView(ref, ptr, (b.n,), (8,), "<i8", True),
                                   device=self._device)
            return view.clone()
        return torch.from_numpy(np.ctypeslib.as_array(b.labels, shape=(b.n,)).copy())


class _Iter:
    def __init__(self, loader: Loader, gen: int) -> None:
        self._loader = loader
        self._gen = gen

    def __iter__(self) -> "_Iter":
        return self

    def __next__(self) -> Tuple[torch.Tensor, ...]:
        return self._loader._next(self._gen)

    def __len__(self) -> int:
        return len(self._loader)
