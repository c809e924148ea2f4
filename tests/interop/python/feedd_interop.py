"""What the grpcio interop tests share: the protocol's Python modules made by
grpc_tools.protoc, CRC32C, a real feedd on 127.0.0.1 port 0 with its metrics
port, and the HTTP store of tests/remote/servers.js (scripts/test.sh runs npm
ci there; a missing node_modules fails the test, as the remote tests do).
Imported by the scripts beside it."""
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc
from grpc_tools import protoc


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def protos(proto_dir, out, *names):
    """NAME_pb2 of each proto/NAME.proto, made into `out` by grpc_tools.protoc."""
    rc = protoc.main(["protoc", "-I" + proto_dir, "--python_out=" + out, "--grpc_python_out=" + out]
                     + [os.path.join(proto_dir, n + ".proto") for n in names])
    check(rc == 0, "grpc_tools.protoc failed")
    if out not in sys.path:
        sys.path.insert(0, out)
    return [importlib.import_module(n + "_pb2") for n in names]


def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC_TABLE = _crc_table()


def crc32c(data, crc=0):
    """CRC32C (Castagnoli) of data, continuing from crc."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Server:
    """feedd --threads THREADS with ARGS, its ports read from port files, and a channel to it."""

    def __init__(self, feedd, tmp, args, threads=2):
        self.tmp = tempfile.mkdtemp(dir=tmp)
        pf, mf = os.path.join(self.tmp, "port"), os.path.join(self.tmp, "mport")
        self.proc = subprocess.Popen([feedd, "--listen", "127.0.0.1:0", "--port-file", pf,
                                      "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", mf,
                                      "--threads", str(threads), "--log-level", "warn"] + args)
        for _ in range(6000):
            if (os.path.exists(pf) and os.path.exists(mf)) or self.proc.poll() is not None:
                break
            time.sleep(0.01)
        check(os.path.exists(pf) and os.path.exists(mf), "feedd did not start: %r" % args)
        self.port, self.mport = int(open(pf).read()), int(open(mf).read())
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port,
                                             options=[("grpc.max_receive_message_length", -1)])

    def metric(self, name):
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mport,
                                      timeout=30).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError("no metric " + name)

    def close(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(timeout=60)


class HttpStore:
    """tests/remote/servers.js over the files of DATA: `http` is its static HTTP server's port,
    `proxy` the port of the counting proxy in front of it; requests() is what the proxy
    forwarded so far. A context manager."""

    def __init__(self, data):
        node = shutil.which("node")
        check(node is not None, "node is needed for the HTTP store")
        js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "remote",
                          "servers.js")
        self.proc = subprocess.Popen([node, js, "--data", data, "--bucket", "feed"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            self.close()
            check(False, "servers.js did not start (npm ci in tests/remote?): %r" % ready)
        ports = dict(kv.split("=") for kv in ready[1:])
        self.http, self.proxy = int(ports["http"]), int(ports["httpproxy"])

    def requests(self):
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        check(answer and answer[0] == "ok", "servers.js stats: %r" % answer)
        return int(dict(kv.split("=") for kv in answer[1:])["requests"])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
