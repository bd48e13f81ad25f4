"""The gallery's cases of field-2026-b.md: each wrong and right number against its thread.

Every expected number is computed here by hand (a formula written out, or a plain loop that
shares no code with the package); where a thread states a number (-49.5, 20 instead of 30), the
test states it too. Gradients written in closed form are checked against autograd.
"""

from __future__ import annotations

import math
import random
import re

import pytest
import torch

from roll_viz.analysis import silent_bugs as gallery
from roll_viz.analysis.silent_bugs import bugs_2026 as b26
from roll_viz.analysis.silent_bugs import bugs_rewards as br
from roll_viz.core.pipeline import policy_loss, run

F64 = torch.float64

NEW = (
    "zero-token-sibling",
    "reward-shift",
    "gold-unparseable",
    "double-whiten",
    "near-tie",
    "noisy-verifier",
    "async-old-actor",
    "async-top-p",
    "ds-reward-rows",
    "loo-ds-winners",
    "stale-discard",
    "dead-denominator",
)


def mean(xs):
    return sum(xs) / len(xs)


def std(xs, ddof=1):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def test_the_new_cases_follow_the_fourteen_in_order():
    ids = gallery.IDS
    assert ids[:14] == gallery.FIELD_ORDER
    assert tuple(i for i in ids if i in NEW) == NEW
    assert ids.index(NEW[0]) == 14
    threads = " ".join(gallery.bug(i).thread for i in NEW)
    for ref in ("OpenRLHF#1239", "RL#3635", "cookbook#335", "reskill#12", "twinkle#288",
                "post-training-experiments#15", "miles#1829", "SkyRL#1315", "trl#6945",
                "RL#3794", "RL#4158", "tinker-cookbook#822", "trl#6367"):  # fmt: skip
        assert ref in threads, ref
    shorts = [b.short for b in gallery.BUGS]
    assert len(set(shorts)) == len(shorts)
    for bug_id in NEW:
        bug = gallery.bug(bug_id)
        assert 0 < len(bug.short) <= 24, bug.short
        assert len(bug.choices) >= 3
        assert 0 <= bug.answer < len(bug.choices)
        assert all((bug.question, bug.explanation, bug.quantity, bug.batch))
        assert re.fullmatch(r"[\w.-]+/[\w.-]+#\d+.*", bug.thread), bug.thread


# --------------------------------------------- OpenRLHF PR #1239: the zero-token sibling


def test_zero_token_sibling_gives_minus_49_5():
    assert br.wrong_zero_sibling() == [100 - 50.5, 1 - 50.5]
    assert br.wrong_zero_sibling()[1] == -49.5  # the thread's number
    assert br.right_zero_sibling() == [0.0, 0.0]  # the valid sibling is its own mean
    out = gallery.bug("zero-token-sibling").compute()
    assert (out.wrong, out.right) == (-49.5, 0.0)
    # roll-viz's OpenRLHF dialect follows OpenRLHF's main while the PR is open: the row with no
    # tokens still enters the group mean, so its pipeline gives the thread's -49.5 on each token
    batch = gallery.make_batch([100.0, 1.0], [0, 2], ["q", "q"])
    trace = run(batch, "openrlhf", {"advantage_estimator": "dr_grpo", "clip_range": None})
    assert trace.advantages[1].tolist() == [-49.5, -49.5]


# ------------------------------------------------ NeMo RL PR #3635: the second score


def test_empty_parse_shifts_every_later_reward():
    right_scores = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]  # 12, none, 13 | 7, 5, 7
    # the empty parse of answer 2 appends 0 twice: one score too many, everything after moves
    wrong_scores = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert br.wrong_verify() == wrong_scores
    assert br.right_verify().tolist() == right_scores

    def grpo(xs):  # verl: (r - mean) / (std + 1e-6), unbiased std
        m, s = mean(xs), std(xs)
        return [(x - m) / (s + 1e-6) for x in xs]

    hand_wrong = grpo(wrong_scores[:3]) + grpo(wrong_scores[3:6])
    hand_right = grpo(right_scores[:3]) + grpo(right_scores[3:])
    assert br.shift_advantages(wrong_scores).tolist() == pytest.approx(hand_wrong, abs=1e-12)
    assert br.shift_advantages(right_scores).tolist() == pytest.approx(hand_right, abs=1e-12)
    out = gallery.bug("reward-shift").compute()
    # 'I think 5' is wrong: -(2/3) / sqrt(1/3) without the bug, +(2/3) / sqrt(1/3) with it
    assert out.right == pytest.approx(-(2 / 3) / (math.sqrt(1 / 3) + 1e-6), abs=1e-12)
    assert out.wrong == pytest.approx(+(2 / 3) / (math.sqrt(1 / 3) + 1e-6), abs=1e-12)


# ------------------------------------------- huggingface/cookbook #335: gold unparseable


