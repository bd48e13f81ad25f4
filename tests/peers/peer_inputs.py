"""The fixed batch the peer vectors are computed on, and the option grid of each framework.

Five responses of up to five tokens (one of them empty), chosen so that every branch fires:
ratios above 1 + eps with A > 0 (clip high), below 1 - eps with A < 0 (clip low), above the dual
clip bound 3 with A < 0, a response whose sampler log-probs mu sit far from pi_old (rollout
corrections), and padding that holds a non-zero filler (equal in every log-prob tensor, as a
recompute of the same pad token gives; advantages 0 there, as every framework masks them).
Two cases: ``row`` (one advantage per response, the outcome-reward setting) and ``token``
(seeded token-level advantages). Values are float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

F64 = torch.float64
PAD = -0.5  # filler on padded positions of every log-prob tensor

MASK = torch.tensor(
    [
        [1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0],
        [0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 0],
    ],
    dtype=F64,
)
# log(pi_theta / pi_old) per token: clip-high, clip-low and dual-clip positions on purpose
DELTA = torch.tensor(
    [
        [0.35, 0.10, -0.05, 0.25, -0.30],
        [1.30, -0.40, 0.05, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [-0.30, 0.15, 0.30, -0.02, 0.0],
        [-0.25, 0.02, 0.0, 0.0, 0.0],
    ],
    dtype=F64,
)
ROW_ADV = torch.tensor([1.2, -0.8, 0.0, -0.3, 0.7], dtype=F64)
SCORES = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0], dtype=F64)
DIFFICULTY = torch.tensor([0.1, 0.9, 0.5, 0.3, 1.2], dtype=F64)
GROUPS = torch.tensor([0, 0, 0, 1, 1])


@dataclass(frozen=True)
class Case:
    """One input batch: (B, T) tensors, float64, padding as described in the module docstring."""

    name: str
    mask: torch.Tensor
    old: torch.Tensor
    lp: torch.Tensor
    ref: torch.Tensor
    mu: torch.Tensor
    adv: torch.Tensor
    entropy: torch.Tensor
    scores: torch.Tensor
    difficulty: torch.Tensor
    groups: torch.Tensor

    @property
    def B(self) -> int:
        """Number of responses."""
        return int(self.mask.shape[0])


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(20)
    m = MASK
    on = m > 0
    old = torch.where(on, -0.2 - 2.0 * torch.rand(m.shape, generator=g, dtype=F64), PAD)
    lp = torch.where(on, old + DELTA, PAD)
    ref = torch.where(on, old + 0.3 * torch.randn(m.shape, generator=g, dtype=F64), PAD)
    mu_shift = 0.25 * torch.randn(m.shape, generator=g, dtype=F64)
    mu_shift[0, 2], mu_shift[3, 1] = 1.2, -1.0  # ratio pi_old/mu of 0.30 and 2.7
    mu = torch.where(on, old + mu_shift, PAD)
    entropy = torch.where(on, 0.2 + 1.8 * torch.rand(m.shape, generator=g, dtype=F64), 0.9)
    row_adv = ROW_ADV[:, None] * m
    tok_adv = torch.randn(m.shape, generator=g, dtype=F64) * m
    common = dict(
        mask=m,
        old=old,
        lp=lp,
        ref=ref,
        mu=mu,
        entropy=entropy,
        scores=SCORES,
        difficulty=DIFFICULTY,
        groups=GROUPS,
    )
    return [Case("row", adv=row_adv, **common), Case("token", adv=tok_adv, **common)]


CASES = _cases()


def dump_inputs() -> dict:
    """Every case's tensors as lists (the test rebuilds them from the JSON)."""
    out = {}
    for c in CASES:
        out[c.name] = {
            k: getattr(c, k).tolist()
            for k in ("mask", "old", "lp", "ref", "mu", "adv", "entropy", "scores", "difficulty")
        }
        out[c.name]["groups"] = c.groups.tolist()
    return out


# ----------------------------------------------------------------------------- option grids

