"""Stand-ins for the frameworks' heavy imports, and the calls into their loss code.

The machinery (``mod``, ``real``, ``reset``, ``function_from``, the config and ``DataProto``
stand-ins, verl's ``core_algos`` loader) is ``benchmarks.framework_peers``'s. Only what the
extracted files import at module level is stubbed (ray, megatron, deepspeed,
tensordict, omegaconf, transformers, the config dataclasses, the data containers); the loss,
KL, aggregation and advantage functions themselves are the frameworks' own, imported from the
extracted source. Each ``run_*`` builds the arguments the framework's trainer would pass (the
batch-size and token-count normalisers included) and returns (loss, metrics).
"""

from __future__ import annotations

import logging
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

# the stand-in machinery and verl's core_algos loader live with the benchmark that times verl's
# compute_advantage; re-exported here for make_vectors and peer_roll
from benchmarks.framework_peers import (  # noqa: F401
    AlgoConfig,
    Cfg,
    DataProtoStub,
    function_from,
    load_verl_core,
    mod,
    real,
    reset,
)

F64 = torch.float64


class TensorDictLike(dict):
    """The parts of a TensorDict that ``verl/workers/utils/losses.py::ppo_loss`` uses."""

    def __init__(self, **kw):
        super().__init__(**kw)

    def select(self, *keys):
        """Same data (the test batch is already padded)."""
        return self

    def to_padded_tensor(self):
        """Same data."""
        return self


class Metric:
    """verl ``Metric`` stand-in: like ``verl.utils.metric.Metric.append``, a float snapshot
    (``.detach().item()``) taken when the metric is made."""

    def __new__(cls, value=None, aggregation=None):
        return value.detach().item() if isinstance(value, torch.Tensor) else value

    @staticmethod
    def from_dict(d, aggregation=None):
        """The dict itself."""
        return d


# --------------------------------------------------------------------------------------- verl


def load_verl(tmp: Path) -> dict:
    """Import verl's core_algos, workers/utils/losses, rollout_corr_helper (and the trainer's
    ``rename_dict``) from ``tmp``."""
    v = tmp / "verl"
    core = load_verl_core(tmp)
    mod("verl.utils.tensordict_utils")
    mod("verl.utils.dataset")
    mod("verl.utils.dataset.dataset_utils", DatasetPadMode=SimpleNamespace(NO_PADDING="no_pad"))
    mod("verl.utils.metric", AggregationType=SimpleNamespace(SUM="sum", MEAN="mean"), Metric=Metric)
    mod("verl.workers.utils", v / "workers" / "utils")
    mod("verl.workers.utils.padding", no_padding_2_padding=lambda x, data: x)
    losses = real("verl.workers.utils.losses", v / "workers" / "utils" / "losses.py")
    rc = real(
        "verl.trainer.ppo.rollout_corr_helper", v / "trainer" / "ppo" / "rollout_corr_helper.py"
    )
    pyf = real("verl.utils.py_functional", v / "utils" / "py_functional.py")
    return {
        "core_algos": core,
        "losses": losses,
        "rollout_corr": rc,
        "rename_dict": pyf.rename_dict,
    }


def verl_actor_config(opts: dict) -> Cfg:
    """verl's actor config (``trainer/config/actor/actor.yaml`` defaults) with ``opts`` set."""
    policy = Cfg(
        loss_mode="vanilla",
        clip_cov_ratio=0.0002,
        clip_cov_lb=1.0,
        clip_cov_ub=5.0,
        kl_cov_ratio=0.0002,
        ppo_kl_coef=0.1,
        dro_beta=None,
        rollout_correction=Cfg(  # trainer/config/algorithm/rollout_correction.yaml
            rollout_is=None,
            rollout_is_threshold=2.0,
            rollout_is_batch_normalize=False,
            rollout_rs=None,
            rollout_rs_threshold=None,
            bypass_mode=False,
            loss_type="ppo_clip",
        ),
    )
    cfg = Cfg(
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=3.0,
        tau_pos=1.0,
        tau_neg=1.05,
        loss_agg_mode="token-mean",
        loss_scale_factor=None,
        entropy_coeff=0,
        use_kl_loss=False,
        kl_loss_coef=0.001,
        kl_loss_type="low_var_kl",
        policy_loss=policy,
        global_batch_info={},
    )
    for path, value in opts.items():
        parts = path.split(".")
        assert parts[0] == "actor", path
        target = cfg
        for p in parts[1:-1]:
            target = getattr(target, p)
        setattr(target, parts[-1], value)
    return cfg


