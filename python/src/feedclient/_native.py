"""The native loader handle under feedclient.Loader: one feed_loader* and who may close it.

A :class:`_Native` owns the pointer, the log callback the library calls (from its log thread)
and the count of batches whose slots Python still holds; the pointer is closed once close is
asked for and the last slot is back, never from the library's own log thread. A
:class:`_BatchRef` is one held slot and :class:`_SlotView` the array interface that keeps it
alive under a tensor. :func:`_wait_next` takes the next batch in slices so Ctrl-C is seen.
Loader (loader.py) is the only user.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import logging
import threading
import weakref
from typing import Any, Optional, Tuple

from . import _lib
from .errors import FeedError, make_error

logger = logging.getLogger("feedclient")

_PY_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}

_FEED_EBADSAMPLE = -13
_FEED_ETIMEDOUT = -9
# next() waits in slices this long, so Ctrl-C (KeyboardInterrupt) is seen between them.
_WAIT_SLICE_MS = 100

_live_natives: "weakref.WeakSet[_Native]" = weakref.WeakSet()
# in_log is True on a thread while it runs a log callback: the library's log thread, which
# feed_loader_close joins, so a loader finalised there is closed from another thread.
_tls = threading.local()


class _Native:
    """One feed_loader*. Closed once close is asked for and no batch is held."""

    def __init__(self) -> None:
        self.ptr: Optional[int] = None
        self.held = 0
        self.close_requested = False
        self.mu = threading.Lock()
        self.last_error: Optional[str] = None
        # The library's recent warnings and errors: what the servers said, for exceptions.
        self.recent: "collections.deque[str]" = collections.deque(maxlen=32)
        # The callback object must outlive the native loader, which calls it.
        self.log_cb = _lib.LOG_FN(self._log)
        # A batch the library handed over whose hand-over to the caller an exception (Ctrl-C)
        # cut: the next next() hands it out, so no batch is lost or repeated.
        self.pending: Optional[Any] = None
        self.fail_policy = False

    def _log(self, user: Any, level: int, message: bytes) -> None:
        _tls.in_log = True
        try:
            text = message.decode("utf-8", "replace")
            logger.log(_PY_LEVELS.get(level, logging.DEBUG), "%s", text)
            if level == 0:
                self.last_error = text
            if level <= 1:
                self.recent.append(text)
        except Exception:  # a callback from C must not raise
            pass
        finally:
            _tls.in_log = False

    def drop_pending(self) -> None:
        if self.pending is not None:
            _lib.lib.feed_loader_release(self.ptr, self.pending, None)
            self.pending = None

    def error(self, rc: int, context: str) -> FeedError:
        """The exception for rc, with the library's last error and what servers said."""
        return make_error(rc, context, self.last_error, list(self.recent))

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
        if ptr is None:
            return
        if getattr(_tls, "in_log", False):
            # feed_loader_close joins the log thread: never from that thread itself. The
            # callback object stays alive with the closing thread until close returns.
            threading.Thread(target=_close_native, args=(ptr, self.log_cb),
                             name="feedclient-close", daemon=True).start()
        else:
            _lib.lib.feed_loader_close(ptr)

    def __del__(self) -> None:
        self._close_now()


def _close_native(ptr: int, log_cb: Any) -> None:
    _lib.lib.feed_loader_close(ptr)


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

    def __init__(self, ref: Any, ptr: int, shape: tuple, strides: tuple, typestr: str,
                 cuda: bool):
        self._ref = ref
        interface = {"shape": shape, "strides": strides, "typestr": typestr, "data": (ptr, False),
                     "version": 2 if cuda else 3}
        if cuda:
            self.__cuda_array_interface__ = interface
        else:
            self.__array_interface__ = interface


def _wait_next(native: _Native) -> Tuple[int, Any]:
    """feed_loader_next in slices: Python runs its signal handlers between them, so Ctrl-C
    raises KeyboardInterrupt while the loader waits (the loader stays usable and closable).
    Each slice releases the GIL. Python checks for signals right after the call returns, so
    Ctrl-C may cut a slice that handed a batch over: that batch is kept for the next call."""
    if native.pending is not None:
        bp, native.pending = native.pending, None
        b = bp.contents
        bad = native.fail_policy and any(b.status[i] for i in range(b.n))
        return (_FEED_EBADSAMPLE if bad else 0), bp
    bp = ctypes.POINTER(_lib.Batch)()
    try:
        while True:
            rc = _lib.lib.feed_loader_next_timed(native.ptr, ctypes.byref(bp), _WAIT_SLICE_MS)
            if rc != _FEED_ETIMEDOUT:
                return rc, bp
    except BaseException:
        if bp:
            native.pending = bp
        raise
