import math

import pytest
import torch

from core import oracles
from core.cases import close
from roll_viz.core.ops import full_vocab_kl
from roll_viz.core.pipeline import KL_ESTIMATORS, next_beta, token_kl
from roll_viz.core.pipeline.kl import observed_kl

T7_LOGP = [-0.5, -2.0, -1.0, -0.1, -15.0, -1.0]
T7_REF = [-1.0, -1.0, -1.0, -2.3, -1.0, -25.0]


def _t7(estimator, clamp=None, inner=None):
    lp = torch.tensor([T7_LOGP], dtype=torch.float64)
    ref = torch.tensor([T7_REF], dtype=torch.float64)
    return token_kl(lp, ref, torch.ones_like(lp), estimator, clamp, inner)[0]


def test_t7_table():
    close(_t7("k1"), [0.5, -1.0, 0.0, 2.2, -14.0, 24.0])
    close(_t7("abs"), [0.5, 1.0, 0.0, 2.2, 14.0, 24.0])
    close(_t7("k2"), [0.125, 0.5, 0.0, 2.42, 98.0, 288.0])
    raw = _t7("k3")
    close(raw[:4], [0.106531, 0.718282, 0.0, 1.310803], 1e-6)
    assert raw[4].item() == pytest.approx(1.20259e6, rel=1e-5)
    assert raw[5].item() == pytest.approx(23.0)
    close(_t7("k3", clamp=10.0)[4:], [10.0, 10.0])  # ROLL / OpenRLHF
    close(_t7("k3", clamp=10.0, inner=20.0)[4:], [10.0, 10.0])  # verl
    close(_t7("k1", clamp=10.0), [0.5, -1.0, 0.0, 2.2, -10.0, 10.0])  # OpenRLHF k1


def test_style_table_kl_values():
    lp = torch.tensor([[math.log(0.5)]], dtype=torch.float64)
    ref = torch.tensor([[math.log(0.25)]], dtype=torch.float64)
    m = torch.ones(1, 1, dtype=torch.float64)
    assert token_kl(lp, ref, m, "k1").item() == pytest.approx(0.6931, abs=1e-4)
    assert token_kl(lp, ref, m, "k2").item() == pytest.approx(0.2402, abs=1e-4)
    assert token_kl(lp, ref, m, "k3").item() == pytest.approx(0.1931, abs=1e-4)


@pytest.mark.parametrize("estimator", list(KL_ESTIMATORS))
@pytest.mark.parametrize("seed", range(3))
def test_token_kl_matches_loop_and_masks(estimator, seed):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(4, 7, dtype=torch.float64, generator=g) * 5
    ref = -torch.rand(4, 7, dtype=torch.float64, generator=g) * 5
    mask = (torch.rand(4, 7, generator=g) > 0.4).to(torch.float64)
    lp_pad = torch.where(mask > 0, lp, torch.full_like(lp, -float("inf")))  # junk in padding
    out = token_kl(lp_pad, ref, mask, estimator, clamp=10.0)
    close(out, oracles.token_kl(lp.tolist(), ref.tolist(), mask.tolist(), estimator, 10.0), 1e-12)
    assert bool((out[mask == 0] == 0).all())


def test_unknown_estimator():
    x = torch.zeros(1, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match="KL estimator"):
        token_kl(x, x, x + 1, "k4")


def test_expectations_equal_exact_kl_on_t7_categorical():
    p = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    q = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
    lp, lq, ones = p.log()[None], q.log()[None], torch.ones(1, 3, dtype=torch.float64)
    exact = full_vocab_kl(p.log(), q.log()).item()
    e = {name: (p * token_kl(lp, lq, ones, name)[0]).sum().item() for name in KL_ESTIMATORS}
    assert exact == pytest.approx(0.087659725, abs=1e-9)
    assert e["k1"] == pytest.approx(exact, abs=1e-12)
    assert e["k3"] == pytest.approx(exact, abs=1e-12)
    assert e["k2"] == pytest.approx(0.085757383, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_expectations_over_full_vocab_equal_exact_kl(seed):
    """Exact enumeration: E_p[k] = sum_v p_v k(log p_v - log q_v), for random V=50 logits."""
    g = torch.Generator().manual_seed(seed)
    pl = torch.randn(6, 50, dtype=torch.float64, generator=g) * 2
    ql = torch.randn(6, 50, dtype=torch.float64, generator=g) * 2
    logp, logq = pl.log_softmax(-1), ql.log_softmax(-1)
    exact = full_vocab_kl(pl, ql, chunk_size=4)
    ones = torch.ones_like(logp)
    for name in ("k1", "k3"):
        expectation = (logp.exp() * token_kl(logp, logq, ones, name)).sum(-1)
        close(expectation, exact, 1e-12)


def test_t10_adaptive_controller():
    beta = next_beta(0.2, 9.0, 6.0, 10000, 256)
    assert beta == pytest.approx(0.201024, abs=1e-12)
    beta = next_beta(beta, 9.0, 6.0, 10000, 256)
    assert beta == pytest.approx(0.20205324, abs=1e-8)
    beta = next_beta(beta, 3.0, 6.0, 10000, 256)
    assert beta == pytest.approx(0.20101873, abs=1e-8)
    beta = next_beta(beta, 6.6, 6.0, 10000, 256)
    assert beta == pytest.approx(0.20153334, abs=1e-8)
    beta = next_beta(beta, 0.0, 6.0, 10000, 512)
    assert beta == pytest.approx(0.19946964, abs=1e-8)
    assert next_beta(0.001, 0.05, 0.1, 10000, 1024) == pytest.approx(0.00097952, abs=1e-10)
    assert next_beta(0.2, 9.0, 6.0, 10000, 256) == oracles.ziegler(0.2, 9.0, 6.0, 10000, 256)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target": 0.0}, "target > 0"),
        ({"target": -1.0}, "target > 0"),
        ({"horizon": 0}, "horizon > 0"),
        ({"horizon": -5}, "horizon > 0"),
        ({"n_steps": -1}, "n_steps"),
    ],
)
def test_controller_validation(kwargs, match):
    args = {"beta": 0.1, "observed_kl": 1.0, "target": 1.0, "horizon": 100, "n_steps": 4}
    with pytest.raises(ValueError, match=match):
        next_beta(**(args | kwargs))


def test_observed_kl_is_mean_of_sequence_means():
    kl = torch.tensor([[1.0, 3.0], [4.0, 0.0], [9.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]], dtype=torch.float64)
    assert observed_kl(kl, mask) == pytest.approx((2.0 + 4.0 + 0.0) / 3)