EST_MASK = torch.tensor(
    [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]],
    dtype=F64,
)
EST_SCORES = torch.tensor([1.0, 0.0, 0.5, 0.2, 0.9], dtype=F64)
EST_BASELINES = torch.tensor([0.4, 0.1, 0.6, 0.3, 0.2], dtype=F64)


def _r12(t: torch.Tensor) -> list:
    """Nested lists of floats rounded to 10 significant digits."""
    if t.dim() == 1:
        return [float(f"{x:.10g}") for x in t.tolist()]
    return [_r12(r) for r in t]


def run_verl_estimator(
    core, case, opts: dict, groups: list[int] | None = None, offset: float = 0.0
) -> dict:
    """One verl advantage estimator as ``ray_trainer.compute_advantage`` calls it (reward on each
    response's last token; values, old log-probs, sum_pi_squared and reward components from a
    seeded generator); ``groups`` replaces the case's prompt ids (stored in the vector);
    ``offset`` is added to every score (float32 group statistics show on large scores)."""
    g = torch.Generator().manual_seed(7)
    m = EST_MASK
    B = m.shape[0]
    last = m.sum(-1).long() - 1
    tlr = torch.zeros_like(m)
    scores = EST_SCORES + offset
    tlr[torch.arange(B), last] = scores
    values = torch.randn(m.shape, generator=g, dtype=F64) * 0.5 * m
    old = (-0.1 - 2.0 * torch.rand(m.shape, generator=g, dtype=F64)) * m
    pi2 = torch.exp(old) ** 2 + (1 - torch.exp(old) ** 2) * torch.rand(
        m.shape, generator=g, dtype=F64
    )
    components = {"acc": [1.0, 0.0, 1.0, 0.0, 1.0], "fmt": [0.5, 1.0, 0.0, 1.0, 1.0]}
    index = np.array([str(int(x)) for x in (case.groups.tolist() if groups is None else groups)])
    name = opts["algorithm.adv_estimator"]
    cfg = AlgoConfig(
        gamma=opts.get("algorithm.gamma", 1.0),
        lam=opts.get("algorithm.lam", 1.0),
        norm_adv_by_std_in_grpo=opts.get("algorithm.norm_adv_by_std_in_grpo", True),
        gdpo_reward_keys=opts.get("algorithm.gdpo_reward_keys"),
        gdpo_reward_weights=opts.get("algorithm.gdpo_reward_weights"),
    )
    if name == "gae":
        adv, ret = core.compute_gae_advantage_return(
            token_level_rewards=tlr, values=values, response_mask=m, gamma=cfg.gamma, lam=cfg.lam
        )
    elif name == "grpo":
        adv, ret = core.compute_grpo_outcome_advantage(
            token_level_rewards=tlr, response_mask=m, index=index,
            norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo,
        )  # fmt: skip
    else:
        kw = {"token_level_rewards": tlr, "response_mask": m, "config": cfg, "index": index}
        if name == "remax":
            kw["reward_baselines"] = EST_BASELINES
        if name == "gdpo":
            kw["non_tensor_batch"] = {k: np.array(v) for k, v in components.items()}
            kw["batch"] = {
                "prompts": torch.zeros(B, 1),
                "attention_mask": torch.cat([torch.ones(B, 1), m], 1).long(),
            }
        if name == "optimal_token_baseline":
            kw.update(sum_pi_squared=pi2, old_log_probs=old, rollout_is_weights=None)
        adv, ret = core.get_adv_estimator_fn(name)(**kw)
    extra = {} if groups is None else {"groups": groups}
    if opts.get("algorithm.use_pf_ppo"):  # compute_advantage's gae branch, after the advantages
        extra |= run_verl_pf_ppo(core, tlr, adv, ret, opts)
    return {
        "case": "estimator",
        "options": opts,
        **extra,
        "mask": m.tolist(),
        "scores": scores.tolist(),
        "baseline_scores": EST_BASELINES.tolist(),
        "values": _r12(values),
        "old_log_probs": _r12(old),
        "sum_pi_squared": _r12(pi2),
        "components": components,
        "advantages": _r12(adv),
        "returns": _r12(ret),
    }


