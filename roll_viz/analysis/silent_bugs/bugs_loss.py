"""Silent bugs of the policy loss: seven of field-2026.md section 2.3.

A zero loss with a non-zero gradient, the KL gradient in zero-advantage groups, LUSPO's quadratic
length weight, DAPO vs GRPO aggregation names, top-p renormalisation in the IS ratio, CISPO's
default cap, and a zero-advantage filter that drops a cross-entropy term. Each: its batch, the
``wrong_*`` formula written plainly the way its thread describes it, the ``right_*`` call into
roll-viz's pipeline, and its record.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from roll_viz.analysis.silent_bugs.bug_record import (
    F64,
    Outcome,
    SilentBug,
    avg,
    make_batch,
    num,
    sd,
    series,
    step_grad,
)
from roll_viz.core.pipeline import agg_weights, aggregate, importance_ratio, policy_loss, run

# ------------------------------------------------------------- 1. loss 0 but gradient not 0

LOSS_ZERO_SCORES = (8.2, 6.5, 9.1)
LOSS_ZERO_LOGPROBS = ((-1.2, -0.7), (-2.0, -0.4), (-0.9, -1.5))


def wrong_loss_zero(scores: Sequence[float] = LOSS_ZERO_SCORES, length: int = 2) -> float:
    """The loss value read as the learning signal: -mean over tokens of A * r with r = 1.

    TRL's default (``dapo``, ``num_iterations=1``, ``beta=0``) logs this number (4 decimals,
    as the log shows it); with group-centred advantages and equal lengths it is 0, and "0" is
    read as "no gradient".
    """
    m, s = avg(scores), sd(scores)
    advantages = [(x - m) / (s + 1e-4) for x in scores]
    loss = -sum(a * 1.0 * length for a in advantages) / (length * len(scores))
    return round(loss, 4) + 0.0


def right_loss_zero() -> tuple[float, float, Tensor, Tensor]:
    """(loss, gradient norm, (B, T) gradient, (B,) advantages) from roll-viz's TRL dialect."""
    batch = make_batch(LOSS_ZERO_SCORES, [2, 2, 2], ["q", "q", "q"])
    trace = run(batch, "trl", {})
    loss, grad = step_grad("trl", {}, LOSS_ZERO_LOGPROBS, trace.advantages, batch.response_mask)
    return loss.item(), grad.norm().item(), grad, trace.advantages[:, 0]


def _loss_zero() -> Outcome:
    wrong = wrong_loss_zero()
    loss, norm, grad, advantages = right_loss_zero()
    return Outcome(
        wrong=wrong,
        right=norm,
        labels=("answer 1", "answer 2", "answer 3"),
        wrong_series=(0.0, 0.0, 0.0),
        right_series=series(grad.sum(-1)),
        series_title="dL/dlog pi summed over each answer's tokens",
        formula=(
            "A = (r - mean) / (std + 1e-4) = "
            + ", ".join(num(a) for a in advantages.tolist())
            + "   (rewards 8.2, 6.5, 9.1)\n"
            f"loss = -(1/6) * sum_i 2 * A_i * r, r = 1  ->  {num(loss)}  (logged: {wrong:.4f})\n"
            "dL/dlog pi_t = -A_i / 6  ->  per answer (2 tokens): "
            + ", ".join(num(v) for v in grad.sum(-1).tolist())
            + f"\n|grad| = sqrt(2 * sum A_i^2) / 6 = {num(norm)}  (not 0: the model learns)"
        ),
    )


# ---------------------------------------------- 2. the KL gradient in zero-advantage groups

KL_ZERO_SCORES = (1.0, 0.0, 1.0, 1.0)
KL_ZERO_GROUPS = ("q1", "q1", "q2", "q2")
KL_ZERO_LOGPROBS = ((-0.5, -1.0), (-0.8, -0.6), (-1.0, -0.5), (-2.0, -0.3))
KL_ZERO_REF = ((-0.6, -1.0), (-0.7, -0.9), (-1.2, -0.5), (-1.5, -0.4))
KL_ZERO_BETA = 0.1


def wrong_kl_zero(advantages: Sequence[float] = (0.0, 0.0), length: int = 2) -> list[float]:
    """The policy-gradient-only view: d loss / d log pi = -A * w per token, 0 when A = 0.

    Masking or skipping the zero-advantage groups is then believed to change nothing.
    """
    total_tokens = 2 * len(KL_ZERO_SCORES)
    return [-a / total_tokens for a in advantages for _ in range(length)]


