"""One real LoRA policy-gradient step on a batch of multi-turn episodes (token-exact).

``episode_update(policy, episodes, advantages, mask)`` is the Update step of the Episodes page:
the episodes' transcripts (every segment's ``token_ids`` in order, prompt and tool output
included, never re-encoded: the extension property) laid out as ``core.agentic.masks.
batch_episodes`` lays them out, a per-token advantage (B, T) from a credit rule and a trainable
mask (B, T) (the correct mask or one of ``masks.MASK_RULES``' mistakes), then:

1. one forward pass of the adapted model over each whole transcript with an attention mask of
   ones on every real token (padding only is hidden): never the loss mask, whose holes would
   cut the tool output out of every later position's context (TRL #4974);
2. the log-prob of each position's token, ``log_softmax(logits / T)[token]`` over the full
   vocabulary, from the hidden state of the position before it (position 0 has none: it is
   never trained);
3. the loss ``L = -sum_t m_t A_t ratio_t / sum_t m_t`` (token mean over the mask) with
   ``ratio_t = exp(logp_t - old_t)``; ``old_t`` is the episode's recorded sampling log-prob on
   a sampled token and a detached recompute (ratio 1) where it has none (tool output, prompt);
   so ``dL/dlogp_t = -m_t A_t ratio_t / sum m``, exactly 0 outside the mask (``grad_coef``, by
   autograd, checked against the closed form in the tests);
4. backward, gradient clip, one AdamW step of the adapter (``lm.update``'s optimizer settings);
5. a no-grad re-score: delta log pi on every position, context included (a context token moves
   only because the weights it shares with the trained tokens moved: its own gradient
   coefficient is 0).

The model lock is held for the whole step; the shared base is never written (only the
adapter's tensors have gradients); no global RNG (the step draws nothing). Memory: the rows
run in chunks of at most ``lm.update.MICRO_TOKENS`` tokens (forward and backward per chunk,
the adapter's gradient accumulating: exact, the loss is a sum over positions with a fixed
denominator), and the LM head on a bounded block of positions at a time
(``scoring.default_block_rows``), its gradient carried back to the hidden states block by
block, so neither a whole batch's graph nor its (positions, vocabulary) matrix exists; the
batch is bounded by ``MAX_UPDATE_TOKENS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.core.agentic import masks
from roll_viz.core.agentic.episode import Episode
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.scoring import default_block_rows, response_hidden
from roll_viz.lm.update import (
    DEFAULT_LR,
    MICRO_TOKENS,
    UpdateConfig,
    _optimizer,
    _optimizer_step,
)

#: transcript tokens of one step, all episodes together (the Episodes page's live bound is
#: 6 tasks x 8 episodes x 1,024 tokens; a batch over this is refused with a message)
MAX_UPDATE_TOKENS = 16_384


@dataclass(frozen=True)
class EpisodeUpdate:
    """What one step on a batch of episodes did, per token. (B, T) float32 tensors on the CPU.

    Attributes:
        valid: (B, T) bool, real tokens (not padding).
        mask: the trainable mask the loss used (position 0 of each row cleared: it has no
            log-prob).
        advantages: the advantages the loss used (0 outside the mask).
        old_logprobs: old_t of the ratio (0 on padding).
        old_recorded: (B, T) bool, where old_t is the episode's recorded sampling log-prob (else
            the detached recompute: ratio 1).
        logprobs_before: log pi_theta of each token at the step (0 on position 0 and padding).
        ratio: exp(logp - old) at the step (1 outside the mask).
        grad_coef: dL/dlogp_t by autograd (exactly 0 outside the mask).
        logprobs_after: log pi of each token after the step.
        delta: logprobs_after - logprobs_before (every real position but the first).
        loss: the loss's value.
        grad_norm: the adapter gradient's norm before the clip.
        lr: the learning rate of the step.
        temperature: the logits were divided by it.
    """

    valid: Tensor
    mask: Tensor
    advantages: Tensor
    old_logprobs: Tensor
    old_recorded: Tensor
    logprobs_before: Tensor
    ratio: Tensor
    grad_coef: Tensor
    logprobs_after: Tensor
    delta: Tensor
    loss: float
    grad_norm: float
    lr: float
    temperature: float


def check_vocabulary(episodes: Sequence[Episode], vocab_size: int) -> str | None:
    """Why these episodes' token ids cannot be fed to a model of ``vocab_size`` tokens, or None."""
    top = max((max(e.token_ids, default=-1) for e in episodes), default=-1)
    if top >= vocab_size:
        return (
            f"token id {top} is outside this model's vocabulary of {vocab_size}: the update "
            "needs the model that drew these tokens"
        )
    return None


