"""Scoring sampled tokens: teacher-forced passes, then log-probs, exact KL, entropy and top-K.

Two parts. The teacher-forced passes (``response_hidden``, ``shared_context_hidden``) run the
model over context + response and return the final hidden states that predict each response
token; ``probe_features`` projects hidden states to the value probe's features. The kernels
below them are pure tensor functions (no model, no tokenizer). ``score_positions`` is the
memory-bounded driver:
it applies the LM head to a bounded block of positions at a time, so the full (N, V) matrix of
logits for all N = B*T positions never exists at once. Within a block, every quantity is exact
over the full vocabulary.

Simplifications and conventions:

- Log-probs are ``log_softmax(logits / temperature)`` over the FULL vocabulary, in float32. Top-p
  truncation used while sampling is NOT applied to the reported log-probs (as in verl and ROLL,
  which divide the logits by the sampling temperature and ignore top-p when they recompute
  log-probs). Both models use the same temperature.
- Memory is bounded by splitting the positions (rows) into blocks of ``block_rows``, not by
  splitting the vocabulary: a block of rows needs one matmul and one pass, whereas a vocabulary
  split needs two passes (a running log-sum-exp first). Peak extra memory is about
  ``6 * block_rows * V * 4`` bytes (``default_block_rows`` targets 256 MB); the per-vocabulary
  work runs ``SUB_ROWS`` rows at a time inside a block (cache-sized temporaries).
- Exact KL(policy || ref) = sum_v p(v) (log p(v) - log q(v)), clamped at 0 against rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.lm.decode import distinct, pad_left
from roll_viz.lm.models import ModelBundle

BLOCK_BYTES = 256 * 2**20
SUB_ROWS = 8  # rows per pass of the per-vocabulary work: (8, V) float32 stays in a core's cache
FEATURE_SEED = 1729  # the fixed random projection of hidden states to probe features


@dataclass(frozen=True)
class TokenScores:
    """Per-position scores of N scored positions (flattened valid response tokens).

    Attributes:
        logprobs: (N,) log p(y) under the policy.
        ref_logprobs: (N,) log q(y) under the reference.
        kl: (N,) exact KL(p || q) over the full vocabulary.
        entropy: (N,) entropy of p.
        topk_ids: (N, K) long, the policy's K most likely tokens, most likely first.
        topk_logprobs: (N, K) their log p.
        topk_ref_logprobs: (N, K) log q of the same tokens.
        sum_pi2: (N,) sum over the vocabulary of p^2 (verl's ``sum_pi_squared``, which its
            optimal token baseline reads).
    """

    logprobs: Tensor
    ref_logprobs: Tensor
    kl: Tensor
    entropy: Tensor
    topk_ids: Tensor
    topk_logprobs: Tensor
    topk_ref_logprobs: Tensor
    sum_pi2: Tensor


def logprobs_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-softmax of temperature-scaled logits, in float32.

    Args:
        logits: (N, V) raw logits, any float dtype.
        temperature: > 0; the logits are divided by it.

    Returns:
        (N, V) float32 log-probabilities.
    """
    return torch.log_softmax(logits.float() / temperature, dim=-1)


def exact_kl(logp: Tensor, logq: Tensor, probs: Tensor | None = None) -> Tensor:
    """KL(p || q) = sum_v p(v) (log p(v) - log q(v)) over the full vocabulary.

    Naive equivalent: ``sum(exp(lp) * (lp - lq) for lp, lq in zip(row_p, row_q))`` per row.

    Args:
        logp: (N, V) log-probs of p.
        logq: (N, V) log-probs of q.
        probs: optional ``logp.exp()`` already computed (the same numbers, one pass saved).

    Returns:
        (N,) KL per row, clamped at 0 (tiny negative values are float rounding).
    """
    probs = logp.exp() if probs is None else probs
    return (probs * (logp - logq)).sum(dim=-1).clamp_min(0.0)


def entropy_from_logprobs(logp: Tensor, probs: Tensor | None = None) -> Tensor:
    """Entropy -sum_v p(v) log p(v).

    Args:
        logp: (N, V) log-probs.
        probs: optional ``logp.exp()`` already computed.

    Returns:
        (N,) entropy in nats.
    """
    probs = logp.exp() if probs is None else probs
    return -(probs * logp).sum(dim=-1)


