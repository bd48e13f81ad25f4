"""Training tokens drawn by a behaviour policy mu that is not the trainer, and mu's log-probs.

``draw(policy, cfg, sampler)`` returns the step's Rollout and (B, T) log mu of its tokens, for
the samplers of ``lm.loss_options.SAMPLERS``:

- ``fp32``: ``sampling.sample`` with the LoRA policy as the source (the trainer's own float path);
  mu is the Rollout's own log-probs, so d = log pi_old - log mu is 0 exactly;
- ``bf16`` / ``int8``: the current adapter is merged into a private copy of the model
  (``W + s B A`` per adapted projection, ``merged_bundle``), and that copy decodes with the lean
  step's bfloat16 / int8 weights (``DecodeOptions(weights=...)``): the tokens really come from
  the low-precision sampler. mu is that same lean step replayed teacher-forced over the drawn
  tokens (``behaviour.replay_lean``): the log-probs each token was drawn with. Everything else
  of the Rollout (pi_old, the reference, the exact KL, entropy, top-K, probe features) is the
  trainer's float32 scoring of those tokens with the adapter on / off, as ``sample`` scores;
- ``top_p``: the trainer's float path draws from the nucleus of mass ``SAMPLER_TOP_P`` (the
  run's own top_p when smaller); mu is the processed log-probs,
  log p - log S with S the kept mass (``behaviour.support_logmass``), so d = log S <= 0.

The merged copy costs one model's worth of memory (about 0.5 GB for SmolLM2) while the draw runs
and is dropped after it. Takes ``bundle.lock`` per phase (the draw, the scoring).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from roll_viz.core.records import Rollout
from roll_viz.lm.behaviour import behaviour_logprobs, replay_lean
from roll_viz.lm.decode import DecodeOptions
from roll_viz.lm.lora import LoraPolicy, adapter_layers
from roll_viz.lm.loss_options import SAMPLER_TOP_P, SAMPLERS
from roll_viz.lm.models import ModelBundle, ModelUsage
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample
from roll_viz.lm.scoring import probe_features, score_positions, shared_context_hidden


@dataclass(frozen=True)
class Draw:
    """One step's samples and the sampler's log-probs of them.

    Attributes:
        rollout: the step's Rollout (pi_old, reference, KL ... from the trainer's float path).
        mu: (B, T) float32 log mu of each token under the sampler that drew it, 0 on padding.
        sampler: which sampler drew them.
    """

    rollout: Rollout
    mu: Tensor
    sampler: str


def merged_bundle(policy: LoraPolicy) -> ModelBundle:
    """A private copy of the model with this policy's adapter merged in (plain Linear layers).

    Caller holds ``policy.bundle.lock``. The copy has its own lock and decode-step cache; the
    shared model is not changed.
    """
    bundle = policy.bundle
    name = policy.name
    with torch.no_grad():
        model = copy.deepcopy(bundle.model)
        for module_name, layer in adapter_layers(bundle):
            base = layer.get_base_layer()
            delta = layer.scaling[name] * (
                layer.lora_B[name].weight.float() @ layer.lora_A[name].weight.float()
            )
            plain = copy.deepcopy(base)
            plain.weight = torch.nn.Parameter(
                (base.weight.float() + delta).to(base.weight.dtype), requires_grad=False
            )
            parent_name, _, child = module_name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, plain)
    model.eval()
    return replace(
        bundle, model=model, lock=threading.Lock(), compiled_steps={}, usage=ModelUsage()
    )


def _rescore(policy: LoraPolicy, cfg: SamplingConfig, drawn: Rollout, weights: str) -> Rollout:
    """The drawn tokens scored as ``sample`` scores a LoRA policy's batch (adapter on / off)."""
    bundle = policy.bundle
    mask = drawn.response_mask > 0
    ids = drawn.token_ids
    rows = [policy.context_ids(bundle, drawn.prompts[int(g)]) for g in drawn.group_ids]
    temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    with bundle.lock, torch.inference_mode():
        with policy.activate(bundle):
            policy_hidden = shared_context_hidden(bundle, rows, ids, mask)
        ref_hidden = shared_context_hidden(bundle, rows, ids, mask)
        valid = mask.to(bundle.device)
        scores = score_positions(
            bundle.model.get_output_embeddings(),
            policy_hidden[valid],
            ref_hidden[valid],
            ids.to(bundle.device)[valid],
            temperature=temperature,
            k=cfg.topk,
        )
        features = probe_features(ref_hidden, cfg.feature_dim).cpu() * mask[..., None]
        top_ids = sorted(set(scores.topk_ids.flatten().tolist()) - set(drawn.vocab))
        vocab = {**drawn.vocab, **{i: bundle.tokenizer.decode([i]) for i in top_ids}}

    def spread(values: Tensor) -> Tensor:  # (N, ...) valid positions -> (B, T, ...) zero padded
        out = torch.zeros((*mask.shape, *values.shape[1:]), dtype=values.dtype)
        out[mask] = values.clone()
        return out

    meta = replace(
        drawn.meta,
        decode_note=(
            f"responses drawn by a {weights} copy of the model with the LoRA adapter merged in "
            f"(the behaviour policy mu); scores from the {bundle.dtype_name} model with the "
            "adapter"
        ),
        kl_note="exact KL(policy || ref) over the full vocabulary; ref = adapter off",
        policy_mode="lora",
    )
    return replace(
        drawn,
        logprobs=spread(scores.logprobs),
        ref_logprobs=spread(scores.ref_logprobs),
        exact_kl=spread(scores.kl),
        entropy=spread(scores.entropy),
        topk_ids=spread(scores.topk_ids),
        topk_logprobs=spread(scores.topk_logprobs),
        topk_ref_logprobs=spread(scores.topk_ref_logprobs),
        sum_pi_squared=spread(scores.sum_pi2),
        features=features.clone(),
        vocab=vocab,
        meta=meta,
    )


