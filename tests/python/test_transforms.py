"""feedd's transforms against the real torchvision.

Train: the crop boxes feedd draws (feed_plan_sample, which every server runs)
follow the distribution of torchvision.transforms.RandomResizedCrop.get_params
— two-sample Kolmogorov-Smirnov over 20,000 draws each, for area, aspect and
position — and flip with probability 0.5. Both sides are seeded, so the
statistics are the same on every run; a deliberately different scale must
fail the same test, so it has the power to catch a drift.

Eval: feedd's Resize(256) + CenterCrop(224) against torchvision's on
Pillow-decoded images, PSNR per image, on generated JPEGs and on the ImageNet
sample when it is there. Bound: every image >= 35 dB, median >= 45 dB
(measured: ImageNet sample min 38.3 dB, median 82.4 dB; generated min 44.3 dB;
before the eval box was exact, 27.2 and 39.0 dB). feedd resizes from the
exact fractional box torchvision's resize-then-crop maps onto the output (a
300x200 image: 62.5,12.5 175x175), with the pixels around it; what is left is
decoder and fixed-point rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

import feedclient
from conftest import class_dirs

DRAWS = 20000
# Two-sample KS critical value at alpha = 1e-4 for DRAWS draws on each side.
KS_CRIT = math.sqrt(-0.5 * math.log(0.5e-4)) * math.sqrt(2.0 / DRAWS)
EVAL_PSNR_MIN_DB = 35.0
EVAL_PSNR_MEDIAN_DB = 45.0


def ks(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / len(a)
    fb = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def feed_boxes(w, h, scale=(0.08, 1.0)):
    boxes = np.empty((DRAWS, 4))
    flips = 0
    for k in range(DRAWS):
        p = feedclient.plan_sample(w, h, seed=99, epoch=k // 1000, index=k, scale=scale)
        boxes[k] = (p.x, p.y, p.w, p.h)
        flips += p.flip
    return boxes, flips


def torchvision_boxes(w, h):
    torch.manual_seed(1234)
    img = torch.empty(3, h, w)
    boxes = np.empty((DRAWS, 4))
    for k in range(DRAWS):
        i, j, bh, bw = T.RandomResizedCrop.get_params(img, scale=(0.08, 1.0),
                                                      ratio=(3.0 / 4.0, 4.0 / 3.0))
        boxes[k] = (j, i, bw, bh)
    return boxes


def stats(boxes, w, h):
    x, y, bw, bh = boxes.T
    return {"area": bw * bh / (w * h), "log_aspect": np.log(bw / bh), "x": x, "y": y}


@pytest.mark.parametrize("w,h", [(500, 375), (333, 500), (1000, 120)])
def test_crop_boxes_follow_torchvision(w, h):
    ours, flips = feed_boxes(w, h)
    theirs = torchvision_boxes(w, h)
    assert (ours[:, 0] + ours[:, 2] <= w).all() and (ours[:, 1] + ours[:, 3] <= h).all()
    so, st = stats(ours, w, h), stats(theirs, w, h)
    for key in so:
        d = ks(so[key], st[key])
        assert d < KS_CRIT, f"{w}x{h} {key}: KS D = {d:.4f} >= {KS_CRIT:.4f}"
    # Flip: binomial(20000, 0.5) is within 0.5 +- 0.015 far beyond 1e-4.
    assert abs(flips / DRAWS - 0.5) < 0.015


def test_crop_test_has_power():
    """The same test on a different scale range must fail: the statistic sees a real drift."""
    w, h = 500, 375
    ours, _ = feed_boxes(w, h, scale=(0.12, 1.0))
    theirs = torchvision_boxes(w, h)
    assert ks(stats(ours, w, h)["area"], stats(theirs, w, h)["area"]) > KS_CRIT


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * math.log10(255.0**2 / mse)


def files_in_order(root):
    """ImageFolder order: classes sorted, files sorted (what feedd and torchvision both use)."""
    out = []
    for d in class_dirs(root):
        out += sorted(p for p in d.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    return out


def eval_psnrs(server, dataset, root, limit):
    files = files_in_order(root)
    ref = T.Compose([T.Resize(256), T.CenterCrop(224)])
    out = []
    with feedclient.Loader([server.target], dataset, batch_size=16, device="cpu",
                           transform="eval", size=224, resize_size=256, dtype=torch.uint8,
                           layout="NHWC", with_indices=True) as loader:
        assert loader.dataset_size == len(files)
        for images, _, indices in loader:
            for img, idx in zip(images, indices.tolist()):
                if idx >= limit:
                    continue
                with Image.open(files[idx]) as im:
                    want = np.asarray(ref(im.convert("RGB")))
                out.append((psnr(img.numpy(), want), files[idx].name))
    return sorted(out)


def report(name, values):
    db = [v for v, _ in values]
    print(f"\n{name}: eval PSNR vs torchvision over {len(db)} images: min {db[0]:.2f} dB "
          f"({values[0][1]}), median {db[len(db) // 2]:.2f} dB, max {db[-1]:.2f} dB")


def test_eval_matches_torchvision_generated(server, data_dir):
    values = eval_psnrs(server, "small", data_dir / "small", limit=10**9)
    report("generated JPEGs", values)
    assert values[0][0] >= EVAL_PSNR_MIN_DB, values[:3]
    assert values[len(values) // 2][0] >= EVAL_PSNR_MEDIAN_DB


def test_eval_matches_torchvision_imagenet_sample(server, sample_dir):
    values = eval_psnrs(server, "sample", sample_dir, limit=250)
    report("ImageNet sample", values)
    assert values[0][0] >= EVAL_PSNR_MIN_DB, values[:3]
    assert values[len(values) // 2][0] >= EVAL_PSNR_MEDIAN_DB
