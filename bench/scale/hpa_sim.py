#!/usr/bin/env python3
"""hpa_sim.py OUTDIR [options]: Kubernetes' HorizontalPodAutoscaler replayed on
real feedd processes and real training clients, on this machine.

The pods are feedd processes (one worker thread each, on ports reserved for
the run); starting a pod is starting a process, draining one is preStop's
wait then SIGTERM (feedd's drain), as deploy/k8s/feedd.yaml does. The jobs are
feed-scale-client processes: real libfeedclient loaders whose training step is
a sleep, so each consumes at most its rate and waits in next() when the fleet
is short; each checks every epoch's samples exactly once. Every client is
given every pod's address from the start (as a headless Service resolves to
the ready pods): a pod not running refuses connections and the loader retries
it with its backoff (50 ms doubling to 2 s), which stands in for DNS
re-resolution (resolve_interval_ms, 5 s on Kubernetes).

The controller is HPA's documented algorithm
(https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/,
"Algorithm details", "Configurable scaling behavior") with the behaviour of
deploy/k8s/feedd-hpa-fleet.yaml, every period divided by --factor:
  - every sync period (--horizontal-pod-autoscaler-sync-period, 15 s) it reads
    the metric: here the external metric feedd_fleet_desired_servers as
    prometheus-adapter-fleet.yaml serves it, the max over the pods;
  - External metric, target AverageValue 1: usage ratio = metric / (target x
    current replicas); within the tolerance (0.1) of 1 nothing changes, else
    desiredReplicas = ceil(metric / target) (for a per-pod average, the docs'
    desiredReplicas = ceil[currentReplicas x (currentMetricValue /
    desiredMetricValue)]);
  - stabilisation: the recommendation is held between the lowest
    recommendation of the scale-up window (0 s) and the highest of the
    scale-down window (300 s: "the highest recommendation within the
    window");
  - scaling policies: up by at most max(100% of, 4 pods more than) the
    replicas at the start of the policy period (15 s), down by at most 1 pod
    per 60 s, counted from the changes made within the period;
  - minReplicas 1, maxReplicas --max-replicas.
feedd's own window (--fleet-window-ms) and the clients' demand window are 10 s
divided by the same factor.

The run: calibrate one server's capacity (one client that never pauses), then
job 0 alone at --job-share of that capacity, then jobs 1-3 join at the same
rate, then they leave while job 0 goes on. OUTDIR gets timeline.jsonl (one
line per sync), clients/job*.jsonl, feedd-*.log, summary.json and, with
matplotlib, scale.png.
"""
import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Kubernetes' values (the HPA docs; deploy/k8s/feedd-hpa-fleet.yaml), in seconds.
SYNC_PERIOD = 15.0
TOLERANCE = 0.1
UP_WINDOW = 0.0
UP_POLICIES = [("Percent", 100, 15.0), ("Pods", 4, 15.0)]  # selectPolicy: Max
DOWN_WINDOW = 300.0
DOWN_POLICIES = [("Pods", 1, 60.0)]  # selectPolicy: Max
TARGET_AVERAGE_VALUE = 1.0
MIN_REPLICAS = 1
# feedd.yaml: preStop sleep 5 s; --drain-timeout-ms 10000; grace 25 s. feedd's window 10 s.
PRESTOP = 5.0
DRAIN_TIMEOUT = 10.0
GRACE = 25.0
FLEET_WINDOW = 10.0


