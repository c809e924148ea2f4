#!/usr/bin/python3
"""Interop test: a real feedd against Debian's python3-grpcio, which shares no
code with the project. Stubs are generated at test time from proto/*.proto
with grpc_tools.protoc; the dataset comes from feed-gen-dataset; labels are
derived here from the directory listing and the CRC32C is computed here.

usage: interop_feedd.py FEEDD GEN_DATASET PROTO_DIR
Exits 0 on success, 1 with a message on failure.
"""
import hashlib
import os
import queue
import signal
import struct
import subprocess
import sys
import tempfile
import time

import grpc

from feedd_interop import check, crc32c, protos


def expected_labels(root):
    """ImageFolder labels by the documented rule: classes and files sorted by
    byte order, dot-names skipped, .jpg/.jpeg in any case."""
    labels = []
    classes = sorted(n for n in os.listdir(os.fsencode(root))
                     if not n.startswith(b".") and os.path.isdir(os.path.join(os.fsencode(root), n)))
    for label, c in enumerate(classes):
        d = os.path.join(os.fsencode(root), c)
        for f in sorted(os.listdir(d)):
            low = f.lower()
            if f.startswith(b".") or not (low.endswith(b".jpg") or low.endswith(b".jpeg")):
                continue
            labels.append(label)
    return [c.decode() for c in classes], labels


def expected_fingerprint(root):
    """DatasetInfo.fingerprint by its documented definition (source/include/feed/fingerprint.h):
    SHA-256 of the tag, the count, the class names, and each sample's label and byte length."""
    broot = os.fsencode(root)
    classes = sorted(n for n in os.listdir(broot)
                     if not n.startswith(b".") and os.path.isdir(os.path.join(broot, n)))
    samples = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(broot, c))):
            low = f.lower()
            if f.startswith(b".") or not (low.endswith(b".jpg") or low.endswith(b".jpeg")):
                continue
            samples.append((label, os.path.getsize(os.path.join(broot, c, f))))
    h = hashlib.sha256(b"feedd-dataset-fingerprint-v1\0")
    h.update(struct.pack("<QI", len(samples), len(classes)))
    for c in classes:
        h.update(struct.pack("<I", len(c)) + c)
    for label, size in samples:
        h.update(struct.pack("<IQ", label, size))
    return h.hexdigest()


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([0x80 | (n & 0x7F)])
        n >>= 7
    return out + bytes([n])


