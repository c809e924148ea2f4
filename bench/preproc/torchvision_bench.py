#!/usr/bin/env python3
"""torchvision's own training transform, per core: the denominator of the
engine's speed-up.

Each of N worker processes (one per core by default, torch limited to one
thread each) runs, on its share of the images, what a PyTorch ImageFolder
training loader runs per sample:

    pil_loader(path)                       # open + decode + convert("RGB")
    RandomResizedCrop(224, antialias=True) # torchvision's get_params + Pillow BILINEAR
    RandomHorizontalFlip()
    PILToTensor()                          # uint8 CHW, like the engine's uint8 HWC

Files are read through the page cache as the real loader reads them (--warmup
reads every file once first). Every worker runs for the same --seconds from a
common start (as feed-preproc-bench's threads do), so a straggler does not
stretch the total: the total is the sum of the workers' rates. Prints a
table and one JSON line starting with {"bench": "torchvision", ...} so the
ratio against feed-preproc-bench's JSON line can be computed (ratio.py).

Usage: torchvision_bench.py DATA [--procs N] [--seconds S | --images-per-proc K]
                            [--size 224] [--warmup] [--json FILE]
DATA is an ImageFolder root (class folders of .jpg/.jpeg/.JPEG files) or a
text file listing image paths, one a line.
"""
import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time

EXTS = (".jpg", ".jpeg", ".JPEG", ".JPG")


def list_images(data):
    if os.path.isfile(data):
        with open(data) as f:
            return [line.strip() for line in f if line.strip()]
    paths = []
    for cls in sorted(os.listdir(data)):
        d = os.path.join(data, cls)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith(EXTS):
                paths.append(os.path.join(d, name))
    return paths


def worker(rank, paths, seconds, n_images, size, barrier, results):
    import torch
    from torchvision import transforms as T
    from torchvision.datasets.folder import pil_loader

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    tf = T.Compose([
        T.RandomResizedCrop(size, antialias=True),
        T.RandomHorizontalFlip(),
        T.PILToTensor(),
    ])
    mine = paths[rank::results["procs"]] or paths
    for p in mine[:8]:  # warm the code paths
        tf(pil_loader(p))
    barrier.wait()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    deadline = t0 + seconds
    done = 0
    checksum = 0
    while (done < n_images) if n_images else (time.perf_counter() < deadline):
        x = tf(pil_loader(mine[done % len(mine)]))
        checksum += int(x[0, 0, 0])
        done += 1
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    results[rank] = (done, wall, cpu, checksum)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--procs", type=int, default=os.cpu_count())
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    ap.add_argument("--images-per-proc", type=int, default=0, help="fixed count instead of --seconds")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--warmup", action="store_true", help="read every file once first (page cache)")
    ap.add_argument("--json", help="also write the JSON line to this file")
    args = ap.parse_args()

    paths = list_images(args.data)
    if not paths:
        sys.exit(f"no images under {args.data}")
    if args.warmup:
        for p in paths:
            with open(p, "rb") as f:
                f.read()

    import PIL
    import torch
    import torchvision

    rows = []
    for procs in sorted({1, args.procs}):
        mgr = mp.Manager()
        results = mgr.dict()
        results["procs"] = procs
        barrier = mp.Barrier(procs + 1)
        ps = [mp.Process(target=worker, args=(r, paths, args.seconds, args.images_per_proc, args.size, barrier,
                                                 results))
              for r in range(procs)]
        for p in ps:
            p.start()
        barrier.wait()
        t0 = time.perf_counter()
        for p in ps:
            p.join()
        wall = time.perf_counter() - t0
        per = [results[r] for r in range(procs)]
        images = sum(r[0] for r in per)
        per_proc = [r[0] / r[1] for r in per]
        rows.append({
            "procs": procs,
            "images": images,
            "wall_s": round(wall, 3),
            "img_per_s_total": round(sum(per_proc), 1),
            "img_per_s_per_proc": round(sum(per_proc) / procs, 1),
            "cpu_ms_per_img": round(1e3 * sum(r[2] for r in per) / images, 3),
        })

    print(f"{'procs':>5} {'images':>7} {'wall s':>7} {'img/s total':>12} {'img/s/proc':>11} {'cpu ms/img':>10}")
    for r in rows:
        print(f"{r['procs']:>5} {r['images']:>7} {r['wall_s']:>7} {r['img_per_s_total']:>12} "
              f"{r['img_per_s_per_proc']:>11} {r['cpu_ms_per_img']:>10}")
    line = {
        "bench": "torchvision",
        "data": os.path.abspath(args.data),
        "n_files": len(paths),
        "size": args.size,
        "cores": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "runs": rows,
        "img_per_s_1proc": rows[0]["img_per_s_total"],
        "img_per_s_nproc": rows[-1]["img_per_s_total"],
        "nproc": rows[-1]["procs"],
    }
    print(json.dumps(line))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
