"""Each framework's train/rollout correction, under its own names and defaults.

The shared pieces (``Correction``, ``effective_sample_size``, ``lab_loss``) are in
``core/pipeline/rollout_correction.py``; the rules here are framework-specific, so they sit with
the dialects (each dialect record's ``mismatch_correction`` calls its own):

- verl ``algorithm.rollout_correction`` (``trainer/ppo/rollout_corr_helper.py``, verl 0.9.x):
  ``rollout_is`` token / sequence with ``rollout_is_threshold`` a number (TIS: clamp from above
  only, after a +-20 safety clamp of the log-ratio) or ``"lower_upper"`` (IcePop: weights outside
  [lower, upper] set to 0, the token stays in the denominator), ``rollout_is_batch_normalize``;
  ``rollout_rs`` rejection (comma-separated, all must pass) on token_k1/k2/k3, seq_sum_k1/k2/k3,
  seq_mean_k1/k2/k3 (seq_mean_k1 is the "geometric" Geo-RS), seq_max_k2/k3, with k1 = log mu -
  log pi_old; rejected tokens leave ``response_mask`` (and so the denominator);
- TRL ``vllm_importance_sampling_*`` (TRL 1.16, ``loss_variants.sampler_is_ratio``): mode
  token_truncate / token_mask / sequence_truncate / sequence_mask, [clip_min, clip_max]
  (defaults sequence_mask, None, 3.0), multiplying the per-token loss;
- OpenRLHF ``--algo.advantage.is_correction_*`` (0.11.2, ``loss_variants.rollout_correction``):
  level token / seq, mode mask / clip, gating ratio / binary_kl / tv, threshold (0.5, 5.0);
  0.11.0's ``is_correction_type`` tis / icepop / seq-mask-tis are (token, clip), (token, mask)
  and (seq, mask) with gating ratio (``OPENRLHF_TYPES``);
- ROLL ``train_infer_correction`` (``roll/utils/train_infer_corrections.py``): ``is_weight``
  (weight_type token / geometric / sequence, ``upper_bound`` 1.2, clamp [0, ub]) and ``filters``
  (agg_type, ratio [0.8, 1.2], diff = pi_old - mu in [-0.2, 0.2]) that multiply ``response_mask``.
  For a single-turn response ROLL's "segment" is the whole response, i.e. "geometric".

Effective sample size (``effective_sample_size``): ESS = (sum w)^2 / (n sum w^2) over the n
valid tokens, in (0, 1], 1 when every weight is equal. verl logs the same quantity as
``rollout_corr/rollout_is_eff_sample_size`` = 1 / mean((w / mean w)^2) after clamping w to
[0, threshold] and adding 1e-8 to the mean (``verl_ess``). The whole set verl logs under
``rollout_corr/`` (``verl_offpolicy_metrics``, ``verl_is_metrics``, ``verl_rs_metrics``) is
printed by the verl dialect's ``bypass_mode``.

Size: the four frameworks' corrections, verl's threshold parsers and its logged statistics sit
in one file so that each rule reads next to the ones the Mismatch page compares it with, all
returning the same ``Correction``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline import loss_variants as variants
from roll_viz.core.pipeline.rollout_correction import F64, Correction, prep, row_mean, row_sum

SAFETY_BOUND = 20.0  # verl: log-ratios clamped to [-20, 20] before exp

VERL_RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
TRL_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
ROLL_TYPES = ("token", "geometric", "sequence", "segment")
#: OpenRLHF 0.11.0's ``is_correction_type`` as (level, mode, gating) of the 0.11.2 keys
OPENRLHF_TYPES = {
    ("token", "clip", "ratio"): "tis",
    ("token", "mask", "ratio"): "icepop",
    ("seq", "mask", "ratio"): "seq-mask-tis",
}


def verl_ess(weights: Tensor, mask: Tensor, threshold: float) -> float:
    """ESS as verl logs it (``rollout_is_eff_sample_size``).

    1 / mean((w' / (mean w' + 1e-8))^2) with w' = clamp(w, 0, threshold).
    """
    m, w = prep(mask, weights)
    n = m.sum()
    clamped = w.clamp(min=0.0, max=threshold)
    mean = (clamped * m).sum() / n
    normed = clamped / (mean + 1e-8)
    return float(1.0 / ((normed * normed * m).sum() / n))


# ------------------------------------------------------------------------------------- verl


def parse_verl_is_threshold(spec: Any) -> tuple[float, float | None]:
    """Parse verl's ``rollout_is_threshold``: a number (TIS) or ``"lower_upper"`` (IcePop).

    Returns:
        (upper, lower or None).

    Raises:
        ValueError: not a number, ``lower_upper`` malformed, a bound <= 0, or lower > upper
            (verl's own checks, its wording).
    """
    if isinstance(spec, bool):
        raise ValueError("rollout_is_threshold must be a float or a 'lower_upper' string")
    if isinstance(spec, int | float):
        upper, lower = float(spec), None
    else:
        text = str(spec).strip()
        if not text:
            raise ValueError("rollout_is_threshold must not be an empty string.")
        try:
            if "_" in text:
                lo, hi = text.split("_", 1)
                lower, upper = float(lo), float(hi)
            else:
                upper, lower = float(text), None
        except ValueError as exc:
            raise ValueError(f"Invalid rollout_is_threshold '{text[:40]}'.") from exc
    if not math.isfinite(upper) or upper <= 0:
        raise ValueError(f"rollout_is_threshold upper bound must be positive, got {upper:g}.")
    if lower is not None:
        if not math.isfinite(lower) or lower <= 0:
            raise ValueError(f"rollout_is_threshold lower bound must be positive, got {lower:g}.")
        if lower > upper:
            raise ValueError("rollout_is_threshold lower bound must be <= upper bound.")
    return upper, lower


def parse_verl_rs_threshold(options: list[str], spec: Any) -> dict[str, tuple[float | None, float]]:
    """Parse verl's ``rollout_rs_threshold``, one entry per option.

    k1 options take ``lower_upper`` ratio bounds (one number u means [1/u, u]); the others one
    upper bound.

    Returns:
        option -> (lower or None, upper).

    Raises:
        ValueError: a missing, malformed, non-positive or inverted threshold, or a count that
            is neither 1 nor one per option.
    """
    if spec is None:
        raise ValueError("rollout_rs_threshold must be provided for rejection sampling.")
    raw = (
        [str(spec)]
        if isinstance(spec, int | float)
        else [p.strip() for p in str(spec).split(",") if p.strip()]
    )
    if not raw:
        raise ValueError("rollout_rs_threshold must contain at least one threshold value.")
    if len(raw) not in (1, len(options)):
        raise ValueError(
            f"rollout_rs_threshold expects one threshold or {len(options)} (one per option)."
        )
    if len(raw) == 1:
        raw = raw * len(options)
    out: dict[str, tuple[float | None, float]] = {}
    for option, text in zip(options, raw, strict=True):
        try:
            if option.endswith("k1"):
                if "_" in text:
                    lo, hi = text.split("_", 1)
                    lower, upper = float(lo), float(hi)
                else:
                    upper = float(text)
                    lower = 1.0 / upper
            else:
                if "_" in text:
                    raise ValueError(
                        f"rollout_rs_threshold for option '{option}' takes a single upper bound."
                    )
                lower, upper = None, float(text)
        except (ValueError, ZeroDivisionError) as exc:
            if "single upper bound" in str(exc):
                raise
            raise ValueError(f"Invalid numeric threshold '{text[:40]}' for '{option}'.") from exc
        bounds = [upper] if lower is None else [lower, upper]
        if not all(math.isfinite(b) and b > 0 for b in bounds):
            raise ValueError(f"Thresholds for option '{option}' must be positive, got {text}.")
        if lower is not None and lower > upper:
            raise ValueError(f"Thresholds for option '{option}' must be lower <= upper.")
        out[option] = (lower, upper)
    return out


def verl_rollout_is(
    old: Tensor, mu: Tensor, mask: Tensor, rollout_is: str, threshold: Any
) -> tuple[Tensor, Tensor, Tensor]:
    """The IS weights of verl ``compute_rollout_correction_weights`` (without batch normalisation).

    Returns:
        (weights (B, T), truncated (B, T) bool, masked (B, T) bool).
    """
    if rollout_is not in ("token", "sequence"):
        raise ValueError(f"Invalid rollout_is: {rollout_is}. Must be one of token, sequence.")
    upper, lower = parse_verl_is_threshold(threshold)
    m, o, u = prep(mask, old, mu)
    mf = m.to(F64)
    log_ratio = o - u
    if rollout_is == "token":
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        seq = row_sum(log_ratio, mf).unsqueeze(-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
        raw = torch.exp(seq).expand_as(log_ratio)
    raw = raw * mf
    if lower is None:  # TIS: truncate from above only
        return raw.clamp(max=upper), m & (raw > upper), torch.zeros_like(m)
    keep = (raw >= lower) & (raw <= upper)
    return torch.where(keep, raw, 0.0), torch.zeros_like(m), m & ~keep


def verl_rollout_rs(
    old: Tensor, mu: Tensor, mask: Tensor, rollout_rs: str, threshold: Any
) -> Tensor:
    """The keep mask of verl ``compute_rollout_rejection_mask``: valid tokens every option keeps.

    k1 = log mu - log pi_old, k2 = d^2 / 2, k3 = exp(d) - 1 - d with d = log pi_old - log mu
    clamped to +-20; k1 options keep log(lower) <= stat <= log(upper), the others stat <= upper;
    seq_sum / seq_mean / seq_max aggregate the token statistic over the response.
    """
    options = list(dict.fromkeys(o.strip() for o in str(rollout_rs).split(",") if o.strip()))
    if not options:
        raise ValueError("rollout_rs must contain at least one valid option.")
    for option in options:
        if option not in VERL_RS_OPTIONS:
            raise ValueError(f"Invalid rollout_rs option: {option[:40]}.")
    bounds = parse_verl_rs_threshold(options, threshold)
    m, o, u = prep(mask, old, mu)
    mf = m.to(F64)
    d = (o - u).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    stats = {"k1": -d, "k2": 0.5 * d * d, "k3": torch.exp(d) - 1.0 - d}
    keep = m.clone()
    for option in options:
        lower, upper = bounds[option]
        est = stats[option[-2:]]
        if option.startswith("token"):
            stat = est
        elif option.startswith("seq_sum"):
            stat = row_sum(est, mf).unsqueeze(-1).expand_as(est)
        elif option.startswith("seq_mean"):
            stat = row_mean(est, mf).unsqueeze(-1).expand_as(est)
        else:  # seq_max
            top = est.masked_fill(~m, -math.inf).max(-1).values
            top = torch.where(torch.isinf(top), 0.0, top)
            stat = top.unsqueeze(-1).expand_as(est)
        if lower is not None:
            passed = (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            passed = stat <= upper
        keep = keep & passed
    return keep


def verl_correction(
    old: Tensor,
    mu: Tensor,
    mask: Tensor,
    *,
    rollout_is: str | None = None,
    rollout_is_threshold: Any = 2.0,
    rollout_rs: str | None = None,
    rollout_rs_threshold: Any = None,
    rollout_is_batch_normalize: bool = False,
    name: str = "",
    count_rejected: bool = True,
    dual_clip: float | None = 3.0,
) -> Correction:
    """The weights and masks of verl's ``algorithm.rollout_correction`` (decoupled mode).

    IS weights multiply the PPO per-token loss; the rejection mask replaces ``response_mask``
    (rejected tokens get weight 0); IcePop's zero weights stay counted. ``count_rejected``: the
    v1 trainer (verl 0.9.1's default) counts the token-mean denominator on its ``loss_mask``,
    written before the rejection, so rejected tokens stay counted; the legacy trainer
    (``count_rejected=False``) counts the narrowed ``response_mask``. ``dual_clip``: the PPO
    loss's ``clip_ratio_c`` (verl's default 3, always on for A < 0).
    """
    m, _ = prep(mask, old)
    mf = m.to(F64)
    weights = mf.clone()
    truncated = torch.zeros_like(m)
    zeroed = torch.zeros_like(m)
    if rollout_is is not None:
        weights, truncated, zeroed = verl_rollout_is(
            old, mu, mask, rollout_is, rollout_is_threshold
        )
        if rollout_is_batch_normalize:
            if rollout_is == "token":
                mean = (weights * mf).sum() / mf.sum()
            else:
                valid = mf.sum(-1) > 0
                mean = row_mean(weights, mf)[valid].mean()
            if float(mean) > 1e-8:
                weights = weights / mean
    keep = m
    if rollout_rs is not None:
        keep = verl_rollout_rs(old, mu, mask, rollout_rs, rollout_rs_threshold)
    weights = torch.where(keep, weights, 0.0)
    config: tuple[tuple[str, Any], ...] = (("rollout_is", rollout_is),)
    if rollout_is is not None:
        config += (("rollout_is_threshold", rollout_is_threshold),)
        config += (("rollout_is_batch_normalize", rollout_is_batch_normalize),)
    config += (("rollout_rs", rollout_rs),)
    if rollout_rs is not None:
        config += (("rollout_rs_threshold", rollout_rs_threshold),)
    note = (
        "rollout_is_weights multiply the PPO per-token loss; rollout_rs rejections leave "
        + (
            "response_mask, the v1 trainer's token-mean still counts them (loss_mask is written "
            "before the rejection)"
            if count_rejected
            else "response_mask and the legacy trainer's token-mean denominator"
        )
        + "; IcePop zeroes a weight but keeps the token counted."
        + ("" if dual_clip is None else f" The PPO loss caps A<0 tokens at -{dual_clip:g} A.")
    )
    return Correction(
        "verl",
        name or "verl rollout_correction",
        config,
        weights,
        m if count_rejected else keep,
        truncated & keep,
        (zeroed | ~keep) & m,
        note,
        dual_clip,
    )


def verl_offpolicy_metrics(train: Tensor, mu: Tensor, mask: Tensor) -> dict[str, float]:
    """The train / rollout gap of verl ``compute_offpolicy_metrics``, under verl's names.

    ``train`` is the trainer's log-prob (bypass_mode: the current one), ``mu`` the sampler's;
    per-row means are over each row's tokens (an empty row gives 0, as verl's masked_mean with
    its 1e-8) and the batch means are over every row. kl = mean(mu - train), k3_kl =
    mean(exp(d) - d - 1) with d = train - mu, *_ppl = mean over rows of exp(-row mean log-prob),
    log_ppl_diff = row mean of mu - row mean of train, chi2_token = mean(exp(clamp(d))^2) - 1,
    chi2_seq = mean over rows of exp(2 clamp(row sum d)) - 1 (clamps +-20).

    Raises:
        ValueError: no valid token (verl asserts one).
    """
    m, t, u = prep(mask, train, mu)
    mf = m.to(F64)
    if not bool(m.any()):
        raise ValueError("verl_offpolicy_metrics: response_mask has no valid token")
    n = mf.sum()

    def row_mean(x: Tensor) -> Tensor:
        return row_sum(x, mf) / (mf.sum(-1) + 1e-8)

    d = t - u
    mean_t, mean_u = row_mean(t), row_mean(u)
    diff = mean_u - mean_t
    rho = torch.exp(d.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    seq = row_sum(d, mf).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "training_ppl": float(torch.exp(-mean_t).mean()),
        "training_log_ppl": float((-mean_t).mean()),
        "kl": float(row_sum(u - t, mf).sum() / n),
        "k3_kl": float(((torch.exp(d) - d - 1.0) * mf).sum() / n),
        "rollout_ppl": float(torch.exp(-mean_u).mean()),
        "rollout_log_ppl": float((-mean_u).mean()),
        "log_ppl_diff": float(diff.mean()),
        "log_ppl_abs_diff": float(diff.abs().mean()),
        "log_ppl_diff_max": float(diff.max()),
        "log_ppl_diff_min": float(diff.min()),
        "ppl_ratio": float(torch.exp(diff).mean()),
        "chi2_token": float((rho * rho * mf).sum() / n - 1.0),
        "chi2_seq": float(torch.exp(2.0 * seq).mean() - 1.0),
    }


def verl_is_metrics(
    train: Tensor,
    mu: Tensor,
    mask: Tensor,
    rollout_is: str,
    threshold: Any,
    batch_normalize: bool = False,
) -> dict[str, float]:
    """The IS-weight statistics of verl ``compute_rollout_correction_weights`` (its names).

    Computed on the weights before batch normalisation, over the whole response mask; masked
    means divide by count + 1e-8 as verl's. Sequence level: ``rollout_is_max`` / ``_min`` and the
    ratio fractions read the per-row log-ratio sums of every row (an empty row sums to 0, ratio
    1); the ``rollout_is_seq_*`` statistics are per-row means of the weights over every row (an
    empty row gives 0, so ``seq_max_deviation`` is at least 1 with one).
    """
    upper, lower = parse_verl_is_threshold(threshold)
    m, t, u = prep(mask, train, mu)
    mf = m.to(F64)
    n = mf.sum()

    def mmean(x: Tensor) -> Tensor:
        return (x.to(F64) * mf).sum() / (n + 1e-8)

    def row_mean(x: Tensor) -> Tensor:
        return row_sum(x, mf) / (mf.sum(-1) + 1e-8)

    log_ratio = t - u
    if rollout_is == "token":
        for_metrics = log_ratio
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)) * mf
    else:
        for_metrics = row_sum(log_ratio, mf).unsqueeze(-1)
        raw = torch.exp(for_metrics.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(mf) * mf
    if lower is None:
        w = raw.clamp(max=upper)
    else:
        w = torch.where((raw >= lower) & (raw <= upper), raw, 0.0)
    lo = 1.0 / upper if lower is None else lower
    out: dict[str, float] = {"rollout_is_mean": float(mmean(w))}
    if rollout_is == "sequence":
        out["rollout_is_max"] = math.exp(min(float(for_metrics.max()), SAFETY_BOUND))
        out["rollout_is_min"] = math.exp(float(for_metrics.min()))
        out["rollout_is_ratio_fraction_high"] = float(
            (for_metrics > math.log(upper)).double().mean()
        )
        out["rollout_is_ratio_fraction_low"] = float((for_metrics < math.log(lo)).double().mean())
    else:
        out["rollout_is_ratio_fraction_high"] = float(mmean(raw > upper))
        out["rollout_is_ratio_fraction_low"] = float(mmean(raw < lo))
        out["rollout_is_max"] = float(w[m].max())
        out["rollout_is_min"] = float(w[m].min())
    clamped = w.clamp(min=0.0, max=upper)
    var = mmean(clamped * clamped) - mmean(clamped) ** 2
    out["rollout_is_std"] = float(torch.sqrt(var.clamp(min=0.0))) if float(n) > 1 else 0.0
    normed = clamped / (mmean(clamped) + 1e-8)
    out["rollout_is_eff_sample_size"] = float(1.0 / mmean(normed * normed))
    seq = row_mean(w)
    out["rollout_is_seq_mean"] = float(seq.mean())
    out["rollout_is_seq_std"] = float(seq.std()) if seq.numel() > 1 else 0.0
    out["rollout_is_seq_max"] = float(seq.max())
    out["rollout_is_seq_min"] = float(seq.min())
    out["rollout_is_seq_max_deviation"] = float((seq - 1.0).abs().max())
    raw_seq = row_mean(raw)
    out["rollout_is_seq_fraction_high"] = float((raw_seq > upper).double().mean())
    out["rollout_is_seq_fraction_low"] = float((raw_seq < lo).double().mean())
    if lower is not None:
        out["rollout_is_oob_ratio"] = float(mmean((raw < lower) | (raw > upper)))
    if batch_normalize:
        if rollout_is == "token":
            factor = mmean(w)
        else:
            rows = (mf.sum(-1) > 0).to(F64)
            factor = (seq * rows).sum() / rows.sum().clamp(min=1e-8)
        out["rollout_is_batch_norm_factor"] = float(factor) if float(factor) > 1e-8 else 1.0
    return out


def verl_rs_metrics(
    train: Tensor, mu: Tensor, mask: Tensor, rollout_rs: str, threshold: Any
) -> dict[str, float]:
    """The rejection statistics of verl ``compute_rollout_rejection_mask`` (its names).

    Per rule (``rollout_rs_<rule>_*``): the statistic's token-weighted mean (a sequence rule's
    row value on each of its tokens), max / min and the fractions beyond the thresholds (per
    valid row for sequence rules, per token else; k1 rules compare with log thresholds), a std
    of the statistic clamped to the thresholds, per-row statistics over the rows with a token,
    and the token / row fractions it rejects; then ``rollout_rs_masked_fraction`` (tokens) and
    ``rollout_rs_seq_masked_fraction`` (rows with a rejected token over every row, empty ones
    included). Masked means divide by count + 1e-8 as verl's.
    """
    options = list(dict.fromkeys(o.strip() for o in str(rollout_rs).split(",") if o.strip()))
    bounds = parse_verl_rs_threshold(options, threshold)
    m, t, u = prep(mask, train, mu)
    mf = m.to(F64)
    n = mf.sum()
    valid = mf.sum(-1) > 0

    def mmean(x: Tensor) -> Tensor:
        return (x.to(F64) * mf).sum() / (n + 1e-8)

    def fraction(x: Tensor) -> float:
        return float(x.double().mean())

    d = (t - u).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    tokens = {"k1": -d, "k2": 0.5 * d * d, "k3": torch.exp(d) - 1.0 - d}
    out: dict[str, float] = {}
    final = torch.ones_like(mf)
    for option in options:
        lower, upper = bounds[option]
        k1 = option.endswith("k1")
        hi = math.log(upper) if k1 else upper
        lo = math.log(lower) if k1 else 0.0
        est = tokens[option[-2:]]
        if option.startswith("token"):
            stat, seq = est, row_sum(est, mf) / (mf.sum(-1) + 1e-8)
        else:
            if option.startswith("seq_sum"):
                seq = row_sum(est, mf)
            elif option.startswith("seq_mean"):
                seq = row_sum(est, mf) / (mf.sum(-1) + 1e-8)
            else:
                top = est.masked_fill(~m, -math.inf).max(-1).values
                seq = torch.where(torch.isinf(top), 0.0, top)
            stat = seq.unsqueeze(-1).expand_as(mf)
        keep = (stat >= lo) & (stat <= hi) if k1 else stat <= hi
        final = final * keep.to(F64)
        rows = seq[valid]
        name = f"rollout_rs_{option}"
        out[f"{name}_mean"] = float(mmean(stat))
        token_level = option.startswith("token") or rows.numel() == 0
        pool = stat[m] if token_level else rows
        out[f"{name}_max"], out[f"{name}_min"] = float(pool.max()), float(pool.min())
        out[f"{name}_fraction_high"] = (
            float(mmean(stat > hi)) if token_level else fraction(rows > hi)
        )
        low = (float(mmean(stat < lo)) if token_level else fraction(rows < lo)) if k1 else 0.0
        out[f"{name}_fraction_low"] = low
        clamped = stat.clamp(min=lo, max=hi)
        var = mmean(clamped * clamped) - mmean(clamped) ** 2
        out[f"{name}_std"] = float(torch.sqrt(var.clamp(min=0.0))) if float(n) > 1 else 0.0
        if rows.numel():
            out[f"{name}_seq_mean"] = float(rows.mean())
            out[f"{name}_seq_std"] = float(rows.std()) if rows.numel() > 1 else 0.0
            out[f"{name}_seq_max"], out[f"{name}_seq_min"] = float(rows.max()), float(rows.min())
            out[f"{name}_seq_max_deviation"] = float(rows.abs().max())
            out[f"{name}_seq_fraction_high"] = fraction(rows > hi)
            if k1:
                out[f"{name}_seq_fraction_low"] = fraction(rows < lo)
        rejected = ~keep & m
        out[f"{name}_masked_fraction"] = float(mmean(rejected))
        out[f"{name}_seq_masked_fraction"] = (
            fraction(rejected.any(-1)[valid]) if valid.any() else 0.0
        )
    out["rollout_rs_masked_fraction"] = float(mmean(1.0 - final))
    out["rollout_rs_seq_masked_fraction"] = fraction(((final < 0.5) & m).any(-1))
    return out


#: verl's ``RolloutCorrectionConfig`` presets (decoupled mode), their defaults
VERL_PRESETS: dict[str, dict[str, Any]] = {
    "token-TIS": {"rollout_is": "token", "rollout_is_threshold": 2.0},
    "seq-TIS": {"rollout_is": "sequence", "rollout_is_threshold": 2.0},
    "IcePop": {"rollout_is": "token", "rollout_is_threshold": "0.5_5.0"},
    "seq-MIS": {
        "rollout_is": "sequence",
        "rollout_is_threshold": 2.0,
        "rollout_rs": "seq_sum_k1",
        "rollout_rs_threshold": "0.5_2.0",
    },
    "Geo-RS": {"rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "0.999_1.001"},
    "K3-RS": {"rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01},
}


# ------------------------------------------------------------------------------------- TRL


def trl_correction(
    old: Tensor,
    mu: Tensor,
    mask: Tensor,
    *,
    mode: str = "sequence_mask",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> Correction:
    """TRL's ``vllm_importance_sampling_*`` (reuses ``loss_variants.sampler_is_ratio``)."""
    if mode not in TRL_MODES:
        raise ValueError(f"vllm_importance_sampling_mode: one of {', '.join(TRL_MODES)}")
    m, o, u = prep(mask, old, mu)
    mf = m.to(F64)
    applied = variants.sampler_is_ratio(o, u, mf, mode, clip_min, clip_max).expand_as(mf) * mf
    diff = (o - u) * mf
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    raw = torch.exp(diff).expand_as(mf)
    lo = -math.inf if clip_min is None else clip_min
    hi = math.inf if clip_max is None else clip_max
    out = m & ((raw < lo) | (raw > hi))
    truncated = out if mode.endswith("truncate") else torch.zeros_like(m)
    masked = out if mode.endswith("mask") else torch.zeros_like(m)
    config = (
        ("vllm_importance_sampling_correction", True),
        ("vllm_importance_sampling_mode", mode),
        ("vllm_importance_sampling_clip_min", clip_min),
        ("vllm_importance_sampling_clip_max", clip_max),
    )
    note = (
        "The ratio pi_old / mu (per token, or the product over the sequence) multiplies the "
        "per-token loss; masked tokens stay in the denominator."
    )
    return Correction("trl", f"TRL {mode}", config, applied, m, truncated, masked, note)