#: the global seed set before verl's unseeded ``torch.multinomial`` (roll-viz: viz_pf_ppo_seed)
PF_PPO_SEED = 3


class _BatchLike(dict):
    """The parts of a TensorDict ``compute_pf_ppo_reweight_data`` uses (items, batch_size)."""


class _ProtoLike:
    """The parts of a DataProto ``compute_pf_ppo_reweight_data`` uses."""

    def __init__(self, batch: dict):
        self.batch = _BatchLike(batch)
        self.batch.batch_size = [len(next(iter(batch.values())))]
        self.non_tensor_batch = {}
        self.meta_info = {}


def run_verl_pf_ppo(core, tlr, adv, ret, opts: dict) -> dict:
    """verl ``core_algos.compute_pf_ppo_reweight_data`` on the gae batch, its draw seeded by
    ``torch.manual_seed(PF_PPO_SEED)``: the rows drawn (a row-number column resampled with the
    rest) and the resampled advantages and returns."""
    B = tlr.shape[0]
    data = _ProtoLike(
        {
            "token_level_scores": tlr,
            "advantages": adv,
            "returns": ret,
            "row": torch.arange(B),
        }
    )
    torch.manual_seed(PF_PPO_SEED)
    out = core.compute_pf_ppo_reweight_data(
        data,
        opts.get("algorithm.pf_ppo.reweight_method", "pow"),
        opts.get("algorithm.pf_ppo.weight_pow", 2.0),
    )
    return {
        "seed": PF_PPO_SEED,
        "resample": out.batch["row"].tolist(),
        "resampled_advantages": _r12(out.batch["advantages"]),
        "resampled_returns": _r12(out.batch["returns"]),
    }


def run_verl_rollout_correction(mods, case, opts: dict) -> dict:
    """verl ``compute_rollout_correction_and_rejection_mask``: IS weights and the new mask; and
    ``ppo_loss`` (vanilla, token-mean) on them: the legacy trainer's (rejected tokens gone from
    ``response_mask`` and from ``batch_num_tokens``; dual clip out of reach: clip_ratio_c 100)
    and the v1 trainer's (``_v1``: rejected tokens still in ``batch_num_tokens``; the default
    dual clip, clip_ratio_c 3)."""
    p = "algorithm.rollout_correction."
    kw = {k[len(p) :]: v for k, v in opts.items()}
    proto, new_mask, _metrics = mods["rollout_corr"].compute_rollout_correction_and_rejection_mask(
        old_log_prob=case.old, rollout_log_prob=case.mu, response_mask=case.mask, **kw
    )
    weights = proto.batch["rollout_is_weights"] if proto is not None else torch.ones_like(case.mask)
    lp = case.lp.clone().requires_grad_(True)
    data = TensorDictLike(
        dp_size=1,
        batch_num_tokens=new_mask.sum(),
        global_batch_size=case.B,
        response_mask=new_mask,
        old_log_probs=case.old,
        advantages=case.adv,
    )
    if proto is not None:
        data["rollout_is_weights"] = weights
    cfg = verl_actor_config({"actor.clip_ratio_c": 100.0})
    loss, _ = mods["losses"].ppo_loss(cfg, {"log_probs": lp}, data)
    (grad,) = torch.autograd.grad(loss, lp)
    # the v1 trainer: batch_num_tokens counts loss_mask, written before the rejection; verl's
    # default dual clip (clip_ratio_c 3)
    lp1 = case.lp.clone().requires_grad_(True)
    loss_v1, _ = mods["losses"].ppo_loss(
        verl_actor_config({}),
        {"log_probs": lp1},
        TensorDictLike(**{**data, "batch_num_tokens": case.mask.sum()}),
    )
    (grad_v1,) = torch.autograd.grad(loss_v1, lp1)
    return {
        "case": "rollout_correction",
        "options": opts,
        "weights": _r12(weights),
        "response_mask": new_mask.tolist(),
        "loss": float(f"{loss.item():.10g}"),
        "grad": _r12(grad),
        "loss_v1": float(f"{loss_v1.item():.10g}"),
        "grad_v1": _r12(grad_v1),
    }