VERL_MODES = (
    "vanilla",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "dppo_tv",
    "dppo_kl",
)
VERL_AGG = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
VERL_KL = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def verl_loss_options() -> list[dict]:
    """verl option sets under verl's config paths (``actor.*``)."""
    out: list[dict] = []
    for mode in VERL_MODES:
        aggs = (
            VERL_AGG
            if mode in ("vanilla", "gspo", "gpg")
            else ("token-mean", "seq-mean-token-mean")
        )
        for agg in aggs:
            o = {"actor.policy_loss.loss_mode": mode, "actor.loss_agg_mode": agg}
            if mode == "clip_cov":  # every candidate token drawn: no dependence on the RNG
                o.update(
                    {
                        "actor.policy_loss.clip_cov_ratio": 1.0,
                        "actor.policy_loss.clip_cov_lb": 0.0,
                        "actor.policy_loss.clip_cov_ub": 5.0,
                    }
                )
            if mode == "kl_cov":
                o.update(
                    {"actor.policy_loss.kl_cov_ratio": 0.3, "actor.policy_loss.ppo_kl_coef": 0.5}
                )
            if mode == "dro":
                o["actor.policy_loss.dro_beta"] = 0.05
            out.append(o)
    out.append(
        {
            "actor.policy_loss.loss_mode": "vanilla",
            "actor.clip_ratio_low": 0.2,
            "actor.clip_ratio_high": 0.28,
            "actor.clip_ratio_c": 3.0,
        }
    )
    out.append({"actor.policy_loss.loss_mode": "vanilla", "actor.clip_ratio_c": 1.5})
    out.append(
        {
            "actor.policy_loss.loss_mode": "vanilla",
            "actor.loss_agg_mode": "seq-mean-token-sum-norm",
            "actor.loss_scale_factor": 8,
        }
    )
    out.append({"actor.policy_loss.loss_mode": "sapo", "actor.tau_pos": 0.8, "actor.tau_neg": 1.3})
    out.append(
        {
            "actor.policy_loss.loss_mode": "cispo",
            "actor.clip_ratio_low": 0.1,
            "actor.clip_ratio_high": 0.15,
        }
    )
    out.append({"actor.policy_loss.loss_mode": "vanilla", "actor.entropy_coeff": 0.01})
    for kl in VERL_KL:
        for plus in ("", "+"):
            out.append(
                {
                    "actor.policy_loss.loss_mode": "vanilla",
                    "actor.use_kl_loss": True,
                    "actor.kl_loss_coef": 0.1,
                    "actor.kl_loss_type": kl + plus,
                }
            )
    out.append(
        {
            "actor.policy_loss.loss_mode": "vanilla",
            "actor.use_kl_loss": True,
            "actor.kl_loss_coef": 0.1,
            "actor.kl_loss_type": "low_var_kl",
            "actor.loss_agg_mode": "seq-mean-token-mean",
        }
    )
    out.extend(verl_bypass_options())
    return out


def verl_bypass_options() -> list[dict]:
    """verl ``loss_mode: bypass_mode`` (old_log_prob = mu) with ``policy_loss.rollout_correction``:
    ppo_clip and reinforce, token / sequence IS (TIS, IcePop, batch-normalised) and rejection."""
    rc = "actor.policy_loss.rollout_correction."
    base = {"actor.policy_loss.loss_mode": "bypass_mode"}
    ppo = {**base, rc + "loss_type": "ppo_clip"}
    pg = {**base, rc + "loss_type": "reinforce"}
    tis = {rc + "rollout_is": "token", rc + "rollout_is_threshold": 2.0}
    seq_tis = {rc + "rollout_is": "sequence", rc + "rollout_is_threshold": 2.0}
    k3_rs = {rc + "rollout_rs": "seq_mean_k3", rc + "rollout_rs_threshold": 0.2}
    k1_rs = {rc + "rollout_rs": "token_k1", rc + "rollout_rs_threshold": "0.5_2.0"}
    seq_mean = {"actor.loss_agg_mode": "seq-mean-token-mean"}
    return [
        ppo,
        {**ppo, **tis},
        {**ppo, **k3_rs},
        {**ppo, **k1_rs, **seq_mean},
        {**ppo, **k1_rs, "actor.use_kl_loss": True, "actor.kl_loss_coef": 0.1,
         "actor.entropy_coeff": 0.01},
        pg,
        {**pg, **tis},
        {**pg, **seq_tis},
        {**pg, rc + "rollout_is": "token", rc + "rollout_is_threshold": "0.5_5.0"},
        {**pg, **tis, rc + "rollout_is_batch_normalize": True},
        {**pg, **seq_tis, **k1_rs, **seq_mean},
        {**pg, **tis, **k3_rs},
        {**pg, **seq_tis, "actor.loss_agg_mode": "seq-mean-token-sum"},
    ]  # fmt: skip


