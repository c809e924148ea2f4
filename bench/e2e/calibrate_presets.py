#!/usr/bin/env python3
"""Measures the GPU time per image of real training steps, to set feed-bench's
--model presets. Runs torchvision's resnet18, resnet50 and vit_b_16 (fwd +
bwd + SGD, bf16 autocast, channels_last, synthetic data already on the GPU, so
only the GPU's own time counts) and prints microseconds per image as JSON.

Needs torch and torchvision (the GPU machine has them); run there once:
  python3 bench/e2e/calibrate_presets.py [--batch 256] [--steps 30]
"""
import argparse
import json
import time

import torch
import torchvision


def measure(name, batch, steps, warmup):
    model = getattr(torchvision.models, name)(num_classes=1000).cuda()
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    gpu_ms = start.elapsed_time(end)
    return {"model": name, "batch": batch, "steps": steps,
            "gpu_ms_per_step": gpu_ms / steps, "us_per_image": 1000.0 * gpu_ms / steps / batch,
            "images_per_s": steps * batch / (gpu_ms / 1000.0), "wall_s": wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "torchvision": torchvision.__version__, "results": []}
    for name in ("resnet18", "resnet50", "vit_b_16"):
        out["results"].append(measure(name, a.batch, a.steps, a.warmup))
        print(json.dumps(out["results"][-1]), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
