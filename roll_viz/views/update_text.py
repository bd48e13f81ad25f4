"""The Update page's words about one step: readouts of an ``lm.update.UpdateResult``.

Pure text and token chips (no Streamlit): the step's summary, what the bf16 base and mu did,
where the time went, the epoch-1 statement, the answer's chips and one token's formula. The
page glue (``ui/update_page.py``) takes the step; these say what it did.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from roll_viz.core.records import Rollout
from roll_viz.views import chips, scales, text, update_charts

#: |log pi_bf16 - log pi_fp32| per token, measured on SmolLM2-135M, 2 x 8 x 32
#: (``python -m benchmarks.update``; ``tests/lm/test_update_precision.py`` bounds the tiny
#: model's): max, mean
BF16_GAP = (0.207, 0.033)


def precision_markdown(result: Any) -> str:
    """What the bf16 base did to the step's numbers ("" for a float32 step)."""
    if result.config.precision != "bf16":
        return ""
    worst, mean = BF16_GAP
    ratio = result.epochs[0].ratio_min, result.epochs[0].ratio_max
    return (
        "**Base matmuls in bf16** for this step (approximate): log pi differs from float32 by "
        f"up to {worst:g} per token (mean {mean:g}; measured on SmolLM2-135M, 2 x 8 x 32). "
        f"Epoch 1's ratio ranges {ratio[0]:.4f} to {ratio[1]:.4f} instead of exactly 1, and "
        "delta log pi carries the same noise."
    )


TIMING_BREAK = ";  \n"


def timing_markdown(result: Any) -> str:
    """Where the time went: the step's phases, then the delta log pi re-score (or that it runs).

    Two lines, broken at the semicolon, so each half stays whole in a half-width column.
    """
    sec = {k: result.seconds.get(k, 0.0) for k in ("forward", "backward", "optimizer", "rescore")}

    def show(value: float) -> str:  # a tenth of a second on a real model, more on a tiny one
        return f"{value:.1f}" if value >= 1 else f"{value:.2f}"

    step = sec["forward"] + sec["backward"] + sec["optimizer"]
    head = (
        f"Step {show(step)} s (forward {show(sec['forward'])}, backward "
        f"{show(sec['backward'])}, optimizer {show(sec['optimizer'])})"
    )
    if result.delta is None:
        return head + TIMING_BREAK + "Delta log pi re-score running..."
    return head + TIMING_BREAK + f"Delta log pi re-score {show(sec['rescore'])} s."


def mu_markdown(result: Any) -> str:
    """What mu did in the step: the gap d = log pi_old - log mu and the epoch-1 ratio to mu."""
    if result.rollout_logprobs is None:
        return ""
    if result.mu_is_old:
        return (
            "The loss read **mu = pi_old** (the in-process float sampler is the trainer's own "
            "model): pi_theta / mu = 1 at epoch 1 and the correction kept every token."
        )
    mask = result.response_mask.bool()
    gap = (result.old_logprobs - result.rollout_logprobs)[mask]
    ratio = torch.exp(result.logprobs_before - result.rollout_logprobs)[mask]
    if not gap.numel():
        return ""
    return (
        "Behaviour policy mu: d = log pi_old - log mu has mean |d| "
        f"**{float(gap.abs().mean()):.2e}** (max {float(gap.abs().max()):.2e}); at epoch 1 "
        "the ratio pi_theta / mu ranges "
        f"**{float(ratio.min()):.4f} to {float(ratio.max()):.4f}**, not 1: the correction acts."
    )


def summary_markdown(result: Any) -> str:
    """Plain-language readout of the step (sign agreement, mean |delta|, grad norm, memory)."""
    mask = result.response_mask.bool()
    mem = (result.adapter_bytes + result.optimizer_bytes) / 2**20
    if result.delta is None:
        moved = "delta log pi follows from the re-score. "
    else:
        delta, adv = result.delta[mask], result.advantages[mask]
        moving = adv != 0
        agree = (
            float(((delta * adv)[moving] > 0).float().mean()) if bool(moving.any()) else math.nan
        )
        moved = (
            f"mean |delta log pi| = **{float(delta.abs().mean()):.4f}** per token, "
            f"**{agree:.0%}** of the tokens with A != 0 moved in their advantage's direction. "
        )
    return (
        f"Step {result.step} of this session's adapter ({result.framework} loss, lr "
        f"{result.config.lr:g}, K = {result.config.epochs}, {result.config.minibatches} "
        f"minibatch(es)): {moved}"
        f"Gradient norm before clipping {result.grad_norm:.3g} (clipped at "
        f"{result.config.max_grad_norm}). Adapter + AdamW state: {mem:.1f} MB."
    )


