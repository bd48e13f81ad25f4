"""verl: everything roll-viz knows about verl, in one file.

Order of operations (``pipeline``): no reward processing -> score on the last token,
-beta*KL if use_kl_in_reward -> estimator, which normalizes inside (gae: carry-through, then
always whitened). Returns: gae A+V, reinforce_plus_plus the unwhitened R, remax the undiscounted
reward-to-go, the outcome estimators the advantages.

Edge cases: a group of one in grpo/dr_grpo/rf++-baseline uses mean 0, std 1 (the raw reward
passes through), rloo keeps the raw score; a zero-length response's score still counts in the
group statistics (verl sums it in through index -1); whitening with <= 1 valid token raises
ValueError (verl's masked_var does too). The KL loss readout is aggregated with
``loss_agg_mode``.

``algorithm.rollout_correction`` (``rollout_is``, ``rollout_rs``, ``bypass_mode``) and the two
trainers (``use_v1``) are in ``verl_rollout``: the decoupled mode weighs and rejects pi_old
against mu before the loss; ``loss_mode: bypass_mode`` (what the legacy trainer's
``bypass_mode: true`` sets; the v1 trainer's only sets old = mu) weighs the current log-prob.

Also here: verl's config keys (flattened: ``algorithm.kl_ctrl.kl_coef`` -> ``kl_coef``) with
defaults, choices and help, the policy-update keys (``actor.policy_loss.loss_mode`` ->
``loss_mode``), the KL estimator names, the beta/controller/clip keys, the named recipes, the
translation of the sidebar's generic knobs, the loss spec and the logged metric names.

The policy-update keys (``LOSS_DEFAULTS``, ``LOSS_CHOICES``, ``LOSS_HELP``), the loss modes
and the metrics verl logs are in ``verl_losses``; PF-PPO's resampling in ``verl_pf_ppo``.

Size: the reward-stage tables, order of operations and loss spec side by side, so a reader
checks the framework's ``compute_advantage`` against one file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import masked_sum, masked_whiten
from roll_viz.core.pipeline.advantages import (
    ALL_ESTIMATORS,
    MASKED_OUTPUTS,
    EstimatorParams,
    decoupled_norm_advantages,
    token_rewards,
)
from roll_viz.core.pipeline.dialects import shared
from roll_viz.core.pipeline.dialects import verl_pf_ppo as pf
from roll_viz.core.pipeline.dialects import verl_rollout as vr
from roll_viz.core.pipeline.dialects.record import Dialect, SelfTestCases
from roll_viz.core.pipeline.dialects.shared import (
    Conventions,
    base_notes,
    batch_kl,
    controller,
    make_trace,
    num,
)
from roll_viz.core.pipeline.dialects.verl_eras import ERAS as ERAS  # recipes of record
from roll_viz.core.pipeline.dialects.verl_losses import LOSS_CHOICES as LOSS_CHOICES
from roll_viz.core.pipeline.dialects.verl_losses import LOSS_DEFAULTS as LOSS_DEFAULTS
from roll_viz.core.pipeline.dialects.verl_losses import LOSS_HELP as LOSS_HELP
from roll_viz.core.pipeline.dialects.verl_losses import LOSS_MODES as LOSS_MODES
from roll_viz.core.pipeline.dialects.verl_losses import loss_metrics as loss_metrics
from roll_viz.core.pipeline.dialects.verl_losses import mode_row
from roll_viz.core.pipeline.losses import LossSpec, aggregate
from roll_viz.core.pipeline.postprocess import singleton_groups
from roll_viz.core.records import Batch, RunningMoments, Trace

NAME = "verl"
LABEL = "verl"

# ------------------------------------------------------------------------------ KL estimators

#: verl's KL estimator names (``kl_penalty``, ``kl_loss_type``) -> canonical k1/abs/k2/k3.
KL_CANON = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2"}
KL_CANON |= {"low_var_kl": "k3", "k3": "k3"}
#: canonical -> verl's preferred name.
KL_NAMES = shared.kl_names(KL_CANON)
#: Straight-through names (``core_algos.kl_penalty``): the value of the estimator before "+",
#: the gradient of k2 (``0.5 * (logp - ref)^2``); "k2+" / "mse+" are plain k2.
KL_PLUS = tuple(f"{name}+" for name in KL_CANON)


def kl_base(name: str) -> str:
    """Verl's KL name without the straight-through "+" suffix."""
    return name[:-1] if name.endswith("+") else name


