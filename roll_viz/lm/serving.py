"""One model, many users: the queue on ``bundle.lock``, live progress, and time estimates.

Every request holds ``bundle.lock`` around model and tokenizer use (``lm.models``). This module is
the one place that knows several users share it:

- ``model_turn`` takes the lock for a sampling run, reporting "Waiting for the model ..." while
  it waits, and publishes the run's ``RunProgress`` in ``bundle.usage`` meanwhile;
- ``queue_status(bundle)`` says whether the model is busy, how many requests wait and how far the
  running one is (tokens done / total, ETA);
- ``estimate_seconds(bundle, cfg)`` predicts a request's time from rates measured by earlier
  runs on the bundle (``record_speed`` folds each run in; ``sampling.calibrate`` measures them
  once at start-up), else from a prior based on the parameter count;
- ``plan(bundle, cfg, decode)`` is the UI's one question before a live sample: the estimate, the
  estimate with the int8 fast path, whether the rates are measured, and the queue message.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from roll_viz.lm.admission import PAGE_SLOTS
from roll_viz.lm.decode import FAST_DECODE, DecodeOptions, weights_kind
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.request import PolicySource, SamplingConfig, policy_source


@dataclass
class RunProgress:
    """Live state of one sampling run (read by the UI from any thread; written by the run).

    Attributes:
        tokens_total: rows x max_new_tokens (sampled rows plus greedy rows).
        estimate_decode_s: estimated decode seconds when the run started.
        estimate_score_s: estimated scoring seconds when the run started.
        started: ``time.monotonic()`` when the run got the model.
        tokens_done: tokens decoded so far (rows still running, summed over steps).
        phase: "queued", "decode", "score", "text" or "done".
        fraction: overall fraction in [0, 1].
        message: the last progress message.
    """

    tokens_total: int
    estimate_decode_s: float
    estimate_score_s: float
    started: float = field(default_factory=time.monotonic)
    tokens_done: int = 0
    phase: str = "queued"
    fraction: float = 0.0
    message: str = ""
    decode_started: float | None = None
    score_started: float | None = None

    def elapsed(self) -> float:
        """Seconds since the run got the model."""
        return time.monotonic() - self.started

    def eta_seconds(self) -> float:
        """Estimated seconds left: measured decode rate of this run plus the scoring estimate."""
        now = time.monotonic()
        if self.phase in ("queued", "decode"):
            if self.decode_started is not None and self.tokens_done > 0:
                rate = (now - self.decode_started) / self.tokens_done
                left = (self.tokens_total - self.tokens_done) * rate
            else:
                left = self.estimate_decode_s - self.elapsed()
            return max(0.0, left) + self.estimate_score_s
        if self.phase == "score" and self.score_started is not None:
            return max(0.0, self.estimate_score_s - (now - self.score_started))
        return 0.0


@dataclass(frozen=True)
class QueueStatus:
    """Whether the model is busy, for a "waiting for the model" message.

    Attributes:
        busy: some request holds ``bundle.lock`` (a sampling run, a training step, ...).
        waiting: sampling requests blocked on the lock (not counting the one that holds it).
        running: the progress of the sampling run that holds the lock (None: idle, or the lock
            is held by something else).
    """

    busy: bool
    waiting: int
    running: RunProgress | None

    def message(self) -> str:
        """One sentence for the UI ("" when the model is free)."""
        if not self.busy:
            return ""
        ahead = "Another request is using the model"
        if self.running is not None:
            ahead += f" (about {math.ceil(self.running.eta_seconds())} s left)"
        if self.waiting:
            ahead += f"; {self.waiting} request{'s' if self.waiting > 1 else ''} waiting"
        return ahead + "."


def queue_status(bundle: ModelBundle) -> QueueStatus:
    """Is the model busy, how many sampling requests wait, how far the running one is."""
    usage = bundle.usage
    with usage.guard:
        return QueueStatus(bundle.lock.locked(), usage.waiting, usage.current)


@contextlib.contextmanager
def model_turn(
    bundle: ModelBundle, run: RunProgress, report: Callable[[float, str], None]
) -> Iterator[None]:
    """Hold ``bundle.lock`` (reporting the queue while waiting) and publish ``run`` meanwhile.

    The calling page gives its page slot back for the wait and the run (``admission``).
    """
    with PAGE_SLOTS.released():
        usage = bundle.usage
        if not bundle.lock.acquire(blocking=False):
            with usage.guard:
                usage.waiting += 1
            try:
                report(0.0, "Waiting for the model. " + queue_status(bundle).message())
                while not bundle.lock.acquire(timeout=0.5):
                    report(0.0, "Waiting for the model. " + queue_status(bundle).message())
            finally:
                with usage.guard:
                    usage.waiting -= 1
        try:
            run.started = time.monotonic()
            with usage.guard:
                usage.current = run
                usage.runs += 1
            yield
        finally:
            with usage.guard:
                usage.current = None
            bundle.lock.release()


def _prompt_tokens(bundle: ModelBundle, prompt: str) -> float:
    """Estimated chat-templated prompt length (learned from earlier runs, no tokenizer call)."""
    speed = bundle.usage.speed
    return speed.get("template_tokens", 40.0) + len(prompt) / speed.get("chars_per_token", 4.0)


def _num_params(bundle: ModelBundle) -> int:
    speed = bundle.usage.speed
    if "params" not in speed:
        speed["params"] = sum(p.numel() for p in bundle.model.parameters())
    return speed["params"]


def _step_seconds(bundle: ModelBundle, kind: str, rows: int) -> float:
    """Seconds per decode step at ``rows`` rows: measured (nearest row count, scaled), or a prior.

    The prior assumes 20 GFLOP/s and 8 GB/s of weight reads (an untuned 2-core CPU); a step's
    cost grows like (ROW_OFFSET + rows), the offset standing for the row-independent part.
    """
    table = bundle.usage.speed.get(("step", kind), {})
    offset = 8.0
    if table:
        known = min(table, key=lambda r: abs(r - rows))
        return table[known] * (offset + rows) / (offset + known)
    params = _num_params(bundle)
    factor = 0.4 if kind == "int8" else 1.0
    return factor * (2 * params * rows / 20e9 + 4 * params / 8e9) + 0.002


def _forward_rate(bundle: ModelBundle) -> float:
    """Teacher-forced tokens per second of a batched forward (measured, else a 20 GFLOP/s prior)."""
    return bundle.usage.speed.get("forward_tokens_per_s") or 20e9 / (2 * _num_params(bundle))


def estimates(
    bundle: ModelBundle, cfg: SamplingConfig, decode: DecodeOptions, source: Any
) -> tuple[float, float]:
    """(decode seconds, scoring seconds) expected for a request, assuming no early EOS."""
    kind = weights_kind(bundle, decode, source)
    rows = cfg.num_sequences + (len(cfg.prompts) if cfg.greedy else 0)
    ctx = [_prompt_tokens(bundle, p) for p in cfg.prompts]
    rate = _forward_rate(bundle)
    prefill = sum(ctx) / rate * (1 if decode.share_prompt_prefill else cfg.group_size)
    decode_s = prefill + cfg.max_new_tokens * _step_seconds(bundle, kind, rows)
    passes = _forward_passes(bundle, cfg, decode, source)
    positions = cfg.num_sequences * cfg.max_new_tokens
    per_position = bundle.usage.speed.get(("score_per_position", passes))
    if per_position is not None:
        return decode_s, per_position * positions
    head = bundle.model.get_output_embeddings().weight.numel() / _num_params(bundle)
    scored = passes * cfg.group_size * sum(c + cfg.max_new_tokens for c in ctx)
    return decode_s, (scored + 2 * head * positions) / rate


def _forward_passes(
    bundle: ModelBundle, cfg: SamplingConfig, decode: DecodeOptions, source: Any
) -> int:
    """Teacher-forced forward passes a request's scoring runs (0, 1 or 2)."""
    effective = source or policy_source(cfg)
    reuse = decode.reuse_decode_hidden and weights_kind(bundle, decode, effective) != "int8"
    reuse = reuse and not (decode.static_cache or bundle.device.type == "cuda")
    return (0 if effective.shares_reference else 1) + (0 if reuse else 1)


