"""The ``augment=`` argument of :class:`feedclient.Loader`: per-sample
augmentations the servers make after the crop, named as torchvision names
them. This module only spells the description as text; the servers parse and
check it (feedd refuses an unknown op or an out-of-range parameter with a
message naming it, e.g. ``augment: RandomErasing.p must be in [0, 1]``).

Accepted forms:

- ``None``: no augmentation;
- a string: ``"TrivialAugmentWide(); RandomErasing(p=0.1)"`` or the preset
  ``"torchvision-v2-recipe"`` (TrivialAugmentWide + RandomErasing(p=0.1);
  the recipe's sizes are the Loader's ``size=176`` for training and
  ``resize_size=232, size=224`` for evaluation: :func:`recipe` gives all of
  them as Loader arguments);
- a list of dicts, each ``{"name": "RandAugment", "num_ops": 2, "magnitude": 9}``.

Ops: ``TrivialAugmentWide(num_magnitude_bins)``, ``RandAugment(num_ops,
magnitude, num_magnitude_bins)``, ``AutoAugment(policy="imagenet")``,
``ColorJitter(brightness, contrast, saturation, hue)``,
``RandomErasing(p, scale, ratio, value)``; ``value`` is torchvision's (after
Normalize with ImageNet's mean and std), or give ``fill`` as pixels.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Union

AugmentSpec = Union[str, Sequence[Mapping[str, Any]], None]

PRESET = "torchvision-v2-recipe"


def _value(key: str, v: Any) -> str:
    if isinstance(v, bool):
        raise ValueError(f"feedclient.Loader: augment parameter {key!r} must be a number, not bool")
    if isinstance(v, str):
        if not v.isidentifier():
            raise ValueError(f"feedclient.Loader: augment parameter {key!r}: {v!r} is not a word")
        return v
    if isinstance(v, (int, float)):
        if not math.isfinite(v):
            raise ValueError(f"feedclient.Loader: augment parameter {key!r} must be finite")
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_value(key, x) for x in v) + ")"
    raise ValueError(f"feedclient.Loader: augment parameter {key!r} has an unsupported type "
                     f"{type(v).__name__}")


def describe(augment: AugmentSpec) -> Optional[bytes]:
    """The wire text of an ``augment=`` argument (None for no augmentation)."""
    if augment is None:
        return None
    if isinstance(augment, str):
        return augment.encode()
    steps = []
    for i, step in enumerate(augment):
        if not isinstance(step, Mapping) or not isinstance(step.get("name"), str):
            raise ValueError(f"feedclient.Loader: augment[{i}] must be a dict with a 'name'")
        params = ", ".join(f"{k}={_value(k, v)}" for k, v in step.items() if k != "name")
        if not step["name"].isidentifier():
            raise ValueError(f"feedclient.Loader: augment[{i}]: bad name {step['name']!r}")
        steps.append(f"{step['name']}({params})")
    return "; ".join(steps).encode()


def recipe(train: bool = True) -> Dict[str, Any]:
    """Loader keyword arguments for torchvision's v2 ImageNet recipe: training
    crops 176 (RandomResizedCrop + flip) and augments with the preset;
    evaluation resizes to 232 and centre-crops 224.
    MixUp/CutMix are per batch: :class:`feedclient.mix.MixUpCutMix`."""
    if train:
        return {"transform": "train", "size": 176, "augment": PRESET}
    return {"transform": "eval", "size": 224, "resize_size": 232}
