"""OpenRLHF: everything roll-viz knows about OpenRLHF, in one file.

Order of operations (``pipeline``): length penalties (DAPO overlong, then ProRL stop-properly)
-> baseline shaping (rloo / mean / group_norm) -> clamp to
clip_range -> reward on the last token minus kl_coef*KL (unless use_loss) -> gae (masked values)
or cumulative returns (gamma forced 1 for the group estimators) -> global biased whitening for
gae/reinforce/reinforce_baseline. Returns: gae A+V, the others the cumulative return before
whitening.

Edge cases: the group estimators assert n >= 2 -> ValueError naming the group; whitening with
<= 1 valid token has biased variance 0 -> advantages 0. The KL loss readout is token-level, and
``use_loss`` with ``init_coef = 0`` builds no reference model and reports 0.

Also here: OpenRLHF's config keys (flattened: ``--algo.kl.init_coef`` -> ``init_coef``) with
defaults, choices and help, the policy-update keys (``--actor.eps_clip`` -> ``eps_clip``), the
KL estimator names, the beta/controller/clip keys, the named recipes, the translation of the
sidebar's generic knobs (the KL is in the reward unless ``use_loss``: an inverted switch), the
loss spec and the logged metric names, loss options, self-test cases and the mismatch
correction, all named by the ``DIALECT`` record at the end (its recipes of record, ``ERAS``, in
``openrlhf_eras.py``).

Size: one file per framework by design (its tables, order of operations, loss spec and
logged metrics side by side), so a reader checks the framework against one file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import apply_mask, group_stats, masked_mean, masked_whiten
from roll_viz.core.pipeline import rollout_correction as rc
from roll_viz.core.pipeline.advantages import (
    ADVANTAGE_ESTIMATORS,
    MASKED_OUTPUTS,
    EstimatorParams,
    token_rewards,
)
from roll_viz.core.pipeline.dialects import corrections as fc
from roll_viz.core.pipeline.dialects import shared
from roll_viz.core.pipeline.dialects.openrlhf_eras import ERAS as ERAS  # recipes of record
from roll_viz.core.pipeline.dialects.record import Dialect, SelfTestCases
from roll_viz.core.pipeline.dialects.shared import (
    Conventions,
    base_notes,
    batch_kl,
    controller,
    make_trace,
    num,
)
from roll_viz.core.pipeline.kl import kl_term_mean
from roll_viz.core.pipeline.losses import LossMode, LossSpec, MetricContext
from roll_viz.core.pipeline.postprocess import (
    clip_rewards,
    leave_one_out_baseline,
    require_group_size,
)
from roll_viz.core.records import Batch, RunningMoments, Trace

NAME = "openrlhf"
LABEL = "OpenRLHF"

# ------------------------------------------------------------------------------ KL estimators

#: OpenRLHF's KL estimator names (``kl_estimator``) -> canonical; it has no abs estimator.
KL_CANON = {"k1": "k1", "k2": "k2", "k3": "k3"}
#: canonical -> OpenRLHF's name (None: it has none).
KL_NAMES = shared.kl_names(KL_CANON)
#: The key that picks the KL estimator (in the reward, or in the loss with use_loss).
KL_ESTIMATOR_KEY: str | None = "kl_estimator"

#: The estimators that shape rewards per prompt group (need n >= 2, gamma forced to 1).
GROUP_ESTIMATORS = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")

# ---------------------------------------------------------------------- reward-stage config

DEFAULTS: dict[str, Any] = {
    "advantage_estimator": "gae",
    "gamma": 1.0,
    "lambd": 1.0,
    "kl_estimator": "k1",
    "init_coef": 0.01,
    "target": None,
    "horizon": 10000,
    "use_loss": False,
    "clip_range": (-10.0, 10.0),
    "no_std_norm": False,
    "overlong_buffer_len": None,
    "overlong_penalty_factor": 1.0,
    "stop_properly_penalty_coef": None,
    "max_new_tokens": None,
    **shared.VIZ_DEFAULTS,
}

CHOICES: dict[str, tuple] = {
    "advantage_estimator": ("gae", "reinforce", *GROUP_ESTIMATORS, "flash_reinforce"),
    "kl_estimator": tuple(KL_CANON),
    **shared.VIZ_CHOICES,
}

HELP: dict[str, str] = {
    "advantage_estimator": "--algo.advantage.estimator: gae, reinforce, rloo, "
    "reinforce_baseline, group_norm, dr_grpo or flash_reinforce (reward minus the batch mean, "
    "no group, no whitening).",
    "gamma": "--algo.advantage.gamma (forced to 1 for rloo, reinforce_baseline, group_norm, "
    "dr_grpo).",
    "lambd": "--algo.advantage.lambd: GAE lambda.",
    "kl_estimator": "--algo.kl.estimator: k1, k2 or k3 (all clamped to +-10).",
    "init_coef": "--algo.kl.init_coef: KL coefficient (KL goes into the reward unless use_loss).",
    "target": "--algo.kl.target: target KL of the adaptive controller (None = fixed).",
    "horizon": "--algo.kl.horizon: horizon of the adaptive controller.",
    "use_loss": "--algo.kl.use_loss: put the KL in the loss instead of the reward.",
    "clip_range": "--reward.clip_range: clamp of the shaped reward (after baseline shaping); "
    "a number c means (-c, c).",
    "no_std_norm": "--algo.advantage.no_std_norm: global advantage normalization only "
    "subtracts the mean.",
    "overlong_buffer_len": "--reward.overlong_buffer_len: DAPO overlong penalty, before any "
    "shaping: a response longer than max_new_tokens - buffer gets -min(excess, buffer) / buffer "
    "* overlong_penalty_factor added (None = off).",
    "overlong_penalty_factor": "--reward.overlong_penalty_factor: the largest overlong penalty.",
    "stop_properly_penalty_coef": "--reward.stop_properly_penalty_coef: ProRL penalty of a "
    "truncated response (vLLM finish_reason 'length'; here: as long as max_new_tokens): in "
    "[0, 1] its reward is multiplied by it, below 0 replaced by it (None = off).",
    "max_new_tokens": "--rollout.max_new_tokens: the generation cap the two length penalties "
    "read (None = the batch width T).",
    **shared.VIZ_HELP,
}

#: The key that selects the advantage estimator.
ESTIMATOR_KEY = "advantage_estimator"

#: Generic knob -> OpenRLHF key (None: it has no such knob).
ALIASES: dict[str, str | None] = {
    "estimator": "advantage_estimator",
    "gamma": "gamma",
    "lam": "lambd",
    "beta": "init_coef",
    "kl_estimator": "kl_estimator",
    "kl_in_reward": None,  # the KL is in the reward unless use_loss (inverted switch)
    "clip": "clip_range",
    "whiten": None,
}

#: Config values given as a bool that OpenRLHF reads as another value (none).
BOOL_VALUES: dict[str, dict[bool, Any]] = {}

# ------------------------------------------------------------------ policy-update (loss) keys

LOSS_DEFAULTS: dict[str, Any] = {
    "policy_loss_type": "ppo",
    "eps_clip": 0.2,
    "eps_clip_low_high": None,
    "dual_clip": None,
    "loss_agg_mode": "token-mean",
    "entropy_coef": None,
    "value_clip": 0.5,
    "is_correction_level": "off",
    "is_correction_mode": "mask",
    "is_correction_gating": "ratio",
    "is_correction_threshold": (0.5, 5.0),
    "unbiased_gradient": False,
}

LOSS_CHOICES: dict[str, tuple] = {
    "policy_loss_type": ("ppo", "gspo"),
    "loss_agg_mode": ("token-mean", "seq-mean-token-mean"),
    "is_correction_level": ("off", "token", "seq"),
    "is_correction_mode": ("mask", "clip"),
    "is_correction_gating": ("ratio", "binary_kl", "tv"),
}

LOSS_HELP: dict[str, str] = {
    "policy_loss_type": "--actor.policy_loss_type: ppo (token ratio, log-ratio clamped "
    "+-20) or gspo (sequence ratio, forces per-sample aggregation).",
    "eps_clip": "--actor.eps_clip: PPO clip epsilon.",
    "eps_clip_low_high": "--actor.eps_clip_low_high: [low, high] epsilons (None = eps_clip "
    "on both sides).",
    "dual_clip": "--actor.dual_clip: dual-clip constant c > 1 for A<0 (None = off).",
    "loss_agg_mode": "--actor.loss_agg_mode: token-mean (sum / tokens) or seq-mean-token-mean "
    "(mean of per-sample token means; PolicyLoss token_level_loss = mode == token-mean); the KL, "
    "entropy and critic terms are always token-level.",
    "entropy_coef": "--actor.entropy_coef: None = entropy not computed, 0 = logged only, > 0 "
    "= loss -= coef * token-mean entropy.",
    "value_clip": "--critic.value_clip: critic clip around the old values (None = plain MSE).",
    "is_correction_level": "--algo.advantage.is_correction_level: train/rollout mismatch "
    "correction off, per token, or per sequence (a rejection filter); needs rollout_logprobs.",
    "is_correction_mode": "--algo.advantage.is_correction_mode: mask (drop out-of-band units, "
    "survivors keep their weight pi_old/mu) or clip (clamp the token weight; token + ratio only).",
    "is_correction_gating": "--algo.advantage.is_correction_gating: the gated statistic: ratio "
    "(pi_old/mu), binary_kl or tv of the sampled token (upper bound only).",
    "is_correction_threshold": "--algo.advantage.is_correction_threshold: LOW HIGH bounds, or "
    "one HIGH (LOW = 0).",
    "unbiased_gradient": "--algo.kl.unbiased_gradient: with use_loss, keep the estimator's "
    "value but backprop w * (logp - ref), w = min(pi / pi_old, 10) (the reverse-KL gradient).",
}

#: Every key the policy update reads (loss table plus the reward-stage KL-loss keys).
LOSS_KEYS: tuple[str, ...] = (*LOSS_DEFAULTS, "use_loss", "init_coef", "kl_estimator")

# -------------------------------------------------------------- what the other layers ask

#: Where beta (the KL coefficient, in the reward or in the loss) lives.
BETA_KEY = "init_coef"
#: What ``train_config`` sets from a run's beta and controller (the sidebar's values dropped).
CONTROLLER_KEYS: tuple[str, ...] = (BETA_KEY, "target", "horizon")
#: The PPO clip epsilon's key(s); a training run's ``clip_eps`` fills them.
CLIP_KEYS: tuple[str, ...] = ("eps_clip",)
#: OpenRLHF has an adaptive KL controller (``target`` set).
ADAPTIVE_BETA = True
#: No response-level reward normalization stage (only baseline shaping by estimator).
HAS_REWARD_NORM = False
#: The KL goes into the reward unless ``use_loss``.
KL_IN_LOSS_ONLY = False
#: eps added to the group std.
STD_EPS = 1e-9
#: Estimators whose advantage is the discounted reward-to-go of the token rewards.
RETURN_ESTIMATORS: tuple[str, ...] = ("reinforce", *GROUP_ESTIMATORS, "flash_reinforce")
#: GAE multiplies values by the mask: 0 after the last token.
GAE_PADDING: str | None = "masked"

#: estimators that read batch inputs beyond scores, mask and log-probs: none here.
ESTIMATOR_INPUTS: dict[str, tuple[str, ...]] = {}
#: What a group of one sample means (shown when G = 1).
SINGLETON_NOTE = (
    "OpenRLHF asserts n_samples_per_prompt > 1 for rloo, reinforce_baseline, "
    "group_norm and dr_grpo; gae and reinforce still work."
)
#: The same for the editable reward table (a prompt with a single row).
SINGLETON_BEHAVIOUR = "OpenRLHF refuses to run: group estimators assert n_samples_per_prompt > 1."

#: Named recipes: a generic estimator (``shared.RECIPE_NAMES``) -> OpenRLHF's closest settings.
RECIPES: dict[str, dict[str, Any]] = {
    "grpo": {"advantage_estimator": "group_norm"},
    "dr_grpo (no std)": {"advantage_estimator": "dr_grpo"},
    "rloo": {"advantage_estimator": "rloo"},
    "reinforce++": {"advantage_estimator": "reinforce"},
    "reinforce++ baseline": {"advantage_estimator": "reinforce_baseline"},
    "gae": {"advantage_estimator": "gae"},
}

#: The loss options the Update and Training pages offer (``lm.loss_options``): name shown and put
#: in links (OpenRLHF's own key and value) -> the loss keys it sets; each reads more than
#: log-probs.
LOSS_OPTIONS: dict[str, dict[str, Any]] = {
    "is_correction_level: token": {"is_correction_level": "token"},
    "is_correction_level: seq": {"is_correction_level": "seq"},
}

#: What the browser port (``ui/instant/pipeline.js``) computes exactly for OpenRLHF: key -> the
#: values it covers, None for any value ``resolve_config`` accepts. The instant payload ships
#: this table; any other key or value takes the server path.
BROWSER_COVERAGE: dict[str, tuple | None] = {
    "advantage_estimator": CHOICES["advantage_estimator"],
    "kl_estimator": CHOICES["kl_estimator"],
    # length penalties: off here; switched on, the server path computes them
    "overlong_buffer_len": (None,),
    "stop_properly_penalty_coef": (None,),
    "gamma": None,
    "lambd": None,
    "init_coef": None,
    "target": None,
    "horizon": None,
    "use_loss": None,
    "clip_range": None,
    "no_std_norm": None,
    "overlong_penalty_factor": None,
    "max_new_tokens": None,
}

#: The run formats (``data/runs``) this framework writes, their advantages recomputed with
#: ``RECIPES["grpo"]``: none: roll-viz reads no OpenRLHF dump yet.
RUN_FORMATS: tuple[str, ...] = ()

#: The self-test page's cases in this dialect's keys (``analysis/selftest.py`` runs them).
SELFTEST = SelfTestCases(
    seed=(
        (
            "openrlhf group_norm, eps 1e-9 (T1)",
            {"advantage_estimator": "group_norm"},
            "one",
            (0.201966117, -1.085567877, 0.88360176),
        ),
        ("openrlhf rloo (T2)", {"advantage_estimator": "rloo"}, "one", (0.4, -2.15, 1.75)),
        (
            "openrlhf reinforce_baseline, biased whitening, lengths 3/2/4 (T4)",
            {"advantage_estimator": "reinforce_baseline"},
            "whiten",
            (-0.022203043, -1.720735809, 0.877020186),
        ),
    ),
    group_norm=({"advantage_estimator": "group_norm"}, (0.201966117, -1.085567877, 0.88360176)),
    masks=(
        {"advantage_estimator": "gae"},
        {"advantage_estimator": "group_norm"},
        {"advantage_estimator": "reinforce"},
    ),
)


def estimator_name(config: Mapping[str, Any]) -> str:
    """The advantage estimator an OpenRLHF config uses ("?" when the key is missing)."""
    return str(config.get("advantage_estimator", "?"))


def kl_estimator(config: Mapping[str, Any]) -> str:
    """Canonical name (k1/k2/k3) of the KL estimator of a resolved config."""
    return KL_CANON[config["kl_estimator"]]


def to_native(generic: Mapping[str, Any]) -> dict[str, Any]:
    """The sidebar's generic widget values -> an OpenRLHF config (shipped defaults underneath).

    A generic value OpenRLHF does not accept (an estimator or KL name of another dialect) is
    skipped; a clip c becomes the range (-c, c) (the default's shape); ``kl_in_reward`` has no
    key here (``kl_placement`` sets ``use_loss``).
    """
    return shared.widgets_to_native(DEFAULTS, ALIASES, CHOICES, generic)


def from_native(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Generic widget values that reproduce an OpenRLHF config (default: the shipped defaults)."""
    return shared.widgets_from_native(DEFAULTS if config is None else config, ALIASES)


def from_canonical(canonical: Mapping[str, object]) -> tuple[dict, tuple[str, ...]]:
    """Canonical settings -> (OpenRLHF keys, the settings it has no key for).

    ``kl_in_reward`` maps to ``use_loss = not kl_in_reward``; a clip of c becomes (-c, c).
    """
    return shared.canonical_to_native(
        ALIASES, KL_NAMES, canonical, kl_in_reward_key_inverted="use_loss", clip_as_range=True
    )


def norm_config(mode: str) -> dict[str, Any] | None:
    """OpenRLHF has no reward-normalization stage: None."""
    return None


def kl_placement(in_reward: bool, beta: float) -> dict[str, Any] | None:
    """Keys that put the KL in the token rewards (True) or in the loss (False)."""
    return {"use_loss": not in_reward}


def train_config(
    config: Mapping[str, Any], beta: float, adaptive: bool, target_kl: float, horizon: float
) -> dict[str, Any]:
    """One training step's config: beta as init_coef, the controller on when adaptive."""
    cfg = dict(config)
    cfg[BETA_KEY] = beta
    cfg["target"] = target_kl if adaptive else None
    cfg["horizon"] = horizon
    return cfg


def beta_blocked(config: Mapping[str, Any]) -> str | None:
    """Why beta cannot reach the advantages (``use_loss`` on: the KL is not in the reward)."""
    if config.get("use_loss"):
        return "OpenRLHF's use_loss is on, so the KL is not in the reward: beta is flat."
    return None


def clip_range(cfg: Mapping[str, Any]) -> tuple[float, float]:
    """(low, high) epsilon of the PPO ratio clip of a resolved config.

    eps_clip_low_high when set, else eps_clip on both sides.
    """
    low, high = cfg["eps_clip_low_high"] or (cfg["eps_clip"], cfg["eps_clip"])
    return float(low), float(high)


def unread_inputs(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """Optional (B, T) batch inputs this config's ``pipeline`` never reads.

    Critic values: GAE only; ``sum_pi_squared``: never (verl's optimal token baseline reads
    it). ``run`` validates them as usual but leaves them out of the float64 copy it hands over.
    """
    if cfg["advantage_estimator"] == "gae":
        return ("sum_pi_squared",)
    return ("values", "sum_pi_squared")


# ------------------------------------------------------------------------------ the pipeline


def length_penalties(batch: Batch, cfg: Mapping[str, Any], notes: list[str]) -> Tensor:
    """OpenRLHF ``apply_length_penalties``: the (B,) rewards after the two length penalties.

    DAPO overlong (``overlong_buffer_len`` set): with L the response length and
    ``expected = max_new_tokens - buffer``, ``e = min(L - expected, buffer)``; ``e > 0`` adds
    ``-e / buffer * overlong_penalty_factor``. ProRL stop-properly (``stop_properly_penalty_coef``
    set), after it: a truncated response's reward is multiplied by a coefficient in [0, 1] or
    replaced by a negative one. OpenRLHF reads truncation from vLLM's finish_reason "length";
    the batch has none, so a response as long as ``max_new_tokens`` counts as truncated.

    Raises:
        ValueError: max_new_tokens < overlong_buffer_len, or a coefficient above 1.
    """
    scores = batch.scores
    cap = cfg["max_new_tokens"] or batch.response_mask.shape[1]
    buffer, coef = cfg["overlong_buffer_len"], cfg["stop_properly_penalty_coef"]
    if buffer is None and coef is None:
        return scores
    lengths = batch.response_mask.sum(-1)
    if buffer is not None:
        if cap < buffer:
            raise ValueError(
                f"openrlhf: max_new_tokens ({cap}) must be >= overlong_buffer_len ({num(buffer)})"
            )
        excess = torch.clamp(lengths - (cap - buffer), max=buffer)
        hit = excess > 0
        penalty = torch.where(hit, -excess / buffer * cfg["overlong_penalty_factor"], 0.0)
        scores = scores + penalty
        notes.append(
            f"DAPO overlong penalty: {int(hit.sum())}/{len(scores)} responses longer than "
            f"{num(cap - buffer)} tokens (max_new_tokens {cap} - buffer {num(buffer)})"
        )
    if coef is not None:
        if coef > 1:
            raise ValueError(
                f"openrlhf: stop_properly_penalty_coef must be in [0, 1] or negative, got {coef}"
            )
        truncated = lengths == cap
        scores = torch.where(truncated, scores * coef if coef >= 0 else coef + 0 * scores, scores)
        notes.append(
            f"stop-properly penalty: {int(truncated.sum())}/{len(scores)} responses as long as "
            f"max_new_tokens {cap} (truncated) "
            + (f"multiplied by {num(coef)}" if coef >= 0 else f"set to {num(coef)}")
        )
    return scores


def _baseline_shaping(
    batch: Batch, cfg: Mapping[str, Any], scores: Tensor, conv: Conventions, notes: list[str]
) -> tuple[Tensor, Tensor, float]:
    """The baseline and scale the scores are shaped with, and gamma (1 for the group ones)."""
    est = cfg["advantage_estimator"]
    gamma = cfg["gamma"]
    zeros, ones = torch.zeros_like(scores), torch.ones_like(scores)
    baseline, scale = zeros, ones
    if est in GROUP_ESTIMATORS:
        require_group_size(batch.group_ids, batch.group_labels, f"openrlhf {est}")
        if gamma != 1.0:
            notes.append(f"gamma forced to 1.0 for {est} (configured {num(gamma)})")
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
            notes.append(f"group std {conv.ddof_word(conv.std_ddof)}, eps {num(conv.eps)} added")
    elif est == "flash_reinforce":
        if gamma != 1.0:
            notes.append(f"gamma forced to 1.0 for {est} (configured {num(gamma)})")
        gamma = 1.0
        baseline = zeros + scores.mean()
        notes.append("flash_reinforce shaping: r - mean over the whole batch (no group)")
    return baseline, scale, gamma


def pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
    """OpenRLHF: compute_advantages_and_returns (shaping -> clamp -> compute_reward -> returns).

    Args:
        batch: validated float64 batch.
        cfg: resolved OpenRLHF config.
        running: ignored (OpenRLHF has no running reward normalization); returned unchanged.

    Returns:
        Trace with rewards = shaped and clamped response rewards.
    """
    mask, est = batch.response_mask, cfg["advantage_estimator"]
    conv = Conventions(cfg, std_ddof=1, eps=1e-9, whiten_ddof=0)
    notes = base_notes(batch) + conv.notes
    scores = length_penalties(batch, cfg, notes)
    baseline, scale, gamma = _baseline_shaping(batch, cfg, scores, conv, notes)
    shaped = (scores - baseline) / scale
    low, high = cfg["clip_range"] or (None, None)
    rewards, clip_frac = clip_rewards(shaped, low, high)
    if cfg["clip_range"]:
        notes.append(
            f"shaped reward clamped to clip_range ({num(low)}, {num(high)}) after baseline "
            f"shaping ({clip_frac:.0%} clipped)"
        )

    kl = batch_kl(batch, cfg["kl_estimator"], clamp=10.0)
    beta = max(cfg["init_coef"], 0.0)
    kl_in_reward = not cfg["use_loss"] and beta > 0
    tokens = token_rewards(rewards, mask, kl if kl_in_reward else None, beta)
    if kl_in_reward:
        notes.append(f"KL in reward: r_t -= {num(beta)} * {cfg['kl_estimator']} (clamped to +-10)")
    next_beta = controller(beta, kl, mask, cfg["target"], cfg["horizon"], notes)

    name = "gae" if est == "gae" else "reinforce"
    if est == "gae":
        values = None if batch.values is None else apply_mask(batch.values, mask)
        params = EstimatorParams(gamma=gamma, lam=cfg["lambd"], values=values, carry_through=False)
        notes.append("GAE with rewards and values multiplied by the mask (no carry-through)")
    else:
        params = EstimatorParams(gamma=gamma, carry_through=False)
        notes.append("cumulative returns of the token rewards; advantages = returns")
    estimate = ADVANTAGE_ESTIMATORS[name](tokens, mask, batch.group_ids, params)
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
            f"KL in the loss: {cfg['kl_estimator']} (clamped to +-10), coef {num(beta)}, "
            "token-level mean (aggregate_loss default)"
        )
    masked = (estimate.advantages, estimate.returns) if name in MASKED_OUTPUTS else ()
    return make_trace(
        "openrlhf",
        cfg,
        batch,
        masked=(tokens, *masked),
        rewards=rewards,
        baseline=baseline,
        scale=scale,
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
    )


# ---------------------------------------------------------------------------- the update loss


def loss_agg_modes(cfg: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Canonical aggregation of each loss term.

    KL, entropy and critic are token-level (``aggregate_loss`` defaults, ``ValueLoss``); the
    policy per token or per sample (``--actor.loss_agg_mode``, 0.11.2; gspo always per sample:
    its ``POLICY_LOSS_TYPES`` row).
    """
    token = ("token-mean", None)
    per_sample = ("seq-mean-token-mean", None)
    policy = token if cfg["loss_agg_mode"] == "token-mean" else per_sample
    policy = POLICY_LOSS_TYPES[cfg["policy_loss_type"]].policy_agg or policy
    return {"policy": policy, "kl": token, "entropy": token, "value": token}


def loss_spec(cfg: dict[str, Any], notes: list[str]) -> LossSpec:
    """OpenRLHF's policy loss as a ``LossSpec`` (the ``POLICY_LOSS_TYPES`` row); notes appended."""
    kl_zero = cfg["use_loss"] and cfg["init_coef"] == 0
    if cfg["use_loss"]:
        notes.append(
            "KL loss with init_coef = 0: no reference model, KL loss 0"
            if kl_zero
            else f"KL loss: {cfg['kl_estimator']} (clamped +-10), coefficient = KL controller "
            f"value init_coef {cfg['init_coef']:g}, always token-level"
        )
    level, mode, gating = (
        cfg["is_correction_level"],
        cfg["is_correction_mode"],
        cfg["is_correction_gating"],
    )
    low = cfg["is_correction_threshold"][0]
    if mode == "clip" and (level == "seq" or gating != "ratio"):
        raise ValueError(
            "is_correction_mode: clip requires is_correction_level token and gating ratio"
        )
    if gating != "ratio" and level != "off" and low > 0:
        raise ValueError(
            f"is_correction_threshold: gating {gating} takes an upper bound only (one number)"
        )
    loss_type = POLICY_LOSS_TYPES[cfg["policy_loss_type"]]
    params = loss_type.params(cfg, notes)
    unbiased = cfg["use_loss"] and cfg["unbiased_gradient"] and not kl_zero
    if unbiased:
        notes.append(
            "unbiased_gradient: KL value of the estimator, gradient w * (logp - ref) with "
            "w = min(pi / pi_old, 10), detached (straight-through)"
        )
    eps_low, eps_high = cfg["eps_clip_low_high"] or (cfg["eps_clip"], cfg["eps_clip"])
    return LossSpec(
        kind=loss_type.kind,
        **params,
        kl_is_weight_clip=10.0 if unbiased else None,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=cfg["dual_clip"],
        kl_on=cfg["use_loss"],
        kl_zero=kl_zero,
        kl_estimator=cfg["kl_estimator"],
        kl_clamp=10.0,
        beta=cfg["init_coef"],
        entropy_coef=cfg["entropy_coef"] or 0.0,
        value_clip=cfg["value_clip"],
    )


def _dual_note(cfg: Mapping[str, Any]) -> str:
    return f", dual clip c = {cfg['dual_clip']:g}" if cfg["dual_clip"] else ""


def _ppo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    level, mode, gating = (
        cfg["is_correction_level"],
        cfg["is_correction_mode"],
        cfg["is_correction_gating"],
    )
    low, high = cfg["is_correction_threshold"]
    correction = None
    if level != "off":
        correction = (level, mode, gating, low, high)
        notes.append(
            f"is_correction: {level}-level {mode} on {gating} within [{low:g}, {high:g}]; the "
            "per-token loss is multiplied by the surviving weight pi_old / mu"
        )
    notes.append("ppo: d +-20" + _dual_note(cfg))
    return {"level": "token", "clamp": 20.0, "is_correction": correction}


def _gspo(cfg: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    corrected = cfg["is_correction_level"] != "off"
    if corrected:
        notes.append("gspo with is_correction: the sequence ratio is pi / mu (rollout log-probs)")
    notes.append("gspo: sequence ratio, no clamp, per-sample aggregation" + _dual_note(cfg))
    return {"level": "sequence", "clamp": None, "ratio_vs_rollout": corrected}


#: ``--actor.policy_loss_type`` -> the kind it runs and its parameters (both log the same
#: metrics); gspo aggregates per sample whatever ``loss_agg_mode`` says.
POLICY_LOSS_TYPES: dict[str, LossMode] = {
    "ppo": LossMode("ppo", _ppo),
    "gspo": LossMode("ppo", _gspo, policy_agg=("seq-mean-token-mean", None)),
}


def loss_metrics(ctx: MetricContext) -> dict[str, float]:
    """OpenRLHF's logged metrics under its own names."""
    surr1, surr2 = ctx.surrogates()
    out: dict[str, float] = {
        "policy_loss": ctx.item("policy"),
        "ppo_clip_ratio": ctx.token_mean(surr2 < surr1),
        "ppo_kl": ctx.token_mean(-ctx.d),
    }
    if ctx.spec.is_correction is not None:
        out["vllm_kl"] = ctx.token_mean(-ctx.extra["log_w"])
        unit = ctx.extra["is_filtered_unit"]
        if unit.shape[1] == 1:  # per sequence: the mean over every row
            out["is_filter_ratio"] = unit.to(torch.float64).mean().item()
        else:
            out["is_filter_ratio"] = ctx.token_mean(unit)
    if ctx.spec.kl_on:
        out["kl"] = ctx.item("kl")
    if ctx.cfg["entropy_coef"] is not None and ctx.entropy is not None:
        out["entropy_loss"] = ctx.item("entropy")
    if ctx.terms["value"] is not None:
        out["critic_loss"] = ctx.item("value")
    return out


def mismatch_correction(
    cfg: dict[str, Any], old: Tensor, mu: Tensor, mask: Tensor
) -> tuple[rc.Correction, str, bool] | None:
    """The correction this resolved config's loss applies to pi_old / mu at the first update.

    ``is_correction_*`` (``corrections.openrlhf_correction``), as the loss spec reads it.

    Args:
        cfg: a resolved OpenRLHF config.
        old: (B, T) float64 pi_old log-probs of the sampled tokens.
        mu: (B, T) float64 the sampler's log-probs of the same tokens.
        mask: (B, T) bool valid tokens.

    Returns:
        (the correction, its name as shown, whether it counts sequences) or None (no correction).
    """
    spec = loss_spec(cfg, [])
    if spec.is_correction is None:
        return None
    level, mode, gating, low, high = spec.is_correction
    corr = fc.openrlhf_correction(
        old, mu, mask, level=level, mode=mode, gating=gating, threshold=(low, high)
    )
    return corr, f"is_correction ({level}, {mode})", level == "seq"


#: OpenRLHF hands its loss the inputs as they are
rewrite_loss_inputs = shared.inputs_as_given

#: The record the registry holds: every fact above, by name.
DIALECT = Dialect.of(globals(), reads_rollout_logprobs=None)
