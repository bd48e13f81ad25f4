"""ROLL: the loss functions of its two rlvr actor workers, its reward -> advantage chain and its
train/infer correction, called with the arguments ROLL's strategy and pipeline pass
(stand-ins from ``peer_stubs``)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import torch
from peer_stubs import F64, OR_GROUPS, OR_MASK, OR_SCORES, _r12, function_from, mod, real


def load_roll(tmp: Path) -> dict[str, type]:
    """Import ROLL's functionals and the two rlvr actor workers from ``tmp``."""
    r = tmp / "roll"
    mod("tensordict", TensorDict=dict)
    mod("roll", r)
    mod("roll.configs", r / "configs")
    mod("roll.configs.base_config", PPOConfig=object, TrainInferCorrectionConfig=object)
    mod("roll.pipeline", r / "pipeline")
    mod("roll.pipeline.rlvr", r / "pipeline" / "rlvr")
    mod("roll.pipeline.rlvr.rlvr_config", RLVRConfig=object)
    mod("roll.pipeline.base_worker", ActorWorker=object)
    mod("roll.platforms", current_platform=None)
    mod("roll.utils", r / "utils")
    mod("roll.utils.kl_controller", AdaptiveKLController=object)
    mod("roll.utils.logging", get_logger=lambda *a, **k: logging.getLogger("roll"))
    mod("roll.distributed")
    mod("roll.distributed.scheduler")
    mod("roll.distributed.scheduler.protocol", DataProto=object)
    real("roll.utils.functionals", r / "utils" / "functionals.py")
    mod("roll.pipeline.agentic", r / "pipeline" / "agentic")
    mod("roll.pipeline.agentic.utils",
        compute_segment_masked_mean=function_from(r / "pipeline" / "agentic" / "utils.py",
                                                  "compute_segment_masked_mean"))  # fmt: skip
    real("roll.utils.train_infer_corrections", r / "utils" / "train_infer_corrections.py")
    aw = real("roll.pipeline.rlvr.actor_worker", r / "pipeline" / "rlvr" / "actor_worker.py")
    pg = real("roll.pipeline.rlvr.actor_pg_worker", r / "pipeline" / "rlvr" / "actor_pg_worker.py")
    return {"actor_worker": aw.ActorWorker, "actor_pg_worker": pg.ActorPGWorker}


ROLL_PG_KEYS = (
    "pg_variant",
    "cispo_epsilon_low",
    "cispo_epsilon_high",
    "cispo_use_unified_mask",
    "tis_lower_bound",
    "tis_upper_bound",
    "kimi15_tau",
    "topr_positive_weight",
    "topr_negative_weight",
)


#: ROLL's sample-level mask switches (``get_sample_level_mask``), pipeline keys.
SAMPLE_MASK_KEYS = ("max_len_mask", "difficulty_mask", "error_max_len_clip")


