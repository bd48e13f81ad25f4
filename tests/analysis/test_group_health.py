"""Group health counts and the zero-variance policies: hand numbers and invariants."""

import math

import pytest
import torch

from roll_viz.analysis import group_health as gh
from roll_viz.core.pipeline import policy_loss
from roll_viz.core.records import Batch

F = torch.float64


def test_counts_binary_rewards():
    scores = torch.tensor([1, 1, 1, 0, 0, 0, 1, 0, 1, 1], dtype=F)
    gids = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3])
    h = gh.group_health(scores, gids)
    assert h.counts == {"all-good": 1, "all-bad": 1, "flat": 0, "mixed": 1, "single": 1}
    assert h.no_signal == 2
    assert h.n_groups == 4
    assert h.groups["std"].tolist()[:3] == pytest.approx([0.0, 0.0, math.sqrt(1 / 3)])
    assert math.isnan(h.groups["std"].tolist()[3])


def test_components_std_next_to_combined_and_threshold():
    scores = torch.tensor([1.5, 1.5, 0.5, 1.0], dtype=F)
    comps = {
        "format": torch.tensor([0.5, 1.0, 0.5, 0.0]),
        "accuracy": torch.tensor([1.0, 0.5, 0.0, 1.0]),
    }
    h = gh.group_health(scores, torch.tensor([0, 0, 1, 1]), components=comps, solved_at=1.0)
    row = h.groups.iloc[0]
    assert row["std"] == 0.0  # the combined reward is flat ...
    assert row["std format"] == pytest.approx(math.sqrt(0.125))  # ... its parts are not
    assert row["status"] == "all-good"
    assert h.groups.iloc[1]["status"] == "mixed"
    assert h.components == ("format", "accuracy")


def test_near_flat_groups_counted_apart():
    scores = torch.tensor([0.0, 1e-6, 1.0, 0.0], dtype=F)
    h = gh.group_health(scores, torch.tensor([0, 0, 1, 1]))
    assert h.counts["mixed"] == 2
    assert h.near_flat == 1  # std 7e-7 <= 1e-4 but not exactly equal


def test_zero_variance_policies_on_the_demo_batch():
    batch = gh.demo_batch()
    out = gh.zero_variance_policies(batch, beta=0.04)
    t = out.table.set_index("policy")
    n_all = float(batch.response_mask.sum())
    assert t.loc["keep (A = 0)", "tokens in the denominator"] == n_all
    flat_tokens = float(batch.response_mask[out.flat_rows].sum())
    near_tokens = float(batch.response_mask[out.near_rows].sum())
    assert t.loc["drop, exact equality", "tokens in the denominator"] == n_all - flat_tokens
    assert t.loc["drop, std <= eps", "tokens in the denominator"] == n_all - near_tokens
    assert t.loc["drop, exact equality", "zero-variance groups seen"] == 2
    assert t.loc["drop, std <= eps", "zero-variance groups seen"] == 3  # the shaped group too
    # TRL#7068: with A = 0 the KL gradient still flows on the zero-variance groups
    assert t.loc["keep (A = 0)", "|KL grad|, zero-variance groups"] > 0
    for name in ("drop, std <= eps", "mask, same denominator", "mask, new denominator"):
        assert t.loc[name, "|KL grad|, zero-variance groups"] == 0.0
    # the other groups' gradient is rescaled by the denominator: N_all / N_kept
    assert t.loc["drop, std <= eps", "other groups' gradient scale"] == pytest.approx(
        n_all / (n_all - near_tokens)
    )
    assert t.loc["mask, same denominator", "other groups' gradient scale"] == pytest.approx(1.0)
    torch.testing.assert_close(out.grads["mask, new denominator"], out.grads["drop, std <= eps"])
    # the masked same-denominator gradient is keep's gradient with the rows zeroed
    on = (~out.near_rows).to(F)[:, None]
    torch.testing.assert_close(out.grads["mask, same denominator"], out.grads["keep (A = 0)"] * on)


def test_keep_loss_by_hand_on_policy():
    """At r = 1 the TRL dapo loss is (sum of -A + beta * k3) / tokens, A the GRPO advantage."""
    batch = gh.demo_batch()
    out = gh.zero_variance_policies(batch, beta=0.1)
    m = batch.response_mask
    s = batch.scores.view(4, 3)
    adv = ((s - s.mean(1, keepdim=True)) / (s.std(1, keepdim=True) + 1e-4)).flatten()
    x = batch.ref_logprobs - batch.logprobs
    k3 = torch.expm1(x) - x
    expected = ((-adv[:, None] + 0.1 * k3) * m).sum() / m.sum()
    t = out.table.set_index("policy")
    assert t.loc["keep (A = 0)", "loss"] == pytest.approx(expected.item(), rel=1e-12)
    lp = batch.logprobs.clone().requires_grad_()
    res = policy_loss("trl", {"beta": 0.1}, logprobs=lp, old_logprobs=batch.logprobs,
                      advantages=adv, response_mask=m, ref_logprobs=batch.ref_logprobs)  # fmt: skip
    (grad,) = torch.autograd.grad(res.total, lp)
    torch.testing.assert_close(out.grads["keep (A = 0)"], grad, rtol=0, atol=1e-15)


def test_policies_need_logprobs():
    batch = Batch(scores=torch.tensor([1.0, 0.0]), response_mask=torch.ones(2, 1),
                  group_ids=torch.tensor([0, 0]))  # fmt: skip
    with pytest.raises(ValueError, match="logprobs"):
        gh.zero_variance_policies(batch)
