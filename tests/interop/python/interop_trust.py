#!/usr/bin/python3
"""Interop test of feedd's trust options with Debian's python3-grpcio, which
shares no code with the project: the bearer token on Describe, Stream and
unknown methods (none, wrong, right), Health open without it, TLS and mutual
TLS (certificates made here by tests/server/make_test_certs.sh with openssl),
the plaintext Health-only port beside a TLS one, plaintext against TLS and
TLS against plaintext, the wrong CA, the metrics token, the same options
from a --config file, and the options feedd refuses at start. Every failure must come back as a status within the call's
deadline, not as a hang.

usage: interop_trust.py FEEDD GEN_DATASET PROTO_DIR
Exits 0 on success, 1 with a message on failure.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import grpc

from feedd_interop import check, protos

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_CERTS = os.path.join(HERE, "..", "..", "server", "make_test_certs.sh")
TOKEN = "interop-token.0123456789"
DEADLINE = 20  # seconds: a call that hangs ends DEADLINE_EXCEEDED, which no check expects


class Feedd:
    def __init__(self, feedd, tmp, name, args):
        self.dir = os.path.join(tmp, name)
        os.mkdir(self.dir)
        port_file = os.path.join(self.dir, "port")
        mport_file = os.path.join(self.dir, "mport")
        self.log = os.path.join(self.dir, "log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [feedd, "--listen", "127.0.0.1:0", "--port-file", port_file,
                 "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", mport_file,
                 "--threads", "1", "--log-level", "warn"] + args,
                stdout=log, stderr=subprocess.STDOUT)
        while not (os.path.exists(mport_file) and os.path.exists(port_file)):
            if self.proc.poll() is not None:
                raise AssertionError("%s: feedd exited: %s" % (name, open(self.log).read()))
            time.sleep(0.01)
        self.target = "127.0.0.1:%d" % int(open(port_file).read())
        self.metrics_port = int(open(mport_file).read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            check(self.proc.wait() == 0, "feedd exit status after SIGTERM")


def refused_at_start(feedd, args, needle, what):
    r = subprocess.run([feedd, "--listen", "127.0.0.1:0", "--threads", "1"] + args,
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    check(r.returncode != 0 and needle in out,
          "%s: exit %d, output %r, want a failure naming %r" % (what, r.returncode, out, needle))


class Calls:
    """Describe, Health, one stream batch and an unknown method over one channel."""

    def __init__(self, channel, pb):
        self.pb = pb
        feed_pb2, health_pb2 = pb
        self.describe_rpc = channel.unary_unary(
            "/feed.v1.Feed/Describe", request_serializer=feed_pb2.DescribeRequest.SerializeToString,
            response_deserializer=feed_pb2.DescribeResponse.FromString)
        self.health_rpc = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)
        self.stream_rpc = channel.stream_stream(
            "/feed.v1.Feed/Stream", request_serializer=feed_pb2.BatchRequest.SerializeToString,
            response_deserializer=feed_pb2.Batch.FromString)
        self.other_rpc = channel.unary_unary("/feed.v1.Feed/NoSuchMethod",
                                             request_serializer=bytes, response_deserializer=bytes)

    @staticmethod
    def _md(token):
        return None if token is None else [("authorization", token)]

    def describe(self, token=None):
        r = self.describe_rpc(self.pb[0].DescribeRequest(), timeout=DEADLINE,
                              metadata=self._md(token))
        return [d.name for d in r.datasets]

    def health(self, token=None):
        return self.health_rpc(self.pb[1].HealthCheckRequest(), timeout=DEADLINE,
                               metadata=self._md(token)).status

    def stream(self, token=None):
        feed_pb2 = self.pb[0]
        spec = feed_pb2.TransformSpec(mode=feed_pb2.TRANSFORM_MODE_TRAIN, out_height=32,
                                      out_width=32)
        req = feed_pb2.BatchRequest(open=feed_pb2.SessionOpen(dataset="d", transform=spec),
                                    batch_id=1, epoch=0, indices=[0, 1])
        got = list(self.stream_rpc(iter([req]), timeout=DEADLINE, metadata=self._md(token)))
        return [len(b.data) for b in got]

    def other(self, token=None):
        return self.other_rpc(b"", timeout=DEADLINE, metadata=self._md(token))


def expect(fn, code, needle, what):
    try:
        fn()
    except grpc.RpcError as e:
        check(e.code() == code and needle in (e.details() or ""),
              "%s: got %s %r, want %s with %r" % (what, e.code(), e.details(), code, needle))
        return
    check(False, "%s: succeeded, want %s" % (what, code))


def token_checks(calls, prefix):
    bearer = "Bearer " + TOKEN
    unauth = grpc.StatusCode.UNAUTHENTICATED
    for name, fn in [("Describe", calls.describe), ("Stream", calls.stream),
                     ("unknown method", calls.other)]:
        expect(lambda: fn(), unauth, "Bearer", "%s: %s without a token" % (prefix, name))
        for wrong in ["Bearer nope", "Bearer " + TOKEN + "x", "Bearer " + TOKEN[:-1], TOKEN,
                      "Basic " + TOKEN]:
            expect(lambda: fn(wrong), unauth, "Bearer",
                   "%s: %s with %r" % (prefix, name, wrong))
    check(calls.describe(bearer) == ["d"], prefix + ": Describe with the token")
    check(calls.describe("bearer " + TOKEN) == ["d"], prefix + ": the scheme in any case")
    check(calls.stream(bearer) == [2 * 32 * 32 * 3], prefix + ": a batch with the token")
    expect(lambda: calls.other(bearer), grpc.StatusCode.UNIMPLEMENTED, "",
           prefix + ": unknown method with the token")
    serving = calls.pb[1].HealthCheckResponse.SERVING
    check(calls.health() == serving, prefix + ": Health without a token")
    check(calls.health("Bearer nope") == serving, prefix + ": Health with a wrong token")


def metrics_status(port, token):
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port)
    if token is not None:
        req.add_header("Authorization", token)
    try:
        with urllib.request.urlopen(req, timeout=DEADLINE) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def main():
    feedd, gen, proto_dir = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="feedd-interop-trust.")
    servers = []
    try:
        feed_pb2, health_pb2 = protos(proto_dir, tmp, "feed", "health")
        pb = (feed_pb2, health_pb2)

        certs = os.path.join(tmp, "certs")
        subprocess.run([MAKE_CERTS, certs], check=True)
        crt = lambda name: os.path.join(certs, name)
        pem = lambda name: open(crt(name), "rb").read()
        ds = os.path.join(tmp, "ds")
        subprocess.run([gen, ds, "--classes", "2", "--per-class", "3", "--seed", "5"], check=True,
                       stdout=subprocess.DEVNULL)
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        data = ["--dataset", "d=" + ds]

        def start(name, args):
            s = Feedd(feedd, tmp, name, data + args)
            servers.append(s)
            return s

        # Token over plaintext, and the metrics token.
        plain = start("plain-token", ["--auth-token-file", token_file,
                                      "--metrics-token-file", token_file])
        token_checks(Calls(grpc.insecure_channel(plain.target), pb), "plaintext")
        for bad in [None, "Bearer nope", TOKEN]:
            status, _ = metrics_status(plain.metrics_port, bad)
            check(status == 401, "metrics with %r: HTTP %d, want 401" % (bad, status))
        status, body = metrics_status(plain.metrics_port, "Bearer " + TOKEN)
        check(status == 200 and "feedd_unauthenticated_total" in body,
              "metrics with the token: HTTP %d" % status)

        # TLS with a token, all from a --config file.
        conf = os.path.join(tmp, "feedd.conf")
        hport_file = os.path.join(tmp, "hport")
        with open(conf, "w") as f:
            f.write("tls-cert = %s\ntls-key = %s\nauth-token-file = %s\n"
                    "health-listen = 127.0.0.1:0\nhealth-port-file = %s\n"
                    % (crt("server.pem"), crt("server.key"), token_file, hport_file))
        tls = start("tls-token", ["--config", conf])
        # The plaintext Health port beside the TLS one: Health, and nothing else.
        probe = Calls(grpc.insecure_channel("127.0.0.1:%d" % int(open(hport_file).read())), pb)
        check(probe.health() == health_pb2.HealthCheckResponse.SERVING,
              "Health on the plaintext health port")
        for name, fn in [("Describe", probe.describe), ("Stream", probe.stream),
                         ("unknown method", probe.other)]:
            expect(lambda: fn("Bearer " + TOKEN), grpc.StatusCode.UNAUTHENTICATED,
                   "Health only", "%s with the token on the plaintext health port" % name)
        tls_calls = Calls(grpc.secure_channel(tls.target, grpc.ssl_channel_credentials(
            pem("ca.pem"))), pb)
        token_checks(tls_calls, "TLS")
        unavailable = grpc.StatusCode.UNAVAILABLE
        bearer = "Bearer " + TOKEN
        expect(lambda: Calls(grpc.insecure_channel(tls.target), pb).describe(bearer),
               unavailable, "", "plaintext client against the TLS port")
        expect(lambda: Calls(grpc.insecure_channel(tls.target), pb).health(),
               unavailable, "", "plaintext Health against the TLS port")
        expect(lambda: Calls(grpc.secure_channel(plain.target, grpc.ssl_channel_credentials(
            pem("ca.pem"))), pb).describe(bearer), unavailable, "",
               "TLS client against the plaintext port")
        other = Calls(grpc.secure_channel(tls.target, grpc.ssl_channel_credentials(
            pem("other-ca.pem"))), pb)
        expect(lambda: other.describe(bearer), unavailable, "certificate verify failed",
               "a server certificate from a CA the client does not trust")
        # A server presenting another CA's certificate to a client that trusts ours.
        impostor = start("impostor", ["--tls-cert", crt("other-server.pem"),
                                      "--tls-key", crt("other-server.key")])
        expect(lambda: Calls(grpc.secure_channel(impostor.target, grpc.ssl_channel_credentials(
            pem("ca.pem"))), pb).describe(), unavailable, "certificate verify failed",
               "a server whose certificate comes from the wrong CA")

        # Mutual TLS: a client certificate from our CA, none, or another CA's.
        mtls = start("mtls", ["--tls-cert", crt("server.pem"), "--tls-key", crt("server.key"),
                              "--tls-client-ca", crt("ca.pem")])
        good = grpc.ssl_channel_credentials(pem("ca.pem"), pem("client.key"), pem("client.pem"))
        check(Calls(grpc.secure_channel(mtls.target, good), pb).describe() == ["d"],
              "mutual TLS with a client certificate")
        check(Calls(grpc.secure_channel(mtls.target, good), pb).stream() == [2 * 32 * 32 * 3],
              "mutual TLS: a batch")
        expect(lambda: Calls(grpc.secure_channel(mtls.target, grpc.ssl_channel_credentials(
            pem("ca.pem"))), pb).describe(), unavailable, "",
               "mutual TLS without a client certificate")
        wrong = grpc.ssl_channel_credentials(pem("ca.pem"), pem("other-client.key"),
                                             pem("other-client.pem"))
        expect(lambda: Calls(grpc.secure_channel(mtls.target, wrong), pb).describe(),
               unavailable, "", "mutual TLS with another CA's client certificate")

        for s in servers:
            s.stop()
        servers = []

        # Token files and TLS options feedd must refuse at start, saying why.
        empty = os.path.join(tmp, "empty")
        open(empty, "w").write("\n")
        big = os.path.join(tmp, "big")
        open(big, "w").write("x" * 5000)
        spaced = os.path.join(tmp, "spaced")
        open(spaced, "w").write("two words\n")
        for args, needle in [
                (["--auth-token-file", empty], "empty token"),
                (["--auth-token-file", big], "larger than 4096 bytes"),
                (["--auth-token-file", spaced], "visible ASCII"),
                (["--auth-token-file", os.path.join(tmp, "missing")], "cannot open"),
                (["--metrics-listen", "127.0.0.1:0", "--metrics-token-file", empty],
                 "empty token"),
                (["--tls-cert", crt("server.pem")], "tls-cert and tls-key go together"),
                (["--tls-client-ca", crt("ca.pem")], "mutual TLS needs tls-cert"),
                (["--health-listen", "127.0.0.1:0"], "health-listen: only with tls-cert"),
                (["--tls-cert", crt("server.pem"), "--tls-key", crt("other-server.key")],
                 "valid pair")]:
            refused_at_start(feedd, data + args, needle, " ".join(args[-2:]))
        print("interop python trust: token, TLS, mutual TLS, metrics token and refusals OK")
        return 0
    except Exception as e:  # report, do not crash with a traceback only
        print("interop python trust: FAILED: %r" % (e,), file=sys.stderr)
        return 1
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    sys.exit(main())
