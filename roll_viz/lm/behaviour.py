"""The behaviour policy mu: the sampler's own log-probs of the sampled tokens, no server needed.

In a 2026 RL stack the tokens are drawn by one numeric path (vLLM, bf16 kernels, a quantized
copy, a top-p sampler that reports processed log-probs) and recomputed by the trainer in another
(pi_old). These are the sources of a real mismatch that need no server, each scored
teacher-forced on the same tokens as the trainer's float32 recompute:

- ``fp32``: the trainer's own path again (the control: d = 0 exactly);
- ``bf16`` / ``fp16``: a bfloat16 / float16 copy of the model (weights and activations), logits
  cast to float32 before the log-softmax, as a bf16 inference engine reports them;
- ``int8``: the weights ``FAST_DECODE`` draws with (CPU only), replayed teacher-forced through
  the same steps as the decode loop: the float prefill, then the lean step's int8 copy
  (``LeanDecoder(model, "int8")``, per-output-channel int8) one token at a time with the KV
  buffers; for a model the lean step does not support, the decode loop's per-tensor
  ``quantize_dynamic`` copy (``decode.int8_model``) scored teacher-forced;
- ``top_p`` / ``top_k``: the float32 logits, renormalised over the truncated support, which is
  what a sampler's "processed" log-probs are (vLLM ``logprobs_mode="processed_logprobs"``,
  TRL#6789): log mu = log p - log S with S the kept mass, so d = log S <= 0 on every token. A
  token outside the support could not have been drawn by that sampler: it is left out (counted
  in ``Behaviour.outside``).

A vLLM engine, when one is configured, plugs in as one more source: its returned
``logprobs`` of the sampled tokens are mu, and the recompute here is pi_old.

Memory: the LM head runs on a bounded block of positions at a time (``scoring.default_block_rows``);
the bf16 / fp16 / int8 copies are built once per bundle under its lock and kept in
``bundle.compiled_steps``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz.lm.decode import int8_model, lean_decoder, pad_left
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.scoring import default_block_rows

SOURCES = ("bf16", "fp16", "int8", "top_p", "top_k", "fp32")
SOURCE_LABELS = {
    "bf16": "bf16 copy of the model",
    "fp16": "fp16 copy of the model",
    "int8": "int8 decode copy (CPU)",
    "top_p": "top-p sampler, processed log-probs",
    "top_k": "top-k sampler, processed log-probs",
    "fp32": "fp32 again (control: no mismatch)",
    "engine": "the rollout engine's own log-probs of its samples (raw, temperature 1)",
}
#: the engine's mu comes with its batch (``engine_behaviour``), not from a copy of the model
ENGINE_SOURCE = "engine"
_COPY_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Behaviour:
    """The trainer's recompute and the sampler's log-probs of the same tokens.

    Attributes:
        source: one of ``SOURCES``.
        old: (B, T) float64 log pi_old (float32 model, full vocabulary), 0 off ``mask``.
        mu: (B, T) float64 log mu of the same tokens, 0 off ``mask``.
        mask: (B, T) bool, the tokens both give (for top-p / top-k: inside the support).
        outside: valid tokens the truncated sampler could not have drawn (left out of ``mask``).
    """

    source: str
    old: Tensor
    mu: Tensor
    mask: Tensor
    outside: int


def _hidden(
    model: Any, pad_id: int, contexts: list[list[int]], ids: Tensor, mask: Tensor
) -> Tensor:
    """(B, T, H) teacher-forced final hidden states; column t predicts ``ids[:, t]``."""
    device = next(model.parameters(), torch.empty(0)).device
    ctx_ids, ctx_mask = pad_left(contexts, pad_id)
    width = ctx_ids.shape[1]
    full = torch.cat([ctx_ids, ids], dim=1).to(device)
    attn = torch.cat([ctx_mask, mask.long()], dim=1).to(device)
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    out = model.base_model(
        input_ids=full, attention_mask=attn, position_ids=positions, use_cache=False
    ).last_hidden_state
    return out[:, width - 1 : width - 1 + ids.shape[1]]


def support_logmass(logp: Tensor, top_p: float | None, top_k: int | None) -> tuple[Tensor, Tensor]:
    """The log-mass log S of a truncated sampler's support per row, and the least kept log-prob.

    Top-p keeps the most likely tokens until their mass reaches ``top_p`` (the decode loop's
    rule: a token stays when the mass before it is below top_p; the top token always stays).
    Top-k keeps the k most likely.

    Args:
        logp: (N, V) float32 log-probs over the full vocabulary.
        top_p: nucleus mass in (0, 1], or None.
        top_k: number of tokens kept (>= 1), or None.

    Returns:
        ((N,) log S, (N,) smallest kept log-prob: a token with a lower log-prob is outside).
    """
    if top_k is not None:
        top = logp.topk(min(int(top_k), logp.shape[-1]), dim=-1).values
        return torch.logsumexp(top, dim=-1), top[:, -1]
    probs = logp.exp()
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = (sorted_probs.cumsum(dim=-1) - sorted_probs) < float(top_p)
    kept_lp = torch.where(keep, logp.gather(-1, order), -math.inf)
    count = keep.sum(-1)
    least = kept_lp.gather(-1, (count - 1).clamp_min(0)[:, None]).squeeze(-1)
    return torch.logsumexp(kept_lp, dim=-1), least


def _token_logprobs(
    head: Any,
    hidden: Tensor,
    targets: Tensor,
    temperature: float,
    top_p: float | None = None,
    top_k: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per position: log p(target) (float32 log-softmax), log S and "inside" for a sampler."""
    n = targets.shape[0]
    out_lp, out_s, out_in = [], [], []
    block = None
    start = 0
    while start < n:
        if block is None:
            block = default_block_rows(head(hidden[:1]).shape[-1])
        stop = min(n, start + block)
        logits = head(hidden[start:stop]).float() / temperature
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(-1, targets[start:stop, None]).squeeze(-1)
        out_lp.append(lp)
        if top_p is not None or top_k is not None:
            log_s, least = support_logmass(logp, top_p, top_k)
            out_s.append(log_s)
            out_in.append(lp >= least)
        start = stop
    empty = torch.zeros(0)
    lp_all = torch.cat(out_lp) if out_lp else empty
    s_all = torch.cat(out_s) if out_s else torch.zeros_like(lp_all)
    in_all = torch.cat(out_in) if out_in else torch.ones_like(lp_all, dtype=torch.bool)
    return lp_all, s_all, in_all