def _hidden(bundle, ids: Tensor, valid: Tensor) -> Tensor:
    """(B, T, H) hidden states; column t predicts ``ids[:, t]`` (column 0 is a placeholder).

    The whole transcript is one sequence: its first token is the context and the rest the
    "response" of ``response_hidden``, with the attention mask ones on every real token.
    """
    contexts = [[int(ids[b, 0])] for b in range(ids.shape[0])]
    hidden = response_hidden(bundle, contexts, ids[:, 1:], valid[:, 1:])  # (B, T-1, H)
    return torch.cat([hidden[:, :1], hidden], dim=1)  # column 0 never used


def _picked(head, hidden: Tensor, targets: Tensor, temperature: float) -> Tensor:
    """(n,) log_softmax(head(hidden) / T)[target] over the full vocabulary."""
    logits = head(hidden).float() / temperature
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _row_chunks(valid: Tensor) -> list[tuple[Tensor, int]]:
    """(rows, width) chunks of at most ``MICRO_TOKENS`` padded tokens (one row at least).

    Each chunk's forward (and backward) runs on its own, cut to its longest transcript: the
    memory of a pass is that of a chunk, not of the batch.
    """
    lengths = valid.sum(dim=1)
    per = max(1, MICRO_TOKENS // max(int(lengths.max()), 1))
    return [(rows, int(lengths[rows].max())) for rows in torch.split(torch.arange(len(valid)), per)]


def _score(
    policy: LoraPolicy, ids: Tensor, valid: Tensor, where: Tensor, temperature: float
) -> Tensor:
    """No-grad (B, T) log-probs at ``where`` (0 elsewhere); lock held, adapter on."""
    bundle = policy.bundle
    head = bundle.model.get_output_embeddings()
    block = default_block_rows(head.weight.shape[0])
    out = torch.zeros(ids.shape, dtype=torch.float32)
    with torch.no_grad():
        for rows, width in _row_chunks(valid):
            chunk_ids = ids[rows, :width]
            hidden = _hidden(bundle, chunk_ids, valid[rows, :width])
            r, c = where[rows, :width].nonzero(as_tuple=True)
            for start in range(0, len(r), block):
                rr, cc = r[start : start + block], c[start : start + block]
                targets = chunk_ids[rr, cc].to(hidden.device)
                out[rows[rr], cc] = _picked(head, hidden[rr, cc], targets, temperature).cpu()
    return out


def episode_update(
    policy: LoraPolicy,
    episodes: Sequence[Episode],
    advantages: Tensor,
    mask: Tensor,
    *,
    lr: float = DEFAULT_LR,
    temperature: float = 1.0,
    max_grad_norm: float | None = 1.0,
) -> EpisodeUpdate:
    """One policy-gradient step of ``policy``'s adapter on ``episodes`` (module docstring).

    Args:
        policy: the LoRA policy to step (a scratch adapter on a page).
        episodes: the batch, rows in the order of ``masks.batch_episodes(episodes)``.
        advantages: (B, T) per-token advantages on that layout (a credit rule's).
        mask: (B, T) the trainable mask on that layout (the correct mask or a mistake's).
        lr: the AdamW learning rate (``lm.update.DEFAULT_LR``).
        temperature: the logits are divided by it (the temperature of the recorded log-probs).
        max_grad_norm: gradient-norm clip (None: none).

    Raises:
        ValueError: shapes that differ from the batch, more than ``MAX_UPDATE_TOKENS`` tokens,
            token ids outside the model's vocabulary, an empty mask, or a closed policy.
        Cancelled: the policy was released (its session closed).
    """
    if policy.closed:
        raise ValueError("this LoRA policy was closed")
    policy.check()
    batch = masks.batch_episodes(episodes)
    ids, valid = batch.token_ids, batch.valid
    if int(valid.sum()) > MAX_UPDATE_TOKENS:
        raise ValueError(
            f"{int(valid.sum())} transcript tokens: one update step takes at most "
            f"{MAX_UPDATE_TOKENS}"
        )
    if tuple(advantages.shape) != tuple(ids.shape) or tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"advantages and mask must have the batch's shape {tuple(ids.shape)}")
    bundle = policy.bundle
    head = bundle.model.get_output_embeddings()
    problem = check_vocabulary(episodes, head.weight.shape[0])
    if problem:
        raise ValueError(problem)
    m = (mask > 0) & valid
    m[:, 0] = False  # the first token has no log-prob (nothing predicts it)
    if not m.any():
        raise ValueError("the mask trains no token")
    m_f = m.float()
    adv = torch.where(m, advantages.detach().float(), 0.0)  # NaN off the mask stays out
    scored = valid.clone()
    scored[:, 0] = False
    cfg = UpdateConfig(lr=lr, max_grad_norm=max_grad_norm)
    with bundle.lock, policy.activate(bundle), policy.fused(bundle):  # fused: speed only
        before = _score(policy, ids, valid, scored, temperature)
        recorded = batch.logprobs.isfinite() & m
        old = torch.where(recorded, batch.logprobs.float(), before) * scored
        coef, loss_value, norm = _step(policy, ids, valid, m, adv, old, temperature, cfg)
        policy.steps += 1
        after = _score(policy, ids, valid, scored, temperature)
    ratio = torch.where(m, torch.exp(before - old), torch.ones_like(before))
    return EpisodeUpdate(
        valid=valid,
        mask=m_f,
        advantages=adv,
        old_logprobs=old,
        old_recorded=recorded,
        logprobs_before=before,
        ratio=ratio,
        grad_coef=coef,
        logprobs_after=after,
        delta=(after - before) * scored,
        loss=loss_value,
        grad_norm=norm,
        lr=lr,
        temperature=temperature,
    )


