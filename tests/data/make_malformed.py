#!/usr/bin/env python3
"""Regenerates the malformed JPEG files in this folder (see README.md).

Needs cjpeg (Debian's libjpeg-turbo-progs). The source is a synthetic
256x192 picture, so nothing here comes from a real data set. The outputs are
committed; run this only to change them: python3 make_malformed.py
"""
import math
import os
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def picture(w, h):
    px = bytearray()
    for y in range(h):
        for x in range(w):
            r = int(127 + 120 * math.sin(x / 9.0) * math.cos(y / 13.0))
            g = (x * 255) // (w - 1)
            b = ((x // 16 + y // 16) % 2) * 200 + 27
            px += bytes((r, g, b))
    return b"P6\n%d %d\n255\n" % (w, h) + bytes(px)


def cjpeg(ppm, *opts):
    with tempfile.NamedTemporaryFile(suffix=".ppm") as f:
        f.write(ppm)
        f.flush()
        return subprocess.run(["cjpeg", *opts, f.name], check=True, capture_output=True).stdout


def find_marker(data, code):
    i = 2
    while i + 4 <= len(data):
        assert data[i] == 0xFF, "not at a marker"
        m = data[i + 1]
        if m == code:
            return i
        if m == 0xDA:
            break
        seglen = struct.unpack(">H", data[i + 2:i + 4])[0]
        i += 2 + seglen
    raise ValueError("marker 0x%02x not found" % code)


def patch_size(data, sof, w, h):
    i = find_marker(data, sof)
    # FF Cx len(2) precision(1) height(2) width(2)
    return data[:i + 5] + struct.pack(">HH", h, w) + data[i + 9:]


def scan_start(data):
    i = find_marker(data, 0xDA)
    return i + 2 + struct.unpack(">H", data[i + 2:i + 4])[0]


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    ppm = picture(256, 192)
    base = cjpeg(ppm, "-quality", "90", "-sample", "2x2")
    s0 = scan_start(base)
    # Cut in the middle of the entropy-coded data.
    write("truncated.jpg", base[:s0 + (len(base) - s0) * 6 // 10])
    # Cut inside the header (in the Huffman tables).
    write("truncated-header.jpg", base[:find_marker(base, 0xC4) + 40])
    # Scan data overwritten in the middle with FF 00 (stuffed 0xFF bytes):
    # a run of 1 bits, which is no valid Huffman code.
    mid = s0 + (len(base) - s0) // 2
    write("corrupt-middle.jpg", base[:mid] + b"\xff\x00" * 48 + base[mid + 96:])
    write("not-jpeg.jpg", b"\x89PNG\r\n\x1a\n" + b"this is not a JPEG file\n" * 4)
    write("empty.jpg", b"")
    # A valid header and a little data, declaring 60000 x 60000 pixels.
    write("bomb-60000x60000.jpg", patch_size(base, 0xC0, 60000, 60000)[:s0 + 256])
    # Progressive 4:4:4 declaring 8000 x 8000: within max_pixels and max_side,
    # but its coefficient buffer (8000*8000*3*2 bytes = 366 MiB) is not.
    prog = cjpeg(ppm, "-quality", "90", "-sample", "1x1", "-progressive")
    write("huge-progressive.jpg", patch_size(prog, 0xC2, 8000, 8000)[:scan_start(prog) + 512])
    # The intact file, for tests that need a good one next to the bad ones.
    write("good-420.jpg", base)


if __name__ == "__main__":
    main()