def verl_trainer_corrections() -> list[dict]:
    """verl ``algorithm.rollout_correction`` as its trainers run it (``trainer.use_v1``):
    the decoupled mode under every loss_mode that reads the weights and each aggregation, with
    the KL and entropy terms, and ``bypass_mode: true`` under both trainers."""
    rc = "algorithm.rollout_correction."
    tis = {rc + "rollout_is": "token", rc + "rollout_is_threshold": 2.0}
    k1 = {rc + "rollout_rs": "token_k1", rc + "rollout_rs_threshold": "0.5_2.0"}
    k3 = {rc + "rollout_rs": "seq_mean_k3", rc + "rollout_rs_threshold": 0.05}
    legacy = {"trainer.use_v1": False}
    terms = {"actor.use_kl_loss": True, "actor.kl_loss_coef": 0.1, "actor.entropy_coeff": 0.01}
    out = [
        tis,
        {rc + "rollout_is": "sequence", rc + "rollout_is_threshold": 2.0},
        {rc + "rollout_is": "token", rc + "rollout_is_threshold": "0.5_5.0"},
        {**tis, rc + "rollout_is_batch_normalize": True},
        k1,
        {**k1, **legacy},
        {**tis, **k3, **terms},
        {**tis, **k3, **terms, **legacy},
        {
            rc + "rollout_is": "sequence",
            rc + "rollout_is_threshold": 2.0,
            rc + "rollout_rs": "seq_sum_k1",
            rc + "rollout_rs_threshold": "0.5_2.0",
        },
        {**tis, **k1, "actor.loss_agg_mode": "seq-mean-token-mean"},
        {**tis, **k1, "actor.loss_agg_mode": "seq-mean-token-sum"},
        {**tis, **k1, "actor.loss_agg_mode": "token-sum"},
    ]
    for mode in ("gspo", "cispo", "sapo", "dppo_tv", "kl_cov", "gpg", "dro", "geo_mean"):
        o = {**tis, **k1, "actor.policy_loss.loss_mode": mode}
        if mode == "dro":
            o["actor.policy_loss.dro_beta"] = 0.05
        out.append(o)
    geo = {"actor.policy_loss.loss_mode": "geo_mean"}
    out.append({rc + "rollout_is": "token", rc + "rollout_is_threshold": "0.5_5.0", **geo})
    seq = {rc + "rollout_is": "sequence", rc + "rollout_is_threshold": 2.0}
    out.append({**seq, **k3, **geo, **legacy})
    out.append({**tis, rc + "bypass_mode": True})
    out.append({**tis, **k1, rc + "bypass_mode": True, **legacy})
    return out


