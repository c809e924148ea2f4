"""Exceptions for libfeedclient's FEED_E codes.

Every negative code the library returns becomes an instance of one class
below (all subclasses of :class:`FeedError`); each also derives from the
built-in exception a Python caller would catch for that kind of failure, so
``except ValueError`` catches a bad argument and ``except ConnectionError``
an unavailable fleet. ``FEED_EEOF`` never escapes: it ends iteration.
"""

from __future__ import annotations

from typing import Optional, Sequence

from . import _lib


class FeedError(RuntimeError):
    """A libfeedclient call failed. ``code`` is the FEED_E code, ``name`` its name."""

    def __init__(self, code: int, context: str, detail: Optional[str] = None):
        self.code = code
        self.name = _lib.err_name(code)
        text = f"{context}: {_lib.strerror(code)} ({self.name})"
        if detail:
            text += f": {detail}"
        super().__init__(text)


class InvalidArgumentError(FeedError, ValueError):
    pass


class OutOfMemoryError(FeedError, MemoryError):
    pass


class FeedIOError(FeedError, OSError):
    pass


class NotFoundError(FeedError, LookupError):
    pass


class CorruptError(FeedError):
    pass


class TooBigError(FeedError):
    pass


class UnsupportedError(FeedError):
    pass


class UnavailableError(FeedError, ConnectionError):
    pass


class FeedTimeoutError(FeedError, TimeoutError):
    pass


class ProtocolError(FeedError):
    pass


class CanceledError(FeedError):
    pass


class EndOfEpochError(FeedError):
    pass


class BadSampleError(FeedError):
    """A batch had failed samples under ``bad_sample_policy="fail"``.

    ``indices`` and ``status`` are the batch's sample indices and the server's
    status for each (0 = ok; names from :func:`feedclient.sample_status_name`).
    """

    def __init__(self, code: int, context: str, indices: Sequence[int] = (),
                 status: Sequence[int] = ()):
        self.indices = list(indices)
        self.status = list(status)
        bad = [(i, _lib.sample_status_name(s)) for i, s in zip(self.indices, self.status) if s]
        shown = ", ".join(f"{i}: {s}" for i, s in bad[:8]) + (" ..." if len(bad) > 8 else "")
        super().__init__(code, context, f"{len(bad)} failed samples ({shown})")


class CudaError(FeedError):
    pass


class ResourceExhaustedError(FeedError):
    pass


class StateError(FeedError):
    pass


class AuthError(FeedError, PermissionError):
    """Every server refused the loader's credentials (the token: UNAUTHENTICATED or
    PERMISSION_DENIED); the message carries the server's reason."""


_BY_NAME = {
    "FEED_EINVAL": InvalidArgumentError,
    "FEED_ENOMEM": OutOfMemoryError,
    "FEED_EIO": FeedIOError,
    "FEED_ENOTFOUND": NotFoundError,
    "FEED_ECORRUPT": CorruptError,
    "FEED_ETOOBIG": TooBigError,
    "FEED_EUNSUPPORTED": UnsupportedError,
    "FEED_EUNAVAILABLE": UnavailableError,
    "FEED_ETIMEDOUT": FeedTimeoutError,
    "FEED_EPROTO": ProtocolError,
    "FEED_ECANCELED": CanceledError,
    "FEED_EEOF": EndOfEpochError,
    "FEED_EBADSAMPLE": BadSampleError,
    "FEED_ECUDA": CudaError,
    "FEED_EEXHAUSTED": ResourceExhaustedError,
    "FEED_ESTATE": StateError,
    "FEED_EAUTH": AuthError,
}


def error_class(code: int) -> type:
    """The exception class for a FEED_E code (FeedError for a code this package does not know)."""
    return _BY_NAME.get(_lib.err_name(code), FeedError)


def make_error(code: int, context: str, detail: Optional[str] = None) -> FeedError:
    cls = error_class(code)
    if cls is BadSampleError:
        return BadSampleError(code, context)
    return cls(code, context, detail)
