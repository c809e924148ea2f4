#!/usr/bin/env python3
"""torchvision's side of feed-augment-bench: the ImageNet recipe's training
transform on one core, over the same originals, read into memory first.

Per image, two pipelines side by side (which goes first alternates):

    plain:  pil_loader (decode + convert RGB) -> RandomResizedCrop(SIZE, antialias)
            -> RandomHorizontalFlip -> PILToTensor
    recipe: pil_loader -> RandomResizedCrop(SIZE, antialias) -> RandomHorizontalFlip
            -> TrivialAugmentWide(interpolation=BILINEAR) -> PILToTensor
            -> ConvertImageDtype(float) -> Normalize(ImageNet) -> RandomErasing(p=0.1)

(torchvision/references/classification/presets.py's ClassificationPresetTrain
with auto_augment_policy="ta_wide", random_erase_prob=0.1, crop 176, which
gives TrivialAugmentWide the recipe's bilinear interpolation, as feedd's
preset torchvision-v2-recipe does.) torch is held to one thread; times are
this thread's CPU time (time.thread_time_ns), so other jobs on a shared
machine do not count. Prints one line a pass: pass, images, plain and recipe
images per CPU-second.

Usage: torchvision_augment_bench.py DATA [--passes N] [--size 176]
DATA is an ImageFolder root (class folders of .jpg/.jpeg/.JPEG files).
"""
import argparse
import io
import time
from pathlib import Path

import torch
from PIL import Image
from torchvision import transforms as T

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--size", type=int, default=176)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    files = sorted(p for p in Path(a.data).glob("*/*")
                   if p.suffix.lower() in (".jpg", ".jpeg"))
    blobs = [f.read_bytes() for f in files]
    crop = [T.RandomResizedCrop(a.size, antialias=True), T.RandomHorizontalFlip()]
    plain = T.Compose(crop + [T.PILToTensor()])
    ta = T.TrivialAugmentWide(interpolation=T.InterpolationMode.BILINEAR)
    recipe = T.Compose(crop + [ta, T.PILToTensor(),
                               T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD),
                               T.RandomErasing(p=0.1)])
    print("pass images plain_img_s recipe_img_s")
    for p in range(a.passes):
        ns = [0, 0]
        for i, b in enumerate(blobs):
            for k in range(2):
                mode = (i + k) & 1  # 0 plain, 1 recipe
                t0 = time.thread_time_ns()
                img = Image.open(io.BytesIO(b)).convert("RGB")
                (recipe if mode else plain)(img)
                ns[mode] += time.thread_time_ns() - t0
        n = len(blobs)
        print(f"{p} {n} {1e9 * n / ns[0]:.1f} {1e9 * n / ns[1]:.1f}", flush=True)


if __name__ == "__main__":
    main()