def verl_estimators(case: Case) -> list[dict]:
    """verl advantage estimators (``algorithm.*``) run on the scores of the row case."""
    if case.name != "row":
        return []
    return [
        {"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": True},
        {"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": False},
        {"algorithm.adv_estimator": "grpo_vectorized"},
        # the trainer does not pass the key to grpo_vectorized: this one still divides by std
        {"algorithm.adv_estimator": "grpo_vectorized", "algorithm.norm_adv_by_std_in_grpo": False},
        {"algorithm.adv_estimator": "rloo"},
        {"algorithm.adv_estimator": "rloo_vectorized"},
        {"algorithm.adv_estimator": "reinforce_plus_plus", "algorithm.gamma": 1.0},
        {"algorithm.adv_estimator": "reinforce_plus_plus", "algorithm.gamma": 0.9},
        {"algorithm.adv_estimator": "reinforce_plus_plus_baseline"},
        {"algorithm.adv_estimator": "opo"},
        {"algorithm.adv_estimator": "gpg"},
        {"algorithm.adv_estimator": "grpo_passk"},
        {"algorithm.adv_estimator": "remax"},
        {"algorithm.adv_estimator": "gae", "algorithm.gamma": 1.0, "algorithm.lam": 1.0},
        {"algorithm.adv_estimator": "gae", "algorithm.gamma": 0.9, "algorithm.lam": 0.8},
        # PF-PPO under the legacy trainer (the batch's own rows keep their advantages there)
        *(
            {
                "algorithm.adv_estimator": "gae",
                "algorithm.use_pf_ppo": True,
                "trainer.use_v1": False,
            }
            | pf
            for pf in (
                {},
                {"algorithm.pf_ppo.weight_pow": 1.0},
                {"algorithm.pf_ppo.reweight_method": "max_min"},
                {"algorithm.pf_ppo.reweight_method": "max_random"},
            )
        ),
        {"algorithm.adv_estimator": "optimal_token_baseline"},
        {"algorithm.adv_estimator": "gdpo", "algorithm.gdpo_reward_keys": ["acc", "fmt"]},
        {
            "algorithm.adv_estimator": "gdpo",
            "algorithm.gdpo_reward_keys": ["acc", "fmt"],
            "algorithm.gdpo_reward_weights": [1.0, 0.5],
        },
        {
            "algorithm.adv_estimator": "gdpo",
            "algorithm.gdpo_reward_keys": ["acc", "fmt"],
            "algorithm.norm_adv_by_std_in_grpo": False,
        },
    ]


#: Added to every score for ``verl_offset_estimators``: grpo_vectorized's float32 group statistics
#: lose ~1e-4 of a score's 1000 (its advantages differ from float64 by ~1e-2).
SCORE_OFFSET = 1000.0


def verl_offset_estimators() -> list[dict]:
    """verl group estimators on scores offset by ``SCORE_OFFSET``."""
    return [{"algorithm.adv_estimator": name} for name in ("grpo", "grpo_vectorized")]


#: Prompt ids with a group of one (the last two rows alone), for the singleton rules.
SINGLETON_GROUPS = [0, 0, 0, 1, 2]


def verl_singleton_estimators() -> list[dict]:
    """verl estimators whose group-of-one rule differs, run on ``SINGLETON_GROUPS``."""
    return [{"algorithm.adv_estimator": name} for name in ("grpo", "grpo_vectorized", "rloo",
                                                          "rloo_vectorized")]  # fmt: skip


def verl_rollout_corrections() -> list[dict]:
    """verl ``algorithm.rollout_correction`` settings (weights and rejection)."""
    rc = "algorithm.rollout_correction."
    return [
        {rc + "rollout_is": "token", rc + "rollout_is_threshold": 2.0},
        {rc + "rollout_is": "sequence", rc + "rollout_is_threshold": 2.0},
        {
            rc + "rollout_is": "token",
            rc + "rollout_is_threshold": 2.0,
            rc + "rollout_is_batch_normalize": True,
        },
        {
            rc + "rollout_is": "sequence",
            rc + "rollout_is_threshold": 2.0,
            rc + "rollout_is_batch_normalize": True,
        },
        {rc + "rollout_is": "token", rc + "rollout_is_threshold": "0.5_2.0"},  # IcePop
        {rc + "rollout_is": "sequence", rc + "rollout_is_threshold": "0.5_2.0"},
        {rc + "rollout_rs": "token_k1", rc + "rollout_rs_threshold": "0.5_2.0"},
        {rc + "rollout_rs": "token_k2", rc + "rollout_rs_threshold": 0.1},
        {rc + "rollout_rs": "token_k3", rc + "rollout_rs_threshold": 0.1},
        {rc + "rollout_rs": "seq_sum_k1", rc + "rollout_rs_threshold": "0.5_2.0"},
        {rc + "rollout_rs": "seq_mean_k3", rc + "rollout_rs_threshold": 0.05},
        {rc + "rollout_rs": "seq_max_k2", rc + "rollout_rs_threshold": 0.2},
        {rc + "rollout_rs": "token_k1,seq_mean_k3", rc + "rollout_rs_threshold": "0.5_2.0,0.05"},
        {
            rc + "rollout_is": "token",
            rc + "rollout_is_threshold": 2.0,
            rc + "rollout_rs": "seq_mean_k2",
            rc + "rollout_rs_threshold": 0.02,
        },
    ]


