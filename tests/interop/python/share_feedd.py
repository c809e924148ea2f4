#!/usr/bin/python3
"""Decode shared between jobs (SessionOpen.share, dataset option share=SIDE),
through real feedd processes and Debian's python3-grpcio: two jobs in
lockstep on a 1-worker server share decoded images (feedd_share_hits_total
> 0) and each gets the bytes it gets alone; a window too small for an image
decodes alone with the same bytes; a stream without share gets today's
bytes; a job that leaves pins nothing (feedd_share_window_bytes back to 0);
open.share and the config are checked; over tar shards in an HTTP store, a
sample a job finds decoded in the window is not fetched again. No timing is
asserted.

usage: share_feedd.py FEEDD GEN_DATASET PROTO_DIR FEED_PACK
"""
import os
import queue
import subprocess
import sys
import tempfile
import time

import grpc

from feedd_interop import HttpStore, Server, check, protos

N_BATCHES = 6
BATCH = 4


class Job:
    """One stream: opened with an open-only request, then batches one at a time."""

    def __init__(self, pb, server, job, share, seed):
        self.pb = pb
        self.q = queue.Queue()
        stream = server.channel.stream_stream(
            "/feed.v1.Feed/Stream", request_serializer=pb.BatchRequest.SerializeToString,
            response_deserializer=pb.Batch.FromString)
        spec = pb.TransformSpec(mode=pb.TRANSFORM_MODE_TRAIN, out_height=24, out_width=24)
        op = pb.SessionOpen(dataset="d", transform=spec, seed=seed, window=1,
                            protocol_version=1, job=job, share=share)
        self.q.put(pb.BatchRequest(open=op))
        self.responses = stream(iter(self.q.get, None), timeout=120)

    def batch(self, i):
        idx = [(i * BATCH + k) % 16 for k in range(BATCH)]
        self.q.put(self.pb.BatchRequest(batch_id=i + 1, epoch=0, indices=idx))
        b = next(self.responses)
        check(b.batch_id == i + 1, "batch id")
        return bytes(b.data)

    def close(self):
        self.q.put(None)
        for _ in self.responses:
            pass


def lockstep(pb, server, jobs):
    """Each (job, share, seed) as a stream; batch i of every job before batch i + 1."""
    js = [Job(pb, server, *j) for j in jobs]
    out = [[] for _ in js]
    for i in range(N_BATCHES):
        for k, j in enumerate(js):
            out[k].append(j.batch(i))
    for j in js:
        j.close()
    return out


