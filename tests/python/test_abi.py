"""The package's ctypes mirror of feed/client.h against the compiled header,
and every function the installed headers declare exported by the library."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import feedclient
from feedclient import _lib
from conftest import BUILD, REPO

STRUCTS = {
    "feed_transform": _lib.Transform,
    "feed_sample_plan": _lib.SamplePlan,
    "feed_loader_config": _lib.LoaderConfig,
    "feed_batch": _lib.Batch,
    "feed_loader_stats": _lib.LoaderStats,
    "feed_server_stats": _lib.ServerStats,
}
CONSTANTS = {
    "FEED_SAMPLE_STATUS_COUNT": _lib.SAMPLE_STATUS_COUNT,
    "FEED_DEVICE_HOST": _lib.DEVICE_HOST,
    "FEED_DTYPE_BF16": _lib.DTYPE_BF16,
    "FEED_LAYOUT_NHWC": _lib.LAYOUT_NHWC,
    "FEED_BAD_SAMPLE_FAIL": _lib.BAD_SAMPLE_FAIL,
    "FEED_TRANSFORM_EVAL": _lib.TRANSFORM_EVAL,
}


def test_struct_layouts_match_the_header():
    out = subprocess.run([str(BUILD / "tests" / "python" / "feed-abi-dump")], check=True,
                         capture_output=True, text=True).stdout
    c = dict(line.rsplit(" ", 1) for line in out.splitlines())
    for cname, cls in STRUCTS.items():
        assert int(c[cname]) == ctypes.sizeof(cls), cname
        fields = {k.split(".", 1)[1]: int(v) for k, v in c.items() if k.startswith(cname + ".")}
        assert set(fields) == {f for f, _ in cls._fields_}, cname
        for name, _ in cls._fields_:
            assert getattr(cls, name).offset == fields[name], f"{cname}.{name}"
    for name, value in CONSTANTS.items():
        assert int(c[name]) == value, name


def test_every_declared_function_is_exported():
    headers = [REPO / "client/include/feed/client.h", REPO / "common/include/feed/errors.h",
               REPO / "common/include/feed/transform.h"]
    declared = set()
    for h in headers:
        text = Path(h).read_text()
        declared |= set(re.findall(r"^FEED_EXPORT [^;(]*?\b(feed_\w+)\(", text, re.M))
        unmarked = re.findall(r"^[a-z][^#;]*\b(feed_\w+)\([^;]*;", text, re.M)
        assert not unmarked, f"{h.name} declares {unmarked} without FEED_EXPORT"

    assert len(declared) >= 20
    missing = [name for name in sorted(declared) if not hasattr(_lib.lib, name)]
    assert not missing, f"declared but not exported by {feedclient.library_path}: {missing}"
