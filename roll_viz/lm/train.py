"""Live RL training on the user's prompts: sample -> reward -> KL -> advantages -> update, N steps.

One step (``train_step``), in order:

1. sample G responses per prompt from the trained policy (a per-user LoRA adapter over the shared
   base, ``roll_viz.lm.lora``), scored token by token under the policy and the reference (the
   base with the adapter off). ``lm.sampling.sample`` holds ``bundle.lock`` for that call only;
2. score them with the run's reward (``runfile.RewardChoice`` over ``roll_viz.rewards``);
3. run the chosen framework's reward -> advantage pipeline (``core.pipeline.run``) with the current
   beta put into the dialect's in-reward KL coefficient; the dialect's own adaptive controller
   (``core.pipeline.kl.next_beta``, n_steps = batch size) gives next step's beta from this
   step's real KL;
4. one policy update (``lm.update.update_step``) on those advantages, under ``bundle.lock``.

The model lock is held per phase of a step, never for a whole run, so other users' sampling and
slider work interleave with a training run.

``TrainRunner`` runs the loop in a background thread per user (start, pause, resume, stop,
reset), keeps every step's ``StepRecord`` (compact: plain floats and short lists, token data
rounded), and stops with a message on an error, keeping the steps done so far. Every step takes
a turn in ``step_queue.TRAIN_QUEUE`` (first come first served, one step at a time by default),
so many runs started at once advance round-robin and each can say its place in line.
``close()`` never waits: it marks the run cancelled (the step in progress stops at its next
phase boundary) and the adapter and optimizer are freed off the caller's thread (``reaper``).

The run file these records make (JSONL, ``SCHEMA``) and the settings that define a run are in
``lm.runfile``.

Simplifications against ROLL / verl / OpenRLHF: one process, one LoRA adapter instead of a full
actor, a zero critic for GAE (V = 0), the reference is the base model, one optimizer step per
rollout by default, rewards computed on the text (no reward model).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core import pipeline
from roll_viz.core.pods import max_variance_subset
from roll_viz.core.records import Rollout, Trace, batch_from_rollout, select_rows
from roll_viz.lm import lagged, train_batch
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.reaper import Cancelled, release_later
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import StepRecord, StepSamples, TrainRun, TrainSettings, loss_config
from roll_viz.lm.step_queue import TRAIN_QUEUE, StepQueue
from roll_viz.lm.threads import lower_priority
from roll_viz.lm.update import UpdateConfig, group_difficulty

MAX_HISTORY_SAMPLES = 40  # steps whose full samples the runner keeps in memory (plus step 0)


# ---------------------------------------------------------------------------------------------
# One step


class Trainer:
    """The training state of one user: settings, the LoRA policy, beta, the step counter.

    Not thread-safe by itself; ``TrainRunner`` drives it from one thread. Model use goes through
    ``lm.sampling.sample`` and ``lm.update.update_step``, each holding ``bundle.lock`` for its own
    call only.
    """

    def __init__(self, bundle: Any, settings: TrainSettings) -> None:
        self.bundle = bundle
        self.settings = settings
        self.policy = LoraPolicy(
            bundle, rank=settings.lora_rank, alpha=settings.lora_alpha, seed=settings.sampling.seed
        )
        self.beta = float(settings.beta)
        self.entropy = settings.entropy_controller()  # the adaptive entropy target, or None
        self.running = None
        self.step = 0
        self._step_mu: Tensor | None = None  # (B, T) log mu of the rows being trained
        self.lagged = lagged.LaggedSampler(self.policy, settings.staleness, settings.old_policy)
        # (cfg, policy, step) -> Rollout; None: ``behaviour_sampler.draw`` (an engine sets its own)
        self.sampler: Callable[[SamplingConfig, LoraPolicy, int], Rollout] | None = None

    def close(self) -> None:
        """Remove the adapter from the shared model (idempotent; takes the model lock)."""
        self.lagged.close()
        self.policy.close()

    def release(self) -> None:
        """Cancel work on the adapter and free it on the reaper thread; returns at once."""
        self.lagged.release()
        self.policy.release()

    def _update(self, rollout: Rollout, trace: Trace) -> dict:
        """One ``lm.update.update_step`` on the trace's advantages; its numbers as a flat dict."""
        s = self.settings
        cfg = UpdateConfig(
            lr=s.lr,
            epochs=s.ppo_epochs,
            minibatches=min(s.minibatches, rollout.token_ids.shape[0]),
            lora_rank=s.lora_rank,
            lora_alpha=s.lora_alpha,
            seed=s.sampling.seed,
            rescore=False,  # the next step samples afresh: no second pass over this batch
        )
        result = self.lagged.update_step(  # lm.update's, with the run's pi_old anchor
            self.policy,
            rollout,
            trace.advantages.float(),
            framework=s.framework,
            loss_config=loss_config(s, self.beta, self.entropy),
            cfg=cfg,
            # read only by the loss options that need them (ROLL topr, difficulty_loss_weight,
            # a train/rollout correction: mu of the run's sampler, run_step's ``_step_mu``)
            scores=trace.scores,
            difficulty=group_difficulty(trace.scores, rollout.group_ids),
            rollout_logprobs=self._step_mu,
        )
        last = result.epochs[-1]
        clip = [
            e.clip_fractions.get("clipped_high", 0.0) + e.clip_fractions.get("clipped_low", 0.0)
            for e in result.epochs
        ]
        dual = [e.clip_fractions.get("dual_clipped", 0.0) for e in result.epochs]
        out: dict[str, float] = {
            "loss": last.terms.get("total", math.nan),
            "grad_norm": result.grad_norm,
            "clip_frac": sum(clip) / len(clip),
            "dual_clip_frac": sum(dual) / len(dual),
            "ratio_mean": last.ratio_mean,
            "ratio_min": last.ratio_min,
            "ratio_max": last.ratio_max,
        }
        for key, value in last.terms.items():
            out[f"term_{key}"] = value
        for key, value in last.metrics.items():
            out[key] = value
        for key, value in result.seconds.items():
            out[f"seconds_{key}"] = value
        return out

    def run_step(self, keep_samples: bool = True) -> StepRecord:
        """Do one sample -> reward -> KL -> advantages -> update step and return its record.

        Raises:
            Cancelled: the policy was released; checked before sampling and before the update.
        """
        s = self.settings
        self.policy.check()
        t0 = time.perf_counter()
        # the run's sampling, with this step's seed and only what training reads (no greedy row,
        # top-1, one probe feature)
        cfg = replace(
            s.sampling, seed=s.sampling_seed(self.step), greedy=False, topk=1, feature_dim=1
        )
        # the sampler's log-probs of the tokens (None: an engine's) and its lag (``lm.lagged``)
        mu: Tensor | None = None
        if self.sampler is not None and not lagged.active(s):  # a lag draws in-process
            rollout, lag = self.sampler(cfg, self.policy, self.step), 0
        else:
            rollout, mu, lag = self.lagged.draw(self.step, cfg, s.sampler)
        t1 = time.perf_counter()
        prompts = [rollout.prompts[int(g)] for g in rollout.group_ids]
        scores = s.reward.score(prompts, rollout.responses, step=self.step)
        pods_stats = {}
        if s.pods_m:  # PODS: keep the m of n rollouts per prompt with the largest reward variance
            g = s.sampling.group_size
            groups = scores.view(len(rollout.prompts), g)  # rows of a prompt contiguous
            kept = max_variance_subset(groups, s.pods_m)  # (P, m) indices into each group
            rows = (kept + g * torch.arange(groups.shape[0])[:, None]).flatten()
            pods_stats = {
                "pods_std_all": float(groups.std(dim=1).mean()),
                "pods_std_kept": float(torch.gather(groups, 1, kept).std(dim=1).mean()),
            }
            rollout, scores = select_rows(rollout, rows), scores[rows]
            mu = None if mu is None else mu[rows]
        t2 = time.perf_counter()
        seen, seen_scores = rollout, scores  # the step's samples, before any group is dropped
        filter_stats, kept_rows = {}, None
        if s.filter_zero_variance:
            flat = train_batch.zero_variance_rows(scores, rollout.group_ids)
            filter_stats = {"filtered_share": float(flat.float().mean())}
            rollout, scores, kept_rows = train_batch.drop_groups(rollout, scores, ~flat)
        self._step_mu = mu if mu is None or kept_rows is None else mu[kept_rows]
        upd: dict[str, float] = {}
        trace = None
        if rollout.group_ids.numel():
            batch = batch_from_rollout(
                rollout, scores, values=torch.zeros_like(rollout.response_mask)
            )
            trace = pipeline.run(batch, s.framework, s.dialect_config(self.beta), self.running)
        t3 = time.perf_counter()
        self.policy.check()
        if trace is not None:
            upd = self._update(lagged.anchored(rollout, self._step_mu, s.old_policy), trace)
        t4 = time.perf_counter()
        metrics = train_batch.step_metrics(
            s, seen, seen_scores, trace, upd, trained=rollout, beta=self.beta
        )
        metrics.update(pods_stats | filter_stats)
        if s.filter_zero_variance:  # the estimate over every sample, as kl_exact
            metrics["kl_est"] = train_batch.seen_kl_est(
                s, seen, seen_scores, self.beta, self.running
            )
        if mu is not None and train_batch.records_mismatch(s, self.beta):
            metrics.update(train_batch.mismatch_metrics(s, seen, mu, self.beta))
        metrics.update(self.lagged.finish(self.step, lag, s, rollout, self._step_mu, trace))
        metrics["seconds"] = {
            "sample": t1 - t0,
            "score": t2 - t1,
            "advantage": t3 - t2,
            "update": t4 - t3,
            "total": t4 - t0,
        }
        samples = None
        if keep_samples:
            advantages = train_batch.seen_advantages(seen, kept_rows, trace)
            samples = StepSamples.from_rollout(seen, seen_scores, advantages)
        if self.entropy is not None and trace is not None:
            self.entropy, moved = train_batch.entropy_step(self.entropy, rollout)
            metrics.update(moved)
        record = StepRecord(
            step=self.step, metrics=train_batch.round_metrics(metrics), samples=samples
        )
        if trace is not None:  # a step with every group dropped leaves the controller as it was
            self.running = trace.running
            if s.beta_mode == "adaptive":
                self.beta = float(trace.next_beta)
        self.step += 1
        return record