def roll_loss_options() -> list[tuple[str, dict]]:
    """(worker, ROLL yaml keys) pairs: ActorWorker for ppo, ActorPGWorker for every pg_variant."""
    out: list[tuple[str, dict]] = []
    aggs = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
    for agg in aggs:
        out.append(("actor_worker", {"loss_agg_mode": agg}))
    out.append(("actor_worker", {"importance_sampling": "seq"}))
    out.append(("actor_worker", {"dual_clip_loss": True}))
    out.append(
        ("actor_worker", {"use_pg_clip_range": True, "pg_clip_low": 0.2, "pg_clip_high": 0.28})
    )
    out.append(("actor_worker", {"use_kl_loss": True, "kl_loss_coef": 0.1}))
    out.append(("actor_worker", {"entropy_loss_coef": 0.01, "rl_loss_coef": 0.5}))
    out.append(("actor_worker", {"length_loss_weight": True}))
    out.append(("actor_worker", {"difficulty_loss_weight": True, "loss_agg_mode": "token-mean"}))
    # sample-level masks: the loss on final_response_mask (rows 0 and 3 dropped here)
    out.append(("actor_worker", {"max_len_mask": True, "loss_agg_mode": "token-mean",
                                 "use_kl_loss": True, "kl_loss_coef": 0.1}))  # fmt: skip
    out.append(("actor_worker", {"max_len_mask": True, "error_max_len_clip": True,
                                 "error_max_len_threshold": 4}))  # fmt: skip
    # ROLL logs approxkl, policykl, ratio_* and clipfrac over the unmasked response_mask, and
    # its token-mean clip fractions sum every position over the final mask's token count
    out.append(("actor_worker", {"max_len_mask": True, "importance_sampling": "seq",
                                 "loss_agg_mode": "token-mean"}))  # fmt: skip
    out.append(("actor_worker", {"max_len_mask": True, "loss_agg_mode": "seq-mean-token-sum",
                                 "entropy_loss_coef": 0.01}))  # fmt: skip
    out.append(("actor_worker", {"max_len_mask": True, "entropy_loss_coef": 0.01}))
    out.append(("actor_worker", {"max_len_mask": True, "loss_agg_mode": "seq-mean-token-sum-norm"}))
    for variant in ("vanilla", "cispo", "tis", "topr", "kimi15"):  # ppo: ActorWorker here
        for agg in ("seq-mean-token-mean", "token-mean"):
            out.append(("actor_pg_worker", {"pg_variant": variant, "loss_agg_mode": agg,
                                            "max_len_mask": True}))  # fmt: skip
    for variant in ("vanilla", "ppo", "tis", "topr", "cispo", "kimi15"):
        for agg in ("seq-mean-token-mean", "token-mean"):
            out.append(("actor_pg_worker", {"pg_variant": variant, "loss_agg_mode": agg}))
    out.append(("actor_pg_worker", {"pg_variant": "cispo", "cispo_use_unified_mask": True}))
    out.append(
        (
            "actor_pg_worker",
            {"pg_variant": "cispo", "cispo_epsilon_low": 0.3, "cispo_epsilon_high": 0.2},
        )
    )
    out.append(
        ("actor_pg_worker", {"pg_variant": "tis", "tis_lower_bound": 0.9, "tis_upper_bound": 1.2})
    )
    out.append(
        (
            "actor_pg_worker",
            {"pg_variant": "topr", "topr_positive_weight": 0.5, "topr_negative_weight": 2.0},
        )
    )
    out.append(("actor_pg_worker", {"pg_variant": "kimi15", "kimi15_tau": 0.3}))
    out.append(
        (
            "actor_pg_worker",
            {"pg_variant": "ppo", "dual_clip_loss": True, "use_kl_loss": True, "kl_loss_coef": 0.1},
        )
    )
    return out