# -------------------------------------------------------------------------------- OpenRLHF


def openrlhf_correction(
    old: Tensor,
    mu: Tensor,
    mask: Tensor,
    *,
    level: str = "token",
    mode: str = "mask",
    gating: str = "ratio",
    threshold: tuple[float, float] = (0.5, 5.0),
) -> Correction:
    """OpenRLHF's ``is_correction_*`` (reuses ``loss_variants.rollout_correction``)."""
    if level not in ("token", "seq") or mode not in ("mask", "clip"):
        raise ValueError("is_correction_level: token or seq; is_correction_mode: mask or clip")
    if gating not in ("ratio", "binary_kl", "tv"):
        raise ValueError("is_correction_gating: ratio, binary_kl or tv")
    if mode == "clip" and (level != "token" or gating != "ratio"):
        raise ValueError("is_correction_mode: clip requires level token and gating ratio")
    low, high = threshold
    m, o, u = prep(mask, old, mu)
    coef, filtered = variants.rollout_correction(o, u, m, level, mode, gating, low, high)
    weights = torch.where(m, coef.expand_as(o), 0.0)
    hit = filtered.expand_as(m) & m
    truncated = hit if mode == "clip" else torch.zeros_like(m)
    masked = hit if mode == "mask" else torch.zeros_like(m)
    config = (
        ("is_correction_level", level),
        ("is_correction_mode", mode),
        ("is_correction_gating", gating),
        ("is_correction_threshold", (low, high)),
    )
    note = (
        "The coefficient multiplies the per-token PPO loss (mask: survivors keep w = pi_old / "
        "mu, the rest 0; clip: w clamped); the denominator is unchanged."
    )
    alias = OPENRLHF_TYPES.get((level, mode, gating))
    name = f"OpenRLHF {alias}" if alias else f"OpenRLHF {level} {mode} ({gating})"
    return Correction("openrlhf", name, config, weights, m, truncated, masked, note)


