#!/usr/bin/env python3
"""repeat_pack.py IN.pack OUT.pack --times R

Writes a pack whose index lists every sample of IN R times, all pointing at
the one copy of its JPEG bytes (the pack format allows entries to share
bytes; see source/src/pack.c for the layout). Each repeat is a distinct
sample index, so it gets its own random crop and flip, and the file grows by
16 bytes per entry only.

Why: a 1,000-image sample with batch 256 is an epoch of 3 batches, and a
loader that restarts its pipeline at every epoch boundary (libfeedclient's
set_epoch) would be measured on its epoch changes, not its steady state.
ImageNet-1k has 5,004 batches of 256 per epoch; R = 50 gives 195.
"""
import argparse
import struct
import sys

HEADER = struct.Struct("<8sIIQII QQQQQQ")  # 80 bytes, see source/src/pack.c
ENTRY = struct.Struct("<QII")


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


def crc32c(data, table=crc32c_table()):
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--times", type=int, required=True)
    a = ap.parse_args()
    if not 1 <= a.times <= 10000:
        sys.exit("repeat_pack: --times must be 1..10000")
    with open(a.src, "rb") as f:
        blob = f.read()
    (magic, version, hbytes, count, classes, _crc, index_off, names_off, names_bytes, data_off,
     data_bytes, flags) = HEADER.unpack_from(blob, 0)
    if magic != b"FEEDPACK" or version != 1 or hbytes != 80 or index_off != 80:
        sys.exit(f"repeat_pack: {a.src} is not a version-1 pack")
    if count * a.times > 100_000_000:
        sys.exit("repeat_pack: more samples than a dataset may hold")
    entries = [ENTRY.unpack_from(blob, index_off + 16 * i) for i in range(count)]
    names = blob[names_off:names_off + names_bytes]
    data = blob[data_off:data_off + data_bytes]

    n2 = count * a.times
    names_off2 = 80 + 16 * n2
    data_off2 = names_off2 + names_bytes
    shift = data_off2 - data_off
    index = bytearray()
    for _ in range(a.times):
        for off, length, label in entries:
            index += ENTRY.pack(off + shift, length, label)
    header = bytearray(HEADER.pack(magic, version, hbytes, n2, classes, 0, 80, names_off2,
                                   names_bytes, data_off2, data_bytes, flags))
    crc = crc32c(bytes(header) + bytes(index) + names)
    struct.pack_into("<I", header, 28, crc)
    tmp = a.dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(index)
        f.write(names)
        f.write(data)
    import os
    os.replace(tmp, a.dst)
    print(f"repeat_pack: {a.src} ({count} samples) -> {a.dst} ({n2} samples, x{a.times})")


if __name__ == "__main__":
    main()
