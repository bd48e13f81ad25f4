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

Size: one file per framework by design (its tables, order of operations, loss spec and
logged metrics side by side), so a reader checks the framework against one file.
"""

from __future__ import annotations

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
from roll_viz.core.pipeline.losses import LossMode, LossSpec, MetricContext, aggregate
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
    **shared.VIZ_DEFAULTS,
}

CHOICES: dict[str, tuple] = {
    "adv_estimator": tuple(ESTIMATORS),
    "kl_penalty": tuple(KL_CANON),
    "kl_ctrl_type": ("fixed", "adaptive"),
    "kl_loss_type": (*KL_CANON, *KL_PLUS),
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
        advantages = estimate.advantages
        if name == "gae":
            advantages = masked_whiten(advantages, mask, ddof=conv.whiten_ddof, eps=1e-8)
    except ValueError as err:
        raise ValueError(f"verl {est}: {err}") from None

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
        returns=estimate.returns,
        running=running,
        notes=notes,
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
    policy = _loss_mode(cfg).policy_agg or same
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
        "kl_coef": cfg["kl_loss_coef"],
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
    mode = _loss_mode(cfg)
    return LossSpec(kind=mode.kind, **mode.params(cfg, notes), **kwargs)


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


#: the rollout-correction hooks of the dialect record (``verl_rollout``)
reads_rollout_logprobs = vr.reads_rollout_logprobs
mismatch_correction = vr.mismatch_correction


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
    mode = _loss_mode(ctx.cfg)
    if mode.metrics is not None:
        out.update(mode.metrics(ctx))
    if ctx.entropy is not None:
        out["actor/entropy_loss"] = ctx.item("entropy")
    if spec.kl_on:
        out["actor/kl_loss"] = ctx.item("kl")
        out["actor/kl_coef"] = spec.kl_coef
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


def _loss_mode(cfg: Mapping[str, Any]) -> LossMode:
    """The ``LOSS_MODES`` row of a config.

    bypass_mode's by its loss_type, the legacy trainer's ``bypass_mode: true`` included.
    """
    if vr.mode(cfg) == "bypass_loss":
        return LOSS_MODES[f"bypass_mode:{cfg['loss_type']}"]
    return LOSS_MODES[cfg["loss_mode"]]


#: The record the registry holds: every fact above, by name.
DIALECT = Dialect.of(globals())
