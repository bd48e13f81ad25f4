"""The reward -> advantage pipeline as pure tensor functions, in four framework dialects.

Public API::

    from roll_viz.core.pipeline import run, FRAMEWORKS, DEFAULTS, CHOICES, HELP, ALIASES
    trace = run(batch, "roll", {"adv_estimator": "grpo"}, running=None)

    from roll_viz.core.pipeline import policy_loss, LOSS_DEFAULTS, LOSS_CHOICES, LOSS_HELP
    result = policy_loss("verl", {"loss_agg_mode": "token-mean"}, logprobs=lp,
                         old_logprobs=old, advantages=trace.advantages, response_mask=mask)

Stages (one module each): ``postprocess`` (response-level normalization, running statistics,
clipping), ``kl`` (token KL estimators, controllers), ``advantages`` (token rewards and the
estimators, one signature), ``values`` (a cross-fitted ridge value probe that gives GAE a
critic), ``losses`` (the policy-update losses, aggregation modes, closed-form gradient
coefficients). The stage modules name no framework: everything a framework decides (its order
of operations, keys, defaults, KL names, loss spec, metric names, recipes) is in
``dialects/<name>.py``, one file per framework, behind the ``dialects.DIALECTS`` registry. Nothing
here imports Streamlit, Plotly or a model; nothing keeps state between calls (running
statistics go in and come out).

What roll-viz simplifies against the real recipes: one training step on one batch, one domain,
float64 everywhere, ``run`` does no PPO update (its KL loss is reported, not optimized; the
update's loss is ``policy_loss``), no dynamic sampling or length penalties. Each module's
docstring lists its own simplifications.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline import dialects
from roll_viz.core.pipeline.advantages import ADVANTAGE_ESTIMATORS, EstimatorParams, token_rewards
from roll_viz.core.pipeline.dialects import (
    ALIASES,
    CHOICES,
    DEFAULTS,
    ESTIMATOR_KEY,
    FRAMEWORKS,
    HELP,
    LOSS_CHOICES,
    LOSS_DEFAULTS,
    LOSS_HELP,
    LOSS_KEYS,
    loss_agg_modes,
    policy_loss,
    resolve_config,
)
from roll_viz.core.pipeline.kl import KL_ESTIMATORS, next_beta, token_kl
from roll_viz.core.pipeline.losses import (
    AGG_MODES,
    LossResult,
    agg_weights,
    aggregate,
    importance_ratio,
    ppo_token_loss,
    value_loss,
)
from roll_viz.core.records import Batch, RunningMoments, Trace

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "ALIASES",
    "CHOICES",
    "DEFAULTS",
    "ESTIMATOR_KEY",
    "FRAMEWORKS",
    "HELP",
    "KL_ESTIMATORS",
    "LOSS_CHOICES",
    "LOSS_DEFAULTS",
    "LOSS_HELP",
    "LOSS_KEYS",
    "EstimatorParams",
    "LossResult",
    "agg_weights",
    "aggregate",
    "dialects",
    "importance_ratio",
    "loss_agg_modes",
    "next_beta",
    "policy_loss",
    "ppo_token_loss",
    "prepare_batch",
    "resolve_config",
    "run",
    "token_kl",
    "token_rewards",
    "value_loss",
]


def _first_bad(x: Tensor) -> tuple[int, ...] | None:
    """Index of the first non-finite entry of ``x``, or None when every entry is finite.

    Fast path: one reduction without a temporary. A NaN or an infinity anywhere makes the sum
    non-finite, so a finite sum proves every entry finite; only a non-finite sum (a bad entry,
    or finite entries whose sum overflows) pays for the element-wise scan.
    """
    if x.numel() == 0 or math.isfinite(x.sum().item()):
        return None
    bad = torch.nonzero(~torch.isfinite(x))
    return tuple(bad[0].tolist()) if bad.numel() else None


def _float64(value: Tensor) -> Tensor:
    """A float64 copy of ``value``: one conversion pass, never the caller's storage."""
    return value.to(torch.float64, copy=True)


#: Entries per slice of the mask's fractional-part check (a 256 KB float32 scratch buffer).
_BINARY_CHUNK = 1 << 16


def _is_binary(mask: Tensor) -> bool:
    """Whether every entry of a mask is 0 or 1 (a bool mask always is).

    Checked in the mask's own dtype, before the float64 conversion: a float32 mask is read at
    half the bytes, and the conversion keeps 0 and 1 exact. No (B, T) temporary: the smallest
    and largest entry must lie in [0, 1] (a NaN makes both NaN and fails), then no entry may
    have a fractional part (0.5, 1e-300): the fractional parts, all >= 0, must sum to exactly
    0 (a sum of non-negative numbers is 0 only when each is). They are taken slice by slice
    into one small scratch buffer.
    """
    if mask.dtype == torch.bool:
        return True
    low, high = torch.aminmax(mask)
    if not (low.item() >= 0 and high.item() <= 1):
        return False
    if not mask.is_floating_point():
        return True
    flat = mask.reshape(-1)
    scratch = flat.new_empty(min(_BINARY_CHUNK, flat.numel()))
    total = flat.new_zeros(())
    for part in flat.split(_BINARY_CHUNK):
        total += torch.frac(part, out=scratch[: part.numel()]).sum()
    return total.item() == 0