def test_unparseable_gold_reinforces_a_wrong_answer():
    rewards = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]  # q1: all 1.0; q2: only "12" is right
    assert br.wrong_gold() == rewards
    assert br.gradable_rows() == [4, 5, 6, 7]

    def whiten(xs):  # verl masked_whiten over one token each: unbiased var, rsqrt(var + 1e-8)
        m = mean(xs)
        v = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
        return [(x - m) / math.sqrt(v + 1e-8) for x in xs]

    out = gallery.bug("gold-unparseable").compute()
    assert out.wrong == pytest.approx(whiten(rewards)[2], abs=1e-12)
    assert out.wrong == pytest.approx(0.375 / math.sqrt(1.875 / 7), abs=1e-6)  # about +0.72
    assert out.right == 0.0
    assert out.right_series == pytest.approx([0.0] * 4 + whiten(rewards[4:]), abs=1e-12)
    # a group baseline (GRPO) gives q1 zero either way: the maintainers' point, the bug hides
    grpo = run(gallery.make_batch(rewards, [1] * 8, ["q1"] * 4 + ["q2"] * 4), "verl",
               {"adv_estimator": "grpo"})  # fmt: skip
    assert grpo.advantages[:4, 0].tolist() == [0.0] * 4


# ----------------------------------------------------- reskill PR #12: double whitening


def test_double_whitening_gives_a_dead_group_an_advantage():
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO of q1 (1, 0): (r - 0.5) / (std + 1e-6)
    group = [a, -a, 0.0, 0.0]
    tokens = [a] * 2 + [-a] * 6 + [0.0] * 6
    m = sum(tokens) / 14
    assert m == pytest.approx(-4 * a / 14)
    v = sum((t - m) ** 2 for t in tokens) / 13
    hand = [(g - m) / math.sqrt(v + 1e-8) for g in group]
    assert br.wrong_double_whiten() == pytest.approx(hand, abs=1e-12)
    assert hand[2] == pytest.approx(0.3934, abs=1e-4)
    assert br.right_double_whiten().tolist() == pytest.approx(group, abs=1e-12)
    out = gallery.bug("double-whiten").compute()
    assert (out.wrong, out.right) == (pytest.approx(hand[2]), 0.0)


# ------------------------------------------------------------ twinkle PR #288: near-ties


def test_near_ties_are_blown_up_unless_gated():
    q1, q2 = [0.7012, 0.7003, 0.6998, 0.7007], [0.9, 0.3, 0.6, 0.2]
    assert max(q1) - min(q1) == pytest.approx(0.0014)
    z1 = [(x - mean(q1)) / (std(q1) + 1e-6) for x in q1]
    z2 = [(x - mean(q2)) / (std(q2) + 1e-6) for x in q2]
    assert br.wrong_near_tie() == pytest.approx(z1 + z2, abs=1e-9)
    assert z1[0] > 1.1  # a full-size advantage for a 0.0014 spread
    assert br.admitted(list(q1) + list(q2)) == [False] * 4 + [True] * 4
    right = br.right_near_tie()
    assert right.tolist() == pytest.approx([0.0] * 4 + z2, abs=1e-9)
    out = gallery.bug("near-tie").compute()
    assert (out.wrong, out.right) == (pytest.approx(z1[0]), 0.0)


# ----------------------------------------------- asuzukosi #15: a noisy verifier's ties


def test_noisy_verifier_breaks_ties():
    truth = [[0] * 4] * 5 + [[1] * 4, [1, 0, 0, 0], [1, 1, 0, 0]]

    def zero_share(groups):
        return sum(len(g) for g in groups if len(set(g)) == 1) / 32

    def noisy(acc, seed=3):
        rng = random.Random(seed)
        return [[1 - v if rng.random() >= acc else v for v in g] for g in truth]

    assert zero_share(truth) == 24 / 32
    expected = [zero_share(noisy(a)) for a in (1.0, 0.95, 0.9, 0.8, 0.7)]
    out = gallery.bug("noisy-verifier").compute()
    assert out.right == 0.75
    assert out.right_series == (0.75,) * 5
    assert list(out.wrong_series) == expected
    assert out.wrong == expected[2] < 0.75  # the 90% verifier breaks at least one tie
    assert expected[0] == 0.75
    assert expected[-1] < expected[2]
    flips = sum(
        a != b for t, n in zip(truth, noisy(0.9), strict=True) for a, b in zip(t, n, strict=True)
    )
    assert br.noise_flips(0.9) == flips > 0


# ------------------------------------------- miles PR #1829 / SkyRL #1315: pi_old = actor


def test_async_old_actor_turns_clipping_off():
    cur, mu = b26.STALE_CURRENT, b26.STALE_ROLLOUT
    ratios = [math.exp(cur[b][t] - mu[b][t]) for b in (0, 1) for t in (0, 1)]
    adv = [1.0, 1.0, -1.0, -1.0]
    clipped = [(a > 0 and r > 1.2) or (a < 0 and r < 0.8) for r, a in zip(ratios, adv, strict=True)]
    assert clipped == [True, False, True, False]
    assert b26.wrong_stale_ratio() == [1.0] * 4
    ratio, mask = b26.right_stale()
    assert ratio.flatten().tolist() == pytest.approx(ratios, abs=1e-12)
    assert mask.flatten().tolist() == clipped
    out = gallery.bug("async-old-actor").compute()
    assert (out.wrong, out.right) == (0.0, 0.5)