def _lean_draw(policy: LoraPolicy, cfg: SamplingConfig, weights: str) -> Draw:
    """bf16 / int8: decode from the merged copy's lean step, mu from the same step replayed."""
    bundle = policy.bundle
    if bundle.device.type != "cpu" or bundle.dtype != torch.float32:
        raise ValueError(
            f"{weights} sampler: the lean {weights} decode runs on the float32 CPU model"
        )
    with bundle.lock, policy.activate(bundle):
        merged = merged_bundle(policy)
    drawn = sample(merged, cfg, decode=DecodeOptions(weights=weights))
    if drawn.meta.decode_weights == merged.dtype_name:
        raise ValueError(f"{weights} sampler: the lean step does not support this model")
    mask = drawn.response_mask > 0
    rows = [merged.chat_ids(drawn.prompts[int(g)]) for g in drawn.group_ids]
    temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    with merged.lock, torch.inference_mode():
        replayed = replay_lean(merged, weights, rows, drawn.token_ids, mask, temperature)
    del merged
    if replayed is None:
        raise ValueError(f"{weights} sampler: the lean step does not support this model")
    mu = torch.where(mask, replayed[0].float().cpu(), 0.0)
    return Draw(_rescore(policy, cfg, drawn, weights), mu.clone(), weights)


def _processed_draw(policy: LoraPolicy, cfg: SamplingConfig) -> Draw:
    """top_p: the trainer draws from the nucleus; mu = log p - log S (processed log-probs)."""
    bundle = policy.bundle
    top_p = min(cfg.top_p, SAMPLER_TOP_P)
    rollout = sample(bundle, replace(cfg, top_p=top_p), source=policy)
    mask = rollout.response_mask > 0
    rows = [policy.context_ids(bundle, rollout.prompts[int(g)]) for g in rollout.group_ids]
    temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    with bundle.lock, policy.activate(bundle), torch.inference_mode():
        beh = behaviour_logprobs(
            bundle,
            rows,
            rollout.token_ids,
            mask,
            source="top_p",
            temperature=temperature,
            top_p=top_p,
        )
    # log S of each token (0 outside the support: mu = pi_old there), applied to the batch's own
    # pi_old, so d = log S exactly
    log_s = torch.where(beh.mask, beh.old - beh.mu, 0.0).float()
    mu = torch.where(mask, rollout.logprobs.float() - log_s, 0.0)
    return Draw(rollout, mu.clone(), "top_p")


def draw(policy: LoraPolicy, cfg: SamplingConfig, sampler: str = "fp32") -> Draw:
    """One step's samples drawn by ``sampler`` from the current policy, and their log mu.

    Args:
        policy: the trained LoRA policy (its bundle is the shared model).
        cfg: what to sample.
        sampler: one of ``lm.loss_options.SAMPLERS``.

    Returns:
        Draw (see the module docstring).

    Raises:
        ValueError: an unknown sampler, or a low-precision sampler off the float32 CPU model.
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    if sampler in ("bf16", "int8"):
        return _lean_draw(policy, cfg, sampler)
    if sampler == "top_p":
        return _processed_draw(policy, cfg)
    rollout = sample(policy.bundle, cfg, source=policy)
    return Draw(rollout, rollout.logprobs.float().clone(), "fp32")
