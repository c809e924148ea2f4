"""feedclient.mix.MixUpCutMix: the per-batch draws against the recipe's
distributions over 10,000 batches (choice chi-square, lambda KS against
Beta(alpha, alpha)), the mixing itself against torchvision's references'
formulas, determinism per (seed, epoch, batch), and soft labels that
CrossEntropyLoss(label_smoothing=...) takes. On the GPU when there is one.
"""

from __future__ import annotations

import math

import pytest
import torch

from feedclient.mix import MixUpCutMix

stats = pytest.importorskip("scipy.stats")
N = 10000
ALPHA = 1e-3


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_draws_follow_the_recipe() -> None:
    m = MixUpCutMix(num_classes=10, seed=3, mixup_alpha=0.2, cutmix_alpha=1.0)
    ps = [m.params(176, 176, 0, b) for b in range(N)]
    kinds = [p.kind for p in ps]
    assert stats.binomtest(kinds.count("mixup"), N, 0.5).pvalue > ALPHA
    mix = [p.lam for p in ps if p.kind == "mixup"]
    cut = [p.drawn_lam for p in ps if p.kind == "cutmix"]
    assert stats.kstest(mix, stats.beta(0.2, 0.2).cdf).pvalue > ALPHA
    assert stats.kstest(cut, stats.beta(1.0, 1.0).cdf).pvalue > ALPHA
    for p in ps:
        if p.kind == "cutmix":
            y1, y2, x1, x2 = p.box
            assert 0 <= y1 <= y2 <= 176 and 0 <= x1 <= x2 <= 176
            assert p.lam == pytest.approx(1 - (y2 - y1) * (x2 - x1) / 176 ** 2)


def test_mixing_matches_the_references_formulas() -> None:
    dev = device()
    m = MixUpCutMix(num_classes=5, seed=11)
    for b in range(40):
        x = torch.rand(6, 3, 20, 24, device=dev)
        y = torch.randint(5, (6,), device=dev)
        p = m.params(20, 24, 2, b)
        out, t = m(x.clone(), y, epoch=2, batch=b)
        rolled = x.roll(1, 0)
        if p.kind == "mixup":
            want = x * p.lam + rolled * (1 - p.lam)
        else:
            y1, y2, x1, x2 = p.box
            want = x.clone()
            want[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
        assert torch.allclose(out, want, atol=1e-6)
        one = torch.nn.functional.one_hot(y, 5).float()
        assert torch.allclose(t, one * p.lam + one.roll(1, 0) * (1 - p.lam), atol=1e-6)
        assert torch.allclose(t.sum(1), torch.ones(6, device=dev), atol=1e-6)


def test_nhwc_cuts_the_same_box() -> None:
    x = torch.rand(4, 16, 18, 3)
    a = MixUpCutMix(num_classes=3, seed=5, mixup_alpha=0, layout="NHWC")
    b = MixUpCutMix(num_classes=3, seed=5, mixup_alpha=0)
    y = torch.tensor([0, 1, 2, 0])
    out_nhwc, _ = a(x.clone(), y, epoch=0, batch=7)
    out_nchw, _ = b(x.permute(0, 3, 1, 2).contiguous(), y, epoch=0, batch=7)
    assert torch.equal(out_nhwc.permute(0, 3, 1, 2), out_nchw)


def test_same_batch_same_mix_and_cross_entropy_takes_the_labels() -> None:
    m = MixUpCutMix(num_classes=7, seed=9)
    x = torch.rand(8, 3, 12, 12)
    y = torch.randint(7, (8,))
    a, ta = m(x.clone(), y, epoch=1, batch=3)
    b, tb = m(x.clone(), y, epoch=1, batch=3)
    assert torch.equal(a, b) and torch.equal(ta, tb)
    logits = torch.randn(8, 7)
    ce = torch.nn.CrossEntropyLoss(label_smoothing=0.1)(logits, ta)
    smoothed = ta * 0.9 + 0.1 / 7
    want = -(smoothed * torch.log_softmax(logits, 1)).sum(1).mean()
    assert math.isclose(float(ce), float(want), rel_tol=1e-5)


@pytest.mark.parametrize("kw,needle", [
    (dict(num_classes=0), "num_classes"),
    (dict(num_classes=3, mixup_alpha=-1), "mixup_alpha"),
    (dict(num_classes=3, cutmix_alpha=float("nan")), "cutmix_alpha"),
    (dict(num_classes=3, mixup_alpha=0, cutmix_alpha=0), "both 0"),
    (dict(num_classes=3, layout="CHW"), "layout"),
])
def test_bad_arguments_named(kw, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        MixUpCutMix(**kw)