def run_roll_loss(cls, case, lp, opts: dict):
    """A ROLL worker's ``loss_func`` with the batch the strategy would build (one rank).

    ``batch_num_tokens`` and ``global_valid_samples`` are what ``strategy.py`` computes
    (valid tokens; rows with a token; both at least 1). The old log-probs are the cached
    recompute (``enable_old_logprobs_recompute``), so no train/infer correction runs.
    """
    cfg = dict(
        pg_clip=0.2,
        use_pg_clip_range=False,
        pg_clip_low=0.2,
        pg_clip_high=0.2,
        dual_clip_loss=False,
        loss_agg_mode="seq-mean-token-mean",
        importance_sampling="token",
        entropy_loss_coef=0.0,
        rl_loss_coef=1.0,
        use_kl_loss=False,
        kl_loss_coef=0.0,
        length_loss_weight=False,
        difficulty_loss_weight=False,
        enable_old_logprobs_recompute=True,
    )
    pg = {k: v for k, v in opts.items() if k in ROLL_PG_KEYS}
    cfg.update({k: v for k, v in opts.items() if k not in ROLL_PG_KEYS})
    pc = SimpleNamespace(
        **cfg,
        actor_train=SimpleNamespace(**pg),
        train_infer_correction=SimpleNamespace(is_weight=SimpleNamespace(enabled=False)),
    )
    w = cls.__new__(cls)
    w.pipeline_config = pc
    w.logger = logging.getLogger("roll")
    w._pg_config_cache = {}
    w._pg_variant_logged = w._topr_sample_logged = True
    w._cispo_config_logged = w._kimi15_config_logged = True
    w.strategy = SimpleNamespace(
        op_compute_log_probs=lambda **k: lp, op_compute_entropy=lambda **k: case.entropy
    )
    w.get_old_log_probs_with_cache = lambda data, log_probs: case.old
    m = case.mask
    B = m.shape[0]
    full_mask = torch.cat([torch.ones(B, 1, dtype=F64), m], dim=1)  # loss_func drops column 0
    n_tok = torch.clamp(m.sum(), min=1)
    n_rows = torch.clamp((m.sum(-1) > 0).sum(), min=1)
    final = {}
    if any(opts.get(k) for k in SAMPLE_MASK_KEYS):  # rlvr_pipeline: get_sample_level_mask
        import roll.utils.functionals as fn

        flags = {k: False for k in SAMPLE_MASK_KEYS}
        flags.update(error_max_len_threshold=9999999999)
        flags.update({k: v for k, v in opts.items() if k in flags})
        masked = _RollData(
            batch=_RollBatch(response_mask=full_mask, responses=torch.zeros(m.shape),
                             scores=case.scores),
            meta_info={},
        )  # fmt: skip
        masked, _ = fn.get_sample_level_mask(masked, SimpleNamespace(**flags))
        fm = masked.batch["final_response_mask"]
        # compute_advantage(response_mask=final_response_mask) zeroes the dropped rows
        final = {"final_response_mask": fm, "advantages": case.adv * fm}
        # strategy.py: both loss_mask_keys counted (tokens; rows with a token; at least 1)
        n_tok = {"response_mask": n_tok, "final_response_mask": torch.clamp(fm.sum(), min=1)}
        n_rows = {
            "response_mask": n_rows,
            "final_response_mask": torch.clamp((fm.sum(-1) > 0).sum(), min=1),
        }
    else:
        n_tok, n_rows = {"response_mask": n_tok}, {"response_mask": n_rows}
    data = SimpleNamespace(
        batch={
            "response_mask": full_mask,
            "ref_log_probs": case.ref,
            "advantages": case.adv,
            "input_ids": None,
            "scores": case.scores,
            "train_infer_is_weight": torch.ones_like(m),
            **final,
        },
        meta_info={"batch_num_tokens": n_tok, "global_valid_samples": n_rows},
        non_tensor_batch={"difficulty": case.difficulty.numpy()},
    )
    return cls.loss_func(w, data, None)


class _RollBatch(dict):
    """The TensorDict surface ROLL's functionals use (``batch_size``, ``keys``)."""

    @property
    def batch_size(self):
        """(B,)"""
        return (next(iter(self.values())).shape[0],)


class _RollData(SimpleNamespace):
    """ROLL ``DataProto`` stand-in (``batch``, ``meta_info``, ``rename``)."""

    def rename(self, old_keys, new_keys):
        """Rename one batch key."""
        self.batch[new_keys] = self.batch.pop(old_keys)
        return self


