"""ROLL where roll-viz used to compute silently what ROLL does not: a group std without a group
mean (ROLL's ``reward_norm`` broadcasts the (B,) rewards against the (prompts, 1) group std to a
(prompts, B) tensor, which its batch cannot store), and the width ``seq-mean-token-sum-norm``
divides by (ROLL's actor mask spans the padded prompt + response)."""

import pytest
import torch

from roll_viz.core.pipeline import policy_loss, run
from roll_viz.core.records import Batch

F64 = torch.float64
BATCH = Batch(
    scores=torch.tensor([1.0, 0.0, 0.5, 0.2, 0.9, 0.7], dtype=F64),
    response_mask=torch.ones(6, 3, dtype=F64),
    group_ids=torch.tensor([0, 0, 0, 1, 1, 1]),
)


@pytest.mark.parametrize("mean", [None, "batch", "running"])
def test_group_std_without_group_mean_raises_as_roll(mean):
    cfg = {"adv_estimator": "reinforce", "norm_mean_type": mean, "norm_std_type": "group"}
    with pytest.raises(ValueError, match=r"^norm_std_type: group needs norm_mean_type: group"):
        run(BATCH, "roll", cfg)


def test_group_std_with_group_mean_by_hand():
    cfg = {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": "group"}
    got = run(BATCH, "roll", cfg).rewards
    # group 0: mean 0.5, std 0.5; group 1: mean 0.6, var (0.16 + 0.09 + 0.01) / 2
    sd1 = 0.13**0.5
    want = [1.0, -1.0, 0.0] + [(x - 0.6) / (sd1 + 1e-6) for x in (0.2, 0.9, 0.7)]
    want[:3] = [x * 0.5 / (0.5 + 1e-6) for x in want[:3]]
    assert torch.allclose(got, torch.tensor(want, dtype=F64), atol=1e-12)


def test_seq_mean_token_sum_norm_names_rolls_prompt_dependent_width():
    mask = torch.ones(2, 4, dtype=F64)
    lp = torch.zeros(2, 4, dtype=F64)
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    got = policy_loss(
        "roll",
        {"loss_agg_mode": "seq-mean-token-sum-norm"},
        logprobs=lp,
        old_logprobs=lp,
        advantages=adv,
        response_mask=mask,
    )
    assert got.total.item() == pytest.approx((-4.0 + 4.0) / 4)
    assert any("P + T - 1" in n for n in got.notes)
    plain = policy_loss(
        "roll", {}, logprobs=lp, old_logprobs=lp, advantages=adv, response_mask=mask
    )
    assert not any("P + T - 1" in n for n in plain.notes)