def epoch1_statement(result: Any) -> str:
    """What epoch 1 shows: the policy loss is 0 to rounding, its gradient is not (with the norm).

    At the first epoch the policy is the behaviour policy, so every ratio is 1 and, with
    advantages that average to 0, the policy loss is 0 up to float rounding; its gradient
    sum_t w_t A_t d log pi_t / d theta is not 0. "" when epoch 1's policy term is not that small.
    """
    if not result.epochs:
        return ""
    first = result.epochs[0]
    policy = float(first.terms.get("policy", math.nan))
    if not abs(policy) < update_charts.ROUNDING:
        return ""
    return (
        f"**Epoch 1: policy loss = 0 (to rounding: {policy:.1e}); the gradient is not.** Every "
        "ratio is 1 and the advantages average to 0, so the loss value vanishes, but each token "
        "still gets the push A_t through d log pi / d theta: the gradient norm is "
        f"**{result.grad_norm:.3g}** (before clipping at {result.config.max_grad_norm})."
    )


def answer_chips(result: Any, rollout: Rollout, b: int, t: int) -> tuple[str, str]:
    """One answer's tokens as chips twice: coloured by the advantage A and by delta log pi.

    Both on a fixed symmetric RdBu scale (blue = up, red = down): A on the Advantages page's
    range, delta log pi on the largest |delta| of the batch rounded up; the token ``t`` outlined.

    Returns:
        (HTML of the A chips with their colour bar, HTML of the delta chips with theirs; ""
        before the re-score).
    """
    mask = result.response_mask
    length = int(mask[b].sum())
    tokens = list(rollout.tokens[b][:length])

    def strip(values: Any, top: float, label: str, name: str) -> str:
        bar = chips.colorbar_html("RdBu", -top, top, label)
        row = values[b, :length].tolist()
        return bar + chips.token_chips_html(
            tokens, row, "RdBu", vmin=-top, vmax=top, name=name, highlight=t
        )

    a_range = scales.nice_ceiling(scales.symmetric_range(result.advantages, mask))
    a_html = strip(result.advantages, max(scales.ADVANTAGE_RANGE, a_range), "advantage A:", "A")
    if result.delta is None:
        return a_html, ""
    d_top = scales.nice_ceiling(scales.symmetric_range(result.delta, mask)) or 1.0
    return a_html, strip(result.delta, d_top, "delta log pi (after - before):", "delta log pi")


def token_formula(result: Any, b: int, t: int) -> list[str]:
    """LaTeX lines: the selected token's ratio, PPO loss, gradient coefficient and delta."""
    old = float(result.old_logprobs[b, t])
    before = float(result.logprobs_before[b, t])
    adv = float(result.advantages[b, t])
    ratio = math.exp(before - old)
    lines = [
        r"r_t=\exp(\log\pi_\theta-\log\pi_{old})=\exp("
        + text.fmt(before, 4)
        + "-("
        + text.fmt(old, 4)
        + "))="
        + text.fmt(ratio, 4),
    ]
    pg = result.per_token.get("pg_loss")
    if pg is not None:
        lines.append(
            r"\ell_t=\max\big(-A_t r_t,\,-A_t\,\mathrm{clip}(r_t,1-\epsilon,1+\epsilon)\big),\ "
            r"A_t=" + text.fmt(adv, 4) + r"\ \Rightarrow\ \ell_t=" + text.fmt(float(pg[b, t]), 4)
        )
    # the push -dL/dlog pi, the sign the gradient heatmap shows (blue = pushed up)
    lines.append(
        r"-\frac{\partial L}{\partial\log\pi_t}=-w_t\,\frac{\partial\ell_t}{\partial\log\pi_t}="
        + text.fmt(-float(result.grad_coef[b, t]), 5)
        + r"\quad(w_t:\ \text{the aggregation weight of the token; } >0\text{: pushed up})"
    )
    if result.logprobs_after is None:
        return lines
    after = float(result.logprobs_after[b, t])
    lines.append(
        r"\Delta\log\pi_t="
        + text.fmt(after, 4)
        + "-("
        + text.fmt(before, 4)
        + ")="
        + text.fmt(after - before, 5)
    )
    return lines
