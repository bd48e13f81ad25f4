"""Async training k steps behind: the sampler is the adapter of step s - k, three log-prob columns.

Inference one step behind the trainer is the 2026 default (prime-rl; AReaL, slime / GLM-5 and TRL
AsyncGRPO bound it at a few steps). A training step s with lag k (``TrainSettings.staleness``,
0..``runfile.MAX_LAG``) samples with the adapter as it was at the start of step max(s - k, 0)
and trains the current one, so every token has three log-probs:

- mu: the sampler's, as the sampler reported them (``behaviour_sampler.draw``'s ``mu``: the fp32
  sampler is the trainer's own float path, bf16 / int8 / top-p are not);
- pi_old: the trainer at the sampler's weights (the draw's ``rollout.logprobs``: the float32
  scoring of the drawn tokens under the lagged adapter);
- pi_theta: the trainer now (``UpdateResult.logprobs_before``).

So with the fp32 sampler mu = pi_old exactly at every lag (same weights, same path), and with
k = 0 pi_theta = pi_old too (up to the update's own forward); with k = 1 the trainer has moved
one update since: drift = log pi_theta - log pi_old is not 0.

``TrainSettings.old_policy`` is what the loss anchors its ratio on: "recomputed" (pi_old, the
correct one), "current" (pi_old := pi_theta: ``loss_fn`` hands the loss each pass's own
log-probs, detached, as the old ones, as SkyRL #1315's ``log_probs = old_log_probs`` and miles PR
#1829's default at its first minibatch: the loss's ratio is exactly 1 and nothing is clipped,
while the update's own ratio statistics still read pi_theta / pi_old, the drift it ignores) or
"mu" (the batch's log-probs replaced by mu, ``anchored``).

Memory (bounded): ``LaggedSampler`` keeps at most k <= 2 copies of the LoRA weights (A and B, no
optimizer state): one lives in a second, never-trained adapter of this session over the shared
model (the sampler adapter, disabled for everyone else as every adapter is), the other (k = 2)
as plain tensors. About 10 MB each for SmolLM2-135M at r = 8. The shared base is never changed.
A lagged run draws in-process, also where an engine serves the current adapter.

``trainer_ahead`` is the same picture for one batch (the mismatch lab): the batch was drawn by the
base model, and a scratch adapter takes k update steps on it, so the base is the adapter of k
steps ago and the scratch adapter's log-probs are pi_theta.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.ops import masked_mean
from roll_viz.core.pipeline import policy_loss
from roll_viz.core.records import Rollout
from roll_viz.lm.behaviour_sampler import draw
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import MAX_LAG, TrainSettings
from roll_viz.lm.update import (
    DEFAULT_LR,
    UpdateConfig,
    UpdateResult,
    policy_logprobs,
    update_step,
)

#: the update's clip masks that make the step's clip fraction (as ``lm.train`` sums them)
CLIP_KEYS = ("clipped_high", "clipped_low")


def active(settings: TrainSettings) -> bool:
    """Whether a run lags its sampler or anchors pi_old elsewhere (else: the synchronous loop)."""
    return settings.staleness > 0 or settings.old_policy != "recomputed"


@dataclass(frozen=True)
class Snapshot:
    """A copy of an adapter's weights as they were at the start of a step.

    Attributes:
        step: the training step whose start they are.
        weights: detached clones of ``LoraPolicy.parameters()``, in that order.
    """

    step: int
    weights: tuple[Tensor, ...]


def _copy(policy: LoraPolicy) -> tuple[Tensor, ...]:
    return tuple(p.detach().clone() for p in policy.parameters())


class LaggedSampler:
    """The adapters of the last k steps of one run, and the adapter that samples with them.

    Call ``sampler()`` at the start of step s (the policy to draw with and the lag it has) and
    ``keep(s)`` after the draw, before the update (the weights of step s are then still the
    current ones). Used from the trainer's thread only.

    Args:
        policy: the trained adapter.
        lag: k in 0..``MAX_LAG``.
        old_policy: the loss's anchor (``runfile.OLD_POLICIES``) of ``update_step``.
    """

    def __init__(self, policy: LoraPolicy, lag: int, old_policy: str = "recomputed") -> None:
        if not 0 <= lag <= MAX_LAG:
            raise ValueError(f"lag must be in 0..{MAX_LAG}, got {lag}")
        self.policy = policy
        self.lag = int(lag)
        self.old_policy = old_policy
        self._shadow: LoraPolicy | None = None
        self._shadow_step: int | None = None  # the step whose start the sampler adapter holds
        self._newer: deque[Snapshot] = deque()  # later steps' weights, oldest first
        #: the step's update (``update_step``; None: no update this step yet)
        self.update: UpdateResult | None = None
        #: the last update's three columns (the Training page reads them)
        self.columns: Columns | None = None

    def sampler(self, step: int) -> tuple[LoraPolicy, int]:
        """(the policy that samples step ``step``, its lag in steps: min(step, k))."""
        if self._shadow is None or self._shadow_step is None:
            return self.policy, 0
        return self._shadow, step - self._shadow_step

    def draw(self, step: int, cfg: SamplingConfig, sampler: str) -> tuple[Rollout, Tensor, int]:
        """Step ``step``'s samples from its lagged adapter: (rollout, mu, the lag), then ``keep``.

        The rollout's log-probs are pi_old, the trainer's float scoring under the lagged weights
        (``behaviour_sampler.draw``); mu is what the sampler ``sampler`` reported.
        """
        policy, lag = self.sampler(step)
        drawn = draw(policy, cfg, sampler)
        self.keep(step)  # before the update: the weights of this step, if still needed
        return drawn.rollout, drawn.mu, lag

    def update_step(
        self, policy: LoraPolicy, rollout: Rollout, advantages: Tensor, **kw: Any
    ) -> UpdateResult:
        """``lm.update.update_step`` with the run's anchor (``loss_fn``); kept for ``finish``."""
        self.update = update_step(
            policy, rollout, advantages, loss_fn=loss_fn(self.old_policy), **kw
        )
        return self.update

    def keep(self, step: int) -> None:
        """Step ``step`` has drawn its samples: keep what step + 1's sampler will need."""
        if self.lag == 0:
            return
        wanted = max(step + 1 - self.lag, 0)  # the step whose start samples step + 1
        if self._shadow_step != wanted:
            if wanted == step:  # lag 1, or the first step: the current weights
                self._load(step, tuple(self.policy.parameters()))
            else:
                while self._newer and self._newer[0].step < wanted:
                    self._newer.popleft()
                snap = self._newer.popleft()
                self._load(snap.step, snap.weights)
        if wanted < step:  # lag 2: step's own weights sample step + 2
            self._newer.append(Snapshot(step, _copy(self.policy)))

    def _load(self, step: int, weights: tuple[Tensor, ...]) -> None:
        self.policy.check()  # released meanwhile: no new adapter for a closing session
        if self._shadow is None:
            p = self.policy
            self._shadow = LoraPolicy(p.bundle, rank=p.rank, alpha=p.alpha, seed=p.seed)
            if p.cancelled:  # released while it was made: ``release`` did not see it
                self._shadow.release()
                p.check()
        with self.policy.bundle.lock, torch.no_grad():
            for dst, src in zip(self._shadow.parameters(), weights, strict=True):
                dst.copy_(src)
        self._shadow_step = step

    def finish(
        self,
        step: int,
        lag: int,
        settings: TrainSettings,
        rollout: Rollout,
        mu: Tensor | None,
        trace: object | None,
    ) -> dict:
        """After the update of ``step``: keep its three columns; the run file's numbers of it.

        ``rollout``: the trained rows (pi_old), ``mu`` their sampler log-probs (None: an
        engine's), ``trace``: None when every group was dropped (no update this step).
        """
        cols = None
        if trace is not None and self.update is not None:
            cols = columns(step, lag, settings, rollout, mu, self.update)
            self.columns = cols or self.columns
        self.update = None
        return lag_metrics(settings, lag, cols)

    def copies(self) -> int:
        """How many copies of the LoRA weights are kept (at most k)."""
        return len(self._newer) + (self._shadow is not None)

    def nbytes(self) -> int:
        """Bytes of the kept copies (the sampler adapter's weights and the tensor snapshots)."""
        each = sum(p.numel() * p.element_size() for p in self.policy.parameters())
        return each * self.copies()

    def close(self) -> None:
        """Remove the sampler adapter from the shared model (takes the model lock)."""
        self._newer.clear()
        if self._shadow is not None:
            self._shadow.close()

    def release(self) -> None:
        """Free the sampler adapter on the reaper thread; returns at once."""
        self._newer.clear()
        if self._shadow is not None:
            self._shadow.release()


