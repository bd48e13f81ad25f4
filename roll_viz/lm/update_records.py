"""The update step's records: how a step runs (``UpdateConfig``) and what it did (``UpdateResult``).

``UpdateConfig`` with its bounds (learning rate, epochs, rank, micro-batch tokens, precision),
``EpochStats`` per pass over the batch and ``UpdateResult`` for the whole step. ``lm.update`` runs
the step and re-exports every name here, so the pages keep importing them from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.lm.lora import DEFAULT_ALPHA, DEFAULT_RANK

DEFAULT_LR = 2e-4
MAX_LR = 1e-2
#: passes K over one batch, the Update page's bound and UpdateConfig's: the frameworks ship 1,
#: and on a CPU step K > 4 only repeats what K = 4 shows, ever further from pi_old
MAX_EPOCHS = 4
MAX_RANK = 64
MICRO_TOKENS = 1024  # rows per micro-batch are chosen so rows * T stays below this
#: UpdateConfig.precision -> the dtype of the frozen base's matmuls
PRECISIONS = {"float32": torch.float32, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------------------------
# Config and result records


@dataclass(frozen=True)
class UpdateConfig:
    """How one update step runs. Frozen and hashable.

    Attributes:
        lr: AdamW learning rate of the adapter (0, MAX_LR].
        epochs: K passes over the batch (PPO epochs); clipping can only bite from epoch 2.
        minibatches: the batch's rows are split into this many minibatches (one optimizer step
            each, order shuffled per epoch by a seeded generator).
        lora_rank: r of the adapter (used when the adapter is created).
        lora_alpha: LoRA alpha; the update is scaled by alpha / r.
        max_grad_norm: gradient-norm clip before each optimizer step (1.0 in all four
            frameworks); None disables it.
        seed: seeds the LoRA A init and the minibatch order.
        weight_decay: AdamW weight decay (0: an adapter that starts at zero stays comparable).
        micro_tokens: a minibatch with more tokens than this is back-propagated in row chunks
            (two-phase, see the module docstring).
        share_context: run each distinct prompt's context once per forward (with grad: the
            adapter changes the context's keys and values too) and hand its cache to the rows of
            that prompt, instead of every row's own [context | response] pass. About half the
            tokens for 2 prompts x 8 samples of 32 tokens; the same log-probs, loss and
            gradients up to float rounding (tested to 1e-5).
        rescore: score the batch again after the step for ``logprobs_after`` and ``delta`` (one
            more forward, about a third of the step). False leaves both None: a training run
            needs no re-score (its next step samples afresh).
        precision: "float32" (the default: every number in float32) or "bf16": the frozen base
            model's matmuls in bfloat16 (AMX-BF16 / AVX-512 BF16 on a CPU that has them, about
            3x less CPU time for the step here), the adapter, its gradients, the optimizer, the
            residual stream, norms, attention and the head in float32
            (``LoraPolicy.fused``). It moves the log-probs (the loss's pi_theta, so the epoch-1
            ratio is no longer 1): ``bf16_logprob_gap`` measures by how much, and
            ``tests/lm/test_update_precision.py`` bounds it.
        adapt_threads: run the forward passes (with grad and the re-score) on every core while
            the rest of the machine is idle (``lm.threads.choose``, as the sampler's scoring
            passes do); the backward and the optimizer stay at the start-up count. The numbers
            do not depend on it (the same bits under one and two threads; tested).
    """

    lr: float = DEFAULT_LR
    epochs: int = 1
    minibatches: int = 1
    lora_rank: int = DEFAULT_RANK
    lora_alpha: float = DEFAULT_ALPHA
    max_grad_norm: float | None = 1.0
    seed: int = 0
    weight_decay: float = 0.0
    micro_tokens: int = MICRO_TOKENS
    share_context: bool = True
    rescore: bool = True
    precision: str = "float32"
    adapt_threads: bool = True

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.lr) and 0.0 < self.lr <= MAX_LR):
            problems.append(f"lr must be in (0, {MAX_LR:g}] (got {self.lr})")
        if not 1 <= self.epochs <= MAX_EPOCHS:
            problems.append(f"epochs must be 1..{MAX_EPOCHS} (got {self.epochs})")
        if self.minibatches < 1:
            problems.append(f"minibatches must be >= 1 (got {self.minibatches})")
        if not 1 <= self.lora_rank <= MAX_RANK:
            problems.append(f"lora_rank must be 1..{MAX_RANK} (got {self.lora_rank})")
        if not (math.isfinite(self.lora_alpha) and self.lora_alpha > 0):
            problems.append(f"lora_alpha must be > 0 (got {self.lora_alpha})")
        if self.max_grad_norm is not None and not (
            math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0
        ):
            problems.append("max_grad_norm must be > 0 or None")
        if not 0 <= self.seed < 2**63:
            problems.append("seed must be a non-negative integer below 2**63")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            problems.append("weight_decay must be >= 0")
        if self.micro_tokens < 1:
            problems.append("micro_tokens must be >= 1")
        if self.precision not in PRECISIONS:
            known = tuple(PRECISIONS)
            problems.append(f"precision must be one of {known} (got {self.precision!r})")
        if problems:
            raise ValueError("invalid UpdateConfig: " + "; ".join(problems))


@dataclass(frozen=True)
class EpochStats:
    """What one epoch (pass over all minibatches) did.

    Attributes:
        epoch: 1-based epoch number.
        terms: loss terms (policy, kl, entropy, value, total), mean over the epoch's minibatches.
        ratio_mean: mean importance ratio exp(logp - old) over the epoch's valid tokens.
        ratio_min: smallest ratio.
        ratio_max: largest ratio.
        clip_fractions: share of valid tokens in each boolean clip mask the loss reports
            (the per_token keys its ``LossResult.clip_masks`` names), by mask name.
        metrics: the loss's own metrics (framework names), mean over minibatches.
        grad_norms: pre-clip gradient norm of each optimizer step of the epoch.
        ratio: (B, T) the ratio each token had when its minibatch was stepped (0 on padding).
    """

    epoch: int
    terms: dict[str, float]
    ratio_mean: float
    ratio_min: float
    ratio_max: float
    clip_fractions: dict[str, float]
    metrics: dict[str, float]
    grad_norms: tuple[float, ...]
    ratio: Tensor


@dataclass(frozen=True)
class UpdateResult:
    """One update step's numbers (all (B, T) tensors are float32 CPU, 0 on padding).

    Attributes:
        framework: the loss dialect used.
        config: the UpdateConfig.
        step: how many steps the adapter had taken after this one (1 for the first).
        response_mask: (B, T) float mask of the response tokens.
        advantages: (B, T) the advantages used.
        old_logprobs: (B, T) the rollout's log-probs (the behaviour policy).
        logprobs_before: (B, T) the adapted policy's log-probs before the step.
        logprobs_after: (B, T) after the step (re-scored); None when ``cfg.rescore`` is off.
        delta: (B, T) logprobs_after - logprobs_before; None when ``cfg.rescore`` is off.
        grad_coef: (B, T) dL/dlogp per token in epoch 1 (autograd through the loss of the
            token's minibatch; negative = the step raises the token's log-prob).
        per_token: the loss's per_token tensors of epoch 1 (ratio, pg_loss, grad_coef, clip
            masks, ...), assembled over minibatches into (B, T).
        epochs: one EpochStats per epoch.
        grad_norm: pre-clip gradient norm of the first optimizer step.
        seconds: wall time per phase: forward, backward, optimizer, rescore, total.
        adapter_bytes: bytes of this user's adapter weights.
        optimizer_bytes: bytes of its AdamW state.
        rollout_logprobs: (B, T) the sampler's log-probs mu the loss read (None when the loss
            reads none).
        mu_is_old: mu was not given and the loss read mu = old_logprobs (the in-process
            float sampler is the trainer's own model).
    """

    framework: str
    config: UpdateConfig
    step: int
    response_mask: Tensor
    advantages: Tensor
    old_logprobs: Tensor
    logprobs_before: Tensor
    logprobs_after: Tensor | None
    delta: Tensor | None
    grad_coef: Tensor
    per_token: dict[str, Tensor]
    epochs: tuple[EpochStats, ...]
    grad_norm: float
    seconds: dict[str, float]
    adapter_bytes: int
    optimizer_bytes: int
    rollout_logprobs: Tensor | None = None
    mu_is_old: bool = False
