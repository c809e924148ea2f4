"""ctypes bindings to libfeedclient's public header (feed/client.h).

Only the C API is bound here: the structs mirror the header field for field
(tests/python/test_abi.py checks every offset against the compiled header),
and nothing here plans, schedules or normalises.

Where the library is found, first match wins:
  1. ``$FEEDCLIENT_LIBRARY``: the path of ``libfeedclient.so`` (an override);
  2. a ``libfeedclient.so*`` placed inside this package's folder;
  3. the environment's own prefix (``sys.prefix``: ``cmake --install BUILD
     --prefix $VIRTUAL_ENV``), in ``lib``, ``lib64`` or ``lib/<multiarch>``;
  4. the dynamic loader's search for ``libfeedclient.so.0`` (an installed
     prefix known to ``ldconfig``, ``LD_LIBRARY_PATH``, the rpath);
  5. ``cmake --install``'s default prefix, ``/usr/local`` (which the dynamic
     loader finds only once ``ldconfig`` has run), in the same folders;
  6. the repository's build trees (``build/client/``, where scripts/build.sh
     puts it, and ``build-main/client/``, scripts/main.sh's) when the package
     runs from a checkout (``python/src/feedclient``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import sysconfig
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

# The library version this package is written against: the same major, at
# least this minor (feed_loader_stream_wait came in 0.2, struct sizes in 0.3,
# the token and TLS fields of the config in 0.4, feed_loader_next_timed in 0.5,
# feed_loader_config_init with the job, augment and demand fields in 0.6).
ABI_MAJOR = 0
ABI_MINOR = 6

DEVICE_HOST = -1
DTYPE_UINT8, DTYPE_FP16, DTYPE_BF16, DTYPE_FP32 = 0, 1, 2, 3
LAYOUT_NCHW, LAYOUT_NHWC = 0, 1
BAD_SAMPLE_SUBSTITUTE, BAD_SAMPLE_FAIL = 0, 1
OWNER_ROUTING_AUTO, OWNER_ROUTING_OFF, OWNER_ROUTING_ON = 0, 1, 2
DECODE_LANE_OFF, DECODE_LANE_CPU, DECODE_LANE_GPU, DECODE_LANE_AUTO = 0, 1, 2, 3
TRANSFORM_TRAIN, TRANSFORM_EVAL = 0, 1
SAMPLE_STATUS_COUNT = 8

LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


class Transform(Structure):
    _fields_ = [
        ("mode", c_int),
        ("out_h", c_uint32),
        ("out_w", c_uint32),
        ("scale_min", c_double),
        ("scale_max", c_double),
        ("ratio_min", c_double),
        ("ratio_max", c_double),
        ("flip_prob", c_double),
        ("resize_size", c_uint32),
    ]


class CropBox(Structure):
    _fields_ = [("x", c_uint32), ("y", c_uint32), ("w", c_uint32), ("h", c_uint32)]


class SamplePlan(Structure):
    _fields_ = [("crop", CropBox), ("flip", c_bool)]


class LoaderConfig(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("targets", POINTER(c_char_p)),
        ("num_targets", c_size_t),
        ("dataset", c_char_p),
        ("transform", Transform),
        ("batch_size", c_uint32),
        ("seed", c_uint64),
        ("epoch", c_uint32),
        ("start_batch", c_uint64),
        ("rank", c_uint32),
        ("world", c_uint32),
        ("drop_last", c_bool),
        ("ordered", c_bool),
        ("window_per_server", c_uint32),
        ("prefetch", c_uint32),
        ("max_slots", c_uint32),
        ("dtype", c_int),
        ("layout", c_int),
        ("mean", c_float * 3),
        ("std", c_float * 3),
        ("device", c_int),
        ("bad_sample_policy", c_int),
        ("batch_deadline_ms", c_uint32),
        ("unavailable_timeout_ms", c_uint32),
        ("resolve_interval_ms", c_uint32),
        ("log_fn", LOG_FN),
        ("log_user", c_void_p),
        ("token", c_char_p),
        ("tls_ca_file", c_char_p),
        ("tls_cert_file", c_char_p),
        ("tls_key_file", c_char_p),
        ("owner_routing", c_int),
        ("augment", c_char_p),
        ("demand_window_ms", c_uint32),
        ("job", c_char_p),
        ("job_weight", c_uint32),
        ("aug_seed", c_uint64),
        ("aug_seed_set", c_bool),
        ("share", c_char_p),
        ("decode_lane", c_int),
        ("decode_share", c_double),
        ("decode_lane_threads", c_uint32),
        ("decode_lane_max_bytes", c_uint64),
        ("decode_share_max", c_double),
    ]


class Batch(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("bytes", c_size_t),
        ("labels_device", POINTER(c_int64)),
        ("labels", POINTER(c_int64)),
        ("indices", POINTER(c_uint64)),
        ("status", POINTER(c_uint8)),
        ("n", c_uint32),
        ("c", c_uint32),
        ("h", c_uint32),
        ("w", c_uint32),
        ("dtype", c_int),
        ("layout", c_int),
        ("epoch", c_uint32),
        ("batch_number", c_uint64),
        ("substituted", c_uint32),
        ("wait_ns", c_uint64),
        ("ready_event", c_void_p),
    ]


class LoaderStats(Structure):
    _fields_ = [
        ("batches", c_uint64),
        ("samples", c_uint64),
        ("bytes_received", c_uint64),
        ("wait_ns_total", c_uint64),
        ("wait_ns_max", c_uint64),
        ("failovers", c_uint64),
        ("reissued", c_uint64),
        ("retries", c_uint64),
        ("crc_errors", c_uint64),
        ("sample_errors", c_uint64 * SAMPLE_STATUS_COUNT),
        ("servers_known", c_uint32),
        ("servers_up", c_uint32),
        ("hedged", c_uint64),
        ("dataset_fingerprint", c_char * 65),
        ("fingerprint_refused", c_uint64),
        ("lane_decoded", c_uint64),
        ("lane_rerequested", c_uint64),
        ("steps_timed", c_uint64),
    ]


class ServerStats(Structure):
    _fields_ = [
        ("target", c_char * 128),
        ("up", c_bool),
        ("batches", c_uint64),
        ("outstanding", c_uint32),
        ("last_status", c_int32),
        ("last_error", c_char * 200),
        ("refused", c_bool),
        ("fingerprint", c_char * 65),
        ("fingerprint_differs", c_bool),
    ]


# name: (restype, argtypes)
_PROTOTYPES = {
    "feed_loader_config_init": (c_int, [POINTER(LoaderConfig), c_size_t]),
    "feed_loader_open": (c_int, [POINTER(LoaderConfig), POINTER(c_void_p)]),
    "feed_loader_close": (None, [c_void_p]),
    "feed_loader_next": (c_int, [c_void_p, POINTER(POINTER(Batch))]),
    "feed_loader_next_timed": (c_int, [c_void_p, POINTER(POINTER(Batch)), c_uint32]),
    "feed_loader_release": (c_int, [c_void_p, POINTER(Batch), c_void_p]),
    "feed_loader_stream_wait": (c_int, [c_void_p, POINTER(Batch), c_void_p]),
    "feed_loader_set_epoch": (c_int, [c_void_p, c_uint32, c_uint64]),
    "feed_loader_batches_per_epoch": (c_uint64, [c_void_p]),
    "feed_loader_dataset_size": (c_uint64, [c_void_p]),
    "feed_loader_job": (c_char_p, [c_void_p]),
    "feed_loader_get_stats": (c_int, [c_void_p, POINTER(LoaderStats), c_size_t]),
    "feed_loader_server_stats": (c_int, [c_void_p, c_uint32, POINTER(ServerStats), c_size_t]),
    "feed_loader_state": (
        c_int, [c_void_p, c_uint32, c_uint64, c_void_p, c_size_t, POINTER(c_size_t)]),
    "feed_state_combine": (
        c_int,
        [POINTER(c_void_p), POINTER(c_size_t), c_size_t, c_void_p, c_size_t, POINTER(c_size_t),
         c_char_p, c_size_t],
    ),
    "feed_loader_resume": (c_int, [c_void_p, c_char_p, c_size_t, c_char_p, c_size_t]),
    "feed_state_epoch": (c_int, [c_char_p, c_size_t, POINTER(c_uint32)]),
    "feed_resume_plan": (
        c_int,
        [c_char_p, c_size_t, c_uint32, c_uint32, POINTER(c_uint64), c_size_t, POINTER(c_size_t),
         c_char_p, c_size_t],
    ),
    "feed_client_version": (c_char_p, []),
    "feed_client_version_number": (c_uint32, []),
    "feed_strerror": (c_char_p, [c_int]),
    "feed_err_name": (c_char_p, [c_int]),
    "feed_sample_status_name": (c_char_p, [c_int]),
    "feed_transform_default_train": (None, [POINTER(Transform)]),
    "feed_transform_default_eval": (None, [POINTER(Transform)]),
    "feed_transform_validate": (c_int, [POINTER(Transform), c_char_p, c_size_t]),
    "feed_plan_sample": (
        None,
        [POINTER(Transform), c_uint32, c_uint32, c_uint64, c_uint32, c_uint64, POINTER(SamplePlan)],
    ),
}


def _prefix_libs(prefix: str) -> list[str]:
    """libfeedclient.so.0 where ``cmake --install --prefix prefix`` puts it (GNUInstallDirs:
    lib, or lib64, or lib/<multiarch> for /usr)."""
    dirs = ["lib", "lib64"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.append(os.path.join("lib", multiarch))
    return [p for p in (os.path.join(prefix, d, "libfeedclient.so.0") for d in dirs)
            if os.path.isfile(p)]


def _candidates() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("FEEDCLIENT_LIBRARY")
    if env:
        out.append(env)
    out += sorted(glob.glob(os.path.join(here, "libfeedclient.so*")))
    out += _prefix_libs(sys.prefix)
    out.append("libfeedclient.so.0")
    out += _prefix_libs("/usr/local")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    if os.path.isfile(os.path.join(repo, "client", "include", "feed", "client.h")):
        out += [os.path.join(repo, b, "client", "libfeedclient.so") for b in ("build", "build-main")]
    return out


def _load() -> tuple[ctypes.CDLL, str]:
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        return lib, path
    raise ImportError(
        "feedclient: cannot load libfeedclient: install it with `cmake --install BUILD` (to "
        "/usr/local, or --prefix sys.prefix of this environment), or set FEEDCLIENT_LIBRARY to "
        "its path; tried:\n  " + "\n  ".join(tried)
    )


def _bind(lib: ctypes.CDLL, path: str) -> None:
    missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
    if missing:
        raise ImportError(f"feedclient: {path} lacks {', '.join(missing)} (too old?)")
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    num = lib.feed_client_version_number()
    major, minor = num >> 16, (num >> 8) & 0xFF
    if major != ABI_MAJOR or minor < ABI_MINOR:
        raise ImportError(
            f"feedclient: {path} is version {lib.feed_client_version().decode()}; this package "
            f"needs {ABI_MAJOR}.{ABI_MINOR} or a later {ABI_MAJOR}.x"
        )


lib, path = _load()
_bind(lib, path)


def strerror(code: int) -> str:
    return lib.feed_strerror(code).decode()


def err_name(code: int) -> str:
    return lib.feed_err_name(code).decode()


def sample_status_name(status: int) -> str:
    return lib.feed_sample_status_name(status).decode()
