"""Consistent synthetic rollouts for app engineer B's tests (no model needed).

Unlike a random stand-in, every field is derived from two full categorical distributions per
position (policy p, reference q over a small vocabulary), so top-K log-probs, log-probs of the
sampled token and the exact KL agree with each other exactly, as the real sampler's do.
"""

from __future__ import annotations

import torch

from roll_viz.core.records import Batch, Rollout, batch_from_rollout


def consistent_rollout(
    prompts: int = 2,
    group_size: int = 4,
    width: int = 6,
    vocab: int = 12,
    topk: int = 4,
    identical: bool = False,
    seed: int = 0,
) -> Rollout:
    """A Rollout whose log-probs, top-K and exact KL come from real full distributions.

    Row b has ``2 + (b * 3) % (width - 1)`` tokens, the last row fills the width.
    """
    gen = torch.Generator().manual_seed(seed)
    rows = prompts * group_size
    lengths = [min(width, 2 + (b * 3) % (width - 1)) for b in range(rows)]
    lengths[-1] = width
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).double()
    logits_p = torch.randn(rows, width, vocab, generator=gen, dtype=torch.float64) * 2
    logits_q = (
        logits_p
        if identical
        else logits_p + torch.randn(rows, width, vocab, generator=gen, dtype=torch.float64)
    )
    logp_full = torch.log_softmax(logits_p, -1)
    logq_full = torch.log_softmax(logits_q, -1)
    ids = torch.multinomial(logp_full.exp().reshape(-1, vocab), 1, generator=gen).reshape(
        rows, width
    )
    ids = ids * mask.long()
    lp = logp_full.gather(-1, ids[..., None])[..., 0] * mask
    rp = logq_full.gather(-1, ids[..., None])[..., 0] * mask
    exact = (logp_full.exp() * (logp_full - logq_full)).sum(-1) * mask
    entropy = -(logp_full.exp() * logp_full).sum(-1) * mask
    top_lp, top_ids = logp_full.topk(topk, -1)
    top_ref = logq_full.gather(-1, top_ids)
    top_lp, top_ref = top_lp * mask[..., None], top_ref * mask[..., None]
    top_ids = top_ids * mask.long()[..., None]
    tokens = tuple(tuple(f"t{int(i)}" for i in ids[b, : lengths[b]]) for b in range(rows))
    meta = (("policy_mode", "identical" if identical else "steered"), ("seed", seed))
    return Rollout(
        prompts=tuple(f"prompt {p}" for p in range(prompts)),
        group_ids=torch.arange(prompts).repeat_interleave(group_size),
        responses=tuple(" ".join(t) for t in tokens),
        token_ids=ids,
        tokens=tokens,
        response_mask=mask,
        logprobs=lp,
        ref_logprobs=rp,
        exact_kl=exact,
        entropy=entropy,
        topk_ids=top_ids,
        topk_logprobs=top_lp,
        topk_ref_logprobs=top_ref,
        finish_reasons=tuple("length" if n == width else "eos" for n in lengths),
        greedy_responses=tuple("greedy" for _ in range(prompts)),
        features=None,
        vocab={i: f"t{i}" for i in range(vocab)},
        meta=meta,
    )


def batch_of(rollout: Rollout, seed: int = 1) -> Batch:
    """A Batch for the rollout with seeded random scores and a zero critic."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(len(rollout.responses), generator=gen, dtype=torch.float64)
    return batch_from_rollout(rollout, scores, values=torch.zeros_like(rollout.response_mask))
