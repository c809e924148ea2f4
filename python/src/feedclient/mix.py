"""Per-batch MixUp / CutMix on the training process's device, as the
torchvision ImageNet recipe does them in its collate function
(references/classification: ``RandomChoice([RandomMixup(num_classes, p=1.0,
alpha=0.2), RandomCutmix(num_classes, p=1.0, alpha=1.0)])``).

They belong here rather than on the servers: they mix two samples of one
batch, and a batch is only whole on the client (the servers make its samples
independently, possibly on different hosts). They run in place on the
batch's device, so they cost the GPU a few elementwise kernels.

Each batch's draws come from its own generator keyed by ``(seed, epoch,
batch_number)``, so a resumed job mixes the same way. The labels come back
as class probabilities (float, rows summing to 1), which
``torch.nn.CrossEntropyLoss(label_smoothing=...)`` accepts as they are::

    mix = feedclient.mix.MixUpCutMix(num_classes=1000, seed=seed)
    for b, (images, labels) in enumerate(loader):
        images, targets = mix(images, labels, epoch=epoch, batch=b)
        loss = criterion(model(images), targets)
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import torch

__all__ = ["MixUpCutMix", "MixParams"]


class MixParams:
    """One batch's draws: ``kind`` ("mixup" or "cutmix"), ``lam`` (the first
    image's share: Beta(alpha, alpha), for CutMix corrected to the box's
    exact area), ``drawn_lam`` (the Beta draw itself) and, for CutMix, the box
    ``(y1, y2, x1, x2)`` taken from the batch rolled by one."""

    def __init__(self, kind: str, lam: float, drawn_lam: float,
                 box: Optional[Tuple[int, int, int, int]]) -> None:
        self.kind, self.lam, self.drawn_lam, self.box = kind, lam, drawn_lam, box


class MixUpCutMix:
    """Either MixUp(``mixup_alpha``) or CutMix(``cutmix_alpha``), chosen with
    equal probability per batch (an alpha of 0 leaves that one out; both 0
    is refused). ``layout`` is the images' shape order, "NCHW" (also for
    channels_last memory) or "NHWC"."""

    def __init__(self, num_classes: int, seed: int = 0, mixup_alpha: float = 0.2,
                 cutmix_alpha: float = 1.0, layout: str = "NCHW") -> None:
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError("feedclient.mix: num_classes must be a positive int")
        for name, a in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if not (isinstance(a, (int, float)) and math.isfinite(a) and a >= 0):
                raise ValueError(f"feedclient.mix: {name} must be a finite number >= 0")
        if mixup_alpha == 0 and cutmix_alpha == 0:
            raise ValueError("feedclient.mix: mixup_alpha and cutmix_alpha are both 0")
        if layout not in ("NCHW", "NHWC"):
            raise ValueError("feedclient.mix: layout must be 'NCHW' or 'NHWC'")
        self.num_classes, self.seed = num_classes, seed
        self.kinds = [(k, a) for k, a in (("mixup", mixup_alpha), ("cutmix", cutmix_alpha)) if a]
        self.layout = layout

    def params(self, height: int, width: int, epoch: int, batch: int) -> MixParams:
        """The draws for batch ``batch`` of ``epoch`` (a pure function of them and the seed)."""
        rng = np.random.default_rng([self.seed & (2**64 - 1), epoch, batch, 0x6D6978])
        kind, alpha = self.kinds[int(rng.integers(len(self.kinds)))]
        lam = float(rng.beta(alpha, alpha))
        if kind == "mixup":
            return MixParams(kind, lam, lam, None)
        r_x, r_y = int(rng.integers(width)), int(rng.integers(height))
        r = 0.5 * math.sqrt(1.0 - lam)
        r_w, r_h = int(r * width), int(r * height)
        x1, y1 = max(r_x - r_w, 0), max(r_y - r_h, 0)
        x2, y2 = min(r_x + r_w, width), min(r_y + r_h, height)
        area = 1.0 - (x2 - x1) * (y2 - y1) / (width * height)
        return MixParams(kind, area, lam, (y1, y2, x1, x2))

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, *, epoch: int,
                 batch: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Mix ``images`` (float, N first) in place; returns them and the soft labels."""
        if images.ndim != 4 or not images.is_floating_point():
            raise ValueError("feedclient.mix: images must be a float tensor of 4 dimensions")
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise ValueError("feedclient.mix: labels must be one int per image")
        h, w = (images.shape[2], images.shape[3]) if self.layout == "NCHW" else \
            (images.shape[1], images.shape[2])
        p = self.params(h, w, epoch, batch)
        target = torch.nn.functional.one_hot(labels.to(torch.int64), self.num_classes)
        target = target.to(dtype=images.dtype)
        rolled = images.roll(1, 0)
        if p.kind == "mixup":
            images.mul_(p.lam).add_(rolled.mul_(1.0 - p.lam))
        else:
            y1, y2, x1, x2 = p.box
            if self.layout == "NCHW":
                images[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
            else:
                images[:, y1:y2, x1:x2, :] = rolled[:, y1:y2, x1:x2, :]
        target = target.mul(p.lam).add_(target.roll(1, 0).mul_(1.0 - p.lam))
        return images, target
