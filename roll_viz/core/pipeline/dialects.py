"""Stage 6: the four framework dialects, each a short composition of the shared primitives.

Each ``<framework>_pipeline(batch, cfg, running)`` reproduces that framework's order of
operations, defaults and constants (algorithms.md section 1) on a validated float64 ``Batch`` and
a resolved config (``config.resolve_config``), and returns a ``Trace`` whose ``notes`` list, in
order, the conventions it applied. ``roll_viz.core.pipeline.run`` validates and dispatches.

Orders of operations:
- roll: reward_norm (grpo forces group/group) -> clip +-reward_clip -> reward on the last token,
  -beta*KL if add_token_level_kl -> token clip +-reward_clip -> (whiten_rewards) -> gae (unmasked
  values) or reward-to-go -> (whiten_advantages) -> mask -> (advantage_clip).
- verl: no reward processing -> score on the last token, -beta*KL if use_kl_in_reward ->
  estimator, which normalizes inside (gae: carry-through, then always whitened).
- openrlhf: baseline shaping (rloo / mean / group_norm) -> clamp to clip_range -> reward on the
  last token minus kl_coef*KL (unless use_loss) -> gae (masked values) or cumulative returns
  (gamma forced 1 for the group estimators) -> global biased whitening for gae/reinforce/
  reinforce_baseline.
- trl: GRPO group mean -> scale by group/batch std (+1e-4) or not -> broadcast; KL only in the loss.

Returns, as each framework defines them: roll gae A+V, reinforce/grpo the reward-to-go; verl gae
A+V, reinforce_plus_plus the unwhitened R, remax the undiscounted reward-to-go, the outcome
estimators the advantages; openrlhf gae A+V, others the cumulative return before whitening; trl
has no returns (advantages are reported).

Edge cases (defined behaviour, never a silent NaN; ``run`` also rejects any non-finite result):
- group of one: verl grpo/dr_grpo/rf++-baseline use mean 0, std 1 (the raw reward passes
  through), verl rloo keeps the raw score; OpenRLHF's group estimators and TRL assert n >= 2 ->
  ValueError naming the group; ROLL with a group std would take torch.std of one value (NaN in
  the framework) -> ValueError explaining why (a group *mean* alone is fine: r - r = 0).
- all-equal group: advantage exactly 0 (the group mean is computed with a refinement pass).
- zero-length response (all-zero mask row): its score still counts in group statistics (verl
  sums it in through index -1), but it has no token to land on: advantages 0, noted.
- whitening with <= 1 valid token: ROLL skips it (PR #476, noted); verl raises ValueError (its
  masked_var does too); OpenRLHF's biased variance is 0 -> advantages 0.
- missing logprobs: KL 0 everywhere (noted); missing values for gae or baseline_scores for remax
  -> ValueError naming the field.

KL loss readout (``Trace.kl_loss``): ROLL and verl aggregate it with ``loss_agg_mode`` (ROLL's
default seq-mean-token-mean), OpenRLHF token-level, and OpenRLHF with ``use_loss`` and
``init_coef = 0`` builds no reference model and reports 0; the full loss is ``losses.py``.

What roll-viz simplifies against the real recipes: one step, one domain, no PPO update (so the
KL loss uses the rollout log-probs), no dynamic sampling or length penalties;
missing log-probs mean policy == reference (KL 0); the adaptive controller is applied once to this
batch with n_steps = batch size (OpenRLHF updates it after the train step from the training KL).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import apply_mask, group_stats, masked_mean, masked_sum, masked_whiten
from roll_viz.core.pipeline.advantages import ADVANTAGE_ESTIMATORS, EstimatorParams, token_rewards
from roll_viz.core.pipeline.kl import kl_term_mean, next_kl_coef, observed_kl, token_kl
from roll_viz.core.pipeline.losses import aggregate, loss_agg_modes
from roll_viz.core.pipeline.postprocess import (
    clip_rewards,
    leave_one_out_baseline,
    normalize_scores,
    require_group_size,
    singleton_groups,
    update_running_moments,
)
from roll_viz.core.records import Batch, RunningMoments, Trace

ROLL_KL = {"kl": "k1", "abs": "abs", "mse": "k2", "k3": "k3"}
VERL_KL = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2"}
VERL_KL |= {"low_var_kl": "k3", "k3": "k3"}
VERL_ESTIMATORS = {
    "gae": "gae",
    "grpo": "grpo",
    "rloo": "rloo",
    "reinforce_plus_plus": "reinforce_pp",
    "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
    "remax": "remax",
}
OPENRLHF_GROUP_ESTIMATORS = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")


def _num(x: float) -> str:
    """Compact number for notes (``:g`` without exponent padding): 1e-06 -> 1e-6, 0.0001, 0.2."""
    return re.sub(r"e([+-])0(\d)", r"e\1\2", f"{x:g}")


class Conventions:
    """The framework's constants with the viz_ overrides applied, plus notes about overrides."""

    def __init__(self, cfg: dict[str, Any], std_ddof: int, eps: float, whiten_ddof: int | None):
        self.std_ddof = std_ddof if cfg["viz_std_ddof"] is None else int(cfg["viz_std_ddof"])
        self.eps = eps if cfg["viz_eps"] is None else float(cfg["viz_eps"])
        self.whiten_ddof = whiten_ddof
        if whiten_ddof is not None and cfg["viz_whiten_ddof"] is not None:
            self.whiten_ddof = int(cfg["viz_whiten_ddof"])
        self.notes: list[str] = []
        if self.std_ddof != std_ddof:
            self.notes.append(
                f"roll-viz override viz_std_ddof={self.std_ddof}: "
                f"{'biased' if self.std_ddof == 0 else 'unbiased'} reward std "
                f"(the framework uses ddof={std_ddof})"
            )
        if self.eps != eps:
            self.notes.append(
                f"roll-viz override viz_eps={_num(self.eps)} (the framework uses {_num(eps)})"
            )
        if whiten_ddof is None and cfg["viz_whiten_ddof"] is not None:
            self.notes.append("viz_whiten_ddof has no effect: this dialect never whitens")
        elif self.whiten_ddof != whiten_ddof:
            self.notes.append(
                f"roll-viz override viz_whiten_ddof={self.whiten_ddof} "
                f"(the framework uses ddof={whiten_ddof})"
            )

    @staticmethod
    def ddof_word(ddof: int) -> str:
        """'unbiased (n-1)' or 'biased (n)'."""
        return "unbiased (n-1)" if ddof == 1 else "biased (n)"