def _step(
    policy: LoraPolicy,
    ids: Tensor,
    valid: Tensor,
    m: Tensor,
    adv: Tensor,
    old: Tensor,
    temperature: float,
    cfg: UpdateConfig,
) -> tuple[Tensor, float, float]:
    """Forward with grad, the loss, backward, one optimizer step (lock held, adapter on).

    Rows run in chunks (``_row_chunks``) and, within one, the head on a block of trained
    positions at a time: each block's log-probs, its share of the loss (``-A ratio / sum m``
    over the whole batch's mask: exact, the token mean's weights depend on the mask only) and
    its backward into the hidden states; then the chunk's backward through the model.

    Returns:
        ((B, T) dL/dlogp by autograd, the loss, the pre-clip gradient norm).
    """
    bundle = policy.bundle
    head = bundle.model.get_output_embeddings()
    block = default_block_rows(head.weight.shape[0])
    total = m.sum()
    coef = torch.zeros(m.shape, dtype=torch.float32)
    loss_value = 0.0
    for rows, width in _row_chunks(valid):  # the adapter's .grad accumulates over the chunks
        chunk_ids = ids[rows, :width]
        r, c = m[rows, :width].nonzero(as_tuple=True)
        if len(r) == 0:
            continue
        with torch.enable_grad():
            hidden = _hidden(bundle, chunk_ids, valid[rows, :width])
            live = hidden[r, c]  # (n, H) with grad through the adapter
            leaf = live.detach().requires_grad_(True)
            for start in range(0, len(r), block):
                rr, cc = r[start : start + block], c[start : start + block]
                lp = _picked(head, leaf[start : start + block], chunk_ids[rr, cc], temperature)
                lp.retain_grad()
                ratio = torch.exp(lp - old[rows[rr], cc].to(lp.device))
                loss = -(adv[rows[rr], cc].to(lp.device) * ratio).sum() / total
                loss.backward()
                coef[rows[rr], cc] = lp.grad.detach().float().cpu()
                loss_value += float(loss.detach())
            live.backward(leaf.grad)
    norm = _optimizer_step(_optimizer(policy, cfg), policy.parameters(), cfg.max_grad_norm)
    return coef, loss_value, norm
