"""Silent bugs of off-policy masks and the KL term: three of field-2026-b.md section 2.

OPSM decided per token (slime PR #1917), "a no-op at ratio 1" that changes the KL gradient (TRL
PR #6503), and a disabled KL term that still poisons the loss with 0 * inf (slime PR #2258).
Each: its batch, the ``wrong_*`` formula written plainly the way its thread describes it, the
``right_*`` call into roll-viz's pipeline, and its record.
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
    make_batch,
    num,
    series,
    step_grad,
)
from roll_viz.core.pipeline import rollout_correction as rc
from roll_viz.core.pipeline import run
from roll_viz.core.pipeline.dialects import sequence_rules

# ---------------------------------------------- 1. OPSM per token leaks a rejected sequence

#: slime PR #1917's triggering example at ``compute_opsm_mask``'s boundary
OPSM_LOGPROBS = (0.0, 0.0, 0.0)
OPSM_OLD = (1.0, 1.0, 1.0)  # the sampler side (slime's old_log_probs)
OPSM_ADV = (-0.5, 0.25, -0.25)
OPSM_DELTA = 0.1
OPSM_EPS = 0.2


def _ppo_token(logp: float, old: float, adv: float, eps: float = OPSM_EPS) -> float:
    r = math.exp(logp - old)
    return max(-adv * r, -adv * min(max(r, 1.0 - eps), 1.0 + eps))


def wrong_opsm() -> tuple[float, list[float]]:
    """The slime code before the fix: ``opsm_mask = 1 - (A_t < 0) * (seq_kl > delta)`` per token.

    Returns:
        (token-mean loss, the per-token masked PPO losses).
    """
    n = len(OPSM_ADV)
    seq_kl = sum(o - lp for o, lp in zip(OPSM_OLD, OPSM_LOGPROBS, strict=True)) / n
    losses = []
    for lp, old, a in zip(OPSM_LOGPROBS, OPSM_OLD, OPSM_ADV, strict=True):
        keep = 0.0 if (a < 0 and seq_kl > OPSM_DELTA) else 1.0
        losses.append(keep * _ppo_token(lp, old, a))
    return sum(losses) / n, losses


def right_opsm() -> tuple[rc.LabLoss, Tensor]:
    """roll-viz: OPSM decided per sequence (``sequence_masks.opsm``), in a PPO token-mean loss."""
    logp = torch.tensor([OPSM_LOGPROBS], dtype=F64)
    old = torch.tensor([OPSM_OLD], dtype=F64)
    adv = torch.tensor([OPSM_ADV], dtype=F64)
    mask = torch.ones_like(logp, dtype=torch.bool)
    corr = sequence_rules.trl_opsm(logp, old, mask, adv, OPSM_DELTA)
    return rc.lab_loss(logp, old, adv, mask, corr, eps=OPSM_EPS), corr.weights[0]


def _opsm() -> Outcome:
    wrong, per_token = wrong_opsm()
    right, keep = right_opsm()
    per_right = [
        k * _ppo_token(lp, o, a) + 0.0
        for k, lp, o, a in zip(keep.tolist(), OPSM_LOGPROBS, OPSM_OLD, OPSM_ADV, strict=True)
    ]
    return Outcome(
        wrong=wrong,
        right=right.loss,
        labels=("t1 (A = -0.5)", "t2 (A = +0.25)", "t3 (A = -0.25)"),
        wrong_series=series(per_token),
        right_series=series(per_right),
        series_title="each token's masked PPO loss",
        formula=(
            "seq KL = mean(old - log pi) = mean(1, 1, 1) = 1.0 > delta 0.1;  "
            "mean A = (-0.5 + 0.25 - 0.25) / 3 = -0.1667 < 0  ->  reject the sequence\n"
            "per token (the bug): mask = 1 - [A_t < 0]  ->  [0, 1, 0]\n"
            "t2: r = e^(0 - 1) = 0.3679;  -min(r A, clip(r, 0.8, 1.2) A) = "
            f"-min(0.09197, 0.2) = {num(per_token[1])}\n"
            f"loss = ({num(per_token[1])}) / 3 = {num(wrong)}  (the thread: -0.0307);  "
            f"per sequence: mask [0, 0, 0] -> {num(right.loss)}"
        ),
    )


# -------------------------------------------- 2. "a no-op at ratio 1" moves the KL gradient

BIAS_SCORES = (1.0, 1.0)  # one group, equal rewards: A = 0, only the KL term acts
BIAS_LOGPROBS = ((-0.5, -1.0, -2.0), (-0.3, -1.5, -0.8))
BIAS_REF = ((-0.7, -0.9, -1.2), (-0.3, -1.0, -1.4))
BIAS_BETA = 0.1


def k3(logp: float, ref: float) -> float:
    """k3 = e^(ref - logp) - (ref - logp) - 1 (TRL's per_token_kl)."""
    x = ref - logp
    return math.exp(x) - x - 1.0


def wrong_bias_correction() -> list[float]:
    """The claim of TRL PR #6503: on-policy the ratio is 1, so k3 * ratio changes nothing."""
    return [0.0 for row in BIAS_LOGPROBS for _ in row]


def right_bias_correction() -> tuple[Tensor, Tensor]:
    """(grad with ``use_bias_correction_kl``, grad without) of roll-viz's TRL loss (ratio 1)."""
    batch = make_batch(BIAS_SCORES, [3, 3], ("q1", "q1"), BIAS_LOGPROBS, BIAS_REF)
    grads = []
    for corrected in (True, False):
        config = sequence_rules.trl_kl_config(BIAS_BETA, corrected)
        trace = run(batch, "trl", config)
        grads.append(
            step_grad(
                "trl",
                config,
                BIAS_LOGPROBS,
                trace.advantages,
                batch.response_mask,
                batch.ref_logprobs,
            )[1]
        )
    return grads[0], grads[1]


def _bias_correction() -> Outcome:
    wrong = wrong_bias_correction()
    with_ratio, without = right_bias_correction()
    change = (with_ratio - without).flatten()
    kl = [
        k3(lp, ref)
        for lps, refs in zip(BIAS_LOGPROBS, BIAS_REF, strict=True)
        for lp, ref in zip(lps, refs, strict=True)
    ]
    return Outcome(
        wrong=math.sqrt(sum(g * g for g in wrong)),
        right=change.norm().item(),
        labels=tuple(f"answer {b + 1}, t{t + 1}" for b in range(2) for t in range(3)),
        wrong_series=series(wrong),
        right_series=series(change),
        series_title="change of dL/dlog pi per token from k3 -> k3 * ratio",
        formula=(
            "ratio = exp(log pi - sg(log pi)) = 1 in value, but d ratio / d log pi = 1\n"
            "d(k3 * ratio)/d log pi = k3' * ratio + k3 * ratio' = k3' + k3  (at ratio 1)\n"
            f"so each token's gradient moves by beta * k3 / N = {BIAS_BETA} * k3 / 6:\n"
            "k3 per token: " + ", ".join(num(v) for v in kl) + "\n"
            "change: " + ", ".join(num(v) for v in change.tolist())
        ),
    )


# ---------------------------------------------------- 3. 0 * inf from a disabled KL term

NAN_SCORES = (1.0, 0.0)
NAN_LOGPROBS = ((-0.4, -1.1), (-0.9, -0.6))
#: the reference scores one sampled token -inf (its processed logits exclude the token)
NAN_REF = ((-0.5, -1.0), (-0.8, -math.inf))


def wrong_zero_coef(advantages: Sequence[float]) -> list[float]:
    """The slime code before PR #2258: ``loss = pg + kl_loss_coef * kl``, coefficient 0.

    k3 of a token the reference scores -inf is inf, and 0 * inf is NaN.
    """
    out = []
    for b, (lps, refs) in enumerate(zip(NAN_LOGPROBS, NAN_REF, strict=True)):
        for lp, ref in zip(lps, refs, strict=True):
            kl = math.inf if ref == -math.inf else k3(lp, ref)
            out.append(-advantages[b] + 0.0 * kl)
    return out


def right_zero_coef() -> tuple[Tensor, Tensor, Tensor]:
    """(advantages (B,), loss, d loss / d logp) of roll-viz's TRL loss with beta 0.

    With beta = 0 TRL loads no reference model, so the batch carries no reference log-probs
    and no KL term is built.
    """
    batch = make_batch(NAN_SCORES, [2, 2], ("q1", "q1"))
    config = sequence_rules.trl_kl_config(0.0, True)
    trace = run(batch, "trl", config)
    loss, grad = step_grad("trl", config, NAN_LOGPROBS, trace.advantages, batch.response_mask)
    return trace.advantages[:, 0], loss, grad


def _zero_coef() -> Outcome:
    adv, loss, grad = right_zero_coef()
    per_token = wrong_zero_coef(adv.tolist())
    wrong = sum(per_token) / len(per_token)
    right_tokens = [-a for a in adv.tolist() for _ in range(2)]
    return Outcome(
        wrong=wrong,
        right=loss.item(),
        labels=("answer 1, t1", "answer 1, t2", "answer 2, t1", "answer 2, t2"),
        wrong_series=series(per_token),
        right_series=series(right_tokens),
        series_title="each token's loss -A * r + coef * k3 (ratio 1)",
        formula=(
            "reference log-prob of answer 2, t2 = -inf  ->  k3 = e^(-inf) + inf - 1 = inf\n"
            "kl_loss_coef = 0:  0 * inf = NaN, so the token's loss and the mean are NaN "
            "(and so is every gradient)\n"
            f"A = {num(adv[0].item())}, {num(adv[1].item())};  without the KL term: loss = "
            f"-mean(A) = {num(loss.item())}, dL/dlog pi = "
            + ", ".join(num(v) for v in grad.flatten().tolist())
        ),
    )


#: this module's lessons, in gallery order
BUGS: tuple[SilentBug, ...] = (
    SilentBug(
        id="opsm-per-token",
        short="OPSM per token",
        title="Off-policy sequence masking decided token by token",
        thread="THUDM/slime#1917",
        question="OPSM rejects a sequence whose mean advantage is negative and whose KL to the "
        "sampler is above delta. This sequence has KL 1.0 > 0.1 and mean A = -0.17, but one "
        "token has A = +0.25. What is its loss after OPSM?",
        choices=(
            "-0.0307: the positive token still learns",
            "0: the whole sequence is dropped",
            "-0.0920: only the positive token counts, alone in the mean",
        ),
        answer=1,
        quantity="the sequence's PPO token-mean loss after OPSM",
        batch=(
            ("log pi / sampler", "0, 0, 0 / 1, 1, 1 (seq KL 1.0)"),
            ("advantages", "-0.5, +0.25, -0.25 (mean -0.167)"),
            ("config", "opsm_delta 0.1, PPO clip 0.2, token mean"),
        ),
        wrong_label="per-token mask [A_t < 0] (slime before #1917)",
        right_label="roll-viz: sequence_masks.opsm + lab_loss",
        explanation="OPSM is a sequence decision: compare the sequence's mean advantage, not "
        "each token's sign, or a rejected sequence keeps training on its positive tokens.",
        compute=_opsm,
    ),
    SilentBug(
        id="kl-ratio-grad",
        short="k3 x ratio at ratio 1",
        title="k3 times a ratio of 1 still changes the gradient",
        thread="huggingface/trl#6503",
        question="TRL multiplies its k3 KL by the importance ratio (use_bias_correction_kl). On "
        "the first step the ratio is exactly 1. Does the KL gradient change?",
        choices=(
            "No: multiplying by 1 is a no-op",
            "Yes: the ratio is 1 but its gradient is not 0, adding beta * k3 per token",
            "Only when the advantages are non-zero",
        ),
        answer=1,
        quantity="|change of dL/dlog pi| when k3 becomes k3 * ratio",
        batch=(
            ("rewards", "1, 1 (one group: A = 0, only the KL acts)"),
            ("log pi", "(-0.5, -1.0, -2.0), (-0.3, -1.5, -0.8)"),
            ("ref", "(-0.7, -0.9, -1.2), (-0.3, -1.0, -1.4)"),
            ("config", "TRL dapo, beta 0.1, ratio 1 (first step)"),
        ),
        wrong_label="'a no-op on-policy (ratio = 1)'",
        right_label="roll-viz: autograd of policy_loss('trl') with and without",
        explanation="ratio = exp(log pi - sg(log pi)) is 1 in value but its derivative is 1, so "
        "k3 * ratio adds k3 to each token's KL slope: the reverse-KL gradient, not k3's own.",
        compute=_bias_correction,
    ),
    SilentBug(
        id="kl-zero-nan",
        short="0 x NaN with KL off",
        title="A KL coefficient of 0 still poisons the loss",
        thread="THUDM/slime#2258",
        question="kl_loss_coef is 0 and one token's reference log-prob is -inf. Is the KL "
        "term really off?",
        choices=(
            "Yes: multiplying by zero removes it",
            "No: zero times inf is NaN, so the loss and every gradient turn NaN",
            "Only the logged KL metric turns NaN",
        ),
        answer=1,
        quantity="the loss value",
        batch=(
            ("rewards", "1, 0 (2 tokens each)"),
            ("ref log-prob", "answer 2, t2: -inf"),
            ("config", "KL in the loss (k3) with coefficient 0"),
        ),
        wrong_label="pg + 0 * k3 (slime before #2258)",
        right_label="roll-viz: policy_loss('trl', beta=0): no KL term built",
        explanation="0 * inf and 0 * NaN are NaN: a disabled term must not be built at all (TRL "
        "with beta = 0 loads no reference and computes no KL).",
        compute=_zero_coef,
    ),
)