def _common_notes(batch: Batch) -> list[str]:
    notes = []
    empty = torch.nonzero(batch.response_mask.sum(-1) == 0).flatten().tolist()
    if empty:
        notes.append(
            f"zero-length response in sample(s) {empty}: the reward has no token to land on, "
            "advantages are 0 for those rows"
        )
    if batch.logprobs is None:
        notes.append("no logprobs/ref_logprobs given: KL taken as 0 (policy = reference)")
    return notes


def _kl(batch: Batch, estimator: str, clamp: float | None, log_ratio_clamp: float | None = None):
    """(B, T) token KL of the batch (zeros without log-probs)."""
    if batch.logprobs is None:
        return torch.zeros_like(batch.response_mask)
    return token_kl(
        batch.logprobs, batch.ref_logprobs, batch.response_mask, estimator, clamp, log_ratio_clamp
    )


def _controller(beta: float, kl: Tensor, mask: Tensor, target, horizon, notes: list) -> float:
    """Next beta from the adaptive controller (fixed when target is None)."""
    if target is None:
        return beta
    observed = observed_kl(kl, mask)
    nxt = next_kl_coef(beta, observed, target, horizon, n_steps=kl.shape[0])
    notes.append(
        f"adaptive KL controller: beta {_num(beta)} -> {nxt:.8g} (observed KL {observed:.6g}, "
        f"target {_num(target)}, n_steps = batch size {kl.shape[0]}, horizon {_num(horizon)})"
    )
    return nxt