#: The key that picks the in-reward KL estimator.
KL_ESTIMATOR_KEY: str | None = "kl_penalty"

#: verl's estimator names -> the shared estimator registry's.
ESTIMATORS = {
    "gae": "gae",
    "grpo": "grpo",
    "grpo_vectorized": "grpo",
    "rloo": "rloo",
    "rloo_vectorized": "rloo",
    "reinforce_plus_plus": "reinforce_pp",
    "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
    "remax": "remax",
    "opo": "length_weighted",
    "gpg": "gpg",
    "grpo_passk": "passk",
    "gdpo": "gdpo",
    "optimal_token_baseline": "optimal_token_baseline",
}

# ---------------------------------------------------------------------- reward-stage config

DEFAULTS: dict[str, Any] = {
    "adv_estimator": "gae",
    "gamma": 1.0,
    "lam": 1.0,
    "norm_adv_by_std_in_grpo": True,
    "use_kl_in_reward": False,
    "kl_penalty": "kl",
    "kl_ctrl_type": "fixed",
    "kl_coef": 0.001,
    "target_kl": 0.1,
    "horizon": 10000,
    "use_kl_loss": False,
    "kl_loss_coef": 0.001,
    "kl_loss_type": "low_var_kl",
    "gdpo_reward_keys": None,
    "gdpo_reward_weights": None,
    "use_pf_ppo": False,
    "reweight_method": "pow",
    "weight_pow": 2.0,
    "viz_pf_ppo_seed": 0,
    **shared.VIZ_DEFAULTS,
}

CHOICES: dict[str, tuple] = {
    "adv_estimator": tuple(ESTIMATORS),
    "kl_penalty": tuple(KL_CANON),
    "kl_ctrl_type": ("fixed", "adaptive"),
    "kl_loss_type": (*KL_CANON, *KL_PLUS),
    "reweight_method": tuple(pf.METHODS),
    **shared.VIZ_CHOICES,
}

HELP: dict[str, str] = {
    "adv_estimator": "algorithm.adv_estimator: gae, grpo, grpo_vectorized (grpo with float32 "
    "group statistics, always divided by the group std: the trainer does not pass "
    "norm_adv_by_std_in_grpo to it), rloo, "
    "rloo_vectorized (rloo, a group of one gets advantage 0), reinforce_plus_plus, "
    "reinforce_plus_plus_baseline, remax, opo (length-weighted baseline), gpg (batch factor "
    "B / #nonzero), grpo_passk (only the best sample learns), gdpo (normalise each reward "
    "component, sum, whiten) or optimal_token_baseline (a baseline per position, weighted by "
    "the path variance; needs sum_pi_squared).",
    "gamma": "algorithm.gamma: discount for gae and reinforce_plus_plus.",
    "lam": "algorithm.lam: GAE lambda.",
    "norm_adv_by_std_in_grpo": "Divide GRPO advantages by the group std (False = Dr.GRPO).",
    "use_kl_in_reward": "algorithm.use_kl_in_reward: subtract kl_coef * KL from token rewards.",
    "kl_penalty": "algorithm.kl_penalty: in-reward KL estimator (kl/k1, abs, mse/k2, "
    "low_var_kl/k3).",
    "kl_ctrl_type": "algorithm.kl_ctrl.type: fixed or adaptive (in-reward KL only).",
    "kl_coef": "algorithm.kl_ctrl.kl_coef: beta of the in-reward KL.",
    "target_kl": "algorithm.kl_ctrl.target_kl: target of the adaptive controller.",
    "horizon": "algorithm.kl_ctrl.horizon: horizon of the adaptive controller.",
    "use_kl_loss": "actor.use_kl_loss: put a KL term in the policy loss instead.",
    "kl_loss_coef": "actor.kl_loss_coef: coefficient of the KL loss term.",
    "gdpo_reward_keys": "algorithm.gdpo_reward_keys: the reward components gdpo normalises "
    "one by one (names in batch.reward_components); required for gdpo.",
    "gdpo_reward_weights": "algorithm.gdpo_reward_weights: weight of each component in the "
    "sum (None = all 1).",
    "kl_loss_type": "actor.kl_loss_type: KL estimator of the loss term; a '+' suffix (k3+, "
    "low_var_kl+) keeps its value but takes the gradient of k2 (straight-through).",
    "use_pf_ppo": "algorithm.use_pf_ppo: PF-PPO, gae only: after the advantages, B rows are "
    "drawn with replacement by score weight and the update trains on them (the legacy trainer: "
    "the drawn rows; v1: each row gets a drawn row's advantages and returns).",
    "reweight_method": "algorithm.pf_ppo.reweight_method: pow (|s|^weight_pow), max_min (1 at "
    "the batch's max or min score, else 0) or max_random (0.4 at the max, else 0.1); + 1e-8.",
    "weight_pow": "algorithm.pf_ppo.weight_pow: the power of reweight_method pow.",
    "viz_pf_ppo_seed": "roll-viz extension, not a framework option: seed of PF-PPO's draw "
    "(verl draws with the unseeded torch.multinomial).",
    **shared.VIZ_HELP,
}

