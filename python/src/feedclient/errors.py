"""Exceptions for libfeedclient's FEED_E codes.

Every negative code the library returns becomes an instance of one class
below (all subclasses of :class:`FeedError`); each also derives from the
built-in exception a Python caller would catch for that kind of failure, so
``except ValueError`` catches a bad argument and ``except ConnectionError``
an unavailable fleet. ``FEED_EEOF`` never escapes: it ends iteration.

The servers' side of a failure reaches Python through the library's log (the
C API returns only a code): the loader keeps its last warnings and errors,
and :func:`make_error` puts what they say about each server (its gRPC status
and the server's own text) into the message and into ``servers``.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Sequence

from . import _lib

_GRPC_STATUS = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]
# libfeedclient's per-server lines: "server T: Describe failed (status 5: text)",
# "server T: stream ended (status 14: text)", "server T failed (why); ...".
_SERVER_LINE = re.compile(r"^server (\S+)(?::| failed| refused) ?(.*)$")
_STATUS = re.compile(r"\(status (\d+): (.*)\)$")
# The list may be cut short by the server's message cap: no ")", and its last name partial.
_HAS = re.compile(r"unknown dataset '(.*)' \(this server has: ?([^)]*)(\)?)")


class ServerReason(NamedTuple):
    """What one server answered last: gRPC ``status`` name (None when the line had none) and
    ``reason``, the server's text (or the library's, when no status came back)."""

    status: Optional[str]
    reason: str


def server_reasons(lines: Sequence[str]) -> Dict[str, ServerReason]:
    """The last reason per server target among the library's log lines, oldest first."""
    out: Dict[str, ServerReason] = {}
    for line in lines:
        m = _SERVER_LINE.match(line)
        if not m:
            continue
        target, rest = m.group(1), m.group(2)
        st = _STATUS.search(rest)
        if st:
            code = int(st.group(1))
            name = _GRPC_STATUS[code] if 0 <= code < len(_GRPC_STATUS) else str(code)
            out[target] = ServerReason(name, st.group(2))
        elif target not in out or out[target].status is None:
            out[target] = ServerReason(None, rest.strip("() "))
    return out


class FeedError(RuntimeError):
    """A libfeedclient call failed. ``code`` is the FEED_E code, ``name`` its name; ``servers``
    maps each server target the library reported on to its :class:`ServerReason`, and
    ``detail`` is the library's last logged error (None when there was none)."""

    def __init__(self, code: int, context: str, detail: Optional[str] = None,
                 servers: Optional[Dict[str, ServerReason]] = None):
        self.code = code
        self.name = _lib.err_name(code)
        self.detail = detail
        self.servers: Dict[str, ServerReason] = dict(servers or {})
        text = f"{context}: {_lib.strerror(code)} ({self.name})"
        if detail:
            text += f": {detail}"
        for target, why in self.servers.items():
            if detail and why.reason in detail:
                continue
            text += f"; server {target}: " + (f"{why.status}: " if why.status else "") + why.reason
        super().__init__(text)


class InvalidArgumentError(FeedError, ValueError):
    pass


class OutOfMemoryError(FeedError, MemoryError):
    pass


class FeedIOError(FeedError, OSError):
    pass


class NotFoundError(FeedError, LookupError):
    """No server has the dataset. ``dataset`` is the name asked for (None if no server said)
    and ``available`` the datasets the servers said they have, in the order they listed them."""

    def __init__(self, code: int, context: str, detail: Optional[str] = None,
                 servers: Optional[Dict[str, ServerReason]] = None):
        super().__init__(code, context, detail, servers)
        self.dataset: Optional[str] = None
        self.available: List[str] = []
        for why in self.servers.values():
            m = _HAS.search(why.reason)
            if m:
                self.dataset = m.group(1)
                names = m.group(2).split(",")
                if not m.group(3):
                    names = names[:-1]
                for name in (n.strip() for n in names):
                    if name and name not in self.available:
                        self.available.append(name)


class CorruptError(FeedError):
    pass


class TooBigError(FeedError):
    pass


class UnsupportedError(FeedError):
    pass


class UnavailableError(FeedError, ConnectionError):
    """No server answered in time; ``servers`` says what each one last answered."""


class FeedTimeoutError(FeedError, TimeoutError):
    pass


class ProtocolError(FeedError):
    pass


class CanceledError(FeedError):
    pass


class EndOfEpochError(FeedError):
    pass


class BadSampleError(FeedError):
    """A batch had failed samples under ``bad_sample_policy="fail"``, or no good sample to
    substitute from under ``"substitute"``; ``policy`` says which.

    ``indices`` and ``status`` are the batch's sample indices and the server's
    status for each (0 = ok; names from :func:`feedclient.sample_status_name`).
    """

    def __init__(self, code: int, context: str, indices: Sequence[int] = (),
                 status: Sequence[int] = (), policy: Optional[str] = None):
        self.indices = list(indices)
        self.status = list(status)
        self.policy = policy
        bad = [(i, _lib.sample_status_name(s)) for i, s in zip(self.indices, self.status) if s]
        shown = ", ".join(f"{i}: {s}" for i, s in bad[:8]) + (" ..." if len(bad) > 8 else "")
        why = f"{len(bad)} failed samples ({shown})"
        if policy == "substitute":
            why = f'bad_sample_policy="substitute": no good sample in the batch to substitute ' \
                  f"from; {why}"
        elif policy:
            why = f'bad_sample_policy="{policy}": {why}'
        super().__init__(code, context, why)


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


def make_error(code: int, context: str, detail: Optional[str] = None,
               log: Sequence[str] = ()) -> FeedError:
    """The exception for ``code``; ``detail`` is the library's last error line and ``log`` its
    recent warning and error lines, oldest first (what the servers said comes from them)."""
    cls = error_class(code)
    if cls is BadSampleError:
        return BadSampleError(code, context)
    return cls(code, context, detail, server_reasons(log))