def _trace(framework: str, cfg: dict, batch: Batch, **fields) -> Trace:
    mask = batch.response_mask
    for key in ("kl", "token_rewards", "advantages", "returns"):
        fields[key] = apply_mask(fields[key], mask)
    fields["notes"] = tuple(fields["notes"])
    return Trace(
        framework=framework, config=tuple(sorted(cfg.items())), scores=batch.scores, **fields
    )


def roll_pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
    """ROLL RLVR: reward_postprocess -> compute_token_reward -> compute_advantage.

    Args:
        batch: validated float64 batch.
        cfg: resolved ROLL config.
        running: running reward statistics from earlier batches (for "running" norm types).

    Returns:
        Trace; ``running`` is updated with this batch when a norm type is "running".
    """
    mask, scores, est = batch.response_mask, batch.scores, cfg["adv_estimator"]
    conv = Conventions(cfg, std_ddof=1, eps=1e-6, whiten_ddof=1)
    notes = _common_notes(batch) + conv.notes
    mean_type, std_type = cfg["norm_mean_type"], cfg["norm_std_type"]
    if est == "grpo":
        mean_type = std_type = "group"
        notes.append("GRPO forces norm_mean_type=norm_std_type=group (config values ignored)")
    if "running" in (mean_type, std_type):
        running = update_running_moments(running or RunningMoments(), scores)
        notes.append(
            "running statistics updated with this batch before normalizing (intended behaviour; "
            "ROLL's reward_norm reads running_ctrl['domain'], a KeyError in the framework)"
        )
    if std_type == "group" and conv.std_ddof > 0 and singleton_groups(batch.group_ids):
        label = singleton_groups(batch.group_ids, batch.group_labels)[0]
        raise ValueError(
            f"roll {est} with group std needs at least 2 samples per prompt (group {label!r} has "
            "1): ROLL takes torch.std of one value, which is NaN"
        )
    norm = normalize_scores(
        scores,
        batch.group_ids,
        mean_type,
        std_type,
        running,
        ddof=conv.std_ddof,
        eps=conv.eps,
        group_labels=batch.group_labels,
    )
    if mean_type == "batch" and std_type == "group":
        notes.append(
            "batch mean + group std: ROLL's reward_norm may mis-broadcast this pair (unverified); "
            "roll-viz divides each sample by its own group's std"
        )
    if mean_type or std_type:
        notes.append(
            f"reward_norm: mean={mean_type}, std={std_type}"
            + (
                f", {_std_word(std_type, conv)}, eps {_num(conv.eps)} added to std"
                if std_type
                else ""
            )
        )
    clip = cfg["reward_clip"]
    rewards, clip_frac = clip_rewards(norm.rewards, -clip if clip else None, clip)
    if clip:
        notes.append(f"response reward clipped to +-{_num(clip)} ({clip_frac:.0%} clipped)")

    kl = _kl(batch, ROLL_KL[cfg["kl_penalty"]], clamp=10.0 if cfg["kl_penalty"] == "k3" else None)
    beta = cfg["init_kl_coef"]
    kl_in_reward = cfg["add_token_level_kl"]
    tokens = token_rewards(rewards, mask, kl if kl_in_reward else None, beta)
    if kl_in_reward:
        notes.append(
            f"KL in reward: r_t -= {_num(beta)} * {cfg['kl_penalty']} (k3 clamped to +-10)"
        )
    next_beta = _controller(beta, kl, mask, cfg["target_kl"], cfg["kl_horizon"], notes)
    if clip:
        tokens, token_frac = clip_rewards(tokens, -clip, clip, mask)
        notes.append(f"token rewards clipped to +-{_num(clip)} again ({token_frac:.0%} of tokens)")
    if cfg["whiten_rewards"]:
        tokens = _roll_whiten(tokens, mask, conv, notes, "token rewards")

    params = EstimatorParams(
        gamma=cfg["gamma"], lam=cfg["lambd"], values=batch.values, carry_through=False
    )
    if est == "gae":
        notes.append("GAE over the full width with unmasked critic values (pad slots leak, T8)")
        estimate = ADVANTAGE_ESTIMATORS["gae"](tokens, mask, batch.group_ids, params)
    else:
        notes.append(f"{est}: advantage = discounted reward-to-go of the token rewards (gamma)")
        estimate = ADVANTAGE_ESTIMATORS["reinforce"](tokens, mask, batch.group_ids, params)
    advantages = estimate.advantages
    if cfg["whiten_advantages"]:
        advantages = _roll_whiten(advantages, mask, conv, notes, "advantages")
    if cfg["advantage_clip"]:
        c = cfg["advantage_clip"]
        advantages, adv_frac = clip_rewards(advantages, -c, c, mask)
        notes.append(f"advantages clipped to +-{_num(c)} ({adv_frac:.0%} of tokens)")

    kl_loss = None
    if cfg["use_kl_loss"]:
        mode, factor = loss_agg_modes("roll", cfg)["kl"]
        kl_loss = aggregate(_kl(batch, "k3", clamp=10.0), mask, mode, factor).item()
        notes.append(
            "KL loss is always k3 (clamped +-10), independent of kl_penalty; aggregated with "
            f"loss_agg_mode {cfg['loss_agg_mode']}"
        )
    return _trace(
        "roll",
        cfg,
        batch,
        rewards=rewards,
        baseline=norm.baseline,
        scale=norm.scale,
        clip_frac=clip_frac,
        kl=kl,
        kl_coef=beta,
        next_kl_coef=next_beta,
        kl_in_reward=kl_in_reward,
        kl_loss=kl_loss,
        token_rewards=tokens,
        advantages=advantages,
        returns=estimate.returns,
        running=running,
        notes=notes,
    )


