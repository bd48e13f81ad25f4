"""On-policy distillation's token signal (ROLL use_opd, is_pure_opd): hand values, loop oracle."""

from __future__ import annotations

import math

import pytest
import torch

from roll_viz.core.pipeline.opd import KL_PENALTIES, opd_advantages, opd_token_kl

S = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, 0.0]], dtype=torch.float64)
T = torch.tensor([[-0.5, -3.0, -0.5], [-1.2, -1.0, 0.0]], dtype=torch.float64)
M = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)


def roll_approx_kl(s: float, t: float, penalty: str) -> float:
    """ROLL's compute_approx_kl on one token, written out (log_probs = s, log_probs_base = t)."""
    if penalty == "kl":
        return s - t
    if penalty == "abs":
        return abs(s - t)
    if penalty == "mse":
        return 0.5 * (s - t) ** 2
    kl = t - s
    return min(max(math.exp(kl) - kl - 1, -10.0), 10.0)


def oracle(student, teachers, mask, penalty="kl", rl=None, clip=None):
    """Plain loops: sum_i coef_i * kld_i; pure: -total, mixed: rl - total; mask; clamp."""
    B, T_ = mask.shape
    out = [[0.0] * T_ for _ in range(B)]
    for b in range(B):
        for t in range(T_):
            if mask[b][t] == 0:
                continue
            total = sum(
                c * roll_approx_kl(float(student[b][t]), float(lp[b][t]), penalty)
                for lp, c in teachers.values()
            )
            a = (float(rl[b][t]) if rl is not None else 0.0) - total
            if clip is not None:
                a = min(max(a, -clip), clip)
            out[b][t] = a
    return torch.tensor(out, dtype=torch.float64)


def test_hand_values_kl():
    """kl = log s - log t; pure OPD advantage = -kl = log t - log s (padding 0)."""
    kl = opd_token_kl(S, T, M, "kl")
    assert kl.flatten().tolist() == pytest.approx([-0.5, 1.0, 0.0, 1.0, -2.0, 0.0])
    res = opd_advantages(S, {"default": (T, 1.0)}, M)
    assert res.mode == "pure"
    assert res.advantages.flatten().tolist() == pytest.approx([0.5, -1.0, 0.0, -1.0, 2.0, 0.0])


def test_hand_values_k3_and_coef():
    """k3 = exp(t - s) - (t - s) - 1: e^0.5 - 1.5 and e^-1 at the first two tokens; coef 0.5."""
    kl = opd_token_kl(S, T, M, "k3")
    assert float(kl[0, 0]) == pytest.approx(math.exp(0.5) - 1.5)
    assert float(kl[0, 1]) == pytest.approx(math.exp(-1.0))
    res = opd_advantages(S, {"t": (T, 0.5)}, M, kl_penalty="k3")
    assert float(res.advantages[0, 0]) == pytest.approx(-0.5 * (math.exp(0.5) - 1.5))


def test_k3_is_clamped_at_10_as_roll_does():
    s = torch.tensor([[-20.0]], dtype=torch.float64)
    t = torch.tensor([[-1.0]], dtype=torch.float64)
    assert float(opd_token_kl(s, t, torch.ones(1, 1), "k3")) == 10.0


@pytest.mark.parametrize("penalty", list(KL_PENALTIES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loop_oracle(penalty, seed):
    """Random batches, two teachers, pure and mixed, with a clip: equal to the loops."""
    gen = torch.Generator().manual_seed(seed)
    B, T_ = 4, 6
    student = -torch.rand(B, T_, generator=gen, dtype=torch.float64) * 4
    t1 = -torch.rand(B, T_, generator=gen, dtype=torch.float64) * 4
    t2 = -torch.rand(B, T_, generator=gen, dtype=torch.float64) * 4
    lengths = torch.tensor([6, 3, 1, 5])
    mask = (torch.arange(T_)[None] < lengths[:, None]).to(torch.float64)
    teachers = {"a": (t1, 1.0), "b": (t2, 0.3)}
    rl = torch.randn(B, T_, generator=gen, dtype=torch.float64)
    for kwargs in ({}, {"rl_advantages": rl}, {"rl_advantages": rl, "advantage_clip": 0.7}):
        res = opd_advantages(student, teachers, mask, kl_penalty=penalty, **kwargs)
        want = oracle(
            student, teachers, mask, penalty, kwargs.get("rl_advantages"),
            kwargs.get("advantage_clip"),
        )  # fmt: skip
        assert torch.allclose(res.advantages, want, atol=1e-12)
        assert res.mode == ("mixed" if "rl_advantages" in kwargs else "pure")


def test_mixed_keeps_the_rl_advantages_as_raw():
    rl = torch.full_like(S, 2.0)
    res = opd_advantages(S, {"default": (T, 1.0)}, M, rl_advantages=rl)
    assert torch.equal(res.raw_advantages, rl)
    assert res.advantages[0, 0].item() == pytest.approx(2.0 + 0.5)


def test_whitening_matches_roll_masked_whiten():
    """(A - mean) / sqrt(unbiased var + 1e-8) over valid tokens, then times the mask."""
    res = opd_advantages(S, {"default": (T, 1.0)}, M, whiten_advantages=True)
    raw = [0.5, -1.0, 0.0, -1.0, 2.0]
    mean = sum(raw) / 5
    var = sum((x - mean) ** 2 for x in raw) / 4
    want = [(x - mean) / math.sqrt(var + 1e-8) for x in raw]
    got = res.advantages[M > 0].tolist()
    assert got == pytest.approx(want)
    assert float(res.advantages[1, 2]) == 0.0


def test_student_equal_to_teacher_gives_zero():
    res = opd_advantages(S, {"default": (S.clone(), 1.0)}, M)
    assert torch.count_nonzero(res.advantages) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kl_penalty": "full"}, "kl_penalty"),
        ({"advantage_clip": 0.0}, "advantage_clip"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        opd_advantages(S, {"default": (T, 1.0)}, M, **kwargs)
    with pytest.raises(ValueError, match="teacher"):
        opd_advantages(S, {}, M)
