"""A remote dataset whose location holds secrets (a URL password, a presigned
query's signature and credential) through the Python package: a shard the
object server refuses fails its samples, and neither the exception, the
loader's stats nor the library's log lines (Python logging) hold a secret.
The object server is tests/remote/servers.js (a static HTTP server with Range
support behind a fault proxy, on 127.0.0.1 port 0); the shards are written
by feed-pack from feed-gen-dataset's JPEGs.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import feedclient
from conftest import BUILD, GEN, REPO, Server, make_imagefolder

PACK = BUILD / "server" / "tools" / "feed-pack"
SERVERS_JS = REPO / "tests" / "remote" / "servers.js"
PASSWORD = "planted-Passw0rd"
SIGNATURE = "p1anted5ignature"
CREDENTIAL = "PLANTEDCRED-20260101"
SECRETS = (PASSWORD, SIGNATURE, CREDENTIAL, "X-Amz-")


@pytest.fixture
def object_server(tmp_path: Path):
    node = shutil.which("node")
    if not node or not (SERVERS_JS.parent / "node_modules").is_dir():
        pytest.skip("node or tests/remote/node_modules missing (npm ci in tests/remote)")
    tree = make_imagefolder(tmp_path / "tree", 3, 8, 5)
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run([str(PACK), str(tree), str(data / "shard"), "--format", "tar",
                    "--shard-samples", "8"], check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen([node, str(SERVERS_JS), "--data", str(data), "--bucket", "feed-test"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = proc.stdout.readline().split()
    assert ready and ready[0] == "ready", ready
    ports = dict(kv.split("=") for kv in ready[1:])

    def cmd(line: str) -> None:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().startswith("ok")

    yield int(ports["httpproxy"]), cmd
    proc.stdin.close()
    proc.wait(timeout=30)


def test_no_secret_in_exception_stats_or_log(object_server, tmp_path, caplog):
    port, cmd = object_server
    location = (f"http://user:{PASSWORD}@127.0.0.1:{port}/shard-{{000000..000002}}.tar"
                f"?X-Amz-Credential={CREDENTIAL}&X-Amz-Signature={SIGNATURE}")
    srv = Server(["--dataset", f"remote={location}", "--threads", "1", "--remote-retries", "0"],
                 tmp_path / "feedd")
    try:
        cmd("deny shard-000001.tar")
        caplog.set_level(logging.DEBUG, logger="feedclient")
        with feedclient.Loader([srv.target], "remote", batch_size=24, seed=1, device="cpu",
                               size=32, dtype=torch.uint8, layout="NHWC",
                               bad_sample_policy="fail") as loader:
            with pytest.raises(feedclient.BadSampleError) as err:
                next(iter(loader))
            stats = repr(loader.stats())
        failed = sorted(i for i, s in zip(err.value.indices, err.value.status) if s)
        assert failed == list(range(8, 16))  # the refused shard's samples
        shown = [str(err.value), repr(err.value), stats, caplog.text]
        srv.stop()
        shown.append((tmp_path / "feedd" / "feedd.log").read_text())
        for text in shown:
            for secret in SECRETS:
                assert secret not in text, f"{secret!r} in: {text}"
    finally:
        srv.stop()
