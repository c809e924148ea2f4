#!/usr/bin/python3
"""Quick side-by-side of decode sharing on one feedd (issue 30 item 4): K jobs
(different job names and seeds, one data order) each stream the same sample
order from one server, with SessionOpen.share and without; prints aggregate
samples/s for each and feedd's CPU time per sample (user + system, from
/proc: steadier than samples/s on a loaded machine; it includes gRPC). A Python grpcio driver; the real benchmark goes through
libfeedclient.

usage: share_decode.py FEEDD PROTO_DIR DATASET [--jobs 4] [--threads 1]
       [--side 256] [--batches 20] [--batch 16] [--out 224]
"""
import argparse
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
from grpc_tools import protoc


def serve(feedd, tmp, dataset, side, threads):
    pf = os.path.join(tempfile.mkdtemp(dir=tmp), "port")
    mf = pf + ".m"
    proc = subprocess.Popen([feedd, "--listen", "127.0.0.1:0", "--port-file", pf,
                             "--metrics-listen", "127.0.0.1:0", "--metrics-port-file", mf,
                             "--threads",
                             str(threads), "--log-level", "warn", "--dataset",
                             "d=%s,share=%d" % (dataset, side)])
    while not (os.path.exists(pf) and os.path.exists(mf)):
        if proc.poll() is not None:
            sys.exit("feedd exited")
        time.sleep(0.01)
    time.sleep(0.05)
    proc.mport = int(open(mf).read())
    return proc, int(open(pf).read())


def run_job(pb, channel, job, share, seed, order, a, counts, k):
    q = queue.Queue()
    stream = channel.stream_stream("/feed.v1.Feed/Stream",
                                   request_serializer=pb.BatchRequest.SerializeToString,
                                   response_deserializer=pb.Batch.FromString)
    spec = pb.TransformSpec(mode=pb.TRANSFORM_MODE_TRAIN, out_height=a.out, out_width=a.out)
    q.put(pb.BatchRequest(open=pb.SessionOpen(dataset="d", transform=spec, seed=seed, window=2,
                                              protocol_version=1, job=job, share=share)))
    responses = stream(iter(q.get, None), timeout=600)
    for i in range(2):
        q.put(pb.BatchRequest(batch_id=i + 1, indices=order[i * a.batch:(i + 1) * a.batch]))
    for i in range(a.batches):
        next(responses)
        counts[k] += a.batch
        if i + 2 < a.batches:
            q.put(pb.BatchRequest(batch_id=i + 3,
                                  indices=order[(i + 2) * a.batch:(i + 3) * a.batch]))
    q.put(None)
    for _ in responses:
        pass


def measure(pb, a, tmp, share):
    proc, port = serve(a.feedd, tmp, a.dataset, a.side, a.threads)
    try:
        ch = grpc.insecure_channel("127.0.0.1:%d" % port,
                                   options=[("grpc.max_receive_message_length", -1)])
        order = [(i * 7919) % 1000 for i in range(a.batches * a.batch)]
        counts = [0] * a.jobs
        ts = [threading.Thread(target=run_job, args=(pb, ch, "job%d" % k,
                                                     "sweep" if share else "", k + 1, order, a,
                                                     counts, k)) for k in range(a.jobs)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        dt = time.monotonic() - t0
        ch.close()
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % proc.mport).read().decode()
        share = {l.split()[0]: l.split()[1] for l in text.splitlines()
                 if l.startswith("feedd_share_") and " " in l}
        with open("/proc/%d/stat" % proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        share["cpu_ms_per_sample"] = "%.3f" % (1000 * cpu / sum(counts))
        return sum(counts) / dt, [c / dt for c in counts], share
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("feedd")
    ap.add_argument("proto")
    ap.add_argument("dataset")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--side", type=int, default=256)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", type=int, default=224)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="feedd-share-bench.")
    protoc.main(["protoc", "-I" + a.proto, "--python_out=" + tmp, os.path.join(a.proto,
                                                                              "feed.proto")])
    sys.path.insert(0, tmp)
    import feed_pb2 as pb
    for share in (False, True):
        total, per, m = measure(pb, a, tmp, share)
        print("%-9s jobs=%d threads=%d: %.1f samples/s aggregate; per job %s; %s" %
              ("shared" if share else "unshared", a.jobs, a.threads, total,
               " ".join("%.1f" % p for p in per),
               " ".join("%s=%s" % (k.replace("feedd_share_", ""), v) for k, v in sorted(m.items()))))


if __name__ == "__main__":
    main()