def scrape(port):
    """The feedd_fleet_* samples of one pod's /metrics, {series: value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("feedd_fleet_"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


class Pod:
    def __init__(self, sim, slot):
        self.slot, self.port, self.sim = slot, sim.ports[slot], sim
        self.metrics_port = None
        self.dir = os.path.join(sim.work, f"pod{slot}")
        os.makedirs(self.dir, exist_ok=True)
        mfile = os.path.join(self.dir, "mport")
        if os.path.exists(mfile):
            os.unlink(mfile)
        self.log = open(os.path.join(sim.out, f"feedd-{slot}.log"), "a")
        self.proc = subprocess.Popen(
            [sim.feedd, "--listen", f"127.0.0.1:{self.port}", "--threads", "1",
             "--dataset", f"scale={sim.data}", "--metrics-listen", "127.0.0.1:0",
             "--metrics-port-file", mfile, "--log-level", "warn",
             "--fleet-window-ms", str(int(FLEET_WINDOW / sim.factor * 1000)),
             "--drain-timeout-ms", str(int(DRAIN_TIMEOUT / sim.factor * 1000))],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.mfile = mfile
        self.started = time.monotonic()

    def ready(self):
        if self.metrics_port is None and os.path.exists(self.mfile):
            with open(self.mfile) as f:
                text = f.read().strip()
            if text:
                self.metrics_port = int(text)
        return self.metrics_port is not None and self.proc.poll() is None

    def drain(self, factor):
        """preStop's wait, SIGTERM, then SIGKILL at the grace period; returns feedd's status."""
        time.sleep(PRESTOP / factor)
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=max(GRACE / factor - PRESTOP / factor, 1.0) + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc


class Sim:
    def __init__(self, args):
        self.args = args
        self.factor = args.factor
        self.out = os.path.abspath(args.outdir)
        os.makedirs(os.path.join(self.out, "clients"), exist_ok=True)
        self.work = os.path.join(self.out, "work")
        os.makedirs(self.work, exist_ok=True)
        build = args.build
        self.feedd = os.path.join(build, "server", "feedd")
        self.client = os.path.join(build, "bench", "scale", "feed-scale-client")
        self.data = os.path.join(self.work, "data")
        if not os.path.isdir(self.data):
            subprocess.run([os.path.join(build, "server", "tools", "feed-gen-dataset"), self.data,
                            "--classes", "4", "--per-class", "128", "--seed", "31"],
                           check=True, stdout=subprocess.DEVNULL)
        # Ports reserved for the run: bound with SO_REUSEADDR and not listening, so a client
        # connecting to a pod that is not running is refused, and feedd (SO_REUSEADDR too)
        # can listen on it while the reservation is held.
        self.reserved, self.ports = [], []
        # One more than the fleet's: the calibration server's, outside the fleet.
        for _ in range(args.max_replicas + 1):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            self.reserved.append(s)
            self.ports.append(s.getsockname()[1])
        self.pods = {}  # slot -> Pod
        self.drains = []
        self.jobs = {}  # job -> Popen
        self.events = []  # (t, delta) scale changes, for the policies
        self.recs = []  # (t, recommendation), for stabilisation
        self.t0 = time.monotonic()
        self.timeline = open(os.path.join(self.out, "timeline.jsonl"), "w")
        self.lock = threading.Lock()

    def now(self):
        return time.monotonic() - self.t0

    def log(self, **kw):
        """One timeline line; any thread (the drains log from their own)."""
        with self.lock:
            kw["t"] = round(self.now(), 3)
            self.timeline.write(json.dumps(kw) + "\n")
            self.timeline.flush()

    # ---- pods ----
    def scale_to(self, n):
        cur = sorted(self.pods)
        if n > len(cur):
            free = [s for s in range(self.args.max_replicas) if s not in self.pods]
            for slot in free[:n - len(cur)]:
                self.pods[slot] = Pod(self, slot)
        elif n < len(cur):
            # Newest first, as a ReplicaSet picks the pods of least rank (the youngest).
            victims = sorted(cur, key=lambda s: self.pods[s].started, reverse=True)[:len(cur) - n]
            for slot in victims:
                pod = self.pods.pop(slot)
                th = threading.Thread(target=self._drain, args=(pod,))
                th.start()
                self.drains.append(th)

    def _drain(self, pod):
        rc = pod.drain(self.factor)
        self.log(event="drained", slot=pod.slot, status=rc)

    def wait_ready(self, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end and not all(p.ready() for p in self.pods.values()):
            time.sleep(0.05)

    # ---- jobs ----
    def start_job(self, j, rate, ports=None):
        out = open(os.path.join(self.out, "clients", f"job{j}.jsonl"), "a")
        err = open(os.path.join(self.out, "clients", f"job{j}.log"), "a")
        ports = ports if ports is not None else self.ports[:self.args.max_replicas]
        targets = ",".join(f"127.0.0.1:{p}" for p in ports)
        self.jobs[j] = (subprocess.Popen(
            [self.client, "--targets", targets, "--dataset", "scale", "--rate", str(rate),
             "--batch", str(self.args.batch), "--rank", str(j % 4), "--world", "4", "--job", f"job-{j}",
             "--demand-window-ms", str(int(10000 / self.factor))],
            stdout=out, stderr=err), out, err, rate)
        self.log(event="job_start", job=j, rate=rate)

    def stop_job(self, j):
        proc, out, err, _ = self.jobs.pop(j)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        out.close()
        err.close()
        self.log(event="job_stop", job=j, status=rc)
        return rc

    def client_last(self, j):
        """The job's last per-second line."""
        path = os.path.join(self.out, "clients", f"job{j}.jsonl")
        last = None
        with open(path) as f:
            for line in f:
                d = json.loads(line)
                if "dt" in d:
                    last = d
        return last

    # ---- the controller ----
    def policy_limit(self, current, up, now):
        """The most (up) or fewest (down) replicas the scaling policies allow now."""
        limits = []
        for kind, value, period in (UP_POLICIES if up else DOWN_POLICIES):
            period /= self.factor
            changed = sum(d for t, d in self.events if t > now - period and (d > 0) == up)
            start = current - changed  # replicas at the start of the period
            if kind == "Pods":
                limits.append(start + value if up else start - value)
            else:
                limits.append(math.ceil(start * (1 + value / 100)) if up
                              else math.ceil(start * (1 - value / 100)))
        # selectPolicy Max: the policy that allows the most change.
        return max(limits) if up else min(limits)

    def sync(self):
        now = self.now()
        current = len(self.pods)
        per_pod = {}
        for slot, pod in self.pods.items():
            if pod.ready():
                try:
                    per_pod[slot] = scrape(pod.metrics_port)
                except OSError:
                    pass
        desired = [m.get("feedd_fleet_desired_servers", 0) for m in per_pod.values()]
        metric = max(desired) if desired else None
        proposal = current
        if metric:
            ratio = metric / (TARGET_AVERAGE_VALUE * current)
            if abs(ratio - 1.0) > TOLERANCE:
                proposal = math.ceil(metric / TARGET_AVERAGE_VALUE)
        self.recs.append((now, proposal))
        keep = max(UP_WINDOW, DOWN_WINDOW) / self.factor
        self.recs = [(t, r) for t, r in self.recs if t >= now - keep]
        up_rec = min(r for t, r in self.recs if t >= now - UP_WINDOW / self.factor)
        down_rec = max(r for t, r in self.recs if t >= now - DOWN_WINDOW / self.factor)
        rec = current
        if rec < up_rec:
            rec = up_rec
        if rec > down_rec:
            rec = down_rec
        if rec > current:
            rec = min(rec, self.policy_limit(current, True, now))
        elif rec < current:
            rec = max(rec, self.policy_limit(current, False, now))
        rec = max(MIN_REPLICAS, min(self.args.max_replicas, rec))
        if rec != current:
            self.events.append((now, rec - current))
            self.scale_to(rec)
        clients = {}
        for j in self.jobs:
            last = self.client_last(j)
            if last:
                clients[j] = {"rate": last["samples"] / last["dt"],
                              "wait": last["wait_s"] / last["dt"],
                              "lost": last["lost"], "dup": last["dup"]}
        demand = sum(rate for _, _, _, rate in self.jobs.values())
        self.log(event="sync", replicas=current, scaled_to=rec, metric=metric,
                     proposal=proposal, ideal=max(1, math.ceil(demand / self.capacity - 1e-9)),
                     demand_set=demand, clients=clients,
                     pods={str(s): {k.replace("feedd_fleet_", ""): v for k, v in m.items()
                                    if "job_" not in k and "worker_" not in k}
                           for s, m in per_pod.items()})

    def calibrate(self):
        """One server outside the fleet, one client that never pauses: the server's measured
        capacity, alone on this host. The server goes away after: a fleet pod that had served
        it would start the run with that client's demand in its windows."""
        pod = Pod(self, self.args.max_replicas)
        end = time.monotonic() + 60
        while not pod.ready() and time.monotonic() < end:
            time.sleep(0.05)
        self.start_job(9, 0, ports=[pod.port])
        caps = []
        end = time.monotonic() + max(8.0, 6 * FLEET_WINDOW / self.factor)
        while time.monotonic() < end:
            time.sleep(FLEET_WINDOW / self.factor)
            cap = scrape(pod.metrics_port).get("feedd_fleet_capacity_samples_per_second", 0)
            if cap:
                caps.append(cap)
        self.stop_job(9)
        pod.drain(self.factor)
        caps = sorted(caps[len(caps) // 3:])  # past the first windows
        self.capacity = caps[len(caps) // 2]
        self.log(event="calibrated", capacity=self.capacity, windows=caps)

    def run(self):
        a = self.args
        self.calibrate()
        rate = round(a.job_share * self.capacity, 1)
        phases = [(0.0, "one job"), (a.phase, "four jobs"), (a.phase * 3, "one job again"),
                  (a.phase * 3 + a.tail, "end")]
        self.scale_to(1)
        self.wait_ready()
        self.t0 = time.monotonic()
        self.log(event="phase", name=phases[0][1], job_rate=rate, capacity=self.capacity)
        self.start_job(0, rate)
        step = SYNC_PERIOD / self.factor
        next_sync = step
        p = 1
        while p < len(phases):
            now = self.now()
            if now >= phases[p][0]:
                self.log(event="phase", name=phases[p][1])
                if p == 1:
                    for j in (1, 2, 3):
                        self.start_job(j, rate)
                elif p == 2:
                    for j in (1, 2, 3):
                        self.stop_job(j)
                p += 1
                continue
            if now >= next_sync:
                self.sync()
                next_sync += step
            time.sleep(0.02)
        self.stop_job(0)
        self.scale_to(0)
        for th in self.drains:
            th.join()
        self.timeline.close()
        for s in self.reserved:
            s.close()


def steady(sim, multiples, seconds):
    """The metric alone, no controller: one server, one job at m x its capacity for each m.
    A job above one server's capacity waits; the starvation correction should still name the
    fleet it needs (ideal: ceil(m)). Lines go to steady.jsonl."""
    sim.calibrate()
    rows = []
    with open(os.path.join(sim.out, "steady.jsonl"), "w") as f:
        for m in multiples:
            sim.scale_to(1)
            sim.wait_ready()
            pod = next(iter(sim.pods.values()))
            rate = round(m * sim.capacity, 1)
            sim.start_job(0, rate, ports=[pod.port])
            seen = []
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(FLEET_WINDOW / sim.factor)
                seen.append(scrape(pod.metrics_port))
            sim.stop_job(0)
            tail = seen[len(seen) // 2:]  # steady state: the second half
            row = {"multiple": m, "rate": rate, "capacity_calibrated": sim.capacity,
                   "ideal": math.ceil(m - 1e-9),
                   "desired": sorted({x.get("feedd_fleet_desired_servers") for x in tail}),
                   "raw": [round(x.get("feedd_fleet_desired_servers_raw", 0), 3) for x in tail],
                   "wait": [round(x.get(f'feedd_fleet_job_wait_fraction{{job="job-0"}}', 0), 3)
                            for x in tail]}
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
            # A fresh server for the next multiple: this one's windows hold this job.
            sim.scale_to(0)
            for th in sim.drains:
                th.join()
    return rows


def summarise(out, factor, phase):
    lines = [json.loads(l) for l in open(os.path.join(out, "timeline.jsonl"))]
    syncs = [l for l in lines if l.get("event") == "sync"]
    cal = next(l for l in lines if l.get("event") == "calibrated")
    step_t, leave_t = phase, phase * 3
    first_up = next((s["t"] for s in syncs if s["t"] >= step_t and s["scaled_to"] > s["replicas"]),
                    None)
    after = [s for s in syncs if first_up is not None and first_up + 60 / factor <= s["t"] < leave_t]
    waits = [c["wait"] for s in after for c in s["clients"].values()]
    over = max((s["replicas"] - s["ideal"] for s in syncs if s["t"] >= step_t), default=0)
    back = next((s["t"] for s in syncs if s["t"] >= leave_t and s["replicas"] <= s["ideal"]), None)

    def steady(lo, hi):
        sel = [s for s in syncs if lo <= s["t"] < hi and s["metric"] is not None]
        tail = sel[len(sel) // 2:]
        return {"ideal": tail[-1]["ideal"] if tail else None,
                "metric": sorted({s["metric"] for s in tail}),
                "replicas": sorted({s["replicas"] for s in tail})}

    ends = {}
    for f in sorted(os.listdir(os.path.join(out, "clients"))):
        if f.endswith(".jsonl") and f != "job9.jsonl":
            for l in open(os.path.join(out, "clients", f)):
                d = json.loads(l)
                if d.get("event") == "end":
                    ends[f[:-6]] = d
    summary = {
        "factor": factor,
        "capacity_one_server": cal["capacity"],
        "steady_one_job": steady(0, step_t),
        "steady_four_jobs": steady(step_t, leave_t),
        "steady_one_job_again": steady(leave_t + (DOWN_WINDOW + 60) / factor, 1e9),
        "step_at": step_t,
        "first_scale_up_at": first_up,
        "hpa_reaction_s": None if first_up is None else round(first_up - step_t, 3),
        "client_wait_max_after_reaction_plus_60s_scaled": max(waits) if waits else None,
        "client_wait_mean_after_reaction_plus_60s_scaled": (sum(waits) / len(waits)) if waits else None,
        "max_replicas_above_ideal": over,
        "jobs_left_at": leave_t,
        "back_to_ideal_at": back,
        "shrink_s": None if back is None else round(back - leave_t, 3),
        "scale_down_window_scaled_s": DOWN_WINDOW / factor,
        "clients": ends,
        "samples_lost": sum(e["lost"] for e in ends.values()),
        "samples_dup": sum(e["dup"] for e in ends.values()),
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary, syncs


def plot(out, syncs, summary):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found: no plot (Debian: python3-matplotlib)")
        return
    t = [s["t"] for s in syncs]
    fig, ax = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    ax[0].step(t, [s["replicas"] for s in syncs], where="post", label="replicas (pods)")
    ax[0].plot(t, [s["metric"] or 0 for s in syncs], ".", label="feedd_fleet_desired_servers (max)")
    ax[0].step(t, [s["ideal"] for s in syncs], where="post", ls="--", label="ideal (demand / capacity)")
    ax[0].set_ylabel("servers")
    ax[0].legend(loc="upper right", fontsize=8)
    jobs = sorted({j for s in syncs for j in s["clients"]})
    for j in jobs:
        ax[1].plot(t, [s["clients"].get(j, {}).get("rate", float("nan")) for s in syncs], label=f"job {j}")
        ax[2].plot(t, [s["clients"].get(j, {}).get("wait", float("nan")) for s in syncs], label=f"job {j}")
    ax[1].plot(t, [sum(c["rate"] for c in s["clients"].values()) for s in syncs], "k",
               label="taken (sum)")
    ax[1].plot(t, [s["demand_set"] for s in syncs], "k--", label="demand (sum of the jobs' rates)")
    ax[1].set_ylabel("samples/s taken")
    ax[1].legend(loc="upper right", fontsize=8)
    ax[2].set_ylabel("fraction waiting in next()")
    ax[2].set_xlabel(f"seconds (Kubernetes' periods / {summary['factor']:g})")
    ax[2].legend(loc="upper right", fontsize=8)
    fig.suptitle("HPA on feedd_fleet_desired_servers, real feedd + real loaders")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scale.png"), dpi=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--factor", type=float, default=10.0,
                    help="Kubernetes' and feedd's periods divided by this (10)")
    ap.add_argument("--max-replicas", type=int, default=4)
    ap.add_argument("--job-share", type=float, default=0.3,
                    help="each job's rate as a fraction of one server's capacity (0.3)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--phase", type=float, default=40.0,
                    help="seconds of job 0 alone; four jobs run twice this long (40)")
    ap.add_argument("--tail", type=float, default=75.0,
                    help="seconds of job 0 after the others leave (75)")
    ap.add_argument("--steady", default="",
                    help="instead of the run: comma-separated multiples of one server's capacity "
                         "(e.g. 0.5,1,2,4) for one job on one server, the metric in steady state")
    ap.add_argument("--steady-seconds", type=float, default=12.0)
    args = ap.parse_args()
    sim = Sim(args)
    if args.steady:
        try:
            rows = steady(sim, [float(m) for m in args.steady.split(",")], args.steady_seconds)
        finally:
            for j in list(sim.jobs):
                sim.jobs[j][0].kill()
            for pod in sim.pods.values():
                pod.proc.kill()
        for r in rows:
            print(json.dumps(r))
        return
    try:
        sim.run()
    finally:
        for j in list(sim.jobs):
            sim.jobs[j][0].kill()
        for pod in sim.pods.values():
            pod.proc.kill()
    summary, syncs = summarise(sim.out, args.factor, args.phase)
    plot(sim.out, syncs, summary)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
