"""A closing session never waits on model work: runner close, adapter release, fair step turns.

Figures of the defect: closing a tab while its training or Update step ran froze the server's
event loop for 10-41 s (``on_release`` joined the runner thread and waited for the model lock);
twelve runs started at once left the server unanswered beyond 5 s. Here every close must return
within ``CLOSE_BUDGET_S`` while the model lock is held by someone else, the step stops at its next
boundary, and the adapter is freed afterwards on the reaper thread.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from roll_viz.core.pipeline import policy_loss
from roll_viz.lm import lora
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.reaper import REAPER, Cancelled, release_later, trim_memory
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import RewardChoice, StepRecord, TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.step_queue import StepQueue
from roll_viz.lm.train import Trainer, TrainRunner
from roll_viz.lm.update import UpdateConfig, update_step
from tests.lm.helpers import wait_until

CLOSE_BUDGET_S = 0.1  # a close on the event loop must cost less than this (the page needs < 1 s)


def _settings(**kw) -> TrainSettings:
    base = dict(
        prompts=("hello", "tell me"),
        group_size=4,
        max_new_tokens=8,
        steps=50,
        reward=RewardChoice.single("letter_share"),
        model="tiny",
        lr=1e-2,
        seed=3,
    )
    base.update(kw)
    return TrainSettings.flat(**base)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_runner_close_mid_step_returns_at_once_and_frees_later(tiny):
    runner = TrainRunner(tiny, _settings(), queue=StepQueue())
    runner.start()
    assert runner.wait_steps(1, timeout=120)
    assert wait_until(lambda: runner.trainer is not None)
    name = runner.trainer.policy.name
    with tiny.lock:  # another user's step holds the model: the old close waited here
        assert _timed(runner.close) < CLOSE_BUDGET_S
        assert runner.closed
        assert runner.status == "stopped"
        assert name in lora.adapter_names(tiny)  # not freed yet: the lock is taken
    runner.join(timeout=60)
    assert not runner.alive
    assert REAPER.wait_idle(timeout=60)
    assert name not in lora.adapter_names(tiny)
    kept = runner.steps_done
    assert kept >= 1  # the records stay readable after close
    runner.start()  # a closed run does not start again
    assert not runner.alive
    assert runner.steps_done == kept


class _BlockingTrainer:
    """A trainer whose step waits on an event: a step 'in progress' for as long as a test wants."""

    def __init__(self, bundle, settings, gate: threading.Event, entered: threading.Event):
        self.policy = LoraPolicy(bundle, seed=settings.sampling.seed)
        self.gate, self.entered = gate, entered
        self.step = 0

    def run_step(self, keep_samples: bool = True) -> StepRecord:
        self.entered.set()
        self.gate.wait(30)
        self.policy.check()  # the boundary after the phase in progress
        self.step += 1
        return StepRecord(step=self.step - 1, metrics={"reward_mean": 0.0})

    def release(self) -> None:
        self.policy.release()

    def close(self) -> None:
        self.policy.close()


def test_close_while_a_step_is_in_progress_cancels_it_at_the_boundary(tiny):
    gate, entered = threading.Event(), threading.Event()
    runner = TrainRunner(
        tiny,
        _settings(),
        trainer_factory=lambda b, s: _BlockingTrainer(b, s, gate, entered),
        queue=StepQueue(),
    )
    runner.start()
    assert entered.wait(60)
    policy = runner.trainer.policy
    assert _timed(runner.close) < CLOSE_BUDGET_S  # the step is still in progress
    assert runner.alive
    gate.set()
    runner.join(timeout=30)
    assert not runner.alive
    assert runner.steps_done == 0  # the cancelled step is not recorded
    assert runner.status == "stopped"
    assert runner.error == ""
    assert REAPER.wait_idle(timeout=60)
    assert policy.closed
    assert policy.name not in lora.adapter_names(tiny)


def test_reset_returns_at_once_during_a_step(tiny):
    gate, entered = threading.Event(), threading.Event()
    runner = TrainRunner(
        tiny,
        _settings(steps=2),
        trainer_factory=lambda b, s: _BlockingTrainer(b, s, gate, entered),
        queue=StepQueue(),
    )
    runner.start()
    assert entered.wait(60)
    old = runner.trainer.policy
    assert _timed(runner.reset) < CLOSE_BUDGET_S
    assert runner.status == "idle"
    assert runner.steps_done == 0
    gate.set()
    assert REAPER.wait_idle(timeout=60)
    assert old.closed
    runner.start()  # a fresh run after the reset
    runner.join(timeout=60)
    assert runner.status == "done"
    assert runner.steps_done == 2
    runner.close()
    assert REAPER.wait_idle(timeout=60)


def test_release_is_non_blocking_and_cancels_the_update(tiny):
    rollout = sample(
        tiny, SamplingConfig(prompts=("hello",), group_size=4, max_new_tokens=6, seed=1)
    )
    adv = torch.randn(rollout.token_ids.shape) * rollout.response_mask
    policy = LoraPolicy(tiny, seed=0)
    update_step(policy, rollout, adv, cfg=UpdateConfig(minibatches=2))
    assert policy.optimizer is not None
    with tiny.lock:  # another user holds the model: release must not wait for it
        assert _timed(policy.release) < CLOSE_BUDGET_S
        assert policy.cancelled
        assert not policy.closed
    with pytest.raises(Cancelled):
        update_step(policy, rollout, adv)
    assert REAPER.wait_idle(timeout=60)
    assert policy.closed
    assert policy.optimizer is None
    assert policy.name not in lora.adapter_names(tiny)


def test_update_step_stops_at_the_next_minibatch_once_released(tiny):
    rollout = sample(
        tiny, SamplingConfig(prompts=("hello",), group_size=4, max_new_tokens=6, seed=2)
    )
    adv = torch.randn(rollout.token_ids.shape) * rollout.response_mask
    policy = LoraPolicy(tiny, seed=0)
    calls = []

    def loss_then_release(*args, **kwargs):
        calls.append(1)
        policy.release()  # the session closes during the first minibatch
        return policy_loss(*args, **kwargs)

    with pytest.raises(Cancelled):
        update_step(
            policy, rollout, adv, cfg=UpdateConfig(minibatches=4), loss_fn=loss_then_release
        )
    assert len(calls) == 1  # minibatches 2-4 never ran
    assert REAPER.wait_idle(timeout=60)
    assert policy.closed


class _CountingTrainer:
    """A cheap trainer that logs (runner, step) in the order steps ran.

    With ``gate`` each step first waits for it: the step holding the line holds it still, so a
    test can read the whole line however slowly a loaded machine starts the threads.
    """

    def __init__(
        self,
        tag: int,
        log: list,
        lock: threading.Lock,
        seconds: float = 0.01,
        gate: threading.Event | None = None,
    ):
        self.tag, self.log, self.lock, self.seconds, self.gate = tag, log, lock, seconds, gate
        self.step = 0

    def run_step(self, keep_samples: bool = True) -> StepRecord:
        if self.gate is not None:
            assert self.gate.wait(timeout=120), "the test never opened the gate"
        with self.lock:
            self.log.append((self.tag, self.step))
        time.sleep(self.seconds)
        self.step += 1
        return StepRecord(step=self.step - 1, metrics={})

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_twelve_runs_started_at_once_advance_round_robin_with_a_position():
    queue, log, lock, gate = StepQueue(concurrency=1), [], threading.Lock(), threading.Event()
    n, steps = 12, 4
    runners = [
        TrainRunner(
            None,
            _settings(steps=steps),
            trainer_factory=lambda b, s, i=i: _CountingTrainer(i, log, lock, 0.02, gate),
            queue=queue,
        )
        for i in range(n)
    ]
    for r in runners:
        r.start()
    # the first step waits at the gate, so every run gets in line however late its thread starts
    assert wait_until(lambda: queue.waiting == n - 1, timeout=60)
    with queue._cond:  # the line holds still while it is read (its condition's lock is re-entrant)
        positions = sorted(p for p in (r.queue_position for r in runners) if p is not None)
    assert positions == list(range(n))  # one step runs (0), the others are numbered 1, 2, ...
    gate.set()
    for r in runners:
        r.join(timeout=30)
    assert all(r.status == "done" and r.steps_done == steps for r in runners)
    assert all(r.queue_position is None for r in runners)
    # fairness: no run finishes its (k+2)-th step before every run has finished its k-th
    done = [0] * n
    for tag, step in log:
        assert step <= min(done) + 1, (tag, step, done)
        done[tag] = step + 1


def test_a_queued_run_leaves_the_line_when_closed():
    queue, log, lock = StepQueue(concurrency=1), [], threading.Lock()
    slow = TrainRunner(
        None, _settings(steps=1),
        trainer_factory=lambda b, s: _CountingTrainer(0, log, lock, seconds=1.0), queue=queue,
    )  # fmt: skip
    waiting = TrainRunner(
        None, _settings(steps=1),
        trainer_factory=lambda b, s: _CountingTrainer(1, log, lock), queue=queue,
    )  # fmt: skip
    slow.start()
    assert wait_until(lambda: slow.queue_position == 0)
    waiting.start()
    assert wait_until(lambda: waiting.queue_position == 1)
    assert _timed(waiting.close) < CLOSE_BUDGET_S
    waiting.join(timeout=2)  # leaves at once, not after the 1 s step ahead of it
    assert not waiting.alive
    assert waiting.steps_done == 0
    slow.join(timeout=10)
    assert slow.steps_done == 1
    assert [tag for tag, _ in log] == [0]


def test_reaper_runs_jobs_in_order_and_survives_a_failing_one():
    seen = []

    def boom():
        raise RuntimeError("release failed")

    release_later(lambda: seen.append(1))
    release_later(boom)
    release_later(lambda: seen.append(2))
    assert REAPER.wait_idle(timeout=10)
    assert seen == [1, 2]
    assert isinstance(trim_memory(), bool)


def test_trainer_checks_release_before_sampling(tiny):
    trainer = Trainer(tiny, _settings(steps=1))
    trainer.release()
    with pytest.raises(Cancelled):
        trainer.run_step()
    assert REAPER.wait_idle(timeout=60)
    assert trainer.policy.closed


def test_a_policy_dropped_without_close_leaves_no_adapter_in_the_shared_model(tiny):
    import gc

    kept = LoraPolicy(tiny, seed=1)
    dropped = LoraPolicy(tiny, seed=2)
    name = dropped.name
    assert name in lora.adapter_names(tiny)
    del dropped  # its session's state went away without a close
    gc.collect()
    assert REAPER.wait_idle(10)
    assert name not in lora.adapter_names(tiny)
    assert kept.name in lora.adapter_names(tiny)  # another student's adapter stays
    kept.close()
    assert REAPER.wait_idle(10)
    assert kept.name not in lora.adapter_names(tiny)


def test_a_closed_policy_is_not_removed_twice(tiny, monkeypatch):
    import gc

    removed = []
    real = lora._remove
    monkeypatch.setattr(lora, "_remove", lambda b, n: (removed.append(n), real(b, n)))
    policy = LoraPolicy(tiny, seed=3)
    policy.close()
    del policy
    gc.collect()
    assert REAPER.wait_idle(10)
    assert len(removed) == 1
