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

Size: one algorithm (``update_step`` and the named pieces of its epoch loop: its checks, its
loss's inputs, the tally of each epoch and the result) kept together so it reads top to bottom.
Its records are in ``lm.update_records`` (re-exported here) and its passes through the model
(teacher-forced log-probs, a minibatch's backward) in ``lm.forward_backward``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.pipeline import dialects, policy_loss
from roll_viz.core.pipeline.losses import loss_reads
from roll_viz.core.records import Rollout
from roll_viz.lm.behaviour import Behaviour, behaviour_logprobs
from roll_viz.lm.cpu_features import bf16_slower_than_float32 as bf16_slower_than_float32
from roll_viz.lm.forward_backward import (
    Minibatch,
    PhaseTimer,
    logprob_temperature,
    minibatch_backward,
    row_contexts,
    score_rows,
    teacher_forced,
)
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.update_records import DEFAULT_LR as DEFAULT_LR
from roll_viz.lm.update_records import MAX_EPOCHS as MAX_EPOCHS
from roll_viz.lm.update_records import MAX_LR as MAX_LR
from roll_viz.lm.update_records import MAX_RANK as MAX_RANK
from roll_viz.lm.update_records import (
    MICRO_TOKENS,
    PRECISIONS,
    EpochStats,
    UpdateConfig,
    UpdateResult,
)

LossFn = Callable[..., Any]


# ---------------------------------------------------------------------------------------------
# Log-probs under the adapted policy


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
        contexts = row_contexts(bundle, rollout)
        if not grad:
            rows = torch.arange(rollout.token_ids.shape[0])
            return score_rows(policy, rollout, contexts, rows, MICRO_TOKENS)[0]
        with torch.enable_grad():
            lp, _ = teacher_forced(
                bundle,
                contexts,
                rollout.token_ids.clone(),
                rollout.response_mask > 0,
                logprob_temperature(rollout),
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
    timer = PhaseTimer(adapt_threads=cfg.adapt_threads, base_threads=torch.get_num_threads())
    bundle = policy.bundle
    all_rows = torch.arange(rollout.token_ids.shape[0])
    with bundle.lock, policy.activate(bundle), policy.fused(bundle, PRECISIONS[cfg.precision]):
        contexts = row_contexts(bundle, rollout)
        with timer.phase("rescore"):
            after = score_rows(
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
            row_contexts(bundle, rollout),
            rollout.token_ids,
            rollout.response_mask > 0,
            source=source,
            temperature=logprob_temperature(rollout),
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


@dataclass(frozen=True)
class _StepLoss:
    """The step's loss on a minibatch's rows: every input but the log-probs is fixed for the step.

    Attributes:
        loss_fn: the loss, with the signature of ``core.pipeline.policy_loss``.
        framework: the loss dialect.
        loss_config: that dialect's loss keys (None = its defaults).
        advantages: (B, T) float32 advantages as given.
        mask_f: (B, T) float mask of the response tokens.
        old: (B, T) old log-probs, 0 on padding.
        ref: (B, T) reference log-probs, 0 on padding.
        extra: the extra inputs the loss reads (``_extra_inputs``), mu = old filled in when
            the loss reads mu and none was given.
        want_entropy: the loss has an entropy term (compute the entropy with grad).
        mu_is_old: the loss reads mu and none was given (``UpdateResult.mu_is_old``).
    """

    loss_fn: LossFn
    framework: str
    loss_config: Mapping[str, Any] | None
    advantages: Tensor
    mask_f: Tensor
    old: Tensor
    ref: Tensor
    extra: dict[str, Tensor]
    want_entropy: bool
    mu_is_old: bool

    def __call__(self, rows: Tensor, logprobs: Tensor, entropy: Tensor | None) -> Any:
        return self.loss_fn(
            self.framework,
            self.loss_config,
            logprobs=logprobs,
            old_logprobs=self.old[rows],
            advantages=self.advantages[rows],
            response_mask=self.mask_f[rows],
            ref_logprobs=self.ref[rows],
            entropy=entropy,
            **{name: value[rows] for name, value in self.extra.items()},
        )


def _checked_advantages(
    policy: LoraPolicy, rollout: Rollout, advantages: Tensor, cfg: UpdateConfig
) -> Tensor:
    """The advantages as float32 on the CPU, once the policy, the shapes and ``cfg`` fit."""
    if policy.closed:
        raise ValueError("this LoRA policy was closed")
    policy.check()
    if (cfg.lora_rank, float(cfg.lora_alpha)) != (policy.rank, policy.alpha):
        raise ValueError(
            f"cfg asks for LoRA r={cfg.lora_rank}, alpha={cfg.lora_alpha:g}, but the adapter has "
            f"r={policy.rank}, alpha={policy.alpha:g}: create a new LoraPolicy"
        )
    num_rows, width = rollout.token_ids.shape
    advantages = advantages.detach().float().cpu()
    if advantages.shape != (num_rows, width):
        raise ValueError(f"advantages must be (B, T) = {(num_rows, width)}")
    if cfg.minibatches > num_rows:
        raise ValueError(f"minibatches ({cfg.minibatches}) exceeds the batch's {num_rows} rows")
    return advantages


def _step_loss(
    loss_fn: LossFn,
    framework: str,
    loss_config: Mapping[str, Any] | None,
    rollout: Rollout,
    advantages: Tensor,
    ref_logprobs: Tensor | None,
    given: dict[str, Tensor | None],
) -> _StepLoss:
    """The step's loss with its inputs taken from the batch (``given``: the extra inputs)."""
    num_rows, width = rollout.token_ids.shape
    mask_f = (rollout.response_mask > 0).float()
    old = rollout.logprobs.detach().float() * mask_f
    ref = (rollout.ref_logprobs if ref_logprobs is None else ref_logprobs).detach().float()
    ref = ref * mask_f
    want_entropy = _wants_entropy(framework, loss_config)
    needs = loss_inputs(framework, loss_config)
    extra = _extra_inputs(needs, num_rows, width, **given)
    mu_is_old = "rollout_logprobs" in needs and "rollout_logprobs" not in extra
    if mu_is_old:  # no sampler log-probs: the in-process float sampler is the trainer's model
        extra["rollout_logprobs"] = old
    return _StepLoss(
        loss_fn,
        framework,
        loss_config,
        advantages,
        mask_f,
        old,
        ref,
        extra,
        want_entropy,
        mu_is_old,
    )


@dataclass(frozen=True)
class _EpochsRun:
    """What the epochs left: the log-probs before the step and epoch 1's per-token numbers."""

    before: Tensor
    grad_coef: Tensor
    per_token: dict[str, Tensor]
    epochs: tuple[EpochStats, ...]


def _run_epochs(
    policy: LoraPolicy,
    rollout: Rollout,
    contexts: list[list[int]],
    loss: _StepLoss,
    cfg: UpdateConfig,
    timer: PhaseTimer,
) -> _EpochsRun:
    """K epochs of minibatch steps (the lock is held, the adapter on and fused)."""
    num_rows, width = rollout.token_ids.shape
    mask_f, mask_b, old = loss.mask_f, loss.mask_f > 0, loss.old
    order_gen = torch.Generator().manual_seed(cfg.seed + policy.steps)
    grad_coef = torch.zeros(num_rows, width)
    first_per_token: dict[str, Tensor] = {}
    epochs: list[EpochStats] = []
    before = torch.zeros(num_rows, width)
    all_rows = torch.arange(num_rows)
    optimizer = _optimizer(policy, cfg)
    params = policy.parameters()
    with timer.phase("forward"):
        if cfg.minibatches > 1:  # later minibatches see a moved adapter: score all first
            before = score_rows(
                policy, rollout, contexts, all_rows, cfg.micro_tokens, share=cfg.share_context
            )[0]
    for epoch in range(1, cfg.epochs + 1):
        perm = torch.randperm(num_rows, generator=order_gen) if cfg.minibatches > 1 else all_rows
        tally = _EpochTally(num_rows, width)
        for rows in torch.tensor_split(perm, cfg.minibatches):
            policy.check()  # released meanwhile: stop here, before the next minibatch
            rows = rows.sort().values
            result, coef, current = minibatch_backward(
                Minibatch(
                    policy.bundle,
                    contexts,
                    rollout,
                    rows,
                    old,
                    mask_b,
                    loss.want_entropy,
                    cfg.share_context,
                ),
                loss,
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
    return _EpochsRun(before, grad_coef, first_per_token, tuple(epochs))


def _step_result(
    policy: LoraPolicy,
    cfg: UpdateConfig,
    loss: _StepLoss,
    run: _EpochsRun,
    after: Tensor | None,
    seconds: dict[str, float],
) -> UpdateResult:
    """The step's UpdateResult, every (B, T) tensor 0 on padding."""
    mask_f, before, extra = loss.mask_f, run.before, loss.extra
    sizes = policy.nbytes()
    return UpdateResult(
        framework=loss.framework,
        config=cfg,
        step=policy.steps,
        response_mask=mask_f,
        advantages=loss.advantages * mask_f,
        old_logprobs=loss.old,
        logprobs_before=before * mask_f,
        logprobs_after=None if after is None else after * mask_f,
        delta=None if after is None else (after - before) * mask_f,
        grad_coef=run.grad_coef * mask_f,
        per_token=run.per_token,
        epochs=run.epochs,
        grad_norm=run.epochs[0].grad_norms[0],
        seconds=seconds,
        adapter_bytes=sizes["adapter"],
        optimizer_bytes=sizes["optimizer"],
        rollout_logprobs=(
            extra["rollout_logprobs"] * mask_f if "rollout_logprobs" in extra else None
        ),
        mu_is_old=loss.mu_is_old,
    )


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
    advantages = _checked_advantages(policy, rollout, advantages, cfg)
    given = {"scores": scores, "difficulty": difficulty, "rollout_logprobs": rollout_logprobs}
    loss = _step_loss(loss_fn, framework, loss_config, rollout, advantages, ref_logprobs, given)
    bundle = policy.bundle
    timer = PhaseTimer(adapt_threads=cfg.adapt_threads, base_threads=torch.get_num_threads())
    start_total = time.perf_counter()
    with bundle.lock, policy.activate(bundle), policy.fused(bundle, PRECISIONS[cfg.precision]):
        contexts = row_contexts(bundle, rollout)
        run = _run_epochs(policy, rollout, contexts, loss, cfg, timer)
        with timer.phase("rescore"):
            after = None
            if cfg.rescore:
                all_rows = torch.arange(rollout.token_ids.shape[0])
                after = score_rows(
                    policy, rollout, contexts, all_rows, cfg.micro_tokens, share=cfg.share_context
                )[0]
    policy.steps += 1
    seconds = dict(timer.seconds)
    seconds["total"] = time.perf_counter() - start_total
    return _step_result(policy, cfg, loss, run, after, seconds)
