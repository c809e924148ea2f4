"""One real PyTorch training loop, three sources of batches.

    headtohead.py --source {synthetic,dataloader,feedclient} --model resnet18 ...

The loop: torchvision resnet18/resnet50 (random init), channels_last, bf16
autocast, SGD with momentum, cross-entropy, batch 256. Sources:
  synthetic   batches already on the GPU (normalised bf16): the ceiling;
  dataloader  torchvision ImageFolder + RandomResizedCrop(224) +
              RandomHorizontalFlip + PILToTensor, DataLoader(num_workers=k,
              pin_memory=True, persistent_workers=True), uint8 to the GPU and
              normalised there;
  feedclient  feedclient.Loader over feedd servers (--targets): bf16
              channels_last on the GPU, zero-copy.
After --warmup seconds, --windows consecutive windows of --seconds each are
measured: images/s, batch wait p50/p99/max (time the loop spent getting a
batch), idle % of the training stream (gaps between one step's last kernel
and the next step's first, from CUDA events), the step's own GPU time (its
first kernel to its last, median), NVML utilisation, GPM SM
activity / occupancy / tensor / DRAM bandwidth, GPU memory, host cores used
(this process, its DataLoader workers and --pids, from /proc). One JSON line
per window goes to --json; --series writes every batch's wait and the GPU
samples for the plots.

Two waits are reported, because a loop that never synchronises runs ahead of
the GPU: then next() also blocks while every delivery slot is still in use by
queued steps (back-pressure from a busy GPU, not starvation).
  wait       host time in next() (p50/p99/max);
  stream gap what the GPU waited for each step: from the previous step's last
             kernel to this step's first (CUDA events), per step (p50/p99/max).
--max-inflight N bounds the steps queued ahead of the GPU, as a loop that
reads its loss N-1 steps late does (0: unbounded, the loop above); with it,
host wait measures data latency alone.

--recipe trains as torchvision's v2 ImageNet recipe does (with --size 176):
the DataLoader's workers run RandomResizedCrop + flip + TrivialAugmentWide
(bilinear) + Normalize + RandomErasing(0.1) in torchvision and ship float32;
feedclient asks its servers for the preset "torchvision-v2-recipe" and gets
bf16; both then get MixUp(0.2)/CutMix(1.0) per batch on the GPU
(feedclient.mix; the reference recipe runs it in the workers' collate) and
CrossEntropyLoss(label_smoothing=0.1) on the soft labels.

--device cpu runs the same loop on the CPU (a smoke test; no GPU metrics).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from typing import Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_metrics import GpuMetrics  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return 0.0


def children(pid: int) -> List[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def host_cpu_seconds(extra_pids: List[int]) -> float:
    me = os.getpid()
    return sum(proc_cpu_seconds(p) for p in [me, *children(me), *extra_pids])


def synthetic_batches(args, dev) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator(device="cpu").manual_seed(0)
    pool = []
    for _ in range(4):
        x = torch.randint(0, 256, (args.batch, 3, args.size, args.size), generator=g,
                          dtype=torch.uint8)
        pool.append((normalise(x.to(dev)), torch.randint(0, 1000, (args.batch,), generator=g)
                     .to(dev)))
    k = 0
    while True:
        yield pool[k % 4]
        k += 1


def normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=x.device).view(1, 3, 1, 1)
    y = ((x.float() / 255.0 - mean) / std)
    if x.device.type == "cuda":
        y = y.to(torch.bfloat16)
    return y.contiguous(memory_format=torch.channels_last)


def dataloader_batches(args, dev) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    from torchvision import transforms as T
    if args.recipe:
        bil = T.InterpolationMode.BILINEAR
        tf = T.Compose([T.RandomResizedCrop(args.size, interpolation=bil, antialias=True),
                        T.RandomHorizontalFlip(), T.TrivialAugmentWide(interpolation=bil),
                        T.PILToTensor(), T.ConvertImageDtype(torch.float),
                        T.Normalize(MEAN, STD), T.RandomErasing(p=0.1)])
    else:
        tf = T.Compose([T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = torchvision.datasets.ImageFolder(args.tree, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                     num_workers=args.workers, pin_memory=dev.type == "cuda",
                                     persistent_workers=args.workers > 0, drop_last=True)
    while True:
        for x, y in dl:
            x = x.to(dev, non_blocking=True)
            if args.recipe:  # already normalised by the recipe's transforms
                x = x.to(torch.bfloat16 if dev.type == "cuda" else torch.float32)
                yield x.contiguous(memory_format=torch.channels_last), y.to(dev, non_blocking=True)
            else:
                yield normalise(x), y.to(dev, non_blocking=True)


def feedclient_batches(args, dev) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    import feedclient
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    lane = {}
    if args.decode_lane != "off":  # only then, so that a package without the lane still runs
        lane = dict(decode_lane=args.decode_lane, decode_share=args.decode_share,
                    decode_lane_threads=args.decode_lane_threads)
        if args.decode_share_max > 0:
            lane["decode_share_max"] = args.decode_share_max
        # The lane's open line and per-epoch decisions are feedclient's INFO lines: in the log.
        logging.basicConfig(stream=sys.stderr, format="%(name)s %(levelname)s: %(message)s")
        logging.getLogger("feedclient").setLevel(logging.INFO)
    loader = feedclient.Loader(args.targets.split(","), args.dataset, batch_size=args.batch,
                               seed=1, device=dev, size=args.size, dtype=dtype,
                               layout="channels_last", drop_last=True,
                               window_per_server=args.window, prefetch=args.prefetch,
                               augment=feedclient.augment.PRESET if args.recipe else None,
                               **lane)
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for x, y in loader:
            yield x, y
        epoch += 1


SOURCES = {"synthetic": synthetic_batches, "dataloader": dataloader_batches,
           "feedclient": feedclient_batches}


def pct(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", choices=SOURCES, required=True)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--tree", help="ImageFolder tree (dataloader)")
    ap.add_argument("--targets", help="feedd targets, comma-separated (feedclient)")
    ap.add_argument("--dataset", default="imagenet", help="dataset name on feedd (feedclient)")
    ap.add_argument("--workers", type=int, default=15, help="DataLoader num_workers")
    ap.add_argument("--window", type=int, default=4, help="feedclient window_per_server")
    ap.add_argument("--prefetch", type=int, default=6, help="feedclient prefetch")
    ap.add_argument("--decode-lane", default="off", choices=("off", "gpu", "cpu", "auto"),
                    help="feedclient decode_lane: the share of samples decoded in the training "
                         "process (gpu: the GPU's JPEG engines)")
    ap.add_argument("--decode-share", type=float, default=0.5, help="feedclient decode_share")
    ap.add_argument("--decode-lane-threads", type=int, default=0,
                    help="feedclient decode_lane_threads (0: its default, 2)")
    ap.add_argument("--decode-share-max", type=float, default=0.0,
                    help="feedclient decode_share_max (above 0: the share adapts between epochs)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--pids", default="", help="more processes whose CPU counts (feedd)")
    ap.add_argument("--max-inflight", type=int, default=0,
                    help="steps queued ahead of the GPU before the loop waits (0: unbounded)")
    ap.add_argument("--label", default="", help="configuration name for the output")
    ap.add_argument("--recipe", action="store_true",
                    help="torchvision's v2 ImageNet recipe: TrivialAugmentWide + RandomErasing(0.1) "
                    "per sample (torchvision in the workers, or feedd's preset), MixUp(0.2)/CutMix(1.0) "
                    "per batch on the GPU, CrossEntropyLoss(label_smoothing=0.1); use --size 176")
    ap.add_argument("--json", required=True, help="append one line per window")
    ap.add_argument("--series", help="write per-batch waits and GPU samples (JSON)")
    args = ap.parse_args()

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.model)(num_classes=1000).to(dev)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-5)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1 if args.recipe else 0.0)
    mix = None
    if args.recipe:
        from feedclient.mix import MixUpCutMix
        mix = MixUpCutMix(1000, seed=1, mixup_alpha=0.2, cutmix_alpha=1.0)
    extra = [int(p) for p in args.pids.split(",") if p]
    gm = GpuMetrics(dev.index or 0).start() if cuda else None
    batches = SOURCES[args.source](args, dev)

    waits: List[Tuple[float, float]] = []  # (time, seconds waited)
    events: List[Tuple[object, object]] = []
    t_start = time.monotonic()
    t_measure = t_start + args.warmup
    windows: List[Dict] = []
    win = 0
    win_t0 = win_cpu0 = None
    win_images = 0
    win_first_event = 0
    steps = 0
    losses: List[float] = []
    step_done: List[object] = []  # end events of the steps still counted as in flight
    while win < args.windows:
        if cuda and args.max_inflight > 0:
            while len(step_done) >= args.max_inflight:
                step_done.pop(0).synchronize()
        t0 = time.monotonic()
        x, y = next(batches)
        t1 = time.monotonic()
        if mix is not None:
            x, y = mix(x, y, epoch=0, batch=steps)
            y = y.float()
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = crit(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            e1.record()
            events.append((e0, e1))
            if args.max_inflight > 0:
                step_done.append(e1)
        steps += 1
        if steps % 50 == 0:
            losses.append(float(loss.detach()))
        now = time.monotonic()
        if win_t0 is not None:
            waits.append((t1, t1 - t0))
            win_images += x.shape[0]
        if win_t0 is None and now >= t_measure:
            if cuda:
                torch.cuda.synchronize()
            win_t0, win_cpu0 = time.monotonic(), host_cpu_seconds(extra)
            win_first_event = len(events)
            win_waits_from = len(waits)
        elif win_t0 is not None and now - win_t0 >= args.seconds:
            if cuda:
                torch.cuda.synchronize()
            t_end = time.monotonic()
            cpu = host_cpu_seconds(extra) - win_cpu0
            w = [s for _, s in waits[win_waits_from:]]
            rec = {"label": args.label, "source": args.source, "model": args.model,
                   "window": win, "seconds": t_end - win_t0, "images": win_images,
                   "img_per_s": win_images / (t_end - win_t0),
                   "wait_p50_ms": pct(w, 0.5) * 1e3, "wait_p99_ms": pct(w, 0.99) * 1e3,
                   "wait_max_ms": max(w) * 1e3, "host_cores": cpu / (t_end - win_t0),
                   "batch": args.batch, "workers": args.workers if args.source == "dataloader"
                   else None}
            if cuda:
                ev = events[win_first_event:]
                step_ms = [a.elapsed_time(b) for a, b in ev]
                busy = sum(step_ms) / 1e3
                # The step's own time on the GPU (its first kernel to its last): what the decode
                # lane must not slow by more than 5%.
                rec["step_p50_ms"] = pct(step_ms, 0.5)
                span = ev[0][0].elapsed_time(ev[-1][1]) / 1e3 if ev else 0.0
                rec["stream_idle_pct"] = 100.0 * (1 - busy / span) if span > 0 else None
                gaps = [max(0.0, a[1].elapsed_time(b[0])) for a, b in zip(ev, ev[1:])]
                rec["gap_p50_ms"], rec["gap_p99_ms"] = pct(gaps, 0.5), pct(gaps, 0.99)
                rec["gap_max_ms"] = max(gaps) if gaps else None
                rec["max_inflight"] = args.max_inflight
                rec.update(gm.window(win_t0, t_end))
                rec["torch_max_allocated_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20
                rec["unavailable"] = gm.unavailable or None
            windows.append(rec)
            with open(args.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"{args.label or args.source} {args.model} window {win}: "
                  f"{rec['img_per_s']:.0f} img/s, wait p99 {rec['wait_p99_ms']:.2f} ms, "
                  f"gap p99 {rec.get('gap_p99_ms') or 0:.2f} ms, "
                  f"idle {rec.get('stream_idle_pct') or 0:.1f}%, "
                  f"NVML {rec.get('nvml_util_pct') or 0:.0f}%, "
                  f"SM {rec.get('sm_active_pct') or 0:.0f}%, cores {rec['host_cores']:.1f}",
                  flush=True)
            win += 1
            events.clear()
            win_first_event = 0
            if win < args.windows:
                win_t0, win_cpu0 = time.monotonic(), host_cpu_seconds(extra)
                win_images = 0
                win_waits_from = len(waits)
    if gm:
        gm.stop()
    if args.series:
        with open(args.series, "w") as f:
            json.dump({"label": args.label, "source": args.source, "model": args.model,
                       "t0": t_start, "waits": waits, "losses": losses,
                       "gpu": gm.series if gm else {}}, f)
    ips = [w["img_per_s"] for w in windows]
    print(f"{args.label or args.source} {args.model}: median {statistics.median(ips):.0f} img/s "
          f"(range {min(ips):.0f}-{max(ips):.0f}) over {len(ips)} windows of {args.seconds:g} s; "
          f"loss {losses[0] if losses else float('nan'):.3f} -> "
          f"{losses[-1] if losses else float('nan'):.3f}", flush=True)
    os._exit(0)  # DataLoader workers and the loader's threads need no orderly teardown here


if __name__ == "__main__":
    sys.exit(main())