def openrlhf_loss_options() -> list[dict]:
    """OpenRLHF 0.11.2 CLI flags."""
    out: list[dict] = []
    for ptype in ("ppo", "gspo"):
        for agg in ("token-mean", "seq-mean-token-mean"):
            out.append({"--actor.policy_loss_type": ptype, "--actor.loss_agg_mode": agg})
    out.append({"--actor.eps_clip_low_high": [0.2, 0.28]})
    out.append({"--actor.dual_clip": 3.0})
    out.append({"--actor.entropy_coef": 0.01})
    for est in ("k1", "k2", "k3"):
        out.append(
            {"--algo.kl.use_loss": True, "--algo.kl.init_coef": 0.1, "--algo.kl.estimator": est}
        )
        out.append({"--algo.kl.use_loss": True, "--algo.kl.init_coef": 0.1,
                    "--algo.kl.estimator": est, "--algo.kl.unbiased_gradient": True})  # fmt: skip
    ic = "--algo.advantage.is_correction_"
    for level in ("token", "seq"):
        out.append(
            {
                ic + "level": level,
                ic + "mode": "mask",
                ic + "gating": "ratio",
                ic + "threshold": [0.5, 2.0],
            }
        )
    out.append(
        {
            ic + "level": "token",
            ic + "mode": "clip",
            ic + "gating": "ratio",
            ic + "threshold": [0.5, 2.0],
        }
    )
    for gating in ("binary_kl", "tv"):
        for level in ("token", "seq"):
            out.append(
                {
                    ic + "level": level,
                    ic + "mode": "mask",
                    ic + "gating": gating,
                    ic + "threshold": [0.0, 0.05],
                }
            )
    out.append(
        {
            "--actor.policy_loss_type": "gspo",
            ic + "level": "token",
            ic + "mode": "mask",
            ic + "gating": "ratio",
            ic + "threshold": [0.5, 2.0],
        }
    )
    return out


def trl_loss_options() -> list[dict]:
    """TRL GRPOConfig fields (``GRPOConfig.*``)."""
    c = "GRPOConfig."
    out: list[dict] = []
    for lt in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"):
        out.append({c + "loss_type": lt})
    for lt in ("grpo", "dapo", "luspo", "cispo"):
        out.append({c + "loss_type": lt, c + "importance_sampling_level": "sequence"})
    out.append({c + "loss_type": "dapo", c + "epsilon_high": 0.28})
    out.append({c + "loss_type": "cispo", c + "epsilon_high": 1.3})
    out.append({c + "loss_type": "dapo", c + "delta": 1.5})
    out.append({c + "loss_type": "dr_grpo", c + "max_completion_length": 8})
    out.append({c + "loss_type": "dapo", c + "beta": 0.1})
    out.append({c + "loss_type": "dapo", c + "beta": 0.1, c + "use_bias_correction_kl": False})
    out.append({c + "loss_type": "dapo", c + "entropy_coef": 0.01})
    # adaptive entropy, first step: no bonus (TRL's last entropy +inf), coefficient moves
    out.append({c + "loss_type": "dapo", c + "entropy_coef": 0.01,
                c + "use_adaptive_entropy": True})  # fmt: skip
    out.append({c + "loss_type": "grpo", c + "entropy_coef": 0.3, c + "use_adaptive_entropy": True,
                c + "entropy_target": 5.0, c + "entropy_coef_delta": 0.1,
                c + "entropy_coef_max": 0.35})  # fmt: skip
    out.append({c + "loss_type": "dapo", c + "top_entropy_quantile": 0.5})
    out.append({c + "loss_type": "dapo", c + "off_policy_mask_threshold": 0.05})
    out.append(
        {c + "loss_type": "sapo", c + "sapo_temperature_pos": 0.8, c + "sapo_temperature_neg": 1.3}
    )
    out.append({c + "loss_type": "vespo", c + "vespo_k_pos": 1.5, c + "vespo_lambda_neg": 1.0})
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        out.append(
            {
                c + "loss_type": "dapo",
                c + "use_vllm": True,
                c + "vllm_importance_sampling_mode": mode,
                c + "vllm_importance_sampling_clip_min": 0.5,
                c + "vllm_importance_sampling_clip_max": 2.0,
            }
        )
    out.append(
        {
            c + "loss_type": "vespo",
            c + "use_vllm": True,
            c + "vllm_importance_sampling_mode": "token_truncate",
            c + "vllm_importance_sampling_clip_max": 2.0,
        }
    )
    out.append({c + "loss_type": "dapo", c + "use_vllm": True})  # defaults: sequence_mask, max 3
    out.append({c + "loss_type": "grpo", c + "use_vllm": True,
                c + "vllm_importance_sampling_mode": "token_truncate"})  # fmt: skip
    out.append({c + "loss_type": "dapo", c + "use_vllm": True,
                c + "vllm_importance_sampling_correction": False})  # fmt: skip
    out.append({c + "loss_type": "dapo", c + "use_vllm": True,
                c + "off_policy_mask_threshold": 0.05})  # fmt: skip
    return out


