"""Token-level scoring kernels: log-probs, exact KL, entropy and top-K from final hidden states.

Pure tensor functions (no model, no tokenizer). ``score_positions`` is the memory-bounded driver:
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
  ``6 * block_rows * V * 4`` bytes (``default_block_rows`` targets 256 MB).
- Exact KL(policy || ref) = sum_v p(v) (log p(v) - log q(v)), clamped at 0 against rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

BLOCK_BYTES = 256 * 2**20


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
    """

    logprobs: Tensor
    ref_logprobs: Tensor
    kl: Tensor
    entropy: Tensor
    topk_ids: Tensor
    topk_logprobs: Tensor
    topk_ref_logprobs: Tensor


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
        logp = logprobs_from_logits(head(policy_hidden[start:stop]), temperature)  # (n, V)
        tgt = targets[start:stop, None]
        logq = (
            logp
            if ref_hidden is None
            else logprobs_from_logits(head(ref_hidden[start:stop]), temperature)
        )
        top_lp, top_ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
        probs = logp.exp()  # shared by the KL and the entropy (the same numbers, one pass)
        kl = (
            torch.zeros(stop - start, device=logp.device)
            if ref_hidden is None
            else exact_kl(logp, logq, probs)
        )
        parts.append(
            (
                logp.gather(-1, tgt).squeeze(-1),
                logq.gather(-1, tgt).squeeze(-1),
                kl,
                entropy_from_logprobs(logp, probs),
                top_ids,
                top_lp,
                logq.gather(-1, top_ids),
            )
        )
        del logp, logq, probs
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
        )
    cols = [torch.cat([p[i] for p in parts]).cpu() for i in range(7)]
    return TokenScores(*cols)