# ------------------------------------------------------ TRL #6945: AsyncGRPO under top-p


def test_async_top_p_clips_the_negative_branch():
    s = [0.5 + 0.2, 0.9]  # nucleus mass at top-p 0.65
    # AsyncGRPO's loss with old = log(p / S), written in torch and differentiated by autograd
    lp = torch.tensor([math.log(0.5), math.log(0.9)], dtype=F64, requires_grad=True)
    old = torch.tensor([math.log(0.5 / s[0]), math.log(0.9 / s[1])], dtype=F64)
    coef_1 = torch.exp(lp - old)
    coef_2 = torch.clamp(coef_1, 0.8, 1.2)
    a = -1.0
    loss = (-torch.min(coef_1 * a, coef_2 * a)).mean()
    (grad,) = torch.autograd.grad(loss, lp)
    assert coef_1.tolist() == pytest.approx(s)  # an unchanged policy reads S, not 1
    assert grad.tolist() == pytest.approx([0.0, 0.9 / 2], abs=1e-12)
    assert b26.wrong_async_top_p() == pytest.approx(grad.tolist(), abs=1e-12)
    assert b26.right_async_top_p().tolist() == pytest.approx([0.5, 0.5], abs=1e-12)
    out = gallery.bug("async-top-p").compute()
    assert (out.wrong, out.right) == (0.0, pytest.approx(0.5))


# ------------------------------------------ NeMo RL PR #3794: rewards and rows misaligned


def test_dynamic_sampling_rows_read_the_wrong_reward():
    assert b26.kept_rows() == [0, 1, 4, 5]
    assert b26.wrong_ds_rewards() == [10.0, 11.0, 20.0, 21.0]  # rows 2, 3: 20, 21 (BAD)
    assert b26.right_ds_rewards() == [10.0, 11.0, 30.0, 31.0]  # (correct: 30, 31)
    out = gallery.bug("ds-reward-rows").compute()
    assert (out.wrong, out.right) == (20.0, 30.0)


# ------------------------------------- NeMo RL PR #4158 review: LOO + DS, seven winners


def test_loo_dynamic_sampling_keeps_identical_winners():
    scores = [0.0] + [0.95] * 7
    assert b26.peers_trivial() == [True] + [False] * 7  # the review's reproduction
    assert b26.wrong_loo_ds() == [0.0] * 8  # loser dropped, seven winners tie
    hand = [x - (sum(scores) - x) / 7 for x in scores]  # RLOO over the whole group
    assert hand[1] == pytest.approx(0.95 / 7)
    assert b26.right_loo_ds().tolist() == pytest.approx(hand, abs=1e-12)
    out = gallery.bug("loo-ds-winners").compute()
    assert (out.wrong, out.right) == (0.0, pytest.approx(0.95 / 7))


# --------------------------------------- tinker-cookbook PR #822: staleness discard


def test_staleness_discard_trains_short_rollouts_only():
    lengths = [300, 500, 800, 1200, 1500, 2500, 3500, 6000]
    steps = [-(-n // 1000) for n in lengths]
    assert steps == [1, 1, 1, 2, 2, 3, 4, 6]
    trained = [n for n, s in zip(lengths, steps, strict=True) if s <= 2]
    assert b26.wrong_discard() == [1.0] * 5 + [0.0] * 3
    out = gallery.bug("stale-discard").compute()
    assert out.wrong == mean(trained) == 860.0
    assert out.right == mean(lengths) == 2037.5


# --------------------------------------------------- TRL #6367: dead-group denominator


def test_dead_groups_dilute_the_live_gradient():
    a = 0.5 / (math.sqrt(0.5) + 1e-4)  # TRL: group std + 1e-4
    hand_wrong = [-a / 12, -a / 12, a / 12, a / 12]
    hand_right = [-a / 4, -a / 4, a / 4, a / 4]
    assert b26.dead_advantages()[:, 0].tolist() == pytest.approx([a, -a, 0, 0, 0, 0], abs=1e-12)
    assert b26.wrong_dead([a, -a]) == pytest.approx(hand_wrong, abs=1e-12)
    assert b26.right_dead().flatten().tolist() == pytest.approx(hand_right, abs=1e-12)
    # TRL's default (dapo) over the whole batch IS the wrong side: autograd of roll-viz's loss
    lp = torch.tensor(b26.DEAD_LOGPROBS, dtype=F64, requires_grad=True)
    res = policy_loss("trl", {}, logprobs=lp, old_logprobs=lp.detach(),
                      advantages=b26.dead_advantages(),
                      response_mask=torch.ones_like(lp))  # fmt: skip
    (grad,) = torch.autograd.grad(res.total, lp)
    assert grad[:2].flatten().tolist() == pytest.approx(hand_wrong, abs=1e-12)
    out = gallery.bug("dead-denominator").compute()
    assert (out.wrong, out.right) == (pytest.approx(-a / 12), pytest.approx(-a / 4))
