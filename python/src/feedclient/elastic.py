"""Resume an epoch at another world size (torchrun elastic jobs).

Each rank's :meth:`Loader.state_dict` records how many batches of its plan it handed to the
caller. :func:`gather_state` collects them from every rank (``torch.distributed``'s
``all_gather_object``) and joins them into one combined state, which :func:`save` writes to one
file. A job of any world size loads it (:func:`load`) and passes it to
``Loader(..., resume=state)`` or :meth:`Loader.load_state_dict`: every rank gets its share of
the samples of the epoch that no rank had consumed, with the pixels and labels they have in any
run. The combining and the split are libfeedclient's (``feed_state_combine``,
``feed_loader_resume``); this module moves bytes.

    state = feedclient.elastic.gather_state(loader)       # every rank calls it
    if dist.get_rank() == 0:
        feedclient.elastic.save(state, "loader.state")
    ...                                                    # after a restart, any world size
    loader = feedclient.Loader(..., resume=feedclient.elastic.load("loader.state"))
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence

from . import _lib

_STATE_VERSION = 1
_FEED_ETOOBIG = -6


def combine(states: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Joins the :meth:`Loader.state_dict` of every rank of one job (any order) into a combined
    state. Raises ValueError naming what does not fit (a missing or repeated rank, states of
    other epochs, datasets, seeds or transforms)."""
    blobs = []
    for i, st in enumerate(states):
        if not isinstance(st, dict) or "rank_state" not in st:
            raise ValueError(f"feedclient.elastic.combine: state {i} is not a Loader.state_dict() "
                             f"of this version (no rank_state)")
        blobs.append(bytes(st["rank_state"]))
    n = len(blobs)
    ptrs = (ctypes.c_void_p * max(n, 1))(*[ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p)
                                           for b in blobs])
    lens = (ctypes.c_size_t * max(n, 1))(*[len(b) for b in blobs])
    why = ctypes.create_string_buffer(256)
    need = ctypes.c_size_t()
    rc = _lib.lib.feed_state_combine(ptrs, lens, n, None, 0, ctypes.byref(need), why, len(why))
    if rc == _FEED_ETOOBIG:
        buf = ctypes.create_string_buffer(need.value)
        rc = _lib.lib.feed_state_combine(ptrs, lens, n, buf, need.value, ctypes.byref(need), why,
                                         len(why))
    if rc:
        raise ValueError(f"feedclient.elastic.combine: {why.value.decode() or _lib.strerror(rc)}")
    return {"version": _STATE_VERSION, "combined": buf.raw[:need.value]}


def gather_state(loader: Any, group: Optional[Any] = None) -> Dict[str, Any]:
    """The combined state of every rank of ``group`` (default: the whole job). A collective:
    every rank calls it at the same step; each gets the same combined state."""
    import torch.distributed as dist

    mine = loader.state_dict()
    states: List[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(states, mine, group=group)
    return combine(states)


def save(state: Dict[str, Any], path: "os.PathLike[str] | str") -> None:
    """Writes a combined state to ``path`` (the library's bytes; replaced atomically)."""
    data = bytes(state["combined"])
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                               prefix=".feedclient-state-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path: "os.PathLike[str] | str") -> Dict[str, Any]:
    """A combined state written by :func:`save`, for ``Loader(..., resume=...)``."""
    with open(path, "rb") as f:
        return {"version": _STATE_VERSION, "combined": f.read()}


def resume_plan(state: Dict[str, Any], rank: int, world: int) -> List[int]:
    """The sample indices ``rank`` of ``world`` gets for the rest of a combined state's epoch,
    in order, before the batch cut (what ``Loader(..., resume=state)`` runs)."""
    blob = bytes(state["combined"])
    why = ctypes.create_string_buffer(256)
    count = ctypes.c_size_t()
    rc = _lib.lib.feed_resume_plan(blob, len(blob), rank, world, None, 0, ctypes.byref(count),
                                   why, len(why))
    out = (ctypes.c_uint64 * max(count.value, 1))()
    if rc == _FEED_ETOOBIG or rc == 0:
        rc = _lib.lib.feed_resume_plan(blob, len(blob), rank, world, out, count.value,
                                       ctypes.byref(count), why, len(why))
    if rc:
        raise ValueError(f"feedclient.elastic.resume_plan: {why.value.decode() or _lib.strerror(rc)}")
    return list(out[:count.value])
