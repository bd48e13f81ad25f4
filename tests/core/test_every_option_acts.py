"""No accepted-and-ignored option: every key a dialect accepts changes the calculator's output.

For each framework, each key of ``DEFAULTS`` and ``LOSS_DEFAULTS`` and each alternative value
(every other choice of an enumerated key, the other truth value of a switch, a number of the
key's own range) is run against a base config on one rich batch built to show it: groups of
three with a flat group and one at the response width, padding, critic values, reward
components, sum pi^2, reference and sampler log-probs far from pi_old, ratios past the clip and
the dual clip. The output is the pipeline's trace (rewards, token rewards, KL, advantages,
returns, next beta, KL-loss readout, sample mask) and the loss's total, per-token gradient,
terms and logged metrics. ``CONTEXT`` names the setting a key needs to act (its switch on, the
loss mode that reads it); ``NOT_ACTING`` lists the (key, value) pairs that legitimately change
nothing, each with its reason, and is itself checked (each pair really does change nothing).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from roll_viz.core.pipeline import dialects, policy_loss, run
from roll_viz.core.records import Batch

F64 = torch.float64
B, T = 9, 5
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
LENGTHS = [5, 3, 2, 4, 1, 5, 3, 4, 2]
MASK = torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in LENGTHS], dtype=F64)
SCORES = torch.tensor([1.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.2, 0.9, 0.0], dtype=F64)


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(31)

    def rnd(scale=1.0):
        return torch.randn(B, T, generator=g, dtype=F64) * scale * MASK

    old = (-0.2 - 2.0 * torch.rand(B, T, generator=g, dtype=F64)) * MASK
    lp = old + rnd(0.6)
    lp[1, 0] = old[1, 0] + math.log(4.0)  # r = 4: past the dual clip (A < 0 there)
    return {
        "old": old,
        "lp": lp,
        "mu": old + rnd(0.7),
        "ref": old + rnd(0.4),
        "values": rnd(0.5),
        "old_values": rnd(0.5),
        "returns": rnd(1.0),
        "entropy": torch.rand(B, T, generator=g, dtype=F64) * MASK,
        "adv": torch.tensor([0.8, -1.2, 0.3, -0.5, 1.5, -0.1, 0.9, -2.0, 0.4], dtype=F64),
        "pi2": (0.2 + 0.7 * torch.rand(B, T, generator=g, dtype=F64)) * MASK,
        "difficulty": torch.linspace(0.0, 1.0, B, dtype=F64),
    }


X = _inputs()
BATCH = Batch(
    scores=SCORES,
    response_mask=MASK,
    group_ids=GROUPS,
    logprobs=X["old"],
    ref_logprobs=X["ref"],
    values=X["values"],
    baseline_scores=torch.full((B,), 0.4, dtype=F64),
    reward_components={
        "acc": SCORES.clone(),
        "fmt": torch.tensor([0.5, 1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 0.5, 1.0], dtype=F64),
    },
    sum_pi_squared=X["pi2"],
)

#: values tried for a key whose alternatives cannot be derived from its default and choices
VALUES: dict[str, dict[str, list[Any]]] = {
    "roll": {
        "reward_clip": [0.3],
        "advantage_clip": [0.05],
        "target_kl": [0.01],
        "kl_horizon": [10.0],
        "error_max_len_threshold": [3],
        "difficulty_low_threshold": [0.4],
        "value_clip": [0.05],
        "viz_eps": [0.5],
    },
    "verl": {
        "gdpo_reward_keys": [("acc", "fmt")],
        "gdpo_reward_weights": [(1.0, 0.25)],
        "target_kl": [0.01],
        "kl_cov_ratio": [0.5],
        "loss_scale_factor": [7.0],
        "dro_beta": [0.5],
        "rollout_is": ["token", "sequence"],
        "rollout_is_threshold": [1.1, "0.5_1.5"],
        "rollout_rs": ["token_k1"],
        "rollout_rs_threshold": ["0.8_1.25"],
        "clip_ratio_low": [0.05, None],
        "clip_ratio_high": [0.05, None],
        "viz_eps": [0.5],
        "horizon": [10.0],
        "clip_cov_ratio": [0.5],
        "clip_cov_lb": [-5.0],
        "clip_cov_ub": [0.01],
        "viz_clip_cov_seed": [1],
        "viz_pf_ppo_seed": [1],
    },
    "openrlhf": {
        "target": [0.01],
        "horizon": [10.0],
        "clip_range": [(-0.3, 0.3)],
        "overlong_buffer_len": [2],
        "overlong_penalty_factor": [3.0],
        "stop_properly_penalty_coef": [0.5],
        "max_new_tokens": [4],
        "eps_clip_low_high": [(0.05, 0.4)],
        "dual_clip": [1.5],
        "entropy_coef": [0.05],
        "is_correction_threshold": [(0.9, 1.1)],
        "viz_eps": [0.5],
    },
    "trl": {
        "reward_weights": [(1.0, 0.25)],
        "entropy_target": [0.9],
        "viz_last_world_entropy": [0.1],
        "epsilon_high": [0.4],
        "delta": [1.5],
        "max_completion_length": [7],
        "off_policy_mask_threshold": [0.01],
        "vllm_importance_sampling_clip_min": [0.9],
        "vllm_importance_sampling_clip_max": [1.1, None],
        "viz_eps": [0.5],
    },
}

_GRPO = {"adv_estimator": "grpo"}
_VESPO = {"loss_type": "vespo", "vllm_importance_sampling_mode": "token_truncate"}
#: the setting a key needs to act (its base config)
CONTEXT: dict[str, dict[str, dict[str, Any]]] = {
    "roll": {
        "norm_std_type": {"norm_mean_type": "group"},
        "init_kl_coef": {"add_token_level_kl": True},
        "kl_penalty": {"add_token_level_kl": True},
        "target_kl": {"add_token_level_kl": True},
        "kl_horizon": {"add_token_level_kl": True, "target_kl": 0.01},
        "kl_loss_coef": {"use_kl_loss": True},
        "difficulty_low_threshold": {"difficulty_mask": True},
        "difficulty_high_threshold": {"difficulty_mask": True},
        "error_max_len_threshold": {"error_max_len_clip": True},
        "viz_std_ddof": _GRPO,
        "viz_eps": _GRPO,
        "viz_whiten_ddof": {"whiten_advantages": True},
        "pg_clip_low": {"use_pg_clip_range": True},
        "pg_clip_high": {"use_pg_clip_range": True},
        "use_pg_clip_range": {"pg_clip_low": 0.05, "pg_clip_high": 0.4},
        "cispo_epsilon_low": {"pg_variant": "cispo"},
        "cispo_epsilon_high": {"pg_variant": "cispo"},
        "cispo_use_unified_mask": {"pg_variant": "cispo"},
        "tis_lower_bound": {"pg_variant": "tis"},
        "tis_upper_bound": {"pg_variant": "tis"},
        "kimi15_tau": {"pg_variant": "kimi15"},
        "topr_positive_weight": {"pg_variant": "topr"},
        "topr_negative_weight": {"pg_variant": "topr"},
    },
    "verl": {
        "norm_adv_by_std_in_grpo": _GRPO,
        "kl_penalty": {"use_kl_in_reward": True},
        "kl_ctrl_type": {"use_kl_in_reward": True},
        "kl_coef": {"use_kl_in_reward": True},
        # k2 >= 0 on this batch: KL / target - 1 flips sign between the two targets
        "target_kl": {"use_kl_in_reward": True, "kl_ctrl_type": "adaptive", "kl_penalty": "mse"},
        "horizon": {"use_kl_in_reward": True, "kl_ctrl_type": "adaptive"},
        "kl_loss_coef": {"use_kl_loss": True},
        "kl_loss_type": {"use_kl_loss": True},
        "gdpo_reward_keys": {"adv_estimator": "gdpo"},
        "gdpo_reward_weights": {"adv_estimator": "gdpo", "gdpo_reward_keys": ("acc", "fmt")},
        "viz_std_ddof": _GRPO,
        "viz_eps": _GRPO,
        "loss_mode": {"dro_beta": 0.05},
        "clip_ratio": {"clip_ratio_low": None, "clip_ratio_high": None},
        "clip_ratio_low": {"clip_ratio": 0.1},
        "clip_ratio_high": {"clip_ratio": 0.1},
        "loss_scale_factor": {"loss_agg_mode": "seq-mean-token-sum-norm"},
        "tau_pos": {"loss_mode": "sapo"},
        "tau_neg": {"loss_mode": "sapo"},
        "kl_cov_ratio": {"loss_mode": "kl_cov"},
        "ppo_kl_coef": {"loss_mode": "kl_cov"},
        "dro_beta": {"loss_mode": "dro", "dro_beta": 0.05},
        "clip_cov_ratio": {"loss_mode": "clip_cov", "clip_cov_lb": -5.0},
        "clip_cov_lb": {"loss_mode": "clip_cov", "clip_cov_ratio": 0.5},
        "clip_cov_ub": {"loss_mode": "clip_cov", "clip_cov_ratio": 0.5, "clip_cov_lb": -5.0},
        "viz_clip_cov_seed": {"loss_mode": "clip_cov", "clip_cov_lb": -5.0},
        "use_v1": {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.8_1.25"},
        "loss_type": {"loss_mode": "bypass_mode"},
        "rollout_is_threshold": {"rollout_is": "token"},
        "rollout_is_batch_normalize": {"rollout_is": "token"},
        "rollout_rs": {"rollout_rs_threshold": "0.8_1.25"},
        "rollout_rs_threshold": {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"},
        "reweight_method": {"use_pf_ppo": True},
        "weight_pow": {"use_pf_ppo": True},
        "viz_pf_ppo_seed": {"use_pf_ppo": True},
    },
    "openrlhf": {
        "horizon": {"target": 0.01},
        "unbiased_gradient": {"use_loss": True},
        "overlong_buffer_len": {"max_new_tokens": 5},
        "overlong_penalty_factor": {"max_new_tokens": 5, "overlong_buffer_len": 2},
        "stop_properly_penalty_coef": {"max_new_tokens": 5},
        "max_new_tokens": {"stop_properly_penalty_coef": 0.5},
        "is_correction_mode": {"is_correction_level": "token"},
        "is_correction_gating": {"is_correction_level": "seq", "is_correction_threshold": 0.5},
        "is_correction_threshold": {"is_correction_level": "token"},
        "viz_std_ddof": {"advantage_estimator": "group_norm"},
        "viz_eps": {"advantage_estimator": "group_norm"},
    },
    "trl": {
        "use_bias_correction_kl": {"beta": 0.1},
        "max_completion_length": {"loss_type": "dr_grpo"},
        "entropy_coef_min": {"use_adaptive_entropy": True},
        # at the upper bound and below the target: the step up is capped by the maximum
        "entropy_coef_max": {
            "use_adaptive_entropy": True,
            "entropy_coef": 1.0,
            "entropy_target": 0.9,
        },
        "entropy_coef_delta": {"use_adaptive_entropy": True, "entropy_coef": 0.3},
        "entropy_target": {"use_adaptive_entropy": True, "entropy_coef": 0.3},
        "viz_last_world_entropy": {"use_adaptive_entropy": True, "entropy_coef": 0.3},
        "loss_type": {"vllm_importance_sampling_mode": "token_truncate"},
        "sapo_temperature_pos": {"loss_type": "sapo"},
        "sapo_temperature_neg": {"loss_type": "sapo"},
        "vespo_k_pos": _VESPO,
        "vespo_lambda_pos": _VESPO,
        "vespo_k_neg": _VESPO,
        "vespo_lambda_neg": _VESPO,
        "vllm_importance_sampling_clip_min": {"vllm_importance_sampling_mode": "token_truncate"},
        "mask_truncated_completions": {"max_completion_length": 5},
    },
}

#: (framework, key, value) -> why this option changes nothing on any batch (checked below)
NOT_ACTING: dict[tuple[str, str, Any], str] = {
    ("verl", "kl_penalty", "k1"): "verl's alias of kl (the default)",
    ("verl", "kl_loss_type", "k3"): "verl's alias of low_var_kl (the default)",
    ("verl", "viz_std_ddof", 1): "the framework's own value",
    ("roll", "viz_std_ddof", 1): "the framework's own value",
    ("openrlhf", "viz_std_ddof", 1): "the framework's own value",
    ("trl", "viz_std_ddof", 1): "the framework's own value",
    ("verl", "viz_whiten_ddof", 1): "the framework's own value",
    ("roll", "viz_whiten_ddof", 1): "the framework's own value",
    ("openrlhf", "viz_whiten_ddof", 0): "the framework's own value (biased whitening)",
    ("trl", "viz_whiten_ddof", 0): "TRL never whitens (the viz_ keys are every dialect's)",
    ("trl", "viz_whiten_ddof", 1): "TRL never whitens (the viz_ keys are every dialect's)",
    ("trl", "loss_type", "bnpo"): "one process: bnpo's local token count is dapo's global one",
}


def _alternatives(fw: str, key: str, default: Any) -> list[Any]:
    """The values tried for a key: its table's, every other choice, the other bool, a number."""
    d = dialects.get(fw)
    if key in VALUES[fw]:
        return VALUES[fw][key]
    choices = {**d.CHOICES, **d.LOSS_CHOICES}.get(key)
    if choices is not None:
        return [c for c in choices if c != default]
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, int | float) and not isinstance(default, bool):
        if key in ("gamma", "lam", "lambd"):
            return [0.5]
        return [default * 0.5 if default else 0.1]
    raise AssertionError(f"{fw}.{key}: no alternative value for default {default!r}")