def run_roll_estimator(opts: dict, prior: list[float] | None = None) -> dict:
    """ROLL's reward -> advantage chain as ``rlvr_pipeline.py`` runs it on one domain:
    ``reward_postprocess`` -> ``compute_token_reward`` -> ``compute_advantage`` (response mask as
    the final mask, prompts of one token, groups of 3 consecutive).

    A "running" norm type reads ``running_ctrl["domain"]`` (the literal key ``reward_norm``
    looks up; the pipeline's dict is keyed by domain name, so this is the domain named
    "domain"): a fresh ``RunningMoments``, first updated by ``reward_postprocess`` on the
    ``prior`` scores (one earlier step) when given, then by this batch."""
    import roll.utils.functionals as fn

    g = torch.Generator().manual_seed(13)
    m = OR_MASK
    B = m.shape[0]
    old = (-0.1 - 2.0 * torch.rand(m.shape, generator=g, dtype=F64)) * m
    ref = (old + 0.3 * torch.randn(m.shape, generator=g, dtype=F64)) * m
    values = torch.randn(m.shape, generator=g, dtype=F64) * 0.5 * m
    attention = torch.cat([torch.ones(B, 1, dtype=F64), m], 1)
    cfg = dict(adv_estimator="reinforce", gamma=1.0, lambd=0.95, norm_mean_type=None,
               norm_std_type=None, reward_clip=None, whiten_rewards=False,
               whiten_advantages=False, advantage_clip=None, add_token_level_kl=False,
               init_kl_coef=0.2, kl_penalty="kl", max_len_mask=False, difficulty_mask=False,
               difficulty_low_threshold=0.0, difficulty_high_threshold=1.0,
               error_max_len_clip=False, error_max_len_threshold=9999999999)  # fmt: skip
    cfg.update(opts)
    pc = SimpleNamespace(
        **cfg,
        actor_infer=SimpleNamespace(generating_args=SimpleNamespace(num_return_sequences=3)),
    )
    running_ctrl = {}
    if "running" in (cfg["norm_mean_type"], cfg["norm_std_type"]):
        running_ctrl = {"domain": fn.RunningMoments()}
        if prior is not None:
            before = _RollData(
                batch=_RollBatch(response_level_rewards=torch.tensor(prior, dtype=F64)),
                meta_info={},
            )
            fn.reward_postprocess(before, pc, running_ctrl=running_ctrl)
    data = _RollData(
        batch=_RollBatch(
            response_level_rewards=OR_SCORES.clone(),
            scores=OR_SCORES.clone(),
            attention_mask=attention,
            position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
            response_mask=attention.clone(),
            old_log_probs=old,
            ref_log_probs=ref,
            values=values,
            responses=torch.zeros(m.shape, dtype=torch.long),
        ),
        meta_info={},
    )
    data, mask_metrics = fn.get_sample_level_mask(data, pc)  # rlvr_pipeline step 1
    kl_ctrl = SimpleNamespace(value=cfg["init_kl_coef"], update=lambda **k: None)
    data, _ = fn.reward_postprocess(data, pc, running_ctrl=running_ctrl)
    data, _ = fn.compute_token_reward(data, pc, kl_ctrl)
    data = fn.compute_advantage(
        data,
        gamma=pc.gamma,
        lambd=pc.lambd,
        adv_estimator=pc.adv_estimator,
        advantage_clip=pc.advantage_clip,
        whiten_advantages=pc.whiten_advantages,
        whiten_rewards=pc.whiten_rewards,
        response_mask=data.batch["final_response_mask"].clone(),
    )
    extra = {} if prior is None else {"prior_scores": prior}
    if any(cfg[k] for k in ("max_len_mask", "difficulty_mask", "error_max_len_clip")):
        extra["metrics"] = {k: float(v) for k, v in mask_metrics.items()}
    return {
        "case": "estimator",
        "options": opts,
        **extra,
        "mask": m.tolist(),
        "scores": OR_SCORES.tolist(),
        "groups": OR_GROUPS,
        "logprobs": _r12(old),
        "ref_logprobs": _r12(ref),
        "values": _r12(values),
        "advantages": _r12(data.batch["advantages"]),
        "returns": _r12(data.batch["returns"]),
    }


def run_roll_correction(case, opts: dict) -> dict:
    """ROLL ``compute_train_infer_correction`` (``utils/train_infer_corrections.py``): the IS
    weight and the filter mask for sampler log-probs ``mu``."""
    import roll.utils.train_infer_corrections as tic

    w = opts.get("train_infer_correction.is_weight", {})
    is_weight = SimpleNamespace(enabled=w.get("enabled", False),
                                weight_type=w.get("weight_type", "token"),
                                upper_bound=w.get("upper_bound", 1.2), detach=True)  # fmt: skip
    filters = []
    for f in opts.get("train_infer_correction.filters", []):
        d = dict(enabled=True, agg_type="token", ratio_enabled=True, ratio_low=0.8,
                 ratio_high=1.2, diff_enabled=False, diff_low=-0.2, diff_high=0.2)  # fmt: skip
        d.update(f)
        filters.append(SimpleNamespace(**d))
    cfg = SimpleNamespace(is_weight=is_weight, filters=filters)
    m = case.mask
    weight, keep, _metrics = tic.compute_train_infer_correction(
        cfg=cfg, response_mask=m, old_log_probs=case.old, infer_log_probs=case.mu,
        global_valid_samples=max(float((m.sum(-1) > 0).sum()), 1.0),
        global_valid_tokens=max(float(m.sum()), 1.0),
    )  # fmt: skip
    return {
        "case": "rollout_correction",
        "options": opts,
        "weights": _r12(weight * m),
        "response_mask": (keep * m).tolist(),
    }
