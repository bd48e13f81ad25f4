"""The Episodes page's numbers: multi-turn episodes as a batch, and a mask's loss and gradient.

The episodes of one task form a group of G; each episode's transcript is one row of the batch
(right-padded to the longest). The loss is roll-viz's ``policy_loss`` of a framework at the first
update step (ratio 1: log pi_theta = log pi_old), so its gradient per token is ``grad_coef`` =
d loss / d log pi(token): zero wherever the mask is 0. A mistake swaps the mask (or the tokens the
trainer sees) and the same loss is taken again on the same advantages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.core.agentic.episode import Episode
from roll_viz.core.pipeline import policy_loss

F64 = torch.float64

#: |gradient| below this counts as none
GRAD_ZERO = 1e-12


@dataclass(frozen=True)
class EpisodeBatch:
    """Episodes as a right-padded batch.

    Attributes:
        episodes: the B episodes, in order.
        token_ids: (B, T) long, 0 on padding.
        valid: (B, T) 0/1: a real token of the transcript (not padding).
        trainable: (B, T) 0/1: the right loss mask (tokens the sampler generated).
        logprobs: (B, T) the sampler's log-probs where recorded, else 0.
    """

    episodes: tuple[Episode, ...]
    token_ids: Tensor
    valid: Tensor
    trainable: Tensor
    logprobs: Tensor


def episode_batch(episodes: Sequence[Episode]) -> EpisodeBatch:
    """The episodes as one padded batch with the right mask (sampled assistant tokens only).

    Raises:
        ValueError: no episode, or an episode with no token.
    """
    if not episodes:
        raise ValueError("episodes: none given")
    width = max(len(e.token_ids) for e in episodes)
    if width == 0:
        raise ValueError("episodes: every transcript is empty")
    b = len(episodes)
    ids = torch.zeros(b, width, dtype=torch.long)
    valid = torch.zeros(b, width, dtype=F64)
    trainable = torch.zeros(b, width, dtype=F64)
    logprobs = torch.zeros(b, width, dtype=F64)
    for row, episode in enumerate(episodes):
        at = 0
        for seg in episode.segments:
            n = len(seg.token_ids)
            ids[row, at : at + n] = torch.tensor(seg.token_ids, dtype=torch.long)
            valid[row, at : at + n] = 1.0
            if seg.sampled and seg.role == "assistant":
                trainable[row, at : at + n] = 1.0
            if seg.logprobs is not None:
                logprobs[row, at : at + n] = torch.tensor(seg.logprobs, dtype=F64)
            at += n
    return EpisodeBatch(tuple(episodes), ids, valid, trainable, logprobs)


@dataclass(frozen=True)
class MaskLoss:
    """One mask's loss at the first update step and its gradient per token.

    Attributes:
        loss: the framework's total loss.
        grad: (B, T) d loss / d log pi(token), 0 where the mask is 0.
        tokens: tokens in the mask.
        context_tokens: tokens in the mask that the sampler did not generate.
        grad_sampled: sum of |grad| over the sampled (right) tokens.
        grad_context: sum of |grad| over tokens the sampler did not generate.
    """

    loss: float
    grad: Tensor
    tokens: int
    context_tokens: int
    grad_sampled: float
    grad_context: float

    @property
    def context_share(self) -> float:
        """The share of the gradient's mass that lands on context (tool, prompt, history)."""
        total = self.grad_sampled + self.grad_context
        return self.grad_context / total if total > 0 else 0.0


def mask_loss(
    batch: EpisodeBatch,
    mask: Tensor,
    advantages: Tensor,
    framework: str = "verl",
    logprobs: Tensor | None = None,
) -> MaskLoss:
    """The loss of ``framework`` (its default config) over ``mask`` and d loss / d log pi.

    Args:
        batch: the episodes.
        mask: (B, T) 0/1 loss mask.
        advantages: (B, T) per-token advantages (read where the mask is 1).
        framework: whose loss aggregation (the default config of that dialect).
        logprobs: (B, T) the log-probs the trainer recomputes (default: the sampler's); the
            ratio is 1 at the first step either way, so they move only a KL or entropy term.

    Raises:
        ValueError: shapes differ from the batch's, or the dialect refuses the inputs.
    """
    if mask.shape != batch.valid.shape or advantages.shape != batch.valid.shape:
        raise ValueError(f"mask / advantages must be {tuple(batch.valid.shape)}")
    base = batch.logprobs if logprobs is None else logprobs
    lp = base.detach().clone().requires_grad_(True)
    mask = mask.to(F64) * batch.valid
    result = policy_loss(
        framework,
        {},
        logprobs=lp,
        old_logprobs=lp.detach(),
        advantages=advantages.to(F64) * mask,
        response_mask=mask,
    )
    (grad,) = torch.autograd.grad(result.total, lp)
    grad = grad.detach() * mask
    sampled = batch.trainable > 0
    return MaskLoss(
        loss=float(result.total.detach()),
        grad=grad,
        tokens=int(mask.sum()),
        context_tokens=int((mask * (1 - batch.trainable)).sum()),
        grad_sampled=float(grad.abs()[sampled].sum()),
        grad_context=float(grad.abs()[~sampled].sum()),
    )


def row_values(values: Tensor, batch: EpisodeBatch, row: int) -> list[float]:
    """Row ``row`` of a (B, T) tensor cut to that episode's length, as plain floats."""
    n = int(batch.valid[row].sum())
    return [float(v) for v in values[row, :n].tolist()]