def run_verl_trainer_correction(mods, case, lp, opts: dict):
    """verl's trainers with ``algorithm.rollout_correction`` (``trainer.use_v1``, default true).

    Decoupled (``bypass_mode`` false): ``compute_rollout_correction_and_add_to_batch``'s
    ``compute_rollout_correction_and_rejection_mask`` on pi_old against mu gives
    ``rollout_is_weights`` and the narrowed ``response_mask``, then ``ppo_loss`` with them; the
    engine's ``batch_num_tokens`` counts ``loss_mask``: under v1 the agent loop's response mask
    (written before the rejection), under the legacy trainer ``left_right_2_no_padding``'s copy
    of the narrowed one. ``bypass_mode: true``: old = mu; the legacy ``apply_bypass_mode`` also
    sets ``loss_mode: bypass_mode`` with the rollout_correction config, v1 changes nothing else.

    Returns:
        (loss, metrics: the actor's under ``actor/`` and the trainer's ``rollout_corr/*``).
    """
    p = "algorithm.rollout_correction."
    rc_cfg = {k[len(p) :]: v for k, v in opts.items() if k.startswith(p)}
    actor = {k: v for k, v in opts.items() if k.startswith("actor.")}
    v1 = opts.get("trainer.use_v1", True)
    mask, old, weights, trainer_metrics = case.mask, case.old, None, {}
    if rc_cfg.pop("bypass_mode", False):
        old = case.mu
        if not v1:  # apply_bypass_mode
            actor["actor.policy_loss.loss_mode"] = "bypass_mode"
            for key, value in rc_cfg.items():
                actor["actor.policy_loss.rollout_correction." + key] = value
    else:
        proto, mask, trainer_metrics = mods[
            "rollout_corr"
        ].compute_rollout_correction_and_rejection_mask(
            old_log_prob=case.old,
            rollout_log_prob=case.mu,
            response_mask=case.mask,
            rollout_is=rc_cfg.get("rollout_is"),
            rollout_is_threshold=rc_cfg.get("rollout_is_threshold", 2.0),
            rollout_is_batch_normalize=rc_cfg.get("rollout_is_batch_normalize", False),
            rollout_rs=rc_cfg.get("rollout_rs"),
            rollout_rs_threshold=rc_cfg.get("rollout_rs_threshold"),
        )
        weights = None if proto is None else proto.batch["rollout_is_weights"]
    data = TensorDictLike(
        dp_size=1,
        batch_num_tokens=case.mask.sum() if v1 else mask.sum(),
        global_batch_size=case.B,
        response_mask=mask,
        old_log_probs=old,
        advantages=case.adv,
    )
    if weights is not None:
        data["rollout_is_weights"] = weights
    if actor.get("actor.use_kl_loss"):
        data["ref_log_prob"] = case.ref
    out = {"log_probs": lp}
    if actor.get("actor.entropy_coeff"):
        out["entropy"] = case.entropy
    loss, metrics = mods["losses"].ppo_loss(verl_actor_config(actor), out, data)
    return loss, {**mods["rename_dict"](metrics, "actor/"), **trainer_metrics}


# ------------------------------------------------------------------------------------ OpenRLHF


def load_openrlhf(pkg: Path) -> dict[str, types.ModuleType]:
    """Import OpenRLHF's models/utils.py and models/loss.py from an unpacked wheel."""
    o = pkg / "openrlhf"
    mod("deepspeed")
    mod("openrlhf", o)
    mod("openrlhf.models", o / "models")
    utils = real("openrlhf.models.utils", o / "models" / "utils.py")
    loss = real("openrlhf.models.loss", o / "models" / "loss.py")
    return {"utils": utils, "loss": loss}