#: The key that selects the advantage estimator.
ESTIMATOR_KEY = "adv_estimator"

#: Generic knob -> verl key (None: verl has no such knob).
ALIASES: dict[str, str | None] = {
    "estimator": "adv_estimator",
    "gamma": "gamma",
    "lam": "lam",
    "beta": "kl_coef",
    "kl_estimator": "kl_penalty",
    "kl_in_reward": "use_kl_in_reward",
    "clip": None,
    "whiten": None,
}

#: Config values given as a bool that verl reads as another value (none).
BOOL_VALUES: dict[str, dict[bool, Any]] = {}

#: Every key the policy update reads (loss table plus the reward-stage KL-loss keys).
LOSS_KEYS: tuple[str, ...] = (*LOSS_DEFAULTS, "use_kl_loss", "kl_loss_coef", "kl_loss_type")

# -------------------------------------------------------------- what the other layers ask

#: Where beta (the in-reward KL coefficient) lives.
BETA_KEY = "kl_coef"
#: What ``train_config`` sets from a run's beta and controller (the sidebar's values dropped).
CONTROLLER_KEYS: tuple[str, ...] = (
    BETA_KEY,
    "use_kl_in_reward",
    "kl_ctrl_type",
    "target_kl",
    "horizon",
)
#: The PPO clip epsilon's key(s); a training run's ``clip_eps`` fills them.
CLIP_KEYS: tuple[str, ...] = ("clip_ratio", "clip_ratio_low", "clip_ratio_high")
#: verl has an adaptive KL controller (``kl_ctrl_type: adaptive``, in-reward KL only).
ADAPTIVE_BETA = True
#: No response-level reward normalization stage (the estimators normalize inside).
HAS_REWARD_NORM = False
#: The KL can go into the token rewards (use_kl_in_reward), not only into the loss.
KL_IN_LOSS_ONLY = False
#: eps added to the group std.
STD_EPS = 1e-6
#: Estimators whose advantage is the discounted reward-to-go of the token rewards.
RETURN_ESTIMATORS: tuple[str, ...] = ("reinforce_plus_plus", "remax")
#: GAE carries values and advantages through masked tokens (the next VALID token).
GAE_PADDING: str | None = "carry"

#: estimators that read batch inputs beyond scores, mask and log-probs (``Batch`` field names):
#: a page without them does not offer the estimator.
ESTIMATOR_INPUTS: dict[str, tuple[str, ...]] = {"optimal_token_baseline": ("sum_pi_squared",)}
#: What a group of one sample means (shown when G = 1).
SINGLETON_NOTE = (
    "verl treats a group of one as mean 0, std 1: GRPO then passes the raw reward through, "
    "RLOO keeps the raw score."
)
#: The same for the editable reward table (a prompt with a single row).
SINGLETON_BEHAVIOUR = (
    "verl grpo uses mean 0 and std 1 for a group of one, so the advantage is the raw reward "
    "divided by 1 + 1e-6."
)

