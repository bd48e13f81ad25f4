"""One real policy-gradient step on the shared model through a user's LoRA adapter.

``update_step(policy, rollout, advantages, ...)`` takes K epochs of PPO-style minibatch steps on
a Rollout with a framework's policy loss (``roll_viz.core.pipeline.policy_loss``) on the
``lm.lora.LoraPolicy``'s adapter, then re-scores the batch for the page's delta log pi
(``UpdateConfig.rescore``; a training run skips it). Speed: each prompt's context runs once per
forward and its keys/values go to the prompt's rows (with grad), the head runs at the response
positions only with a log-sum-exp per position, each adapted layer adds its LoRA term with one
in-place addmm (``LoraPolicy.fused``), and the forward passes take every core while the machine
is idle; none of it changes the numbers beyond float rounding (``tests/lm/test_speed.py``,
``tests/lm/test_update_precision.py``). ``UpdateConfig.precision="bf16"`` is the one switch that
does: the frozen base's matmuls in bfloat16, opt-in, its log-prob gap bounded in a test. The
AdamW optimizer of the adapter is built here (``_optimizer``) and kept on the policy, so its state
survives between steps.
Minibatch order comes from a generator seeded by ``UpdateConfig.seed``.

Memory-bounded backward: the loss of a minibatch aggregates over all its tokens, but holding the
graph of 64 x 128 tokens of a 30-layer model is >10 GB. When a minibatch has more than
``micro_tokens`` tokens it is run in row chunks (gradient accumulation): for each chunk the loss
is evaluated on the whole minibatch with the chunk's rows live and the other rows held at
constant placeholders (the old log-probs), and back-propagated. This is exact because every loss
in ``core.pipeline.losses`` is row-separable: aggregation weights depend only on the mask, and a
token's loss only on its own row (token ratio, or the sequence ratio of its row), so the gradient
w.r.t. a chunk's rows does not depend on the placeholder values. A custom ``loss_fn`` must have
the same property. The reported loss, terms, metrics and grad_coef come from one more call of
the loss on all rows' (detached) log-probs: no extra model forward. The test
``test_chunked_backward_equals_one_backward`` checks chunked against unchunked.

Learning rate: DEFAULT_LR = 2e-4 with rank 8, alpha 16. policy-update.md 2.3 measured LoRA r16
at 1e-4 as "visible" (mean |dlogp| 0.038 per token, 2.1 % of tokens outside [0.8, 1.2] for a
second epoch) and 1e-3 as "too big" (48 %) on SmolLM2-135M. The same probe for this adapter
(``python -m benchmarks.update --lr-probe smollm2``: 8 x 48 sampled tokens, one K=1 step,
verl loss) measured mean |dlogp| 0.0023 / 0.023 / 0.046 / 0.23 and next-epoch clip share
0 / 1.1 / 3.8 / 32 % at lr 1e-5 / 1e-4 / 2e-4 / 1e-3, with 80-82 % of tokens moving in their
advantage's direction at every lr. 2e-4 is therefore in the "visible" band (a few per cent clip
in epoch 2, so K=2 shows clipping without destroying the step); 1e-3 is "too big".

Simplifications against ROLL/verl/OpenRLHF/TRL: no value head (the critic is not trained), no
learning-rate schedule or warm-up, float32 unless ``precision="bf16"``, no gradient
checkpointing, one process.

Size: one algorithm (``update_step`` and the named pieces of its epoch loop, the teacher-forced
log-probs they share, and the records it returns) kept together so it reads top to bottom.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline import dialects, policy_loss
from roll_viz.core.pipeline.losses import loss_reads
from roll_viz.core.records import Rollout
from roll_viz.lm import threads
from roll_viz.lm.behaviour import Behaviour, behaviour_logprobs
from roll_viz.lm.cpu_features import bf16_slower_than_float32 as bf16_slower_than_float32
from roll_viz.lm.lora import DEFAULT_ALPHA, DEFAULT_RANK, LoraPolicy
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.scoring import response_hidden, shared_context_hidden

DEFAULT_LR = 2e-4
MAX_LR = 1e-2
#: passes K over one batch, the Update page's bound and UpdateConfig's: the frameworks ship 1,
#: and on a CPU step K > 4 only repeats what K = 4 shows, ever further from pi_old
MAX_EPOCHS = 4
MAX_RANK = 64
MICRO_TOKENS = 1024  # rows per micro-batch are chosen so rows * T stays below this
#: UpdateConfig.precision -> the dtype of the frozen base's matmuls
PRECISIONS = {"float32": torch.float32, "bf16": torch.bfloat16}

LossFn = Callable[..., Any]


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


# ---------------------------------------------------------------------------------------------
# Log-probs under the adapted policy


def _temperature(rollout: Rollout) -> float:
    value = rollout.meta.logprob_temperature
    return float(value) if value else 1.0


def _row_contexts(bundle: ModelBundle, rollout: Rollout) -> list[list[int]]:
    """(B,) plain chat-templated prompt ids per row (caller holds the lock)."""
    per_prompt = [bundle.chat_ids(p) for p in rollout.prompts]
    return [per_prompt[g] for g in rollout.group_ids.tolist()]


def _forward(
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


def _chunks(rows: Tensor, width: int, micro_tokens: int) -> list[Tensor]:
    per = max(1, micro_tokens // max(width, 1))
    return list(torch.split(rows, per))


def _score_rows(
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
        for chunk in _chunks(rows, ids.shape[1], micro_tokens):
            lp, ent = _forward(
                policy.bundle,
                [contexts[i] for i in chunk.tolist()],
                ids[chunk],
                mask[chunk],
                _temperature(rollout),
                want_entropy,
                share,
            )
            lps.append(lp.cpu())
            if ent is not None:
                ents.append(ent.cpu())
    return torch.cat(lps), (torch.cat(ents) if want_entropy else None)


def policy_logprobs(policy: LoraPolicy, rollout: Rollout, grad: bool = False) -> Tensor:
    """Per-token log-probs of the rollout's tokens under the adapted policy.

    Takes ``bundle.lock`` for the forward pass. With ``grad=True`` the result is attached to the
    graph of this adapter's parameters (one forward over the whole batch: keep it small); its
    backward needs no lock (it reads saved tensors and writes only this adapter's ``.grad``).

    Args:
        policy: the user's LoraPolicy.
        rollout: the batch; its ``meta`` logprob temperature is used.
        grad: keep the autograd graph.

    Returns:
        (B, T) float32 log-probs, 0 on padding.
    """
    bundle = policy.bundle
    with bundle.lock, policy.activate(bundle):
        contexts = _row_contexts(bundle, rollout)
        if not grad:
            rows = torch.arange(rollout.token_ids.shape[0])
            return _score_rows(policy, rollout, contexts, rows, MICRO_TOKENS)[0]
        with torch.enable_grad():
            lp, _ = _forward(
                bundle,
                contexts,
                rollout.token_ids.clone(),
                rollout.response_mask > 0,
                _temperature(rollout),
                False,
            )
    return lp


def rescore(policy: LoraPolicy, rollout: Rollout, result: UpdateResult) -> UpdateResult:
    """Score ``rollout`` again under the adapter as ``result``'s step left it (delta log pi).

    The re-score ``update_step`` does when ``cfg.rescore`` is on, as its own no-grad pass: a page
    can take the step with ``rescore=False``, draw it, and fill in delta log pi afterwards. Same
    precision, micro-batches and shared contexts as the step's config; ``bundle.lock`` is held
    for this pass only.

    Args:
        policy: the LoraPolicy that took the step (not stepped again since).
        rollout: the batch the step was taken on.
        result: that step's UpdateResult (returned as is when it already has ``delta``).

    Returns:
        ``result`` with ``logprobs_after``, ``delta`` and ``seconds["rescore"]`` filled in
        (``seconds["total"]`` grows by the re-score).

    Raises:
        ValueError: the policy was closed, or it took another step since ``result``.
        Cancelled: the policy was released (its session closed).
    """
    if result.delta is not None:
        return result
    if policy.closed:
        raise ValueError("this LoRA policy was closed")
    policy.check()
    if policy.steps != result.step:
        raise ValueError(
            f"the adapter is at step {policy.steps}, the result is of step {result.step}: "
            "re-score right after the step"
        )
    cfg = result.config
    mask_f = result.response_mask
    timer = _Timer(adapt_threads=cfg.adapt_threads, base_threads=torch.get_num_threads())
    bundle = policy.bundle
    all_rows = torch.arange(rollout.token_ids.shape[0])
    with bundle.lock, policy.activate(bundle), policy.fused(bundle, PRECISIONS[cfg.precision]):
        contexts = _row_contexts(bundle, rollout)
        with timer.phase("rescore"):
            after = _score_rows(
                policy, rollout, contexts, all_rows, cfg.micro_tokens, share=cfg.share_context
            )[0]
    seconds = dict(result.seconds)
    seconds["rescore"] = timer.seconds["rescore"]
    seconds["total"] = seconds.get("total", 0.0) + seconds["rescore"]
    after = after * mask_f
    return dataclasses.replace(
        result, logprobs_after=after, delta=after - result.logprobs_before, seconds=seconds
    )


# ---------------------------------------------------------------------------------------------
# What a loss option reads beyond the log-probs: scores, difficulty, the sampler's mu

#: the loss inputs a loss option may read beyond log-probs, advantages and the reference
EXTRA_INPUTS = ("scores", "difficulty", "rollout_logprobs")


def loss_inputs(framework: str, loss_config: Mapping[str, Any] | None) -> frozenset[str]:
    """Which of ``EXTRA_INPUTS`` the framework's loss reads under these keys.

    ``scores``: ROLL ``pg_variant: topr`` (splits rows by the score's sign); ``difficulty``: ROLL
    ``difficulty_loss_weight``; ``rollout_logprobs``: a train/rollout correction (OpenRLHF
    ``is_correction_*``, TRL ``vllm_importance_sampling_*``) or a loss whose old log-prob is mu
    (verl's bypass and decoupled rollout correction: the dialect's ``reads_rollout_logprobs``).

    Raises:
        ValueError: an unknown framework or a bad loss key (as ``policy_loss`` would).
    """
    return _loss_reads(framework, loss_config) & frozenset(EXTRA_INPUTS)


def _loss_reads(framework: str, loss_config: Mapping[str, Any] | None) -> frozenset[str]:
    """Every optional input the loss reads (``losses.loss_reads`` of its spec, "entropy" too)."""
    cfg = dialects.resolve_config(framework, loss_config)
    dialect = dialects.get(framework)
    needs = set(loss_reads(dialect.loss_spec(cfg, [])))
    reads_mu = getattr(dialect, "reads_rollout_logprobs", None)
    if reads_mu is not None and reads_mu(cfg):
        needs.add("rollout_logprobs")
    return frozenset(needs)


def group_difficulty(scores: Tensor, group_ids: Tensor) -> Tensor:
    """(B,) each sample's difficulty in [0, 1]: its prompt's failure rate in this batch.

    ROLL reads ``difficulty`` from the data set's column of that name
    (``ActorWorker.compute_sample_weights``: weight ``0.5 + 1.5 * clamp(difficulty, 0, 1)``);
    the prompts here carry none, so the stand-in is ``1 - mean over the group of clamp(score, 0,
    1)``: with 0/1 rewards the share of wrong answers, the quantity ROLL's ``difficulty_mask``
    thresholds.
    """
    s = torch.as_tensor(scores).detach().double().clamp(0.0, 1.0)
    g = torch.as_tensor(group_ids).long()
    sums = torch.zeros(int(g.max()) + 1, dtype=torch.float64).index_add_(0, g, s)
    counts = torch.bincount(g, minlength=sums.shape[0]).double().clamp_min(1.0)
    return (1.0 - sums / counts)[g]


def behaviour_mu(
    bundle: ModelBundle,
    rollout: Rollout,
    source: str,
    *,
    top_p: float = 0.9,
    top_k: int = 50,
) -> tuple[Tensor, Behaviour]:
    """The sampler's log-probs mu of the rollout's tokens under a behaviour source.

    The source's gap to the float32 recompute, d = log pi_old - log mu, is measured on the
    base model (adapter off) with the update's own contexts, and applied to the batch's
    log-probs: mu = rollout.logprobs - d. The step's pi_old stays the batch's own log-probs, so
    only the source's numeric gap moves the ratio pi_theta / mu. A token a truncated sampler
    could not have drawn (top-p / top-k, ``Behaviour.outside``) keeps mu = pi_old.

    Takes ``bundle.lock``.

    Args:
        bundle: the shared model.
        rollout: the batch.
        source: one of ``lm.behaviour.SOURCES``.
        top_p: the nucleus mass of ``top_p``.
        top_k: the number of tokens of ``top_k``.

    Returns:
        ((B, T) float32 mu, 0 on padding; the Behaviour measured).

    Raises:
        ValueError: as ``behaviour_logprobs`` (an unknown source, int8 off the CPU ...).
    """
    with bundle.lock, torch.inference_mode():
        beh = behaviour_logprobs(
            bundle,
            _row_contexts(bundle, rollout),
            rollout.token_ids,
            rollout.response_mask > 0,
            source=source,
            temperature=_temperature(rollout),
            top_p=top_p,
            top_k=top_k,
        )
    mask = (rollout.response_mask > 0).float()
    gap = torch.where(beh.mask, beh.old - beh.mu, 0.0).float()
    mu = (rollout.logprobs.detach().float() - gap) * mask
    return mu.clone(), beh


# ---------------------------------------------------------------------------------------------
# The update step


def _optimizer(policy: LoraPolicy, cfg: UpdateConfig) -> torch.optim.Optimizer:
    """The policy's AdamW over its adapter (made on the first step), at ``cfg``'s lr and decay."""
    if policy.optimizer is None:
        policy.optimizer = torch.optim.AdamW(
            policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=False
        )
    for group in policy.optimizer.param_groups:
        group["lr"] = cfg.lr
        group["weight_decay"] = cfg.weight_decay
    return policy.optimizer


def _default_loss() -> LossFn:
    return policy_loss


def _wants_entropy(framework: str, config: Mapping[str, Any] | None) -> bool:
    """Whether the loss reads the entropy (then it is computed, with grad).

    The spec's own switches (``losses.loss_reads``): a nonzero entropy coefficient, TRL's
    ``top_entropy_quantile`` below 1 or its adaptive entropy coefficient.
    """
    return "entropy" in _loss_reads(framework, config)


def _scalar(value: Any) -> float:
    if isinstance(value, Tensor):
        return float(value.detach().float().mean()) if value.numel() else 0.0
    return float(value)


@dataclass
class _Timer:
    """Wall seconds per phase; the forward phases may take every core (``adapt_threads``)."""

    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("forward", "backward", "optimizer", "rescore"), 0.0)
    )
    adapt_threads: bool = False
    base_threads: int = 1

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
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
class _Minibatch:
    """What one minibatch's forward and backward read (the lock is held, the adapter on).

    Attributes:
        bundle: the shared model.
        contexts: (B,) prompt ids of every row of the batch.
        rollout: the batch.
        rows: (n,) sorted row indices of the minibatch.
        old: (B, T) old log-probs (the placeholders of rows outside a chunk).
        mask: (B, T) bool real tokens.
        want_entropy: the loss has an entropy term (compute the entropy with grad).
        share: share each distinct context's forward between its rows (``_forward``).
    """

    bundle: ModelBundle
    contexts: list[list[int]]
    rollout: Rollout
    rows: Tensor
    old: Tensor
    mask: Tensor
    want_entropy: bool
    share: bool = True


def _minibatch_backward(
    mb: _Minibatch,
    run_loss: Callable[[Tensor, Tensor, Tensor | None], Any],
    micro_tokens: int,
    timer: _Timer,
) -> tuple[Any, Tensor, Tensor]:
    """Forward and backward of one minibatch; gradients accumulate in the adapter's ``.grad``.

    With at most ``micro_tokens`` tokens: one forward with grad and one backward. With more: the
    rows in chunks, each chunk's rows live and the others held at the old log-probs (exact for a
    row-separable loss, see the module docstring), then the minibatch's true loss on the detached
    log-probs for the reported numbers and grad_coef.

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
    temperature = _temperature(mb.rollout)
    chunks = _chunks(rows, width, micro_tokens)
    if len(chunks) == 1:  # one forward with grad, one backward
        with timer.phase("forward"), torch.enable_grad():
            lp, ent = _forward(
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
            lp_c, ent_c = _forward(
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


def _keep_per_token(
    kept: dict[str, Tensor], result: Any, rows: Tensor, num_rows: int, width: int
) -> None:
    """Copy the loss's (n, T) per-token tensors of a minibatch into (B, T) tensors of ``kept``."""
    for key, value in result.per_token.items():
        if isinstance(value, Tensor) and value.shape == (len(rows), width):
            if key not in kept:
                kept[key] = torch.zeros(num_rows, width, dtype=torch.float32)
            kept[key][rows] = value.detach().float().cpu()


def _optimizer_step(
    optimizer: torch.optim.Optimizer, params: list[Tensor], max_grad_norm: float | None
) -> float:
    """Clip the gradient (if asked), step, zero the gradient; returns the pre-clip norm."""
    if max_grad_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    else:
        norm = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in params if p.grad is not None] or [torch.zeros(())])
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


class _EpochTally:
    """Sums over one epoch's minibatches, turned into an ``EpochStats`` at the end."""

    def __init__(self, num_rows: int, width: int) -> None:
        self.ratio = torch.zeros(num_rows, width)
        self.clip_counts: dict[str, float] = {}
        self.term_sums: dict[str, float] = {}
        self.metric_sums: dict[str, float] = {}
        self.norms: list[float] = []

    def add(
        self,
        result: Any,
        rows: Tensor,
        current: Tensor,
        old: Tensor,
        mask_f: Tensor,
        mask_b: Tensor,
    ) -> None:
        """Fold in one minibatch: its ratios, clip-mask hits, loss terms and metrics."""
        self.ratio[rows] = torch.exp(current - old[rows]) * mask_f[rows]
        for key, value in result.per_token.items():
            if key in result.clip_masks:
                hits = float((value.cpu() & mask_b[rows]).sum())
                self.clip_counts[key] = self.clip_counts.get(key, 0.0) + hits
        terms = {k: _scalar(v) for k, v in result.terms.items() if v is not None}
        terms["total"] = _scalar(result.total)
        for key, value in terms.items():
            self.term_sums[key] = self.term_sums.get(key, 0.0) + value
        for key, value in result.metrics.items():
            self.metric_sums[key] = self.metric_sums.get(key, 0.0) + _scalar(value)

    def stats(self, epoch: int, minibatches: int, mask_b: Tensor) -> EpochStats:
        """The epoch's EpochStats (means over minibatches, shares over valid tokens)."""
        valid_ratio = self.ratio[mask_b]
        n_valid = max(int(mask_b.sum()), 1)
        return EpochStats(
            epoch=epoch,
            terms={k: v / minibatches for k, v in self.term_sums.items()},
            ratio_mean=float(valid_ratio.mean()) if valid_ratio.numel() else 1.0,
            ratio_min=float(valid_ratio.min()) if valid_ratio.numel() else 1.0,
            ratio_max=float(valid_ratio.max()) if valid_ratio.numel() else 1.0,
            clip_fractions={k: v / n_valid for k, v in self.clip_counts.items()},
            metrics={k: v / minibatches for k, v in self.metric_sums.items()},
            grad_norms=tuple(self.norms),
            ratio=self.ratio,
        )


def _extra_inputs(
    needs: frozenset[str],
    num_rows: int,
    width: int,
    scores: Tensor | None,
    difficulty: Tensor | None,
    rollout_logprobs: Tensor | None,
) -> dict[str, Tensor]:
    """The extra loss inputs the loss reads, checked for shape (rows are indexed per minibatch)."""
    out: dict[str, Tensor] = {}
    given = {"scores": scores, "difficulty": difficulty, "rollout_logprobs": rollout_logprobs}
    shapes = {
        "scores": (num_rows,),
        "difficulty": (num_rows,),
        "rollout_logprobs": (num_rows, width),
    }
    for name in EXTRA_INPUTS:
        value = given[name]
        if name not in needs or value is None:
            continue
        value = torch.as_tensor(value).detach().float().cpu()
        if value.shape != shapes[name]:
            raise ValueError(f"{name} must have shape {shapes[name]}, got {tuple(value.shape)}")
        out[name] = value
    if "scores" in needs and "scores" not in out:
        raise ValueError("scores: this loss (ROLL pg_variant topr) needs the batch's scores")
    return out


def update_step(
    policy: LoraPolicy,
    rollout: Rollout,
    advantages: Tensor,
    *,
    framework: str = "verl",
    loss_config: Mapping[str, Any] | None = None,
    ref_logprobs: Tensor | None = None,
    cfg: UpdateConfig | None = None,
    loss_fn: LossFn | None = None,
    scores: Tensor | None = None,
    difficulty: Tensor | None = None,
    rollout_logprobs: Tensor | None = None,
) -> UpdateResult:
    """K epochs of minibatch policy-gradient steps on ``rollout``, then a re-score.

    ``bundle.lock`` is held for the whole step (forward, backward, optimizer, re-score), and
    released between steps. A policy released meanwhile (``LoraPolicy.release``) stops the step
    before its next minibatch with ``reaper.Cancelled``.

    Args:
        policy: the user's LoraPolicy (its rank/alpha must match ``cfg``).
        rollout: the batch: token_ids (B, T), response_mask (B, T); old log-probs are
            ``rollout.logprobs`` (the behaviour policy's).
        advantages: (B, T) advantages (e.g. a pipeline ``Trace.advantages``).
        framework: the loss dialect ("roll", "verl", "openrlhf", "trl").
        loss_config: that dialect's loss keys (None = its defaults).
        ref_logprobs: (B, T) reference log-probs for a KL loss (None: ``rollout.ref_logprobs``).
        cfg: UpdateConfig (None = defaults).
        loss_fn: the loss, with the signature of ``core.pipeline.policy_loss``; None uses
            that function.
        scores: (B,) the batch's scores; passed to the loss when it reads them (ROLL topr).
        difficulty: (B,) each sample's difficulty (ROLL ``difficulty_loss_weight``); None: the
            loss goes without it (as ROLL does when the data has no difficulty).
        rollout_logprobs: (B, T) the sampler's log-probs mu, passed when the loss reads them (a
            train/rollout correction); None there means mu = ``rollout.logprobs`` (the
            in-process float sampler is the trainer's own model; ``UpdateResult.mu_is_old``).

    Returns:
        The UpdateResult.

    Raises:
        ValueError: shape mismatch, too many minibatches, rank/alpha differ from the adapter, or
            the loss reads scores and none were given.
        Cancelled: the policy was released (its session closed).
    """
    cfg = cfg or UpdateConfig()
    loss_fn = loss_fn or _default_loss()
    if policy.closed:
        raise ValueError("this LoRA policy was closed")
    policy.check()
    if (cfg.lora_rank, float(cfg.lora_alpha)) != (policy.rank, policy.alpha):
        raise ValueError(
            f"cfg asks for LoRA r={cfg.lora_rank}, alpha={cfg.lora_alpha:g}, but the adapter has "
            f"r={policy.rank}, alpha={policy.alpha:g}: create a new LoraPolicy"
        )
    ids = rollout.token_ids
    num_rows, width = ids.shape
    advantages = advantages.detach().float().cpu()
    if advantages.shape != (num_rows, width):
        raise ValueError(f"advantages must be (B, T) = {(num_rows, width)}")
    if cfg.minibatches > num_rows:
        raise ValueError(f"minibatches ({cfg.minibatches}) exceeds the batch's {num_rows} rows")
    mask_f = (rollout.response_mask > 0).float()
    mask_b = mask_f > 0
    old = rollout.logprobs.detach().float() * mask_f
    ref = (rollout.ref_logprobs if ref_logprobs is None else ref_logprobs).detach().float()
    ref = ref * mask_f
    want_entropy = _wants_entropy(framework, loss_config)
    needs = loss_inputs(framework, loss_config)
    extra = _extra_inputs(needs, num_rows, width, scores, difficulty, rollout_logprobs)
    mu_is_old = "rollout_logprobs" in needs and "rollout_logprobs" not in extra
    if mu_is_old:  # no sampler log-probs: the in-process float sampler is the trainer's model
        extra["rollout_logprobs"] = old
    bundle = policy.bundle
    order_gen = torch.Generator().manual_seed(cfg.seed + policy.steps)
    timer = _Timer(adapt_threads=cfg.adapt_threads, base_threads=torch.get_num_threads())
    start_total = time.perf_counter()
    grad_coef = torch.zeros(num_rows, width)
    first_per_token: dict[str, Tensor] = {}
    epochs: list[EpochStats] = []
    before = torch.zeros(num_rows, width)
    all_rows = torch.arange(num_rows)

    def run_loss(rows: Tensor, logprobs: Tensor, entropy: Tensor | None) -> Any:
        return loss_fn(
            framework,
            loss_config,
            logprobs=logprobs,
            old_logprobs=old[rows],
            advantages=advantages[rows],
            response_mask=mask_f[rows],
            ref_logprobs=ref[rows],
            entropy=entropy,
            **{name: value[rows] for name, value in extra.items()},
        )

    base_dtype = PRECISIONS[cfg.precision]
    with bundle.lock, policy.activate(bundle), policy.fused(bundle, base_dtype):
        contexts = _row_contexts(bundle, rollout)
        optimizer = _optimizer(policy, cfg)
        params = policy.parameters()
        with timer.phase("forward"):
            if cfg.minibatches > 1:  # later minibatches see a moved adapter: score all first
                before = _score_rows(
                    policy, rollout, contexts, all_rows, cfg.micro_tokens, share=cfg.share_context
                )[0]
        for epoch in range(1, cfg.epochs + 1):
            perm = (
                torch.randperm(num_rows, generator=order_gen) if cfg.minibatches > 1 else all_rows
            )
            tally = _EpochTally(num_rows, width)
            for rows in torch.tensor_split(perm, cfg.minibatches):
                policy.check()  # released meanwhile: stop here, before the next minibatch
                rows = rows.sort().values
                result, coef, current = _minibatch_backward(
                    _Minibatch(
                        bundle,
                        contexts,
                        rollout,
                        rows,
                        old,
                        mask_b,
                        want_entropy,
                        cfg.share_context,
                    ),
                    run_loss,
                    cfg.micro_tokens,
                    timer,
                )
                if epoch == 1:
                    grad_coef[rows] = coef
                    if cfg.minibatches == 1:
                        before = current.clone()
                    _keep_per_token(first_per_token, result, rows, num_rows, width)
                tally.add(result, rows, current, old, mask_f, mask_b)
                with timer.phase("optimizer"):
                    tally.norms.append(_optimizer_step(optimizer, params, cfg.max_grad_norm))
            epochs.append(tally.stats(epoch, cfg.minibatches, mask_b))
        with timer.phase("rescore"):
            after = None
            if cfg.rescore:
                after = _score_rows(
                    policy, rollout, contexts, all_rows, cfg.micro_tokens, share=cfg.share_context
                )[0]
    policy.steps += 1
    seconds = dict(timer.seconds)
    seconds["total"] = time.perf_counter() - start_total
    sizes = policy.nbytes()
    return UpdateResult(
        framework=framework,
        config=cfg,
        step=policy.steps,
        response_mask=mask_f,
        advantages=advantages * mask_f,
        old_logprobs=old,
        logprobs_before=before * mask_f,
        logprobs_after=None if after is None else after * mask_f,
        delta=None if after is None else (after - before) * mask_f,
        grad_coef=grad_coef * mask_f,
        per_token=first_per_token,
        epochs=tuple(epochs),
        grad_norm=epochs[0].grad_norms[0],
        seconds=seconds,
        adapter_bytes=sizes["adapter"],
        optimizer_bytes=sizes["optimizer"],
        rollout_logprobs=(
            extra["rollout_logprobs"] * mask_f if "rollout_logprobs" in extra else None
        ),
        mu_is_old=mu_is_old,
    )
