"""ROLL's policy update: its loss keys, the loss of each ``pg_variant``, the metrics it logs.

The loss half of ``roll.py`` (whose ``DIALECT`` record holds these names): the policy-update
keys with defaults, choices and help (policy-update.md 1.2); ``loss_spec``, ROLL's policy loss
as a ``LossSpec`` (``pg_variant`` ppo is ``ActorWorker.loss_func``, the others
``ActorPGWorker._compute_<variant>_loss``); ``loss_metrics``, the actor and critic metrics ROLL
logs under its own names, with the quirks it has (doubled ``cispo_`` prefixes, clip fractions
over every (B, T) position, the unmasked ``response_mask`` before the sample-level mask).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline.kl import token_kl
from roll_viz.core.pipeline.losses import F64, LossMode, LossSpec, MetricContext, aggregate

# ------------------------------------------------------------------ policy-update (loss) keys

_AGG = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
#: ROLL's aggregation names -> the canonical ``losses.AGG_MODES`` names.
AGG_CANON = {"seq-mean-token-sum-norm": "token-sum-norm"}

LOSS_DEFAULTS: dict[str, Any] = {
    "pg_variant": "ppo",
    "pg_clip": 0.2,
    "use_pg_clip_range": False,
    "pg_clip_low": 0.2,
    "pg_clip_high": 0.2,
    "dual_clip_loss": False,
    "loss_agg_mode": "seq-mean-token-mean",
    "importance_sampling": "token",
    "entropy_loss_coef": 0.0,
    "rl_loss_coef": 1.0,
    "value_clip": None,
    "cispo_epsilon_low": 0.1,
    "cispo_epsilon_high": 0.1,
    "cispo_use_unified_mask": False,
    "tis_lower_bound": 0.0,
    "tis_upper_bound": 1.0,
    "kimi15_tau": 0.1,
    "length_loss_weight": False,
    "difficulty_loss_weight": False,
    "topr_positive_weight": 1.0,
    "topr_negative_weight": 1.0,
}

LOSS_CHOICES: dict[str, tuple] = {
    "pg_variant": ("vanilla", "ppo", "cispo", "tis", "topr", "kimi15"),
    "loss_agg_mode": _AGG,
    "importance_sampling": ("token", "seq"),
}

LOSS_HELP: dict[str, str] = {
    "pg_variant": "actor_train.pg_variant: ppo = the default ActorWorker (clipped surrogate), "
    "vanilla = -A*logp (ActorPGWorker), cispo = -sg(clip(r, 1-lo, 1+hi))*A*logp, tis = "
    "-sg(clip(r, tis_lower_bound, tis_upper_bound))*A*logp, topr = plain PG on rows with score "
    "> 0 and TIS [0, 1] on the others, kimi15 = -A*logp + tau/2 * d^2.",
    "pg_clip": "pg_clip: PPO clip epsilon (both sides unless use_pg_clip_range); also sets the "
    "dual-clip constant 1 + 2*pg_clip.",
    "use_pg_clip_range": "use_pg_clip_range: use pg_clip_low / pg_clip_high, not pg_clip.",
    "pg_clip_low": "pg_clip_low: lower clip epsilon (only with use_pg_clip_range).",
    "pg_clip_high": "pg_clip_high: upper clip epsilon (only with use_pg_clip_range).",
    "dual_clip_loss": "dual_clip_loss: for A<0 cap the loss at -c*A with c = 1 + 2*pg_clip.",
    "loss_agg_mode": "loss_agg_mode: aggregation of the policy, KL and entropy terms; "
    "seq-mean-token-sum-norm is sum / width with no batch division (ROLL's width is the padded "
    "prompt + response - 1, roll-viz's the response width T).",
    "importance_sampling": "importance_sampling: token ratio or seq = exp(masked mean "
    "log-ratio) broadcast to the tokens (GSPO-like); no log-ratio clamp.",
    "entropy_loss_coef": "entropy_loss_coef: total -= coef * agg(entropy) when > 0.",
    "rl_loss_coef": "rl_loss_coef: multiplies (policy + KL loss) before the entropy term.",
    "value_clip": "value_clip: critic clip around the old values (None = plain MSE); the "
    "critic loss is always the mean over samples of per-sample token means.",
    "cispo_epsilon_low": "cispo_epsilon_low: CISPO weight floor 1 - eps (pg_variant cispo).",
    "cispo_epsilon_high": "cispo_epsilon_high: CISPO weight cap 1 + eps (pg_variant cispo).",
    "cispo_use_unified_mask": "cispo_use_unified_mask: also zero the tokens PPO would clip "
    "(A>0 and r>1+hi, A<0 and r<1-lo).",
    "tis_lower_bound": "tis_lower_bound: lower truncation of the TIS weight (pg_variant tis).",
    "tis_upper_bound": "tis_upper_bound: upper truncation of the TIS weight (pg_variant tis).",
    "kimi15_tau": "kimi15_tau: weight of the squared log-ratio penalty (pg_variant kimi15).",
    "length_loss_weight": "length_loss_weight: per-sample weights 1.5 - normalized length "
    "(rescaled to mean 1) on the policy term; actor/pg_loss stays unweighted.",
    "difficulty_loss_weight": "difficulty_loss_weight: per-sample weights 0.5 + 1.5 * "
    "difficulty (needs each sample's difficulty; skipped without it, as in ROLL).",
    "topr_positive_weight": "topr_positive_weight: weight of the rows with score > 0 (topr).",
    "topr_negative_weight": "topr_negative_weight: weight of the rows with score <= 0 (topr).",
}

#: Every key the policy update reads (loss table plus the reward-stage KL-loss keys).
LOSS_KEYS: tuple[str, ...] = (*LOSS_DEFAULTS, "use_kl_loss", "kl_loss_coef")

# ---------------------------------------------------------------------------- the update loss


def loss_agg_modes(cfg: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Canonical aggregation of each loss term.

    ``loss_agg_mode`` for policy, KL and entropy; the critic always takes the mean over all
    samples of per-sample token means.
    """
    mode = AGG_CANON.get(cfg["loss_agg_mode"], cfg["loss_agg_mode"])
    same = (mode, None)
    return {
        "policy": same,
        "kl": same,
        "entropy": same,
        "value": ("seq-mean-token-mean-all-rows", None),
    }