def anchored(rollout: Rollout, mu: Tensor | None, old_policy: str) -> Rollout:
    """The batch the update reads: with ``old_policy`` "mu" its log-probs are mu (else as is)."""
    if old_policy != "mu" or mu is None:
        return rollout
    return replace(rollout, logprobs=(mu.float() * rollout.response_mask).clone())


def _current_old_loss(framework: str, loss_config: Any, **inputs: Any) -> Any:
    """``policy_loss`` with pi_old := pi_theta: the old log-probs are the pass's own, detached."""
    return policy_loss(
        framework, loss_config, **{**inputs, "old_logprobs": inputs["logprobs"].detach()}
    )


def loss_fn(old_policy: str) -> Callable[..., Any] | None:
    """The update's ``loss_fn`` for an anchor (None: ``policy_loss`` itself)."""
    return _current_old_loss if old_policy == "current" else None


@dataclass(frozen=True)
class Columns:
    """The three log-prob columns of one step's trained rows (the Training page shows the last).

    Attributes:
        step: the training step.
        lag: the sampler's lag this step had (min(step, k)).
        old_policy: the loss's anchor (``runfile.OLD_POLICIES``).
        mu: (B, T) log mu, 0 on padding.
        old: (B, T) log pi_old (the trainer at the sampler's weights).
        theta: (B, T) log pi_theta before the update.
        advantages: (B, T) the advantages the update used.
        mask: (B, T) bool valid tokens.
        loss_ratio: (B, T) the ratio the loss saw at epoch 1 (1 everywhere for "current").
        clip_frac: the update's clip fraction (the epochs' mean of ``CLIP_KEYS``, as the step's
            ``clip_frac`` metric).
        eps: the clip range.
        tokens: (B,) each row's token display strings (untrusted model text).
    """

    step: int
    lag: int
    old_policy: str
    mu: Tensor
    old: Tensor
    theta: Tensor
    advantages: Tensor
    mask: Tensor
    loss_ratio: Tensor
    clip_frac: float
    eps: float
    tokens: tuple[tuple[str, ...], ...]