def _std_word(std_type: str, conv: Conventions) -> str:
    if std_type == "running":
        return "running std (Bessel-corrected over all scores seen)"
    return f"{std_type} std {conv.ddof_word(conv.std_ddof)}"


def _roll_whiten(x: Tensor, mask: Tensor, conv: Conventions, notes: list, what: str) -> Tensor:
    """ROLL masked_whiten, auto-disabled with <= 1 valid token (issue #475 / PR #476)."""
    if mask.sum() <= 1:
        notes.append(f"{what} whitening skipped: at most one valid token (ROLL PR #476)")
        return x
    notes.append(
        f"{what} whitened token-weighted, {conv.ddof_word(conv.whiten_ddof)} var, rsqrt(var+1e-8)"
    )
    return masked_whiten(x, mask, ddof=conv.whiten_ddof, eps=1e-8)


def verl_pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
    """verl: (apply_kl_penalty) -> compute_advantage, normalization inside the estimator.

    Args:
        batch: validated float64 batch.
        cfg: resolved verl config.
        running: ignored (verl has no running reward normalization); returned unchanged.

    Returns:
        Trace with rewards = raw scores.
    """
    mask, scores, est = batch.response_mask, batch.scores, cfg["adv_estimator"]
    conv = Conventions(cfg, std_ddof=1, eps=1e-6, whiten_ddof=1)
    notes = _common_notes(batch) + conv.notes
    notes.append("no response-level reward processing in verl (rewards = scores)")
    kl = _verl_kl(batch, cfg["kl_penalty"])
    beta, next_beta = cfg["kl_coef"], cfg["kl_coef"]
    kl_in_reward = cfg["use_kl_in_reward"]
    tokens = token_rewards(scores, mask, kl if kl_in_reward else None, beta)
    if kl_in_reward:
        notes.append(f"KL in reward: r_t -= {_num(beta)} * {cfg['kl_penalty']}")
        if cfg["kl_ctrl_type"] == "adaptive":
            next_beta = _controller(beta, kl, mask, cfg["target_kl"], cfg["horizon"], notes)
    empty = mask.sum(-1) == 0
    # a zero-length response's score has no token; verl still sums it into s_i (index -1)
    seq = masked_sum(tokens, mask, dim=-1) + torch.where(empty, scores, torch.zeros_like(scores))
    name = VERL_ESTIMATORS[est]
    if est == "grpo" and not cfg["norm_adv_by_std_in_grpo"]:
        name = "dr_grpo"
        notes.append("norm_adv_by_std_in_grpo=False: advantage = s - group mean (Dr.GRPO)")
    params = EstimatorParams(
        gamma=cfg["gamma"],
        lam=cfg["lam"],
        values=batch.values,
        baseline_scores=batch.baseline_scores,
        seq_rewards=seq,
        std_eps=conv.eps,
        std_ddof=conv.std_ddof,
        singleton="raw",
        carry_through=True,
        whiten_ddof=conv.whiten_ddof,
        group_labels=batch.group_labels,
    )
    notes.extend(_verl_estimator_notes(name, batch, conv))
    try:
        estimate = ADVANTAGE_ESTIMATORS[name](tokens, mask, batch.group_ids, params)
        advantages = estimate.advantages
        if name == "gae":
            advantages = masked_whiten(advantages, mask, ddof=conv.whiten_ddof, eps=1e-8)
    except ValueError as err:
        raise ValueError(f"verl {est}: {err}") from None

    kl_loss = None
    if cfg["use_kl_loss"]:
        mode, factor = loss_agg_modes("verl", cfg)["kl"]
        kl_loss = aggregate(_verl_kl(batch, cfg["kl_loss_type"]), mask, mode, factor).item()
        notes.append(
            f"KL loss term: {cfg['kl_loss_type']} (coef {_num(cfg['kl_loss_coef'])}), "
            f"aggregated with loss_agg_mode {cfg['loss_agg_mode']}"
        )
    return _trace(
        "verl",
        cfg,
        batch,
        rewards=scores.clone(),
        baseline=estimate.baseline,
        scale=estimate.scale,
        clip_frac=0.0,
        kl=kl,
        kl_coef=beta,
        next_kl_coef=next_beta,
        kl_in_reward=kl_in_reward,
        kl_loss=kl_loss,
        token_rewards=tokens,
        advantages=advantages,
        returns=estimate.returns,
        running=running,
        notes=notes,
    )