def prepare_batch(batch: Batch, unread: tuple[str, ...] = ()) -> Batch:
    """Validate a Batch and return a float64 copy (mask as 0/1 float, group ids as long).

    Args:
        batch: scores (B,), response_mask (B, T), group_ids (B,), optional logprobs and
            ref_logprobs (B, T) (both or neither), values (B, T), baseline_scores (B,),
            reward_components (name -> (B,)), sum_pi_squared (B, T).
        unread: optional fields the caller will not read ("values", "sum_pi_squared", ...):
            validated all the same (same checks, same messages), then left as None in the
            copy, which spares a float64 copy of each (``run`` passes the dialect's
            ``unread_inputs``).

    Returns:
        A new Batch; the input's tensors are never modified.

    Raises:
        ValueError: wrong shapes, a mask that is not 0/1, negative group ids, only one of
            logprobs/ref_logprobs, or a non-finite number (the message names field and sample).
    """
    scores = _float64(torch.as_tensor(batch.scores).detach())
    source_mask = torch.as_tensor(batch.response_mask).detach()
    mask = source_mask
    if scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty (B,) vector, got shape {tuple(scores.shape)}")
    B = scores.shape[0]
    if mask.dim() != 2 or mask.shape[0] != B or mask.shape[1] == 0:
        raise ValueError(f"response_mask must be (B={B}, T>=1), got shape {tuple(mask.shape)}")
    if not _is_binary(source_mask):
        raise ValueError("response_mask must contain only 0 and 1")
    mask = _float64(source_mask)
    group_ids = torch.as_tensor(batch.group_ids).detach()
    if group_ids.shape != (B,) or group_ids.is_floating_point() or bool((group_ids < 0).any()):
        raise ValueError(f"group_ids must be (B={B},) non-negative integers")
    bad = _first_bad(scores)
    if bad is not None:
        raise ValueError(f"scores[{bad[0]}] is {scores[bad].item()} (sample {bad[0]}): not finite")
    if (batch.logprobs is None) != (batch.ref_logprobs is None):
        raise ValueError("logprobs and ref_logprobs must be given together")
    tensors: dict[str, Tensor | None] = {}
    for name, shape in (
        ("logprobs", mask.shape),
        ("ref_logprobs", mask.shape),
        ("values", mask.shape),
        ("baseline_scores", scores.shape),
        ("sum_pi_squared", mask.shape),
    ):
        value = getattr(batch, name)
        if value is None:
            tensors[name] = None
            continue
        value = torch.as_tensor(value).detach()
        if value.shape != shape:
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(value.shape)}")
        bad = _first_bad(value)  # in the input's dtype: the conversion keeps finiteness
        if bad is not None:
            raise ValueError(
                f"{name}{list(bad)} is {value[bad].item()} (sample {bad[0]}): not finite"
            )
        tensors[name] = None if name in unread else _float64(value)
    components = None
    if batch.reward_components is not None:
        components = {}
        for name, value in dict(batch.reward_components).items():
            value = _float64(torch.as_tensor(value).detach())
            if value.shape != scores.shape:
                raise ValueError(
                    f"reward_components[{name!r}] must have shape {tuple(scores.shape)}, "
                    f"got {tuple(value.shape)}"
                )
            bad = _first_bad(value)
            if bad is not None:
                raise ValueError(f"reward_components[{name!r}][{bad[0]}] is not finite")
            components[str(name)] = value
    return Batch(
        scores=scores,
        response_mask=mask,
        group_ids=group_ids.to(torch.long).clone(),
        group_labels=tuple(batch.group_labels),
        reward_components=components,
        **tensors,
    )


def run(
    batch: Batch,
    framework: str = "roll",
    config: Mapping[str, Any] | None = None,
    running: RunningMoments | None = None,
) -> Trace:
    """Run one framework's reward -> advantage pipeline on a batch. Pure: same inputs, same Trace.

    Args:
        batch: the calculator input (see ``roll_viz.core.records.Batch``); copied, never modified.
        framework: "roll" (default), "verl", "openrlhf" or "trl".
        config: that framework's own keys (plus viz_ keys); missing keys take shipped defaults.
        running: running reward statistics from earlier batches (ROLL "running" norm types).

    Returns:
        Trace with every intermediate; masked positions are exactly 0.

    Raises:
        ValueError: bad batch, unknown key/value, an estimator's missing input (values for gae,
            baseline_scores for remax), a group too small for the framework, or any non-finite
            result (never a silent NaN).
    """
    cfg = resolve_config(framework, config)
    dialect = dialects.get(framework)
    clean = prepare_batch(batch, dialect.unread_inputs(cfg))
    trace = dialect.pipeline(clean, cfg, running)
    checked: set[int] = set()  # a field that is another field's tensor is checked once
    for name in ("rewards", "kl", "token_rewards", "advantages", "returns"):
        value = getattr(trace, name)
        if id(value) in checked:
            continue
        checked.add(id(value))
        bad = _first_bad(value)
        if bad is not None:
            raise ValueError(f"{framework}: non-finite {name} at {list(bad)}")
    for name in ("beta", "next_beta", "kl_loss", "clip_frac"):
        value = getattr(trace, name)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{framework}: non-finite {name} ({value})")
    return trace
