"""ROLL (RLVR pipeline): everything roll-viz knows about ROLL, in one file.

Order of operations (``pipeline``): sample-level masks (``sample_level_mask``: the final mask)
-> reward_norm over every sample (grpo forces group/group) -> clip +-reward_clip -> reward on
the last token, -beta*KL if add_token_level_kl -> token clip +-reward_clip -> (whiten_rewards,
final mask) -> times the final mask -> gae (unmasked values) or reward-to-go ->
(whiten_advantages, final mask) -> final mask -> (advantage_clip). Returns: gae A+V,
reinforce/grpo the reward-to-go.

Edge cases: a group of one with a group std would take torch.std of one value (NaN in the
framework) -> ValueError explaining why (a group *mean* alone is fine: r - r = 0); whitening with
<= 1 valid token is skipped (PR #476, noted). The KL loss readout is always k3 (clamped +-10),
aggregated with ``loss_agg_mode`` (default seq-mean-token-mean).

Also here: ROLL's config keys with defaults, choices and help (algorithms.md sections 1 and 2b),
the KL estimator names, the keys of beta, the controller and the clip, the named recipes and the
translation of the sidebar's generic knobs. The policy update is in ``roll_loss``: its keys
(policy-update.md 1.2), the loss spec of each ``pg_variant`` and the logged metric names; the
sample-level masks in ``roll_masks``. The ``DIALECT`` record below holds them all by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from roll_viz.core.ops import masked_whiten
from roll_viz.core.pipeline.advantages import (
    ADVANTAGE_ESTIMATORS,
    MASKED_OUTPUTS,
    EstimatorParams,
    token_rewards,
)
from roll_viz.core.pipeline.dialects import shared
from roll_viz.core.pipeline.dialects.record import Dialect, SelfTestCases
from roll_viz.core.pipeline.dialects.roll_eras import ERAS as ERAS  # recipes of record
from roll_viz.core.pipeline.dialects.roll_loss import LOSS_CHOICES as LOSS_CHOICES  # the update
from roll_viz.core.pipeline.dialects.roll_loss import LOSS_DEFAULTS as LOSS_DEFAULTS
from roll_viz.core.pipeline.dialects.roll_loss import LOSS_HELP as LOSS_HELP
from roll_viz.core.pipeline.dialects.roll_loss import LOSS_KEYS as LOSS_KEYS
from roll_viz.core.pipeline.dialects.roll_loss import PG_VARIANTS as PG_VARIANTS
from roll_viz.core.pipeline.dialects.roll_loss import loss_agg_modes as loss_agg_modes
from roll_viz.core.pipeline.dialects.roll_loss import loss_metrics as loss_metrics
from roll_viz.core.pipeline.dialects.roll_loss import loss_spec as loss_spec
from roll_viz.core.pipeline.dialects.roll_masks import final_response_mask as final_response_mask
from roll_viz.core.pipeline.dialects.roll_masks import rewrite_loss_inputs as rewrite_loss_inputs
from roll_viz.core.pipeline.dialects.roll_masks import sample_level_mask
from roll_viz.core.pipeline.dialects.shared import (
    Conventions,
    base_notes,
    batch_kl,
    controller,
    make_trace,
    num,
)
from roll_viz.core.pipeline.losses import aggregate
from roll_viz.core.pipeline.postprocess import (
    Normalized,
    clip_rewards,
    normalize_scores,
    singleton_groups,
    update_running_moments,
)
from roll_viz.core.records import Batch, RunningMoments, Trace

NAME = "roll"
LABEL = "ROLL"

# ------------------------------------------------------------------------------ KL estimators

#: ROLL's KL estimator names (``kl_penalty``) -> canonical k1/abs/k2/k3.
KL_CANON = {"kl": "k1", "abs": "abs", "mse": "k2", "k3": "k3"}
#: canonical -> ROLL's name (None: ROLL has none).
KL_NAMES = shared.kl_names(KL_CANON)
#: The key that picks the in-reward KL estimator; the KL loss is always k3.
KL_ESTIMATOR_KEY: str | None = "kl_penalty"

# ---------------------------------------------------------------------- reward-stage config

_NORM = (None, "batch", "group", "running")

DEFAULTS: dict[str, Any] = {
    "adv_estimator": "gae",
    "gamma": 1.0,
    "lambd": 0.95,
    "norm_mean_type": None,
    "norm_std_type": None,
    "reward_clip": None,
    "whiten_rewards": False,
    "whiten_advantages": False,
    "advantage_clip": None,
    "add_token_level_kl": False,
    "init_kl_coef": 0.2,
    "kl_penalty": "kl",
    "target_kl": None,
    "kl_horizon": 10000,
    "use_kl_loss": False,
    "kl_loss_coef": 0.0,
    "max_len_mask": False,
    "difficulty_mask": False,
    "difficulty_low_threshold": 0.0,
    "difficulty_high_threshold": 1.0,
    "error_max_len_clip": False,
    "error_max_len_threshold": 9999999999,
    **shared.VIZ_DEFAULTS,
}

CHOICES: dict[str, tuple] = {
    "adv_estimator": ("gae", "reinforce", "grpo"),
    "norm_mean_type": _NORM,
    "norm_std_type": _NORM,
    "kl_penalty": tuple(KL_CANON),
    **shared.VIZ_CHOICES,
}

HELP: dict[str, str] = {
    "adv_estimator": "Advantage estimator: gae (critic), reinforce (reward-to-go) or grpo "
    "(group-normalized reward, then reward-to-go).",
    "gamma": "Discount factor for returns and GAE.",
    "lambd": "GAE lambda (only used by gae).",
    "norm_mean_type": "Baseline subtracted from the response reward: batch, group, running "
    "mean or none (grpo forces group).",
    "norm_std_type": "Std the response reward is divided by (+1e-6): batch, group, running or "
    "none (grpo forces group).",
    "reward_clip": "Symmetric clip of the normalized response reward and again of the token "
    "rewards after the KL penalty (None = off).",
    "whiten_rewards": "Whiten the token rewards (token-weighted) before the estimator.",
    "whiten_advantages": "Whiten the advantages over all valid tokens (unbiased var, "
    "rsqrt(var+1e-8)); skipped with at most one valid token.",
    "advantage_clip": "Symmetric clip of the final advantages (None = off).",
    "add_token_level_kl": "Subtract init_kl_coef * KL from every token reward.",
    "init_kl_coef": "KL coefficient beta for the in-reward KL (start value of the controller).",
    "kl_penalty": "In-reward KL estimator: kl (k1), abs, mse (k2) or k3 (clamped to +-10).",
    "target_kl": "Target KL of the adaptive controller (None = fixed beta).",
    "kl_horizon": "Horizon of the adaptive KL controller.",
    "use_kl_loss": "Add a k3 KL term to the policy loss (reported as kl_loss, not in rewards).",
    "kl_loss_coef": "Coefficient of the KL loss term.",
    "max_len_mask": "Sample-level mask: drop responses as long as the response width (ROLL: "
    "responses.shape[-1]; here the batch width T) from the advantages and the loss.",
    "difficulty_mask": "Sample-level mask: keep a prompt's samples only when its mean raw "
    "score is strictly between difficulty_low_threshold and difficulty_high_threshold.",
    "difficulty_low_threshold": "Lower (exclusive) bound of difficulty_mask's group mean score.",
    "difficulty_high_threshold": "Upper (exclusive) bound of difficulty_mask's group mean score.",
    "error_max_len_clip": "Sample-level mask: keep responses with score 1, and those with "
    "score 0 shorter than error_max_len_threshold tokens; drop the rest.",
    "error_max_len_threshold": "Length bound of error_max_len_clip (tokens).",
    **shared.VIZ_HELP,
}

#: ROLL's sample-level mask switches (``get_sample_level_mask``).
SAMPLE_MASK_KEYS = ("max_len_mask", "difficulty_mask", "error_max_len_clip")

#: The key that selects the advantage estimator.
ESTIMATOR_KEY = "adv_estimator"

#: Generic knob -> ROLL key (None: ROLL has no such knob).
ALIASES: dict[str, str | None] = {
    "estimator": "adv_estimator",
    "gamma": "gamma",
    "lam": "lambd",
    "beta": "init_kl_coef",
    "kl_estimator": "kl_penalty",
    "kl_in_reward": "add_token_level_kl",
    "clip": "reward_clip",
    "whiten": "whiten_advantages",
}

#: Config values given as a bool that ROLL reads as another value (none).
BOOL_VALUES: dict[str, dict[bool, Any]] = {}

# -------------------------------------------------------------- what the other layers ask

#: Where beta (the in-reward KL coefficient) lives.
BETA_KEY = "init_kl_coef"
#: What ``train_config`` sets from a run's beta and controller (the sidebar's values dropped).
CONTROLLER_KEYS: tuple[str, ...] = (BETA_KEY, "add_token_level_kl", "target_kl", "kl_horizon")
#: The PPO clip epsilon's key(s); a training run's ``clip_eps`` fills them.
CLIP_KEYS: tuple[str, ...] = ("pg_clip", "pg_clip_low", "pg_clip_high")
#: ROLL has an adaptive KL controller (``target_kl`` set).
ADAPTIVE_BETA = True
#: ROLL normalizes the response rewards in a stage of its own (norm_mean_type / norm_std_type).
HAS_REWARD_NORM = True
#: The KL can go into the token rewards (add_token_level_kl), not only into the loss.
KL_IN_LOSS_ONLY = False
#: eps added to the group/batch std.
STD_EPS = 1e-6
#: Estimators whose advantage is the discounted reward-to-go of the token rewards.
RETURN_ESTIMATORS: tuple[str, ...] = ("reinforce", "grpo")
#: How GAE reads the value after a response's last token: "unmasked" (the padded slot's value,
#: whose advantage leaks back, T8), "carry" (the next valid token), "masked" (0), None (no GAE).
GAE_PADDING: str | None = "unmasked"

#: estimators that read batch inputs beyond scores, mask and log-probs: none here.
ESTIMATOR_INPUTS: dict[str, tuple[str, ...]] = {}
#: What a group of one sample means (shown when G = 1).
SINGLETON_NOTE = (
    "ROLL's group std of one sample is NaN (torch.std with n - 1 = 0), so GRPO / group "
    "normalization is undefined; use gae or reinforce."
)
#: The same for the editable reward table (a prompt with a single row).
SINGLETON_BEHAVIOUR = (
    "ROLL (RLVR grpo) takes the unbiased std of one value, which is NaN, so the reward becomes "
    "NaN (the agentic pipeline returns 0 instead)."
)

#: Named recipes: a generic estimator (``shared.RECIPE_NAMES``) -> ROLL's closest settings.
RECIPES: dict[str, dict[str, Any]] = {
    "grpo": {"adv_estimator": "grpo"},
    "dr_grpo (no std)": {
        "adv_estimator": "reinforce",
        "norm_mean_type": "group",
        "norm_std_type": None,
    },
    "liteppo (group mean, batch std)": {
        "adv_estimator": "reinforce",
        "norm_mean_type": "group",
        "norm_std_type": "batch",
    },
    "reinforce++": {
        "adv_estimator": "reinforce",
        "norm_mean_type": "batch",
        "norm_std_type": "batch",
    },
    "reinforce++ baseline": {
        "adv_estimator": "reinforce",
        "norm_mean_type": "group",
        "norm_std_type": None,
        "whiten_advantages": True,
    },
    "gae": {"adv_estimator": "gae"},
}

#: The loss options the Update and Training pages offer (``lm.loss_options``): name shown and put
#: in links (ROLL's own key and value) -> the loss keys it sets; each reads more than log-probs.
LOSS_OPTIONS: dict[str, dict[str, Any]] = {
    "pg_variant: topr": {"pg_variant": "topr"},
    "difficulty_loss_weight: true": {"difficulty_loss_weight": True},
}

#: What the browser port (``ui/instant/pipeline.js``) computes exactly for ROLL: key -> the
#: values it covers, None for any value ``resolve_config`` accepts. The instant payload ships
#: this table; any other key or value takes the server path.
BROWSER_COVERAGE: dict[str, tuple | None] = {
    "adv_estimator": CHOICES["adv_estimator"],
    "norm_mean_type": CHOICES["norm_mean_type"],
    "norm_std_type": CHOICES["norm_std_type"],
    "kl_penalty": CHOICES["kl_penalty"],
    # sample-level masks: off here; switched on, the server path computes them
    "max_len_mask": (False,),
    "difficulty_mask": (False,),
    "error_max_len_clip": (False,),
    "gamma": None,
    "lambd": None,
    "reward_clip": None,
    "whiten_rewards": None,
    "whiten_advantages": None,
    "advantage_clip": None,
    "add_token_level_kl": None,
    "init_kl_coef": None,
    "target_kl": None,
    "kl_horizon": None,
    "use_kl_loss": None,
    "kl_loss_coef": None,
    "difficulty_low_threshold": None,
    "difficulty_high_threshold": None,
    "error_max_len_threshold": None,
}

#: The run formats (``data/runs``) this framework writes, their advantages recomputed with
#: ``RECIPES["grpo"]``: ROLL's RLLB rollout log and its own dump.
RUN_FORMATS: tuple[str, ...] = ("rllb", "roll-dump")

#: The self-test page's cases in this dialect's keys (``analysis/selftest.py`` runs them).
SELFTEST = SelfTestCases(
    seed=(
        (
            "roll grpo (T1)",
            {"adv_estimator": "grpo"},
            "one",
            (0.201965964, -1.085567055, 0.883601091),
        ),
        (
            "roll grpo + whiten_advantages, lengths 3/2/4 (T5)",
            {"adv_estimator": "grpo", "whiten_advantages": True},
            "whiten",
            (-0.020933229, -1.622325266, 0.826862555),
        ),
        (
            "roll LitePPO: group mean, batch std, two groups (T14)",
            {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": "batch"},
            "two",
            (0.078098764, -0.419780858, 0.341682094, -0.292870366, 0.0, 0.292870366),
        ),
    ),
    group_norm=({"adv_estimator": "grpo"}, (0.201965964, -1.085567055, 0.883601091)),
    masks=(
        {"adv_estimator": "gae"},
        {"adv_estimator": "grpo"},
        {"adv_estimator": "reinforce", "whiten_advantages": True},
    ),
)


def estimator_name(config: Mapping[str, Any]) -> str:
    """The advantage estimator a ROLL config uses ("?" when the key is missing)."""
    return str(config.get("adv_estimator", "?"))


def kl_estimator(config: Mapping[str, Any]) -> str:
    """Canonical name (k1/abs/k2/k3) of the in-reward KL estimator of a resolved config."""
    return KL_CANON[config["kl_penalty"]]


def to_native(generic: Mapping[str, Any]) -> dict[str, Any]:
    """The sidebar's generic widget values -> a ROLL config (shipped defaults underneath).

    A generic value ROLL does not accept (an estimator or KL name of another dialect) is
    skipped, so the same sidebar drives every dialect.
    """
    return shared.widgets_to_native(DEFAULTS, ALIASES, CHOICES, generic)


def from_native(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Generic widget values that reproduce a ROLL config (default: the shipped defaults)."""
    return shared.widgets_from_native(DEFAULTS if config is None else config, ALIASES)


