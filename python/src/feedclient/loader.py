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
there. ``labels`` and ``indices`` are copies the caller owns.

Held batches. While the caller holds the images of ``prefetch`` batches, the
next batch is a copy into fresh memory: the native loader is opened with
``prefetch + 1`` (and ``max_slots + 1``), the extra slot lands the batch that
is copied, and goes back at once. So
collecting batches works as with DataLoader; the copies held at once are
capped by ``held_memory_limit`` bytes (a one-time :class:`HeldBatchesWarning`
when copying starts, ``stats()["copied_batches"]`` and
``["copied_bytes_held"]``), and only past that cap does next() raise
:class:`StateError`, never a silent overwrite. ``close()`` with batches still
referenced closes the native loader once the last of them is freed.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import operator
import os
import warnings
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import _lib
from . import augment as _augment
from ._held import HeldBatchesWarning, _Copies, _CopyRef
from ._native import _FEED_EBADSAMPLE, _BatchRef, _Native, _SlotView, _live_natives, _wait_next
from .errors import BadSampleError, CudaError, StateError, make_error

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
_ROUTING = {"auto": _lib.OWNER_ROUTING_AUTO, "off": _lib.OWNER_ROUTING_OFF,
            "on": _lib.OWNER_ROUTING_ON}
_LANES = {"off": _lib.DECODE_LANE_OFF, "cpu": _lib.DECODE_LANE_CPU, "gpu": _lib.DECODE_LANE_GPU,
          "auto": _lib.DECODE_LANE_AUTO}

_STATE_VERSION = 1
_FEED_EEOF = -12
_FEED_ESTATE = -16
_FEED_ECUDA = -14


def _default_rank_world() -> Tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


_NO_CUDA_HINT = 'pass device="cpu" for the host path'