# ------------------------------------------------------------------------------------- ROLL


@dataclass(frozen=True)
class RollFilter:
    """One entry of ROLL's ``train_infer_correction.filters`` (its defaults)."""

    agg_type: str = "token"
    ratio_enabled: bool = True
    ratio_low: float = 0.8
    ratio_high: float = 1.2
    diff_enabled: bool = False
    diff_low: float = -0.2
    diff_high: float = 0.2


def _roll_stats(o: Tensor, u: Tensor, mf: Tensor) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """ROLL ``_compute_all_granularity``: ratio and prob-difference at each granularity."""
    log_ratio = o - u
    diff = torch.exp(o) - torch.exp(u)
    geo = torch.exp(row_mean(log_ratio, mf)).unsqueeze(-1).expand_as(o)
    seq = torch.exp(row_sum(log_ratio, mf)).unsqueeze(-1).expand_as(o)
    ratio = {"token": torch.exp(log_ratio), "geometric": geo, "sequence": seq, "segment": geo}
    dgeo = row_mean(diff, mf).unsqueeze(-1).expand_as(o)
    dseq = row_sum(diff, mf).unsqueeze(-1).expand_as(o)
    return ratio, {"token": diff, "geometric": dgeo, "sequence": dseq, "segment": dgeo}


