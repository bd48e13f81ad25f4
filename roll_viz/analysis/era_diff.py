"""The recipes of record on the same batch, and MaxRL next to GRPO.

``diff_eras`` runs the recipes of record (``core.pipeline.eras``: "GRPO as published (2024)",
prime-rl, Tinker, DeepSeek-V3.2, ScaleRL / Olmo 3, or any of them) in one dialect on one batch:
each recipe's native config through ``run`` (advantages) and ``policy_loss`` (the first update:
pi = pi_old unless ``new_logprobs`` is given), a filtering recipe on the batch left after
dropping its zero-variance groups. The per-sample table puts them side by side: advantage, the
sample's token divisor (1 / its aggregation weight), its share of the loss, of the KL term and
of the gradient, and whether its group was filtered.

What roll-viz simplifies: one batch and one update (the frameworks repeat the update over
mini-batches and epochs); the zero-variance filter drops groups by exact equality in every dialect
(OpenRLHF's own rule keeps groups whose mean lies strictly inside a range, ROLL's std_filter
compares with a threshold) and does not refill the batch with new prompts as DAPO's dynamic
sampling does, so a filtering recipe's batch is smaller.

``maxrl_vs_grpo`` sets MaxRL (roll-viz's own estimator, ``advantages.maxrl_advantages``) beside
GRPO per answer and per prompt: a right answer's advantage is (1 - p) / p under MaxRL and
(1 - p) / std under GRPO, so MaxRL pushes hardest where the pass rate p is small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.ops import group_stats
from roll_viz.core.pipeline import (
    ESTIMATOR_KEY,
    agg_weights,
    dialects,
    loss_agg_modes,
    policy_loss,
    resolve_config,
    run,
)
from roll_viz.core.pipeline.advantages import (
    EstimatorParams,
    grpo_advantages,
    maxrl_advantages,
)
from roll_viz.core.pipeline.eras import ERAS, EraPreset
from roll_viz.core.records import Batch, Trace

F64 = torch.float64


@dataclass(frozen=True)
class EraRun:
    """One era in one dialect on one batch.

    Attributes:
        era: the preset.
        config: the resolved native config.
        kept: (B,) bool: rows in the loss (False: the row's group was filtered out).
        filtered: prompts of the groups dropped before batching.
        trace: the pipeline's Trace on the kept rows (None when every group was dropped).
        advantages: (B, T) advantages on the full batch's rows (0 on dropped rows).
        loss: the policy-update loss on the kept rows as a float (0 when none is left).
        policy_term: the aggregated policy term.
        kl_term: the KL term times its coefficient (0 without a KL loss).
        weights: (B, T) aggregation weights of the policy term (0 on dropped rows).
        pg_loss: (B, T) per-token policy loss (0 on dropped rows).
        kl_share: (B,) each row's share of ``kl_term``.
        grad: (B, T) d loss / d log pi_t (0 on dropped rows).
        denominator: the policy term's aggregation mode and its divisor in words.
        clip: (low, high) of the ratio clip.
    """

    era: EraPreset
    config: dict
    kept: Tensor
    filtered: tuple[str, ...]
    trace: Trace | None
    advantages: Tensor
    loss: float
    policy_term: float
    kl_term: float
    weights: Tensor
    pg_loss: Tensor
    kl_share: Tensor
    grad: Tensor
    denominator: str
    clip: tuple[float, float]


@dataclass(frozen=True)
class EraDiff:
    """The recipes of record on one batch in one dialect.

    Attributes:
        framework: the dialect.
        runs: record key -> EraRun, in the order asked (an alias asks for its record).
        samples: one row per answer: sample, prompt, score, then per era (tag in brackets)
            "A", "denominator", "loss weight" (its tokens' aggregation weights summed: the
            answer's say in the loss, >= 0), "loss share" (its signed part of the loss value),
            "KL share", "gradient" (sum over its tokens of d loss / d log pi) and "filtered".
        summary: one row per era: recipe, native estimator, loss, policy term, KL term, the
            denominator, rows and tokens in the loss, groups filtered, clip range.
        notes: era key -> what this dialect cannot say of the era's recipe.
    """

    framework: str
    runs: dict[str, EraRun]
    samples: pd.DataFrame
    summary: pd.DataFrame
    notes: dict[str, tuple[str, ...]]


def zero_variance_rows(scores: Tensor, group_ids: Tensor) -> Tensor:
    """(B,) bool: rows of groups of two or more whose rewards are all exactly equal."""
    stats = group_stats(scores.to(F64), group_ids.to(torch.long), ddof=1)
    return (stats.count > 1) & (stats.std == 0)


def subset(batch: Batch, rows: Tensor) -> Batch:
    """The rows of a batch, group ids renumbered 0..P'-1 in order (labels kept in step)."""
    gids = batch.group_ids[rows]
    uniq, inverse = torch.unique(gids, return_inverse=True)
    labels = tuple(batch.group_labels)
    pick = lambda x: None if x is None else x[rows]  # noqa: E731
    comps = None
    if batch.reward_components is not None:
        comps = {k: torch.as_tensor(v)[rows] for k, v in batch.reward_components.items()}
    return Batch(
        scores=batch.scores[rows],
        response_mask=batch.response_mask[rows],
        group_ids=inverse.to(torch.long),
        group_labels=tuple(labels[g] for g in uniq.tolist()) if labels else (),
        logprobs=pick(batch.logprobs),
        ref_logprobs=pick(batch.ref_logprobs),
        values=pick(batch.values),
        baseline_scores=pick(batch.baseline_scores),
        reward_components=comps,
        sum_pi_squared=pick(batch.sum_pi_squared),
    )


def _prompts(batch: Batch, prompts: Sequence[str] | None) -> list[str]:
    n = int(batch.group_ids.max()) + 1 if batch.group_ids.numel() else 0
    if prompts is not None:
        return list(prompts)
    if batch.group_labels:
        return [str(x) for x in batch.group_labels]
    return [f"prompt {g}" for g in range(n)]


def _denominator(mode: str, mask: Tensor) -> str:
    rows = int((mask.sum(-1) > 0).sum())
    tokens = int(mask.sum())
    if mode.startswith("token-mean"):
        return f"{mode}: all {tokens} tokens"
    if mode.startswith("seq-mean-token-mean"):
        n = mask.shape[0] if mode.endswith("all-rows") else rows
        return f"{mode}: {n} answers x each answer's own length"
    return f"{mode}: see the aggregation modes ({tokens} tokens, {rows} answers)"


def run_era(
    batch: Batch,
    era: EraPreset,
    framework: str,
    prompts: Sequence[str] | None = None,
    new_logprobs: Tensor | None = None,
) -> EraRun:
    """One era's advantages and loss in one dialect.

    Args:
        batch: needs logprobs and ref_logprobs (the rollout policy's and the reference's).
        era: the preset.
        framework: the dialect.
        prompts: (P,) display names of the groups (default the batch's labels).
        new_logprobs: (B, T) the current policy's log-probs (default: the rollout's, the first
            update, where every ratio is 1 and no clip acts).

    Returns:
        EraRun.

    Raises:
        ValueError: the batch has no log-probs, or the dialect rejects the config.
    """
    if batch.logprobs is None or batch.ref_logprobs is None:
        raise ValueError("logprobs: the era diff needs the batch's logprobs and ref_logprobs")
    cfg = resolve_config(framework, era.config(framework))
    names = _prompts(batch, prompts)
    mask = torch.as_tensor(batch.response_mask, dtype=F64)
    B = mask.shape[0]
    kept = torch.ones(B, dtype=torch.bool)
    if era.filter_zero_variance:
        kept = ~zero_variance_rows(torch.as_tensor(batch.scores), batch.group_ids)
    filtered = tuple(
        names[g] for g in torch.unique(batch.group_ids[~kept]).tolist() if g < len(names)
    )
    adv = torch.zeros_like(mask)
    weights = torch.zeros_like(mask)
    pg_loss = torch.zeros_like(mask)
    grad = torch.zeros_like(mask)
    kl_share = torch.zeros(B, dtype=F64)
    modes = loss_agg_modes(framework, cfg)
    mode = modes["policy"][0]
    trace, loss, policy_term, kl_term = None, 0.0, 0.0, 0.0
    if bool(kept.any()):
        sub = subset(batch, kept)
        trace = run(sub, framework, cfg)
        lp = sub.logprobs if new_logprobs is None else torch.as_tensor(new_logprobs)[kept]
        res = policy_loss(
            framework,
            cfg,
            logprobs=torch.as_tensor(lp, dtype=F64),
            old_logprobs=sub.logprobs,
            advantages=trace.advantages,
            response_mask=sub.response_mask,
            ref_logprobs=sub.ref_logprobs,
        )
        adv[kept] = trace.advantages
        weights[kept] = res.per_token["loss_weight"]
        pg_loss[kept] = res.per_token["pg_loss"]
        grad[kept] = res.per_token["grad_coef"]
        loss = float(res.total.detach())
        policy_term = float(res.terms["policy"].detach()) * res.coefficients["rl"]
        if res.terms["kl"] is not None:
            coef = res.coefficients["kl"] * res.coefficients["rl"]
            kl_term = coef * float(res.terms["kl"].detach())
            w_kl = agg_weights(sub.response_mask, *modes["kl"])
            kl_share[kept] = coef * (w_kl * res.per_token["kl"]).sum(-1)
        denominator = _denominator(mode, sub.response_mask)
    else:
        denominator = f"{mode}: no answer left"
    return EraRun(
        era=era,
        config=cfg,
        kept=kept,
        filtered=filtered,
        trace=trace,
        advantages=adv,
        loss=loss,
        policy_term=policy_term,
        kl_term=kl_term,
        weights=weights,
        pg_loss=pg_loss,
        kl_share=kl_share,
        grad=grad,
        denominator=denominator,
        clip=dialects.get(framework).clip_range(cfg),
    )


def _first_valid(x: Tensor, mask: Tensor) -> Tensor:
    """(B,) the value on each row's first valid token (0 for an empty row)."""
    first = (mask > 0).to(torch.long).argmax(-1)
    out = x.gather(-1, first[:, None])[:, 0]
    return torch.where(mask.sum(-1) > 0, out, torch.zeros_like(out))


def diff_eras(
    batch: Batch,
    framework: str,
    prompts: Sequence[str] | None = None,
    new_logprobs: Tensor | None = None,
    eras: Sequence[str] | None = None,
) -> EraDiff:
    """The recipes of record side by side on one batch in one dialect.

    Args:
        batch: scores, response_mask, group_ids, logprobs and ref_logprobs.
        framework: the dialect ("roll", "verl", "openrlhf", "trl").
        prompts: (P,) display names of the groups.
        new_logprobs: (B, T) the current policy's log-probs (default: the first update).
        eras: keys of ``core.pipeline.eras.ERAS`` (an alias resolves to its record, a repeat
            runs once); default every record.

    Returns:
        EraDiff.

    Raises:
        KeyError: a key that names no recipe.
    """
    names = _prompts(batch, prompts)
    mask = torch.as_tensor(batch.response_mask, dtype=F64)
    scores = torch.as_tensor(batch.scores, dtype=F64)
    gids = batch.group_ids.tolist()
    records = [ERAS[k] for k in (tuple(ERAS) if eras is None else eras)]
    runs = {r.key: run_era(batch, r, framework, names, new_logprobs) for r in records}
    table: dict[str, list] = {
        "sample": list(range(mask.shape[0])),
        "prompt": [names[g] if g < len(names) else f"prompt {g}" for g in gids],
        "score": scores.tolist(),
    }
    for er in runs.values():
        tag = er.era.short
        w = _first_valid(er.weights, mask)
        pg_share = (er.weights * er.pg_loss).sum(-1)
        table[f"A [{tag}]"] = _first_valid(er.advantages, mask).tolist()
        table[f"denominator [{tag}]"] = [1.0 / x if x > 0 else float("nan") for x in w.tolist()]
        table[f"loss weight [{tag}]"] = er.weights.sum(-1).tolist()
        table[f"loss share [{tag}]"] = (pg_share + er.kl_share).tolist()
        table[f"KL share [{tag}]"] = er.kl_share.tolist()
        table[f"gradient [{tag}]"] = er.grad.sum(-1).tolist()
        table[f"filtered [{tag}]"] = (~er.kept).tolist()
    summary = pd.DataFrame(
        [
            {
                "era": er.era.label,
                "recipe": "; ".join(er.era.recipe),
                "estimator": f"{ESTIMATOR_KEY[framework]}: {er.config[ESTIMATOR_KEY[framework]]}",
                "loss": er.loss,
                "policy term": er.policy_term,
                "KL term": er.kl_term,
                "denominator": er.denominator,
                "answers in the loss": int(er.kept.sum()),
                "tokens in the loss": int(mask[er.kept].sum()),
                "groups filtered": ", ".join(er.filtered) or "none",
                "clip (low, high)": f"{er.clip[0]:g}, {er.clip[1]:g}",
            }
            for er in runs.values()
        ]
    )
    notes = {k: er.era.dialect_notes(framework) for k, er in runs.items()}
    return EraDiff(framework, runs, pd.DataFrame(table), summary, notes)


#: the per-answer columns ``EraDiff.samples`` holds once per recipe (the recipe's tag in brackets)
ANSWER_COLUMNS = (
    "A",
    "denominator",
    "loss weight",
    "loss share",
    "KL share",
    "gradient",
    "filtered",
)


def long_samples(diff: EraDiff) -> pd.DataFrame:
    """``diff.samples`` with one row per answer and recipe (narrow enough for a projector).

    Returns:
        sample, prompt, score, recipe (its label), then ``ANSWER_COLUMNS``; each answer's rows
        together, in the order of ``diff.runs``.
    """
    s = diff.samples
    parts = []
    for er in diff.runs.values():
        part = s[["sample", "prompt", "score"]].assign(recipe=er.era.label)
        for column in ANSWER_COLUMNS:
            part[column] = s[f"{column} [{er.era.short}]"]
        parts.append(part)
    table = pd.concat(parts, ignore_index=True)
    return table.sort_values("sample", kind="stable").reset_index(drop=True)


#: said under the groups table where a prompt has no answer scored exactly 1 (its "A right" empty)
NO_RIGHT_ANSWER = (
    "A right is empty (None) for a prompt where no answer scored exactly 1: MaxRL reads rewards "
    "as 0/1 pass rates, so with this reward such a prompt has no right answer to weigh. The "
    "per-answer advantages above still use the rewards as they are."
)


@dataclass(frozen=True)
class MaxRLComparison:
    """MaxRL beside GRPO on one batch's rewards.

    Attributes:
        samples: one row per answer: sample, prompt, score, "A GRPO", "A MaxRL".
        groups: one row per prompt: prompt, n, pass rate p (the mean reward), std, the advantage
            of a right answer under each ("A right, GRPO" = (1 - p) / (std + eps), "A right,
            MaxRL" = (1 - p) / (p + eps); NaN when no answer scored 1), and each estimator's
            total |A| over the group (how hard the prompt pushes the update).
    """

    samples: pd.DataFrame
    groups: pd.DataFrame


def maxrl_vs_grpo(
    scores: Tensor, group_ids: Tensor, prompts: Sequence[str] | None = None, eps: float = 1e-6
) -> MaxRLComparison:
    """MaxRL and GRPO advantages per answer and per prompt (rewards in [0, 1] read as pass rates).

    Args:
        scores: (B,) rewards (MaxRL assumes 0/1; other values are used as they are).
        group_ids: (B,) long prompt index.
        prompts: (P,) display names.
        eps: added to the std (GRPO) and to |mean| (MaxRL).

    Returns:
        MaxRLComparison.
    """
    seq = torch.as_tensor(scores, dtype=F64)
    gids = torch.as_tensor(group_ids).to(torch.long)
    mask = torch.ones(seq.shape[0], 1, dtype=F64)
    params = EstimatorParams(seq_rewards=seq, std_eps=eps)
    tokens = torch.zeros_like(mask)
    a_grpo = grpo_advantages(tokens, mask, gids, params).advantages[:, 0]
    a_max = maxrl_advantages(tokens, mask, gids, params).advantages[:, 0]
    n_groups = int(gids.max()) + 1 if gids.numel() else 0
    names = list(prompts) if prompts is not None else [f"prompt {g}" for g in range(n_groups)]
    samples = pd.DataFrame(
        {
            "sample": list(range(seq.shape[0])),
            "prompt": [names[g] for g in gids.tolist()],
            "score": seq.tolist(),
            "A GRPO": a_grpo.tolist(),
            "A MaxRL": a_max.tolist(),
        }
    )
    rows = []
    for g in range(n_groups):
        idx = torch.nonzero(gids == g).flatten()
        if idx.numel() == 0:
            continue
        xs = seq[idx]
        p = float(xs.mean())
        std = float(xs.std()) if idx.numel() > 1 else float("nan")
        right = bool((xs == 1).any())
        rows.append(
            {
                "prompt": names[g],
                "n": int(idx.numel()),
                "pass rate p": p,
                "std": std,
                "A right, GRPO": (1 - p) / (std + eps) if right else float("nan"),
                "A right, MaxRL": (1 - p) / (p + eps) if right else float("nan"),
                "sum |A| GRPO": float(a_grpo[idx].abs().sum()),
                "sum |A| MaxRL": float(a_max[idx].abs().sum()),
            }
        )
    return MaxRLComparison(samples, pd.DataFrame(rows))