def _verl_kl(batch: Batch, name: str) -> Tensor:
    """Verl ``kl_penalty``: k3 with the log-ratio clamped to +-20 and the result to +-10."""
    canonical = VERL_KL[name]
    if canonical == "k3":
        return _kl(batch, "k3", clamp=10.0, log_ratio_clamp=20.0)
    return _kl(batch, canonical, clamp=None)


def _verl_estimator_notes(name: str, batch: Batch, conv: Conventions) -> list[str]:
    singles = singleton_groups(batch.group_ids)
    ddof = conv.ddof_word(conv.whiten_ddof)
    whiten = f"advantages whitened token-weighted, {ddof} var, rsqrt(var+1e-8)"
    notes = {
        "gae": [
            "GAE carries values/advantages through masked tokens",
            whiten,
            "returns = A + V (unwhitened)",
        ],
        "grpo": [
            f"group std {conv.ddof_word(conv.std_ddof)}, eps {_num(conv.eps)} added to std",
            "returns = advantages",
        ],
        "dr_grpo": ["returns = advantages"],
        "rloo": ["RLOO: A = s - mean of the other samples of the prompt", "returns = advantages"],
        "reinforce_pp": [
            "token returns with gamma, carried through masked tokens",
            whiten,
            "returns = unwhitened R",
        ],
        "reinforce_pp_baseline": ["s - group mean on every token", whiten, "returns = advantages"],
        "remax": [
            "A_t = undiscounted reward-to-go - greedy baseline score",
            "returns = reward-to-go",
        ],
    }[name]
    if singles and name in ("grpo", "dr_grpo", "reinforce_pp_baseline"):
        notes.append("singleton group: mean 0, std 1 (raw reward passes through)")
    if singles and name == "rloo":
        notes.append("singleton group keeps its raw score (verl rloo; rloo_vectorized gives 0)")
    return notes


