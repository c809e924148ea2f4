#!/usr/bin/env python3
"""Writes the protobuf seeds of fuzz/corpus/request and fuzz/corpus/wire.

Messages are encoded by hand (field numbers from proto/feed.proto), so this
needs nothing but Python 3. The pack seeds are made by feed-pack instead; see
README.md. Run from anywhere: python3 fuzz/make_corpus.py
"""
import io
import os
import struct
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire_type):
    return varint(field << 3 | wire_type)


def f_varint(field, v):
    return key(field, 0) + varint(v)


def f_bytes(field, b):
    return key(field, 2) + varint(len(b)) + b


def f_double(field, v):
    return key(field, 1) + struct.pack("<d", v)


def f_fixed32(field, v):
    return key(field, 5) + struct.pack("<I", v)


def packed(field, values):
    return f_bytes(field, b"".join(varint(v) for v in values))


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# ---- requests: first byte even = a stream of u16-framed BatchRequests, odd = a DescribeRequest


def transform(mode=0, h=0, w=0, extra=b""):
    return f_varint(1, mode) * (mode != 0) + f_varint(2, h) * (h != 0) + \
        f_varint(3, w) * (w != 0) + extra


def session_open(dataset, spec=None, seed=0, window=0, version=1, name=b""):
    out = f_bytes(1, dataset)
    if spec is not None:
        out += f_bytes(2, spec)
    out += f_varint(3, seed) * (seed != 0) + f_varint(4, window) * (window != 0)
    out += f_varint(5, version) + (f_bytes(6, name) if name else b"")
    return out


def batch_request(open_=None, batch_id=0, epoch=0, indices=()):
    out = f_bytes(1, open_) if open_ is not None else b""
    out += f_varint(2, batch_id) * (batch_id != 0) + f_varint(3, epoch) * (epoch != 0)
    return out + (packed(4, indices) if indices else b"")


def stream(*requests):
    return b"\x00" + b"".join(struct.pack("<H", len(r)) + r for r in requests)


def describe(dataset):
    return b"\x01" + (f_bytes(1, dataset) if dataset else b"")


train = transform(0, 32, 32, f_double(4, 0.25) + f_double(5, 1.0) + f_double(8, 0.5))
eval_ = transform(1, 16, 24, f_varint(9, 28))
REQUESTS = {
    "describe-all": describe(b""),
    "describe-train": describe(b"train"),
    "describe-unknown": describe(b"nope"),
    "stream-train": stream(
        batch_request(session_open(b"train", train, seed=42, window=4, name=b"fuzz"), 1, 0,
                      [0, 1, 2, 3]),
        batch_request(None, 2, 0, [4, 5, 9]),
        batch_request(None, 3, 1, [9, 8, 7, 6, 5])),
    "stream-eval-open-only": stream(
        batch_request(session_open(b"val", eval_, window=100)),
        batch_request(None, 7, 2, [1])),
    "stream-default-transform": stream(batch_request(session_open(b"train"), 0, 0, [0])),
    "stream-augment": stream(batch_request(session_open(b"train", transform(
        0, 32, 32, f_bytes(10, b"RandAugment(num_ops=2, magnitude=9); ColorJitter(hue=(-0.1, "
                               b"0.2)); RandomErasing(p=0.25, scale=(0.02, 0.33), fill=7)"))),
        1, 0, [0, 1])),
    "stream-augment-preset": stream(batch_request(session_open(b"train", transform(
        0, 32, 32, f_bytes(10, b"torchvision-v2-recipe"))), 1, 0, [2])),
    "stream-bad-index": stream(batch_request(session_open(b"train", train), 1, 0, [10])),
    "stream-reopen": stream(batch_request(session_open(b"train"), 1, 0, [1]),
                            batch_request(session_open(b"val"), 2, 0, [2])),
    "stream-no-open": stream(batch_request(None, 1, 0, [1, 2])),
}

# ---- Batches: first byte = slice size - 1; the rest is a Batch for 2 samples of 8x8,
# epoch 3, indices 5 and 9, 10 classes (what fuzz_wire.c expects).
PIXELS = bytes((i * 7) & 0xFF for i in range(2 * 8 * 8 * 3))


def batch(batch_id=1, data=PIXELS, crc=None, errors=(), data_first=False, labels=(3, 7),
          status=(0, 0)):
    head = f_varint(1, batch_id) * (batch_id != 0) + f_varint(2, 3) + packed(3, [5, 9])
    head += packed(4, labels) + packed(5, status)
    for pos, index, st, msg in errors:
        head += f_bytes(6, f_varint(1, pos) * (pos != 0) + f_varint(2, index) +
                        f_varint(3, st) + f_bytes(4, msg))
    head += f_varint(7, 8) + f_varint(8, 8) + f_varint(9, 3)
    tail = f_fixed32(13, crc32c(data) if crc is None else crc) + f_varint(14, 12345)
    if data_first:
        return f_bytes(12, data) + head + tail
    return head + f_bytes(12, data) + tail


WIRE = {
    "batch-ok-64": b"\x3f" + batch(),
    "batch-ok-1": b"\x00" + batch(),
    "batch-id0": b"\xff" + batch(batch_id=0),
    "batch-data-first": b"\x10" + batch(data_first=True),
    "batch-errors": b"\x07" + batch(status=(0, 2), errors=[(1, 9, 2, b"premature end")]),
    "batch-bad-crc": b"\x20" + batch(crc=0x12345678),
    "batch-short-data": b"\x20" + batch(data=PIXELS[:100]),
}


def write(sub, seeds):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    for name, blob in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(blob)


# ---- tar shards (byte 0 even) and shard index files (byte 0 odd)


def shard(fmt, members):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


LONG = "d/" + "k" * 120
SAMPLES = [("__classes__.txt", b"cat\ndog\n"), ("a.jpg", b"\xff\xd8jpeg-a"), ("a.cls", b"0"),
           ("b.json", b"{}"), ("b.jpeg", b"\xff\xd8jpeg-b"), ("b.cls", b"1\n"),
           (LONG + ".jpg", b"\xff\xd8long"), (LONG + ".cls", b"1")]


def idx(shard_bytes, entries, classes=b""):
    body = b"".join(struct.pack("<QII", o, n, l) for o, n, l in entries) + classes
    head = b"FEEDTIDX" + struct.pack("<II", 1, 0) + struct.pack("<QQQQ", shard_bytes,
                                                                  len(entries), len(classes), 0)
    whole = head + body
    crc = crc32c(whole)
    return whole[:12] + struct.pack("<I", crc) + whole[16:]


TAR = {
    "gnu": b"\x00" + shard(tarfile.GNU_FORMAT, SAMPLES),
    "pax": b"\x00" + shard(tarfile.PAX_FORMAT, SAMPLES),
    "ustar": b"\x00" + shard(tarfile.USTAR_FORMAT, SAMPLES[:6]),
    "idx": b"\x01" + idx(4096, [(512, 10, 0), (1536, 20, 1)], b"cat\ndog\n"),
}

write("request", REQUESTS)
write("wire", WIRE)
write("tar", TAR)