def raw_field(number, payload):
    """A length-delimited protobuf field: how a newer client's extra field
    looks to this server."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def expect_error(call, code, needle, what):
    try:
        call()
    except grpc.RpcError as e:
        check(e.code() == code and needle in (e.details() or ""),
              "%s: got %s %r, want %s with %r" % (what, e.code(), e.details(), code, needle))
        return
    check(False, "%s: succeeded, want %s" % (what, code))


def stream_error(stream, feed_pb2, open_msg, code, needle, what):
    """A stream whose first request is open_msg must end with code naming needle."""
    req = feed_pb2.BatchRequest(open=open_msg, batch_id=1, epoch=0, indices=[0])
    expect_error(lambda: list(stream(iter([req]), timeout=30)), code, needle, what)


def contract_checks(channel, feed_pb2, health_pb2):
    """Request sizes up to max-request-bytes, NUL bytes in names, the
    transform bounds and field names proto/feed.proto documents."""
    raw_describe = channel.unary_unary("/feed.v1.Feed/Describe", request_serializer=bytes,
                                       response_deserializer=feed_pb2.DescribeResponse.FromString)
    raw_health = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=bytes,
                                     response_deserializer=health_pb2.HealthCheckResponse.FromString)
    describe = channel.unary_unary("/feed.v1.Feed/Describe",
                                   request_serializer=feed_pb2.DescribeRequest.SerializeToString,
                                   response_deserializer=feed_pb2.DescribeResponse.FromString)
    health = channel.unary_unary("/grpc.health.v1.Health/Check",
                                 request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                 response_deserializer=health_pb2.HealthCheckResponse.FromString)
    stream = channel.stream_stream("/feed.v1.Feed/Stream",
                                   request_serializer=feed_pb2.BatchRequest.SerializeToString,
                                   response_deserializer=feed_pb2.Batch.FromString)
    big = b"x" * 12000
    # Valid requests well past the old fixed buffers (1 KB, 4 KB), far below 1 MiB.
    info = raw_describe(raw_field(15, big), timeout=30)
    check(len(info.datasets) == 1 and info.datasets[0].name == "d", "Describe of 12 KB")
    check(raw_health(raw_field(15, big), timeout=30).status ==
          health_pb2.HealthCheckResponse.SERVING, "Health of 12 KB")
    expect_error(lambda: describe(feed_pb2.DescribeRequest(dataset="n" * 5000), timeout=30),
                 grpc.StatusCode.NOT_FOUND, "dataset", "Describe of a 5000-byte name")
    expect_error(lambda: health(health_pb2.HealthCheckRequest(service="s" * 2000), timeout=30),
                 grpc.StatusCode.NOT_FOUND, "service", "Health of a 2000-byte service")
    # Past max-request-bytes (1 MiB): gRPC's own limit.
    expect_error(lambda: raw_describe(raw_field(15, b"y" * (2 << 20)), timeout=30),
                 grpc.StatusCode.RESOURCE_EXHAUSTED, "", "Describe of 2 MiB")
    # A NUL byte in a name is refused, naming the field.
    expect_error(lambda: describe(feed_pb2.DescribeRequest(dataset="\0"), timeout=30),
                 grpc.StatusCode.INVALID_ARGUMENT, "dataset", "Describe('\\0')")
    expect_error(lambda: describe(feed_pb2.DescribeRequest(dataset="d\0x"), timeout=30),
                 grpc.StatusCode.INVALID_ARGUMENT, "dataset", "Describe('d\\0x')")
    expect_error(lambda: health(health_pb2.HealthCheckRequest(service="feed.v1.Feed\0x"),
                                timeout=30),
                 grpc.StatusCode.INVALID_ARGUMENT, "service", "Health('feed.v1.Feed\\0x')")
    train = dict(mode=feed_pb2.TRANSFORM_MODE_TRAIN, out_height=32, out_width=32)
    stream_error(stream, feed_pb2,
                 feed_pb2.SessionOpen(dataset="d\0/../../etc/passwd",
                                      transform=feed_pb2.TransformSpec(**train)),
                 grpc.StatusCode.INVALID_ARGUMENT, "open.dataset", "open.dataset with a NUL")
    # Bounds and field names as the proto documents them.
    for field, value, ok in [("out_height", 7, False), ("out_height", 2049, False),
                             ("out_width", 4, False), ("out_width", 2048, True),
                             ("ratio_min", 0.0099, False), ("ratio_min", 0.01, True),
                             ("ratio_max", 101.0, False), ("ratio_max", 100.0, True),
                             ("scale_min", 1.5, False), ("flip_prob", 1.5, False)]:
        spec = dict(train, **{field: value})
        if field == "ratio_min":
            spec["ratio_max"] = 1.0
        open_msg = feed_pb2.SessionOpen(dataset="d", transform=feed_pb2.TransformSpec(**spec))
        if ok:
            req = feed_pb2.BatchRequest(open=open_msg, batch_id=1, epoch=0, indices=[0])
            got = list(stream(iter([req]), timeout=60))
            check(len(got) == 1, "%s=%r accepted" % (field, value))
        else:
            stream_error(stream, feed_pb2, open_msg, grpc.StatusCode.INVALID_ARGUMENT,
                         "transform." + field, "%s=%r" % (field, value))
    # SessionOpen.job and job_weight: names and bounds as the proto documents them.
    for job, weight, ok, needle in [("j" * 128, 100, True, ""), ("a-b_c.d:e/f@g+h=i", 0, True, ""),
                                    ("j" * 129, 1, False, "open.job"),
                                    ("a b", 1, False, "open.job"),
                                    ("caf\u00e9", 1, False, "open.job"),
                                    ("x\0y", 1, False, "open.job"),
                                    ("ok", 101, False, "open.job_weight")]:
        open_msg = feed_pb2.SessionOpen(dataset="d", transform=feed_pb2.TransformSpec(**train),
                                        job=job, job_weight=weight)
        if ok:
            req = feed_pb2.BatchRequest(open=open_msg, batch_id=1, epoch=0, indices=[0])
            check(len(list(stream(iter([req]), timeout=60))) == 1,
                  "job=%r weight=%d accepted" % (job, weight))
        else:
            stream_error(stream, feed_pb2, open_msg, grpc.StatusCode.INVALID_ARGUMENT, needle,
                         "job=%r weight=%d" % (job, weight))
    evalspec = dict(mode=feed_pb2.TRANSFORM_MODE_EVAL, out_height=32, out_width=48)
    for value, ok in [(47, False), (48, True), (65536, True), (65537, False)]:
        open_msg = feed_pb2.SessionOpen(dataset="d", transform=feed_pb2.TransformSpec(
            resize_size=value, **evalspec))
        if ok:
            req = feed_pb2.BatchRequest(open=open_msg, batch_id=1, epoch=0, indices=[0])
            check(len(list(stream(iter([req]), timeout=60))) == 1, "resize_size=%d" % value)
        else:
            stream_error(stream, feed_pb2, open_msg, grpc.StatusCode.INVALID_ARGUMENT,
                         "transform.resize_size", "resize_size=%d" % value)


def main():
    feedd, gen, proto_dir = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="feedd-interop-py.")
    proc = None
    try:
        feed_pb2, health_pb2 = protos(proto_dir, tmp, "feed", "health")

        ds = os.path.join(tmp, "ds")
        subprocess.run([gen, ds, "--classes", "3", "--per-class", "5", "--seed", "4"], check=True,
                       stdout=subprocess.DEVNULL)
        class_names, labels = expected_labels(ds)
        port_file = os.path.join(tmp, "port")
        # Served from the decoded-sample cache: Describe says so, and the batches below
        # (56 px, under the cached 64) are made from it.
        proc = subprocess.Popen([feedd, "--listen", "127.0.0.1:0", "--port-file", port_file,
                                 "--dataset", "d=" + ds + ",cache=64", "--cache-bytes", "16M",
                                 "--threads", "2", "--log-level", "warn"])
        for _ in range(6000):
            if os.path.exists(port_file) or proc.poll() is not None:
                break
            time.sleep(0.01)
        check(os.path.exists(port_file), "feedd did not write its port file")
        port = int(open(port_file).read())
        channel = grpc.insecure_channel("127.0.0.1:%d" % port,
                                        options=[("grpc.max_receive_message_length", -1)])

        describe = channel.unary_unary("/feed.v1.Feed/Describe",
                                       request_serializer=feed_pb2.DescribeRequest.SerializeToString,
                                       response_deserializer=feed_pb2.DescribeResponse.FromString)
        info = describe(feed_pb2.DescribeRequest(), timeout=30)
        check(info.protocol_version == 1, "protocol_version")
        check(len(info.datasets) == 1 and info.datasets[0].name == "d", "datasets")
        check(info.datasets[0].num_samples == len(labels), "num_samples")
        check(list(info.datasets[0].class_names) == class_names, "class_names")
        check(info.datasets[0].cache_side == 64, "cache_side")
        check(info.datasets[0].fingerprint == expected_fingerprint(ds),
              "fingerprint %r, expected %r" % (info.datasets[0].fingerprint,
                                               expected_fingerprint(ds)))
        check(info.server_threads == 2, "server_threads")
        try:
            describe(feed_pb2.DescribeRequest(dataset="nope"), timeout=30)
            check(False, "Describe(nope) should fail")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.NOT_FOUND, "Describe(nope) -> NOT_FOUND")

        health = channel.unary_unary("/grpc.health.v1.Health/Check",
                                     request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                     response_deserializer=health_pb2.HealthCheckResponse.FromString)
        check(health(health_pb2.HealthCheckRequest(), timeout=30).status ==
              health_pb2.HealthCheckResponse.SERVING, "health SERVING")

        contract_checks(channel, feed_pb2, health_pb2)

        stream = channel.stream_stream("/feed.v1.Feed/Stream",
                                       request_serializer=feed_pb2.BatchRequest.SerializeToString,
                                       response_deserializer=feed_pb2.Batch.FromString)
        n = len(labels)
        side, per, nbatch, window = 56, 4, 6, 2
        plan = [[(b * per + i * 7) % n for i in range(per)] for b in range(nbatch)]
        outbox = queue.Queue()

        def requests():
            while True:
                r = outbox.get()
                if r is None:
                    return
                yield r

        spec = feed_pb2.TransformSpec(mode=feed_pb2.TRANSFORM_MODE_TRAIN, out_height=side,
                                      out_width=side, flip_prob=0.5)
        opener = feed_pb2.SessionOpen(dataset="d", transform=spec, seed=77, window=window,
                                      protocol_version=1, client_name="interop-python")
        for b in range(window):
            outbox.put(feed_pb2.BatchRequest(open=opener if b == 0 else None, batch_id=b, epoch=1,
                                             indices=plan[b]))
        sent, seen = window, set()
        for batch in stream(requests(), timeout=120):
            b = batch.batch_id
            check(0 <= b < nbatch and b not in seen, "batch_id %d" % b)
            seen.add(b)
            check(list(batch.indices) == plan[b], "indices echoed")
            check(list(batch.labels) == [labels[i] for i in plan[b]], "labels")
            check(list(batch.status) == [feed_pb2.SAMPLE_OK] * per, "status")
            check((batch.height, batch.width, batch.channels) == (side, side, 3), "shape")
            check(len(batch.data) == per * side * side * 3, "data length")
            check(crc32c(batch.data) == batch.crc32c, "crc32c")
            check(any(batch.data), "pixels not all zero")
            if sent < nbatch:
                outbox.put(feed_pb2.BatchRequest(batch_id=sent, epoch=1, indices=plan[sent]))
                sent += 1
            elif len(seen) == nbatch:
                outbox.put(None)
        check(len(seen) == nbatch, "all batches arrived (%d of %d)" % (len(seen), nbatch))
        channel.close()

        proc.send_signal(signal.SIGTERM)
        check(proc.wait(timeout=60) == 0, "feedd exit status after SIGTERM")
        proc = None
        print("interop python: Describe, Health and %d batches OK" % nbatch)
        return 0
    except Exception as e:  # report, do not crash with a traceback only
        print("interop python: FAILED: %r" % (e,), file=sys.stderr)
        return 1
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    sys.exit(main())