def roll_correction(
    old: Tensor,
    mu: Tensor,
    mask: Tensor,
    *,
    is_weight_enabled: bool = True,
    weight_type: str = "token",
    upper_bound: float | None = 1.2,
    filters: tuple[RollFilter, ...] = (),
) -> Correction:
    """ROLL's ``train_infer_correction`` (``compute_train_infer_correction``).

    The IS weight (clamped to [0, upper_bound]) multiplies the per-token loss; each enabled
    filter keeps tokens whose statistic lies within its bounds and multiplies ``response_mask``.
    The token-mean denominator stays the batch's token count from before the filters
    (``batch_num_tokens``); under ``loss_agg_mode: token-mean`` ROLL's ``agg_loss`` also sums
    the loss without the mask, so there a filter does not change the policy loss (it does under
    ROLL's default ``seq-mean-token-mean``); the weights here show the filter applied.
    """
    for t in (weight_type, *(f.agg_type for f in filters)):
        if t not in ROLL_TYPES:
            raise ValueError(f"weight_type / agg_type: one of {', '.join(ROLL_TYPES)}")
    m, o, u = prep(mask, old, mu)
    mf = m.to(F64)
    ratio, diff = _roll_stats(o, u, mf)
    truncated = torch.zeros_like(m)
    if is_weight_enabled:
        weights = ratio[weight_type]
        if upper_bound is not None:
            truncated = m & (weights > upper_bound)
            weights = weights.clamp(min=0.0, max=upper_bound)
    else:
        weights = torch.ones_like(mf)
    keep = m.clone()
    for f in filters:
        if f.ratio_enabled:
            r = ratio[f.agg_type]
            keep = keep & (r >= f.ratio_low) & (r <= f.ratio_high)
        if f.diff_enabled:
            x = diff[f.agg_type]
            keep = keep & (x >= f.diff_low) & (x <= f.diff_high)
    weights = torch.where(keep, weights, 0.0)
    config = (
        ("is_weight.enabled", is_weight_enabled),
        ("is_weight.weight_type", weight_type),
        ("is_weight.upper_bound", upper_bound),
        (
            "filters",
            tuple(
                (
                    f.agg_type,
                    (f.ratio_low, f.ratio_high) if f.ratio_enabled else None,
                    (f.diff_low, f.diff_high) if f.diff_enabled else None,
                )
                for f in filters
            ),
        ),
    )
    note = (
        "train_infer_is_weight multiplies the per-token loss; filters multiply response_mask "
        "while the token-mean denominator keeps the pre-filter count (under token-mean "
        "agg_loss ignores the mask, so there a filter changes nothing)."
    )
    name = f"ROLL {weight_type} IS" if is_weight_enabled else "ROLL filter"
    if is_weight_enabled and filters:
        name += " + filter"
    return Correction("roll", name, config, weights, m, truncated & keep, m & ~keep, note)
