"""History across the steps of an imported run, and the cross-check against the framework.

Works on the per-step summaries of ``roll_viz.data.runs.open_run`` (per-sample scalars, never
token arrays), so it runs on a 512 x 16 x 4096-token dump in bounded memory.

- ``history_table``: one row per step with the distribution (mean, std, quartiles, extremes) of
  the reward, the advantage (the file's when it has one, else recomputed by a dialect through
  ``roll_viz.core.pipeline.run`` on a (B, 1) sequence-level batch), the per-sample mean KL
  (k1 and k3 from the file's log-probs) and the response length; the share of **zero-signal
  groups** (all rewards equal, so every advantage is 0) and their ids;
- ``distributions``: the same values in long form (step, group, value) for box plots;
- ``metrics_table``: the framework's own metrics per step, when the dump has them;
- ``cross_check``: where a dump carries the framework's advantage (TRL), roll-viz's value for
  the same dialect (trl, scale_rewards=group) beside it, every mismatch flagged with the first
  convention that reproduces the file's number (scale_rewards batch/none, biased std, another
  eps), or "unexplained".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.pipeline import run as run_pipeline
from roll_viz.core.records import Batch
from roll_viz.data.runs import Run, StepSummary, default_dialect

#: Tolerances of the cross-check (the frameworks compute advantages in float32).
CHECK_RTOL = 1e-5
CHECK_ATOL = 1e-6
#: Conventions tried, in order, to explain a TRL advantage that differs from roll-viz's.
TRL_CONVENTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "scale_rewards=batch (group mean, batch std: TRL option / LitePPO)",
        {"scale_rewards": "batch"},
    ),
    ("scale_rewards=none (no std division: Dr.GRPO)", {"scale_rewards": "none"}),
    ("biased std (ddof 0) instead of TRL's unbiased", {"viz_std_ddof": 0}),
    ("eps 1e-6 (ROLL/verl) instead of TRL's 1e-4", {"viz_eps": 1e-6}),
    ("eps 1e-8 instead of TRL's 1e-4", {"viz_eps": 1e-8}),
    ("scale_rewards=batch with eps 1e-6", {"scale_rewards": "batch", "viz_eps": 1e-6}),
)
UNEXPLAINED = (
    "unexplained: reward_weights other than 1, a reward column that is not a reward, or a "
    "convention roll-viz does not model"
)


def summary_batch(summary: StepSummary) -> Batch:
    """A sequence-level Batch of one step: scores (B,), mask (B, 1) of ones, group ids."""
    B = summary.samples
    return Batch(
        scores=summary.scores,
        response_mask=torch.ones(B, 1, dtype=torch.float64),
        group_ids=summary.group_ids,
        group_labels=summary.group_labels,
    )


def recompute_advantages(
    summary: StepSummary, framework: str, config: Mapping[str, Any] | None = None
) -> Tensor:
    """(B,) sequence-level advantages of one step in a dialect (outcome estimators).

    Raises:
        ValueError: the pipeline's message (a group too small, an estimator that needs
            critic values or log-probs, ...).
    """
    trace = run_pipeline(summary_batch(summary), framework, dict(config or {}))
    return trace.advantages[:, 0]


def zero_signal_groups(summary: StepSummary) -> tuple[str, ...]:
    """Ids of the groups whose rewards are all equal (advantage 0 for every sample)."""
    P = summary.num_prompts
    gids, scores = summary.group_ids, summary.scores
    high = torch.full((P,), -math.inf, dtype=torch.float64).scatter_reduce(0, gids, scores, "amax")
    low = torch.full((P,), math.inf, dtype=torch.float64).scatter_reduce(0, gids, scores, "amin")
    return tuple(summary.group_labels[g] for g in torch.nonzero(high == low).flatten().tolist())


def _stats(prefix: str, x: Tensor | None) -> dict[str, float]:
    keys = ("mean", "std", "min", "p25", "median", "p75", "max")
    if x is None:
        return {f"{prefix}_{k}": math.nan for k in keys}
    x = x[torch.isfinite(x)]
    if x.numel() == 0:
        return {f"{prefix}_{k}": math.nan for k in keys}
    q = torch.quantile(x, torch.tensor([0.25, 0.5, 0.75], dtype=x.dtype))
    return {
        f"{prefix}_mean": float(x.mean()),
        f"{prefix}_std": float(x.std()) if x.numel() > 1 else 0.0,
        f"{prefix}_min": float(x.min()),
        f"{prefix}_p25": float(q[0]),
        f"{prefix}_median": float(q[1]),
        f"{prefix}_p75": float(q[2]),
        f"{prefix}_max": float(x.max()),
    }


@dataclass(frozen=True)
class StepAdvantages:
    """A step's sequence-level advantages and where they come from.

    Attributes:
        values: (B,) advantages, or None when unavailable.
        source: "file" or "recomputed: <framework> <config>" or "unavailable: <reason>".
    """

    values: Tensor | None
    source: str


def step_advantages(
    summary: StepSummary, framework: str, config: Mapping[str, Any], prefer_file: bool = True
) -> StepAdvantages:
    """The file's advantages when present (and ``prefer_file``), else the dialect's."""
    if (
        prefer_file
        and summary.advantages is not None
        and bool(torch.isfinite(summary.advantages).all())
    ):
        return StepAdvantages(summary.advantages, "file")
    try:
        values = recompute_advantages(summary, framework, config)
    except ValueError as err:
        return StepAdvantages(None, f"unavailable: {err}")
    shown = ", ".join(f"{k}={v}" for k, v in sorted(config.items()))
    return StepAdvantages(values, f"recomputed: {framework} {shown}".strip())


def history_table(
    run: Run,
    framework: str | None = None,
    config: Mapping[str, Any] | None = None,
    prefer_file: bool = True,
) -> pd.DataFrame:
    """One row per step: reward, advantage, KL and length distributions, zero-signal groups.

    Args:
        run: from ``open_run``.
        framework: dialect for recomputed advantages (default: the format's framework).
        config: its config (default: the format's, e.g. grpo).
        prefer_file: use the file's advantage when it has one.

    Returns:
        DataFrame with step, prompts, samples, reward_* / advantage_* / kl_k1_* / kl_k3_* /
        length_* statistics (mean, std, min, p25, median, p75, max), advantage_source,
        length_unit, zero_signal_groups (count), zero_signal_share (of prompts),
        zero_signal_ids (tuple of group ids).
    """
    fw, cfg = _dialect(run, framework, config)
    rows = []
    for s in run.summaries:
        adv = step_advantages(s, fw, cfg, prefer_file)
        zero = zero_signal_groups(s)
        rows.append(
            {
                "step": s.step,
                "prompts": s.num_prompts,
                "samples": s.samples,
                **_stats("reward", s.scores),
                **_stats("advantage", adv.values),
                "advantage_source": adv.source,
                **_stats("kl_k1", s.kl_k1),
                **_stats("kl_k3", s.kl_k3),
                **_stats("length", s.lengths),
                "length_unit": s.length_unit,
                "zero_signal_groups": len(zero),
                "zero_signal_share": len(zero) / s.num_prompts if s.num_prompts else math.nan,
                "zero_signal_ids": zero,
            }
        )
    return pd.DataFrame(rows)


def _dialect(
    run: Run, framework: str | None, config: Mapping[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    fw, cfg = default_dialect(run.format)
    if framework is not None and framework != fw:
        fw, cfg = framework, {}
    if config is not None:
        cfg = dict(config)
    return fw, cfg


def distributions(
    run: Run,
    what: str,
    framework: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Per-sample values of every step in long form, for box/violin plots.

    Args:
        run: from ``open_run``.
        what: "reward", "advantage", "kl_k1", "kl_k3" or "length".
        framework: dialect for recomputed advantages (default: the format's framework).
        config: its config (default: the format's).

    Returns:
        DataFrame with step, group (id), value; empty when the run lacks the quantity.
    """
    fw, cfg = _dialect(run, framework, config)
    frames = []
    for s in run.summaries:
        if what == "reward":
            values = s.scores
        elif what == "advantage":
            values = step_advantages(s, fw, cfg).values
        elif what in ("kl_k1", "kl_k3", "length"):
            values = getattr(s, "lengths" if what == "length" else what)
        else:
            raise ValueError(f"unknown quantity {what!r}")
        if values is None:
            continue
        labels = [s.group_labels[g] for g in s.group_ids.tolist()]
        frames.append(pd.DataFrame({"step": s.step, "group": labels, "value": values.tolist()}))
    if not frames:
        return pd.DataFrame({"step": [], "group": [], "value": []})
    return pd.concat(frames, ignore_index=True)


def metrics_table(run: Run) -> pd.DataFrame:
    """The framework's own metrics, one row per step (empty when the dump has none).

    Includes steps that have metrics but no samples (``Run.step_metrics``).
    """
    return pd.DataFrame([{"step": step, **dict(pairs)} for step, pairs in run.step_metrics])


def _close(a: Tensor, b: Tensor) -> Tensor:
    return (a - b).abs() <= CHECK_ATOL + CHECK_RTOL * b.abs()


def cross_check(
    summary: StepSummary,
    framework: str = "trl",
    config: Mapping[str, Any] | None = None,
    conventions: tuple[tuple[str, dict[str, Any]], ...] = TRL_CONVENTIONS,
) -> pd.DataFrame:
    """The file's advantage beside roll-viz's for the same dialect, mismatches explained.

    Args:
        summary: a step with ``advantages`` from the file.
        framework: dialect (default trl).
        config: its config (default scale_rewards=group).
        conventions: (label, config overrides) tried in order to explain a mismatch.

    Returns:
        One row per sample: row, group, score, file_advantage, rollviz_advantage, abs_diff,
        match, explained_by ("" for a match; a convention's label, or ``UNEXPLAINED``).

    Raises:
        ValueError: the step has no file advantages, or the dialect cannot run on it.
    """
    if summary.advantages is None:
        raise ValueError(f"step {summary.step} has no advantage column to cross-check")
    cfg = dict(config if config is not None else {"scale_rewards": "group"})
    ours = recompute_advantages(summary, framework, cfg)
    theirs = summary.advantages
    match = _close(ours, theirs)
    explained = [""] * summary.samples
    pending = torch.nonzero(~match).flatten().tolist()
    for label, overrides in conventions:
        if not pending:
            break
        try:
            alt = recompute_advantages(summary, framework, {**cfg, **overrides})
        except ValueError:
            continue
        ok = _close(alt, theirs)
        for b in list(pending):
            if bool(ok[b]):
                explained[b] = label
                pending.remove(b)
    for b in pending:
        explained[b] = UNEXPLAINED
    return pd.DataFrame(
        {
            "row": range(summary.samples),
            "group": [summary.group_labels[g] for g in summary.group_ids.tolist()],
            "score": summary.scores.tolist(),
            "file_advantage": theirs.tolist(),
            "rollviz_advantage": ours.tolist(),
            "abs_diff": (ours - theirs).abs().tolist(),
            "match": match.tolist(),
            "explained_by": explained,
        }
    )


def cross_check_run(
    run: Run, framework: str = "trl", config: Mapping[str, Any] | None = None
) -> pd.DataFrame:
    """Per step: samples, mismatches, the largest |difference| and the explanations found.

    Steps without file advantages are left out; a step the dialect cannot run on gets its
    error in ``explained_by``.
    """
    rows = []
    for s in run.summaries:
        if s.advantages is None:
            continue
        try:
            table = cross_check(s, framework, config)
        except ValueError as err:
            rows.append(
                {
                    "step": s.step,
                    "samples": s.samples,
                    "mismatches": math.nan,
                    "max_abs_diff": math.nan,
                    "explained_by": f"not checked: {err}",
                }
            )
            continue
        bad = table[~table["match"]]
        rows.append(
            {
                "step": s.step,
                "samples": s.samples,
                "mismatches": len(bad),
                "max_abs_diff": float(table["abs_diff"].max()),
                "explained_by": "; ".join(sorted(set(bad["explained_by"]))),
            }
        )
    return pd.DataFrame(rows)
