"""The silent-bug gallery: each lesson's wrong and right number, checked against hand values.

Every expected number here is computed by hand (a formula written out, or a plain loop), never
copied from the module's output. The right side must also be what roll-viz's own pipeline
computes, so each lesson is a regression test of the pipeline.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from roll_viz.analysis import silent_bugs as gallery
from roll_viz.analysis.silent_bugs import bugs_groups as bg
from roll_viz.analysis.silent_bugs import bugs_loss as bl
from roll_viz.core.pipeline import policy_loss, run

F64 = torch.float64


def mean(xs):
    return sum(xs) / len(xs)


def std(xs, ddof=1):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


#: the fourteen of field-2026.md section 2.3
FIELD = tuple(gallery.bug(i) for i in gallery.FIELD_ORDER)


def test_registry_has_the_fourteen_of_the_field_notes():
    assert len(FIELD) == 14
    assert len(set(gallery.IDS)) == len(gallery.BUGS)
    threads = " ".join(b.thread for b in FIELD)
    for ref in ("trl#3452", "trl#7068", "RL#4158", "slime#233", "slime#1414", "AReaL#1673",
                "ROLL#475", "trl#3991", "trl#6654", "verl#957", "verl-recipe#125", "trl#6789",
                "cispo", "ROLL#397", "prime-rl#3222"):  # fmt: skip
        assert ref in threads, ref
    for bug in FIELD:
        assert len(bug.choices) >= 3, bug.id
        assert 0 <= bug.answer < len(bug.choices), bug.id
        assert bug.question
        assert bug.explanation
        assert bug.quantity
        assert bug.batch
        assert gallery.bug(bug.id) is bug
        assert 0 < len(bug.short) <= 24, bug.short
    assert len({b.short for b in FIELD}) == 14


@pytest.mark.parametrize("bug_id", gallery.IDS)
def test_every_lesson_shows_two_different_numbers(bug_id):
    out = gallery.bug(bug_id).compute()
    assert math.isfinite(out.right)
    assert math.isnan(out.wrong) or abs(out.wrong - out.right) > 1e-3 * max(1.0, abs(out.right))
    assert len(out.labels) == len(out.wrong_series) == len(out.right_series) >= 1
    assert out.formula.strip()
    # deterministic: the same numbers on every call
    again = gallery.bug(bug_id).compute()
    assert again.right == out.right
    assert (math.isnan(again.wrong) and math.isnan(out.wrong)) or again.wrong == out.wrong


# ----------------------------------------------------------------------- 1. loss 0, grad not


def test_loss_zero_but_gradient_not():
    scores, length = [8.2, 6.5, 9.1], 2
    m, s = mean(scores), std(scores)
    adv = [(x - m) / (s + 1e-4) for x in scores]  # TRL: group std, +1e-4
    # token-mean over 6 tokens, r = 1: loss = -sum(L A) / 6, dL/dlogp_t = -A_i / 6
    hand_loss = -sum(length * a for a in adv) / 6
    hand_grad = [[-a / 6] * length for a in adv]
    hand_norm = math.sqrt(sum(g * g for row in hand_grad for g in row))
    assert abs(hand_loss) < 1e-12
    assert hand_norm == pytest.approx(math.sqrt(2 * sum(a * a for a in adv)) / 6)

    loss, norm, grad, advantages = bl.right_loss_zero()
    assert advantages.tolist() == pytest.approx(adv, abs=1e-12)
    assert abs(loss) < 1e-12  # the loss value is 0 ...
    flat = [g for row in hand_grad for g in row]
    assert grad.flatten().tolist() == pytest.approx(flat, abs=1e-12)  # ... its gradient is not
    assert norm == pytest.approx(hand_norm, rel=1e-12)
    assert norm > 0.3
    assert bl.wrong_loss_zero() == 0.0
    out = gallery.bug("loss-zero").compute()
    assert (out.wrong, out.right) == (0.0, pytest.approx(hand_norm))


def test_loss_zero_autograd_through_the_pipeline():
    batch = gallery.make_batch(bl.LOSS_ZERO_SCORES, [2, 2, 2], ["q"] * 3)
    adv = run(batch, "trl").advantages
    lp = torch.tensor(bl.LOSS_ZERO_LOGPROBS, dtype=F64, requires_grad=True)
    res = policy_loss(
        "trl", logprobs=lp, old_logprobs=lp.detach(), advantages=adv,
        response_mask=batch.response_mask,
    )  # fmt: skip
    res.total.backward()
    assert abs(res.total.item()) < 1e-12
    assert lp.grad.abs().max().item() > 0.1
    closed_form = res.per_token["grad_coef"].flatten().tolist()
    assert lp.grad.flatten().tolist() == pytest.approx(closed_form, abs=1e-12)


# ------------------------------------------------------- 2. KL gradient in A = 0 groups


def test_kl_gradient_survives_in_zero_advantage_group():
    beta = bl.KL_ZERO_BETA
    lp, ref = bl.KL_ZERO_LOGPROBS, bl.KL_ZERO_REF
    # token-mean over 8 tokens; k3 slope d/dlogp [e^(ref-lp) - (ref-lp) - 1] = 1 - e^(ref-lp)
    hand_q2 = [beta / 8 * (1 - math.exp(ref[b][t] - lp[b][t])) for b in (2, 3) for t in (0, 1)]
    advantages, grad = bl.right_kl_zero()
    assert advantages[2:].abs().max().item() == 0.0  # q2's advantages are exactly 0
    assert grad[2:].flatten().tolist() == pytest.approx(hand_q2, abs=1e-12)
    assert max(abs(g) for g in hand_q2) > 0.008
    assert bl.wrong_kl_zero() == [0.0] * 4
    # without beta the same tokens get nothing: the gradient is the KL's
    batch = gallery.make_batch(bl.KL_ZERO_SCORES, [2] * 4, bl.KL_ZERO_GROUPS, lp, ref)
    x = torch.tensor(lp, dtype=F64, requires_grad=True)
    policy_loss(
        "trl", {"beta": 0.0}, logprobs=x, old_logprobs=x.detach(),
        advantages=run(batch, "trl").advantages, response_mask=batch.response_mask,
    ).total.backward()  # fmt: skip
    assert x.grad[2:].abs().max().item() == 0.0
    out = gallery.bug("kl-zero-adv").compute()
    assert out.right == pytest.approx(math.sqrt(sum(g * g for g in hand_q2)))
    assert out.wrong == 0.0


# ------------------------------------------------------------------- 3. LOO + std: -2075


def test_loo_std_reproduces_minus_2075():
    wrong = bg.wrong_loo_std()
    assert wrong[0] == pytest.approx(-2075.39, abs=0.01)  # NeMo RL #4158's number
    # by hand in float32: seven 0.95s, (E[x^2] - E[x]^2) * 7 / 6
    x = torch.tensor(0.95, dtype=torch.float32)
    s = torch.tensor([0.95] * 7, dtype=torch.float32)
    var = ((s * s).sum() / 7 - (s.sum() / 7) ** 2) * 7 / 6
    assert var.item() > 0  # the residue; exactly 0 in exact arithmetic
    assert (0 - x).item() / (math.sqrt(var.item()) + 1e-6) == pytest.approx(wrong[0], rel=1e-5)

    right = bg.right_loo_std()
    hand = [r - (sum(bg.LOO_SCORES) - r) / 7 for r in bg.LOO_SCORES]  # RLOO: r - mean of others
    assert right.tolist() == pytest.approx(hand, abs=1e-12)
    assert right[0].item() == pytest.approx(-0.95, abs=1e-12)


# ----------------------------------------------------------- 4. std of centred rewards


def test_centred_std_equals_raw_std():
    for start in (0, 4):
        raw = bg.CENTRED_SCORES[start : start + 4]
        centred = [x - mean(raw) for x in raw]
        assert std(centred) == pytest.approx(std(raw), abs=1e-12)
    assert bg.slime_divisors() == pytest.approx([0.25 + 1e-6, std([0.9, 0.9, 0.1, 0.3]) + 1e-6])
    wrong = bg.wrong_centred_std()
    assert abs(wrong) < 1e-6  # the logged mean: round-off around 0
    rewards, scale = bg.right_centred_std()
    hand = []
    for start in (0, 4):
        raw = bg.CENTRED_SCORES[start : start + 4]
        hand += [(x - mean(raw)) / (std(raw) + 1e-6) for x in raw]
    assert rewards.tolist() == pytest.approx(hand, abs=1e-12)
    assert scale[[0, 4]].tolist() == pytest.approx(bg.slime_divisors(), rel=1e-6)
    assert gallery.bug("centred-std").compute().right == pytest.approx(0.25 / (0.25 + 1e-6))


# -------------------------------------------------------------------- 5. uneven groups


def test_uneven_groups():
    scores = bg.UNEVEN_SCORES
    assert bg.wrong_uneven()[4] == pytest.approx(5 - 67 / 11) == pytest.approx(-1.090909, 1e-6)
    hand = []
    for g in ("A", "B", "C"):
        xs = [s for s, gg in zip(scores, bg.UNEVEN_GROUPS, strict=True) if gg == g]
        hand += [x - mean(xs) for x in xs]
    right = bg.right_uneven()
    assert right.tolist() == pytest.approx(hand, abs=1e-12)
    assert right[4:7].tolist() == [0.0, 0.0, 0.0]


# --------------------------------------------------------------- 6. one-token variance


def test_one_token_variance():
    assert math.isnan(bg.wrong_one_token())
    assert bg.right_one_token() == 0.7  # whitening skipped: the advantage passes unchanged
    batch = gallery.make_batch([0.7, 0.1], [1, 1], ["q", "q"])  # two tokens: whitening does act
    trace = run(batch, "roll", {"adv_estimator": "reinforce", "whiten_advantages": True})
    m, v = 0.4, ((0.3**2) * 2) / 1
    assert trace.advantages[:, 0].tolist() == pytest.approx(
        [(0.7 - m) / math.sqrt(v + 1e-8), (0.1 - m) / math.sqrt(v + 1e-8)], abs=1e-12
    )


# ------------------------------------------------------- 7. scale_rewards="batch" (TRL)


def test_trl_batch_uses_the_batch_std():
    scores = bg.TRL_BATCH_SCORES
    flat = scores[3:]
    assert bg.wrong_trl_batch()[4] == pytest.approx((5.1 - mean(flat)) / (std(flat) + 1e-4))
    assert bg.wrong_trl_batch()[4] == pytest.approx(0.1 / 0.1001)
    s = std(scores)
    hand = []
    for start in (0, 3):
        g = scores[start : start + 3]
        hand += [(x - mean(g)) / (s + 1e-4) for x in g]
    right = bg.right_trl_batch()
    assert right.tolist() == pytest.approx(hand, abs=1e-12)
    assert right[4].item() == pytest.approx(0.0552, abs=1e-4)


# --------------------------------------------------------------------------- 8. LUSPO


def test_luspo_weights_linear_not_quadratic():
    # LUSPO: sequence token-mean * L, mean over B: sequence weight L / B
    assert bl.right_luspo().tolist() == pytest.approx([2 / 2, 6 / 2], abs=1e-12)
    assert bl.wrong_luspo() == pytest.approx([2 * 2 / 6 / 2, 6 * 6 / 6 / 2])  # L^2 / T / B
    out = gallery.bug("luspo-quadratic").compute()
    assert (out.wrong, out.right) == (pytest.approx(9.0), pytest.approx(3.0))


# ------------------------------------------------------------------ 9. DAPO vs GRPO


def test_dapo_is_token_mean():
    right = bl.right_names()
    assert right.tolist() == pytest.approx([2 / 8, 6 / 8], abs=1e-12)
    assert bl.wrong_names() == [0.5, 0.5]
    # the loss values of the two readings at r = 1: token-mean 0.5, seq-mean-token-mean 0
    lp = torch.full((2, 6), -1.0, dtype=F64)
    mask = gallery.make_batch([0, 0], [2, 6], ["q", "q"]).response_mask
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    tok = policy_loss("verl", {"loss_agg_mode": "token-mean"}, logprobs=lp, old_logprobs=lp,
                      advantages=adv, response_mask=mask)  # fmt: skip
    seq = policy_loss("verl", {"loss_agg_mode": "seq-mean-token-mean"}, logprobs=lp,
                      old_logprobs=lp, advantages=adv, response_mask=mask)  # fmt: skip
    assert tok.total.item() == pytest.approx((2 * -1 + 6 * 1) / 8)
    assert seq.total.item() == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------ 10. phantom advantages


def test_phantom_advantages():
    shaped = [-0.010, -0.012, -0.008, -0.011]
    assert bg.phantom_scores() == pytest.approx(shaped)
    m, s = mean(shaped), std(shaped)
    assert s > 0  # a zero-std filter keeps the group
    hand = [(x - m) / (s + 1e-6) for x in shaped]
    assert bg.wrong_phantom() == pytest.approx(hand)
    assert hand[2] == pytest.approx(1.3167, abs=1e-4)
    # plain GRPO in roll-viz reproduces the phantom: the pipeline computes the wrong side too
    grpo = run(gallery.make_batch(shaped, [1] * 4, ["q"] * 4), "roll", {"adv_estimator": "grpo"})
    assert grpo.advantages[:, 0].tolist() == pytest.approx(hand, abs=1e-9)
    assert bg.right_phantom().tolist() == [0.0, 0.0, 0.0, 0.0]


# ---------------------------------------------------------------- 11. top-p in the ratio


def test_top_p_renormalisation():
    assert bl.top_p_mass((0.5, 0.3, 0.15, 0.05), 0.75) == pytest.approx(0.8)
    assert bl.top_p_mass((0.9, 0.06, 0.04), 0.75) == pytest.approx(0.9)
    assert bl.top_p_mass((0.2, 0.5, 0.3), 1.0) == pytest.approx(1.0)
    # ratio = p / (p / S) = S
    assert bl.wrong_top_p() == pytest.approx([0.8, 0.9])
    assert bl.right_top_p().tolist() == [1.0, 1.0]


# ----------------------------------------------------------------- 12. TRL CISPO cap


def test_cispo_cap():
    assert bl.wrong_cispo() == pytest.approx(-0.2 * 1 / 2)
    assert bl.right_cispo().tolist() == pytest.approx([-0.5, -0.5], abs=1e-12)
    # roll-viz's TRL default mirrors TRL: epsilon_high None -> epsilon = 0.2 is the cap
    lp = torch.tensor([[-0.7, -1.1]], dtype=F64)
    default = policy_loss("trl", {"loss_type": "cispo"}, logprobs=lp, old_logprobs=lp,
                          advantages=torch.tensor([1.0], dtype=F64),
                          response_mask=torch.ones_like(lp))  # fmt: skip
    assert default.per_token["grad_coef"][0].tolist() == pytest.approx([bl.wrong_cispo()] * 2)


# ------------------------------------------------------- 13. ROLL method: mean per traj


def test_per_trajectory_mean_zeroes_everything():
    assert bg.wrong_per_trajectory() == [0.0] * 6
    assert bg.right_per_trajectory().tolist() == pytest.approx([0.5] * 3 + [-0.5] * 3)
    # the same pipeline with one group per trajectory gives the all-zero advantages
    batch = gallery.make_batch(bg.TRAJ_RETURNS, [1] * 6, list(bg.TRAJ_IDS))
    cfg = {"adv_estimator": "reinforce", "norm_mean_type": "group"}
    assert run(batch, "roll", cfg).rewards.tolist() == [0.0] * 6


# --------------------------------------------------------------- 14. CE rollouts filtered


def test_zero_advantage_filter_drops_the_ce_gradient():
    assert bl.wrong_ce_filter().abs().max().item() == 0.0
    right = bl.right_ce_filter()
    # CE = 0.5 * token-mean over q2's 4 tokens of -log pi: d/dlogp = -0.5 / 4 per token;
    # q2's policy term has A = 0, so nothing else acts on those tokens
    assert right.flatten().tolist() == pytest.approx([-0.5 / 4] * 4, abs=1e-12)
    out = gallery.bug("ce-filter").compute()
    assert (out.wrong, out.right) == (0.0, pytest.approx(0.25))


def _number(choice: str) -> float | None:
    """The number a choice states first ("about -2.5 (...)" -> -2.5), None for a sentence."""
    found = re.match(r"^(?:about\s+)?([+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?)", choice)
    return float(found.group(1)) if found else None


@pytest.mark.parametrize("bug_id", gallery.IDS)
def test_only_the_right_choice_is_near_the_revealed_number(bug_id):
    """A wrong choice never states (about) the number the reveal shows as right."""
    bug = gallery.bug(bug_id)
    right = bug.compute().right
    numbers = [_number(c) for c in bug.choices]
    if numbers[bug.answer] is None or not math.isfinite(right):
        return  # a sentence answer: nothing numeric to confuse
    near = [
        i for i, x in enumerate(numbers) if x is not None and abs(x - right) <= 0.1 * abs(right)
    ]
    assert near == [bug.answer], (bug.choices, right)
