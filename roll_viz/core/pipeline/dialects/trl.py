"""TRL (GRPOTrainer): everything roll-viz knows about TRL, in one file.

Order of operations (``pipeline``): GRPO group mean -> scale by group/batch std (+1e-4) or not
-> broadcast to every completion token; the KL is only in the loss (k3, unclamped). TRL has no
returns (advantages are reported) and asserts n >= 2 per group -> ValueError naming the group.

Also here: TRL's ``GRPOConfig`` keys with defaults, choices and help (``scale_rewards`` True /
False read as group / none), the policy-update keys, the beta key, the named recipes, the
translation of the sidebar's generic knobs, the loss spec and the logged metric names.

Size: one file per framework by design (its tables, order of operations, loss spec and
logged metrics side by side), so a reader checks the framework against one file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import apply_mask, group_stats
from roll_viz.core.pipeline import rollout_correction as rc
from roll_viz.core.pipeline.advantages import token_rewards
from roll_viz.core.pipeline.dialects import corrections as fc
from roll_viz.core.pipeline.dialects import shared
from roll_viz.core.pipeline.dialects.record import Dialect, SelfTestCases
from roll_viz.core.pipeline.dialects.shared import (
    Conventions,
    base_notes,
    batch_kl,
    make_trace,
    num,
)
from roll_viz.core.pipeline.dialects.trl_entropy import applied_entropy_coef, next_entropy_coef
from roll_viz.core.pipeline.dialects.trl_eras import ERAS as ERAS  # recipes of record
from roll_viz.core.pipeline.kl import kl_term_mean
from roll_viz.core.pipeline.losses import F64, LossMode, LossSpec, MetricContext
from roll_viz.core.pipeline.postprocess import require_group_size
from roll_viz.core.records import Batch, RunningMoments, Trace

NAME = "trl"
LABEL = "TRL"

# ------------------------------------------------------------------------------ KL estimators

#: TRL has no KL estimator key: its loss KL is always k3 (unclamped).
KL_CANON: dict[str, str] = {}
#: canonical -> TRL's name: none (no key to set).
KL_NAMES = shared.kl_names(KL_CANON)
#: No key picks the KL estimator.
KL_ESTIMATOR_KEY: str | None = None

# ---------------------------------------------------------------------- reward-stage config

DEFAULTS: dict[str, Any] = {
    "scale_rewards": "group",
    "beta": 0.0,
    "multi_objective_aggregation": "sum_then_normalize",
    "reward_weights": None,
    **shared.VIZ_DEFAULTS,
}

CHOICES: dict[str, tuple] = {
    "scale_rewards": ("group", "batch", "none"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    **shared.VIZ_CHOICES,
}

HELP: dict[str, str] = {
    "scale_rewards": "GRPOConfig.scale_rewards: divide (reward - group mean) by the group std, "
    "the batch std, or nothing (+1e-4).",
    "beta": "GRPOConfig.beta: coefficient of the k3 KL term in the loss (0 = no reference model).",
    "multi_objective_aggregation": "GRPOConfig.multi_objective_aggregation: sum_then_normalize "
    "(the combined reward, then scale_rewards) or normalize_then_sum (GDPO-style: z-score each "
    "reward function per group, weighted sum, then a batch z-score; scale_rewards unused).",
    "reward_weights": "GRPOConfig.reward_weights: weight of each reward function (None = all 1), "
    "in the order of batch.reward_components.",
    **shared.VIZ_HELP,
}

#: The key that selects the advantage "estimator" (TRL's GRPO scaling mode).
ESTIMATOR_KEY = "scale_rewards"

#: Generic knob -> TRL key (None: TRL has no such knob).
ALIASES: dict[str, str | None] = {
    "estimator": "scale_rewards",
    "gamma": None,
    "lam": None,
    "beta": "beta",
    "kl_estimator": None,
    "kl_in_reward": None,
    "clip": None,
    "whiten": None,
}

#: Config values given as a bool that TRL reads as another value: True -> group, False -> none.
BOOL_VALUES: dict[str, dict[bool, Any]] = {"scale_rewards": {True: "group", False: "none"}}

# ------------------------------------------------------------------ policy-update (loss) keys

LOSS_DEFAULTS: dict[str, Any] = {
    "loss_type": "dapo",
    "epsilon": 0.2,
    "epsilon_high": None,
    "delta": None,
    "importance_sampling_level": "token",
    "max_completion_length": 512,
    "entropy_coef": 0.0,
    "use_adaptive_entropy": False,
    "entropy_coef_min": 0.0,
    "entropy_coef_max": 1.0,
    "entropy_coef_delta": 0.005,
    "entropy_target": 0.2,
    "viz_last_world_entropy": None,
    "sapo_temperature_pos": 1.0,
    "sapo_temperature_neg": 1.05,
    "vespo_k_pos": 2.0,
    "vespo_lambda_pos": 3.0,
    "vespo_k_neg": 3.0,
    "vespo_lambda_neg": 2.0,
    "top_entropy_quantile": 1.0,
    "off_policy_mask_threshold": None,
    "use_bias_correction_kl": True,
    "vllm_importance_sampling_correction": True,
    "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_min": None,
    "vllm_importance_sampling_clip_max": 3.0,
    "mask_truncated_completions": False,
}

LOSS_CHOICES: dict[str, tuple] = {
    "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"),
    "vllm_importance_sampling_mode": (
        "token_truncate",
        "token_mask",
        "sequence_truncate",
        "sequence_mask",
    ),
    "importance_sampling_level": ("token", "sequence"),
}

LOSS_HELP: dict[str, str] = {
    "loss_type": "GRPOConfig.loss_type: dapo (sum / active tokens), grpo (mean of sequence "
    "means), bnpo (token mean), dr_grpo (sum / (B * max_completion_length)), cispo, sapo, luspo "
    "(per-sequence token sum, mean over sequences) or vespo (Gamma-shaped sequence weight).",
    "epsilon": "GRPOConfig.epsilon: lower clip epsilon (and upper when epsilon_high is None).",
    "epsilon_high": "GRPOConfig.epsilon_high: upper clip epsilon (None = epsilon); for cispo "
    "the absolute cap on the weight min(r, epsilon_high) (ScaleRL recommends 5.0).",
    "delta": "GRPOConfig.delta: two-sided cap r <= delta before the PPO min (INTELLECT-2).",
    "importance_sampling_level": "GRPOConfig.importance_sampling_level: token ratio or "
    "sequence = exp(mean log-ratio).",
    "max_completion_length": "GRPOConfig.max_completion_length: the dr_grpo divisor.",
    "entropy_coef": "GRPOConfig.entropy_coef: loss -= coef * mean per-token entropy "
    "(independent of loss_type).",
    "use_adaptive_entropy": "GRPOConfig.use_adaptive_entropy: entropy_coef becomes a controller "
    "(arXiv 2505.22312): the bonus applies only while the previous step's mean entropy is <= "
    "entropy_target (never on the first step), and after each optimizer step the coefficient "
    "moves by entropy_coef_delta up (entropy <= target) or down, within [min, max].",
    "entropy_coef_min": "GRPOConfig.entropy_coef_min: lower bound of the adaptive coefficient.",
    "entropy_coef_max": "GRPOConfig.entropy_coef_max: upper bound of the adaptive coefficient.",
    "entropy_coef_delta": "GRPOConfig.entropy_coef_delta: step of the adaptive coefficient.",
    "entropy_target": "GRPOConfig.entropy_target: target mean token entropy.",
    "viz_last_world_entropy": "roll-viz extension, not a framework option: the previous "
    "optimizer step's mean entropy that use_adaptive_entropy gates on (None = the first step, "
    "TRL's +inf: no bonus).",
    "sapo_temperature_pos": "GRPOConfig.sapo_temperature_pos: SAPO temperature for A > 0.",
    "sapo_temperature_neg": "GRPOConfig.sapo_temperature_neg: SAPO temperature for A <= 0.",
    "vespo_k_pos": "GRPOConfig.vespo_k_pos: VESPO shape k for A >= 0.",
    "vespo_lambda_pos": "GRPOConfig.vespo_lambda_pos: VESPO rate lambda for A >= 0.",
    "vespo_k_neg": "GRPOConfig.vespo_k_neg: VESPO shape k for A < 0.",
    "vespo_lambda_neg": "GRPOConfig.vespo_lambda_neg: VESPO rate lambda for A < 0.",
    "top_entropy_quantile": "GRPOConfig.top_entropy_quantile: train only on tokens whose entropy "
    "is at or above this quantile's complement (1.0 = all tokens, 0.2 = the top 20 %).",
    "off_policy_mask_threshold": "GRPOConfig.off_policy_mask_threshold: drop A<0 sequences whose "
    "mean log(pi_old / pi) exceeds it (DeepSeek-V3.2); None = off.",
    "use_bias_correction_kl": "GRPOConfig.use_bias_correction_kl: multiply the k3 KL by the "
    "importance ratio (TRL 1.16 default True).",
    "vllm_importance_sampling_correction": "GRPOConfig.vllm_importance_sampling_correction: "
    "multiply the loss by the sampler's IS ratio pi_old / mu (TRL applies it when vLLM "
    "samples; roll-viz when rollout_logprobs are given).",
    "vllm_importance_sampling_mode": "GRPOConfig.vllm_importance_sampling_mode: token or "
    "sequence (product over the tokens) ratio, truncated to or masked outside [clip_min, "
    "clip_max].",
    "vllm_importance_sampling_clip_min": "GRPOConfig.vllm_importance_sampling_clip_min: lower "
    "bound (None = none).",
    "vllm_importance_sampling_clip_max": "GRPOConfig.vllm_importance_sampling_clip_max: upper "
    "bound (None = none).",
    "mask_truncated_completions": "GRPOConfig.mask_truncated_completions: drop completions "
    "without EOS from every loss term and its token count; here those that reach "
    "max_completion_length tokens (the calculator sees lengths, not EOS).",
}

#: Every key the policy update reads (loss table plus the loss KL coefficient).
LOSS_KEYS: tuple[str, ...] = (*LOSS_DEFAULTS, "beta")

# -------------------------------------------------------------- what the other layers ask

#: Where beta (the loss KL coefficient) lives.
BETA_KEY = "beta"
#: What ``train_config`` sets from a run's beta and controller (the sidebar's values dropped).
CONTROLLER_KEYS: tuple[str, ...] = (BETA_KEY,)
#: The PPO clip epsilon's key(s); a training run's ``clip_eps`` fills them.
CLIP_KEYS: tuple[str, ...] = ("epsilon",)
#: TRL has no adaptive KL controller (removed in PR #2174).
ADAPTIVE_BETA = False
#: No response-level reward normalization stage (``scale_rewards`` is the estimator).
HAS_REWARD_NORM = False
#: The KL is only in the loss: beta cannot change the advantages.
KL_IN_LOSS_ONLY = True
#: eps added to the group/batch std.
STD_EPS = 1e-4
#: Estimators whose advantage is the discounted reward-to-go of the token rewards: none.
RETURN_ESTIMATORS: tuple[str, ...] = ()
#: TRL's GRPO has no critic, so no GAE.
GAE_PADDING: str | None = None

#: estimators that read batch inputs beyond scores, mask and log-probs: none here.
ESTIMATOR_INPUTS: dict[str, tuple[str, ...]] = {}
#: What a group of one sample means (shown when G = 1).
SINGLETON_NOTE = (
    "TRL requires at least 2 generations per prompt (GRPO and RLOO are both group methods)."
)
#: The same for the editable reward table (a prompt with a single row).
SINGLETON_BEHAVIOUR = (
    "TRL refuses to run: GRPOTrainer requires num_generations >= 2 (nanstd would be NaN)."
)

#: Named recipes: a generic estimator (``shared.RECIPE_NAMES``) -> TRL's closest settings.
RECIPES: dict[str, dict[str, Any]] = {
    "grpo": {"scale_rewards": "group"},
    "dr_grpo (no std)": {"scale_rewards": "none"},
    "liteppo (group mean, batch std)": {"scale_rewards": "batch"},
}

#: The loss options the Update and Training pages offer (``lm.loss_options``): name shown and put
#: in links (TRL's own key and value) -> the loss keys it sets; each reads more than log-probs.
LOSS_OPTIONS: dict[str, dict[str, Any]] = {
    "top_entropy_quantile: 0.2": {"top_entropy_quantile": 0.2},
    "vllm_importance_sampling_mode: token_truncate": {
        "vllm_importance_sampling_mode": "token_truncate"
    },
}

#: What the browser port (``ui/instant/pipeline.js``) computes exactly for TRL: key -> the
#: values it covers, None for any value ``resolve_config`` accepts. The instant payload ships
#: this table; any other key or value takes the server path.
BROWSER_COVERAGE: dict[str, tuple | None] = {
    "scale_rewards": CHOICES["scale_rewards"],
    "multi_objective_aggregation": CHOICES["multi_objective_aggregation"],
    # weights of named reward functions: the server path
    "reward_weights": (None,),
    "beta": None,
}

#: The run formats (``data/runs``) this framework writes, their advantages recomputed with
#: ``RECIPES["grpo"]``: TRL's completions log.
RUN_FORMATS: tuple[str, ...] = ("trl",)

#: The self-test page's cases in this dialect's keys (``analysis/selftest.py`` runs them).
SELFTEST = SelfTestCases(
    seed=(
        (
            "trl scale_rewards=group, eps 1e-4 (T1)",
            {"scale_rewards": "group"},
            "one",
            (0.201950822, -1.085485666, 0.883534844),
        ),
        (
            "trl scale_rewards=batch, two groups (T14)",
            {"scale_rewards": "batch"},
            "two",
            (0.0780965, -0.419768687, 0.341672187, -0.292861875, 0.0, 0.292861875),
        ),
    ),
    group_norm=({"scale_rewards": "group"}, (0.201950822, -1.085485666, 0.883534844)),
    masks=(
        {"scale_rewards": "group"},
        {"scale_rewards": "batch"},
    ),
)


def estimator_name(config: Mapping[str, Any]) -> str:
    """TRL's GRPOTrainer always estimates with GRPO (``scale_rewards`` only scales)."""
    return "grpo"