def _parse_device(device: Union[str, int, torch.device, None]) -> torch.device:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CudaError(_FEED_ECUDA, f"feedclient.Loader(device={device!r})",
                        f"torch sees no CUDA device here; {_NO_CUDA_HINT}")
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

    Held batches: while the caller holds ``prefetch`` batches, further ones
    are copies into fresh memory (one :class:`HeldBatchesWarning`); the copies
    held at once may take up to ``held_memory_limit`` bytes (default 2 GiB),
    past which next() raises :class:`StateError`. ``seed`` is in [0, 2**64).
    Ctrl-C while next() waits raises ``KeyboardInterrupt`` within ~0.1 s.

    Timeouts are in seconds: ``batch_deadline`` (a server silent this long
    while it owes batches, or leaving a keepalive ping unanswered this long,
    is failed over; a slow one never sooner), ``unavailable_timeout`` (no server
    for this long: iteration raises :class:`UnavailableError`),
    ``resolve_interval`` (DNS re-resolution of ``dns:///`` targets),
    ``demand_window`` (0.1 to 3600, default 10: the window over which the loader measures the
    time next() waited and the samples it handed out, and reports both to the servers, which
    size the fleet from them: docs/guide/sizing.md).

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

    ``owner_routing`` (``"auto"``, ``"on"`` or ``"off"``) is the fleet-sharded
    decoded cache: each sample goes to its owning server, which caches it, so
    N servers' caches hold N shares instead of N copies. ``"auto"`` turns it on
    once a server says it caches the dataset (feedd ``--dataset NAME=...,cache=SIDE``);
    ``"off"`` sends every batch whole to whichever server balancing picks.
    The pixels are the same either way.

    ``job`` names the training job this loader belongs to and ``job_weight``
    (1..100) its weight: a server shares its workers between jobs in
    proportion to their weights, not between connections, so an 8-rank job
    and a 1-rank job get equal shares (docs/design/server.md, jobs). Every
    rank of one run must name the same job. ``None`` derives it the same way
    on every rank: ``"run-" + $TORCHELASTIC_RUN_ID`` when set and not
    ``"none"``; else ``"dist-"`` and a digest of ``$MASTER_ADDR``,
    ``$MASTER_PORT``, the dataset and the seed; else ``"proc-"`` and a digest
    of host, process id, dataset and seed. :attr:`job` says which name is in
    use (it labels feedd's ``feedd_job_*`` metrics).

    ``aug_seed`` keys each sample's augmentation (crop, flip, ``augment``) while ``seed`` keys
    the epoch order; ``None`` (default) uses ``seed`` for both, as before. ``share`` names a
    decode-sharing group (the same rules as ``job``): jobs that name the same group for the
    same dataset get each source image decoded once for all of them while it is in a server's
    share window (feedd ``--dataset NAME=PATH,share=SIDE``). A sweep gives its jobs one
    ``seed``, one ``share`` and each its own ``aug_seed`` (docs/design/server.md
    "Shared decode").

    ``decode_lane`` (``"off"``, ``"cpu"``, ``"gpu"`` or ``"auto"``) and ``decode_share``
    (0 to 1) are the decode lane (docs/design/client.md "Decode lane"): that share of each
    epoch's samples, picked by a pure function of (seed, epoch, sample), comes from the servers
    as JPEG bytes, which costs them a read instead of a decode, and is decoded here: ``"cpu"``
    on ``decode_lane_threads`` threads (0: 2, at most 16) with the servers' own engine, the
    same tensors bit for bit; ``"gpu"`` on the GPU's JPEG engines (a CUDA ``device``; pixels
    within the stated tolerance); ``"auto"`` the GPU's when it has them, else off. The log says
    what was decided and why; :meth:`stats` counts ``lane_decoded`` and ``lane_rerequested``.
    ``decode_share_max`` above 0 adapts the share between epochs, from ``decode_share`` up to
    it: it grows while the step waits for the servers and the step's own GPU time has not grown
    by more than 5%, and backs off when it has (docs/design/client.md "The lane's share"); each
    decision is a log line.

    ``resume`` is a state to continue from, as :meth:`load_state_dict` takes: this rank's own
    :meth:`state_dict`, or the combined state of every rank of a job of any world size
    (:mod:`feedclient.elastic`), of which this rank takes its share of the rest of the epoch.
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
        held_memory_limit: int = 2**31,
        bad_sample_policy: str = "substitute",
        batch_deadline: float = 60.0,
        unavailable_timeout: float = 30.0,
        resolve_interval: float = 5.0,
        demand_window: float = 10.0,
        token: Optional[str] = None,
        tls_ca: Union[str, "os.PathLike[str]", None] = None,
        tls_cert: Union[str, "os.PathLike[str]", None] = None,
        tls_key: Union[str, "os.PathLike[str]", None] = None,
        augment: _augment.AugmentSpec = None,
        owner_routing: str = "auto",
        resume: Optional[Dict[str, Any]] = None,
        job: Optional[str] = None,
        job_weight: int = 1,
        aug_seed: Optional[int] = None,
        share: Optional[str] = None,
        decode_lane: str = "off",
        decode_share: float = 0.0,
        decode_lane_threads: int = 0,
        decode_share_max: float = 0.0,
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
        if not isinstance(owner_routing, str) or owner_routing not in _ROUTING:
            raise ValueError(
                f"feedclient.Loader: owner_routing must be one of {list(_ROUTING)}, not {owner_routing!r}")
        if not isinstance(decode_lane, str) or decode_lane not in _LANES:
            raise ValueError(
                f"feedclient.Loader: decode_lane must be one of {list(_LANES)}, not {decode_lane!r}")
        if not 0.0 <= decode_share <= 1.0:
            raise ValueError(f"feedclient.Loader: decode_share must be in [0, 1], not {decode_share}")
        if not 0.0 <= decode_share_max <= 1.0:
            raise ValueError(
                f"feedclient.Loader: decode_share_max must be in [0, 1], not {decode_share_max}")
        decode_lane_threads = operator.index(decode_lane_threads)
        if not 0 <= decode_lane_threads <= 16:
            raise ValueError(
                f"feedclient.Loader: decode_lane_threads must be in [0, 16], not {decode_lane_threads}")
        if not 1 <= prefetch <= 63:
            raise ValueError(f"feedclient.Loader: prefetch must be in [1, 63], not {prefetch}")
        seed = operator.index(seed)
        if not 0 <= seed < 2**64:
            raise ValueError(f"feedclient.Loader: seed must be in [0, 2**64), not {seed}")
        job_weight = operator.index(job_weight)
        if not 1 <= job_weight <= 100:
            raise ValueError(f"feedclient.Loader: job_weight must be in [1, 100], not {job_weight}")
        for name, value in (("job", job), ("share", share)):
            if value is not None and not isinstance(value, str):
                raise TypeError(
                    f"feedclient.Loader: {name} must be a str, not {type(value).__name__}")
        if aug_seed is not None:
            aug_seed = operator.index(aug_seed)
            if not 0 <= aug_seed < 2**64:
                raise ValueError(
                    f"feedclient.Loader: aug_seed must be in [0, 2**64), not {aug_seed}")
        held_memory_limit = operator.index(held_memory_limit)
        if held_memory_limit < 0:
            raise ValueError("feedclient.Loader: held_memory_limit must be >= 0 bytes")
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
        self._held_limit = held_memory_limit
        self._copies = _Copies()
        self._warned_copies = False
        self._batch_bytes = batch_size * out_h * out_w * 3 * _DTYPES[dtype][1]

        cfg = _lib.LoaderConfig()
        _lib.lib.feed_loader_config_init(ctypes.byref(cfg), ctypes.sizeof(cfg))
        self._targets_c = (ctypes.c_char_p * len(targets))(*[t.encode() for t in targets])
        self._dataset_c = dataset.encode()
        cfg.targets = self._targets_c
        cfg.num_targets = len(targets)
        cfg.dataset = self._dataset_c
        self._augment_c = _augment.describe(augment)
        cfg.augment = self._augment_c
        self._job_c = job.encode() if job is not None else None
        cfg.job = self._job_c
        cfg.job_weight = job_weight
        self._share_c = share.encode() if share is not None else None
        cfg.share = self._share_c
        cfg.aug_seed_set = aug_seed is not None
        cfg.aug_seed = aug_seed if aug_seed is not None else 0
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
        # One slot more than the caller may hold at once: the batch copied past prefetch.
        cfg.prefetch = prefetch + 1
        cfg.max_slots = min(max_slots + 1, 512) if max_slots else 0  # 512: the library's most
        cfg.dtype = _DTYPES[dtype][0]
        cfg.layout = _LAYOUTS[layout]
        cfg.mean[:] = list(mean)
        cfg.std[:] = list(std)
        cfg.device = self._device.index if self._device.type == "cuda" else _lib.DEVICE_HOST
        cfg.bad_sample_policy = _POLICIES[bad_sample_policy]
        cfg.owner_routing = _ROUTING[owner_routing]
        cfg.decode_lane = _LANES[decode_lane]
        cfg.decode_share = float(decode_share)
        cfg.decode_lane_threads = decode_lane_threads
        cfg.decode_share_max = float(decode_share_max)
        cfg.batch_deadline_ms = _ms(batch_deadline, "batch_deadline")
        cfg.unavailable_timeout_ms = _ms(unavailable_timeout, "unavailable_timeout")
        cfg.resolve_interval_ms = _ms(resolve_interval, "resolve_interval")
        if not 0.1 <= demand_window <= 3600:
            raise ValueError(
                f"feedclient.Loader: demand_window must be in [0.1, 3600] s, not {demand_window}")
        cfg.demand_window_ms = _ms(demand_window, "demand_window")

        # Read by feed_loader_open; kept alive until it returns.
        self._trust_c = [None if v is None else os.fsencode(v)
                         for v in (token, tls_ca, tls_cert, tls_key)]
        cfg.token, cfg.tls_ca_file, cfg.tls_cert_file, cfg.tls_key_file = self._trust_c

        native = _Native()
        cfg.log_fn = native.log_cb
        ptr = ctypes.c_void_p()
        rc = _lib.lib.feed_loader_open(ctypes.byref(cfg), ctypes.byref(ptr))
        if rc:
            err = native.error(rc, f"feedclient.Loader({targets!r}, {dataset!r})")
            if isinstance(err, CudaError) and self._device.type == "cuda":
                why = (native.last_error or "no GPU path").replace("; use FEED_DEVICE_HOST", "")
                err = CudaError(rc, f"feedclient.Loader(device={device!r})",
                                f"{why}; {_NO_CUDA_HINT}")
            raise err
        native.ptr = ptr.value
        native.fail_policy = bad_sample_policy == "fail"
        _live_natives.add(native)
        self._native = native
        self._config = {
            "dataset": dataset,
            "seed": seed,
            "aug_seed": seed if aug_seed is None else aug_seed,
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
        # Batches per epoch of the normal plan; _len is the plan the next iteration runs, which
        # differs in an epoch resumed at another world size.
        self._normal_len = self._len
        self._dataset_size = _lib.lib.feed_loader_dataset_size(native.ptr)
        self._job = _lib.lib.feed_loader_job(native.ptr).decode()
        self._config["dataset_size"] = self._dataset_size
        # Where the native loader is: (epoch, next batch it hands out).
        self._native_pos = (epoch, 0)
        self._epoch = epoch
        self._resume: Optional[int] = None  # start batch for the next iteration of _epoch
        self._pos = 0  # batches of _epoch handed out by the current (or last) iteration
        self._iter_gen = 0
        if resume is not None:
            self.load_state_dict(resume)

    # -- DataLoader-shaped surface -------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch for this rank (in an epoch resumed at another world size: of the
        rest of the epoch)."""
        return self._len

    @property
    def dataset_size(self) -> int:
        """Samples in the dataset (all ranks)."""
        return self._dataset_size

    @property
    def job(self) -> str:
        """The job name sent to the servers (``job=``, or the derived one)."""
        return self._job

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Use this epoch for the next iteration (DistributedSampler.set_epoch). A position
        loaded by load_state_dict for the same epoch is kept."""
        if epoch != self._epoch:
            self._resume = None
            self._pos = 0
            self._len = self._normal_len
        self._epoch = epoch

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, ...]]:
        native = self._open_native()
        start = self._resume or 0
        self._resume = None
        if self._native_pos != (self._epoch, start):
            native.drop_pending()
            rc = _lib.lib.feed_loader_set_epoch(native.ptr, self._epoch, start)
            if rc:
                raise native.error(rc, f"feedclient.Loader.set_epoch({self._epoch}, {start})")
            self._native_pos = (self._epoch, start)
            self._len = _lib.lib.feed_loader_batches_per_epoch(native.ptr)
        self._pos = start
        self._iter_gen += 1
        return _Iter(self, self._iter_gen)

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is: the next iteration after load_state_dict continues from here, bit
        for bit (the same samples, augmentations and bytes). ``batch`` counts the batches of the
        epoch handed to the caller; ``rank_state`` is the library's record of it, which
        :func:`feedclient.elastic.combine` joins with the other ranks' to resume at another
        world size (taken while the loader is open: a closed loader's state has no
        ``rank_state`` and resumes at the same world only)."""
        batch = self._resume if self._resume is not None else self._pos
        state = {"version": _STATE_VERSION, "epoch": self._epoch, "batch": batch}
        state.update(self._config)
        native = getattr(self, "_native", None)
        if native is None:
            return state  # closed: the same-world position only
        size = ctypes.c_size_t()
        _lib.lib.feed_loader_state(native.ptr, self._epoch, batch, None, 0, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        rc = _lib.lib.feed_loader_state(native.ptr, self._epoch, batch, buf, size.value,
                                        ctypes.byref(size))
        if rc:
            raise native.error(rc, "feedclient.Loader.state_dict")
        state["rank_state"] = buf.raw[:size.value]
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state``: this rank's own :meth:`state_dict` (the same world, rank
        and configuration), or a combined state of every rank of a job of any world size
        (:func:`feedclient.elastic.combine`, :func:`~feedclient.elastic.gather_state`), of which
        this rank takes its share of the rest of the epoch. A state that does not fit raises
        ValueError naming what differs."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"feedclient.Loader: state version {state.get('version')!r} unknown")
        combined = "combined" in state
        if not combined:
            for key, value in self._config.items():
                # A state from before aug_seed: the seed keyed the augmentation.
                default = state.get("seed") if key == "aug_seed" else None
                if state.get(key, default) != value:
                    hint = ("; combine the states of every rank (feedclient.elastic) to resume "
                            "at another world size" if key in ("rank", "world") else "")
                    raise ValueError(
                        f"feedclient.Loader.load_state_dict: {key} is {value!r} here but "
                        f"{state.get(key)!r} in the state; resuming would not repeat the "
                        f"sequence{hint}"
                    )
        native = self._open_native()
        native.drop_pending()
        if combined or "rank_state" in state:
            blob = bytes(state["combined"] if combined else state["rank_state"])
            why = ctypes.create_string_buffer(256)
            rc = _lib.lib.feed_loader_resume(native.ptr, blob, len(blob), why, len(why))
            if rc == -1:  # FEED_EINVAL: the state does not fit
                raise ValueError(f"feedclient.Loader.load_state_dict: {why.value.decode()}")
            if rc:
                raise native.error(rc, "feedclient.Loader.load_state_dict")
            epoch = ctypes.c_uint32()
            _lib.lib.feed_state_epoch(blob, len(blob), ctypes.byref(epoch))
            self._epoch = epoch.value
            self._len = _lib.lib.feed_loader_batches_per_epoch(native.ptr)
            batch = 0 if combined else int(state["batch"])
        else:
            # A state from before rank_state: the same world, start_batch.
            batch = int(state["batch"])
            if not 0 <= batch <= self._normal_len:
                raise ValueError(f"feedclient.Loader.load_state_dict: batch {batch} out of range")
            self._epoch = int(state["epoch"])
            rc = _lib.lib.feed_loader_set_epoch(native.ptr, self._epoch, batch)
            if rc:
                raise native.error(rc, f"feedclient.Loader.set_epoch({self._epoch}, {batch})")
            self._len = self._normal_len
        self._native_pos = (self._epoch, batch)
        self._resume = batch
        self._pos = batch
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
        out["dataset_fingerprint"] = st.dataset_fingerprint.decode(errors="replace")
        servers = []
        for i in range(st.servers_known):
            ss = _lib.ServerStats()
            if _lib.lib.feed_loader_server_stats(native.ptr, i, ctypes.byref(ss),
                                                 ctypes.sizeof(ss)) == 0:
                servers.append({"target": ss.target.decode(), "up": ss.up,
                                "batches": ss.batches, "outstanding": ss.outstanding,
                                "last_status": ss.last_status,
                                "last_error": ss.last_error.decode(errors="replace"),
                                "refused": ss.refused,
                                "fingerprint": ss.fingerprint.decode(errors="replace"),
                                "fingerprint_differs": ss.fingerprint_differs})
        out["servers"] = servers
        with self._copies.mu:
            out["copied_batches"] = self._copies.batches
            out["copied_bytes_held"] = self._copies.bytes_held
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
        copy = native.held >= self._prefetch
        if copy:
            self._check_copy_room()
        rc, bp = _wait_next(native)
        if rc == _FEED_ESTATE:
            gc.collect()  # batches kept alive only by reference cycles
            rc, bp = _wait_next(native)
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
            raise native.error(rc, "feedclient.Loader: next batch")
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
            raise BadSampleError(rc, f"feedclient.Loader: batch {self._pos - 1}", indices, status,
                                 "fail" if native.fail_policy else "substitute")
        if self._device.type == "cuda":
            # Also on the default stream (handle 0: NULL, the legacy stream): the wait orders
            # the step after the batch and marks where the step starts, whose GPU time the
            # demand's wait and the decode lane's share rest on (stats()["steps_timed"]).
            wrc = _lib.lib.feed_loader_stream_wait(native.ptr, bp, ctypes.c_void_p(stream))
            if wrc:
                raise native.error(wrc, "feedclient.Loader: stream wait")
        images = self._images(ref, b.data, b)
        if copy:
            images = self._copy(images, b)
        labels = self._labels(ref, b)
        indices = torch.from_numpy(
            np.ctypeslib.as_array(b.indices, shape=(b.n,)).astype(np.int64))
        if self._with_indices:
            return images, labels, indices
        return images, labels

    def _check_copy_room(self) -> None:
        with self._copies.mu:
            held = self._copies.bytes_held
        if held + self._batch_bytes > self._held_limit:
            raise StateError(
                _FEED_ESTATE, "feedclient.Loader",
                f"the images of {self._prefetch} batches (prefetch, in the loader's "
                f"slots) and copies of {held} bytes are still referenced; another batch of "
                f"{self._batch_bytes} bytes would pass held_memory_limit={self._held_limit} "
                f"bytes: drop references to old batches or raise the cap with "
                f"Loader(..., held_memory_limit=BYTES)")

    def _copy(self, view: torch.Tensor, b: Any) -> torch.Tensor:
        """A copy of the batch in fresh memory, counted until its last tensor is freed; the
        slot under ``view`` goes back once ``view`` is dropped (on the GPU after the copy queued
        on the current stream)."""
        nbytes = view.numel() * view.element_size()
        if not self._warned_copies:
            self._warned_copies = True
            msg = (f"feedclient.Loader: the images of {self._prefetch} batches (prefetch) "
                   f"are still referenced, so further batches are copies into fresh memory "
                   f"({nbytes} bytes each, up to held_memory_limit={self._held_limit} bytes held "
                   f"at once); drop old batches to keep them zero-copy")
            warnings.warn(msg, HeldBatchesWarning, stacklevel=4)
            logger.warning("%s", msg)
        if self._device.type == "cuda":
            buf = torch.empty(nbytes, dtype=torch.uint8, device=self._device)
            ptr = buf.data_ptr()
        else:
            buf = np.empty(nbytes, dtype=np.uint8)
            ptr = buf.ctypes.data
        out = self._images(_CopyRef(self._copies, nbytes, buf), ptr, b)
        out.copy_(view)
        return out

    def _images(self, ref: Any, data: int, b: Any) -> torch.Tensor:
        _, es, typestr = _DTYPES[self._dtype]
        n, c, h, w = b.n, b.c, b.h, b.w
        if self._layout == "NCHW":
            shape, strides = (n, c, h, w), (c * h * w * es, h * w * es, w * es, es)
        elif self._layout == "NHWC":
            shape, strides = (n, h, w, c), (h * w * c * es, w * c * es, c * es, es)
        else:
            shape, strides = (n, c, h, w), (h * w * c * es, es, w * c * es, c * es)
        if self._device.type == "cuda":
            t = torch.as_tensor(_SlotView(ref, data, shape, strides, typestr, True),
                                device=self._device)
        else:
            t = torch.from_numpy(np.asarray(_SlotView(ref, data, shape, strides, typestr, False)))
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
