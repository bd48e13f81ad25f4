"""The off-policy gallery cases (bugs_offpolicy): hand-computed numbers, closed form vs autograd.

Every expected number is written out by hand here (the thread's numbers where it gives them:
slime PR #1917's -0.030657), never copied from the module's output.
"""

from __future__ import annotations

import math

import pytest
import torch

from roll_viz.analysis import silent_bugs as gallery
from roll_viz.analysis.silent_bugs import bugs_offpolicy as bo

F64 = torch.float64


def test_the_cases_are_in_the_gallery_after_the_fourteen():
    ids = [b.id for b in bo.BUGS]
    assert ids == ["opsm-per-token", "kl-ratio-grad", "kl-zero-nan"]
    start = gallery.IDS.index(ids[0])  # in the gallery, together and in this order
    assert list(gallery.IDS[start : start + 3]) == ids
    assert start >= len(gallery.FIELD_ORDER)  # after the fourteen
    threads = [b.thread for b in bo.BUGS]
    assert threads == ["THUDM/slime#1917", "huggingface/trl#6503", "THUDM/slime#2258"]
    assert len({b.short for b in gallery.BUGS}) == len(gallery.BUGS)


def test_opsm_leak_reproduces_the_thread():
    # slime #1917: opsm_mask [0, 1, 0]; the kept token's PPO loss: r = e^-1 = 0.36788 < 0.8,
    # -min(0.25 r, 0.25 * 0.8) = -0.25 e^-1 = -0.0919699; loss = that / 3 = -0.0306566
    out = gallery.bug("opsm-per-token").compute()
    assert out.wrong == pytest.approx(-0.25 * math.exp(-1.0) / 3, abs=1e-12)
    assert round(out.wrong, 4) == -0.0307
    assert out.wrong_series == pytest.approx((0.0, -0.25 * math.exp(-1.0), 0.0))
    assert out.right == 0.0
    assert out.right_series == (0.0, 0.0, 0.0)


def test_kl_ratio_changes_the_gradient_by_beta_k3_over_n():
    out = gallery.bug("kl-ratio-grad").compute()
    assert out.wrong == 0.0
    expected = []
    for lps, refs in zip(bo.BIAS_LOGPROBS, bo.BIAS_REF, strict=True):
        for lp, ref in zip(lps, refs, strict=True):
            x = ref - lp
            expected.append(0.1 * (math.exp(x) - x - 1.0) / 6)  # beta k3 / N, N = 6 tokens
    assert out.right_series == pytest.approx(tuple(expected), abs=1e-15)
    assert out.right == pytest.approx(math.sqrt(sum(e * e for e in expected)), abs=1e-15)
    assert expected[2] == pytest.approx(0.1 * (math.exp(0.8) - 0.8 - 1.0) / 6)  # 0.0070923


def test_kl_ratio_closed_form_against_autograd():
    # d/dlogp [k3(logp) * exp(logp - sg(logp))] at ratio 1 = (1 - e^(ref - logp)) + k3
    lp = torch.tensor(bo.BIAS_LOGPROBS, dtype=F64, requires_grad=True)
    ref = torch.tensor(bo.BIAS_REF, dtype=F64)
    x = ref - lp
    k3 = torch.exp(x) - x - 1.0
    (g_with,) = torch.autograd.grad((k3 * torch.exp(lp - lp.detach())).sum(), lp)
    closed = (1.0 - torch.exp(ref - lp.detach())) + k3.detach()
    assert torch.allclose(g_with, closed, atol=1e-15)
    with_ratio, without = bo.right_bias_correction()
    assert torch.allclose(with_ratio - without, 0.1 * k3.detach() / 6, atol=1e-15)


def test_zero_coefficient_nan():
    out = gallery.bug("kl-zero-nan").compute()
    assert math.isnan(out.wrong)
    assert math.isnan(out.wrong_series[3])
    assert all(math.isfinite(v) for v in out.wrong_series[:3])
    assert math.isnan(0.0 * math.inf)  # the thread's point
    # TRL advantages of rewards 1, 0: (r - mean) / (std + 1e-4) = +-0.5 / (0.70711 + 1e-4)
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    adv, loss, grad = bo.right_zero_coef()
    assert adv.tolist() == pytest.approx([a, -a], abs=1e-12)
    assert loss.item() == pytest.approx(0.0, abs=1e-15)  # dapo at ratio 1: -(2a - 2a) / 4
    assert grad.tolist() == [pytest.approx([-a / 4] * 2), pytest.approx([a / 4] * 2)]
    assert out.right == pytest.approx(0.0, abs=1e-15)