def right_kl_zero() -> tuple[Tensor, Tensor]:
    """(advantages (B, T), d loss / d logp (B, T)) of roll-viz's TRL dialect with beta > 0.

    The plain k3 of the thread: ``use_bias_correction_kl`` (TRL 1.16's default) multiplies k3 by
    the ratio, which adds a k3 term to the slope; the KL gradient survives either way.
    """
    batch = make_batch(KL_ZERO_SCORES, [2] * 4, KL_ZERO_GROUPS, KL_ZERO_LOGPROBS, KL_ZERO_REF)
    config = {"beta": KL_ZERO_BETA, "use_bias_correction_kl": False}
    trace = run(batch, "trl", config)
    _, grad = step_grad(
        "trl", config, KL_ZERO_LOGPROBS, trace.advantages, batch.response_mask, batch.ref_logprobs
    )
    return trace.advantages, grad


def _kl_zero() -> Outcome:
    wrong = wrong_kl_zero()
    advantages, grad = right_kl_zero()
    q2 = grad[2:].flatten()
    return Outcome(
        wrong=math.sqrt(sum(g * g for g in wrong)),
        right=q2.norm().item(),
        labels=("q2 answer 1, t1", "q2 answer 1, t2", "q2 answer 2, t1", "q2 answer 2, t2"),
        wrong_series=series(wrong),
        right_series=series(q2),
        series_title="dL/dlog pi on each of q2's tokens",
        formula=(
            "group q2 rewards 1, 1  ->  A = 0 on all its tokens (advantages of q2: "
            + ", ".join(num(a) for a in advantages[2:, 0].tolist())
            + ")\n"
            f"loss = token-mean( -A * r + beta * k3 ),  beta = {KL_ZERO_BETA},  8 tokens\n"
            "dk3/dlog pi = 1 - exp(ref - log pi)  ->  dL/dlog pi_t = beta/8 * (1 - e^(ref-logp))\n"
            "q2 tokens: "
            + ", ".join(num(v) for v in q2.tolist())
            + f"  ->  |grad| = {num(q2.norm().item())}"
        ),
    )


# ------------------------------------------------------------ 8. LUSPO weighted by L^2 / T

LUSPO_LENGTHS = (2, 6)


def wrong_luspo(lengths: Sequence[int] = LUSPO_LENGTHS) -> list[float]:
    """TRL's old LUSPO reduction (#6654), ``(x * mask.sum(1, keepdim=True)).mean()``.

    With a (B, T) per-token loss (the token-level ratio, a KL term) the mean runs over all B * T
    padded positions: a sequence's share is ``L * sum_t x / (B * T)``. With x = 1 on its L
    tokens (0 on padding) each sequence weighs ``L^2 / T / B``.
    """
    width, b = max(lengths), len(lengths)
    shares = []
    for n in lengths:
        x = [1.0] * n + [0.0] * (width - n)
        shares.append(sum(n * v for v in x) / (b * width))
    return shares


def right_luspo(lengths: Sequence[int] = LUSPO_LENGTHS) -> Tensor:
    """(B,) per-sequence weight of LUSPO (sequence token-mean times L, mean over sequences).

    That is ``sum_i sum_t x / B``: roll-viz's ``seq-mean-token-sum`` aggregation (TRL's
    ``luspo`` is not a roll-viz loss option; its weights are this mode's, ``agg_weights``).
    """
    mask = make_batch([0.0] * len(lengths), lengths, ["q"] * len(lengths)).response_mask
    return agg_weights(mask, "seq-mean-token-sum").sum(-1)


