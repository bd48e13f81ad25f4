"""The same batch through the roll, verl, OpenRLHF and TRL dialects, side by side.

The sidebar's generic controls (estimator, beta, gamma ...) are translated into each dialect's
own keys; the comparison lists the conventions that made the numbers differ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis.common import one_thread
from roll_viz.analysis.sweep import ESTIMATOR_EQUIVALENTS
from roll_viz.core.ops import masked_mean
from roll_viz.core.pipeline import dialects, run
from roll_viz.core.records import Batch, Trace


def generic_estimator(framework: str, config: Mapping[str, object]) -> str:
    """The generic estimator (key of ``ESTIMATOR_EQUIVALENTS``) a dialect config amounts to.

    Args:
        framework: the dialect.
        config: its config (its own keys).

    Returns:
        The first generic name whose settings all match ``config``; "grpo" if none does.
    """
    for name, per_fw in ESTIMATOR_EQUIVALENTS.items():
        settings = per_fw.get(framework)
        if settings and all(config.get(k) == v for k, v in settings.items()):
            return name
    return "grpo"


@dataclass(frozen=True)
class FrameworkComparison:
    """One batch through several dialects with matching generic settings.

    Attributes:
        traces: dialect -> its Trace (dialects that cannot run this setting are missing).
        samples: per-sample table: prompt, sample, score, and ``reward <fw>`` / ``advantage <fw>``
            (advantage = mean over the sample's valid tokens) for each dialect that ran.
        summary: one row per dialect: estimator used, max |difference| of rewards and of token
            advantages against the reference dialect, and the settings it had no key for.
        note_diffs: dialect -> the conventions in its ``Trace.notes`` that the reference does
            not share (those are what can change the numbers).
        reference_only: dialect -> the reference's conventions that this dialect does not share.
        skipped: dialect -> why it did not run (no equivalent estimator, or the pipeline's error).
        reference: the dialect the differences are measured against.
    """

    traces: dict[str, Trace]
    samples: pd.DataFrame
    summary: pd.DataFrame
    note_diffs: dict[str, tuple[str, ...]]
    reference_only: dict[str, tuple[str, ...]]
    skipped: dict[str, str]
    reference: str


def canonical_kl(framework: str, name: object) -> str | None:
    """A dialect's KL estimator name -> k1/abs/k2/k3 (None when unknown or not given).

    Args:
        framework: the dialect.
        name: its estimator name (e.g. roll "mse", verl "low_var_kl").

    Returns:
        The canonical name or None.
    """
    return dialects.canonical_kl(framework, name)


def canonical_generic(framework: str, generic: Mapping[str, object]) -> dict:
    """Sidebar values (generic names, the sidebar dialect's own values) -> canonical settings.

    Args:
        framework: the sidebar's dialect (whose names ``generic`` uses for the KL estimator).
        generic: ``AppState.generic`` as a dict (estimator, beta, kl_estimator, kl_in_reward,
            gamma, lam, clip (0 = off), whiten).

    Returns:
        Dict with beta, gamma, lam (floats), kl_estimator (k1/abs/k2/k3 or absent),
        kl_in_reward, whiten (bools) and clip (float or None); the estimator is dropped.
    """
    out: dict[str, object] = {}
    for key in ("beta", "gamma", "lam"):
        if generic.get(key) is not None:
            out[key] = float(generic[key])
    for key in ("kl_in_reward", "whiten"):
        if key in generic and generic[key] is not None:
            out[key] = bool(generic[key])
    kl = canonical_kl(framework, generic.get("kl_estimator"))
    if kl is not None:
        out["kl_estimator"] = kl
    clip = generic.get("clip")
    out["clip"] = float(clip) if clip else None
    return out


def dialect_settings(framework: str, canonical: Mapping[str, object]) -> tuple[dict, tuple]:
    """Canonical settings -> one dialect's config keys, matching the meaning where names differ.

    The dialect translates (``dialects.<name>.from_canonical``): OpenRLHF has no "KL in reward"
    switch (the KL is in the reward unless ``use_loss``), so ``kl_in_reward`` maps to
    ``use_loss = not kl_in_reward``; TRL's GRPO keeps the KL in the loss whatever is asked. A clip
    of c becomes OpenRLHF's range (-c, c).

    Args:
        framework: the dialect.
        canonical: output of ``canonical_generic``.

    Returns:
        (config in the dialect's keys, canonical names the dialect has no key for).
    """
    return dialects.get(framework).from_canonical(canonical)


def _mean_over_tokens(x: Tensor, mask: Tensor) -> Tensor:
    return masked_mean(x, mask, dim=-1)


def _samples_table(
    batch: Batch, traces: Mapping[str, Trace], prompts: Sequence[str] | None
) -> pd.DataFrame:
    """One row per sample: its prompt, its index in the group, score, and each dialect's numbers."""
    ids = batch.group_ids.to(torch.long)
    names = (
        list(prompts) if prompts is not None else [f"prompt {p}" for p in range(int(ids.max()) + 1)]
    )
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids)
    starts = torch.cumsum(counts, 0) - counts
    within = torch.empty_like(ids)
    within[order] = torch.arange(len(ids)) - starts[ids[order]]
    samples = pd.DataFrame(
        {
            "prompt": [names[g] for g in ids.tolist()],
            "sample": within.tolist(),
            "score": batch.scores.to(torch.float64).numpy(),
        }
    )
    mask = batch.response_mask
    for fw in traces:
        samples[f"reward {fw}"] = traces[fw].rewards.to(torch.float64).numpy()
    for fw in traces:
        adv = _mean_over_tokens(traces[fw].advantages.to(torch.float64), mask)
        samples[f"advantage {fw}"] = adv.numpy()
    return samples


@one_thread
def compare_frameworks(
    batch: Batch,
    generic: Mapping[str, object],
    estimator: str = "grpo",
    frameworks: Sequence[str] | None = None,
    reference: str | None = None,
    prompts: Sequence[str] | None = None,
) -> FrameworkComparison:
    """Run the same batch through each dialect with the same generic settings.

    Args:
        batch: the batch (values filled in when the estimator is GAE).
        generic: canonical settings (``canonical_generic``): gamma, lam, beta, kl_estimator,
            kl_in_reward, clip, whiten; each dialect gets the ones it has a key for (translated
            by ``dialect_settings``), everything else stays at the dialect's shipped default.
        estimator: a key of ``ESTIMATOR_EQUIVALENTS``.
        frameworks: dialects to run (default: every registered dialect).
        reference: dialect the differences are measured against (default: the first that ran).
        prompts: (P,) prompt display names for the table.

    Returns:
        The comparison (traces, tables, convention differences, skipped dialects).
    """
    if estimator not in ESTIMATOR_EQUIVALENTS:
        raise ValueError(f"estimator must be one of {tuple(ESTIMATOR_EQUIVALENTS)}")
    frameworks = tuple(frameworks or dialects.DIALECTS)
    traces: dict[str, Trace] = {}
    skipped: dict[str, str] = {}
    ignored: dict[str, tuple[str, ...]] = {}
    used: dict[str, str] = {}
    for fw in frameworks:
        settings = ESTIMATOR_EQUIVALENTS[estimator].get(fw)
        if settings is None:
            skipped[fw] = f"{fw} has no {estimator} estimator"
            continue
        cfg, ign = dialect_settings(fw, generic)
        cfg.update(settings)
        try:
            traces[fw] = run(batch, fw, cfg)
        except ValueError as err:
            skipped[fw] = f"{fw} cannot run this setting: {err}"
            continue
        ignored[fw] = ign
        used[fw] = ", ".join(f"{k}={v}" for k, v in settings.items())
    ran = tuple(traces)
    ref = reference if reference in traces else (ran[0] if ran else None)

    samples = _samples_table(batch, traces, prompts)
    mask = batch.response_mask

    rows = []
    note_diffs: dict[str, tuple[str, ...]] = {}
    reference_only: dict[str, tuple[str, ...]] = {}
    for fw in ran:
        t = traces[fw]
        if ref is None:
            d_rew = d_adv = math.nan
        else:
            r = traces[ref]
            d_rew = float((t.rewards.double() - r.rewards.double()).abs().max())
            valid = mask > 0
            d_adv = float((t.advantages.double() - r.advantages.double())[valid].abs().max())
            ref_notes, own = set(r.notes), set(t.notes)
            note_diffs[fw] = tuple(n for n in t.notes if n not in ref_notes)
            reference_only[fw] = tuple(n for n in r.notes if n not in own)
        rows.append(
            {
                "dialect": fw,
                "estimator": used[fw],
                "max |diff| reward": d_rew,
                "max |diff| advantage": d_adv,
                "settings without a key": ", ".join(ignored[fw]),
            }
        )
    summary = pd.DataFrame(
        rows,
        columns=[
            "dialect",
            "estimator",
            "max |diff| reward",
            "max |diff| advantage",
            "settings without a key",
        ],
    )
    return FrameworkComparison(
        traces=traces,
        samples=samples,
        summary=summary,
        note_diffs=note_diffs,
        reference_only=reference_only,
        skipped=skipped,
        reference=ref or "",
    )
