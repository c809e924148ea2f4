"""feedclient.Loader (libfeedclient) against feedd with a bearer token, TLS
and mutual TLS: the right token and certificates get batches; a refused
token raises AuthError at once, anything else fails with an error that says
why within unavailable_timeout. feed-client-probe and feed-bench with their
token and TLS options, the same way. The certificates are made here by
tests/server/make_test_certs.sh (openssl)."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
import torch

import feedclient
from conftest import BUILD, REPO

TOKEN = "s3cret-token_0123456789"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    subprocess.run([str(REPO / "tests" / "server" / "make_test_certs.sh"), str(d)], check=True)
    return d


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("token") / "token"
    p.write_text(TOKEN + "\n")  # the server strips the line end
    return p


def load(target, **kw):
    """Batches of one epoch, or the exception the loader raised."""
    args = dict(batch_size=16, seed=3, device="cpu", size=32, dtype=torch.uint8, layout="NHWC",
                unavailable_timeout=30.0)
    args.update(kw)
    with feedclient.Loader([target], "small", **args) as loader:
        return sum(images.shape[0] for images, _ in loader)


def refused(target, caplog, timeout=3.0, **kw):
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="feedclient"):
        with pytest.raises(feedclient.FeedError) as e:
            load(target, unavailable_timeout=timeout, **kw)
    return e.value, caplog.text


# A refused token fails at once: a loader that waited this long would hang the test until
# its ctest timeout instead.
NEVER = 3600.0


def test_token(spawn, token_file, caplog, monkeypatch):
    srv = spawn(["--auth-token-file", str(token_file)])
    monkeypatch.delenv("FEED_TOKEN", raising=False)
    err, log = refused(srv.target, caplog, NEVER)
    assert isinstance(err, feedclient.AuthError) and isinstance(err, PermissionError)
    assert "UNAUTHENTICATED" in str(err) and "token" in str(err)
    err, log = refused(srv.target, caplog, NEVER, token="not-the-token")
    assert isinstance(err, feedclient.AuthError)
    assert "UNAUTHENTICATED" in str(err)
    assert load(srv.target, token=TOKEN) == 84
    monkeypatch.setenv("FEED_TOKEN", TOKEN)
    assert load(srv.target) == 84
    # An explicit empty token sends none, whatever the environment says.
    err, _ = refused(srv.target, caplog, NEVER, token="")
    assert "UNAUTHENTICATED" in str(err)


def test_bad_token_refused_before_connecting(spawn):
    srv = spawn()
    with pytest.raises(feedclient.InvalidArgumentError):
        load(srv.target, token="two words")


def test_tls_with_token(spawn, certs, token_file, caplog):
    srv = spawn(["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                 "--auth-token-file", str(token_file)])
    assert load(srv.target, token=TOKEN, tls_ca=certs / "ca.pem") == 84
    err, _ = refused(srv.target, caplog, NEVER, tls_ca=certs / "ca.pem")
    assert isinstance(err, feedclient.AuthError)
    assert "UNAUTHENTICATED" in str(err)
    # Plaintext against the TLS port: a failed handshake is not told from a server that is
    # down (gRPC says UNAVAILABLE for both), so it waits unavailable_timeout.
    err, log = refused(srv.target, caplog, token=TOKEN)
    assert isinstance(err, feedclient.UnavailableError)
    assert "Describe failed" in log
    # A server certificate from a CA the client does not trust.
    err, log = refused(srv.target, caplog, token=TOKEN, tls_ca=certs / "other-ca.pem")
    assert isinstance(err, feedclient.UnavailableError)
    assert "certificate verify failed" in log


def test_tls_against_plaintext_port(spawn, certs, caplog):
    srv = spawn()
    err, log = refused(srv.target, caplog, tls_ca=certs / "ca.pem")
    assert isinstance(err, feedclient.UnavailableError)
    assert "Describe failed" in log


def test_mutual_tls(spawn, certs, caplog):
    srv = spawn(["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                 "--tls-client-ca", str(certs / "ca.pem")])
    ca = certs / "ca.pem"
    assert load(srv.target, tls_ca=ca, tls_cert=certs / "client.pem",
                tls_key=certs / "client.key") == 84
    err, _ = refused(srv.target, caplog, tls_ca=ca)
    assert isinstance(err, feedclient.UnavailableError)
    err, _ = refused(srv.target, caplog, tls_ca=ca, tls_cert=certs / "other-client.pem",
                     tls_key=certs / "other-client.key")
    assert isinstance(err, feedclient.UnavailableError)


def test_unreadable_tls_files(spawn, certs, tmp_path):
    srv = spawn()
    with pytest.raises(feedclient.InvalidArgumentError, match="tls_ca_file"):
        load(srv.target, tls_ca=tmp_path / "missing.pem")
    with pytest.raises(feedclient.InvalidArgumentError, match="go together"):
        load(srv.target, tls_ca=certs / "ca.pem", tls_cert=certs / "client.pem")


# The client tools take the library's trust settings as feedd's option names: the same
# token file, --tls-ca, and --tls-cert/--tls-key for mutual TLS.
PROBE = BUILD / "client" / "feed-client-probe"
BENCH = BUILD / "bench" / "e2e" / "feed-bench"


def tool(argv, env=None):
    """Runs a tool; (exit status, stdout + stderr). Bounded: a hang fails the test."""
    full = dict(os.environ)
    full.pop("FEED_TOKEN", None)
    full.update(env or {})
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=full,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def probe(target, *extra, env=None):
    return tool([PROBE, "--target", target, "--dataset", "small", "--batch", "8", "--size", "32",
                 "--batches", "5", "--dtype", "u8", "--layout", "nhwc",
                 "--unavailable-timeout-ms", "3600000", *extra], env)


def test_probe_with_token_and_tls(spawn, certs, token_file, tmp_path):
    srv = spawn(["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                 "--auth-token-file", str(token_file)])
    ca = ["--tls-ca", certs / "ca.pem"]
    rc, out = probe(srv.target, "--auth-token-file", token_file, *ca)
    assert rc == 0, out
    assert "batches 5" in out
    rc, out = probe(srv.target, *ca, env={"FEED_TOKEN": TOKEN})
    assert rc == 0, out
    # Refused at once (the timeout is an hour), with the server's reason.
    wrong = tmp_path / "wrong"
    wrong.write_text("wrong-token\r\n")
    rc, out = probe(srv.target, "--auth-token-file", wrong, *ca)
    assert rc == 1 and "FEED_EAUTH" in out and "UNAUTHENTICATED" in out, out
    rc, out = probe(srv.target, *ca)
    assert rc == 1 and "FEED_EAUTH" in out, out
    empty = tmp_path / "empty"
    empty.write_text("\n")
    rc, out = probe(srv.target, "--auth-token-file", empty, *ca)
    assert rc == 1 and "empty token" in out, out
    rc, out = probe(srv.target, "--auth-token-file", tmp_path / "missing", *ca)
    assert rc == 1 and "cannot open" in out, out
    assert "--tls-ca" in tool([PROBE, "--help"])[1]


def test_probe_mutual_tls(spawn, certs):
    srv = spawn(["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                 "--tls-client-ca", str(certs / "ca.pem")])
    rc, out = probe(srv.target, "--tls-ca", certs / "ca.pem", "--tls-cert", certs / "client.pem",
                    "--tls-key", certs / "client.key")
    assert rc == 0, out
    rc, out = probe(srv.target, "--tls-ca", certs / "ca.pem", "--tls-cert", certs / "client.pem")
    assert rc == 1 and "go together" in out, out


def bench(target, data_dir, out_dir, *extra):
    return tool([BENCH, "--device", "cpu", "--source", "remote", "--servers", target,
                 "--dataset", "small", "--data", data_dir / "small", "--out", out_dir,
                 "--batch", "8", "--size", "32", "--steps", "3", "--warmup", "1", *extra])


def test_bench_with_token_and_tls(spawn, certs, token_file, data_dir, tmp_path):
    srv = spawn(["--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                 "--auth-token-file", str(token_file)])
    ca = ["--tls-ca", certs / "ca.pem"]
    rc, out = bench(srv.target, data_dir, tmp_path / "ok", "--auth-token-file", token_file, *ca)
    assert rc == 0, out
    assert (tmp_path / "ok" / "summary.csv").exists()
    rc, out = bench(srv.target, data_dir, tmp_path / "refused", *ca)
    assert rc != 0 and "FEED_EAUTH" in out, out
    # Spawned servers get the token file too.
    rc, out = tool([BENCH, "--device", "cpu", "--source", "remote", "--spawn-servers", "1",
                    "--server-threads", "1", "--dataset", "small", "--data", data_dir / "small",
                    "--out", tmp_path / "spawned", "--batch", "8", "--size", "32", "--steps", "3",
                    "--warmup", "1", "--auth-token-file", token_file])
    assert rc == 0, out
    assert "bearer token required" in (tmp_path / "spawned" / "feedd-0.log").read_text()
    # Spawned servers speak plaintext: --tls-ca is for --servers only.
    rc, out = tool([BENCH, "--device", "cpu", "--source", "remote", "--data",
                    data_dir / "small", *ca])
    assert rc == 2 and "--tls-ca needs --servers" in out, out