def openrlhf_estimators() -> list[dict]:
    """OpenRLHF 0.11.2 advantage estimators and reward-stage flags."""
    a, k = "--algo.advantage.", "--algo.kl."
    out: list[dict] = []
    for est in ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo",
                "flash_reinforce"):  # fmt: skip
        out.append({a + "estimator": est})
    out.append({a + "estimator": "flash_reinforce", a + "gamma": 0.9})  # forced to 1
    out.append({a + "estimator": "gae", a + "gamma": 0.9, a + "lambd": 0.8})
    out.append({a + "estimator": "reinforce", a + "gamma": 0.9})
    out.append({a + "estimator": "rloo", a + "gamma": 0.9})  # forced to 1
    out.append({a + "estimator": "reinforce", a + "no_std_norm": True})
    out.append({a + "estimator": "group_norm", "--reward.clip_range": [-1.0, 1.0]})
    for est in ("k1", "k2", "k3"):
        out.append({a + "estimator": "reinforce_baseline", k + "estimator": est,
                    k + "init_coef": 0.05})  # fmt: skip
    out.append({a + "estimator": "rloo", k + "use_loss": True, k + "init_coef": 0.05})
    # length penalties (apply_length_penalties, before the shaping); response width 4
    r, cap = "--reward.", "--rollout.max_new_tokens"
    out += [
        {a + "estimator": "group_norm", r + "overlong_buffer_len": 2.0, cap: 4},
        {a + "estimator": "reinforce", r + "overlong_buffer_len": 2.0,
         r + "overlong_penalty_factor": 0.5, cap: 5},
        {a + "estimator": "rloo", r + "stop_properly_penalty_coef": 0.5, cap: 4},
        {a + "estimator": "group_norm", r + "stop_properly_penalty_coef": -0.5, cap: 4},
        {a + "estimator": "reinforce_baseline", r + "overlong_buffer_len": 3.0,
         r + "stop_properly_penalty_coef": 0.0, cap: 4},
    ]  # fmt: skip
    return out


#: Two reward functions on six completions (two prompts x 3 generations, groups consecutive).
TRL_REWARDS = [[1.0, 0.5], [0.0, 1.0], [1.0, 0.0], [0.0, 0.2], [0.0, 0.9], [1.0, 1.0]]
TRL_REWARDS_FLAT = [[1.0, 0.5], [1.0, 0.5], [1.0, 0.5], [0.0, 0.2], [0.0, 0.9], [1.0, 1.0]]


def trl_two_step_options() -> list[dict]:
    """Adaptive-entropy options run for two optimizer steps on the same batch (the second
    step's loss is stored): its bonus and coefficient come from the first step."""
    c = "GRPOConfig."
    return [
        {c + "loss_type": "grpo", c + "entropy_coef": 0.3, c + "use_adaptive_entropy": True,
         c + "entropy_target": 5.0, c + "entropy_coef_delta": 0.1, c + "entropy_coef_max": 0.35},
        {c + "loss_type": "dapo", c + "entropy_coef": 0.01, c + "use_adaptive_entropy": True},
    ]  # fmt: skip


def trl_estimators() -> list[dict]:
    """TRL GRPOConfig reward-stage fields."""
    c = "GRPOConfig."
    out: list[dict] = []
    for agg in ("sum_then_normalize", "normalize_then_sum"):
        for scale in ("group", "batch", "none"):
            out.append({c + "multi_objective_aggregation": agg, c + "scale_rewards": scale})
        out.append({c + "multi_objective_aggregation": agg, c + "reward_weights": [1.0, 0.5]})
    return out