def run_openrlhf_loss(mods, case, lp, opts: dict):
    """``PPOActor.training_step``'s loss on one rank: PolicyLoss + KL loss * coef - entropy."""
    a = {
        "--actor.eps_clip": 0.2,
        "--actor.eps_clip_low_high": None,
        "--actor.dual_clip": None,
        "--actor.loss_agg_mode": "token-mean",
        "--actor.policy_loss_type": "ppo",
        "--actor.entropy_coef": None,
        "--algo.kl.use_loss": False,
        "--algo.kl.init_coef": 0.01,
        "--algo.kl.estimator": "k1",
        "--algo.kl.unbiased_gradient": False,
        "--algo.advantage.is_correction_level": "off",
        "--algo.advantage.is_correction_mode": "mask",
        "--algo.advantage.is_correction_gating": "ratio",
        "--algo.advantage.is_correction_threshold": [0.5, 5.0],
    }
    a.update(opts)
    low_high = a["--actor.eps_clip_low_high"] or [a["--actor.eps_clip"]] * 2
    ic = "--algo.advantage.is_correction_"
    fn = mods["loss"].PolicyLoss(
        clip_eps_low=low_high[0],
        clip_eps_high=low_high[1],
        dual_clip=a["--actor.dual_clip"],
        token_level_loss=a["--actor.loss_agg_mode"] == "token-mean",
        policy_loss_type=a["--actor.policy_loss_type"],
        is_correction_level=a[ic + "level"],
        is_correction_mode=a[ic + "mode"],
        is_correction_gating=a[ic + "gating"],
        is_correction_threshold=a[ic + "threshold"],
    )
    mask = case.mask.bool()
    info = {
        "dp_size": 1,
        "batch_num_tokens": mask.sum().to(torch.float32),
        "global_batch_size": (mask.sum(-1) > 0).sum().to(torch.float32),
    }
    actor_loss, clip_ratio, ppo_kl, vllm_kl, is_filter_ratio = fn(
        lp, case.old, case.adv, action_mask=mask, rollout_log_probs=case.mu, **info
    )
    metrics = {"policy_loss": actor_loss, "ppo_clip_ratio": clip_ratio, "ppo_kl": ppo_kl}
    if vllm_kl is not None:
        metrics["vllm_kl"] = vllm_kl
        metrics["is_filter_ratio"] = is_filter_ratio
    loss = actor_loss
    if a["--algo.kl.use_loss"]:
        coef = a["--algo.kl.init_coef"]
        kl = mods["utils"].compute_approx_kl(
            lp,
            case.ref,
            log_probs_old=case.old,
            kl_estimator=a["--algo.kl.estimator"],
            unbiased_gradient=a["--algo.kl.unbiased_gradient"],
        )
        kl_loss = mods["loss"].aggregate_loss(kl, mask, **info)
        metrics["kl"] = kl_loss
        metrics["logprobs_diff"] = mods["utils"].masked_mean(lp - case.ref, mask)
        loss = loss + kl_loss * coef
    if a["--actor.entropy_coef"] is not None:
        entropy_loss = mods["loss"].aggregate_loss(case.entropy, mask, **info)
        metrics["entropy_loss"] = entropy_loss
        if a["--actor.entropy_coef"] != 0:
            loss = loss - entropy_loss * a["--actor.entropy_coef"]
    return loss, {k: v.detach() for k, v in metrics.items()}


OR_MASK = torch.tensor(
    [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]],
    dtype=F64,
)
OR_SCORES = torch.tensor([1.0, 0.0, 0.5, 12.0, -0.4, 0.9], dtype=F64)
OR_GROUPS = [0, 0, 0, 1, 1, 1]


def load_openrlhf_experience(pkg: Path) -> type:
    """``trainer/ppo_utils/experience_maker.py::RemoteExperienceMaker`` (ray etc. stubbed)."""
    o = pkg / "openrlhf"
    mod("ray")
    mod("openrlhf.trainer", o / "trainer")
    mod("openrlhf.trainer.ppo_utils", o / "trainer" / "ppo_utils")
    mod("openrlhf.trainer.ppo_utils.experience", Experience=object)
    mod("openrlhf.trainer.ray", o / "trainer" / "ray")
    mod("openrlhf.trainer.ray.launcher", RayActorGroup=object)
    mod("openrlhf.utils", o / "utils")
    mod("openrlhf.utils.logging_utils", init_logger=lambda name: logging.getLogger(name))
    mod("openrlhf.utils.seqlen_balancing", get_minimum_num_micro_batch_size=None,
        get_seqlen_balanced_partitions=None)  # fmt: skip
    em = o / "trainer" / "ppo_utils"
    real("openrlhf.trainer.ppo_utils.length_penalty", em / "length_penalty.py")
    return real("openrlhf.trainer.ppo_utils.experience_maker", em / "experience_maker.py")


