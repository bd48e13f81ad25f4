"""Stage 7: the policy-update losses of the four frameworks, as pure tensor functions.

Dimension letters: B sequences, T response tokens (right-padded). Everything runs in float64 on
the caller's device; inputs are never modified. With d = logp - logp_old, r = exp(d), A the
per-token advantage and W the aggregation weights (loss = sum W * per-token loss):

- importance ratio: per token ``exp(d)`` (verl / OpenRLHF clamp d to [-20, 20]; ROLL, TRL none),
  per sequence ``exp(masked mean d)`` broadcast (ROLL ``importance_sampling: seq``, OpenRLHF
  ``gspo``, TRL ``sequence``), or verl's GSPO-token form ``sg(s) * pi / sg(pi)`` with log s
  clamped to <= 10 (same value, gradient only through the token's own log-prob);
- per-token losses: PPO ``-min(r A, clip(r) A)`` with the frameworks' dual clips (verl always
  c = clip_ratio_c = 3; ROLL ``dual_clip_loss`` c = 1 + 2 pg_clip; OpenRLHF optional c) and TRL's
  ``delta`` cap; vanilla PG ``-A logp``; CISPO ``-sg(w(r)) A logp`` (verl w = clip(r, 1-lo, 1+hi),
  ROLL clip(r, 0.9, 1.1), TRL min(r, epsilon_high)); SAPO ``-sigmoid(tau (r-1)) 4/tau A``;
- aggregation: every mode is linear, ``sum_bt W_bt x_bt`` with (B, T) weights (``agg_weights``);
- KL as a loss (``kl.token_kl`` with each framework's estimator and clamps), the entropy bonus and
  the clipped critic loss, each aggregated the way its framework does (``loss_agg_modes``);
- ``grad_coef`` = d(total)/d(logp_t) in closed form: the policy term with its aggregation weights
  plus the KL-loss term. The entropy bonus is NOT in it: the entropy depends on the whole
  next-token distribution (its gradient flows through the logits, not through the sampled
  token's log-prob), so no per-token coefficient of d(logp_t) describes it.

``policy_loss`` is the single entry point; it returns a frozen ``LossResult`` whose ``total`` is
differentiable w.r.t. ``logprobs`` (and ``entropy`` / ``values`` when they require grad).

What roll-viz simplifies against the real recipes: one process, one micro-batch, one gradient
accumulation step (global token / sample counts are this batch's; TRL's grad-accumulation
division is 1); no per-sample weights (ROLL ``difficulty_loss_weight``/``length_loss_weight``),
no rollout importance-sampling corrections (verl ``rollout_is_weights``, OpenRLHF ``tis``, TRL
vLLM IS), no MoE aux loss, no TRL ``top_entropy_quantile`` / ``off_policy_mask_threshold`` /
``use_bias_correction_kl`` / adaptive entropy; masked means divide by the exact count (the
frameworks add 1e-8); ROLL's unmasked token-mean sums are taken over valid tokens only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import as_bool
from roll_viz.core.pipeline.config import FRAMEWORKS, resolve_config
from roll_viz.core.pipeline.kl import token_kl

F64 = torch.float64

# canonical aggregation modes: name -> what it computes (x masked, L_i row lengths, n = rows
# with at least one token, B = all rows, T = tensor width, f = scale factor)
AGG_MODES: dict[str, str] = {
    "token-mean": "sum x / sum L_i  (verl/ROLL/OpenRLHF token-mean, TRL bnpo/dapo/cispo)",
    "token-sum": "sum x  (verl token-sum)",
    "seq-mean-token-sum": "sum_i (sum_t x) / n",
    "seq-mean-token-mean": "sum_i (mean_t x) / n  (OpenRLHF per-sample, GSPO/SAPO in verl)",
    "seq-mean-token-sum-norm": "sum_i (sum_t x) / n / f, f = loss_scale_factor or T  (verl)",
    "token-sum-norm": "sum x / T, no batch division  (ROLL seq-mean-token-sum-norm)",
    "seq-mean-token-mean-all-rows": "sum_i (mean_t x) / B  (TRL grpo/sapo, ROLL critic)",
    "token-sum-norm-all-rows": "sum x / (B * f), f = max_completion_length  (TRL dr_grpo)",
}

ROLL_AGG = {"seq-mean-token-sum-norm": "token-sum-norm"}  # ROLL names -> canonical
TERMS = ("policy", "kl", "entropy", "value")
_VERL_KL = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2"}
_VERL_KL |= {"low_var_kl": "k3", "k3": "k3"}


@dataclass(frozen=True)
class LossResult:
    """One framework's policy-update loss on one batch.

    ``total = rl * (policy + c_kl * kl) - c_ent * entropy`` with the coefficients in
    ``coefficients`` (rl is ROLL's ``rl_loss_coef``, 1 elsewhere; TRL's KL is added per token
    before aggregation, which is the same number because aggregation is linear). The critic
    loss ``terms["value"]`` is a separate optimisation and is NOT part of ``total``.

    Attributes:
        framework: "roll", "verl", "openrlhf" or "trl".
        total: () the actor loss; differentiable w.r.t. ``logprobs`` when it requires grad.
        terms: "policy", "kl", "entropy", "value" -> () aggregated term before its coefficient,
            or None where the framework does not compute it (KL loss off, no entropy, no critic).
        coefficients: "rl", "kl", "entropy" -> the multipliers used in ``total``.
        per_token: (B, T) detached tensors, 0 / False on padding: "ratio" (the ratio the loss
            uses; the broadcast sequence ratio for GSPO), "pg_loss" (per-token policy loss),
            "loss_weight" (W of the policy term), "grad_coef" (d total / d logp_t, without the
            entropy bonus), "kl" (per-token KL when the KL loss is on), and bool masks
            "clipped_high", "clipped_low" (the clip bound replaced the ratio: for PPO A>0 and
            r > 1+eps_high, A<0 and r < 1-eps_low, gradient 0; for CISPO the weight is capped,
            gradient kept), "dual_clipped" (A<0 loss capped at -c*A, or TRL's delta cap).
        metrics: the framework's own logged metrics under its own names (floats).
        notes: conventions applied, in order.
    """

    framework: str
    total: Tensor
    terms: dict[str, Tensor | None]
    coefficients: dict[str, float]
    per_token: dict[str, Tensor]
    metrics: dict[str, float]
    notes: tuple[str, ...] = ()


# ------------------------------------------------------------------------------- aggregation


def agg_weights(response_mask: Tensor, mode: str, scale_factor: float | None = None) -> Tensor:
    """(B, T) weights W of an aggregation mode: ``aggregate(x) = sum(W * x)``.

    Zero-length rows get weight 0 everywhere; they still count in B for the "-all-rows" modes
    (TRL grpo / dr_grpo, ROLL's critic), and never in n (rows with a token) or the token count.

    Args:
        response_mask: (B, T) float 0/1 (or bool).
        mode: one of AGG_MODES.
        scale_factor: f of "seq-mean-token-sum-norm" (None = T) and "token-sum-norm-all-rows"
            (required: TRL's max_completion_length); "token-sum-norm" always uses T.

    Returns:
        (B, T) float64 weights, 0 on padding.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"aggregation mode must be one of {tuple(AGG_MODES)}, got {mode!r}")
    m = as_bool(response_mask).to(F64)
    B, T = m.shape
    lengths = m.sum(-1, keepdim=True)
    n_rows = (lengths > 0).sum().clamp(min=1)
    per_row_mean = m / lengths.clamp(min=1.0)
    if mode == "token-mean":
        return m / m.sum().clamp(min=1.0)
    if mode == "token-sum":
        return m
    if mode == "seq-mean-token-sum":
        return m / n_rows
    if mode == "seq-mean-token-mean":
        return per_row_mean / n_rows
    if mode == "seq-mean-token-sum-norm":
        return m / n_rows / float(T if scale_factor is None else scale_factor)
    if mode == "token-sum-norm":
        return m / T
    if mode == "seq-mean-token-mean-all-rows":
        return per_row_mean / max(B, 1)
    if scale_factor is None:
        raise ValueError("token-sum-norm-all-rows needs scale_factor (max_completion_length)")
    return m / (max(B, 1) * float(scale_factor))


def aggregate(
    x: Tensor, response_mask: Tensor, mode: str, scale_factor: float | None = None
) -> Tensor:
    """Aggregate a (B, T) per-token quantity into a scalar (differentiable in ``x``).

    Args:
        x: (B, T) values (padding may hold anything, even inf).
        response_mask: (B, T) float 0/1 (or bool).
        mode: one of AGG_MODES (see ``agg_weights``).
        scale_factor: see ``agg_weights``.

    Returns:
        () float64 tensor.
    """
    weights = agg_weights(response_mask, mode, scale_factor)
    return (weights * torch.where(as_bool(response_mask), x.to(F64), 0.0)).sum()


def loss_agg_modes(framework: str, config: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Which canonical aggregation each loss term of a framework uses.

    Args:
        framework: one of FRAMEWORKS.
        config: a resolved dialect config (``resolve_config``).

    Returns:
        "policy", "kl", "entropy", "value" -> (AGG_MODES name, scale_factor); "value" is None
        for TRL (GRPO has no critic).
    """
    cfg = config
    if framework == "roll":
        mode = ROLL_AGG.get(cfg["loss_agg_mode"], cfg["loss_agg_mode"])
        same = (mode, None)
        return {
            "policy": same,
            "kl": same,
            "entropy": same,
            "value": ("seq-mean-token-mean-all-rows", None),
        }
    if framework == "verl":
        same = (cfg["loss_agg_mode"], cfg["loss_scale_factor"])
        policy = same
        if cfg["loss_mode"] in ("gspo", "sapo"):
            policy = ("seq-mean-token-mean", None)
        return {"policy": policy, "kl": same, "entropy": same, "value": same}
    if framework == "openrlhf":
        token = ("token-mean", None)
        per_sample = ("seq-mean-token-mean", None)
        policy = token
        if not cfg["token_level_loss"] or cfg["policy_loss_type"] == "gspo":
            policy = per_sample
        value = token if cfg["token_level_loss"] else per_sample
        return {"policy": policy, "kl": token, "entropy": token, "value": value}
    if framework == "trl":
        loss_type = cfg["loss_type"]
        policy = ("token-mean", None)
        if loss_type in ("grpo", "sapo"):
            policy = ("seq-mean-token-mean-all-rows", None)
        elif loss_type == "dr_grpo":
            policy = ("token-sum-norm-all-rows", cfg["max_completion_length"])
        return {"policy": policy, "kl": policy, "entropy": ("token-mean", None), "value": None}
    raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")


# ---------------------------------------------------------------------------- ratio and losses


def importance_ratio(
    logprobs: Tensor,
    old_logprobs: Tensor,
    response_mask: Tensor,
    level: str = "token",
    clamp: float | None = None,
) -> Tensor:
    """Importance ratio pi / pi_old at each response token (differentiable in ``logprobs``).

    Args:
        logprobs: (B, T) current-policy log-probs of the sampled tokens.
        old_logprobs: (B, T) rollout-policy log-probs.
        response_mask: (B, T) float 0/1.
        level: "token" (exp(d), d clamped to [-clamp, clamp]), "sequence" (exp of the masked
            mean of d, broadcast; ``clamp`` unused) or "sequence-token" (verl GSPO: value
            exp(min(mean d, clamp)), gradient only through each token's own log-prob).
        clamp: see ``level`` (None = no clamp).

    Returns:
        (B, T) float64 ratio, 0 on padding (a zero-length row's sequence ratio would be 1).
    """
    mask = as_bool(response_mask)
    d = torch.where(mask, logprobs.to(F64) - old_logprobs.to(F64), 0.0)
    if level == "token":
        ratio = torch.exp(d if clamp is None else d.clamp(-clamp, clamp))
    elif level in ("sequence", "sequence-token"):
        lengths = mask.sum(-1, keepdim=True).clamp(min=1).to(F64)
        seq = d.sum(-1, keepdim=True) / lengths
        if level == "sequence":
            ratio = torch.exp(seq).expand_as(d)
        else:
            lp = torch.where(mask, logprobs.to(F64), 0.0)
            log_s = lp - lp.detach() + seq.detach()
            ratio = torch.exp(log_s if clamp is None else log_s.clamp(max=clamp))
    else:
        raise ValueError(f"level must be token, sequence or sequence-token, got {level!r}")
    return torch.where(mask, ratio, 0.0)


def ppo_token_loss(
    ratio: Tensor,
    advantages: Tensor,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
    delta: float | None = None,
) -> Tensor:
    """PPO clipped surrogate per token, ``-min(r1 A, clip(r, 1-eps_low, 1+eps_high) A)``.

    ``r1 = min(r, delta)`` (TRL's two-sided cap) or r. With ``dual_clip`` c, tokens with A<0
    take ``min(loss, -c A)`` (verl always, c = 3; ROLL c = 1 + 2 pg_clip; OpenRLHF optional).

    Args:
        ratio: (B, T) importance ratio (differentiable).
        advantages: (B, T) advantages.
        eps_low: lower clip epsilon.
        eps_high: upper clip epsilon.
        dual_clip: dual-clip constant c > 1, or None.
        delta: TRL delta cap, or None.

    Returns:
        (B, T) per-token loss.
    """
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    r1 = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.minimum(r1 * advantages, clipped * advantages)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -dual_clip * advantages), loss)
    return loss


def value_loss(
    values: Tensor,
    old_values: Tensor | None,
    returns: Tensor,
    response_mask: Tensor,
    clip: float | None,
    mode: str,
    scale_factor: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Clipped critic loss ``0.5 * agg(max((V - R)^2, (V_old + clip(V - V_old, +-c) - R)^2))``.

    Args:
        values: (B, T) new value predictions (differentiable).
        old_values: (B, T) values at rollout time (needed when ``clip`` is set).
        returns: (B, T) value targets.
        response_mask: (B, T) float 0/1.
        clip: clip range c (None = plain squared error).
        mode: aggregation (AGG_MODES).
        scale_factor: see ``agg_weights``.

    Returns:
        (() loss, (B, T) bool mask where the clipped error is the larger one).
    """
    mask = as_bool(response_mask)
    v = torch.where(mask, values.to(F64), 0.0)
    ret = torch.where(mask, returns.to(F64), 0.0)
    err = (v - ret) ** 2
    if clip is None:
        per_token, used_clip = err, torch.zeros_like(mask)
    else:
        old = torch.where(mask, old_values.to(F64), 0.0)
        clipped = old + (v - old).clamp(-clip, clip)
        err_clipped = (clipped - ret) ** 2
        per_token = torch.maximum(err, err_clipped)
        used_clip = (err_clipped > err) & mask
    return 0.5 * aggregate(per_token, mask, mode, scale_factor), used_clip


# ----------------------------------------------------------------------- framework resolution


@dataclass(frozen=True)
class _Spec:
    kind: str  # "ppo" | "pg" | "cispo" | "sapo"
    level: str  # "token" | "sequence" | "sequence-token"
    clamp: float | None
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = None
    delta: float | None = None
    cispo_low: float | None = None
    cispo_high: float | None = None
    unified_mask: bool = False
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    kl_on: bool = False
    kl_zero: bool = False  # OpenRLHF use_loss with init_coef 0: no reference model, KL 0
    kl_estimator: str = "k3"
    kl_clamp: float | None = None
    kl_log_ratio_clamp: float | None = None
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    rl_coef: float = 1.0
    value_clip: float | None = None
    has_critic: bool = True


def _spec(framework: str, cfg: dict[str, Any], notes: list[str]) -> _Spec:
    if framework == "roll":
        return _roll_spec(cfg, notes)
    if framework == "verl":
        return _verl_spec(cfg, notes)
    if framework == "openrlhf":
        return _openrlhf_spec(cfg, notes)
    return _trl_spec(cfg, notes)


def _roll_spec(cfg: dict[str, Any], notes: list[str]) -> _Spec:
    variant = cfg["pg_variant"]
    low, high = cfg["pg_clip"], cfg["pg_clip"]
    if cfg["use_pg_clip_range"]:
        low, high = cfg["pg_clip_low"], cfg["pg_clip_high"]
    common = {
        "kl_on": cfg["use_kl_loss"],
        "kl_estimator": "k3",
        "kl_clamp": 10.0,
        "kl_coef": cfg["kl_loss_coef"],
        "entropy_coef": cfg["entropy_loss_coef"],
        "rl_coef": cfg["rl_loss_coef"],
        "value_clip": cfg["value_clip"],
    }
    if cfg["use_kl_loss"]:
        notes.append("ROLL KL loss: always k3 (clamped +-10), aggregated with loss_agg_mode")
    if variant != "ppo" and cfg["importance_sampling"] == "seq":
        notes.append(f"pg_variant {variant}: ActorPGWorker uses the token ratio (seq ignored)")
    if variant == "vanilla":
        notes.append("pg_variant vanilla: loss = -A * logp (no ratio, no clip)")
        return _Spec(kind="pg", level="token", clamp=None, **common)
    if variant == "cispo":
        lo, hi = 1.0 - cfg["cispo_epsilon_low"], 1.0 + cfg["cispo_epsilon_high"]
        notes.append(f"pg_variant cispo: loss = -sg(clip(r, {lo:g}, {hi:g})) * A * logp")
        return _Spec(
            kind="cispo",
            level="token",
            clamp=None,
            cispo_low=lo,
            cispo_high=hi,
            unified_mask=cfg["cispo_use_unified_mask"],
            **common,
        )
    level = "sequence" if cfg["importance_sampling"] == "seq" else "token"
    dual = 1.0 + 2.0 * cfg["pg_clip"] if cfg["dual_clip_loss"] else None
    notes.append(
        f"ROLL PPO: {level} ratio, no log-ratio clamp, clip [1-{low:g}, 1+{high:g}]"
        + (f", dual clip c = 1 + 2*pg_clip = {dual:g}" if dual else "")
    )
    return _Spec(
        kind="ppo", level=level, clamp=None, eps_low=low, eps_high=high, dual_clip=dual, **common
    )


def _verl_spec(cfg: dict[str, Any], notes: list[str]) -> _Spec:
    mode = cfg["loss_mode"]
    low = cfg["clip_ratio_low"] if cfg["clip_ratio_low"] is not None else cfg["clip_ratio"]
    high = cfg["clip_ratio_high"] if cfg["clip_ratio_high"] is not None else cfg["clip_ratio"]
    kl_name = _VERL_KL[cfg["kl_loss_type"]]
    common = {
        "kl_on": cfg["use_kl_loss"],
        "kl_estimator": kl_name,
        "kl_clamp": 10.0 if kl_name == "k3" else None,
        "kl_log_ratio_clamp": 20.0 if kl_name == "k3" else None,
        "kl_coef": cfg["kl_loss_coef"],
        "entropy_coef": cfg["entropy_coeff"],
        "value_clip": cfg["cliprange_value"],
    }
    if cfg["use_kl_loss"]:
        notes.append(f"verl KL loss: {cfg['kl_loss_type']}, aggregated with loss_agg_mode")
    if mode == "gpg":
        notes.append("loss_mode gpg: loss = -A * logp")
        return _Spec(kind="pg", level="token", clamp=None, **common)
    if mode == "cispo":
        lo, hi = 1.0 - low, 1.0 + high
        notes.append(f"loss_mode cispo: -sg(clip(r, {lo:g}, {hi:g})) * A * logp, d clamped +-20")
        return _Spec(kind="cispo", level="token", clamp=20.0, cispo_low=lo, cispo_high=hi, **common)
    if mode == "sapo":
        notes.append("loss_mode sapo: soft gate, d clamped +-20, forces seq-mean-token-mean")
        return _Spec(
            kind="sapo",
            level="token",
            clamp=20.0,
            tau_pos=cfg["tau_pos"],
            tau_neg=cfg["tau_neg"],
            **common,
        )
    if mode == "gspo":
        notes.append(
            "loss_mode gspo: s = exp(mean d) in GSPO-token form, log s clamped <= 10, no dual "
            "clip, forces seq-mean-token-mean"
        )
        return _Spec(
            kind="ppo", level="sequence-token", clamp=10.0, eps_low=low, eps_high=high, **common
        )
    notes.append(
        f"verl PPO: token ratio, d clamped +-20, clip [1-{low:g}, 1+{high:g}], dual clip always "
        f"on for A<0 with c = clip_ratio_c = {cfg['clip_ratio_c']:g}"
    )
    return _Spec(
        kind="ppo",
        level="token",
        clamp=20.0,
        eps_low=low,
        eps_high=high,
        dual_clip=cfg["clip_ratio_c"],
        **common,
    )


def _openrlhf_spec(cfg: dict[str, Any], notes: list[str]) -> _Spec:
    low, high = cfg["eps_clip_low_high"] or (cfg["eps_clip"], cfg["eps_clip"])
    kl_zero = cfg["use_loss"] and cfg["init_coef"] == 0
    if cfg["use_loss"]:
        notes.append(
            "KL loss with init_coef = 0: no reference model, KL loss 0"
            if kl_zero
            else f"KL loss: {cfg['kl_estimator']} (clamped +-10), coefficient = KL controller "
            f"value init_coef {cfg['init_coef']:g}, always token-level"
        )
    gspo = cfg["policy_loss_type"] == "gspo"
    notes.append(
        ("gspo: sequence ratio, no clamp, per-sample aggregation" if gspo else "ppo: d +-20")
        + (f", dual clip c = {cfg['dual_clip']:g}" if cfg["dual_clip"] else "")
    )
    return _Spec(
        kind="ppo",
        level="sequence" if gspo else "token",
        clamp=None if gspo else 20.0,
        eps_low=low,
        eps_high=high,
        dual_clip=cfg["dual_clip"],
        kl_on=cfg["use_loss"],
        kl_zero=kl_zero,
        kl_estimator=cfg["kl_estimator"],
        kl_clamp=10.0,
        kl_coef=cfg["init_coef"],
        entropy_coef=cfg["entropy_coef"] or 0.0,
        value_clip=cfg["value_clip"],
    )


def _trl_spec(cfg: dict[str, Any], notes: list[str]) -> _Spec:
    low = cfg["epsilon"]
    high = cfg["epsilon_high"] if cfg["epsilon_high"] is not None else cfg["epsilon"]
    level = "sequence" if cfg["importance_sampling_level"] == "sequence" else "token"
    loss_type = cfg["loss_type"]
    common = {
        "level": level,
        "clamp": None,
        "kl_on": cfg["beta"] != 0,
        "kl_estimator": "k3",
        "kl_coef": cfg["beta"],
        "entropy_coef": cfg["entropy_coef"],
        "has_critic": False,
    }
    if cfg["beta"] != 0:
        notes.append("TRL: beta * k3 (unclamped) added per token before aggregation")
    if level == "sequence" and loss_type in ("bnpo", "dr_grpo", "dapo", "cispo"):
        notes.append("sequence-level IS with a token-sum loss weights each sequence by length")
    if loss_type == "cispo":
        notes.append(f"loss_type cispo: weight min(r, epsilon_high = {high:g}), no lower bound")
        return _Spec(kind="cispo", cispo_high=high, **common)
    if loss_type == "sapo":
        notes.append("loss_type sapo: soft gate, aggregated like grpo")
        return _Spec(
            kind="sapo",
            tau_pos=cfg["sapo_temperature_pos"],
            tau_neg=cfg["sapo_temperature_neg"],
            **common,
        )
    notes.append(
        f"TRL {loss_type}: {level} ratio, no clamp, clip [1-{low:g}, 1+{high:g}]"
        + (f", delta cap {cfg['delta']:g}" if cfg["delta"] is not None else "")
    )
    return _Spec(kind="ppo", eps_low=low, eps_high=high, delta=cfg["delta"], **common)


# --------------------------------------------------------------------------------- validation


def _as_input(name: str, x: Any, shape: tuple, mask: Tensor, keep_grad: bool) -> Tensor:
    t = torch.as_tensor(x)
    if not keep_grad:
        t = t.detach()
    if name == "advantages" and t.dim() == 1 and t.shape[0] == shape[0]:
        t = t[:, None].expand(shape)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
    bad = torch.nonzero(mask & ~torch.isfinite(t.detach()))
    if bad.numel():
        b, tok = bad[0].tolist()
        raise ValueError(f"{name}[{b}][{tok}]: non-finite value on a response token")
    return torch.where(mask, t.to(F64), 0.0)


# -------------------------------------------------------------------------------- entry point


def policy_loss(
    framework: str,
    config: dict[str, Any] | None = None,
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    values: Tensor | None = None,
    old_values: Tensor | None = None,
    returns: Tensor | None = None,
) -> LossResult:
    """One framework's policy-update loss, per-token pieces, gradient coefficients and metrics.

    Args:
        framework: "roll", "verl", "openrlhf" or "trl".
        config: that dialect's keys (reward-stage keys are accepted and ignored here); missing
            keys take the shipped defaults (``LOSS_DEFAULTS``, ``DEFAULTS``).
        logprobs: (B, T) current-policy log-probs of the sampled tokens; may require grad.
        old_logprobs: (B, T) rollout ("old") log-probs (treated as constants).
        advantages: (B, T) or (B,) advantages (constants).
        response_mask: (B, T) 0/1 loss mask.
        ref_logprobs: (B, T) reference log-probs; needed when the KL loss is on.
        entropy: (B, T) policy entropy per position; needed when the entropy coefficient is not 0.
            Kept differentiable if it requires grad.
        values: (B, T) new critic predictions (kept differentiable); with ``returns`` (and
            ``old_values`` when the framework clips) gives ``terms["value"]``.
        old_values: (B, T) critic values at rollout time.
        returns: (B, T) value targets.

    Returns:
        LossResult (see its docstring). Padding may hold anything (even inf) in every input.

    Raises:
        ValueError: bad framework / key / value, a shape mismatch, a non-finite value on a
            response token, or a missing input the config needs (the message starts with the
            argument's name).
    """
    cfg = resolve_config(framework, config)
    notes: list[str] = []
    spec = _spec(framework, cfg, notes)
    modes = loss_agg_modes(framework, cfg)

    mask_raw = torch.as_tensor(response_mask).detach()
    if mask_raw.dim() != 2 or mask_raw.shape[1] == 0:
        raise ValueError(f"response_mask: expected (B, T>=1), got {tuple(mask_raw.shape)}")
    if not bool(((mask_raw == 0) | (mask_raw == 1)).all()):
        raise ValueError("response_mask: must contain only 0 and 1")
    mask = mask_raw > 0
    shape = tuple(mask.shape)
    m = mask.to(F64)
    lp = _as_input("logprobs", logprobs, shape, mask, keep_grad=True)
    old = _as_input("old_logprobs", old_logprobs, shape, mask, keep_grad=False)
    adv = _as_input("advantages", advantages, shape, mask, keep_grad=False)
    ref = None
    if ref_logprobs is not None:
        ref = _as_input("ref_logprobs", ref_logprobs, shape, mask, keep_grad=False)
    if spec.kl_on and not spec.kl_zero and ref is None:
        raise ValueError("ref_logprobs: needed for the KL loss term")
    ent = None
    if entropy is not None:
        ent = _as_input("entropy", entropy, shape, mask, keep_grad=True)
    if spec.entropy_coef != 0 and ent is None:
        raise ValueError("entropy: needed when the entropy coefficient is not 0")

    lengths = m.sum(-1, keepdim=True)
    d = lp.detach() - old  # (B, T), 0 on padding
    w_pol = agg_weights(m, *modes["policy"])

    # ---- policy term: value (autograd) and closed-form dl/dlogp
    ratio = importance_ratio(lp, old, m, spec.level, spec.clamp)
    r = ratio.detach()
    false = torch.zeros_like(mask)
    clipped_high, clipped_low, dual = false, false, false
    if spec.kind == "pg":
        pg = -adv * lp
        dl_dlogp = -adv
        ratio_shown = torch.where(mask, torch.exp(d), 0.0)
    elif spec.kind == "cispo":
        low = 0.0 if spec.cispo_low is None else spec.cispo_low
        weight = r.clamp(min=spec.cispo_low, max=spec.cispo_high)  # TRL: no lower bound
        keep = torch.ones_like(r)
        if spec.unified_mask:
            killed = ((adv > 0) & (r > spec.cispo_high)) | ((adv < 0) & (r < low))
            keep = (~killed).to(F64)
            notes.append("cispo_use_unified_mask: PPO-clipped tokens get zero weight")
        pg = -weight * adv * lp * keep
        dl_dlogp = -weight * adv * keep
        clipped_high = (r > spec.cispo_high) & mask
        clipped_low = (r < spec.cispo_low) & mask if spec.cispo_low is not None else false
        ratio_shown = r
    else:
        if spec.kind == "ppo":
            pg = ppo_token_loss(ratio, adv, spec.eps_low, spec.eps_high, spec.dual_clip, spec.delta)
            dl_dr, clipped_high, clipped_low, dual = _ppo_dr(r, adv, spec, mask)
        else:
            tau = torch.where(adv > 0, spec.tau_pos, spec.tau_neg)
            pg = -torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * adv
            sig = torch.sigmoid(tau * (r - 1.0))
            dl_dr = -adv * 4.0 * sig * (1.0 - sig)
        dl_dlogp = None  # the chain rule below depends on the ratio level
        ratio_shown = r
    pg = torch.where(mask, pg, 0.0)

    if dl_dlogp is not None:
        g_policy = w_pol * dl_dlogp
    elif spec.level == "token":
        inside = torch.ones_like(r) if spec.clamp is None else (d.abs() <= spec.clamp).to(F64)
        g_policy = w_pol * dl_dr * r * inside
    elif spec.level == "sequence":
        coupling = (w_pol * dl_dr).sum(-1, keepdim=True)
        g_policy = m * r / lengths.clamp(min=1.0) * coupling
    else:  # verl GSPO-token: own token only, log s <= clamp
        seq_mean = d.sum(-1, keepdim=True) / lengths.clamp(min=1.0)
        g_policy = w_pol * dl_dr * r * (seq_mean <= spec.clamp).to(F64)
    policy = (w_pol * pg).sum()

    # ---- KL term
    kl_tok, kl_term, g_kl = None, None, torch.zeros_like(m)
    w_kl = agg_weights(m, *modes["kl"])
    if spec.kl_on:
        if spec.kl_zero:
            kl_tok = torch.zeros_like(m)
            kl_term = torch.zeros((), dtype=F64)
        else:
            kl_tok = token_kl(lp, ref, m, spec.kl_estimator, spec.kl_clamp, spec.kl_log_ratio_clamp)
            kl_term = (w_kl * kl_tok).sum()
            g_kl = spec.kl_coef * w_kl * _kl_grad(lp.detach() - ref, spec, mask)
    # ---- entropy term
    ent_term = None
    if ent is not None:
        ent_term = aggregate(ent, m, *modes["entropy"])
    # ---- value term (separate critic)
    value_term, vf_clipped = None, None
    if values is not None:
        if not spec.has_critic:
            notes.append("TRL GRPO has no critic: values ignored")
        else:
            value_term, vf_clipped = _value_term(values, old_values, returns, mask, spec, modes)

    total = policy
    if kl_term is not None:
        total = total + spec.kl_coef * kl_term
    total = spec.rl_coef * total
    if ent_term is not None and spec.entropy_coef != 0:
        total = total - spec.entropy_coef * ent_term
    grad_coef = spec.rl_coef * (g_policy + g_kl)

    per_token = {
        "ratio": torch.where(mask, ratio_shown, 0.0),
        "pg_loss": pg.detach(),
        "loss_weight": w_pol,
        "grad_coef": torch.where(mask, grad_coef, 0.0),
        "clipped_high": clipped_high & mask,
        "clipped_low": clipped_low & mask,
        "dual_clipped": dual & mask,
    }
    if kl_tok is not None:
        per_token["kl"] = kl_tok.detach()
    terms = {"policy": policy, "kl": kl_term, "entropy": ent_term, "value": value_term}
    ctx = _Ctx(cfg, spec, modes, m, mask, d, r, adv, terms, total, ent, kl_tok, vf_clipped)
    metrics = METRICS[framework](ctx)
    return LossResult(
        framework=framework,
        total=total,
        terms=terms,
        coefficients={"rl": spec.rl_coef, "kl": spec.kl_coef, "entropy": spec.entropy_coef},
        per_token=per_token,
        metrics=metrics,
        notes=tuple(notes),
    )


def _ppo_dr(r: Tensor, adv: Tensor, spec: _Spec, mask: Tensor):
    """Closed-form d(ppo_token_loss)/dr (ties split like torch.minimum) and the clip masks."""
    lo, hi = 1.0 - spec.eps_low, 1.0 + spec.eps_high
    clipped = r.clamp(lo, hi)
    r1 = r if spec.delta is None else r.clamp(max=spec.delta)
    a1, a2 = r1 * adv, clipped * adv
    d1 = -adv * (r <= spec.delta).to(F64) if spec.delta is not None else -adv
    d2 = -adv * ((r >= lo) & (r <= hi)).to(F64)
    dl = torch.where(a1 < a2, d1, torch.where(a2 < a1, d2, 0.5 * (d1 + d2)))
    dual = torch.zeros_like(mask)
    if spec.dual_clip is not None:
        loss0 = -torch.minimum(a1, a2)
        cap = -spec.dual_clip * adv
        capped = torch.where(loss0 < cap, dl, torch.where(loss0 == cap, 0.5 * dl, 0.0))
        dl = torch.where(adv < 0, capped, dl)
        dual = (adv < 0) & (loss0 > cap)
    if spec.delta is not None:
        dual = (adv < 0) & (r > spec.delta)
    clipped_high = (adv > 0) & (r > hi)
    clipped_low = (adv < 0) & (r < lo)
    return dl, clipped_high, clipped_low, dual


def _kl_grad(log_ratio: Tensor, spec: _Spec, mask: Tensor) -> Tensor:
    """Slope of KL_estimator(logp - ref) w.r.t. logp with the framework's clamps (0 if clamped)."""
    x = log_ratio
    inside = torch.ones_like(x)
    if spec.kl_log_ratio_clamp is not None:
        c = spec.kl_log_ratio_clamp
        inside = ((x >= -c) & (x <= c)).to(F64)
        x = x.clamp(-c, c)
    if spec.kl_estimator == "k1":
        value, slope = x, torch.ones_like(x)
    elif spec.kl_estimator == "abs":
        value, slope = x.abs(), torch.sign(x)
    elif spec.kl_estimator == "k2":
        value, slope = 0.5 * x * x, x
    else:
        value, slope = torch.expm1(-x) + x, -torch.expm1(-x)
    if spec.kl_clamp is not None:
        c = spec.kl_clamp
        inside = inside * ((value >= -c) & (value <= c)).to(F64)
    return torch.where(mask, slope * inside, 0.0)


def _value_term(values, old_values, returns, mask, spec: _Spec, modes):
    shape = tuple(mask.shape)
    if returns is None:
        raise ValueError("returns: needed with values for the critic loss")
    if spec.value_clip is not None and old_values is None:
        raise ValueError("old_values: needed for the clipped critic loss")
    v = _as_input("values", values, shape, mask, keep_grad=True)
    ret = _as_input("returns", returns, shape, mask, keep_grad=False)
    old = None
    if old_values is not None:
        old = _as_input("old_values", old_values, shape, mask, keep_grad=False)
    mode, factor = modes["value"]
    return value_loss(v, old, ret, mask, spec.value_clip, mode, factor)


# ------------------------------------------------------------------------------------ metrics


@dataclass(frozen=True)
class _Ctx:
    cfg: dict
    spec: _Spec
    modes: dict
    m: Tensor  # (B, T) float mask
    mask: Tensor  # (B, T) bool
    d: Tensor  # (B, T) logp - old (unclamped), 0 on padding
    r: Tensor  # (B, T) ratio used by the loss (detached)
    adv: Tensor
    terms: dict
    total: Tensor
    entropy: Tensor | None
    kl_tok: Tensor | None
    vf_clipped: Tensor | None

    def token_mean(self, x: Tensor) -> float:
        return aggregate(x.to(F64), self.m, "token-mean").item()

    def agg(self, x: Tensor, term: str = "policy") -> float:
        return aggregate(x.to(F64), self.m, *self.modes[term]).item()

    def item(self, name: str) -> float | None:
        value = self.terms[name]
        return None if value is None else value.detach().item()


def _surrogates(ctx: _Ctx) -> tuple[Tensor, Tensor]:
    spec = ctx.spec
    r1 = ctx.r if spec.delta is None else ctx.r.clamp(max=spec.delta)
    clipped = ctx.r.clamp(1.0 - spec.eps_low, 1.0 + spec.eps_high)
    return r1 * ctx.adv, clipped * ctx.adv


def _verl_metrics(ctx: _Ctx) -> dict[str, float]:
    spec, mode = ctx.spec, ctx.cfg["loss_mode"]
    out: dict[str, float] = {"actor/pg_loss": ctx.item("policy")}
    d = ctx.d if spec.clamp is None or spec.level != "token" else ctx.d.clamp(-20.0, 20.0)
    if mode != "gpg":
        if mode in ("vanilla", "gspo"):
            surr1, surr2 = _surrogates(ctx)
            frac = ctx.token_mean(-surr2 > -surr1)
            lower = 0.0
            if mode == "vanilla":
                clip1 = torch.maximum(-surr1, -surr2)
                lower = ctx.token_mean((clip1 > -spec.dual_clip * ctx.adv) & (ctx.adv < 0))
        elif mode == "cispo":
            frac = ctx.token_mean(ctx.r != ctx.r.clamp(spec.cispo_low, spec.cispo_high))
            lower = 0.0
        else:
            frac, lower = 0.0, 0.0
        out["actor/pg_clipfrac"] = frac
        out["actor/ppo_kl"] = ctx.token_mean(-d)
        out["actor/pg_clipfrac_lower"] = lower
    if ctx.entropy is not None:
        out["actor/entropy_loss"] = ctx.item("entropy")
    if spec.kl_on:
        out["kl_loss"] = ctx.item("kl")
        out["kl_coef"] = spec.kl_coef
    if ctx.terms["value"] is not None:
        out["critic/vf_loss"] = ctx.item("value")
        out["critic/vf_clipfrac"] = ctx.token_mean(ctx.vf_clipped)
    return out


def _roll_metrics(ctx: _Ctx) -> dict[str, float]:
    spec, m = ctx.spec, ctx.m
    out: dict[str, float] = {
        "actor/pg_loss": ctx.item("policy"),
        "actor/total_loss": ctx.total.detach().item(),
        "actor/approxkl": ctx.agg(0.5 * ctx.d * ctx.d),
        "actor/policykl": ctx.agg(ctx.d),
    }
    if ctx.kl_tok is not None:
        out["actor/kl_loss"] = ctx.item("kl")
    if spec.kind == "ppo":
        lo, hi = 1.0 - spec.eps_low, 1.0 + spec.eps_high
        high, low = (ctx.r > hi) & ctx.mask, (ctx.r < lo) & ctx.mask
        surr1, surr2 = _surrogates(ctx)
        out["actor/ppo_ratio_high_clipfrac"] = ctx.token_mean(high)
        out["actor/ppo_ratio_low_clipfrac"] = ctx.token_mean(low)
        out["actor/ppo_ratio_clipfrac"] = ctx.token_mean(high | low)
        out["actor/clipfrac"] = ctx.agg(surr2 < surr1)
        out["actor/ratio_mean"] = aggregate(ctx.r, m, "seq-mean-token-mean").item()
        out["actor/ratio_max"] = (ctx.r * m).max().item()
        out["actor/ratio_min"] = (ctx.r * m + (1.0 - m) * 1e10).min().item()
    elif spec.kind == "cispo":
        numel = float(m.numel())  # ROLL takes .mean() over every (B, T) position
        low = ((ctx.r < spec.cispo_low) & ctx.mask).sum().item() / numel
        high = ((ctx.r > spec.cispo_high) & ctx.mask).sum().item() / numel
        out["actor/cispo_lower_clipfrac"] = low
        out["actor/cispo_upper_clipfrac"] = high
        out["actor/cispo_total_clipfrac"] = low + high
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


def _openrlhf_metrics(ctx: _Ctx) -> dict[str, float]:
    surr1, surr2 = _surrogates(ctx)
    out: dict[str, float] = {
        "policy_loss": ctx.item("policy"),
        "ppo_clip_ratio": ctx.token_mean(surr2 < surr1),
        "ppo_kl": ctx.token_mean(-ctx.d),
    }
    if ctx.spec.kl_on:
        out["kl"] = ctx.item("kl")
    if ctx.cfg["entropy_coef"] is not None and ctx.entropy is not None:
        out["entropy_loss"] = ctx.item("entropy")
    if ctx.terms["value"] is not None:
        out["critic_loss"] = ctx.item("value")
    return out


def _trl_metrics(ctx: _Ctx) -> dict[str, float]:
    spec = ctx.spec
    out: dict[str, float] = {}
    if spec.entropy_coef != 0:  # TRL logs policy_loss (incl. beta * KL) with the entropy bonus
        kl_part = 0.0 if ctx.terms["kl"] is None else spec.kl_coef * ctx.item("kl")
        out["policy_loss"] = ctx.item("policy") + kl_part
    if spec.kl_on:
        out["kl"] = ctx.token_mean(ctx.kl_tok)
    if ctx.entropy is not None:
        out["entropy"] = ctx.token_mean(ctx.entropy)
    sequence = spec.level == "sequence"

    def global_mean(x: Tensor) -> float:
        if sequence:  # TRL: one value per sequence, mean over all B rows
            return _row_values(x, ctx.m).mean().item()
        return ctx.token_mean(x)

    if spec.kind == "ppo":
        r1 = ctx.r if spec.delta is None else ctx.r.clamp(max=spec.delta)
        low = (r1 < 1.0 - spec.eps_low) & (ctx.adv < 0) & ctx.mask
        high = (r1 > 1.0 + spec.eps_high) & (ctx.adv > 0) & ctx.mask
        out["clip_ratio/low_mean"] = global_mean(low)
        out["clip_ratio/high_mean"] = global_mean(high)
        out["clip_ratio/region_mean"] = global_mean(low | high)
        low_rows, high_rows = _row_values(low, ctx.m, sequence), _row_values(high, ctx.m, sequence)
        out["clip_ratio/low_min"] = _nan_reduce(low_rows, torch.min)
        out["clip_ratio/high_max"] = _nan_reduce(high_rows, torch.max)
    elif spec.kind == "cispo":
        out["cispo_clip_ratio"] = global_mean((ctx.r > spec.cispo_high) & (ctx.adv > 0) & ctx.mask)
    return out


def _row_values(x: Tensor, m: Tensor, empty_is_zero: bool = True) -> Tensor:
    """(B,) per-row masked mean of a 0/1 mask; empty rows 0 (sequence level) or NaN (token)."""
    x = x.to(F64) * m
    lengths = m.sum(-1)
    means = x.sum(-1) / lengths.clamp(min=1.0)
    if empty_is_zero:
        return means
    return torch.where(lengths > 0, means, torch.nan)


def _nan_reduce(x: Tensor, fn) -> float:
    finite = x[~torch.isnan(x)]
    return fn(finite).item() if finite.numel() else float("nan")


METRICS = {
    "roll": _roll_metrics,
    "verl": _verl_metrics,
    "openrlhf": _openrlhf_metrics,
    "trl": _trl_metrics,
}