def main():
    feedd, gen, proto_dir, pack = sys.argv[1:5]
    tmp = tempfile.mkdtemp(prefix="feedd-share-py.")
    servers = []
    try:
        pb, = protos(proto_dir, tmp, "feed")

        ds = os.path.join(tmp, "ds")
        subprocess.run([gen, ds, "--classes", "2", "--per-class", "8", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)

        def start(args):
            s = Server(feedd, tmp, args, threads=1)
            servers.append(s)
            return s

        shared = ["--dataset", "d=" + ds + ",share=32"]
        A, B = ("jobA", "sweep", 1), ("jobB", "sweep", 2)

        # Each job alone, on a fresh server each: no other member, no hits.
        alone = []
        for j in (A, B):
            s = start(shared)
            alone.append(lockstep(pb, s, [j])[0])
            check(s.metric("feedd_share_hits_total") == 0, "alone: no hits")
            check(s.metric("feedd_share_alone_total") == N_BATCHES * BATCH, "alone: all alone")
        check(alone[0] != alone[1], "different seeds give different pixels")

        # (a) Two jobs in lockstep: hits, and each job's bytes are its bytes alone.
        s = start(shared)
        info = s.channel.unary_unary(
            "/feed.v1.Feed/Describe", request_serializer=pb.DescribeRequest.SerializeToString,
            response_deserializer=pb.DescribeResponse.FromString)(pb.DescribeRequest(), timeout=30)
        check(info.datasets[0].share_side == 32, "Describe share_side")
        both = lockstep(pb, s, [A, B])
        check(s.metric("feedd_share_hits_total") > 0, "lockstep: share hits")
        check(s.metric("feedd_share_decodes_total") > 0, "lockstep: share decodes")
        check(both[0] == alone[0] and both[1] == alone[1], "lockstep: bytes as alone")
        # (f) Everything read by both: the window is empty.
        check(s.metric("feedd_share_window_bytes") == 0, "lockstep: window empty at the end")

        # (f) A job that leaves pins nothing: B reads 2 batches and closes; A's later images
        # are read by A alone and leave the window.
        ja, jb = Job(pb, s, *A), Job(pb, s, *B)
        ja.batch(0)
        jb.batch(0)
        ja.batch(1)
        check(s.metric("feedd_share_window_bytes") > 0, "B has not read A's batch 1 yet")
        jb.close()
        for _ in range(1200):  # a hang guard (60 s), not a timing bound: the event is the stream's end
            if s.metric("feedd_share_window_bytes") == 0:
                break
            time.sleep(0.05)
        check(s.metric("feedd_share_window_bytes") == 0, "a job that left pins no entry")
        ja.close()

        # (g) Tar shards in an HTTP store, through the fetch stage: from batch 1 on (both jobs
        # are seated by then), every sample of B's batch is in the window, decoded for A, so
        # B's batch fetches nothing from the store; each job still gets its bytes alone.
        shards = os.path.join(tmp, "shards")
        os.mkdir(shards)
        subprocess.run([pack, ds, os.path.join(shards, "shard"), "--format", "tar",
                        "--shard-samples", "5"], check=True, stdout=subprocess.DEVNULL)
        n = len([x for x in os.listdir(shards) if x.endswith(".tar")])
        with HttpStore(shards) as store:
            s = start(["--dataset", "d=http://127.0.0.1:%d/shard-{000000..%06d}.tar,share=32"
                       % (store.proxy, n - 1)])
            ja, jb = Job(pb, s, *A), Job(pb, s, *B)
            got = [[], []]
            for i in range(N_BATCHES):
                got[0].append(ja.batch(i))
                before = store.requests()
                got[1].append(jb.batch(i))
                check(i == 0 or store.requests() == before,
                      "remote: B's batch %d fetched what the window holds" % i)
            ja.close()
            jb.close()
            check(got == alone, "remote: bytes as alone")
            check(s.metric("feedd_share_hits_total") >= (N_BATCHES - 1) * BATCH,
                  "remote: B's samples were window hits")

        # (b) A window too small for one image: decoded alone, the same bytes.
        s = start(shared + ["--share-window-bytes", "1"])
        tiny = lockstep(pb, s, [A, B])
        check(tiny == [alone[0], alone[1]], "tiny window: bytes as alone")
        check(s.metric("feedd_share_alone_total") > 0, "tiny window: decoded alone counted")
        check(s.metric("feedd_share_hits_total") == 0, "tiny window: no hits")

        # (c) Streams without share on a share= dataset: as a server without share=.
        plain = lockstep(pb, start(["--dataset", "d=" + ds]), [("jobA", "", 1)])[0]
        s = start(shared)
        check(lockstep(pb, s, [("jobA", "", 1)])[0] == plain, "no share: today's bytes")
        check(s.metric("feedd_share_alone_total") == 0, "no share: window untouched")

        # (d) open.share checked as open.job is.
        for bad in ("x" * 129, "a b", "é"):
            try:
                Job(pb, s, "j", bad, 1).batch(0)
                check(False, "open.share %r accepted" % bad)
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                      "open.share" in (e.details() or ""), "open.share %r: %s" % (bad, e.details()))

        # (e) Config errors name what is wrong.
        for args, needle in (
                (["--dataset", "d=" + ds + ",share=15"], "share=15"),
                (["--dataset", "d=" + ds + ",share=4097"], "share=4097"),
                (["--dataset", "d=" + ds + ",share=32,cache=64", "--cache-bytes", "1M"],
                 "share=32 and cache=64")):
            r = subprocess.run([feedd, "--listen", "127.0.0.1:0"] + args, capture_output=True,
                               text=True, timeout=60)
            check(r.returncode == 2 and needle in r.stderr, "config %r: %r" % (args, r.stderr))
        print("share_feedd: ok")
        return 0
    finally:
        for s in servers:
            s.close()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("share_feedd: FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