# ---------------------------------------------------------------------------------------------
# Background runner (one per user session)

RUNNER_STATES = ("idle", "running", "paused", "stopped", "done", "error")


class TrainRunner:
    """Runs a ``Trainer`` in a background thread: start, pause, resume, stop, reset.

    Every public method is thread-safe and returns at once (``join`` and the ``wait_*`` methods
    excepted). The thread checks for pause and stop between steps (a step in progress finishes
    first) and takes a turn in ``queue`` for every step; ``close`` cancels the step in progress
    at its next phase boundary. History is bounded: every step's metrics are kept; full samples
    for step 0, every ``settings.sample_every``-th step, the latest step and at most
    ``MAX_HISTORY_SAMPLES`` others.

    Attributes:
        settings: the run's settings.
        status: one of RUNNER_STATES.
        error: the message of the error that stopped the run ("" when none).
    """

    def __init__(
        self,
        bundle: Any,
        settings: TrainSettings,
        on_step: Callable[[StepRecord], None] | None = None,
        trainer_factory: Callable[[Any, TrainSettings], Trainer] | None = None,
        queue: StepQueue | None = None,
    ) -> None:
        self.bundle = bundle
        self.queue = queue or TRAIN_QUEUE
        self._ticket: int | None = None
        self._closed = False
        self.settings = settings
        self.on_step = on_step
        self._factory = trainer_factory or Trainer
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._trainer: Trainer | None = None
        self._records: list[StepRecord] = []
        self._paused = False
        self._parked = False  # the thread is waiting in a pause (no step in progress)
        self._stop = False
        self._generation = 0
        self.status = "idle"
        self.error = ""
        self.started_at: float | None = None

    # -- control ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or continue after stop/done) the run in a background thread; no-op if running."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._paused = False
                self._wake.notify_all()
                return
            if self.status == "error" or self._closed:
                return
            if self.steps_done >= self.settings.steps:
                self.status = "done"
                return
            self._stop, self._paused = False, False
            self.status = "running"
            self.started_at = time.time()
            self._thread = threading.Thread(
                target=self._loop, args=(self._generation,), name="roll-viz-train", daemon=True
            )
            self._thread.start()

    def pause(self) -> None:
        """Pause after the current step."""
        with self._lock:
            if self.status == "running":
                self._paused = True
                self.status = "paused"

    def resume(self) -> None:
        """Continue a paused run (starts a stopped one again)."""
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if alive:
                self._paused = False
                self.status = "running"
                self._wake.notify_all()
                return
        self.start()

    def stop(self) -> None:
        """Stop after the current step (the steps done are kept; ``start`` continues)."""
        with self._lock:
            self._stop = True
            self._paused = False
            self._wake.notify_all()
            if self.status in ("running", "paused"):
                self.status = "stopped"

    def reset(self, settings: TrainSettings | None = None) -> None:
        """Stop, forget every step and the trained policy; optionally switch settings.

        Returns at once: the old thread (a new generation no longer counts it) stops at its next
        boundary and the old adapter is freed on the reaper thread.
        """
        self.stop()
        with self._lock:
            self._generation += 1
            trainer, self._trainer = self._trainer, None
            self._thread = None  # the old thread ends by itself; start() may begin a new one
            self._records = []
            self.status, self.error = "idle", ""
            if settings is not None:
                self.settings = settings
        if trainer is not None:
            trainer.release()
        self.queue.wake()

    def close(self) -> None:
        """Stop and free the trained adapter; returns at once (the records stay readable).

        What a closing session calls on Streamlit's event loop: nothing here waits for the step
        in progress or for the model lock. The step stops at its next phase boundary
        (``reaper.Cancelled``), a queued step leaves the line, and the adapter and its optimizer
        are freed on the reaper thread, which then trims the heap.
        """
        self.stop()
        with self._lock:
            self._closed = True
            self._generation += 1  # a step finishing now is not appended
            trainer, self._trainer = self._trainer, None
        if trainer is not None:
            trainer.release()
        self.queue.wake()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran (the run cannot start again)."""
        return self._closed

    @property
    def queue_position(self) -> int | None:
        """0 while this run's step has the model, k when k-th in line, None otherwise."""
        return self.queue.position(self._ticket)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (e.g. after stop or when the run completes)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def wait_steps(self, n: int, timeout: float = 60.0) -> bool:
        """Block until at least ``n`` steps are done or the run ends; True if reached."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._records) < n and self.status in ("running",):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            return len(self._records) >= n

    def wait_paused(self, timeout: float = 60.0) -> bool:
        """After ``pause``: block until the step in progress has finished; True once parked."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._paused and not self._parked and self.alive:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            return self._parked

    # -- reading ------------------------------------------------------------------------------
    @property
    def steps_done(self) -> int:
        """Number of finished steps."""
        return len(self._records)

    @property
    def alive(self) -> bool:
        """True while the background thread exists (running or paused)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def trainer(self) -> Trainer | None:
        """The Trainer (holds the trained policy) once the run has started."""
        return self._trainer

    def records(self) -> list[StepRecord]:
        """A copy of the step records so far."""
        with self._lock:
            return list(self._records)

    def run(self, label: str = "") -> TrainRun:
        """The run so far as a TrainRun (a snapshot)."""
        with self._lock:
            status = "running" if self.status == "running" else self.status
            return TrainRun(
                settings=self.settings,
                steps=tuple(self._records),
                model=getattr(self.bundle, "name", ""),
                label=label or self.settings.label,
                status=status,
                message=self.error,
            )

    # -- the thread -----------------------------------------------------------------------------
    def _keep_samples(self, step: int) -> bool:
        s = self.settings
        return step == 0 or step % s.sample_every == 0 or step == s.steps - 1

    def _cancelled(self, generation: int) -> bool:
        return self._stop or generation != self._generation

    def _loop(self, generation: int) -> None:
        lower_priority()  # the pages and the event loop go first; training takes what is left
        try:
            self._steps(generation)
        except Cancelled:  # closed or reset meanwhile: the step stopped at a boundary
            pass
        except Exception as err:  # the run stops with a message; the steps done are kept
            with self._lock:
                if generation == self._generation:
                    self.status = "error"
                    self.error = f"{type(err).__name__}: {err}"
                    self._wake.notify_all()
        finally:
            with self._lock:
                if generation == self._generation:
                    self._ticket = None
                self._wake.notify_all()

    def _steps(self, generation: int) -> None:
        if self._trainer is None:
            trainer = self._factory(self.bundle, self.settings)
            with self._lock:
                if generation != self._generation:
                    orphan: Trainer | None = trainer
                else:
                    orphan, self._trainer = None, trainer
            if orphan is not None:  # closed while the adapter was being made
                release_later(orphan.close)
                return
        while True:
            with self._lock:
                while self._paused and not self._stop:
                    self._parked = True
                    self._wake.notify_all()
                    self._wake.wait()
                self._parked = False
                if self._stop or generation != self._generation:
                    return
                if len(self._records) >= self.settings.steps:
                    self.status = "done"
                    self._wake.notify_all()
                    return
                trainer = self._trainer
                ticket = self._ticket = self.queue.ticket()
            if trainer is None:
                return
            with self.queue.turn(ticket, lambda: self._cancelled(generation)):
                record = trainer.run_step(keep_samples=True)
            with self._lock:
                if generation != self._generation:
                    return
                self._ticket = None
                self._append(record)
                self._wake.notify_all()
            if self.on_step is not None:
                self.on_step(record)

    def _append(self, record: StepRecord) -> None:
        """Append a record, keeping memory bounded (caller holds the lock)."""
        if self._records:
            last = self._records[-1]
            if last.samples is not None and not self._keep_samples(last.step):
                self._records[-1] = last.without_samples()
        self._records.append(record)
        kept = [r for r in self._records if r.samples is not None and r.step != 0]
        excess = len(kept) - MAX_HISTORY_SAMPLES
        for r in kept[: max(excess, 0)]:
            self._records[r.step] = r.without_samples()
