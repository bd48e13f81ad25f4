"""The field's silent bugs as one-click lessons: the wrong number and the right one, side by side.

Fourteen bugs that practitioners hit in verl, TRL, ROLL, OpenRLHF, slime, NeMo RL, AReaL and
prime-rl (field-2026.md section 2.3), each on a hand-sized batch. Every record carries the thread
that reported it, a question to predict first (its distractors are the known wrong answers), the
batch, and one ``compute`` that returns an ``Outcome``:

- the WRONG number comes from the buggy formula, written out plainly the way the thread
  describes it (a ``wrong_*`` function in this module);
- the RIGHT number comes from roll-viz's own pipeline (``run``, ``policy_loss``,
  ``importance_ratio``, ``agg_weights``, ``aggregate``) wherever roll-viz implements that
  quantity, so each lesson is also a regression test that roll-viz computes the right one.
  Where roll-viz has no such stage (top-p renormalisation, a cross-entropy term beside the
  policy loss) the ``right_*`` function says so in its docstring and computes the missing piece
  from first principles on top of the pipeline's numbers.

Plain records and pure functions: no Streamlit, no Plotly, no model; every number is recomputed
on each call (all of them together take milliseconds).

Size: fourteen lessons, each a batch, a buggy formula, the pipeline call and its texts; split
per bug they would be fourteen tiny modules read together anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.core.pipeline import agg_weights, aggregate, importance_ratio, policy_loss, run
from roll_viz.core.records import Batch

F64 = torch.float64


@dataclass(frozen=True)
class Outcome:
    """Both numbers of one lesson, the per-item values the figure draws and the formula.

    Attributes:
        wrong: the headline number the buggy formula gives (may be NaN: "it raises").
        right: the headline number roll-viz computes.
        labels: one label per item of the figure (samples, tokens, sequences).
        wrong_series: the buggy value per item.
        right_series: the right value per item.
        formula: the formulas with this batch's numbers, plain text (several lines).
        series_title: what the per-item values are ("" = the lesson's headline quantity).
    """

    wrong: float
    right: float
    labels: tuple[str, ...]
    wrong_series: tuple[float, ...]
    right_series: tuple[float, ...]
    formula: str
    series_title: str = ""


@dataclass(frozen=True)
class SilentBug:
    """One lesson of the gallery.

    Attributes:
        id: short stable id (the page's ``bug=`` URL value).
        title: one line.
        short: a few words for the one-click choice.
        thread: where it was reported, "owner/repo#number" as in field-2026.md.
        question: what the class predicts before the reveal.
        choices: the answers offered; the distractors are the known wrong answers.
        answer: index of the right choice.
        quantity: what the two headline numbers measure.
        batch: the tiny batch as (name, value) display rows.
        wrong_label: how the wrong side was computed (the buggy formula's name).
        right_label: how the right side was computed (the roll-viz call).
        explanation: one line: why the wrong number is wrong.
        compute: returns the Outcome (recomputed on every call).
    """

    id: str
    short: str
    title: str
    thread: str
    question: str
    choices: tuple[str, ...]
    answer: int
    quantity: str
    batch: tuple[tuple[str, str], ...]
    wrong_label: str
    right_label: str
    explanation: str
    compute: Callable[[], Outcome]


# ------------------------------------------------------------------------------------ helpers


def make_batch(
    scores: Sequence[float],
    lengths: Sequence[int],
    groups: Sequence[str],
    logprobs: Sequence[Sequence[float]] | None = None,
    ref_logprobs: Sequence[Sequence[float]] | None = None,
) -> Batch:
    """A pipeline Batch from plain lists: one row per answer, right-padded to the longest.

    Args:
        scores: (B,) response-level rewards.
        lengths: (B,) response lengths in tokens.
        groups: (B,) prompt label of each answer (rows of one label form a group).
        logprobs: optional (B, T) policy log-probs (T = the longest length).
        ref_logprobs: optional (B, T) reference log-probs.

    Returns:
        A Batch (float64).
    """
    width = max(lengths)
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths], dtype=F64)
    labels = tuple(dict.fromkeys(groups))
    ids = torch.tensor([labels.index(g) for g in groups], dtype=torch.long)
    return Batch(
        scores=torch.tensor(list(scores), dtype=F64),
        response_mask=mask,
        group_ids=ids,
        group_labels=labels,
        logprobs=None if logprobs is None else torch.tensor(logprobs, dtype=F64),
        ref_logprobs=None if ref_logprobs is None else torch.tensor(ref_logprobs, dtype=F64),
    )


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _std(xs: Sequence[float], ddof: int = 1) -> float:
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def _n(x: float, digits: int = 4) -> str:
    """A number for the plain-text formulas: 4 significant digits, NaN spelled out."""
    if math.isnan(x):
        return "NaN"
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}" if abs(x) >= 1 else f"{x:.{digits}f}".rstrip("0").rstrip(".")


def _series(values: Tensor | Sequence[float]) -> tuple[float, ...]:
    if isinstance(values, Tensor):
        values = values.detach().flatten().tolist()
    return tuple(float(v) for v in values)


def _grad(
    framework: str,
    config: dict,
    logprobs: Sequence[Sequence[float]],
    advantages: Tensor,
    mask: Tensor,
    ref_logprobs: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(loss, d loss / d logp) of roll-viz's ``policy_loss`` on the first step (ratio 1)."""
    lp = torch.tensor(logprobs, dtype=F64, requires_grad=True)
    result = policy_loss(
        framework,
        config,
        logprobs=lp,
        old_logprobs=lp.detach(),
        advantages=advantages,
        response_mask=mask,
        ref_logprobs=ref_logprobs,
    )
    (grad,) = torch.autograd.grad(result.total, lp)
    return result.total.detach(), grad


# ------------------------------------------------------------- 1. loss 0 but gradient not 0

LOSS_ZERO_SCORES = (8.2, 6.5, 9.1)
LOSS_ZERO_LOGPROBS = ((-1.2, -0.7), (-2.0, -0.4), (-0.9, -1.5))


def wrong_loss_zero(scores: Sequence[float] = LOSS_ZERO_SCORES, length: int = 2) -> float:
    """The loss value read as the learning signal: -mean over tokens of A * r with r = 1.

    TRL's default (``dapo``, ``num_iterations=1``, ``beta=0``) logs this number (4 decimals,
    as the log shows it); with group-centred advantages and equal lengths it is 0, and "0" is
    read as "no gradient".
    """
    m, s = _mean(scores), _std(scores)
    advantages = [(x - m) / (s + 1e-4) for x in scores]
    loss = -sum(a * 1.0 * length for a in advantages) / (length * len(scores))
    return round(loss, 4) + 0.0


def right_loss_zero() -> tuple[float, float, Tensor, Tensor]:
    """(loss, gradient norm, (B, T) gradient, (B,) advantages) from roll-viz's TRL dialect."""
    batch = make_batch(LOSS_ZERO_SCORES, [2, 2, 2], ["q", "q", "q"])
    trace = run(batch, "trl", {})
    loss, grad = _grad("trl", {}, LOSS_ZERO_LOGPROBS, trace.advantages, batch.response_mask)
    return loss.item(), grad.norm().item(), grad, trace.advantages[:, 0]


def _loss_zero() -> Outcome:
    wrong = wrong_loss_zero()
    loss, norm, grad, advantages = right_loss_zero()
    return Outcome(
        wrong=wrong,
        right=norm,
        labels=("answer 1", "answer 2", "answer 3"),
        wrong_series=(0.0, 0.0, 0.0),
        right_series=_series(grad.sum(-1)),
        series_title="dL/dlog pi summed over each answer's tokens",
        formula=(
            "A = (r - mean) / (std + 1e-4) = "
            + ", ".join(_n(a) for a in advantages.tolist())
            + "   (rewards 8.2, 6.5, 9.1)\n"
            f"loss = -(1/6) * sum_i 2 * A_i * r, r = 1  ->  {_n(loss)}  (logged: {wrong:.4f})\n"
            "dL/dlog pi_t = -A_i / 6  ->  per answer (2 tokens): "
            + ", ".join(_n(v) for v in grad.sum(-1).tolist())
            + f"\n|grad| = sqrt(2 * sum A_i^2) / 6 = {_n(norm)}  (not 0: the model learns)"
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
    _, grad = _grad(
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
        wrong_series=_series(wrong),
        right_series=_series(q2),
        series_title="dL/dlog pi on each of q2's tokens",
        formula=(
            "group q2 rewards 1, 1  ->  A = 0 on all its tokens (advantages of q2: "
            + ", ".join(_n(a) for a in advantages[2:, 0].tolist())
            + ")\n"
            f"loss = token-mean( -A * r + beta * k3 ),  beta = {KL_ZERO_BETA},  8 tokens\n"
            "dk3/dlog pi = 1 - exp(ref - log pi)  ->  dL/dlog pi_t = beta/8 * (1 - e^(ref-logp))\n"
            "q2 tokens: "
            + ", ".join(_n(v) for v in q2.tolist())
            + f"  ->  |grad| = {_n(q2.norm().item())}"
        ),
    )


# ----------------------------------------------------- 3. leave-one-out + std: -2075

LOO_SCORES = (0.0,) + (0.95,) * 7


def _f32(x: float) -> float:
    """``x`` rounded to float32 (one IEEE operation's result, as a float32 kernel stores it)."""
    return float(torch.tensor(x, dtype=torch.float32))


def _one_pass_var(xs: Sequence[float]) -> float:
    """(E[x^2] - E[x]^2) * k / (k - 1) in float32, summed left to right, one rounding per step.

    The order is fixed on purpose: a BLAS product or a vectorised sum rounds in an order that
    depends on the CPU (AVX-512 against AVX2 gave -2075 on one machine and -0.95 on another),
    and the lesson is the cancellation, not the CPU.
    """
    k = len(xs)
    total, squares = 0.0, 0.0
    for x in xs:
        total = _f32(total + x)
        squares = _f32(squares + _f32(x * x))
    mean, mean_sq = _f32(total / k), _f32(squares / k)
    return _f32(_f32(_f32(mean_sq - _f32(mean * mean)) * k) / (k - 1))


def wrong_loo_std(scores: Sequence[float] = LOO_SCORES, eps: float = 1e-6) -> list[float]:
    """NeMo RL before PR #4158: leave-one-out mean and std, the std one-pass in float32.

    ``var = (E[x^2] - E[x]^2) * k / (k - 1)`` over the k = n - 1 other answers, in float32
    (summed in a fixed order: ``_one_pass_var``); ``A_i = (r_i - mean_-i) / (std_-i + eps)``
    wherever ``std_-i > 0``.
    """
    r = [_f32(x) for x in scores]
    out = []
    for i, ri in enumerate(r):
        others = r[:i] + r[i + 1 :]
        total = 0.0
        for x in others:
            total = _f32(total + x)
        mean = _f32(total / len(others))
        std = _f32(math.sqrt(max(_one_pass_var(others), 0.0)))
        centred = _f32(ri - mean)
        out.append(_f32(centred / _f32(std + eps)) if std > 0 else centred)
    return out


def right_loo_std(scores: Sequence[float] = LOO_SCORES) -> Tensor:
    """(B,) RLOO advantages of roll-viz's verl dialect.

    Two-pass float64: the other seven answers' std is exactly 0, so the ``std > 0`` guard
    leaves ``r - baseline`` undivided, as NeMo RL does after its fix.
    """
    batch = make_batch(scores, [1] * len(scores), ["q"] * len(scores))
    return run(batch, "verl", {"adv_estimator": "rloo"}).advantages[:, 0]


def _loo_std() -> Outcome:
    wrong = wrong_loo_std()
    right = right_loo_std()
    one_pass = _one_pass_var([_f32(0.95)] * 7)
    return Outcome(
        wrong=wrong[0],
        right=right[0].item(),
        labels=tuple(f"answer {i + 1}" for i in range(8)),
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="advantage of each answer",
        formula=(
            "answer 1 scored 0; the other seven scored 0.95 (their true std is 0)\n"
            f"float32 one-pass: (E[x^2] - E[x]^2) * 7/6 = {_n(one_pass)}  ->  std = "
            f"{_n(math.sqrt(one_pass))}\n"
            f"A_1 = (0 - 0.95) / ({_n(math.sqrt(one_pass))} + 1e-6) = {_n(wrong[0])}\n"
            f"two-pass: std = 0 exactly  ->  guard std > 0 skips it  ->  A_1 = 0 - 0.95 = "
            f"{_n(right[0].item())}"
        ),
    )


# ------------------------------------------------------- 4. std of already-centred rewards

CENTRED_SCORES = (0.7, 0.2, 0.2, 0.2, 0.9, 0.9, 0.1, 0.3)
CENTRED_GROUPS = ("q1",) * 4 + ("q2",) * 4


def wrong_centred_std(scores: Sequence[float] = CENTRED_SCORES, n: int = 4) -> float:
    """The number the thread read as "rewards ~1e-9": slime's normalised rewards, averaged.

    slime (float32): ``r -= group mean``; ``r /= std(r) + 1e-6`` (the std of the already
    centred rewards); the logged batch mean of the result is round-off around 0.
    """
    r = torch.tensor(list(scores), dtype=torch.float32).reshape(-1, n)
    centred = r - r.mean(dim=-1, keepdim=True)
    normalised = centred / (centred.std(dim=-1, keepdim=True) + 1e-6)
    return float(normalised.mean())


def slime_divisors(scores: Sequence[float] = CENTRED_SCORES, n: int = 4) -> list[float]:
    """The divisor slime uses per group, float32: std of the CENTRED rewards + 1e-6."""
    r = torch.tensor(list(scores), dtype=torch.float32).reshape(-1, n)
    centred = r - r.mean(dim=-1, keepdim=True)
    return [float(v) for v in centred.std(dim=-1) + 1e-6]


def right_centred_std() -> tuple[Tensor, Tensor]:
    """((B,) group-normalised rewards, (B,) divisors) of roll-viz's ROLL grpo.

    The divisor is the std of the raw rewards + 1e-6.
    """
    batch = make_batch(CENTRED_SCORES, [1] * 8, CENTRED_GROUPS)
    trace = run(batch, "roll", {"adv_estimator": "grpo"})
    return trace.rewards, trace.scale


def _centred_std() -> Outcome:
    wrong = wrong_centred_std()
    rewards, scale = right_centred_std()
    group1 = rewards[:4]
    raw, centred = CENTRED_SCORES[:4], [x - _mean(CENTRED_SCORES[:4]) for x in CENTRED_SCORES[:4]]
    return Outcome(
        wrong=wrong,
        right=group1.std().item(),
        labels=("q1", "q2"),
        wrong_series=_series(slime_divisors()),
        right_series=_series(scale[[0, 4]]),
        series_title="the divisor: std of the centred rewards (slime) vs of the raw ones + 1e-6",
        formula=(
            f"q1 rewards 0.7, 0.2, 0.2, 0.2: std(raw) = {_n(_std(raw))}, std(centred) = "
            f"{_n(_std(centred))}  (std ignores a shift)\n"
            f"logged mean of the normalised rewards (float32) = {_n(wrong)}  (0 by construction)\n"
            f"their size: std of q1's normalised rewards = 0.25 / (0.25 + 1e-6) = "
            f"{_n(group1.std().item(), 7)}"
        ),
    )


# ------------------------------------------------ 5. uneven groups normalised over the batch

UNEVEN_SCORES = (6.0, 6.0, 7.0, 7.0, 5.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0)
UNEVEN_GROUPS = ("A",) * 4 + ("B",) * 3 + ("C",) * 4


def wrong_uneven(scores: Sequence[float] = UNEVEN_SCORES) -> list[float]:
    """The slime fallback when groups differ in size: ``rewards.view(1, -1)``, one mean."""
    m = _mean(scores)
    return [x - m for x in scores]


def right_uneven() -> Tensor:
    """(B,) rewards minus their own group's mean: roll-viz's ROLL ``norm_mean_type: group``.

    Groups come from explicit prompt ids, so any group sizes work.
    """
    batch = make_batch(UNEVEN_SCORES, [1] * 11, UNEVEN_GROUPS)
    return run(batch, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group"}).rewards


def _uneven() -> Outcome:
    wrong = wrong_uneven()
    right = right_uneven()
    return Outcome(
        wrong=wrong[4],
        right=right[4].item(),
        labels=tuple(f"{g}{i + 1}" for i, g in enumerate(UNEVEN_GROUPS)),
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="advantage of each answer (mean-centred)",
        formula=(
            "group sizes 4, 3, 4 (not n * G): the reshape fails, slime falls back to one row\n"
            f"batch mean = 67 / 11 = {_n(67 / 11, 6)}  ->  B's answers (all 5.0): 5 - 6.0909 = "
            f"{_n(wrong[4], 6)}\n"
            f"per group: mean(B) = 5.0  ->  5 - 5 = {_n(right[4].item())}  (no signal, as it "
            "should be)"
        ),
    )


# -------------------------------------------------------- 6. one-token unbiased variance

ONE_TOKEN_SCORE = 0.7


def wrong_one_token(x: float = ONE_TOKEN_SCORE, eps: float = 1e-8) -> float:
    """ROLL's masked_whiten before PR #476: unbiased variance of one token.

    ``var = sum((x - mean)^2) / n * n / (n - 1)`` with n = 1 divides by zero: ROLL raises, and
    the eps in ``rsqrt(var + eps)`` comes too late to help. NaN stands for "no number".
    """
    n = 1
    mean = x
    biased = (x - mean) ** 2 / n
    try:
        var = biased * n / (n - 1)
    except ZeroDivisionError:
        return math.nan
    return (x - mean) / math.sqrt(var + eps)


def right_one_token() -> float:
    """The advantage of roll-viz's ROLL dialect (reinforce, whiten_advantages on, one token)."""
    batch = make_batch([ONE_TOKEN_SCORE], [1], ["q"])
    trace = run(batch, "roll", {"adv_estimator": "reinforce", "whiten_advantages": True})
    return trace.advantages[0, 0].item()


def _one_token() -> Outcome:
    wrong = wrong_one_token()
    right = right_one_token()
    return Outcome(
        wrong=wrong,
        right=right,
        labels=("the one token",),
        wrong_series=(wrong,),
        right_series=(right,),
        series_title="the token's advantage after whitening",
        formula=(
            "one valid token, advantage 0.7\n"
            "var = sum((x - mean)^2) / n * n / (n - 1) = 0 * 1/0  ->  NaN (ROLL raises)\n"
            "(x - mean) * rsqrt(var + 1e-8): the eps comes too late\n"
            f"ROLL after PR #476: whitening skipped with <= 1 valid token  ->  A = {_n(right)}"
        ),
    )


# ---------------------------------------------------- 7. scale_rewards="batch" with group std

TRL_BATCH_SCORES = (8.2, 6.5, 9.1, 5.0, 5.1, 4.9)
TRL_BATCH_GROUPS = ("quantum",) * 3 + ("flat",) * 3


def wrong_trl_batch(scores: Sequence[float] = TRL_BATCH_SCORES, n: int = 3) -> list[float]:
    """TRL before the fix of #3991: ``scale_rewards="batch"`` divided by the GROUP std."""
    out = []
    for start in range(0, len(scores), n):
        group = scores[start : start + n]
        m, s = _mean(group), _std(group)
        out += [(x - m) / (s + 1e-4) for x in group]
    return out


def right_trl_batch() -> Tensor:
    """(B,) advantages of roll-viz's TRL dialect with ``scale_rewards="batch"``."""
    batch = make_batch(TRL_BATCH_SCORES, [1] * 6, TRL_BATCH_GROUPS)
    return run(batch, "trl", {"scale_rewards": "batch"}).advantages[:, 0]


def _trl_batch() -> Outcome:
    wrong = wrong_trl_batch()
    right = right_trl_batch()
    return Outcome(
        wrong=wrong[4],
        right=right[4].item(),
        labels=tuple(f"{g} {x:g}" for g, x in zip(TRL_BATCH_GROUPS, TRL_BATCH_SCORES, strict=True)),
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="advantage of each answer",
        formula=(
            "answer 5.1 of prompt 'flat' (rewards 5.0, 5.1, 4.9; group mean 5.0)\n"
            f"group std 0.1: (5.1 - 5.0) / (0.1 + 1e-4) = {_n(wrong[4])}   (the bug)\n"
            f"batch std of all six = {_n(_std(TRL_BATCH_SCORES))}: (5.1 - 5.0) / "
            f"({_n(_std(TRL_BATCH_SCORES))} + 1e-4) = {_n(right[4].item())}"
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
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="weight of each sequence in the loss",
        formula=(
            "weight of a sequence in the loss, lengths 2 and 6 (T = 6, B = 2)\n"
            "old: (x * L).mean() over all B x T padded slots, x = 1 on a token: L * (L / T) / B\n"
            f"   = 4/12, 36/12 = {_n(wrong[0])}, {_n(wrong[1])}  ->  ratio "
            f"{_n(ratio_wrong)} (quadratic)\n"
            f"LUSPO: token-mean * L / B = L / B = {_n(right[0].item())}, {_n(right[1].item())}  "
            f"->  ratio {_n(ratio_right)} (linear)"
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
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="share of the loss weight per answer",
        formula=(
            "DAPO = token-mean: every token weighs 1 / (2 + 6) = 1/8  ->  the 6-token answer "
            f"carries 6/8 = {_n(right[1].item())}\n"
            "GRPO = seq-mean-token-mean: every answer weighs 1/2, its tokens 1/(2 L)  ->  "
            f"{_n(wrong[1])}\n"
            "loss at r = 1: token-mean (2 * -1 + 6 * +1) / 8 = 0.5; seq-mean-token-mean "
            "(-1 + 1) / 2 = 0"
        ),
    )


# -------------------------------------------------- 10. phantom advantages of shaped rewards

PHANTOM_OUTCOMES = (0.0, 0.0, 0.0, 0.0)
PHANTOM_LENGTHS = (10, 12, 8, 11)
PHANTOM_SHAPING = 0.001


def phantom_scores() -> list[float]:
    """All four answers failed; the shaped reward adds -0.001 per token."""
    return [o - PHANTOM_SHAPING * n for o, n in zip(PHANTOM_OUTCOMES, PHANTOM_LENGTHS, strict=True)]


def wrong_phantom(scores: Sequence[float] | None = None, eps: float = 1e-6) -> list[float]:
    """Plain GRPO on the shaped reward: ``(r - mean) / (std + eps)``.

    The group's std is the shaping noise (> 0, so a zero-std filter keeps the group).
    """
    scores = phantom_scores() if scores is None else scores
    m, s = _mean(scores), _std(scores)
    return [(x - m) / (s + eps) for x in scores]


def right_phantom() -> Tensor:
    """(B,) ROLL grpo advantages of the OUTCOME only (verl-recipe #125's binary-outcome gate).

    An all-fail group has no outcome spread, so roll-viz gives exactly 0.
    """
    batch = make_batch(PHANTOM_OUTCOMES, [1] * 4, ["q"] * 4)
    return run(batch, "roll", {"adv_estimator": "grpo"}).advantages[:, 0]


def _phantom() -> Outcome:
    wrong = wrong_phantom()
    right = right_phantom()
    scores = phantom_scores()
    return Outcome(
        wrong=wrong[2],
        right=right[2].item(),
        labels=tuple(f"{n} tokens" for n in PHANTOM_LENGTHS),
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="advantage of each answer",
        formula=(
            "all four answers wrong (outcome 0); shaped reward = outcome - 0.001 * length = "
            + ", ".join(_n(s) for s in scores)
            + f"\nstd = {_n(_std(scores))} > 0, so a std filter keeps the group\n"
            f"shortest answer: ({_n(scores[2])} - ({_n(_mean(scores))})) / ({_n(_std(scores))} + "
            f"1e-6) = {_n(wrong[2])}   (a full-size 'phantom' advantage)\n"
            f"outcome gate: outcomes 0, 0, 0, 0 have no spread  ->  A = {_n(right[2].item())}"
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
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="importance ratio of each token",
        formula=(
            f"token 1: probs 0.5, 0.3, 0.15, 0.05; top-p {TOP_P} keeps 0.5 + 0.3, S = {_n(s)}\n"
            f"processed log-prob = log(0.5 / {_n(s)}) = {_n(math.log(0.5 / s))}; trainer's = "
            f"log 0.5 = {_n(math.log(0.5))}\n"
            f"ratio = exp(log 0.5 - log(0.5 / S)) = S = {_n(wrong[0])}  (on-policy, yet not 1)\n"
            f"raw log-probs on both sides: ratio = {_n(right[0].item())}"
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
        right_series=_series(right),
        series_title="gradient coefficient of each token",
        formula=(
            "one answer, 2 tokens, A = +1, first step (r = 1), token-mean (w = 1/2)\n"
            f"defaults: epsilon_high = epsilon = 0.2: g = -min(1, 0.2) * 1 / 2 = {_n(wrong)}\n"
            f"epsilon_high = 5: g = -min(1, 5) * 1 / 2 = {_n(right[0].item())}  (plain policy "
            "gradient on-policy)"
        ),
    )


# ------------------------------------------ 13. ROLL method: mean grouped per trajectory

TRAJ_STEPS = 3
TRAJ_RETURNS = (1.0,) * TRAJ_STEPS + (0.0,) * TRAJ_STEPS  # terminal reward 1 / 0, gamma = 1
TRAJ_IDS = ("traj 1",) * TRAJ_STEPS + ("traj 2",) * TRAJ_STEPS


def wrong_per_trajectory(
    returns: Sequence[float] = TRAJ_RETURNS, groups: Sequence[str] = TRAJ_IDS
) -> list[float]:
    """ROLL agentic ``grouping: traj_group_id, method: mean`` with ``group_size: 1``.

    ``method: mean`` is (group mean, no std); each group holds the steps of ONE trajectory, and
    with a terminal reward propagated by gamma = 1 every step of it has the same return R:
    ``R - mean = R - R = 0``.
    """
    out = []
    for value, group in zip(returns, groups, strict=True):
        members = [r for r, g in zip(returns, groups, strict=True) if g == group]
        out.append(value - _mean(members))
    return out


def right_per_trajectory() -> Tensor:
    """(B,) step rewards minus the mean over both trajectories of the prompt.

    roll-viz's ROLL ``norm_mean_type: group`` with the prompt as the group (what a group of
    several trajectories per prompt gives).
    """
    batch = make_batch(TRAJ_RETURNS, [1] * len(TRAJ_RETURNS), ["q"] * len(TRAJ_RETURNS))
    return run(batch, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group"}).rewards


def _per_trajectory() -> Outcome:
    wrong = wrong_per_trajectory()
    right = right_per_trajectory()
    return Outcome(
        wrong=wrong[0],
        right=right[0].item(),
        labels=tuple(f"{g}, step {i % TRAJ_STEPS + 1}" for i, g in enumerate(TRAJ_IDS)),
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="advantage of each step",
        formula=(
            "two trajectories of one prompt, 3 steps each; terminal reward 1 and 0, gamma = 1  "
            "->  step returns 1, 1, 1 and 0, 0, 0\n"
            f"grouped per trajectory (group_size 1): 1 - mean(1, 1, 1) = {_n(wrong[0])}, "
            f"0 - mean(0, 0, 0) = {_n(wrong[3])}  (every advantage 0)\n"
            f"grouped per prompt: mean 0.5  ->  1 - 0.5 = {_n(right[0].item())}, 0 - 0.5 = "
            f"{_n(right[3].item())}"
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
        wrong_series=_series(wrong),
        right_series=_series(right),
        series_title="dL/dlog pi on each of q2's tokens",
        formula=(
            "q2's answers both scored 1: A = 0, but they also carry a cross-entropy term "
            f"(coef {CE_COEF})\n"
            "loss = policy(all answers) + 0.5 * token-mean over q2's 4 tokens of (-log pi)\n"
            f"dL/dlog pi_t on q2 = -0.5 / 4 = {_n(right[0, 0].item())} per token  ->  |grad| = "
            f"{_n(right.norm().item())}\n"
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
        id="loo-std",
        short="LOO + std: -2075",
        title="Leave-one-out + std turns a 0 reward into -2075",
        thread="NVIDIA-NeMo/RL#4158",
        question="Eight answers: one scored 0, seven scored 0.95. With a leave-one-out baseline "
        "and std normalisation, what is the first answer's advantage?",
        # the wrong options are the misconceptions (a z-score over the group; the bug's number),
        # none near -0.95: "about -1" was one and read as right
        choices=("about -2.5 (a z-score over the group)", "-0.95", "about -2075"),
        answer=1,
        quantity="advantage of the answer that scored 0",
        batch=(("rewards", "0, 0.95 x 7 (one prompt)"),),
        wrong_label="float32 sqrt(E[x^2] - E[x]^2), divided",
        right_label="roll-viz: run('verl', rloo), exact std 0, not divided",
        explanation="The other seven are identical, so their std is 0; a float32 one-pass "
        "variance leaves a 2e-7 residue, and dividing by its square root multiplies by ~2000.",
        compute=_loo_std,
    ),
    SilentBug(
        id="centred-std",
        short="std of centred rewards",
        title="The std of already-centred rewards",
        thread="THUDM/slime#233",
        question="slime subtracts the group mean first and then divides by the std of the "
        "centred rewards; the logged rewards read ~1e-9. Is that std too small?",
        choices=(
            "Yes: centring shrinks the std, so the rewards end up ~1e-9",
            "No: a shift leaves the std unchanged; ~1e-9 is the mean, 0 by construction",
            "Yes: it should be the batch std",
        ),
        answer=1,
        quantity="size of the normalised rewards: the logged mean (left) vs their std (right)",
        batch=(("rewards", "q1: 0.7, 0.2, 0.2, 0.2; q2: 0.9, 0.9, 0.1, 0.3"),),
        wrong_label="logged mean of the normalised rewards",
        right_label="roll-viz: run('roll', grpo), std of q1's rewards",
        explanation="std(r - mean) = std(r): the fix the thread proposed computes the same "
        "number; the tiny value is the batch mean of normalised rewards, which is 0 by design.",
        compute=_centred_std,
    ),
    SilentBug(
        id="uneven-groups",
        short="Uneven groups",
        title="Uneven groups normalised over the batch",
        thread="THUDM/slime#1414, areal-project/AReaL#1673",
        question="Groups of 4, 3 and 4 answers; group B's three answers all scored 5.0. What is "
        "their advantage after mean-centring?",
        choices=("0", "about -1.09", "undefined"),
        answer=0,
        quantity="advantage of each of group B's answers",
        batch=(
            ("rewards", "A: 6, 6, 7, 7; B: 5, 5, 5; C: 6, 6, 7, 7"),
            ("config", "mean-centring per group (no std)"),
        ),
        wrong_label="one batch-wide mean (view(1, -1))",
        right_label="roll-viz: run('roll', norm_mean_type=group)",
        explanation="When the rewards cannot be reshaped into n x G, slime's fallback treats the "
        "whole batch as one group: B is compared with other prompts' answers (AReaL #1673: "
        "remainder items become a group of one and are divided by eps).",
        compute=_uneven,
    ),
    SilentBug(
        id="one-token-var",
        short="One-token variance",
        title="Unbiased variance of a single token",
        thread="alibaba/ROLL#475",
        question="A batch with one valid token (advantage 0.7) goes through ROLL's advantage "
        "whitening, rsqrt(var + 1e-8). What comes out?",
        choices=(
            "0.7: with one token there is nothing to whiten",
            "0: (x - mean) is 0",
            "1e8 * 0: the eps saves it",
        ),
        answer=0,
        quantity="the token's advantage after whitening",
        batch=(("batch", "one answer, one token, score 0.7"), ("config", "ROLL whiten_advantages")),
        wrong_label="unbiased var: 0 * n / (n - 1), n = 1",
        right_label="roll-viz: run('roll', whiten_advantages) (skipped, PR #476)",
        explanation="Bessel's n / (n - 1) divides by zero before the eps is added, so the eps "
        "cannot help; ROLL now skips whitening with at most one valid token.",
        compute=_one_token,
    ),
    SilentBug(
        id="trl-batch-std",
        short='scale_rewards="batch"',
        title='scale_rewards="batch" computed the group std',
        thread="huggingface/trl#3991",
        question="Prompt 'flat' scored 5.0, 5.1, 4.9; 'quantum' 8.2, 6.5, 9.1. With "
        'scale_rewards="batch", what is the advantage of the 5.1 answer?',
        choices=("about 1.0", "about 0.055", "0.1"),
        answer=1,
        quantity="advantage of the 5.1 answer",
        batch=(("rewards", "quantum: 8.2, 6.5, 9.1; flat: 5.0, 5.1, 4.9"),),
        wrong_label="group std in the batch branch",
        right_label="roll-viz: run('trl', scale_rewards=batch)",
        explanation="The batch branch divided by the group std, so a flat prompt's 0.1 "
        "difference still became a full-size advantage (exactly what 'batch' should prevent).",
        compute=_trl_batch,
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
        id="phantom-adv",
        short="Phantom advantages",
        title="Phantom advantages under a shaped reward",
        thread="verl-project/verl-recipe#125",
        question="All four answers are wrong; a small length term (-0.001 per token) is added. "
        "What GRPO advantage should the shortest wrong answer get?",
        choices=(
            "0: nobody solved it, there is nothing to learn",
            "about +1.3: it is the 'best' of the group",
            "a zero-std filter drops the group anyway",
        ),
        answer=0,
        quantity="advantage of the shortest (8-token) wrong answer",
        batch=(("outcomes", "0, 0, 0, 0"), ("lengths", "10, 12, 8, 11 tokens")),
        wrong_label="GRPO on outcome + shaping",
        right_label="roll-viz: run('roll', grpo) on the outcome (gate)",
        explanation="Dividing by the group std blows the shaping noise up to full-size "
        "advantages; the std is > 0, so a std filter never fires.",
        compute=_phantom,
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
        id="per-trajectory-mean",
        short="Mean per trajectory",
        title="ROLL method: mean grouped per trajectory",
        thread="alibaba/ROLL#397",
        question="Two agentic trajectories of one prompt, 3 steps each, terminal reward 1 and 0 "
        "(gamma = 1). Normalised with grouping: traj_group_id, method: mean and group_size 1: "
        "what advantage does a step of the successful trajectory get?",
        choices=("+0.5", "0", "+1"),
        answer=0,
        quantity="advantage of a step of the successful trajectory",
        batch=(
            ("step returns", "traj 1: 1, 1, 1; traj 2: 0, 0, 0"),
            ("config", "reward_normalization grouping traj_group_id, method mean, group_size 1"),
        ),
        wrong_label="each trajectory its own group",
        right_label="roll-viz: run('roll', norm_mean_type=group) over the prompt",
        explanation="A group holding one trajectory's steps has mean R, and every step's return "
        "is R, so r - mean = 0 everywhere: the whole batch trains on nothing.",
        compute=_per_trajectory,
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

BY_ID: dict[str, SilentBug] = {bug.id: bug for bug in BUGS}
IDS: tuple[str, ...] = tuple(BY_ID)


def bug(bug_id: str) -> SilentBug:
    """The lesson with this id.

    Raises:
        KeyError: no lesson has that id.
    """
    return BY_ID[bug_id]
