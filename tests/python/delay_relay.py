"""delay_relay.py LISTEN_HOST UPSTREAM_HOST:PORT DELAY_S PORT_FILE: a TCP relay that
holds every chunk it reads for DELAY_S seconds before writing it on, in each
direction, so a round trip through it takes at least 2 * DELAY_S longer.

test_netns runs it inside a server's network namespace in front of that feedd
because the CI kernel has none of the qdiscs that delay packets (netem, fq,
etf, taprio are not built; cls_bpf loads, but a program that sets skb->tstamp
delays nothing without fq or etf to honour it). It delays bytes, not packets:
TCP inside each leg still sees a fast link, which is enough for what the test
asks (replies that come a fixed time late), not a model of a long fat pipe.

Order is kept (one writer per direction, chunks in the order read) and the
buffer is bounded: a direction holds at most QUEUE_CHUNKS chunks of CHUNK
bytes; when it is full the reader stops reading and TCP's own flow control
pushes back on the sender. Binds port 0 and writes the port to PORT_FILE once
listening. Runs until killed; stdlib only."""

from __future__ import annotations

import os
import queue
import socket
import sys
import threading
import time
from typing import Optional, Tuple

CHUNK = 16384
QUEUE_CHUNKS = 64  # 1 MiB a direction: at 25 ms, up to 40 MiB/s get through


class Pipe:
    """One connection's two directions; the first error or EOF-with-error ends both."""

    def __init__(self, a: socket.socket, b: socket.socket, delay: float):
        self.delay = delay
        self.dead = threading.Event()
        self.socks = (a, b)
        self.done = 0
        self.lock = threading.Lock()
        for src, dst in ((a, b), (b, a)):
            q: "queue.Queue[Tuple[float, Optional[bytes]]]" = queue.Queue(QUEUE_CHUNKS)
            threading.Thread(target=self.read, args=(src, q), daemon=True).start()
            threading.Thread(target=self.write, args=(dst, q), daemon=True).start()

    def kill(self) -> None:
        self.dead.set()
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def put(self, q: "queue.Queue", item: Tuple[float, Optional[bytes]]) -> bool:
        while not self.dead.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                pass
        return False

    def read(self, src: socket.socket, q: "queue.Queue") -> None:
        while True:
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            # Stamped after recv returns, so the hold is never shorter than the delay.
            if not self.put(q, (time.monotonic() + self.delay, data or None)) or not data:
                return

    def write(self, dst: socket.socket, q: "queue.Queue") -> None:
        while not self.dead.is_set():
            try:
                due, data = q.get(timeout=0.2)
            except queue.Empty:
                continue
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                if data is None:
                    dst.shutdown(socket.SHUT_WR)
                    break
                dst.sendall(data)
            except OSError:
                self.kill()
                break
        with self.lock:
            self.done += 1
            last = self.done == 2
        if last:
            for s in self.socks:
                s.close()


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    listen_host, upstream, delay, port_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
        sys.argv[4]
    up_host, up_port = upstream.rsplit(":", 1)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((listen_host, 0))
    ls.listen(64)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    while True:
        client, _ = ls.accept()
        try:
            server = socket.create_connection((up_host, int(up_port)), timeout=10)
            server.settimeout(None)
        except OSError:
            client.close()
            continue
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        Pipe(client, server, delay)


if __name__ == "__main__":
    sys.exit(main())