def _luspo() -> Outcome:
    wrong = wrong_luspo()
    right = right_luspo()
    ratio_wrong = wrong[1] / wrong[0]
    ratio_right = (right[1] / right[0]).item()
    return Outcome(
        wrong=ratio_wrong,
        right=ratio_right,
        labels=("2-token answer", "6-token answer"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="weight of each sequence in the loss",
        formula=(
            "weight of a sequence in the loss, lengths 2 and 6 (T = 6, B = 2)\n"
            "old: (x * L).mean() over all B x T padded slots, x = 1 on a token: L * (L / T) / B\n"
            f"   = 4/12, 36/12 = {num(wrong[0])}, {num(wrong[1])}  ->  ratio "
            f"{num(ratio_wrong)} (quadratic)\n"
            f"LUSPO: token-mean * L / B = L / B = {num(right[0].item())}, {num(right[1].item())}  "
            f"->  ratio {num(ratio_right)} (linear)"
        ),
    )


# ------------------------------------------------------ 9. DAPO vs GRPO aggregation names

NAMES_LENGTHS = (2, 6)
NAMES_ADVANTAGES = (1.0, -1.0)


def wrong_names(lengths: Sequence[int] = NAMES_LENGTHS) -> list[float]:
    """Share of each answer in the loss under "DAPO" read as seq-mean-token-mean (swapped)."""
    return [1.0 / len(lengths)] * len(lengths)


def right_names() -> Tensor:
    """(B,) share of each answer under verl ``loss_agg_mode: token-mean`` (DAPO's token level).

    The sum of the policy term's weights per row, from roll-viz's ``policy_loss``.
    """
    batch = make_batch([0.0, 0.0], NAMES_LENGTHS, ["q", "q"])
    lp = [[-1.0] * 6, [-1.0] * 6]
    result = policy_loss(
        "verl",
        {"loss_agg_mode": "token-mean"},
        logprobs=torch.tensor(lp, dtype=F64),
        old_logprobs=torch.tensor(lp, dtype=F64),
        advantages=torch.tensor(NAMES_ADVANTAGES, dtype=F64),
        response_mask=batch.response_mask,
    )
    return result.per_token["loss_weight"].sum(-1)


def _names() -> Outcome:
    wrong = wrong_names()
    right = right_names()
    return Outcome(
        wrong=wrong[1],
        right=right[1].item(),
        labels=("2 tokens, A = +1", "6 tokens, A = -1"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="share of the loss weight per answer",
        formula=(
            "DAPO = token-mean: every token weighs 1 / (2 + 6) = 1/8  ->  the 6-token answer "
            f"carries 6/8 = {num(right[1].item())}\n"
            "GRPO = seq-mean-token-mean: every answer weighs 1/2, its tokens 1/(2 L)  ->  "
            f"{num(wrong[1])}\n"
            "loss at r = 1: token-mean (2 * -1 + 6 * +1) / 8 = 0.5; seq-mean-token-mean "
            "(-1 + 1) / 2 = 0"
        ),
    )


# ---------------------------------------------- 11. top-p renormalisation in the IS ratio

TOP_P = 0.75
TOP_P_DISTRIBUTIONS = ((0.5, 0.3, 0.15, 0.05), (0.9, 0.06, 0.04))  # sampled token first


def top_p_mass(probs: Sequence[float], top_p: float) -> float:
    """S: the probability mass of the nucleus, the smallest top set reaching ``top_p``.

    roll-viz scores every token with the full-vocabulary softmax (temperature-scaled, top-p
    ignored, as the trainers recompute log-probs), so it never holds "processed" log-probs; the
    term a top-p sampler's renormalised log-probs carry is computed here from the distribution.
    """
    total = 0.0
    for p in sorted(probs, reverse=True):
        total += p
        if total >= top_p:
            break
    return total


def wrong_top_p() -> list[float]:
    """The IS ratio with the sampler's processed log-probs: pi_train(y) / (p(y) / S) = S."""
    out = []
    for probs in TOP_P_DISTRIBUTIONS:
        processed = math.log(probs[0] / top_p_mass(probs, TOP_P))
        out.append(math.exp(math.log(probs[0]) - processed))
    return out


def right_top_p() -> Tensor:
    """(T,) roll-viz's ``importance_ratio`` of the trainer's log-probs against the raw ones."""
    raw = torch.tensor([[math.log(p[0]) for p in TOP_P_DISTRIBUTIONS]], dtype=F64)
    mask = torch.ones_like(raw)
    return importance_ratio(raw.clone(), raw, mask)[0]


def _top_p() -> Outcome:
    wrong = wrong_top_p()
    right = right_top_p()
    s = top_p_mass(TOP_P_DISTRIBUTIONS[0], TOP_P)
    return Outcome(
        wrong=wrong[0],
        right=right[0].item(),
        labels=("token 1 (p = 0.5)", "token 2 (p = 0.9)"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="importance ratio of each token",
        formula=(
            f"token 1: probs 0.5, 0.3, 0.15, 0.05; top-p {TOP_P} keeps 0.5 + 0.3, S = {num(s)}\n"
            f"processed log-prob = log(0.5 / {num(s)}) = {num(math.log(0.5 / s))}; trainer's = "
            f"log 0.5 = {num(math.log(0.5))}\n"
            f"ratio = exp(log 0.5 - log(0.5 / S)) = S = {num(wrong[0])}  (on-policy, yet not 1)\n"
            f"raw log-probs on both sides: ratio = {num(right[0].item())}"
        ),
    )


# ------------------------------------------------------ 12. TRL CISPO's default cap of 0.2

CISPO_LENGTH = 2


def wrong_cispo(advantage: float = 1.0, epsilon: float = 0.2, length: int = CISPO_LENGTH) -> float:
    """TRL ``loss_type="cispo"`` defaults: weight min(r, epsilon_high), epsilon_high = epsilon.

    d loss / d log pi = -min(r, 0.2) * A / L for an on-policy token (r = 1), token-mean.
    """
    return -min(1.0, epsilon) * advantage / length


def right_cispo() -> Tensor:
    """(T,) gradient coefficients of roll-viz's TRL CISPO with ``epsilon_high=5`` (ScaleRL)."""
    lp = torch.tensor([[-0.7, -1.1]], dtype=F64)
    result = policy_loss(
        "trl",
        {"loss_type": "cispo", "epsilon_high": 5.0},
        logprobs=lp,
        old_logprobs=lp,
        advantages=torch.tensor([1.0], dtype=F64),
        response_mask=torch.ones_like(lp),
    )
    return result.per_token["grad_coef"][0]


def _cispo() -> Outcome:
    wrong = wrong_cispo()
    right = right_cispo()
    return Outcome(
        wrong=wrong,
        right=right[0].item(),
        labels=("token 1", "token 2"),
        wrong_series=(wrong, wrong),
        right_series=series(right),
        series_title="gradient coefficient of each token",
        formula=(
            "one answer, 2 tokens, A = +1, first step (r = 1), token-mean (w = 1/2)\n"
            f"defaults: epsilon_high = epsilon = 0.2: g = -min(1, 0.2) * 1 / 2 = {num(wrong)}\n"
            f"epsilon_high = 5: g = -min(1, 5) * 1 / 2 = {num(right[0].item())}  (plain policy "
            "gradient on-policy)"
        ),
    )


# ------------------------------------------ 14. zero-advantage filter drops the CE rollouts

CE_SCORES = (1.0, 0.0, 1.0, 1.0)
CE_GROUPS = ("q1", "q1", "q2", "q2")
CE_LOGPROBS = ((-0.5, -1.0), (-0.8, -0.6), (-1.0, -0.5), (-2.0, -0.3))
CE_COEF = 0.5
CE_ROWS = (2, 3)  # the rollouts of q2 also carry a cross-entropy (distillation / SFT) term


def _ce_loss(lp: Tensor, rows: Sequence[int], advantages: Tensor, mask: Tensor) -> Tensor:
    keep = list(rows)
    pg = policy_loss(
        "trl",
        {},
        logprobs=lp[keep],
        old_logprobs=lp[keep].detach(),
        advantages=advantages[keep],
        response_mask=mask[keep],
    ).total
    ce_mask = torch.zeros_like(mask)
    ce_mask[list(CE_ROWS)] = mask[list(CE_ROWS)]
    ce_mask = ce_mask[keep]
    if ce_mask.sum() == 0:
        return pg
    return pg + CE_COEF * aggregate(-lp[keep], ce_mask, "token-mean")


def wrong_ce_filter() -> Tensor:
    """(2, T) gradient on q2's tokens when zero-advantage rollouts are dropped first.

    Their cross-entropy term goes with them: the gradient is all zero.
    """
    batch = make_batch(CE_SCORES, [2] * 4, CE_GROUPS)
    advantages = run(batch, "trl", {}).advantages
    lp = torch.tensor(CE_LOGPROBS, dtype=F64, requires_grad=True)
    kept = [i for i in range(4) if bool(advantages[i].abs().sum() > 0)]
    (grad,) = torch.autograd.grad(_ce_loss(lp, kept, advantages, batch.response_mask), lp)
    return grad[list(CE_ROWS)]


def right_ce_filter() -> Tensor:
    """(2, T) gradient on q2's tokens with every rollout kept.

    roll-viz's losses have no cross-entropy term; the total here is roll-viz's TRL
    ``policy_loss`` plus ``CE_COEF * aggregate(-logp, ce_mask, "token-mean")`` (roll-viz's
    aggregation), differentiated by autograd.
    """
    batch = make_batch(CE_SCORES, [2] * 4, CE_GROUPS)
    advantages = run(batch, "trl", {}).advantages
    lp = torch.tensor(CE_LOGPROBS, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(_ce_loss(lp, range(4), advantages, batch.response_mask), lp)
    return grad[list(CE_ROWS)]


def _ce_filter() -> Outcome:
    wrong = wrong_ce_filter()
    right = right_ce_filter()
    return Outcome(
        wrong=wrong.norm().item(),
        right=right.norm().item(),
        labels=("q2 answer 1, t1", "q2 answer 1, t2", "q2 answer 2, t1", "q2 answer 2, t2"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="dL/dlog pi on each of q2's tokens",
        formula=(
            "q2's answers both scored 1: A = 0, but they also carry a cross-entropy term "
            f"(coef {CE_COEF})\n"
            "loss = policy(all answers) + 0.5 * token-mean over q2's 4 tokens of (-log pi)\n"
            f"dL/dlog pi_t on q2 = -0.5 / 4 = {num(right[0, 0].item())} per token  ->  |grad| = "
            f"{num(right.norm().item())}\n"
            "filter 'A = 0 -> drop the rollout' first: q2 is gone, its gradient is 0"
        ),
    )


# ----------------------------------------------------------------------------- the registry

BUGS: tuple[SilentBug, ...] = (
    SilentBug(
        id="loss-zero",
        short="Loss 0, gradient not",
        title="The loss is 0, but the gradient is not",
        thread="huggingface/trl#3452",
        question="TRL logs loss = 0.0 at the first step (beta = 0, one iteration). Did the model "
        "learn anything from this group?",
        choices=(
            "No: loss 0 means gradient 0, nothing moves",
            "Yes: the loss value is 0 but its gradient is not",
            "Only if the rewards are binary",
        ),
        answer=1,
        quantity="the learning signal: the loss value people read (left) vs the gradient norm "
        "|dL/dlog pi| (right)",
        batch=(
            ("rewards", "8.2, 6.5, 9.1 (one prompt, 3 answers of 2 tokens)"),
            ("config", "TRL defaults: loss_type dapo, beta 0, ratio r = 1"),
        ),
        wrong_label="loss value (TRL's log)",
        right_label="roll-viz: autograd of policy_loss('trl')",
        explanation="Group-centred advantages sum to 0 and r = 1, so the loss value is 0; its "
        "gradient -A_i * w is not: watch reward and grad_norm, not the loss.",
        compute=_loss_zero,
    ),
    SilentBug(
        id="kl-zero-adv",
        short="KL where A = 0",
        title="The KL gradient survives in zero-advantage groups",
        thread="huggingface/trl#7068",
        question="Prompt q2's two answers both scored 1, so every advantage of q2 is 0. With "
        "beta = 0.1, do q2's tokens still get a gradient?",
        choices=(
            "No: A = 0 means no gradient, masking q2 changes nothing",
            "Yes: the beta * KL term still pulls q2's tokens toward the reference",
            "Only the entropy bonus acts",
        ),
        answer=1,
        quantity="gradient norm on q2's tokens",
        batch=(
            ("rewards", "q1: 1, 0; q2: 1, 1 (2 tokens each)"),
            ("log pi", "q2: (-1.0, -0.5), (-2.0, -0.3)"),
            ("ref", "q2: (-1.2, -0.5), (-1.5, -0.4)"),
            ("config", "TRL, beta 0.1 (k3 in the loss), token-mean"),
        ),
        wrong_label="-A * w only (A = 0)",
        right_label="roll-viz: autograd of policy_loss('trl', beta=0.1)",
        explanation="The KL term does not depend on the advantage: masking a zero-advantage "
        "group also removes its pull toward the reference (what TRL #7068 made opt-in).",
        compute=_kl_zero,
    ),
    SilentBug(
        id="luspo-quadratic",
        short="LUSPO L^2 / T",
        title="LUSPO's quadratic length weighting",
        thread="huggingface/trl#6654",
        question="LUSPO multiplies each sequence's loss by its length. How much more does a "
        "6-token answer weigh than a 2-token one?",
        choices=("3 times (linear in L)", "9 times (L^2)", "the same"),
        answer=0,
        quantity="weight of the 6-token answer / weight of the 2-token answer",
        batch=(("lengths", "2 and 6 tokens (T = 6)"),),
        wrong_label="old reduction: L^2 / T",
        right_label="roll-viz: agg_weights(seq-mean-token-sum)",
        explanation="The old reduction averaged L * x over the padded width T, so a sequence's "
        "token mean shrank to L/T of itself before the factor L: long answers weighed L^2 / T.",
        compute=_luspo,
    ),
    SilentBug(
        id="agg-names",
        short="DAPO vs GRPO names",
        title="DAPO and GRPO aggregation names swapped",
        thread="verl-project/verl#957",
        question="A short right answer (2 tokens) and a long wrong one (6 tokens). Under DAPO's "
        "aggregation, what share of the loss weight does the long answer carry?",
        choices=("0.5 (each answer counts once)", "0.75 (each token counts once)", "0.25"),
        answer=1,
        quantity="share of the loss weight on the 6-token answer under DAPO",
        batch=(("answers", "2 tokens A = +1; 6 tokens A = -1"),),
        wrong_label="seq-mean-token-mean (GRPO's, taken for DAPO's)",
        right_label="roll-viz: policy_loss('verl', token-mean) weights",
        explanation="DAPO is token-mean (every token equal), GRPO is seq-mean-token-mean (every "
        "answer equal); swapping the names swaps the length bias.",
        compute=_names,
    ),
    SilentBug(
        id="top-p-ratio",
        short="Top-p in the ratio",
        title="Top-p renormalisation in the importance ratio",
        thread="huggingface/trl#6789",
        question="Sampled with top-p 0.75 from probabilities 0.5, 0.3, 0.15, 0.05 (the 0.5 "
        "token). Same weights in the trainer. What is the importance ratio?",
        choices=("1", "0.8", "1.25"),
        answer=0,
        quantity="importance ratio pi_train / mu_rollout of an on-policy token",
        batch=(("token 1", "probs 0.5, 0.3, 0.15, 0.05"), ("token 2", "probs 0.9, 0.06, 0.04")),
        wrong_label="sampler's renormalised log-probs",
        right_label="roll-viz: importance_ratio on raw log-probs",
        explanation="A top-p sampler's processed log-prob is log(p / S), so the ratio silently "
        "carries S, the mass of the kept tokens, even when nothing changed.",
        compute=_top_p,
    ),
    SilentBug(
        id="cispo-cap",
        short="CISPO cap 0.2",
        title="TRL CISPO's default cap min(r, 0.2)",
        thread="huggingface/trl loss_type cispo (earlier notes, policy-update.md 1.3)",
        question="CISPO weighs each token by sg(min(r, cap)). On the first step (r = 1), "
        "A = +1, 2 tokens: what gradient coefficient should a token get?",
        choices=("-0.5 (the full policy gradient)", "-0.1 (capped at 0.2)", "0"),
        answer=0,
        quantity="gradient coefficient dL/dlog pi of an on-policy token",
        batch=(("answer", "2 tokens, A = +1, r = 1"), ("config", "TRL loss_type cispo")),
        wrong_label="defaults: epsilon_high = epsilon = 0.2",
        right_label="roll-viz: policy_loss('trl', cispo, epsilon_high=5)",
        explanation="With epsilon_high unset TRL uses epsilon = 0.2 as CISPO's absolute cap, so "
        "every token's gradient is cut to a fifth; ScaleRL's recipe sets 5.",
        compute=_cispo,
    ),
    SilentBug(
        id="ce-filter",
        short="CE rollouts filtered",
        title="A zero-advantage filter drops the cross-entropy rollouts",
        thread="PrimeIntellect-ai/prime-rl#3222",
        question="q2's answers have A = 0 but also carry a cross-entropy term. If rollouts with "
        "A = 0 are dropped before the loss, what happens to q2's gradient?",
        choices=(
            "Nothing: A = 0 rollouts carry no gradient anyway",
            "It is lost: the cross-entropy gradient went with them",
            "It doubles",
        ),
        answer=1,
        quantity="gradient norm on q2's tokens",
        batch=(
            ("rewards", "q1: 1, 0; q2: 1, 1 (2 tokens each)"),
            ("extra", "q2 carries a cross-entropy term, coef 0.5"),
        ),
        wrong_label="zero-advantage rollouts filtered first",
        right_label="policy_loss('trl') + 0.5 * aggregate(-log pi) (autograd)",
        explanation="The advantage is only one of the loss's terms: filtering on A = 0 also "
        "deletes every other term those rollouts carry.",
        compute=_ce_filter,
    ),
)