def default_block_rows(vocab_size: int) -> int:
    """Rows per block so that one block's float32 (rows, V) temporaries total about 256 MB."""
    return max(1, BLOCK_BYTES // (6 * 4 * max(vocab_size, 1)))


def score_positions(
    head: Callable[[Tensor], Tensor],
    policy_hidden: Tensor,
    ref_hidden: Tensor | None,
    targets: Tensor,
    temperature: float = 1.0,
    k: int = 5,
    block_rows: int | None = None,
) -> TokenScores:
    """Score N positions under policy and reference, a bounded block of rows at a time.

    The LM head runs on a block of ``block_rows`` rows (one matmul: a tall block keeps the
    matmul efficient); the per-vocabulary work (log-softmax, exp, KL, entropy, top-K, gathers)
    then runs ``SUB_ROWS`` rows at a time, so its (rows, V) temporaries stay in the core's cache
    instead of making seven passes through memory (the same numbers: every one of these
    operations works row by row; about 2x faster for SmolLM2's 49,152-token vocabulary).

    Args:
        head: maps (n, H) final hidden states to (n, V) logits (the model's LM head).
        policy_hidden: (N, H) policy hidden states that predict each target.
        ref_hidden: (N, H) reference hidden states for the same targets, or None when the
            reference IS the policy (then the same log-probs are reused: KL is exactly 0).
        targets: (N,) long, the sampled token at each position.
        temperature: logits are divided by it under both models.
        k: number of top alternatives.
        block_rows: rows per block; None picks ``default_block_rows(V)``.

    Returns:
        TokenScores with float32 tensors on the CPU.
    """
    n = targets.shape[0]
    parts: list[tuple[Tensor, ...]] = []
    start = 0
    while start < n:
        if block_rows is None:  # size blocks from the vocabulary, known after one head call
            block_rows = default_block_rows(head(policy_hidden[:1]).shape[-1])
        stop = min(n, start + block_rows)
        logits_p = head(policy_hidden[start:stop])
        logits_q = None if ref_hidden is None else head(ref_hidden[start:stop])
        for sub in range(0, stop - start, SUB_ROWS):
            rows = slice(sub, sub + SUB_ROWS)
            parts.append(
                _score_rows(
                    logits_p[rows],
                    None if logits_q is None else logits_q[rows],
                    targets[start:stop][rows],
                    temperature,
                    k,
                )
            )
        del logits_p, logits_q
        start = stop
    if not parts:
        empty = torch.zeros(0)
        return TokenScores(
            empty,
            empty,
            empty,
            empty,
            torch.zeros(0, k, dtype=torch.long),
            torch.zeros(0, k),
            torch.zeros(0, k),
            empty,
        )
    cols = [torch.cat([p[i] for p in parts]).cpu() for i in range(8)]
    return TokenScores(*cols)


def score_logits(
    logits_p: Tensor, logits_q: Tensor | None, targets: Tensor, temperature: float, k: int
) -> tuple[Tensor, ...]:
    """The eight ``TokenScores`` columns of logits already computed (e.g. by a decode step).

    ``score_positions`` without the head: (n, V) policy and reference logits of n positions
    and the (n,) tokens at them, worked ``SUB_ROWS`` rows at a time (the same numbers).

    Returns:
        (logprobs, ref_logprobs, kl, entropy, topk_ids, topk_logprobs, topk_ref_logprobs,
        sum_pi2).
    """
    parts = [
        _score_rows(
            logits_p[sub : sub + SUB_ROWS],
            None if logits_q is None else logits_q[sub : sub + SUB_ROWS],
            targets[sub : sub + SUB_ROWS],
            temperature,
            k,
        )
        for sub in range(0, targets.shape[0], SUB_ROWS)
    ]
    return tuple(torch.cat([p[i] for p in parts]) for i in range(8))


def _score_rows(
    logits_p: Tensor, logits_q: Tensor | None, targets: Tensor, temperature: float, k: int
) -> tuple[Tensor, ...]:
    """The eight ``TokenScores`` columns of a few rows (small enough to stay in cache)."""
    logp = logprobs_from_logits(logits_p, temperature)  # (n, V)
    logq = logp if logits_q is None else logprobs_from_logits(logits_q, temperature)
    tgt = targets[:, None]
    top_lp, top_ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
    probs = logp.exp()  # shared by the KL and the entropy (the same numbers, one pass)
    kl = (
        torch.zeros(logp.shape[0], device=logp.device)
        if logits_q is None
        else exact_kl(logp, logq, probs)
    )
    return (
        logp.gather(-1, tgt).squeeze(-1),
        logq.gather(-1, tgt).squeeze(-1),
        kl,
        entropy_from_logprobs(logp, probs),
        top_ids,
        top_lp,
        logq.gather(-1, top_ids),
        (probs * probs).sum(dim=-1),
    )


# ---------------------------------------------------------------------------------------------
# Teacher-forced passes and probe features


def response_hidden(
    bundle: ModelBundle, contexts: list[list[int]], token_ids: Tensor, mask: Tensor
) -> Tensor:
    """Teacher-forced final hidden states that predict each response token.

    The batch is [left-padded context | right-padded response]; position ids count real tokens.

    Args:
        bundle: the shared model (caller holds the lock, inside inference mode).
        contexts: (B,) prompt id lists.
        token_ids: (B, T) response ids.
        mask: (B, T) bool, real response tokens.

    Returns:
        (B, T, H) hidden states on ``bundle.device``; row b, column t predicts token_ids[b, t].
    """
    ctx_ids, ctx_mask = pad_left(contexts, bundle.pad_id)
    width = ctx_ids.shape[1]
    ids = torch.cat([ctx_ids, token_ids], dim=1).to(bundle.device)
    attn = torch.cat([ctx_mask, mask.long()], dim=1).to(bundle.device)
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    hidden = bundle.model.base_model(
        input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False
    ).last_hidden_state  # (B, L + T, H)
    return hidden[:, width - 1 : width - 1 + token_ids.shape[1]]


def shared_context_hidden(
    bundle: ModelBundle, contexts: list[list[int]], token_ids: Tensor, mask: Tensor
) -> Tensor:
    """``response_hidden`` with each distinct context run once and its KV cache shared.

    The G rows of one prompt share its context: the context pass runs on the P distinct
    contexts (left-padded), its cache is copied to the B rows, then one cached pass runs over the
    (B, T) right-padded responses. Same numbers as ``response_hidden`` up to float rounding
    (different batch shapes); inference only (no autograd through a cache).

    Args:
        bundle: the shared model (caller holds the lock, inside inference mode).
        contexts: (B,) prompt id lists.
        token_ids: (B, T) response ids.
        mask: (B, T) bool, real response tokens.

    Returns:
        (B, T, H) hidden states on ``bundle.device``; row b, column t predicts token_ids[b, t].
    """
    unique, index = distinct(contexts)
    if len(unique) == len(contexts) or token_ids.shape[1] < 2:
        return response_hidden(bundle, contexts, token_ids, mask)
    device = bundle.device
    ctx_ids, ctx_mask = pad_left(unique, bundle.pad_id)
    ctx_ids, ctx_mask = ctx_ids.to(device), ctx_mask.to(device)
    positions = (ctx_mask.cumsum(-1) - 1).clamp_min(0)
    out = bundle.model.base_model(
        input_ids=ctx_ids, attention_mask=ctx_mask, position_ids=positions, use_cache=True
    )
    rows = torch.tensor(index, device=device)
    cache = out.past_key_values
    cache.reorder_cache(rows)  # (P, ...) -> (B, ...)
    first = out.last_hidden_state[:, -1][rows]  # (B, H): predicts response token 0
    attn = torch.cat([ctx_mask[rows], mask.long().to(device)], dim=1)
    resp_pos = positions[rows][:, -1:] + 1 + torch.arange(token_ids.shape[1] - 1, device=device)
    hidden = bundle.model.base_model(
        input_ids=token_ids[:, :-1].to(device),
        attention_mask=attn[:, :-1],
        position_ids=resp_pos,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state  # (B, T - 1, H): column t predicts token t + 1
    return torch.cat([first[:, None], hidden], dim=1)


def probe_features(hidden: Tensor, dim: int) -> Tensor:
    """Project hidden states to ``dim`` features with a fixed seeded Gaussian matrix.

    Args:
        hidden: (B, T, H) hidden states.
        dim: F.

    Returns:
        (B, T, F) float32 CPU features, hidden @ W with W ~ N(0, 1/H), W fixed by FEATURE_SEED.
    """
    size = hidden.shape[-1]
    weight = torch.randn(
        size, dim, generator=torch.Generator().manual_seed(FEATURE_SEED)
    ) / math.sqrt(size)
    return hidden.float().cpu() @ weight
