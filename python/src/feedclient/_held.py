"""Batches the caller keeps past ``prefetch``: copies into fresh memory, counted.

:class:`_CopyRef` owns one copied batch's buffer (a numpy array on the host, a
CUDA tensor on the device) behind the tensor handed out, the way a slot's
owner (_BatchRef, _native.py) does for views, and takes its bytes off :class:`_Copies`
when torch frees the last tensor over it, on whatever thread that happens.
"""

from __future__ import annotations

import threading
from typing import Any


class HeldBatchesWarning(UserWarning):
    """The caller holds enough batches that the loader hands out copies (once per loader)."""


class _Copies:
    """Bytes of copied batches alive now; any thread frees them (the last tensor's finalizer)."""

    def __init__(self) -> None:
        self.mu = threading.Lock()
        self.bytes_held = 0
        self.batches = 0

    def add(self, nbytes: int) -> None:
        with self.mu:
            self.bytes_held += nbytes
            self.batches += 1

    def sub(self, nbytes: int) -> None:
        with self.mu:
            self.bytes_held -= nbytes


class _CopyRef:
    """Owns one copied batch's memory and takes its bytes off the count when freed."""

    __slots__ = ("copies", "nbytes", "buf", "__weakref__")

    def __init__(self, copies: _Copies, nbytes: int, buf: Any) -> None:
        self.copies = copies
        self.nbytes = nbytes
        self.buf = buf
        copies.add(nbytes)

    def __del__(self) -> None:
        self.copies.sub(self.nbytes)