def openrlhf_pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
    """OpenRLHF: compute_advantages_and_returns (shaping -> clamp -> compute_reward -> returns).

    Args:
        batch: validated float64 batch.
        cfg: resolved OpenRLHF config.
        running: ignored (OpenRLHF has no running reward normalization); returned unchanged.

    Returns:
        Trace with rewards = shaped and clamped response rewards.
    """
    mask, scores, est = batch.response_mask, batch.scores, cfg["advantage_estimator"]
    conv = Conventions(cfg, std_ddof=1, eps=1e-9, whiten_ddof=0)
    notes = _common_notes(batch) + conv.notes
    gamma = cfg["gamma"]
    zeros, ones = torch.zeros_like(scores), torch.ones_like(scores)
    baseline, scale = zeros, ones
    if est in OPENRLHF_GROUP_ESTIMATORS:
        require_group_size(batch.group_ids, batch.group_labels, f"openrlhf {est}")
        if gamma != 1.0:
            notes.append(f"gamma forced to 1.0 for {est} (configured {_num(gamma)})")
        gamma = 1.0
        stats = group_stats(scores, batch.group_ids, ddof=conv.std_ddof)
        if est == "rloo":
            baseline = leave_one_out_baseline(scores, batch.group_ids)
            notes.append("rloo shaping: r - mean of the other samples of the prompt")
        else:
            baseline = stats.mean
            notes.append(f"{est} shaping: r - group mean")
        if est == "group_norm":
            scale = stats.std + conv.eps
            notes.append(f"group std {conv.ddof_word(conv.std_ddof)}, eps {_num(conv.eps)} added")
    shaped = (scores - baseline) / scale
    low, high = cfg["clip_range"] or (None, None)
    rewards, clip_frac = clip_rewards(shaped, low, high)
    if cfg["clip_range"]:
        notes.append(
            f"shaped reward clamped to clip_range ({_num(low)}, {_num(high)}) after baseline "
            f"shaping ({clip_frac:.0%} clipped)"
        )

    kl = _kl(batch, cfg["kl_estimator"], clamp=10.0)
    beta = max(cfg["init_coef"], 0.0)
    kl_in_reward = not cfg["use_loss"] and beta > 0
    tokens = token_rewards(rewards, mask, kl if kl_in_reward else None, beta)
    if kl_in_reward:
        notes.append(f"KL in reward: r_t -= {_num(beta)} * {cfg['kl_estimator']} (clamped to +-10)")
    next_beta = _controller(beta, kl, mask, cfg["target"], cfg["horizon"], notes)

    if est == "gae":
        values = None if batch.values is None else apply_mask(batch.values, mask)
        params = EstimatorParams(gamma=gamma, lam=cfg["lambd"], values=values, carry_through=False)
        notes.append("GAE with rewards and values multiplied by the mask (no carry-through)")
        estimate = ADVANTAGE_ESTIMATORS["gae"](tokens, mask, batch.group_ids, params)
    else:
        params = EstimatorParams(gamma=gamma, carry_through=False)
        notes.append("cumulative returns of the token rewards; advantages = returns")
        estimate = ADVANTAGE_ESTIMATORS["reinforce"](tokens, mask, batch.group_ids, params)
    advantages = estimate.advantages
    if est in ("gae", "reinforce", "reinforce_baseline") and mask.sum() > 0:
        if cfg["no_std_norm"]:
            advantages = advantages - masked_mean(advantages, mask)
            notes.append("no_std_norm: advantages mean-centred (token-weighted), not scaled")
        else:
            advantages = masked_whiten(
                advantages, mask, ddof=conv.whiten_ddof, eps=1e-8, eps_mode="floor"
            )
            notes.append(
                f"advantages whitened globally token-weighted, "
                f"{conv.ddof_word(conv.whiten_ddof)} var, rsqrt(max(var, 1e-8))"
            )

    kl_loss = None
    if cfg["use_loss"] and beta == 0:
        kl_loss = 0.0
        notes.append("KL in the loss with init_coef = 0: no reference model, KL loss 0")
    elif cfg["use_loss"]:
        kl_loss = kl_term_mean(kl, mask)
        notes.append(
            f"KL in the loss: {cfg['kl_estimator']} (clamped to +-10), coef {_num(beta)}, "
            "token-level mean (aggregate_loss default)"
        )
    return _trace(
        "openrlhf",
        cfg,
        batch,
        rewards=rewards,
        baseline=baseline,
        scale=scale,
        clip_frac=clip_frac,
        kl=kl,
        kl_coef=beta,
        next_kl_coef=next_beta,
        kl_in_reward=kl_in_reward,
        kl_loss=kl_loss,
        token_rewards=tokens,
        advantages=advantages,
        returns=estimate.returns,
        running=running,
        notes=notes,
    )