def _replay_int8(
    bundle: ModelBundle, contexts: list[list[int]], ids: Tensor, mask: Tensor, temperature: float
) -> tuple[Tensor, Tensor] | None:
    """The int8 decode loop's log mu of every forced token (``replay_lean`` with int8)."""
    return replay_lean(bundle, "int8", contexts, ids, mask, temperature)


def replay_lean(
    bundle: ModelBundle,
    weights: str,
    contexts: list[list[int]],
    ids: Tensor,
    mask: Tensor,
    temperature: float,
) -> tuple[Tensor, Tensor] | None:
    """A lean decode step's log mu of every forced token, and whether it was that step's argmax.

    None when the lean step does not support the model. Caller holds ``bundle.lock`` inside
    ``torch.inference_mode()``.

    The decode loop's own steps with the sampled token forced at each one: float prefill of the
    left-padded contexts, its cache moved into the lean step's buffers, then one step per token
    with the ``weights`` ("int8", "bf16") copy (finished rows feed the pad token, as in
    ``decode_batch``). These are the log-probs the decode drew each token with.

    Returns:
        ((B, T) log-probs, (B, T) bool argmax) on the bundle's device, or None.
    """
    lean = lean_decoder(bundle, weights)
    if lean is None:
        return None
    device, pad = bundle.device, bundle.pad_id
    rows, width_t = ids.shape
    ctx_ids, attn = pad_left(contexts, pad)
    ctx_ids, attn = ctx_ids.to(device), attn.to(device)
    width = ctx_ids.shape[1]
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    out = bundle.model(
        input_ids=ctx_ids,
        attention_mask=attn,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    logits, cache = out.logits[:, -1, :], out.past_key_values
    buffers = lean.allocate(rows, width + width_t, cache.layers[0].keys.dtype, device)
    lean.load_cache(buffers, cache, width)
    next_pos = positions[:, -1:] + 1
    fed = torch.where(mask.to(device), ids.to(device), pad)
    columns, tops = [], []
    for t in range(width_t):
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        columns.append(logp.gather(-1, fed[:, t : t + 1]).squeeze(-1))
        tops.append(logits.argmax(dim=-1) == fed[:, t])
        if t == width_t - 1:
            break
        attn = torch.cat([attn, torch.ones(rows, 1, dtype=attn.dtype, device=device)], 1)
        _, logits = lean.step(buffers, fed[:, t], next_pos, width + t, attn)
        next_pos = next_pos + 1
    return torch.stack(columns, dim=1), torch.stack(tops, dim=1)  # (B, T) each


def _copy(bundle: ModelBundle, source: str) -> Any:
    """The scoring model of a source: the bundle's own when it has that dtype, else a cached copy.

    "fp32" is the trainer's recompute: on a server that loads the model in bf16 (the GPU
    default) it is a float32 copy, so pi_old is always float32.
    """
    if source == "int8":
        if bundle.device.type != "cpu":
            raise ValueError("int8: the dynamically quantized copy runs on the CPU only")
        return int8_model(bundle)
    if source in _COPY_DTYPES:
        if bundle.dtype == _COPY_DTYPES[source]:
            return bundle.model
        key = f"score_{source}"
        if key not in bundle.compiled_steps:
            clone = copy.deepcopy(bundle.model).to(_COPY_DTYPES[source])
            bundle.compiled_steps[key] = clone.eval()
        return bundle.compiled_steps[key]
    return bundle.model


def behaviour_logprobs(
    bundle: ModelBundle,
    contexts: list[list[int]],
    token_ids: Tensor,
    mask: Tensor,
    *,
    source: str,
    temperature: float = 1.0,
    top_p: float = 0.9,
    top_k: int = 50,
) -> Behaviour:
    """pi_old (float32 recompute) and mu (the source's log-probs) of the same sampled tokens.

    Caller holds ``bundle.lock`` (inside ``torch.inference_mode()``); the bundle's model computes
    the policy for these contexts (a prompt-only policy: the identical or steered one). pi_old is
    float32 whatever the bundle's dtype (a cached float32 copy when the server loads bf16).

    Args:
        bundle: the shared model.
        contexts: (B,) the policy's prompt ids of each row.
        token_ids: (B, T) sampled ids, right-padded.
        mask: (B, T) real response tokens (0/1 or bool).
        source: one of ``SOURCES``.
        temperature: the sampling temperature (logits divided by it under both paths).
        top_p: the nucleus mass for ``top_p`` (0 < top_p <= 1).
        top_k: the number of tokens for ``top_k`` (>= 1).

    Returns:
        Behaviour with float64 (B, T) tensors on the CPU.

    Raises:
        ValueError: unknown source, a bad top_p / top_k / temperature, or int8 off the CPU or
            without the float32 model.
    """
    if source not in SOURCES:
        raise ValueError(f"source: one of {', '.join(SOURCES)}")
    if not (0.0 < top_p <= 1.0) or int(top_k) < 1 or not temperature > 0:
        raise ValueError("top_p in (0, 1], top_k >= 1 and temperature > 0")
    if source == "int8" and (bundle.dtype != torch.float32 or bundle.device.type != "cpu"):
        raise ValueError(
            "int8: the fast decode's int8 copy is built from the float32 model on the CPU"
        )
    valid = torch.as_tensor(mask).bool()
    ids = torch.as_tensor(token_ids).long()
    device = bundle.device
    targets = ids.to(device)[valid.to(device)]
    model = _copy(bundle, "fp32")
    h_old = _hidden(model, bundle.pad_id, contexts, ids, valid)[valid.to(device)]
    sampler = source in ("top_p", "top_k")
    old_lp, log_s, inside = _token_logprobs(
        model.get_output_embeddings(),
        h_old,
        targets,
        temperature,
        top_p=top_p if source == "top_p" else None,
        top_k=int(top_k) if source == "top_k" else None,
    )
    replayed = None
    if source == "int8":
        if device.type != "cpu":
            raise ValueError("int8: the quantized decode copy runs on the CPU only")
        replayed = _replay_int8(bundle, contexts, ids, valid, temperature)
    if sampler:
        mu_lp = old_lp - log_s
    elif replayed is not None:
        mu_lp = replayed[0][valid.to(device)]
    else:
        scorer = _copy(bundle, source)
        h_mu = _hidden(scorer, bundle.pad_id, contexts, ids, valid)[valid.to(device)]
        mu_lp, _, _ = _token_logprobs(scorer.get_output_embeddings(), h_mu, targets, temperature)
    old = torch.zeros(valid.shape, dtype=torch.float64)
    mu = torch.zeros(valid.shape, dtype=torch.float64)
    old[valid] = old_lp.double().cpu()
    mu[valid] = mu_lp.double().cpu()
    kept = valid.clone()
    kept[valid] = inside.cpu()
    old = torch.where(kept, old, 0.0)
    mu = torch.where(kept, mu, 0.0)
    return Behaviour(source, old, mu, kept, int(valid.sum() - kept.sum()))


def engine_behaviour(
    bundle: ModelBundle,
    contexts: list[list[int]],
    token_ids: Tensor,
    mask: Tensor,
    engine_logprobs: Tensor,
) -> Behaviour:
    """pi_old (float32 recompute, temperature 1) against the rollout engine's own log-probs mu.

    A rollout engine (vLLM) returns the raw log-probs (temperature 1) of the tokens it sampled:
    that is mu, as verl and TRL receive it from their rollout workers. The trainer recomputes
    the same tokens on its own float32 model. Caller holds ``bundle.lock`` inside
    ``torch.inference_mode()``.

    Args:
        bundle: the shared model (the policy of the batch is prompt-only: identical or steered).
        contexts: (B,) the policy's prompt ids of each row.
        token_ids: (B, T) sampled ids, right-padded.
        mask: (B, T) real response tokens (0/1 or bool).
        engine_logprobs: (B, T) the engine's log-probs of those tokens (0 off ``mask``).

    Returns:
        Behaviour (source "engine") with float64 (B, T) tensors on the CPU.
    """
    valid = torch.as_tensor(mask).bool()
    ids = torch.as_tensor(token_ids).long()
    device = bundle.device
    model = _copy(bundle, "fp32")
    h_old = _hidden(model, bundle.pad_id, contexts, ids, valid)[valid.to(device)]
    old_lp, _, _ = _token_logprobs(
        model.get_output_embeddings(), h_old, ids.to(device)[valid.to(device)], 1.0
    )
    old = torch.zeros(valid.shape, dtype=torch.float64)
    old[valid] = old_lp.double().cpu()
    mu = torch.where(valid, torch.as_tensor(engine_logprobs).double().cpu(), 0.0)
    return Behaviour(ENGINE_SOURCE, old, mu, valid, 0)