#: Named recipes: a generic estimator (``shared.RECIPE_NAMES``) -> verl's closest settings.
RECIPES: dict[str, dict[str, Any]] = {
    "grpo": {"adv_estimator": "grpo"},
    "dr_grpo (no std)": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False},
    "rloo": {"adv_estimator": "rloo"},
    "reinforce++": {"adv_estimator": "reinforce_plus_plus"},
    "reinforce++ baseline": {"adv_estimator": "reinforce_plus_plus_baseline"},
    "gae": {"adv_estimator": "gae"},
}

#: The loss options the Update and Training pages offer (``lm.loss_options``): name shown and put
#: in links (verl's own key and value) -> the loss keys it sets; each reads more than log-probs.
LOSS_OPTIONS: dict[str, dict[str, Any]] = {
    # verl's presets RolloutCorrectionConfig.bypass_ppo_clip() and bypass_pg_is(): pi_old is mu
    "loss_mode: bypass_mode (ppo_clip)": {"loss_mode": "bypass_mode"},
    "loss_mode: bypass_mode (reinforce, sequence IS 2.0)": {
        "loss_mode": "bypass_mode",
        "loss_type": "reinforce",
        "rollout_is": "sequence",
        "rollout_is_threshold": 2.0,
    },
}

#: optimal_token_baseline reads sum_pi_squared, which the browser batch does not carry
_BROWSER_ESTIMATORS = tuple(e for e in CHOICES["adv_estimator"] if e != "optimal_token_baseline")
#: What the browser port (``ui/instant/pipeline.js``) computes exactly for verl: key -> the
#: values it covers, None for any value ``resolve_config`` accepts. The instant payload ships
#: this table; any other key or value takes the server path.
BROWSER_COVERAGE: dict[str, tuple | None] = {
    "adv_estimator": _BROWSER_ESTIMATORS,
    "kl_penalty": CHOICES["kl_penalty"],
    "kl_ctrl_type": CHOICES["kl_ctrl_type"],
    # the straight-through "+" variants: the server path
    "kl_loss_type": CHOICES["kl_penalty"],
    # named reward components: the server path
    "gdpo_reward_keys": (None,),
    "gdpo_reward_weights": (None,),
    "gamma": None,
    "lam": None,
    "norm_adv_by_std_in_grpo": None,
    "use_kl_in_reward": None,
    "kl_coef": None,
    "target_kl": None,
    "horizon": None,
    "use_kl_loss": None,
    "kl_loss_coef": None,
    # PF-PPO's resample: the server path; its keys act on nothing with it off
    "use_pf_ppo": (False,),
    "reweight_method": None,
    "weight_pow": None,
    "viz_pf_ppo_seed": None,
}

#: The run formats (``data/runs``) this framework writes, their advantages recomputed with
#: ``RECIPES["grpo"]``: verl's rollout dump.
RUN_FORMATS: tuple[str, ...] = ("verl",)

#: The self-test page's cases in this dialect's keys (``analysis/selftest.py`` runs them).
SELFTEST = SelfTestCases(
    seed=(
        (
            "verl grpo (T1)",
            {"adv_estimator": "grpo"},
            "one",
            (0.201965964, -1.085567055, 0.883601091),
        ),
        ("verl rloo (T2)", {"adv_estimator": "rloo"}, "one", (0.4, -2.15, 1.75)),
        (
            "verl reinforce_plus_plus_baseline, lengths 3/2/4 (T4)",
            {"adv_estimator": "reinforce_plus_plus_baseline"},
            "whiten",
            (-0.020933229, -1.622325271, 0.826862558),
        ),
    ),
    group_norm=({"adv_estimator": "grpo"}, (0.201965964, -1.085567055, 0.883601091)),
    masks=(
        {"adv_estimator": "gae"},
        {"adv_estimator": "grpo"},
        {"adv_estimator": "reinforce_plus_plus"},
        {"adv_estimator": "rloo"},
    ),
)


def estimator_name(config: Mapping[str, Any]) -> str:
    """The advantage estimator a verl config uses ("?" when the key is missing)."""
    return str(config.get("adv_estimator", "?"))


def kl_estimator(config: Mapping[str, Any]) -> str:
    """Canonical name (k1/abs/k2/k3) of the in-reward KL estimator of a resolved config."""
    return KL_CANON[kl_base(config["kl_penalty"])]