def _cases() -> list[tuple[str, str, Any]]:
    out = []
    for fw in ("roll", "verl", "openrlhf", "trl"):
        d = dialects.get(fw)
        for key, default in {**d.DEFAULTS, **d.LOSS_DEFAULTS}.items():
            for value in _alternatives(fw, key, default):
                out.append((fw, key, value))
    return out


def _observe(fw: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Everything the calculator outputs for a config on the batch (errors as their message)."""
    out: dict[str, Any] = {}
    try:
        trace = run(BATCH, fw, cfg)
        fields = ("rewards", "token_rewards", "kl", "advantages", "returns", "sample_mask")
        for name in (*fields, "resample"):
            out[name] = getattr(trace, name)
        out["next_beta"], out["kl_loss"] = trace.next_beta, trace.kl_loss
    except ValueError as err:
        out["pipeline_error"] = str(err)
    try:
        res = policy_loss(
            fw,
            cfg,
            logprobs=X["lp"],
            old_logprobs=X["old"],
            advantages=X["adv"],
            response_mask=MASK,
            ref_logprobs=X["ref"],
            entropy=X["entropy"],
            values=X["values"],
            old_values=X["old_values"],
            returns=X["returns"],
            scores=SCORES if fw == "roll" else None,
            rollout_logprobs=X["mu"],
            difficulty=X["difficulty"] if fw == "roll" else None,
        )
        out["total"] = res.total
        out["grad"] = res.per_token["grad_coef"]
        out |= {f"term:{k}": v for k, v in res.terms.items()}
        out |= {f"metric:{k}": v for k, v in res.metrics.items()}
    except ValueError as err:
        out["loss_error"] = str(err)
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if x.shape != y.shape or not torch.allclose(x.detach(), y.detach(), atol=1e-12):
                return False
        elif isinstance(x, float) and isinstance(y, float):
            if not (math.isclose(x, y, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y))):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize(("fw", "key", "value"), _cases())
def test_every_accepted_option_changes_the_output(fw, key, value):
    base = dict(CONTEXT[fw].get(key, {}))
    before = _observe(fw, base)
    after = _observe(fw, {**base, key: value})
    for stage in ("pipeline_error", "loss_error"):
        assert stage not in before, f"base config {base} fails: {before[stage]}"
        assert stage not in after, f"{key}={value!r} on {base} fails: {after[stage]}"
    why = NOT_ACTING.get((fw, key, value))
    if why is None:
        assert not _same(before, after), f"{fw} {key}={value!r} (on {base}) changes nothing"
    else:  # the listed exception really changes nothing (else take it off the list)
        assert _same(before, after), f"{fw} {key}={value!r} acts: remove it from NOT_ACTING"


def test_every_key_is_tried():
    tried = {(fw, key) for fw, key, _ in _cases()}
    for fw in ("roll", "verl", "openrlhf", "trl"):
        d = dialects.get(fw)
        assert {(fw, k) for k in {**d.DEFAULTS, **d.LOSS_DEFAULTS}} <= tried
