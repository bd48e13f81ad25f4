"""verl's policy-update keys, its loss modes and the metrics it logs for each.

``LOSS_DEFAULTS`` / ``LOSS_CHOICES`` / ``LOSS_HELP``: the policy-update keys (flattened:
``actor.policy_loss.loss_mode`` -> ``loss_mode``) with defaults, choices and help.
``LOSS_MODES``: ``loss_mode`` (bypass_mode by its ``loss_type``) -> the kind it runs, its
parameters (with the note that says what verl computes) and the metrics verl logs for it;
``loss_metrics`` the logged actor/critic metrics. The dialect record (``verl``) reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from roll_viz.core.pipeline.dialects import verl_rollout as vr
from roll_viz.core.pipeline.losses import LossMode, MetricContext

# ------------------------------------------------------------------ policy-update (loss) keys

LOSS_DEFAULTS: dict[str, Any] = {
    "loss_mode": "vanilla",
    "clip_ratio": 0.2,
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "clip_ratio_c": 3.0,
    "loss_agg_mode": "token-mean",
    "loss_scale_factor": None,
    "entropy_coeff": 0.0,
    "cliprange_value": 0.5,
    "tau_pos": 1.0,
    "tau_neg": 1.05,
    "kl_cov_ratio": 0.0002,
    "ppo_kl_coef": 0.1,
    "dro_beta": None,
    "clip_cov_ratio": 0.0002,
    "clip_cov_lb": 1.0,
    "clip_cov_ub": 5.0,
    "viz_clip_cov_seed": 0,
    # algorithm.rollout_correction (``verl_rollout``) and the trainer it runs under
    "bypass_mode": False,
    "use_v1": True,
    "loss_type": "ppo_clip",
    "rollout_is": None,
    "rollout_is_threshold": 2.0,
    "rollout_is_batch_normalize": False,
    "rollout_rs": None,
    "rollout_rs_threshold": None,
}

LOSS_CHOICES: dict[str, tuple] = {
    "loss_mode": (
        "vanilla",
        "gspo",
        "cispo",
        "gpg",
        "sapo",
        "dppo_tv",
        "dppo_kl",
        "geo_mean",
        "clip_cov",
        "kl_cov",
        "dro",
        "bypass_mode",
    ),
    "loss_type": ("ppo_clip", "reinforce"),
    "rollout_is": (None, "token", "sequence"),
    "loss_agg_mode": (
        "token-mean",
        "token-sum",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ),
}

LOSS_HELP: dict[str, str] = {
    "loss_mode": "actor.policy_loss.loss_mode: vanilla (PPO clip + always-on dual clip), gspo "
    "(sequence ratio, GSPO-token form), cispo, gpg (-A*logp), sapo (soft gate), dppo_tv / "
    "dppo_kl (probability trust region; clip_ratio_* are divergence thresholds), geo_mean "
    "(GMPO), kl_cov (KL-Cov), dro (-A*logp + dro_beta/2 * d^2) or bypass_mode (old_log_prob = "
    "the sampler's mu; what bypass_mode: true sets under the legacy trainer; needs "
    "rollout_logprobs).",
    "clip_ratio": "actor.clip_ratio: PPO epsilon, used where clip_ratio_low/high are null.",
    "clip_ratio_low": "actor.clip_ratio_low: lower epsilon (null = clip_ratio).",
    "clip_ratio_high": "actor.clip_ratio_high: upper epsilon (null = clip_ratio; DAPO "
    "clip-higher uses 0.28).",
    "clip_ratio_c": "actor.clip_ratio_c: dual-clip constant c > 1, always on for A<0.",
    "loss_agg_mode": "actor.loss_agg_mode: aggregation of policy, KL, entropy and critic "
    "terms; the seq-mean modes divide by every row of the mini-batch (empty ones too); sapo "
    "forces seq-mean-token-mean, geo_mean ignores it.",
    "loss_scale_factor": "actor.loss_scale_factor: divisor of seq-mean-token-sum-norm "
    "(null = L_max, the tensor width).",
    "entropy_coeff": "actor.entropy_coeff: policy_loss -= coeff * agg(entropy).",
    "cliprange_value": "critic.cliprange_value: critic clip around the old values.",
    "tau_pos": "actor.tau_pos: SAPO gate temperature for A > 0.",
    "tau_neg": "actor.tau_neg: SAPO gate temperature for A <= 0.",
    "kl_cov_ratio": "actor.policy_loss.kl_cov_ratio: share of tokens (top cov(A, logp)) that get "
    "the |log-ratio| penalty in kl_cov.",
    "ppo_kl_coef": "actor.policy_loss.ppo_kl_coef: coefficient of that penalty (yaml 0.1).",
    "dro_beta": "actor.policy_loss.dro_beta: quadratic log-ratio penalty of dro (required > 0).",
    "clip_cov_ratio": "actor.policy_loss.clip_cov_ratio: share of tokens (at least one) whose PG "
    "clip_cov zeroes, drawn among those with clip_cov_lb < cov(A, logp) < clip_cov_ub.",
    "clip_cov_lb": "actor.policy_loss.clip_cov_lb: lower covariance bound of the candidates.",
    "clip_cov_ub": "actor.policy_loss.clip_cov_ub: upper covariance bound of the candidates.",
    "bypass_mode": "algorithm.rollout_correction.bypass_mode: old_log_prob = mu (no "
    "recompute, no decoupled correction); the legacy trainer also sets loss_mode bypass_mode, "
    "the v1 trainer runs loss_mode as configured and applies rollout_is / rollout_rs nowhere.",
    "use_v1": "trainer.use_v1: the v1 trainer (default; decoupled rejection keeps the rejected "
    "tokens in token-mean's denominator) or the legacy RayPPOTrainer (false: it drops them; "
    "bypass_mode: true switches loss_mode to bypass_mode).",
    "loss_type": "algorithm.rollout_correction.loss_type: bypass_mode's loss, ppo_clip "
    "(vanilla PPO with old = mu, IS weights not applied) or reinforce (-A * logp * w, no clip).",
    "rollout_is": "algorithm.rollout_correction.rollout_is: IS weights w per token or sequence "
    "(null = none): decoupled, of pi_old against mu, multiplying every loss_mode's per-token "
    "loss; under loss_mode bypass_mode, of the current log-prob, applied with reinforce only.",
    "rollout_is_threshold": "algorithm.rollout_correction.rollout_is_threshold: a "
    "number truncates w from above (TIS), 'lower_upper' zeroes w outside [lower, upper] "
    "(IcePop).",
    "rollout_is_batch_normalize": "algorithm.rollout_correction.rollout_is_batch_normalize: "
    "divide w by its batch mean (token, or mean of the sequence means).",
    "rollout_rs": "algorithm.rollout_correction.rollout_rs: rejection rules, comma separated "
    "(token_k1/k2/k3, seq_sum_k*, seq_mean_k*, seq_max_k2/k3): decoupled, rejected tokens leave "
    "response_mask (every term); bypass_mode, the policy term's mask.",
    "rollout_rs_threshold": "algorithm.rollout_correction.rollout_rs_threshold: one "
    "threshold or one per rule ('lower_upper' ratio bounds for k1 rules, an upper bound "
    "otherwise); required with rollout_rs.",
    "viz_clip_cov_seed": "roll-viz extension, not a framework option: seed of clip_cov's random "
    "draw (verl draws with the unseeded torch.randperm).",
}


def _clip_bounds(cfg: Mapping[str, Any]) -> tuple[float, float]:
    """clip_ratio_low / clip_ratio_high, each falling back to clip_ratio."""
    low = cfg["clip_ratio_low"] if cfg["clip_ratio_low"] is not None else cfg["clip_ratio"]
    high = cfg["clip_ratio_high"] if cfg["clip_ratio_high"] is not None else cfg["clip_ratio"]
    return low, high


def _vanilla(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = _clip_bounds(cfg)
    notes.append(
        f"verl PPO: token ratio, d clamped +-20, clip [1-{low:g}, 1+{high:g}], dual clip always "
        f"on for A<0 with c = clip_ratio_c = {cfg['clip_ratio_c']:g}"
    )
    dual = cfg["clip_ratio_c"]
    return {"level": "token", "clamp": 20.0, "eps_low": low, "eps_high": high, "dual_clip": dual}


def _bypass_ppo_clip(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    vr.bypass_rules(cfg)
    low, high = _clip_bounds(cfg)
    notes.append(
        f"loss_mode bypass_mode, loss_type ppo_clip: vanilla PPO with old = mu (ratio "
        f"pi / mu, d clamped +-20, clip [1-{low:g}, 1+{high:g}], dual clip c = "
        f"{cfg['clip_ratio_c']:g}); IS weights not applied (the ratio already is pi / mu)"
    )
    dual = cfg["clip_ratio_c"]
    return {"level": "token", "clamp": 20.0, "eps_low": low, "eps_high": high, "dual_clip": dual}


def _bypass_reinforce(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    vr.bypass_rules(cfg)
    notes.append(
        "loss_mode bypass_mode, loss_type reinforce: -A * logp * w, w the rollout IS "
        "weight of the current log-prob against mu (no_grad, a constant), no clip"
    )
    return {"level": "token", "clamp": None}


def _gpg(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append("loss_mode gpg: loss = -A * logp")
    return {"level": "token", "clamp": None}


def _dro(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    beta = cfg["dro_beta"]
    if beta is None or beta <= 0:
        raise ValueError("dro_beta: policy_loss.dro_beta must be > 0 with loss_mode dro")
    notes.append(f"loss_mode dro: -(A * logp - {beta:g}/2 * (logp - old)^2), no clamp")
    return {"level": "token", "clamp": None, "kimi_tau": beta}


def _cispo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = _clip_bounds(cfg)
    lo, hi = 1.0 - low, 1.0 + high
    notes.append(f"loss_mode cispo: -sg(clip(r, {lo:g}, {hi:g})) * A * logp, d clamped +-20")
    return {"level": "token", "clamp": 20.0, "cispo_low": lo, "cispo_high": hi}


#: what each DPPO loss mode's trust region measures
_DPPO_DIVERGENCE = {"dppo_tv": "p - p_old", "dppo_kl": "binary KL(p_old || p)"}


def _dppo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = _clip_bounds(cfg)
    c = cfg["clip_ratio_c"]
    notes.append(
        f"loss_mode {cfg['loss_mode']}: -A * sg(min(r, clip_ratio_c = {c:g})) * logp on tokens "
        f"whose {_DPPO_DIVERGENCE[cfg['loss_mode']]} stays within clip_ratio_low/high "
        f"({low:g}/{high:g}, read as divergence thresholds), 0 elsewhere; d clamped +-20"
    )
    return {"level": "token", "clamp": 20.0, "eps_low": low, "eps_high": high, "trunc_c": c}


def _geo_mean(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = _clip_bounds(cfg)
    notes.append(
        f"loss_mode geo_mean (GMPO): sequence ratio exp(mean of sign-aware clipped d, "
        f"[-{low:g}, {high:g}]), loss -mean(A) * ratio, mean over all rows (loss_agg_mode "
        "ignored)"
    )
    return {"level": "token", "clamp": None, "eps_low": low, "eps_high": high}


def _clip_cov(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = _clip_bounds(cfg)
    params = (
        cfg["clip_cov_ratio"],
        cfg["clip_cov_lb"],
        cfg["clip_cov_ub"],
        int(cfg["viz_clip_cov_seed"]),
    )
    notes.append(
        f"loss_mode clip_cov: PPO clip [1-{low:g}, 1+{high:g}] without dual clip or log-ratio "
        f"clamp; the PG of max(1, int({params[0]:g} * N)) token(s) drawn among the unclipped "
        f"ones with {params[1]:g} < cov(A, logp) < {params[2]:g} is zeroed (draw seeded with "
        f"{params[3]}; verl's is unseeded)"
    )
    return {"level": "token", "clamp": None, "eps_low": low, "eps_high": high, "clip_cov": params}


def _kl_cov(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append(
        f"loss_mode kl_cov: -A * r (no clip, no clamp) plus {cfg['ppo_kl_coef']:g} * |d| on "
        f"the top {cfg['kl_cov_ratio']:g} share of tokens by cov(A, logp) (at least one)"
    )
    return {
        "level": "token",
        "clamp": None,
        "kl_cov_ratio": cfg["kl_cov_ratio"],
        "kl_cov_coef": cfg["ppo_kl_coef"],
    }


def _sapo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append("loss_mode sapo: soft gate, d clamped +-20, forces seq-mean-token-mean")
    return {"level": "token", "clamp": 20.0, "tau_pos": cfg["tau_pos"], "tau_neg": cfg["tau_neg"]}


def _gspo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = _clip_bounds(cfg)
    notes.append(
        "loss_mode gspo: s = exp(mean d) in GSPO-token form, log s clamped <= 10, no dual "
        "clip, aggregated with loss_agg_mode (verl 0.9.1)"
    )
    return {"level": "sequence-token", "clamp": 10.0, "eps_low": low, "eps_high": high}


def loss_metrics(ctx: MetricContext) -> dict[str, float]:
    """The logged actor/critic metrics under the names verl logs them.

    ``actor/pg_loss``, then the loss mode's own (its ``LOSS_MODES`` row), then the KL, entropy
    and critic terms. The worker returns ``kl_loss`` / ``kl_coef``
    (``workers/utils/losses.py::ppo_loss``); the trainer prefixes every actor metric with
    ``actor/`` (``rename_dict(..., "actor/")``), so they reach the logger as ``actor/kl_loss``
    and ``actor/kl_coef``.
    """
    spec = ctx.spec
    out: dict[str, float] = {"actor/pg_loss": ctx.item("policy")}
    mode = mode_row(ctx.cfg)
    if mode.metrics is not None:
        out.update(mode.metrics(ctx))
    if ctx.entropy is not None:
        out["actor/entropy_loss"] = ctx.item("entropy")
    if spec.kl_on:
        out["actor/kl_loss"] = ctx.item("kl")
        out["actor/kl_coef"] = spec.beta
    if ctx.terms["value"] is not None:
        out["critic/vf_loss"] = ctx.item("value")
        out["critic/vf_clipfrac"] = ctx.token_mean(ctx.vf_clipped)
    return out


def _clip_metrics(ctx: MetricContext, frac: float, lower: float | None) -> dict[str, float]:
    """The clip metrics: pg_clipfrac, ppo_kl (mean -d, clamped as the loss clamps) and lower."""
    clamped = ctx.spec.clamp is not None and ctx.spec.level == "token"
    d = ctx.d.clamp(-20.0, 20.0) if clamped else ctx.d
    out = {"actor/pg_clipfrac": frac, "actor/ppo_kl": ctx.token_mean(-d)}
    if lower is not None:
        out["actor/pg_clipfrac_lower"] = lower
    return out


def _vanilla_metrics(ctx: MetricContext) -> dict[str, float]:
    surr1, surr2 = ctx.surrogates()
    clip1 = torch.maximum(-surr1, -surr2)
    lower = ctx.token_mean((clip1 > -ctx.spec.dual_clip * ctx.adv) & (ctx.adv < 0))
    return _clip_metrics(ctx, ctx.token_mean(-surr2 > -surr1), lower)


def _gspo_metrics(ctx: MetricContext) -> dict[str, float]:
    surr1, surr2 = ctx.surrogates()
    return _clip_metrics(ctx, ctx.token_mean(-surr2 > -surr1), 0.0)


def _cispo_metrics(ctx: MetricContext) -> dict[str, float]:
    spec = ctx.spec
    frac = ctx.token_mean(ctx.r != ctx.r.clamp(spec.cispo_low, spec.cispo_high))
    return _clip_metrics(ctx, frac, 0.0)


def _dppo_metrics(ctx: MetricContext) -> dict[str, float]:
    valid = ctx.extra["valid"]
    lower = ctx.token_mean((ctx.r > ctx.spec.trunc_c) & valid)
    return _clip_metrics(ctx, ctx.token_mean(~valid), lower)


def _clip_cov_metrics(ctx: MetricContext) -> dict[str, float]:
    # clip_cov logs no pg_clipfrac_lower
    return _clip_metrics(ctx, ctx.token_mean(ctx.extra["clip_cov_zeroed"]), None)


def _geo_mean_metrics(ctx: MetricContext) -> dict[str, float]:
    clipped = ctx.d != ctx.d.clamp(-ctx.spec.eps_low, ctx.spec.eps_high)
    frac = ctx.token_mean(clipped & (ctx.adv > 0))
    return _clip_metrics(ctx, frac, ctx.token_mean(clipped & (ctx.adv < 0)))


def _sapo_metrics(ctx: MetricContext) -> dict[str, float]:
    return _clip_metrics(ctx, 0.0, 0.0)


def _kl_cov_metrics(ctx: MetricContext) -> dict[str, float]:
    return {"actor/ppo_kl": ctx.token_mean(ctx.d.abs())}


def _dro_metrics(ctx: MetricContext) -> dict[str, float]:
    return {"actor/ppo_kl": ctx.token_mean(-ctx.d)}


def _bypass_ppo_clip_metrics(ctx: MetricContext) -> dict[str, float]:
    return vr.bypass_metrics(ctx) | _vanilla_metrics(ctx)


def _bypass_reinforce_metrics(ctx: MetricContext) -> dict[str, float]:
    # compute_policy_loss_reinforce: only ppo_kl = mean(mu - logp)
    return vr.bypass_metrics(ctx) | {"actor/ppo_kl": ctx.token_mean(-ctx.d)}


#: ``loss_mode`` (bypass_mode by its ``loss_type``) -> the kind it runs, its parameters and the
#: metrics verl logs for it (``core_algos.compute_policy_loss_<loss_mode>``, verl 0.9.1).
LOSS_MODES: dict[str, LossMode] = {
    "vanilla": LossMode("ppo", _vanilla, _vanilla_metrics),
    "gspo": LossMode("ppo", _gspo, _gspo_metrics),
    "gpg": LossMode("pg", _gpg),
    "dro": LossMode("kimi", _dro, _dro_metrics),
    "cispo": LossMode("cispo", _cispo, _cispo_metrics),
    "dppo_tv": LossMode("dppo_tv", _dppo, _dppo_metrics),
    "dppo_kl": LossMode("dppo_kl", _dppo, _dppo_metrics),
    "geo_mean": LossMode("geo_mean", _geo_mean, _geo_mean_metrics),
    "clip_cov": LossMode("clip_cov", _clip_cov, _clip_cov_metrics),
    "kl_cov": LossMode("kl_cov", _kl_cov, _kl_cov_metrics),
    "sapo": LossMode("sapo", _sapo, _sapo_metrics, ("seq-mean-token-mean-all-rows", None)),
    "bypass_mode:ppo_clip": LossMode("ppo", _bypass_ppo_clip, _bypass_ppo_clip_metrics),
    "bypass_mode:reinforce": LossMode("pg", _bypass_reinforce, _bypass_reinforce_metrics),
}


def mode_row(cfg: Mapping[str, Any]) -> LossMode:
    """The ``LOSS_MODES`` row of a config.

    bypass_mode's by its loss_type, the legacy trainer's ``bypass_mode: true`` included.
    """
    if vr.mode(cfg) == "bypass_loss":
        return LOSS_MODES[f"bypass_mode:{cfg['loss_type']}"]
    return LOSS_MODES[cfg["loss_mode"]]