def columns(
    step: int,
    lag: int,
    settings: TrainSettings,
    rollout: Rollout,
    mu: Tensor | None,
    result: UpdateResult | None,
) -> Columns | None:
    """The step's three columns from its drawn batch (pi_old), mu and the update's result.

    None without mu (an engine's draw) or without an update.
    """
    if mu is None or result is None:
        return None
    mask = rollout.response_mask > 0
    ratio = result.per_token.get("ratio")
    clip = [sum(e.clip_fractions.get(k, 0.0) for k in CLIP_KEYS) for e in result.epochs]
    return Columns(
        step=step,
        lag=lag,
        old_policy=settings.old_policy,
        mu=torch.where(mask, mu.float(), 0.0),
        old=torch.where(mask, rollout.logprobs.float(), 0.0),
        theta=result.logprobs_before.float().clone(),
        advantages=result.advantages.float().clone(),
        mask=mask.clone(),
        loss_ratio=(ratio if ratio is not None else torch.ones_like(mu)).float().clone(),
        clip_frac=sum(clip) / len(clip),
        eps=float(settings.clip_eps),
        tokens=tuple(tuple(t) for t in rollout.tokens),
    )


def lag_metrics(settings: TrainSettings, lag: int, cols: Columns | None) -> dict:
    """The run file's numbers of a lagged step (``runfile`` lists them; {} for a synchronous run).

    ``cols``: the step's columns (None: no update this step, only the lag is recorded).
    """
    if not active(settings):
        return {}
    if cols is None:
        return {"staleness": lag, "old_policy": settings.old_policy}
    m = cols.mask.double()
    n = int(cols.mask.sum())

    def mean_abs(x: Tensor) -> float:
        return float(masked_mean(x.double().abs(), m)) if n else 0.0

    return {
        "staleness": cols.lag,
        "old_policy": cols.old_policy,
        "drift_abs_mean": mean_abs(cols.theta - cols.old),
        "mu_gap_abs_mean": mean_abs(cols.old - cols.mu),
        "anchor_ratio_mean": float(masked_mean(cols.loss_ratio.double(), m)) if n else 1.0,
    }


def trainer_ahead(
    bundle: ModelBundle,
    rollout: Rollout,
    advantages: Tensor,
    steps: int,
    *,
    framework: str = "verl",
    lr: float = DEFAULT_LR,
    seed: int = 0,
) -> Tensor:
    """The log pi_theta of a batch after ``steps`` updates on it, from the base that drew it.

    A scratch adapter (B = 0: the base model, which sampled the batch) takes ``steps`` update
    steps (``lm.update.update_step``, the framework's default loss, one epoch) on the batch and
    its advantages, then scores the batch; it is removed before returning, the shared base is
    never changed. Takes ``bundle.lock`` per step.

    Args:
        bundle: the model the batch was sampled from (its plain chat contexts).
        rollout: the batch; its log-probs are pi_old.
        advantages: (B, T) its advantages.
        steps: k in 0..``MAX_LAG``.
        framework: the loss dialect.
        lr: the adapter's learning rate (the Update page's default).
        seed: the adapter's init and the minibatch order.

    Returns:
        (B, T) float32 log pi_theta, 0 on padding.

    Raises:
        ValueError: ``steps`` out of 0..``MAX_LAG``.
    """
    if not 0 <= steps <= MAX_LAG:
        raise ValueError(f"steps must be in 0..{MAX_LAG}, got {steps}")
    cfg = UpdateConfig(lr=lr, seed=seed, rescore=False)
    with LoraPolicy(bundle, seed=seed) as scratch:
        for _ in range(steps):
            update_step(scratch, rollout, advantages, framework=framework, cfg=cfg)
        return policy_logprobs(scratch, rollout) * rollout.response_mask