def estimate_seconds(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    decode: DecodeOptions | None = None,
    source: PolicySource | None = None,
) -> float:
    """Estimated wall seconds of ``sample(bundle, cfg, decode=decode, source=source)``.

    From the rates measured on this bundle by earlier runs (decode seconds per step by row count,
    batched forward tokens per second), else from a prior based on the parameter count. Assumes
    every row runs to ``max_new_tokens`` (EOS only makes it faster) and a free model (add
    ``queue_status(bundle).running.eta_seconds()`` when busy). Needs no lock.
    """
    decode_s, score_s = estimates(bundle, cfg, decode or DecodeOptions(), source)
    return decode_s + score_s


def speed_measured(bundle: ModelBundle) -> bool:
    """True once a run on this bundle has measured its rates (estimates are no longer a prior)."""
    return any(isinstance(k, tuple) and k[0] == "step" for k in bundle.usage.speed)


def _ema(old: float | None, new: float, weight: float = 0.5) -> float:
    return new if old is None else (1 - weight) * old + weight * new


def record_speed(
    bundle: ModelBundle,
    kind: str,
    rows: int,
    timings: dict,
    scored_tokens: int,
    score_s: float,
    prompts: tuple[str, ...],
    ctx_lens: list[int],
    passes: int = 0,
    positions: int = 0,
) -> None:
    """Fold one run's measurements into ``bundle.usage.speed`` (guarded)."""
    speed = bundle.usage.speed
    with bundle.usage.guard:
        if timings.get("steps", 0) > 0:
            table = dict(speed.get(("step", kind), {}))
            table[rows] = _ema(table.get(rows), timings["step_s"])
            speed[("step", kind)] = table
        if score_s > 0 and positions > 0:
            key = ("score_per_position", passes)
            speed[key] = _ema(speed.get(key), score_s / positions)
        if score_s > 0 and scored_tokens > 0:
            rate = scored_tokens / score_s
            speed["forward_tokens_per_s"] = _ema(speed.get("forward_tokens_per_s"), rate)
        elif timings.get("prefill_s", 0) > 0 and kind != "int8":  # no scoring pass: use prefill
            rate = timings["prefill_tokens"] / timings["prefill_s"]
            speed["forward_tokens_per_s"] = _ema(speed.get("forward_tokens_per_s"), rate)
        chars = sum(len(p) for p in prompts)
        # template overhead: shortest prompt's length minus its chars at the current ratio
        cpt = speed.get("chars_per_token", 4.0)
        template = min(n - len(p) / cpt for p, n in zip(prompts, ctx_lens, strict=True))
        speed["template_tokens"] = max(0.0, template)
        body = sum(ctx_lens) - len(prompts) * speed["template_tokens"]
        if chars > 0 and body > 0:
            speed["chars_per_token"] = chars / body


@dataclass(frozen=True)
class SamplePlan:
    """What a request will cost, known before it runs (for the "Sampling ... about N s" label).

    Attributes:
        seconds: estimated wall seconds with the asked decode options (a free model assumed).
        fast_seconds: the same request with the int8 fast path (``FAST_DECODE``).
        measured: the estimates come from rates measured on this bundle (else from a prior).
        queue_message: who holds the model now ("" when it is free), from ``QueueStatus``.
    """

    seconds: float
    fast_seconds: float
    measured: bool
    queue_message: str


def plan(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    decode: DecodeOptions | None = None,
    source: PolicySource | None = None,
) -> SamplePlan:
    """The cost of ``sample(bundle, cfg, decode=decode, source=source)`` and the queue, now.

    Needs no lock.

    Args:
        bundle: the shared model.
        cfg: what to sample.
        decode: the decode options the request will use (None: the defaults).
        source: the policy (None: ``policy_source(cfg)``).

    Returns:
        A SamplePlan.
    """
    return SamplePlan(
        seconds=estimate_seconds(bundle, cfg, decode, source),
        fast_seconds=estimate_seconds(bundle, cfg, FAST_DECODE, source),
        measured=speed_measured(bundle),
        queue_message=queue_status(bundle).message(),
    )