def to_native(generic: Mapping[str, Any]) -> dict[str, Any]:
    """The sidebar's generic widget values -> a verl config (shipped defaults underneath).

    A generic value verl does not accept (an estimator or KL name of another dialect) is
    skipped, so the same sidebar drives every dialect.
    """
    return shared.widgets_to_native(DEFAULTS, ALIASES, CHOICES, generic)


def from_native(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Generic widget values that reproduce a verl config (default: the shipped defaults)."""
    return shared.widgets_from_native(DEFAULTS if config is None else config, ALIASES)


def from_canonical(canonical: Mapping[str, object]) -> tuple[dict, tuple[str, ...]]:
    """Canonical settings (KL as k1/abs/k2/k3) -> (verl keys, the settings verl has no key for)."""
    return shared.canonical_to_native(ALIASES, KL_NAMES, canonical)


def norm_config(mode: str) -> dict[str, Any] | None:
    """Verl has no reward-normalization stage: None."""
    return None


def kl_placement(in_reward: bool, beta: float) -> dict[str, Any] | None:
    """Keys that put the KL in the token rewards (True) or in the loss (False), coef beta."""
    return {
        "use_kl_in_reward": in_reward,
        "use_kl_loss": not in_reward,
        "kl_loss_coef": beta,
    }


def train_config(
    config: Mapping[str, Any], beta: float, adaptive: bool, target_kl: float, horizon: float
) -> dict[str, Any]:
    """One training step's config: beta in the reward, the controller type from ``adaptive``."""
    cfg = dict(config)
    cfg[BETA_KEY] = beta
    cfg["use_kl_in_reward"] = cfg.get("use_kl_in_reward", True)
    cfg["kl_ctrl_type"] = "adaptive" if adaptive else "fixed"
    cfg["target_kl"] = target_kl
    cfg["horizon"] = horizon
    return cfg


def beta_blocked(config: Mapping[str, Any]) -> str | None:
    """Why beta cannot reach the advantages with the KL in the reward switched on (never)."""
    return None


def clip_range(cfg: Mapping[str, Any]) -> tuple[float, float]:
    """(low, high) epsilon of the PPO ratio clip of a resolved config.

    clip_ratio_low / clip_ratio_high, each falling back to clip_ratio when null.
    """
    low, high = cfg["clip_ratio_low"], cfg["clip_ratio_high"]
    low = cfg["clip_ratio"] if low is None else low
    return float(low), float(cfg["clip_ratio"] if high is None else high)


def unread_inputs(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """Optional (B, T) batch inputs this config's ``pipeline`` never reads.

    Critic values: GAE only; ``sum_pi_squared``: the optimal token baseline only. ``run``
    validates them as usual but leaves them out of the float64 copy it hands over.
    """
    est = cfg["adv_estimator"]
    return tuple(
        name
        for name, reader in (("values", "gae"), ("sum_pi_squared", "optimal_token_baseline"))
        if est != reader
    )


# ------------------------------------------------------------------------------ the pipeline


def pipeline(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
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
    lengths = mask.sum(-1)
    notes = base_notes(batch, lengths) + conv.notes
    notes.append("no response-level reward processing in verl (rewards = scores)")
    kl = _kl(batch, cfg["kl_penalty"])
    beta, next_beta = cfg["kl_coef"], cfg["kl_coef"]
    kl_in_reward = cfg["use_kl_in_reward"]
    tokens = token_rewards(scores, mask, kl if kl_in_reward else None, beta)
    if kl_in_reward:
        notes.append(f"KL in reward: r_t -= {num(beta)} * {cfg['kl_penalty']}")
        if cfg["kl_ctrl_type"] == "adaptive":
            next_beta = controller(beta, kl, mask, cfg["target_kl"], cfg["horizon"], notes)
    empty = lengths == 0
    # a zero-length response's score has no token; verl still sums it into s_i (index -1)
    seq = masked_sum(tokens, mask, dim=-1) + torch.where(empty, scores, torch.zeros_like(scores))
    name = ESTIMATORS[est]
    if est == "grpo_passk" and not cfg["norm_adv_by_std_in_grpo"]:
        notes.append("norm_adv_by_std_in_grpo=False: r_max - r_second, no std division")
    if est == "grpo" and not cfg["norm_adv_by_std_in_grpo"]:
        name = "dr_grpo"
        notes.append("norm_adv_by_std_in_grpo=False: advantage = s - group mean (Dr.GRPO)")
    params = EstimatorParams(
        gamma=cfg["gamma"],
        lam=cfg["lam"],
        values=batch.values,
        baseline_scores=batch.baseline_scores,
        seq_rewards=seq,
        std_eps=None if est == "grpo_passk" and not cfg["norm_adv_by_std_in_grpo"] else conv.eps,
        std_ddof=conv.std_ddof,
        singleton="zero" if est == "rloo_vectorized" else "raw",
        carry_through=True,
        whiten_ddof=conv.whiten_ddof,
        group_labels=batch.group_labels,
        logprobs=batch.logprobs,
        sum_pi_squared=batch.sum_pi_squared,
        float32_stats=est == "grpo_vectorized",
    )
    notes.extend(_estimator_notes(name, batch, conv, cfg))
    try:
        if name == "gdpo":
            estimate = _gdpo(batch, cfg, mask, params)
        else:
            estimate = ALL_ESTIMATORS[name](tokens, mask, batch.group_ids, params)
        advantages, returns, rows = estimate.advantages, estimate.returns, None
        if name == "gae":
            advantages = masked_whiten(advantages, mask, ddof=conv.whiten_ddof, eps=1e-8)
    except ValueError as err:
        raise ValueError(f"verl {est}: {err}") from None
    if cfg["use_pf_ppo"] and est == "gae":
        rows, advantages, returns = pf.resample(
            cfg, scores, mask, estimate.advantages, advantages, returns, conv.whiten_ddof, notes
        )
    elif cfg["use_pf_ppo"]:
        notes.append(
            f"use_pf_ppo: verl resamples in compute_advantage's gae branch only, not {est}"
        )

    kl_loss = None
    if cfg["use_kl_loss"]:
        mode, factor = loss_agg_modes(cfg)["kl"]
        kl_loss = aggregate(_kl(batch, cfg["kl_loss_type"]), mask, mode, factor).item()
        notes.append(
            f"KL loss term: {cfg['kl_loss_type']} (coef {num(cfg['kl_loss_coef'])}), "
            f"aggregated with loss_agg_mode {cfg['loss_agg_mode']}"
        )
    masked = (tokens, estimate.advantages, estimate.returns) if name in MASKED_OUTPUTS else ()
    return make_trace(
        "verl",
        cfg,
        batch,
        masked=masked or (tokens,),
        rewards=scores.clone(),
        baseline=estimate.baseline,
        scale=estimate.scale,
        clip_frac=0.0,
        kl=kl,
        beta=beta,
        next_beta=next_beta,
        kl_in_reward=kl_in_reward,
        kl_loss=kl_loss,
        token_rewards=tokens,
        advantages=advantages,
        returns=returns,
        running=running,
        notes=notes,
        resample=rows,
    )


def _kl(batch: Batch, name: str) -> Tensor:
    """Verl ``kl_penalty``: k3 with the log-ratio clamped to +-20 and the result to +-10.

    A "+" suffix only changes the gradient (straight-through k2): the value is the same.
    """
    canonical = KL_CANON[kl_base(name)]
    if canonical == "k3":
        return batch_kl(batch, "k3", clamp=10.0, log_ratio_clamp=20.0)
    return batch_kl(batch, canonical, clamp=None)


def _gdpo(batch: Batch, cfg: dict[str, Any], mask: Tensor, params: EstimatorParams):
    """Verl gdpo (``compute_gdpo_outcome_advantage``): per-component GRPO, weighted sum, whiten.

    Each of ``gdpo_reward_keys`` names one of ``batch.reward_components``. Without keys the
    function's fallback runs on the combined reward (one component: GRPO, then whitening);
    verl's trainer would assert that the keys are set. Every component is divided by its group
    std whatever ``norm_adv_by_std_in_grpo`` says: ``ray_trainer.compute_advantage`` (which the
    v1 trainer calls too) does not pass that key to gdpo, so the function's default True holds.
    """
    keys = cfg["gdpo_reward_keys"]
    if not keys:  # compute_gdpo_outcome_advantage's fallback: the combined reward, one component
        seq = params.seq_rewards[None, :]
        return decoupled_norm_advantages(
            seq,
            torch.ones(1, dtype=seq.dtype),
            mask,
            batch.group_ids,
            params,
            by_std=True,
        )
    have = batch.reward_components or {}
    missing = [k for k in keys if k not in have]
    if missing:
        raise ValueError(
            f"gdpo reward key(s) {missing} not found in the batch's reward components "
            f"(available: {sorted(have)})"
        )
    weights = cfg["gdpo_reward_weights"] or (1.0,) * len(keys)
    if len(weights) != len(keys):
        raise ValueError(
            f"gdpo_reward_weights has {len(weights)} weights for {len(keys)} gdpo_reward_keys"
        )
    components = torch.stack([have[k] for k in keys])
    return decoupled_norm_advantages(
        components,
        torch.tensor(weights, dtype=components.dtype),
        mask,
        batch.group_ids,
        params,
        by_std=True,
    )


def _estimator_notes(name: str, batch: Batch, conv: Conventions, cfg: dict) -> list[str]:
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
            f"group std {conv.ddof_word(conv.std_ddof)}, eps {num(conv.eps)} added to std",
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
        "length_weighted": [
            "OPO: A = s - sum_j L_j s_j / sum_j L_j (length-weighted group mean)",
            "returns = advantages",
        ],
        "gpg": [
            "GPG: A = alpha (s - group mean), alpha = B / #(nonzero scores); f_norm = 1",
            "returns = advantages",
        ],
        "passk": [
            "pass@k: the best sample of each group gets (r_max - r_second) / (std + eps), the "
            "others 0",
            "returns = advantages",
        ],
        "optimal_token_baseline": [
            "OTB: per position B_t = sum G_t W_t / sum W_t over the group, W_t the cumulative "
            "1 - 2 pi_t + sum pi^2; the longest response's tail past the second-longest gets "
            "baseline 0",
            "returns = reward-to-go",
        ],
        "gdpo": [
            f"GDPO: each of {list(cfg['gdpo_reward_keys'])} group-normalised on its own, "
            f"weighted sum (weights {list(cfg['gdpo_reward_weights'] or []) or 'all 1'})"
            if cfg["gdpo_reward_keys"]
            else "GDPO without gdpo_reward_keys: the combined reward as its only component "
            "(verl's trainer asserts the keys are set)",
            "each component divided by its group std (+1e-6) even with "
            "norm_adv_by_std_in_grpo=False: the trainer does not pass that key to gdpo",
            whiten,
            "returns = advantages",
        ],
    }[name]
    if singles and name in ("grpo", "dr_grpo", "reinforce_pp_baseline", "gdpo"):
        notes.append("singleton group: mean 0, std 1 (raw reward passes through)")
    if singles and name in ("length_weighted", "gpg"):
        notes.append("singleton group: baseline 0 (the raw reward passes through)")
    if singles and name == "rloo":
        if cfg["adv_estimator"] == "rloo_vectorized":
            notes.append("singleton group: advantage 0 (rloo_vectorized multiplies by count > 1)")
        else:
            notes.append("singleton group keeps its raw score (verl rloo; rloo_vectorized gives 0)")
    if cfg["adv_estimator"] == "grpo_vectorized":
        notes.append(
            "grpo_vectorized always divides by the group std: ray_trainer.compute_advantage does "
            "not pass norm_adv_by_std_in_grpo to it; its group mean and std are float32 "
            "(utils/groupwise.py::group_mean_std, computed so here too): with large scores "
            "(an offset near 1000) they differ from grpo's by up to ~1e-2"
        )
    return notes


# ---------------------------------------------------------------------------- the update loss


def loss_agg_modes(cfg: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Canonical aggregation of each loss term.

    ``loss_agg_mode`` everywhere, as the trainer runs it: ``agg_loss`` gets the mini-batch's
    ``global_batch_size`` (``ppo_mini_batch_size * rollout.n`` rows, ``v1/trainer_base.py::
    _update_actor`` / ``_update_critic``), so the seq-mean modes divide by every row, empty
    responses included. sapo forces seq-mean-token-mean for the policy term
    (``compute_policy_loss_sapo``: its ``LOSS_MODES`` row); gspo follows ``loss_agg_mode`` (verl
    0.9.1, ``compute_policy_loss_gspo``: "we support aggregate the loss in different modes,
    default is token-mean"; the git main snapshot 1dda039b still hard-codes seq-mean-token-mean
    there).
    """
    factor = cfg["loss_scale_factor"]
    same = (_TRAINER_AGG[cfg["loss_agg_mode"]], factor)
    policy = mode_row(cfg).policy_agg or same
    return {"policy": policy, "kl": same, "entropy": same, "value": same}


#: verl's ``loss_agg_mode`` -> the canonical mode its trainer computes (global_batch_size = B).
_TRAINER_AGG = {
    "token-mean": "token-mean",
    "token-sum": "token-sum",
    "seq-mean-token-sum": "seq-mean-token-sum-all-rows",
    "seq-mean-token-mean": "seq-mean-token-mean-all-rows",
    "seq-mean-token-sum-norm": "seq-mean-token-sum-norm-all-rows",
}


def loss_spec(cfg: dict[str, Any], notes: list[str]) -> LossSpec:
    """The verl policy loss as a ``LossSpec`` (``core_algos.compute_policy_loss_<loss_mode>``).

    The KL, entropy and critic settings every loss mode shares, plus the row of ``LOSS_MODES``.

    Raises:
        ValueError: loss_mode dro without dro_beta > 0 (verl raises the same); bypass_mode
            thresholds that do not fit its rules.
    """
    kl_type = cfg["kl_loss_type"]
    kl_name = KL_CANON[kl_base(kl_type)]
    kwargs = {
        "kl_on": cfg["use_kl_loss"],
        "kl_estimator": kl_name,
        "kl_clamp": 10.0 if kl_name == "k3" else None,
        "kl_log_ratio_clamp": 20.0 if kl_name == "k3" else None,
        "beta": cfg["kl_loss_coef"],
        "kl_straight_through": kl_type.endswith("+") and kl_name != "k2",
        "entropy_coef": cfg["entropy_coeff"],
        "value_clip": cfg["cliprange_value"],
    }
    if cfg["use_kl_loss"]:
        notes.append(f"verl KL loss: {kl_type}, aggregated with loss_agg_mode")
        if kwargs["kl_straight_through"]:
            notes.append(
                f"{kl_type}: value of {kl_base(kl_type)}, gradient of k2 (straight-through)"
            )
    if cfg["loss_agg_mode"].startswith("seq-mean"):
        notes.append(
            f"{cfg['loss_agg_mode']}: divided by every row of the mini-batch (global_batch_size), "
            "empty responses included"
        )
    mode = mode_row(cfg)
    return LossSpec(kind=mode.kind, **mode.params(cfg, notes), **kwargs)


#: the rollout-correction hooks of the dialect record (``verl_rollout``)
reads_rollout_logprobs = vr.reads_rollout_logprobs
mismatch_correction = vr.mismatch_correction


def rewrite_loss_inputs(
    cfg: Mapping[str, Any],
    notes: list[str],
    inputs: Any,
    sample_mask: Tensor | None,
    resample: Tensor | None,
) -> tuple[Any, dict[str, float]]:
    """The verl loss inputs: PF-PPO's drawn rows, then the rollout correction's rewrite.

    The legacy trainer trains on the rows PF-PPO drew (the v1 trainer on its own rows); the
    rollout correction then sets old = mu, narrows the mask and adds IS weights, as its mode
    says, and returns the ``rollout_corr/*`` metrics the trainer logs.
    """
    shared.refuse_row_inputs(sample_mask, None)
    inputs = pf.train_inputs(cfg, inputs, resample)
    more, metrics = vr.loss_inputs(
        cfg,
        notes,
        inputs.logprobs,
        inputs.old_logprobs,
        inputs.rollout_logprobs,
        inputs.response_mask,
    )
    return dataclasses.replace(inputs, **more), metrics


#: The record the registry holds: every fact above, by name.
DIALECT = Dialect.of(globals())