def roll_estimators() -> list[dict]:
    """ROLL reward-stage and estimator yaml keys."""
    out: list[dict] = [
        {"adv_estimator": "reinforce"},
        {"adv_estimator": "grpo"},
        {"adv_estimator": "gae", "gamma": 0.9, "lambd": 0.8},
        {"adv_estimator": "reinforce", "gamma": 0.9},
        {"adv_estimator": "reinforce", "norm_mean_type": "batch", "norm_std_type": "batch"},
        {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": "group"},
        {"adv_estimator": "reinforce", "norm_mean_type": "group"},
        {"adv_estimator": "reinforce", "norm_mean_type": "batch"},
        {"adv_estimator": "grpo", "reward_clip": 0.5},
        {"adv_estimator": "reinforce", "whiten_rewards": True},
        {"adv_estimator": "gae", "whiten_advantages": True},
        {"adv_estimator": "grpo", "advantage_clip": 0.5},
    ]
    for kl in ("kl", "abs", "mse", "k3"):
        out.append({"adv_estimator": "reinforce", "add_token_level_kl": True,
                    "init_kl_coef": 0.05, "kl_penalty": kl})  # fmt: skip
    # sample-level masks (get_sample_level_mask -> final_response_mask)
    out += [
        {"adv_estimator": "reinforce", "max_len_mask": True},
        {"adv_estimator": "gae", "max_len_mask": True, "whiten_advantages": True},
        {"adv_estimator": "grpo", "difficulty_mask": True, "difficulty_low_threshold": 0.1,
         "difficulty_high_threshold": 0.95},
        {"adv_estimator": "reinforce", "whiten_rewards": True, "difficulty_mask": True,
         "difficulty_high_threshold": 0.95},
        {"adv_estimator": "reinforce", "error_max_len_clip": True, "error_max_len_threshold": 3},
        {"adv_estimator": "reinforce", "max_len_mask": True, "error_max_len_clip": True,
         "error_max_len_threshold": 3, "norm_mean_type": "batch", "norm_std_type": "batch",
         "gamma": 0.9},
    ]  # fmt: skip
    return out


#: Scores of one earlier step that the running reward statistics see first.
ROLL_PRIOR_SCORES = [0.3, 0.8, -1.0, 2.0, 0.0, 0.6]


def roll_running_estimators() -> list[tuple[dict, list[float] | None]]:
    """ROLL "running" norm types: (options, the earlier step's scores or None)."""
    out: list[tuple[dict, list[float] | None]] = []
    both = {"adv_estimator": "reinforce", "norm_mean_type": "running", "norm_std_type": "running"}
    out.append((both, None))
    out.append((both, ROLL_PRIOR_SCORES))
    out.append(({"adv_estimator": "reinforce", "norm_mean_type": "running"}, ROLL_PRIOR_SCORES))
    out.append(({"adv_estimator": "reinforce", "norm_std_type": "running"}, ROLL_PRIOR_SCORES))
    out.append(({"adv_estimator": "reinforce", "norm_mean_type": "group",
                 "norm_std_type": "running"}, ROLL_PRIOR_SCORES))  # fmt: skip
    return out


def roll_corrections() -> list[dict]:
    """ROLL ``train_infer_correction`` settings (IS weight, filters)."""
    w, f = "train_infer_correction.is_weight", "train_infer_correction.filters"
    out: list[dict] = []
    for wt in ("token", "geometric", "sequence", "segment"):
        out.append({w: {"enabled": True, "weight_type": wt, "upper_bound": 1.2}})
    out.append({w: {"enabled": True, "weight_type": "token", "upper_bound": None}})
    for agg in ("token", "geometric", "sequence", "segment"):
        out.append({f: [{"agg_type": agg, "ratio_low": 0.8, "ratio_high": 1.2}]})
    out.append({f: [{"agg_type": "token", "ratio_enabled": False, "diff_enabled": True,
                     "diff_low": -0.05, "diff_high": 0.05}]})  # fmt: skip
    out.append({w: {"enabled": True, "weight_type": "geometric", "upper_bound": 2.0},
                f: [{"agg_type": "token", "ratio_low": 0.5, "ratio_high": 2.0},
                    {"agg_type": "sequence", "ratio_enabled": False, "diff_enabled": True,
                     "diff_low": -0.3, "diff_high": 0.3}]})  # fmt: skip
    return out
