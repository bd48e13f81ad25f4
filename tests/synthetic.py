"""Small synthetic records for tests that do not need a model: the one builder of the suite.

``synthetic_rollout`` builds a hand-sized, deterministic Rollout with every field filled (ragged
lengths, a padding column, top-K alternatives, probe features), ``synthetic_trace`` a Trace with
chosen tensors, ``seed_rollout`` the seed example (one prompt, rewards 8.2 / 6.5 / 9.1).
``consistent_rollout`` derives every field from two full categorical distributions per position
(policy p, reference q over a small vocabulary), so top-K log-probs, the log-probs of the sampled
token and the exact KL agree with each other exactly, as the real sampler's do; ``batch_of``
scores it.
"""

from __future__ import annotations

import torch

from roll_viz.core.records import Batch, Rollout, Trace, batch_from_rollout

SEED_SCORES = (8.2, 6.5, 9.1)


def synthetic_rollout(
    prompts: int = 2,
    group_size: int = 3,
    width: int = 5,
    seed: int = 0,
    tokens: tuple[str, ...] | None = None,
    topk: int = 3,
    features: int = 4,
) -> Rollout:
    """A deterministic Rollout of P * G rows with ragged lengths (row b has 2 + b % (T - 1) tokens).

    Args:
        prompts: P.
        group_size: G.
        width: T (at least 3); the longest row fills it, others are right-padded.
        seed: torch seed of the random log-probs.
        tokens: token strings to cycle through (default: a few words incl. whitespace).
        topk: K alternatives per position.
        features: F probe features per position.

    Returns:
        The Rollout.
    """
    gen = torch.Generator().manual_seed(seed)
    rows = prompts * group_size
    vocab_words = tokens or (" the", " cat", " sat", "\n", " on", " mat", ".", "!")
    lengths = [min(width, 2 + b % (width - 1)) for b in range(rows)]
    lengths[-1] = width
    mask = torch.zeros(rows, width, dtype=torch.float64)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1.0
    ids = torch.zeros(rows, width, dtype=torch.long)
    toks = []
    for b, n in enumerate(lengths):
        row_ids = [(b + t) % len(vocab_words) + 1 for t in range(n)]
        ids[b, :n] = torch.tensor(row_ids)
        toks.append(tuple(vocab_words[i - 1] for i in row_ids))
    logprobs = -torch.rand(rows, width, generator=gen, dtype=torch.float64) * 3 * mask
    ref = logprobs - 0.4 * torch.randn(rows, width, generator=gen, dtype=torch.float64) * mask
    exact = (0.1 + torch.rand(rows, width, generator=gen, dtype=torch.float64) * 0.2) * mask
    entropy = (1.0 + torch.rand(rows, width, generator=gen, dtype=torch.float64)) * mask
    topk_ids = (torch.arange(topk)[None, None, :] + ids[..., None]) % len(vocab_words) + 1
    topk_lp = torch.log_softmax(torch.randn(rows, width, topk, generator=gen), -1).double()
    topk_ref = torch.log_softmax(torch.randn(rows, width, topk, generator=gen), -1).double()
    feats = torch.randn(rows, width, features, generator=gen, dtype=torch.float64) * mask[..., None]
    responses = tuple("".join(t) for t in toks)
    return Rollout(
        prompts=tuple(f"Prompt number {p}?" for p in range(prompts)),
        group_ids=torch.arange(prompts).repeat_interleave(group_size),
        responses=responses,
        token_ids=ids,
        tokens=tuple(toks),
        response_mask=mask,
        logprobs=logprobs,
        ref_logprobs=ref,
        exact_kl=exact,
        entropy=entropy,
        topk_ids=topk_ids,
        topk_logprobs=topk_lp,
        topk_ref_logprobs=topk_ref,
        finish_reasons=tuple("length" if n == width else "eos" for n in lengths),
        greedy_responses=tuple("greedy answer" for _ in range(prompts)),
        features=feats,
        vocab={i + 1: w for i, w in enumerate(vocab_words)},
        meta=(("model", "synthetic"), ("seed", seed)),
    )


def seed_rollout(width: int = 3) -> Rollout:
    """One prompt, three samples of ``width`` tokens each (no padding): the 8.2 / 6.5 / 9.1 case."""
    return synthetic_rollout(prompts=1, group_size=3, width=width)


def synthetic_trace(
    rollout: Rollout,
    advantages: torch.Tensor | None = None,
    *,
    framework: str = "roll",
    config: dict | None = None,
    scores: torch.Tensor | None = None,
) -> Trace:
    """A Trace with chosen tensors (defaults: arange-based advantages, zero KL), masked.

    Args:
        rollout: the batch whose shapes the trace follows.
        advantages: (B, T) advantages (masked here), or None for a deterministic ramp.
        framework: dialect name to record.
        config: config pairs to record.
        scores: (B,) scores, or None for 0..B-1.

    Returns:
        The Trace.
    """
    mask = rollout.response_mask
    rows, width = mask.shape
    if advantages is None:
        advantages = (
            torch.arange(rows * width, dtype=torch.float64).reshape(rows, width) - rows * width / 2
        ) / 4
    adv = advantages * mask
    s = scores if scores is not None else torch.arange(rows, dtype=torch.float64)
    return Trace(
        framework=framework,
        config=tuple(sorted((config or {}).items())),
        scores=s,
        rewards=s,
        baseline=torch.zeros(rows, dtype=torch.float64),
        scale=torch.ones(rows, dtype=torch.float64),
        clip_frac=0.0,
        kl=torch.zeros_like(mask),
        beta=0.0,
        next_beta=0.0,
        kl_in_reward=False,
        kl_loss=None,
        token_rewards=adv,
        advantages=adv,
        returns=adv,
    )


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