def from_canonical(canonical: Mapping[str, object]) -> tuple[dict, tuple[str, ...]]:
    """Canonical settings (KL as k1/abs/k2/k3) -> (ROLL keys, the settings ROLL has no key for)."""
    return shared.canonical_to_native(ALIASES, KL_NAMES, canonical)


def norm_config(mode: str) -> dict[str, Any] | None:
    """ROLL keys of a reward-normalization mode (none/group/batch/running)."""
    kind = None if mode == "none" else mode
    return {"norm_mean_type": kind, "norm_std_type": kind}


def kl_placement(in_reward: bool, beta: float) -> dict[str, Any] | None:
    """Keys that put the KL in the token rewards (True) or in the loss (False), coef beta."""
    return {
        "add_token_level_kl": in_reward,
        "use_kl_loss": not in_reward,
        "kl_loss_coef": 0.0 if in_reward else beta,
    }


def train_config(
    config: Mapping[str, Any], beta: float, adaptive: bool, target_kl: float, horizon: float
) -> dict[str, Any]:
    """One training step's config: beta in the reward, the controller on when adaptive."""
    cfg = dict(config)
    cfg[BETA_KEY] = beta
    cfg["add_token_level_kl"] = cfg.get("add_token_level_kl", True)
    cfg["target_kl"] = target_kl if adaptive else None
    cfg["kl_horizon"] = horizon
    return cfg


