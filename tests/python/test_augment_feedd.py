"""``Loader(augment=...)`` against real feedd processes on 127.0.0.1: the
augmented bytes are the same from two servers and after resume, equal to the
op table applied (feed-augment-tool) to the same sample without augmentation,
and a bad description fails the constructor with feedd's message naming the
parameter (feedd's own refusal is tests/server/test_feedd.c's).
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

import feedclient
import feedclient.augment
from test_augment import TOOL

RECIPE = "torchvision-v2-recipe"
SIZE = 48
SEED, EPOCH = 5, 3


def make(target: str, **kw) -> feedclient.Loader:
    args = dict(batch_size=8, seed=SEED, device="cpu", size=SIZE, dtype=torch.uint8,
                layout="NHWC", with_indices=True, epoch=EPOCH)
    args.update(kw)
    return feedclient.Loader([target], "small", **args)


def epoch(loader: feedclient.Loader):
    loader.set_epoch(EPOCH)
    return [(x.clone(), y, i) for x, y, i in loader]


def test_two_servers_same_bytes_equal_to_the_op_table(spawn) -> None:
    a, b = spawn(), spawn()
    with make(a.target, augment=RECIPE) as la, make(b.target, augment=RECIPE) as lb:
        from_a, from_b = epoch(la), epoch(lb)
    with make(a.target) as plain_loader:
        plain = epoch(plain_loader)
    changed = 0
    for (xa, _, ia), (xb, _, ib), (xp, _, ip) in zip(from_a, from_b, plain):
        assert torch.equal(ia, ib) and torch.equal(ia, ip)
        assert torch.equal(xa, xb)
        for k in range(len(ia)):
            crop = xp[k].numpy()
            want = subprocess.run(
                [str(TOOL), "apply", RECIPE, str(SIZE), str(SIZE), str(SEED), str(EPOCH),
                 str(int(ia[k]))], input=crop.tobytes(), capture_output=True, check=True,
                timeout=60).stdout
            assert xa[k].numpy().tobytes() == want, f"sample {int(ia[k])}"
            changed += want != crop.tobytes()
    # TrivialAugmentWide leaves one sample in 14 (Identity) and a few more alone.
    assert changed > len(from_a) * 8 // 2


@pytest.mark.parametrize("stop_after", [1, 6])
def test_resume_same_bytes(server, stop_after: int) -> None:
    with make(server.target, augment=RECIPE) as loader:
        whole = epoch(loader)
    with make(server.target, augment=RECIPE) as loader:
        loader.set_epoch(EPOCH)
        it = iter(loader)
        for _ in range(stop_after):
            next(it)
        state = loader.state_dict()
    with make(server.target, augment=RECIPE) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(EPOCH)
        tail = [(x.clone(), y, i) for x, y, i in resumed]
    for (x, _, i), (wx, _, wi) in zip(tail, whole[stop_after:]):
        assert torch.equal(i, wi) and torch.equal(x, wx)


def test_list_of_dicts_is_the_preset(server) -> None:
    steps = [{"name": "TrivialAugmentWide", "num_magnitude_bins": 31,
              "interpolation": "bilinear"},
             {"name": "RandomErasing", "p": 0.1, "scale": (0.02, 0.33), "ratio": (0.3, 3.3),
              "value": 0}]
    with make(server.target, augment=steps) as a, make(server.target, augment=RECIPE) as b:
        for (xa, _, _), (xb, _, _) in zip(epoch(a), epoch(b)):
            assert torch.equal(xa, xb)


@pytest.mark.parametrize("augment,needle", [
    ("RandomErasing(p=2)", "augment: RandomErasing.p must be in [0, 1]"),
    ("ColorJitterr()", "augment: unknown augmentation 'ColorJitterr'"),
])
def test_bad_description_names_the_parameter(server, augment: str, needle: str) -> None:
    """libfeedclient parses with feedd's parser, so the constructor says what feedd would."""
    with pytest.raises(feedclient.InvalidArgumentError) as err:
        make(server.target, augment=augment)
    assert needle in str(err.value)


def test_bad_python_spelling_refused_before_connecting() -> None:
    with pytest.raises(ValueError, match="augment parameter 'p' must be finite"):
        make("127.0.0.1:1", augment=[{"name": "RandomErasing", "p": float("nan")}])
    with pytest.raises(ValueError, match=r"augment\[0\] must be a dict with a 'name'"):
        make("127.0.0.1:1", augment=[("TrivialAugmentWide",)])


@pytest.mark.parametrize("train,shape", [(True, (176, 176, 3)), (False, (224, 224, 3))])
def test_recipe_sizes(server, train: bool, shape) -> None:
    kw = feedclient.augment.recipe(train)
    with make(server.target, **{"size": SIZE, **kw}) as loader:
        x, _, _ = next(iter(loader))
    assert tuple(x.shape[1:]) == shape