def kl_estimator(config: Mapping[str, Any]) -> str:
    """The loss KL estimator: always k3."""
    return "k3"


def to_native(generic: Mapping[str, Any]) -> dict[str, Any]:
    """The sidebar's generic widget values -> a TRL config (shipped defaults underneath).

    Only the estimator (scale_rewards) and beta have keys; the rest is skipped.
    """
    return shared.widgets_to_native(DEFAULTS, ALIASES, CHOICES, generic)


def from_native(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Generic widget values that reproduce a TRL config (default: the shipped defaults)."""
    return shared.widgets_from_native(DEFAULTS if config is None else config, ALIASES)


def from_canonical(canonical: Mapping[str, object]) -> tuple[dict, tuple[str, ...]]:
    """Canonical settings -> (TRL keys, the settings TRL has no key for)."""
    return shared.canonical_to_native(ALIASES, KL_NAMES, canonical)


def norm_config(mode: str) -> dict[str, Any] | None:
    """TRL has no reward-normalization stage: None."""
    return None


def kl_placement(in_reward: bool, beta: float) -> dict[str, Any] | None:
    """The KL is only in the loss: no keys for "in the loss", None for "in the reward"."""
    return None if in_reward else {}


def train_config(
    config: Mapping[str, Any], beta: float, adaptive: bool, target_kl: float, horizon: float
) -> dict[str, Any]:
    """One training step's config: beta as the loss KL coefficient (no controller)."""
    cfg = dict(config)
    cfg[BETA_KEY] = beta
    return cfg


def beta_blocked(config: Mapping[str, Any]) -> str | None:
    """Why beta cannot reach TRL's advantages: the KL is only in the loss."""
    return (
        "TRL puts the KL only in the loss (beta = coefficient of k3 in the loss), so beta "
        "cannot change TRL's advantages: the lines are flat. Switch the dialect to see it."
    )


def clip_range(cfg: Mapping[str, Any]) -> tuple[float, float]:
    """(low, high) epsilon of the ratio clip of a resolved config.

    epsilon, and epsilon_high (which falls back to epsilon when null).
    """
    high = cfg["epsilon_high"]
    return float(cfg["epsilon"]), float(cfg["epsilon"] if high is None else high)


def unread_inputs(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """Optional (B, T) batch inputs this config's ``pipeline`` never reads: both of them.

    GRPO has no critic (values) and no optimal token baseline (``sum_pi_squared``). ``run``
    validates them as usual but leaves them out of the float64 copy it hands over.
    """
    return ("values", "sum_pi_squared")


# ------------------------------------------------------------------------------ the pipeline


def pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
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
    notes = base_notes(batch) + conv.notes
    require_group_size(batch.group_ids, batch.group_labels, "trl GRPO (num_generations)")
    if cfg["multi_objective_aggregation"] == "normalize_then_sum":
        return _normalize_then_sum(batch, cfg, conv, notes, running)
    if cfg["reward_weights"] is not None:
        scores = _weighted_sum(batch, cfg["reward_weights"])
        notes.append(
            f"sum_then_normalize: reward = weighted sum of the reward functions (weights "
            f"{list(cfg['reward_weights'])}), then normalised"
        )
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
            f"{conv.ddof_word(conv.std_ddof)}, eps {num(conv.eps)} added"
        )
    else:
        notes.append("scale_rewards=none: no std division (Dr.GRPO)")
    adv_seq = (scores - baseline) / scale
    advantages = apply_mask(adv_seq[:, None].expand_as(mask), mask)
    notes.append("sequence advantage broadcast to every completion token; returns = advantages")
    tokens = token_rewards(scores, mask)
    kl = batch_kl(batch, "k3", clamp=None)
    notes.append(
        f"KL only in the loss: k3 unclamped, beta {num(cfg['beta'])}"
        + (" (beta=0: TRL does not load the reference model)" if cfg["beta"] == 0 else "")
    )
    return make_trace(
        "trl",
        cfg,
        batch,
        masked=(tokens, advantages),  # token_rewards' and apply_mask's outputs
        rewards=scores.clone(),
        baseline=baseline,
        scale=scale,
        clip_frac=0.0,
        kl=kl,
        beta=cfg["beta"],
        next_beta=cfg["beta"],
        kl_in_reward=False,
        kl_loss=kl_term_mean(kl, mask),
        token_rewards=tokens,
        advantages=advantages,
        returns=advantages,
        running=running,
        notes=notes,
    )


def _weighted_sum(batch: Batch, weights) -> Tensor:
    """TRL's combined reward ``sum_k w_k r_k`` (``rewards_per_func * reward_weights``).

    The reward functions are ``batch.reward_components`` in order; without components the
    combined score is the only function (one weight).
    """
    components = dict(batch.reward_components or {"reward": batch.scores})
    if len(weights) != len(components):
        raise ValueError(
            f"reward_weights has {len(weights)} weights for {len(components)} reward functions"
        )
    total = torch.zeros_like(batch.scores)
    for weight, values in zip(weights, components.values(), strict=True):
        total = total + weight * values
    return total


def _normalize_then_sum(
    batch: Batch, cfg: dict[str, Any], conv: Conventions, notes: list, running
) -> Trace:
    """TRL ``multi_objective_aggregation="normalize_then_sum"``.

    ``GRPOTrainer._generate_and_score_completions``, TRL 1.16.

    Each reward function's scores are z-scored within the group (``(r - mean) / (nanstd +
    1e-4)``), weighted by ``reward_weights`` and summed; the sum is z-scored over the batch.
    Without ``batch.reward_components`` the combined score is the only function.
    """
    mask, scores = batch.response_mask, batch.scores
    components = dict(batch.reward_components or {"reward": scores})
    weights = cfg["reward_weights"] or (1.0,) * len(components)
    if len(weights) != len(components):
        raise ValueError(
            f"reward_weights has {len(weights)} weights for {len(components)} reward functions"
        )
    total = torch.zeros_like(scores)
    for weight, values in zip(weights, components.values(), strict=True):
        stats = group_stats(values, batch.group_ids, ddof=conv.std_ddof)
        total = total + weight * (values - stats.mean) / (stats.std + conv.eps)
    mean = total.mean()
    std = total.std(correction=conv.std_ddof)
    adv_seq = (total - mean) / (std + conv.eps)
    notes.append(
        f"normalize_then_sum: each of {list(components)} z-scored per group (eps "
        f"{num(conv.eps)}), weighted sum (weights {list(weights)}), then z-scored over the batch"
    )
    advantages = apply_mask(adv_seq[:, None].expand_as(mask), mask)
    kl = batch_kl(batch, "k3", clamp=None)
    tokens = token_rewards(scores, mask)
    return make_trace(
        "trl",
        cfg,
        batch,
        masked=(tokens, advantages),  # token_rewards' and apply_mask's outputs
        rewards=total,
        baseline=torch.zeros_like(scores) + mean,
        scale=torch.zeros_like(scores) + std + conv.eps,
        clip_frac=0.0,
        kl=kl,
        beta=cfg["beta"],
        next_beta=cfg["beta"],
        kl_in_reward=False,
        kl_loss=kl_term_mean(kl, mask),
        token_rewards=tokens,
        advantages=advantages,
        returns=advantages,
        running=running,
        notes=notes,
    )


# ---------------------------------------------------------------------------- the update loss


def loss_agg_modes(cfg: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Canonical aggregation of each loss term by ``loss_type`` (``GRPOTrainer._compute_loss``).

    The policy's is the ``LOSS_TYPES`` row's (token-mean where it names none), the KL is
    aggregated like the policy, the entropy token-mean; "value" is None: GRPO has no critic.
    """
    mode, factor = LOSS_TYPES[cfg["loss_type"]].policy_agg or ("token-mean", None)
    policy = (mode, cfg[factor] if isinstance(factor, str) else factor)
    return {"policy": policy, "kl": policy, "entropy": ("token-mean", None), "value": None}


def loss_spec(cfg: dict[str, Any], notes: list[str]) -> LossSpec:
    """TRL's policy loss as a ``LossSpec`` (``GRPOTrainer._compute_loss``, every loss_type).

    The ratio level, KL, entropy and masking settings every loss type shares, plus the row of
    ``LOSS_TYPES``.
    """
    level = "sequence" if cfg["importance_sampling_level"] == "sequence" else "token"
    kwargs = {
        "level": level,
        "clamp": None,
        "kl_on": cfg["beta"] != 0,
        "kl_estimator": "k3",
        "beta": cfg["beta"],
        "kl_ratio_correction": cfg["beta"] != 0 and cfg["use_bias_correction_kl"],
        "entropy_coef": applied_entropy_coef(cfg),
        "entropy_adaptive": cfg["use_adaptive_entropy"],
        "has_critic": False,
        "off_policy_threshold": cfg["off_policy_mask_threshold"],
        "entropy_quantile": cfg["top_entropy_quantile"],
        "sampler_is": (
            cfg["vllm_importance_sampling_mode"],
            cfg["vllm_importance_sampling_clip_min"],
            cfg["vllm_importance_sampling_clip_max"],
        )
        if cfg["vllm_importance_sampling_correction"]
        else None,
    }
    if cfg["beta"] != 0:
        notes.append(
            "TRL: beta * k3 (unclamped) added per token before aggregation"
            + (
                ", times the importance ratio (use_bias_correction_kl)"
                if kwargs["kl_ratio_correction"]
                else ""
            )
        )
    if cfg["off_policy_mask_threshold"] is not None:
        notes.append(
            f"off_policy_mask_threshold {cfg['off_policy_mask_threshold']:g}: sequences with A < 0 "
            "and mean log(pi_old/pi) above it get no policy loss (the KL term still flows)"
        )
    if cfg["top_entropy_quantile"] < 1.0:
        notes.append(
            f"top_entropy_quantile {cfg['top_entropy_quantile']:g}: only tokens at or above the "
            f"{1 - cfg['top_entropy_quantile']:g} entropy quantile carry the policy loss and the "
            "entropy bonus (the denominators stay the same)"
        )
    loss_type = LOSS_TYPES[cfg["loss_type"]]
    return LossSpec(kind=loss_type.kind, **loss_type.params(cfg, notes), **kwargs)


def _clip_range(cfg: Mapping[str, Any]) -> tuple[float, float]:
    """Epsilon and epsilon_high (which falls back to epsilon)."""
    high = cfg["epsilon_high"] if cfg["epsilon_high"] is not None else cfg["epsilon"]
    return cfg["epsilon"], high


def _token_sum_note(cfg: Mapping[str, Any], notes: list[str]) -> None:
    if cfg["importance_sampling_level"] == "sequence":
        notes.append("sequence-level IS with a token-sum loss weights each sequence by length")


def _ppo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    low, high = _clip_range(cfg)
    level = "sequence" if cfg["importance_sampling_level"] == "sequence" else "token"
    notes.append(
        f"TRL {cfg['loss_type']}: {level} ratio, no clamp, clip [1-{low:g}, 1+{high:g}]"
        + (f", delta cap {cfg['delta']:g}" if cfg["delta"] is not None else "")
    )
    return {"eps_low": low, "eps_high": high, "delta": cfg["delta"]}


def _ppo_token_sum(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    _token_sum_note(cfg, notes)
    return _ppo(cfg, notes)


def _luspo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append("loss_type luspo: PPO clip, each sequence's token sum, mean over sequences")
    return _ppo(cfg, notes)


def _cispo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    _token_sum_note(cfg, notes)
    high = _clip_range(cfg)[1]
    notes.append(f"loss_type cispo: weight min(r, epsilon_high = {high:g}), no lower bound")
    return {"cispo_high": high}


def _sapo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append("loss_type sapo: soft gate, aggregated like grpo")
    return {"tau_pos": cfg["sapo_temperature_pos"], "tau_neg": cfg["sapo_temperature_neg"]}


def _vespo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    notes.append(
        "loss_type vespo: -phi(w) * A * logp, phi(w) = e^lambda w^k e^(-lambda w) of the "
        "sequence ratio w = exp(sum of log-ratios), k/lambda by the sign of A; sum / tokens"
    )
    keys = ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
    return {"vespo": tuple(cfg[key] for key in keys)}


def loss_metrics(ctx: MetricContext) -> dict[str, float]:
    """TRL's logged metrics under its own names.

    The entropy / KL metrics, the loss type's own (its ``LOSS_TYPES`` row), then the sampler's
    importance-sampling metrics.
    """
    spec, cfg = ctx.spec, ctx.cfg
    out: dict[str, float] = {}
    adaptive = spec.entropy_adaptive
    if spec.entropy_coef != 0 or adaptive:  # TRL logs policy_loss (incl. beta * KL) then
        kl_part = 0.0 if ctx.terms["kl"] is None else spec.beta * ctx.item("kl")
        out["policy_loss"] = ctx.item("policy") + kl_part
        # logged on each optimizer step while the bonus is on: the adaptive controller's value
        # after this step's update
        out["entropy_coef"] = spec.entropy_coef
        if adaptive:
            if ctx.entropy is None:
                raise ValueError("entropy: needed for use_adaptive_entropy")
            kept = (
                ctx.m
                if ctx.extra is None or "entropy_kept" not in ctx.extra
                else (ctx.m * ctx.extra["entropy_kept"].to(ctx.m.dtype))
            )
            world = (ctx.entropy * kept).sum().item() / max(kept.sum().item(), 1.0)
            out["entropy_coef"] = next_entropy_coef(cfg, world)
            ctx.metric_notes["entropy_coef"] = (
                f"after this step's update: mean entropy {world:.4g} "
                f"{'<=' if world <= cfg['entropy_target'] else '>'} target "
                f"{cfg['entropy_target']:g}; this step applied {spec.entropy_coef:g}"
            )
    if spec.kl_on:
        out["kl"] = ctx.token_mean(ctx.kl_tok)
    if ctx.entropy is not None:
        out["entropy"] = ctx.token_mean(ctx.entropy)
    loss_type = LOSS_TYPES[cfg["loss_type"]]
    if loss_type.metrics is not None:
        out.update(loss_type.metrics(ctx))
    if ctx.extra.get("log_w") is not None and spec.sampler_is is not None:
        delta = ctx.extra["log_w"].abs()[ctx.mask]
        out["sampling/sampling_logp_difference/mean"] = delta.mean().item() if len(delta) else 0.0
        out["sampling/sampling_logp_difference/max"] = delta.max().item() if len(delta) else 0.0
        unit = ctx.extra["is_ratio_unit"]
        flat = unit.flatten() if unit.shape[1] == 1 else unit[ctx.mask]
        for stat, fn in (("min", torch.min), ("mean", torch.mean), ("max", torch.max)):
            value = fn(flat).item() if flat.numel() else 0.0
            out[f"sampling/importance_sampling_ratio/{stat}"] = value
    return out


def _global_mean(ctx: MetricContext, x: Tensor) -> float:
    """Token mean, or at sequence level one value per sequence and the mean over all B rows."""
    if ctx.spec.level == "sequence":
        return _row_values(x, ctx.m).mean().item()
    return ctx.token_mean(x)


def _clip_ratio_metrics(ctx: MetricContext) -> dict[str, float]:
    spec = ctx.spec
    sequence = spec.level == "sequence"
    r1 = ctx.r if spec.delta is None else ctx.r.clamp(max=spec.delta)
    low = (r1 < 1.0 - spec.eps_low) & (ctx.adv < 0) & ctx.mask
    high = (r1 > 1.0 + spec.eps_high) & (ctx.adv > 0) & ctx.mask
    low_rows, high_rows = _row_values(low, ctx.m, sequence), _row_values(high, ctx.m, sequence)
    return {
        "clip_ratio/low_mean": _global_mean(ctx, low),
        "clip_ratio/high_mean": _global_mean(ctx, high),
        "clip_ratio/region_mean": _global_mean(ctx, low | high),
        "clip_ratio/low_min": _nan_reduce(low_rows, torch.min),
        "clip_ratio/high_max": _nan_reduce(high_rows, torch.max),
    }


def _cispo_metrics(ctx: MetricContext) -> dict[str, float]:
    clipped = (ctx.r > ctx.spec.cispo_high) & (ctx.adv > 0) & ctx.mask
    return {"cispo_clip_ratio": _global_mean(ctx, clipped)}


def _vespo_metrics(ctx: MetricContext) -> dict[str, float]:
    # phi is one value per sequence when the advantages are; TRL: mean over every row
    lengths = ctx.m.sum(-1)
    row_phi = (ctx.extra["phi"] * ctx.m).sum(-1) / lengths.clamp(min=1.0)
    return {"vespo/phi_seq_mean": torch.where(lengths > 0, row_phi, 1.0).mean().item()}


#: ``loss_type`` -> the kind it runs, its parameters, the metrics TRL logs for it and its
#: policy aggregation (the scale factor by config key; token-mean where none is named).
#: luspo is ``(per_token_loss * mask).sum(-1).mean()`` (TRL 1.16): the sum over each
#: sequence's tokens, averaged over all rows.
LOSS_TYPES: dict[str, LossMode] = {
    "grpo": LossMode("ppo", _ppo, _clip_ratio_metrics, ("seq-mean-token-mean-all-rows", None)),
    "bnpo": LossMode("ppo", _ppo_token_sum, _clip_ratio_metrics),
    "dr_grpo": LossMode(
        "ppo",
        _ppo_token_sum,
        _clip_ratio_metrics,
        ("token-sum-norm-all-rows", "max_completion_length"),
    ),
    "dapo": LossMode("ppo", _ppo_token_sum, _clip_ratio_metrics),
    "luspo": LossMode("ppo", _luspo, _clip_ratio_metrics, ("seq-mean-token-sum-all-rows", None)),
    "cispo": LossMode("cispo", _cispo, _cispo_metrics),
    "sapo": LossMode("sapo", _sapo, None, ("seq-mean-token-mean-all-rows", None)),
    "vespo": LossMode("vespo", _vespo, _vespo_metrics),
}


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


def truncation_mask(cfg: Mapping[str, Any], response_mask: Tensor, notes: list[str]) -> Tensor:
    """``response_mask`` without the truncated completions (``mask_truncated_completions``).

    TRL zeroes ``completion_mask`` of completions whose last token is not EOS; a row of
    ``max_completion_length`` tokens is taken as one (generation stopped at the cap).
    """
    if not cfg["mask_truncated_completions"]:
        return response_mask
    mask = torch.as_tensor(response_mask)
    cut = mask.sum(-1) >= cfg["max_completion_length"]
    notes.append(
        f"mask_truncated_completions: {int(cut.sum())} completion(s) of "
        f"{cfg['max_completion_length']} tokens (no EOS) leave every loss term and the count"
    )
    return mask * (~cut)[:, None].to(mask.dtype)


def mismatch_correction(
    cfg: dict[str, Any], old: Tensor, mu: Tensor, mask: Tensor
) -> tuple[rc.Correction, str, bool] | None:
    """The correction this resolved config's loss applies to pi_old / mu at the first update.

    ``vllm_importance_sampling_*`` (``corrections.trl_correction``), as the loss spec
    reads it.

    Args:
        cfg: a resolved TRL config.
        old: (B, T) float64 pi_old log-probs of the sampled tokens.
        mu: (B, T) float64 the sampler's log-probs of the same tokens.
        mask: (B, T) bool valid tokens.

    Returns:
        (the correction, its name as shown, whether it counts sequences) or None (no correction).
    """
    spec = loss_spec(cfg, [])
    if spec.sampler_is is None:
        return None
    mode, low, high = spec.sampler_is
    corr = fc.trl_correction(old, mu, mask, mode=mode, clip_min=low, clip_max=high)
    return corr, f"vllm_importance_sampling_mode {mode}", mode.startswith("sequence")


def rewrite_loss_inputs(
    cfg: Mapping[str, Any],
    notes: list[str],
    inputs: Any,
    sample_mask: Tensor | None,
    resample: Tensor | None,
) -> tuple[Any, dict[str, float]]:
    """TRL's loss inputs: ``completion_mask`` narrowed by ``mask_truncated_completions``."""
    shared.refuse_row_inputs(sample_mask, resample)
    mask = truncation_mask(cfg, inputs.response_mask, notes)
    return dataclasses.replace(inputs, response_mask=mask), {}


#: The record the registry holds: every fact above, by name.
DIALECT = Dialect.of(globals(), reads_rollout_logprobs=None)