def beta_blocked(config: Mapping[str, Any]) -> str | None:
    """Why beta cannot reach the advantages with the KL in the reward switched on (never)."""
    return None


def clip_range(cfg: Mapping[str, Any]) -> tuple[float, float]:
    """(low, high) epsilon of the PPO ratio clip of a resolved config.

    pg_clip on both sides, or pg_clip_low / pg_clip_high when use_pg_clip_range is on.
    """
    if cfg["use_pg_clip_range"]:
        return float(cfg["pg_clip_low"]), float(cfg["pg_clip_high"])
    return float(cfg["pg_clip"]), float(cfg["pg_clip"])


def unread_inputs(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """Optional (B, T) batch inputs this config's ``pipeline`` never reads.

    Critic values: GAE only; ``sum_pi_squared``: never (verl's optimal token baseline reads
    it). ``run`` validates them as usual but leaves them out of the float64 copy it hands over.
    """
    return ("sum_pi_squared",) if cfg["adv_estimator"] == "gae" else ("values", "sum_pi_squared")


# ------------------------------------------------------------------------------ the pipeline


def pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
    """ROLL RLVR: reward_postprocess -> compute_token_reward -> compute_advantage.

    Args:
        batch: validated float64 batch.
        cfg: resolved ROLL config.
        running: running reward statistics from earlier batches (for "running" norm types).

    Returns:
        Trace; ``running`` is updated with this batch when a norm type is "running".
    """
    mask, est = batch.response_mask, cfg["adv_estimator"]
    conv = Conventions(cfg, std_ddof=1, eps=1e-6, whiten_ddof=1)
    notes = base_notes(batch) + conv.notes
    keep, mask_metrics = sample_level_mask(batch, cfg)
    # ROLL's final_response_mask; with every sample kept it is the response mask itself, and
    # the two ``* final`` below are exact no-ops (their inputs are already +0.0 on padding)
    sample_masked = not bool((keep == 1).all())
    final = mask * keep[:, None] if sample_masked else mask
    if any(cfg[k] for k in SAMPLE_MASK_KEYS):
        notes.append(
            "sample-level masks: "
            + ", ".join(f"{k} {num(v)}" for k, v in mask_metrics.items())
            + "; rewards normalised over every sample, advantages and the loss on the kept ones"
        )
    norm, running = _reward_norm(batch, cfg, running, conv, notes)
    clip = cfg["reward_clip"]
    rewards, clip_frac = clip_rewards(norm.rewards, -clip if clip else None, clip)
    if clip:
        notes.append(f"response reward clipped to +-{num(clip)} ({clip_frac:.0%} clipped)")

    clamp = 10.0 if cfg["kl_penalty"] == "k3" else None
    kl = batch_kl(batch, KL_CANON[cfg["kl_penalty"]], clamp=clamp)
    beta = cfg["init_kl_coef"]
    kl_in_reward = cfg["add_token_level_kl"]
    tokens = stage_tokens = token_rewards(rewards, mask, kl if kl_in_reward else None, beta)
    if kl_in_reward:
        notes.append(f"KL in reward: r_t -= {num(beta)} * {cfg['kl_penalty']} (k3 clamped to +-10)")
    next_beta = controller(beta, kl, mask, cfg["target_kl"], cfg["kl_horizon"], notes)
    if clip:
        tokens, token_frac = clip_rewards(tokens, -clip, clip, mask)
        notes.append(f"token rewards clipped to +-{num(clip)} again ({token_frac:.0%} of tokens)")
    if cfg["whiten_rewards"]:
        tokens = _whiten(tokens, final, conv, notes, "token rewards")
    if sample_masked:
        tokens = tokens * final  # compute_advantage(response_mask=final_response_mask)

    params = EstimatorParams(
        gamma=cfg["gamma"], lam=cfg["lambd"], values=batch.values, carry_through=False
    )
    name = "gae" if est == "gae" else "reinforce"
    if est == "gae":
        notes.append("GAE over the full width with unmasked critic values (pad slots leak, T8)")
    else:
        notes.append(f"{est}: advantage = discounted reward-to-go of the token rewards (gamma)")
    estimate = ADVANTAGE_ESTIMATORS[name](tokens, mask, batch.group_ids, params)
    advantages = estimate.advantages
    if cfg["whiten_advantages"]:
        advantages = _whiten(advantages, final, conv, notes, "advantages")
    if sample_masked:
        advantages = advantages * final
    if cfg["advantage_clip"]:
        c = cfg["advantage_clip"]
        advantages, adv_frac = clip_rewards(advantages, -c, c, mask)
        notes.append(f"advantages clipped to +-{num(c)} ({adv_frac:.0%} of tokens)")

    kl_loss = None
    if cfg["use_kl_loss"]:
        mode, factor = loss_agg_modes(cfg)["kl"]
        kl_loss = aggregate(batch_kl(batch, "k3", clamp=10.0), final, mode, factor).item()
        notes.append(
            "KL loss is always k3 (clamped +-10), independent of kl_penalty; aggregated with "
            f"loss_agg_mode {cfg['loss_agg_mode']}"
        )
    masked = (estimate.advantages, estimate.returns) if name in MASKED_OUTPUTS else ()
    return make_trace(
        "roll",
        cfg,
        batch,
        masked=(stage_tokens, *masked),
        rewards=rewards,
        baseline=norm.baseline,
        scale=norm.scale,
        clip_frac=clip_frac,
        kl=kl,
        beta=beta,
        next_beta=next_beta,
        kl_in_reward=kl_in_reward,
        kl_loss=kl_loss,
        token_rewards=tokens,
        advantages=advantages,
        returns=estimate.returns,
        running=running,
        notes=notes,
        sample_mask=keep if any(cfg[k] for k in SAMPLE_MASK_KEYS) else None,
    )


def _reward_norm(
    batch: Batch,
    cfg: Mapping[str, Any],
    running: RunningMoments | None,
    conv: Conventions,
    notes: list[str],
) -> tuple[Normalized, RunningMoments | None]:
    """ROLL's reward_norm over every sample: (the normalized rewards, the running statistics)."""
    est, scores = cfg["adv_estimator"], batch.scores
    mean_type, std_type = cfg["norm_mean_type"], cfg["norm_std_type"]
    if est == "grpo":
        mean_type = std_type = "group"
        notes.append("GRPO forces norm_mean_type=norm_std_type=group (config values ignored)")
    if "running" in (mean_type, std_type):
        running = update_running_moments(running or RunningMoments(), scores)
        notes.append(
            "running statistics updated with this batch before normalizing, as ROLL's "
            "RunningMoments does (ROLL's reward_norm reads running_ctrl['domain'], the literal "
            "key: a KeyError in the framework unless a reward domain is named 'domain')"
        )
    if std_type == "group" and mean_type != "group":
        raise ValueError(
            f"norm_std_type: group needs norm_mean_type: group in ROLL (got {mean_type}): its "
            "reward_norm divides the (B,) rewards by the (prompts, 1) group std, a (prompts, B) "
            "broadcast the batch cannot store (ROLL raises)"
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
    if mean_type or std_type:
        notes.append(
            f"reward_norm: mean={mean_type}, std={std_type}"
            + (
                f", {_std_word(std_type, conv)}, eps {num(conv.eps)} added to std"
                if std_type
                else ""
            )
        )
    return norm, running


def _std_word(std_type: str, conv: Conventions) -> str:
    if std_type == "running":
        return "running std (Bessel-corrected over all scores seen)"
    return f"{std_type} std {conv.ddof_word(conv.std_ddof)}"


def _whiten(x: Tensor, mask: Tensor, conv: Conventions, notes: list, what: str) -> Tensor:
    """ROLL masked_whiten, auto-disabled with <= 1 valid token (issue #475 / PR #476)."""
    if mask.sum() <= 1:
        notes.append(f"{what} whitening skipped: at most one valid token (ROLL PR #476)")
        return x
    notes.append(
        f"{what} whitened token-weighted, {conv.ddof_word(conv.whiten_ddof)} var, rsqrt(var+1e-8)"
    )
    return masked_whiten(x, mask, ddof=conv.whiten_ddof, eps=1e-8)


#: The record the registry holds: every fact above, by name.
DIALECT = Dialect.of(
    globals(),
    mismatch_correction=None,  # ROLL's train_infer_correction is not a loss option of the pages
    reads_rollout_logprobs=None,
)