def loss_spec(cfg: dict[str, Any], notes: list[str]) -> LossSpec:
    """ROLL's policy loss as a ``LossSpec``; notes appended.

    The KL, entropy, critic and sample-weight settings every variant shares, plus the row of
    ``PG_VARIANTS``: ``pg_variant`` ppo is ``rlvr/actor_worker.py::ActorWorker.loss_func``;
    vanilla, cispo, tis, topr and kimi15 are ``rlvr/actor_pg_worker.py::ActorPGWorker``
    (``_compute_<variant>_loss``), which always uses the token ratio.
    """
    kwargs = {
        "kl_on": cfg["use_kl_loss"],
        "kl_estimator": "k3",
        "kl_clamp": 10.0,
        "beta": cfg["kl_loss_coef"],
        "entropy_coef": cfg["entropy_loss_coef"],
        "rl_coef": cfg["rl_loss_coef"],
        "value_clip": cfg["value_clip"],
        "length_weights": cfg["length_loss_weight"],
        "difficulty_weights": cfg["difficulty_loss_weight"],
    }
    if cfg["use_kl_loss"]:
        notes.append("ROLL KL loss: always k3 (clamped +-10), aggregated with loss_agg_mode")
    if cfg["length_loss_weight"]:
        notes.append(
            "length_loss_weight: policy term weighted per sample by 1.5 - normalized length, "
            "rescaled to mean 1 (compute_sample_weights)"
        )
    if cfg["difficulty_loss_weight"]:
        notes.append(
            "difficulty_loss_weight: policy term weighted per sample by 0.5 + 1.5 * difficulty "
            "(skipped when the samples carry no difficulty), rescaled to mean 1"
        )
    if cfg["loss_agg_mode"] == "seq-mean-token-sum-norm":
        notes.append(
            "seq-mean-token-sum-norm: ROLL divides by loss_mask.shape[-1], and its actor's mask "
            "is response_mask[:, 1:] over the padded prompt + response, so its divisor grows "
            "with the prompt length; roll-viz divides by T, the response width (ROLL's loss = "
            "this one x T / (P + T - 1) for prompts padded to P tokens)"
        )
    variant = PG_VARIANTS[cfg["pg_variant"]]
    return LossSpec(kind=variant.kind, **variant.params(cfg, notes), **kwargs)