def run_openrlhf_estimator(mods, maker_mod, opts: dict) -> dict:
    """``RemoteExperienceMaker.compute_advantages_and_returns`` on one experience of two prompt
    groups of 3 (the KL in the reward as ``make_experience`` computes it)."""
    g = torch.Generator().manual_seed(11)
    m = OR_MASK
    lp = (-0.1 - 2.0 * torch.rand(m.shape, generator=g, dtype=F64)) * m
    ref = (lp + 0.3 * torch.randn(m.shape, generator=g, dtype=F64)) * m
    values = torch.randn(m.shape, generator=g, dtype=F64) * 0.5 * m
    a = {"--algo.advantage.estimator": "gae", "--algo.advantage.gamma": 1.0,
         "--algo.advantage.lambd": 1.0, "--algo.kl.estimator": "k1", "--algo.kl.init_coef": 0.01,
         "--algo.kl.use_loss": False, "--reward.clip_range": [-10.0, 10.0],
         "--algo.advantage.no_std_norm": False, "--reward.overlong_buffer_len": None,
         "--reward.overlong_penalty_factor": 1.0, "--reward.stop_properly_penalty_coef": None,
         "--rollout.max_new_tokens": m.shape[1]}  # fmt: skip
    a.update(opts)
    args = SimpleNamespace(
        algo=SimpleNamespace(
            advantage=SimpleNamespace(estimator=a["--algo.advantage.estimator"],
                                      gamma=a["--algo.advantage.gamma"],
                                      lambd=a["--algo.advantage.lambd"],
                                      no_std_norm=a["--algo.advantage.no_std_norm"]),
            kl=SimpleNamespace(use_loss=a["--algo.kl.use_loss"]),
        ),
        rollout=SimpleNamespace(n_samples_per_prompt=3,
                                max_new_tokens=a["--rollout.max_new_tokens"]),
        reward=SimpleNamespace(clip_range=a["--reward.clip_range"],
                               overlong_buffer_len=a["--reward.overlong_buffer_len"],
                               overlong_penalty_factor=a["--reward.overlong_penalty_factor"],
                               stop_properly_penalty_coef=a["--reward.stop_properly_penalty_coef"]),
    )  # fmt: skip
    if a["--algo.kl.use_loss"]:
        kl = torch.zeros_like(lp)
    else:
        kl = mods["utils"].compute_approx_kl(lp, ref, kl_estimator=a["--algo.kl.estimator"])
    # truncated (vLLM finish_reason "length"): here a response as long as max_new_tokens
    lengths = m.sum(-1)
    truncated = lengths == a["--rollout.max_new_tokens"]
    exp = SimpleNamespace(rewards=OR_SCORES.clone(), index=list(range(6)), action_mask=m.bool(),
                          kl=kl, values=values, info={}, response_length=lengths,
                          truncated=truncated)  # fmt: skip
    maker = maker_mod.RemoteExperienceMaker.__new__(maker_mod.RemoteExperienceMaker)
    maker.strategy = SimpleNamespace(args=args)
    maker.args = args
    maker.advantage_estimator = args.algo.advantage.estimator
    maker.kl_ctl = SimpleNamespace(value=a["--algo.kl.init_coef"])
    (exp,) = maker.compute_advantages_and_returns([exp])
    stop = a["--reward.stop_properly_penalty_coef"] is not None
    extra = {"truncated": truncated.tolist()} if stop else {}
    return {
        "case": "estimator",
        "options": opts,
        "mask": m.tolist(),
        "scores": OR_SCORES.tolist(),
        "groups": OR_GROUPS,
        "logprobs": _r12(lp),
        "ref_logprobs": _r12(ref),
        "values": _r12(values),
        "advantages": _r12(exp.advantages),
        "returns": _r12(exp.returns),
        **extra,
    }
