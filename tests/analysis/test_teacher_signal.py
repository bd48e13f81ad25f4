"""The teacher's signal beside the reward's: per answer and per token, as ROLL's OPD forms it."""

from __future__ import annotations

import pytest
import torch

from roll_viz.analysis.teacher_signal import teacher_signal

S = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]], dtype=torch.float64)
T = torch.tensor([[-0.5, -3.0, 0.0], [-0.5, -1.5, -0.5]], dtype=torch.float64)
M = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
A = torch.tensor([[0.7, 0.7, 0.0], [-0.7, -0.7, -0.7]], dtype=torch.float64)
SCORES = torch.tensor([1.0, 0.0], dtype=torch.float64)
GIDS = torch.tensor([0, 0])
TOKENS = (("a", "b"), ("c", "d", "e"))


def test_pure_answers_by_hand():
    sig = teacher_signal(S, T, M, A, SCORES, GIDS, tokens=TOKENS, prompts=["p"])
    rows = sig.answers.set_index("sample")
    # answer 0: kl = (-0.5, 1.0) -> A = (0.5, -1.0), mean -0.25; answer 1: kl = (0, 1, 0)
    assert rows.loc[0, "A teacher"] == pytest.approx(-0.25)
    assert rows.loc[1, "A teacher"] == pytest.approx(-1 / 3)
    assert rows.loc[0, "A reward"] == pytest.approx(0.7)
    assert rows.loc[0, "reverse KL"] == pytest.approx(0.5)
    assert rows.loc[0, "worst token"] == "b"
    assert rows.loc[1, "worst token"] == "d"
    assert len(sig.tokens) == 5
    assert sig.tokens["token"].tolist() == ["a", "b", "c", "d", "e"]


def test_mixed_subtracts_the_kl_from_the_reward():
    sig = teacher_signal(S, T, M, A, SCORES, GIDS, tokens=TOKENS, mixed=True, coef=0.5)
    got = sig.opd.advantages
    want = (A - 0.5 * torch.tensor([[-0.5, 1.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)) * M
    assert torch.allclose(got, want)
    assert sig.opd.mode == "mixed"