def _pg_worker(cfg: Mapping[str, Any], notes: list[str]) -> None:
    """ActorPGWorker's note: its variants always use the token ratio."""
    if cfg["importance_sampling"] == "seq":
        notes.append(
            f"pg_variant {cfg['pg_variant']}: ActorPGWorker uses the token ratio (seq ignored)"
        )


def _ppo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = cfg["pg_clip"], cfg["pg_clip"]
    if cfg["use_pg_clip_range"]:
        low, high = cfg["pg_clip_low"], cfg["pg_clip_high"]
    level = "sequence" if cfg["importance_sampling"] == "seq" else "token"
    dual = 1.0 + 2.0 * cfg["pg_clip"] if cfg["dual_clip_loss"] else None
    notes.append(
        f"ROLL PPO: {level} ratio, no log-ratio clamp, clip [1-{low:g}, 1+{high:g}]"
        + (f", dual clip c = 1 + 2*pg_clip = {dual:g}" if dual else "")
    )
    return {"level": level, "clamp": None, "eps_low": low, "eps_high": high, "dual_clip": dual}


def _vanilla(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    _pg_worker(cfg, notes)
    notes.append("pg_variant vanilla: loss = -A * logp (no ratio, no clip)")
    return {"level": "token", "clamp": None}


def _topr(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    _pg_worker(cfg, notes)
    notes.append(
        "pg_variant topr: rows with score > 0 get -A * logp, the others "
        "-sg(clip(r, 0, 1)) * A * logp (split by the score's sign, not the advantage's)"
    )
    weights = (cfg["topr_positive_weight"], cfg["topr_negative_weight"])
    return {"level": "token", "clamp": None, "topr_weights": weights}


def _kimi15(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    _pg_worker(cfg, notes)
    tau = cfg["kimi15_tau"]
    notes.append(f"pg_variant kimi15: loss = -A * logp + {tau:g}/2 * (logp - old)^2")
    return {"level": "token", "clamp": None, "kimi_tau": tau, "unmasked_token_sum": True}


def _truncated_is(cfg: Mapping[str, Any], notes: list[str], lo: float, hi: float, unified: bool):
    _pg_worker(cfg, notes)
    notes.append(f"pg_variant {cfg['pg_variant']}: loss = -sg(clip(r, {lo:g}, {hi:g})) * A * logp")
    return {
        "level": "token",
        "clamp": None,
        "cispo_low": lo,
        "cispo_high": hi,
        "unified_mask": unified,
    }


def _cispo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    lo, hi = 1.0 - cfg["cispo_epsilon_low"], 1.0 + cfg["cispo_epsilon_high"]
    return _truncated_is(cfg, notes, lo, hi, cfg["cispo_use_unified_mask"])


def _tis(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    return _truncated_is(cfg, notes, cfg["tis_lower_bound"], cfg["tis_upper_bound"], False)


def loss_metrics(ctx: MetricContext) -> dict[str, float]:
    """ROLL's logged actor/critic metrics under the names it logs (``@sum`` tags stripped).

    The metrics every variant logs, then the variant's own (its ``PG_VARIANTS`` row: clip
    fractions, ratio statistics and the variant's cache keys), then the critic's. Two quirks are
    reproduced, each with a note beside the metric (``ctx.metric_notes``):
    ``ActorPGWorker._get_pg_metrics`` logs ``f"actor/cispo_{key}"`` over cache keys that already
    start with ``cispo_`` (and ``kimi15_``), so the names carry a doubled prefix, and its
    clip fractions are ``.mean()`` over every (B, T) position; with ``importance_sampling: seq``
    ``ActorWorker.loss_func`` broadcasts the sequence ratio to every position (``expand_as``) and
    its token-mean ``agg_loss`` sums the clip indicator without the mask, so padded positions
    count and the logged fractions can exceed 1.
    """
    spec, m = ctx.spec, ctx.m
    notes = ctx.metric_notes
    um = _Unmasked(ctx)
    out: dict[str, float] = {
        "actor/pg_loss": ctx.agg(ctx.pg),
        "actor/weighted_pg_loss": ctx.item("policy"),
        "actor/total_loss": ctx.total.detach().item(),
    }
    if "outside_reg_unit" in ctx.extra:  # kimi15 token-mean: the dropped samples' regulariser
        out["actor/pg_loss"] += ctx.extra["outside_reg_unit"].sum().item() / max(m.sum().item(), 1)
    for name, x, x_final in (
        ("actor/approxkl", 0.5 * um.d * um.d, 0.5 * ctx.d * ctx.d),
        ("actor/policykl", um.d, ctx.d),
    ):
        out[name] = um.agg(x)
        um.note(name, ctx.agg(x_final))
    if ctx.kl_tok is not None:
        out["actor/kl_loss"] = ctx.item("kl")
    elif ctx.ref is not None:  # both workers compute and log the k3 KL loss every step
        kl = token_kl(ctx.logp, ctx.ref, m, "k3", 10.0, None)
        out["actor/kl_loss"] = ctx.agg(kl, "kl")
        notes["actor/kl_loss"] = (
            "logged with use_kl_loss off: ROLL computes the k3 KL loss every step and adds it to "
            "the loss only with use_kl_loss"
        )
    if spec.length_weights or spec.difficulty_weights:
        w = ctx.row_weights
        out["actor/sample_weights_mean"] = w.mean().item()
        out["actor/sample_weights_min"] = w.min().item()
        out["actor/sample_weights_max"] = w.max().item()
    out.update(PG_VARIANTS[ctx.cfg["pg_variant"]].metrics(ctx))
    if ctx.terms["value"] is not None:
        out["critic/loss"] = ctx.item("value")
        # ROLL: row-mean of (clipped error larger), mean over all rows; without value_clip it
        # logs the mean squared error under the same name
        vf = ctx.vf_clipped.to(F64) if spec.value_clip is not None else None
        out["critic/clipfrac"] = (
            aggregate(vf, m, "seq-mean-token-mean-all-rows").item()
            if vf is not None
            else 2.0 * ctx.item("value")
        )
    return out


def _ratio_metrics(ctx: MetricContext, um: _Unmasked, pg_worker: bool) -> dict[str, float]:
    """The ratio statistics actor/ratio_mean, _max and _min.

    ActorPGWorker logs the token ratio for every variant (its mean divided by
    final_response_mask's rows); ActorWorker the ratio of its loss.
    """
    m = ctx.m
    ratio = torch.where(ctx.mask, torch.exp(ctx.d), 0.0) if pg_worker else ctx.r
    final_mean = aggregate(ratio, m, "seq-mean-token-mean").item()
    ratio_u = um.token_ratio() if pg_worker or ctx.spec.level == "token" else um.seq_ratio()
    u = um.m
    out = {"actor/ratio_mean": aggregate(ratio_u, u, "seq-mean-token-mean").item()}
    if um.on and pg_worker:  # ActorPGWorker: divided by final_response_mask's rows
        out["actor/ratio_mean"] *= um.rows / um.final_rows
    um.note("actor/ratio_mean", final_mean)
    out["actor/ratio_max"] = (ratio_u * u).max().item()
    out["actor/ratio_min"] = (ratio_u * u + (1.0 - u) * 1e10).min().item()
    return out


def _ppo_metrics(ctx: MetricContext) -> dict[str, float]:
    """ActorWorker's clip fractions and ratio statistics."""
    spec, m = ctx.spec, ctx.m
    notes = ctx.metric_notes
    um = _Unmasked(ctx)
    out: dict[str, float] = {}
    n_valid = max(m.sum().item(), 1.0)
    lo, hi = 1.0 - spec.eps_low, 1.0 + spec.eps_high
    high, low = (ctx.r > hi) & ctx.mask, (ctx.r < lo) & ctx.mask
    surr1, surr2 = ctx.surrogates()
    masked = {"high": high, "low": low, "": high | low}
    ratio_u = um.token_ratio()
    every = {"high": ratio_u > hi, "low": ratio_u < lo}
    every[""] = every["high"] | every["low"]
    for key, flags in masked.items():
        name = f"actor/ppo_ratio_{key}_clipfrac" if key else "actor/ppo_ratio_clipfrac"
        out[name] = ctx.token_mean(flags)
        if um.on and spec.level == "token":  # agg_loss token-mean sums every position
            out[name] = every[key].to(F64).sum().item() / n_valid
            notes[name] = (
                f"ROLL's token-mean agg_loss sums the clip indicator over every position, "
                f"the {um.dropped:g} sample-masked tokens included, and divides by the "
                f"{n_valid:g} tokens of final_response_mask (can exceed 1); over "
                f"final_response_mask it is {ctx.token_mean(flags):.6g}"
            )
    if spec.level == "sequence":
        lengths = m.sum(-1, keepdim=True).clamp(min=1.0)
        seq = torch.exp(ctx.d.sum(-1, keepdim=True) / lengths).expand_as(m)
        counts = {"high": seq > hi, "low": seq < lo}
        counts[""] = counts["high"].to(F64) + counts["low"].to(F64)
        for key, flags in counts.items():
            name = f"actor/ppo_ratio_{key}_clipfrac" if key else "actor/ppo_ratio_clipfrac"
            masked_value = out[name]
            out[name] = flags.to(F64).sum().item() / n_valid
            notes[name] = (
                f"counts padded positions: importance_sampling seq broadcasts each "
                f"sequence's ratio to all {m.shape[1]} positions and ROLL's token-mean "
                f"agg_loss sums them without the mask, divided by the {n_valid:g} valid "
                f"tokens; over the valid tokens only it is {masked_value:.6g}"
            )
    flags = surr2 < surr1  # 0 outside final_response_mask (A = 0 there)
    out["actor/clipfrac"] = ctx.agg(flags)
    if ctx.modes["policy"][0] != "token-mean":  # rows: the unmasked response_mask's
        out["actor/clipfrac"] = um.agg(flags)
        um.note("actor/clipfrac", ctx.agg(flags))
    return out | _ratio_metrics(ctx, um, pg_worker=False)


def _vanilla_metrics(ctx: MetricContext) -> dict[str, float]:
    return _ratio_metrics(ctx, _Unmasked(ctx), pg_worker=True)


def _truncation_counts(ctx: MetricContext, um: _Unmasked, prefix: str, doubled: bool) -> dict:
    """The cispo / tis clip fractions: .mean() over all (B, T) positions (ActorPGWorker)."""
    spec, m = ctx.spec, ctx.m
    numel = float(m.numel())
    n_valid = max(m.sum().item(), 1.0)
    # the token ratio at every unmasked token (sample-masked rows included)
    r_u = um.token_ratio()
    counts = {}
    for final, r_x, where in ((False, r_u, um.mask), (True, ctx.r, ctx.mask)):
        lower = ((r_x < spec.cispo_low) & where).sum().item()
        upper = ((r_x > spec.cispo_high) & where).sum().item()
        counts[final] = {"lower": lower, "upper": upper, "total": lower + upper}
    out = {}
    for key, count in counts[False].items():
        name = f"{prefix}{key}_clipfrac"
        out[name] = count / numel
        why = "the doubled prefix is ROLL's (f'actor/cispo_{key}' over keys named cispo_*); "
        where = "the valid tokens" if not um.on else "the tokens of final_response_mask"
        ctx.metric_notes[name] = (
            (why if doubled else "")
            + f".mean() over all {numel:g} (B x T) positions, padding included; over the "
            f"{n_valid:g} {where} it is {counts[True][key] / n_valid:.6g}"
        )
    return out


def _cispo_metrics(ctx: MetricContext) -> dict[str, float]:
    spec, cfg = ctx.spec, ctx.cfg
    numel = float(ctx.m.numel())
    n_valid = max(ctx.m.sum().item(), 1.0)
    um = _Unmasked(ctx)
    out = _ratio_metrics(ctx, um, pg_worker=True)
    out |= _truncation_counts(ctx, um, "actor/cispo_cispo_", doubled=True)
    weight = um.token_ratio().clamp(spec.cispo_low, spec.cispo_high)
    weight_final = ctx.r.clamp(spec.cispo_low, spec.cispo_high)
    out["actor/cispo_cispo_epsilon_low"] = cfg["cispo_epsilon_low"]
    out["actor/cispo_cispo_epsilon_high"] = cfg["cispo_epsilon_high"]
    out["actor/cispo_cispo_clip_lower"] = spec.cispo_low
    out["actor/cispo_cispo_clip_upper"] = spec.cispo_high
    out["actor/cispo_cispo_use_unified_mask"] = float(spec.unified_mask)
    if spec.unified_mask:  # .mean() over all (B, T) positions, like the clip fractions
        pos = (ctx.adv > 0) & (ctx.r > spec.cispo_high) & ctx.mask
        neg = (ctx.adv < 0) & (ctx.r < spec.cispo_low) & ctx.mask
        n_pos, n_neg = float(pos.sum()), float(neg.sum())
        out["actor/cispo_cispo_masked_positive_tokens"] = n_pos / numel
        out["actor/cispo_cispo_masked_negative_tokens"] = n_neg / numel
        out["actor/cispo_cispo_kept_tokens"] = 1.0 - (n_pos + n_neg) / numel
        ctx.metric_notes["actor/cispo_cispo_kept_tokens"] = (
            f".mean() over all {numel:g} (B x T) positions: padding counts as kept; "
            f"over the {n_valid:g} valid tokens it is "
            f"{1.0 - (n_pos + n_neg) / n_valid:.6g}"
        )
    mode = "seq-mean-token-mean-all-rows"
    out["actor/cispo_clipped_ratio_mean"] = aggregate(weight, um.m, mode).item()
    um.note("actor/cispo_clipped_ratio_mean", aggregate(weight_final, ctx.m, mode).item())
    return out


def _tis_metrics(ctx: MetricContext) -> dict[str, float]:
    spec = ctx.spec
    um = _Unmasked(ctx)
    out = _ratio_metrics(ctx, um, pg_worker=True)
    out |= _truncation_counts(ctx, um, "actor/tis_", doubled=False)
    weight = um.token_ratio().clamp(spec.cispo_low, spec.cispo_high)
    weight_final = ctx.r.clamp(spec.cispo_low, spec.cispo_high)
    mode = "seq-mean-token-mean"
    out["actor/tis_clipped_ratio_mean"] = aggregate(weight, um.m, mode).item()
    um.note("actor/tis_clipped_ratio_mean", aggregate(weight_final, ctx.m, mode).item())
    out["actor/tis_lower_bound"] = spec.cispo_low
    out["actor/tis_upper_bound"] = spec.cispo_high
    return out


def _topr_metrics(ctx: MetricContext) -> dict[str, float]:
    spec, m = ctx.spec, ctx.m
    numel = float(m.numel())
    n_valid = max(m.sum().item(), 1.0)
    um = _Unmasked(ctx)
    out = _ratio_metrics(ctx, um, pg_worker=True)
    positive = ctx.extra["topr_positive_unit"][:, 0]  # by score, empty rows counted
    n_pos = float(positive.sum())
    B = m.shape[0]
    pos_rows = positive.to(F64)[:, None]
    neg_rows = 1.0 - pos_rows
    w_pos, w_neg = spec.topr_weights
    # over the unmasked response_mask (A = 0 on the dropped samples' tokens)
    weighted = {"positive": um.agg(ctx.pg * pos_rows), "negative": um.agg(ctx.pg * neg_rows)}
    for side, weight in (("positive", w_pos), ("negative", w_neg)):
        out[f"actor/topr_weighted_{side}_loss"] = weighted[side]
        final = ctx.agg(ctx.pg * (pos_rows if side == "positive" else neg_rows))
        um.note(f"actor/topr_weighted_{side}_loss", final)
        if weight != 0:
            out[f"actor/topr_{side}_loss"] = weighted[side] / weight
            um.note(f"actor/topr_{side}_loss", final / weight)
    out["actor/topr_positive_samples"] = n_pos
    out["actor/topr_negative_samples"] = float(B) - n_pos
    out["actor/topr_positive_ratio"] = n_pos / (B + 1e-8)
    out["actor/topr_negative_ratio"] = (B - n_pos) / (B + 1e-8)
    upper = ((ctx.r > 1.0) & (neg_rows > 0) & ctx.mask).sum().item()
    out["actor/topr_negative_upper_clipfrac"] = upper / numel
    out["actor/topr_negative_lower_clipfrac"] = 0.0
    out["actor/topr_negative_total_clipfrac"] = upper / numel
    ctx.metric_notes["actor/topr_negative_total_clipfrac"] = (
        f".mean() over all {numel:g} (B x T) positions; over the {n_valid:g} valid tokens "
        f"it is {upper / n_valid:.6g}"
    )
    out["actor/topr_positive_weight"] = spec.topr_weights[0]
    out["actor/topr_negative_weight"] = spec.topr_weights[1]
    return out


def _kimi15_metrics(ctx: MetricContext) -> dict[str, float]:
    spec = ctx.spec
    um = _Unmasked(ctx)
    out = _ratio_metrics(ctx, um, pg_worker=True)
    log_ratio = torch.where(  # every unmasked token, the dropped samples' included
        um.mask, torch.log(um.token_ratio() + 1e-8), math.log(1.0 + 1e-8)
    )
    grad_mag = (ctx.adv * log_ratio).abs().mean().item()
    reg_mag = (spec.kimi_tau * log_ratio.pow(2) * 0.5).mean().item()
    out["actor/kimi15_kimi15_tau"] = spec.kimi_tau
    out["actor/kimi15_kimi15_log_ratio_mean"] = log_ratio.mean().item()
    out["actor/kimi15_kimi15_log_ratio_std"] = log_ratio.std().item()
    out["actor/kimi15_kimi15_log_ratio_abs_mean"] = log_ratio.abs().mean().item()
    out["actor/kimi15_kimi15_policy_grad_magnitude"] = grad_mag
    out["actor/kimi15_kimi15_kl_reg_magnitude"] = reg_mag
    out["actor/kimi15_kimi15_reg_ratio"] = reg_mag / (grad_mag + 1e-8)
    for name in list(out):
        if name.startswith("actor/kimi15_kimi15_log_ratio"):
            ctx.metric_notes[name] = (
                "doubled prefix as ROLL logs it; a mean over all (B x T) positions, where "
                "padding holds log(1 + 1e-8)"
            )
    return out


#: ``pg_variant`` -> the kind it runs, its parameters and the metrics ROLL logs for it
#: (``ActorWorker`` for ppo, ``ActorPGWorker._compute_<variant>_loss`` for the others).
PG_VARIANTS: dict[str, LossMode] = {
    "ppo": LossMode("ppo", _ppo, _ppo_metrics),
    "vanilla": LossMode("pg", _vanilla, _vanilla_metrics),
    "cispo": LossMode("cispo", _cispo, _cispo_metrics),
    "tis": LossMode("cispo", _tis, _tis_metrics),
    "topr": LossMode("topr", _topr, _topr_metrics),
    "kimi15": LossMode("kimi", _kimi15, _kimi15_metrics),
}


class _Unmasked:
    """ROLL's unmasked ``response_mask`` beside the loss's final mask (``ctx.metric_mask``).

    Without a sample-level mask (or one that drops nothing) it is the final mask itself.
    """

    def __init__(self, ctx: MetricContext):
        self.ctx = ctx
        mm = ctx.metric_mask
        self.on = mm is not None and bool((mm & ~ctx.mask).any())
        self.mask = mm if self.on else ctx.mask
        self.m = self.mask.to(F64)
        self.d = ctx.metric_d if self.on else ctx.d
        self.dropped = float(self.m.sum() - ctx.m.sum())
        self.rows = max(float((self.m.sum(-1) > 0).sum()), 1.0)
        self.final_rows = max(float((ctx.m.sum(-1) > 0).sum()), 1.0)

    def agg(self, x: Tensor) -> float:
        """A (B, T) quantity aggregated with ``loss_agg_mode`` over the unmasked mask."""
        return aggregate(x.to(F64), self.m, *self.ctx.modes["policy"]).item()

    def token_ratio(self) -> Tensor:
        """exp(logp - old) on the unmasked tokens, 1 elsewhere (a recomputed pad token)."""
        return torch.where(self.mask, torch.exp(self.d), 1.0)

    def seq_ratio(self) -> Tensor:
        """The importance_sampling seq ratio on the unmasked tokens.

        exp(mean d over the final mask) per row; 1 for a dropped row (ROLL's masked_mean of an
        empty row is 0); 1 off the unmasked tokens.
        """
        m = self.ctx.m
        lengths = m.sum(-1, keepdim=True)
        mean = torch.where(lengths > 0, self.ctx.d.sum(-1, keepdim=True) / lengths.clamp(min=1), 0)
        return torch.where(self.mask, torch.exp(mean).expand_as(m), 1.0)

    def note(self, name: str, final_value: float) -> None:
        """Beside ``name``: logged over the unmasked mask; its value over the final mask."""
        if not self.on:
            return
        self.ctx.metric_notes[name] = (
            f"logged over ROLL's response_mask before the sample-level mask ({self.m.sum():g} "
            f"tokens, the {self.dropped:g} tokens of dropped samples included); over "
            f"final_response_mask, where the loss runs, it is {final_value:.6g}"
        )
