"""The update step's passes through the adapted model: teacher-forced log-probs and a backward.

``teacher_forced`` scores a batch's response tokens under the active model (the head at the
response positions only, one log-sum-exp per position; each prompt's context once when
``share``), ``score_rows`` does it without grad in micro-batches, and ``minibatch_backward``
back-propagates one minibatch's loss, in row chunks when it has more than ``micro_tokens`` tokens
(exact for a row-separable loss: ``lm.update``'s docstring says why). ``PhaseTimer`` times the
phases and lets the forward passes take every core while the machine is idle.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.records import Rollout
from roll_viz.lm import threads
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.scoring import response_hidden, shared_context_hidden


def logprob_temperature(rollout: Rollout) -> float:
    """The temperature the rollout's log-probs were taken at (1.0 when it records none)."""
    value = rollout.meta.logprob_temperature
    return float(value) if value else 1.0


def row_contexts(bundle: ModelBundle, rollout: Rollout) -> list[list[int]]:
    """(B,) plain chat-templated prompt ids per row (caller holds the lock)."""
    per_prompt = [bundle.chat_ids(p) for p in rollout.prompts]
    return [per_prompt[g] for g in rollout.group_ids.tolist()]


def teacher_forced(
    bundle: ModelBundle,
    contexts: list[list[int]],
    token_ids: Tensor,
    mask: Tensor,
    temperature: float,
    want_entropy: bool,
    share: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Teacher-forced log-probs (and entropy) of ``token_ids`` under the active model.

    Selective: the head runs at the response positions only, and each position's log-prob is
    its target's logit minus the log-sum-exp (no (n, V) log-softmax kept); the full-vocabulary
    softmax is formed only when the entropy is wanted.

    Args:
        bundle: the model (caller holds the lock; grad mode as the caller set it).
        contexts: (n,) prompt ids.
        token_ids: (n, T) long response ids (ordinary tensors, not inference tensors).
        mask: (n, T) bool real tokens.
        temperature: logits are divided by it.
        want_entropy: also return the full-vocabulary entropy per token.
        share: each distinct context once, its cache shared (``shared_context_hidden``).

    Returns:
        (n, T) float32 log-probs (0 on padding) and (n, T) entropy or None, on bundle.device.
    """
    hidden_of = shared_context_hidden if share else response_hidden
    hidden = hidden_of(bundle, contexts, token_ids, mask)  # (n, T, H)
    valid = mask.to(hidden.device)
    logits = bundle.model.get_output_embeddings()(hidden[valid]).float()  # (N, V)
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    targets = token_ids.to(hidden.device)[valid]
    picked = logits.gather(-1, targets[:, None]).squeeze(-1) - lse  # (N,)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)
    out = out.masked_scatter(valid, picked)
    if not want_entropy:
        return out, None
    probs = torch.softmax(logits, dim=-1)
    ent = lse - (probs * logits).sum(-1)
    ent_full = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)
    return out, ent_full.masked_scatter(valid, ent)


def row_chunks(rows: Tensor, width: int, micro_tokens: int) -> list[Tensor]:
    """``rows`` split so each chunk holds at most ``micro_tokens`` tokens (one row at least)."""
    per = max(1, micro_tokens // max(width, 1))
    return list(torch.split(rows, per))


def score_rows(
    policy: LoraPolicy,
    rollout: Rollout,
    contexts: list[list[int]],
    rows: Tensor,
    micro_tokens: int,
    want_entropy: bool = False,
    share: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """No-grad log-probs (and entropy) of ``rows``, in micro-batches (lock held, adapter on)."""
    ids, mask = rollout.token_ids.clone(), rollout.response_mask > 0
    lps, ents = [], []
    with torch.no_grad():
        for chunk in row_chunks(rows, ids.shape[1], micro_tokens):
            lp, ent = teacher_forced(
                policy.bundle,
                [contexts[i] for i in chunk.tolist()],
                ids[chunk],
                mask[chunk],
                logprob_temperature(rollout),
                want_entropy,
                share,
            )
            lps.append(lp.cpu())
            if ent is not None:
                ents.append(ent.cpu())
    return torch.cat(lps), (torch.cat(ents) if want_entropy else None)


@dataclass
class PhaseTimer:
    """Wall seconds per phase; the forward phases may take every core (``adapt_threads``)."""

    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("forward", "backward", "optimizer", "rescore"), 0.0)
    )
    adapt_threads: bool = False
    base_threads: int = 1

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block under ``name``; a forward phase may take every core meanwhile."""
        adapt = self.adapt_threads and name in ("forward", "rescore")
        if adapt:
            threads.apply(threads.choose(self.base_threads))
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            if adapt:
                threads.apply(self.base_threads)


@dataclass(frozen=True)
class Minibatch:
    """What one minibatch's forward and backward read (the lock is held, the adapter on).

    Attributes:
        bundle: the shared model.
        contexts: (B,) prompt ids of every row of the batch.
        rollout: the batch.
        rows: (n,) sorted row indices of the minibatch.
        old: (B, T) old log-probs (the placeholders of rows outside a chunk).
        mask: (B, T) bool real tokens.
        want_entropy: the loss has an entropy term (compute the entropy with grad).
        share: share each distinct context's forward between its rows (``teacher_forced``).
    """

    bundle: ModelBundle
    contexts: list[list[int]]
    rollout: Rollout
    rows: Tensor
    old: Tensor
    mask: Tensor
    want_entropy: bool
    share: bool = True


def minibatch_backward(
    mb: Minibatch,
    run_loss: Callable[[Tensor, Tensor, Tensor | None], Any],
    micro_tokens: int,
    timer: PhaseTimer,
) -> tuple[Any, Tensor, Tensor]:
    """Forward and backward of one minibatch; gradients accumulate in the adapter's ``.grad``.

    With at most ``micro_tokens`` tokens: one forward with grad and one backward. With more: the
    rows in chunks, each chunk's rows live and the others held at the old log-probs (exact for a
    row-separable loss, see ``lm.update``'s docstring), then the minibatch's true loss on the
    detached log-probs for the reported numbers and grad_coef.

    Args:
        mb: the minibatch.
        run_loss: ``(rows, logprobs, entropy) -> LossResult`` of the step's loss.
        micro_tokens: token budget of one backward.
        timer: the step's phase timer.

    Returns:
        (the loss result, (n, T) dL/dlogp per token, (n, T) the rows' log-probs), on the CPU.
    """
    rows, ids = mb.rows, mb.rollout.token_ids
    width = ids.shape[1]
    temperature = logprob_temperature(mb.rollout)
    chunks = row_chunks(rows, width, micro_tokens)
    if len(chunks) == 1:  # one forward with grad, one backward
        with timer.phase("forward"), torch.enable_grad():
            lp, ent = teacher_forced(
                mb.bundle,
                [mb.contexts[i] for i in rows.tolist()],
                ids[rows].clone(),
                mb.mask[rows],
                temperature,
                mb.want_entropy,
                mb.share,
            )
            lp.retain_grad()
            result = run_loss(rows, lp, ent)
        with timer.phase("backward"):
            result.total.backward()
        return result, lp.grad.detach().cpu(), lp.detach().cpu()
    # row chunks: each chunk's rows live, the others held at placeholders
    lp_parts, ent_parts = [], []
    offset = 0
    for chunk in chunks:
        part = slice(offset, offset + len(chunk))
        offset += len(chunk)
        with timer.phase("forward"), torch.enable_grad():
            lp_c, ent_c = teacher_forced(
                mb.bundle,
                [mb.contexts[i] for i in chunk.tolist()],
                ids[chunk].clone(),
                mb.mask[chunk],
                temperature,
                mb.want_entropy,
                mb.share,
            )
            full_lp = mb.old[rows].clone().to(lp_c.device)
            full_lp[part] = lp_c
            full_ent = None
            if ent_c is not None:
                full_ent = torch.zeros(len(rows), width, device=ent_c.device)
                full_ent[part] = ent_c
            partial = run_loss(rows, full_lp, full_ent)
        with timer.phase("backward"):
            partial.total.backward()
        lp_parts.append(lp_c.detach().cpu())
        if ent_c is not None:
            ent_parts.append(ent_c.detach().cpu())
    with timer.phase("forward"):  # the minibatch's true loss, on detached inputs
        current = torch.cat(lp_parts)
        lp_leaf = current.clone().requires_grad_(True)
        ent_all = torch.cat(ent_parts) if ent_parts else None
        with torch.enable_grad():
            result = run_loss(rows, lp_leaf, ent_all)
            coef = torch.autograd.grad(result.total, lp_leaf, allow_unused=True)[0]
    coef = torch.zeros_like(current) if coef is None else coef.detach().cpu()
    return result, coef, current
