#!/usr/bin/python3
"""Encoded batches (BatchRequest.encoded) through real feedd processes and
Debian's python3-grpcio, over a generated ImageFolder of real JPEGs, a pack
and tar shards made from it by feed-pack, local and from an HTTP store: each sample's bytes are the file's
bytes exactly, labels and indices as requested, the CRC32C right; encoded
and pixel requests interleaved on one stream leave the pixels as a stream of
pixels alone gets them; a corrupt JPEG comes back whole (status OK: nothing
was decoded); a file removed after the open is IO_ERROR with no bytes; a
sample past max_batch_bytes or max-jpeg-bytes is TOO_LARGE naming the cap
and the rest of the batch is served; bad indices are INVALID_ARGUMENT naming
the field; an owner's encoded batch admits nothing to the decoded cache; the
fleet metrics count encoded samples as their own kind. No timing is asserted.

usage: encoded_feedd.py FEEDD GEN_DATASET PROTO_DIR FEED_PACK
"""
import os
import queue
import shutil
import subprocess
import sys
import tempfile

import grpc

from feedd_interop import HttpStore, Server, check, crc32c, protos


def tree_files(root):
    """(path, label) per sample, in ImageFolder order: classes and files sorted by byte order."""
    out = []
    classes = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if f.lower().endswith((".jpg", ".jpeg")):
                out.append((os.path.join(root, c, f), label))
    return out


class Stream:
    """One stream: opened with an open-only request, then one request at a time."""

    def __init__(self, pb, server, seed=7, ds="d"):
        self.pb = pb
        self.q = queue.Queue()
        call = server.channel.stream_stream(
            "/feed.v1.Feed/Stream", request_serializer=pb.BatchRequest.SerializeToString,
            response_deserializer=pb.Batch.FromString)
        spec = pb.TransformSpec(mode=pb.TRANSFORM_MODE_TRAIN, out_height=16, out_width=16,
                                flip_prob=0.5)
        self.q.put(pb.BatchRequest(open=pb.SessionOpen(dataset=ds, transform=spec, seed=seed,
                                                       window=1, protocol_version=1)))
        self.responses = call(iter(self.q.get, None), timeout=120)

    def ask(self, batch_id, indices, encoded=False, **kw):
        self.q.put(self.pb.BatchRequest(batch_id=batch_id, epoch=3, indices=indices,
                                        encoded=encoded, **kw))
        b = next(self.responses)
        check(b.batch_id == batch_id, "batch id %d" % batch_id)
        check(list(b.indices) == list(indices), "indices as requested")
        check(crc32c(b.data) == b.crc32c, "crc32c of batch %d" % batch_id)
        return b

    def close(self):
        self.q.put(None)
        for _ in self.responses:
            pass


def split(pb, b):
    """An encoded batch's samples: data cut by encoded_lengths, which must add up to it."""
    check(b.height == 0 and b.width == 0 and b.channels == 0, "encoded: no shape")
    check(len(b.encoded_lengths) == len(b.indices), "one length per sample")
    check(sum(b.encoded_lengths) == len(b.data), "lengths add up to data")
    out, at = [], 0
    for n in b.encoded_lengths:
        out.append(bytes(b.data[at:at + n]))
        at += n
    return out


def errors_by_position(b):
    return {e.position: e for e in b.errors}


def check_exact(pb, b, files, indices, what):
    """Every sample OK, its bytes the file's, its label the tree's."""
    check(list(b.status) == [pb.SAMPLE_OK] * len(indices), what + ": all OK")
    got = split(pb, b)
    for k, i in enumerate(indices):
        check(got[k] == open(files[i][0], "rb").read(), "%s: sample %d's bytes" % (what, i))
        check(b.labels[k] == files[i][1], "%s: sample %d's label" % (what, i))