def trl_pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
    """TRL GRPOTrainer: (r - group mean) / (group|batch std + 1e-4) broadcast; KL only in the loss.

    Args:
        batch: validated float64 batch.
        cfg: resolved TRL config.
        running: ignored; returned unchanged.

    Returns:
        Trace with rewards = scores, returns = advantages, kl = unclamped k3, kl_loss reported.
    """
    mask, scores, mode = batch.response_mask, batch.scores, cfg["scale_rewards"]
    conv = Conventions(cfg, std_ddof=1, eps=1e-4, whiten_ddof=None)
    notes = _common_notes(batch) + conv.notes
    require_group_size(batch.group_ids, batch.group_labels, "trl GRPO (num_generations)")
    stats = group_stats(scores, batch.group_ids, ddof=conv.std_ddof)
    baseline = stats.mean
    notes.append("advantage = reward - group mean")
    if mode == "group":
        scale = stats.std + conv.eps
    elif mode == "batch":
        scale = torch.zeros_like(scores) + scores.std(correction=conv.std_ddof) + conv.eps
    else:
        scale = torch.ones_like(scores)
    if mode != "none":
        notes.append(
            f"scale_rewards={mode}: divided by the {mode} std, "
            f"{conv.ddof_word(conv.std_ddof)}, eps {_num(conv.eps)} added"
        )
    else:
        notes.append("scale_rewards=none: no std division (Dr.GRPO)")
    adv_seq = (scores - baseline) / scale
    advantages = apply_mask(adv_seq[:, None].expand_as(mask), mask)
    notes.append("sequence advantage broadcast to every completion token; returns = advantages")
    tokens = token_rewards(scores, mask)
    kl = _kl(batch, "k3", clamp=None)
    notes.append(
        f"KL only in the loss: k3 unclamped, beta {_num(cfg['beta'])}"
        + (" (beta=0: TRL does not load the reference model)" if cfg["beta"] == 0 else "")
    )
    return _trace(
        "trl",
        cfg,
        batch,
        rewards=scores.clone(),
        baseline=baseline,
        scale=scale,
        clip_frac=0.0,
        kl=kl,
        kl_coef=cfg["beta"],
        next_kl_coef=cfg["beta"],
        kl_in_reward=False,
        kl_loss=kl_term_mean(kl, mask),
        token_rewards=tokens,
        advantages=advantages,
        returns=advantages,
        running=running,
        notes=notes,
    )


PIPELINES = {
    "roll": roll_pipeline,
    "verl": verl_pipeline,
    "openrlhf": openrlhf_pipeline,
    "trl": trl_pipeline,
}