def main():
    feedd, gen, proto_dir, pack = sys.argv[1:5]
    tmp = tempfile.mkdtemp(prefix="feedd-encoded-py.")
    servers = []
    try:
        pb, = protos(proto_dir, tmp, "feed")

        ds = os.path.join(tmp, "ds")
        subprocess.run([gen, ds, "--classes", "2", "--per-class", "8", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        # A pack and tar shards of the clean tree, byte for byte.
        pk, tar = os.path.join(tmp, "d.pack"), os.path.join(tmp, "shards", "shard")
        os.mkdir(os.path.dirname(tar))
        subprocess.run([pack, ds, pk], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        subprocess.run([pack, ds, tar, "--format", "tar", "--shard-samples", "5"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        clean = tree_files(ds)
        n_clean = len(clean)
        # A corrupt JPEG (a real one cut short and its middle overwritten) and one to remove.
        first = open(clean[0][0], "rb").read()
        bad = first[:len(first) // 2]
        bad = bad[:200] + b"\x00\xff" * 100 + bad[400:]
        cls0 = os.path.dirname(clean[0][0])
        with open(os.path.join(cls0, "zz_corrupt.jpg"), "wb") as f:
            f.write(bad)
        shutil.copy(clean[1][0], os.path.join(cls0, "zz_gone.jpg"))
        files = tree_files(ds)
        n = len(files)
        corrupt = [k for k, (p, _) in enumerate(files) if p.endswith("zz_corrupt.jpg")][0]
        gone = [k for k, (p, _) in enumerate(files) if p.endswith("zz_gone.jpg")][0]

        def start(args):
            s = Server(feedd, tmp, args)
            servers.append(s)
            return s

        s = start(["--dataset", "d=" + ds])
        os.remove(files[gone][0])
        ok = [i for i in range(n) if i not in (corrupt, gone)]

        # Bytes exact, labels and indices as requested (repeats and any order), CRC32C.
        st = Stream(pb, s)
        idx = list(reversed(ok)) + ok[:3]
        check_exact(pb, st.ask(1, idx, encoded=True), files, idx, "tree")
        # A corrupt JPEG is bytes like any other; the pixel path finds it corrupt.
        b = st.ask(2, [ok[0], corrupt, ok[1]], encoded=True)
        check(list(b.status) == [pb.SAMPLE_OK] * 3, "corrupt: OK when encoded")
        check(split(pb, b)[1] == bad, "corrupt: its bytes")
        b = st.ask(3, [ok[0], corrupt], encoded=False)
        check(b.status[1] != pb.SAMPLE_OK and b.status[0] == pb.SAMPLE_OK,
              "corrupt: decoding it fails")
        # A file removed since the open: IO_ERROR, no bytes, the rest served.
        b = st.ask(4, [ok[2], gone, ok[3]], encoded=True)
        check(list(b.status) == [pb.SAMPLE_OK, pb.SAMPLE_IO_ERROR, pb.SAMPLE_OK],
              "gone: statuses %r" % list(b.status))
        check(b.encoded_lengths[1] == 0, "gone: zero bytes")
        e = errors_by_position(b)
        check(set(e) == {1} and e[1].index == gone and "zz_gone.jpg" in e[1].message,
              "gone: error %r" % b.errors)
        got = split(pb, b)
        check(got[0] == open(files[ok[2]][0], "rb").read() and
              got[2] == open(files[ok[3]][0], "rb").read(), "gone: the others' bytes")
        check(b.labels[1] == files[gone][1], "gone: label")
        st.close()
        shutil.copy(clean[1][0], files[gone][0])  # the servers started below see it again

        # Encoded and pixel requests on one stream: the pixels as on a stream of pixels alone.
        plan = [(10 + k, [(3 * k + j) % len(ok) for j in range(4)]) for k in range(6)]
        plan = [(bid, [ok[i] for i in idx]) for bid, idx in plan]
        alone = Stream(pb, s)
        want = [alone.ask(bid, idx) for bid, idx in plan]
        alone.close()
        mixed = Stream(pb, s)
        for k, (bid, idx) in enumerate(plan):
            check_exact(pb, mixed.ask(100 + bid, idx, encoded=True), files, idx, "mixed")
            b = mixed.ask(bid, idx)
            check(b.data == want[k].data and b.height == 16 and b.channels == 3 and
                  len(b.encoded_lengths) == 0, "mixed: pixels of batch %d as alone" % bid)
        mixed.close()

        # Metrics: encoded samples are their own kind; decodes count only decodes.
        enc = (len(ok) + 3) + 3 + 3 + 4 * len(plan)  # batches 1, 2, 4 and the mixed stream's
        dec = 2 + 2 * 4 * len(plan)  # batch 3, both streams' pixel batches
        check(s.metric('feedd_fleet_worker_samples_total{kind="encoded"}') == enc,
              "encoded samples counted")
        check(s.metric('feedd_fleet_worker_samples_total{kind="decode"}') == dec,
              "decodes counted apart")

        # Bad indices on an encoded request: INVALID_ARGUMENT naming the field.
        st = Stream(pb, s)
        try:
            st.ask(5, [0, n + 5], encoded=True)
            check(False, "bad index accepted")
        except grpc.RpcError as err:
            check(err.code() == grpc.StatusCode.INVALID_ARGUMENT and
                  "indices[1]" in (err.details() or ""), "bad index: %s" % err.details())

        # The caps: max_batch_bytes over the batch, max-jpeg-bytes per sample.
        sizes = [os.path.getsize(files[i][0]) for i in ok]
        big = ok[sizes.index(max(sizes))]
        small = sorted(ok, key=lambda i: os.path.getsize(files[i][0]))[:2]
        cap = 1 << 16
        check(os.path.getsize(files[big][0]) > cap, "the dataset has an image over 64 KiB")
        check(sum(os.path.getsize(files[i][0]) for i in small) <= cap, "two small images fit")
        c = start(["--dataset", "d=" + ds, "--max-batch-bytes", str(cap)])
        st = Stream(pb, c)
        idx = [small[0], big, small[1]]
        b = st.ask(1, idx, encoded=True)
        check(list(b.status) == [pb.SAMPLE_OK, pb.SAMPLE_TOO_LARGE, pb.SAMPLE_OK],
              "cap: statuses %r" % list(b.status))
        e = errors_by_position(b)
        check("max_batch_bytes %d" % cap in e[1].message, "cap: message %r" % e[1].message)
        got = split(pb, b)
        check(got[1] == b"" and got[0] == open(files[small[0]][0], "rb").read() and
              got[2] == open(files[small[1]][0], "rb").read(), "cap: the others' bytes")
        st.close()
        limit = (os.path.getsize(files[big][0]) + os.path.getsize(files[small[1]][0])) // 2
        j = start(["--dataset", "d=" + ds, "--max-jpeg-bytes", str(limit)])
        st = Stream(pb, j)
        b = st.ask(1, idx, encoded=True)
        check(list(b.status) == [pb.SAMPLE_OK, pb.SAMPLE_TOO_LARGE, pb.SAMPLE_OK],
              "max-jpeg-bytes: statuses %r" % list(b.status))
        check("max-jpeg-bytes %d" % limit in errors_by_position(b)[1].message,
              "max-jpeg-bytes: message")
        b = st.ask(2, [big], encoded=True)  # nothing to send: an empty batch, not an error
        check(list(b.status) == [pb.SAMPLE_TOO_LARGE] and b.data == b"" and
              list(b.encoded_lengths) == [0], "all refused: an empty batch")
        st.close()

        # An owner's encoded batch admits nothing to the decoded cache.
        k = start(["--dataset", "d=" + ds + ",cache=32", "--cache-bytes", "16M"])
        st = Stream(pb, k)
        tables = k.metric("feedd_cache_bytes")  # the slot tables, charged at start
        check_exact(pb, st.ask(1, ok, encoded=True, ownership=pb.CACHE_OWNERSHIP_OWNER), files,
                    ok, "cache owner")
        check(k.metric("feedd_cache_bytes") == tables, "encoded: nothing cached")
        st.ask(2, ok[:2], ownership=pb.CACHE_OWNERSHIP_OWNER)
        check(k.metric("feedd_cache_bytes") > tables, "pixels: cached")
        st.close()

        # A pack and tar shards: the same bytes.
        shards = [x for x in os.listdir(os.path.dirname(tar)) if x.endswith(".tar")]
        check(len(shards) > 1, "feed-pack wrote tar shards")
        pattern = "shard-{000000..%06d}.tar" % (len(shards) - 1)
        idx = list(range(n_clean))[::-1]
        for name, path in (("pack", pk), ("tar", os.path.join(os.path.dirname(tar), pattern))):
            st = Stream(pb, start(["--dataset", "d=" + path]))
            check_exact(pb, st.ask(1, idx, encoded=True), clean, idx, name)
            st.close()

        # The same shards from an HTTP store (tests/remote/servers.js: scripts/test.sh runs npm
        # ci there; a missing node_modules fails the test, as the remote tests do), through the
        # fetch stage.
        with HttpStore(os.path.dirname(tar)) as store:
            st = Stream(pb, start(["--dataset",
                                   "d=http://127.0.0.1:%d/%s" % (store.http, pattern)]))
            check_exact(pb, st.ask(1, idx, encoded=True), clean, idx, "http")
            check(st.ask(2, idx[:4]).height == 16, "http: pixels after bytes")
            st.close()
        print("encoded_feedd: ok")
        return 0
    finally:
        for s in servers:
            s.close()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("encoded_feedd: FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
