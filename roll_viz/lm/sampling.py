"""Sample G responses per prompt from the policy and score every token under policy and reference.

``sample(bundle, cfg)`` is the whole flow, in order:

1. chat-template each prompt twice: the policy's context (through a ``PolicySource``) and the
   reference's context (the plain prompt);
2. decode all P*G sampled rows (plus P greedy rows for ReMax's baseline) in ONE batch with a KV
   cache, left-padded prompts, temperature and top-p, drawing with ``torch.multinomial`` from a
   per-request ``torch.Generator`` seeded from ``cfg.seed`` (never the global RNG), stopping each
   row at EOS or after ``max_new_tokens``;
3. one batched teacher-forced forward pass per model over context + response, then log-probs,
   exact KL, entropy and top-K from the final hidden states (``roll_viz.lm.scoring``);
4. reference-model features for a value probe: the final hidden state at each response position
   times a FIXED seeded random projection to F dims.

Everything runs inside ``torch.inference_mode()`` while holding ``bundle.lock``.

For a classroom (many students, one CPU model):

- ``shared_sample`` = ``sample`` with single-flight: identical concurrent requests (same bundle,
  config, decode options, prompt-only policy) share one run and get the same Rollout.
- ``queue_status(bundle)`` says whether the model is busy, how many requests wait and how far the
  running one is (``RunProgress``: tokens done / total, ETA); ``sample`` itself reports
  "Waiting for the model ..." through ``progress`` while it waits for the lock.
- ``estimate_seconds(bundle, cfg)`` predicts a request's time from rates measured by earlier
  runs on the bundle (``calibrate(bundle)`` measures them once at start-up).
- The decode loop runs each distinct prompt's prefill once and copies its KV cache to the G rows
  (the teacher-forced scoring passes do the same), keeps prefill logits for the last position
  only, skips the sort when top_p == 1, and draws the sampling noise of the next step in a helper
  thread; all of it gives the tokens of the plain loop (same seed, same bytes). The one switch
  that changes draws is the explicit ``DecodeOptions(weights="int8")`` (``FAST_DECODE``): decode
  with an int8 dynamically quantized copy, score with the float model, labelled in ``meta``.

Simplifications against real RL stacks (verl, ROLL, OpenRLHF):

- Policy and reference share one copy of the weights. ``identical``: the policy IS the reference
  (the first step of RL training), so the reference scores are the policy's, reused: KL is exactly
  0. ``steered``: the policy sees a hidden instruction appended to the user turn, the reference
  scores the same response tokens without it. That gives a real per-token KL without training.
  A policy fine-tuned in the app would be a third ``PolicySource`` (a LoRA adapter over the base).
- The reported log-probs are ``log_softmax(logits / temperature)`` over the full vocabulary,
  without top-p truncation (with temperature 0, greedy, they use temperature 1), from final
  hidden states of the float model: the reference's from a teacher-forced pass; the policy's
  from the hidden states the float decode loop computed anyway (verl and ROLL recompute "old
  log-probs" because their rollout engine differs from the trainer; here it is the same model,
  so the two agree up to float rounding, about 1e-6). With int8 decode weights, a static cache,
  or ``reuse_decode_hidden=False`` the policy gets its own teacher-forced pass.
- Rows of one prompt share the prompt's context, computed once and copied (not paged/shared in
  memory) to each row's KV cache.
"""

from __future__ import annotations

import contextlib
import copy
import math
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from roll_viz.core.records import Rollout
from roll_viz.lm import threads
from roll_viz.lm.decode_step import LeanDecoder
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.scoring import score_positions

PolicyMode = Literal["identical", "steered"]
POLICY_MODES: tuple[str, ...] = ("identical", "steered")
DEFAULT_INSTRUCTION = "Answer like an excited pirate."

# Hard limits: a config beyond them is rejected.
MAX_PROMPTS = 16
MAX_GROUP_SIZE = 64
MAX_NEW_TOKENS = 512
MAX_SEQUENCES = 256  # P * G
MAX_PROMPT_CHARS = 2000
MAX_INSTRUCTION_CHARS = 300
MAX_TOPK = 20
MAX_TEMPERATURE = 5.0
# Classroom limits applied by ``capped`` (what a CPU box answers in seconds).
CLASS_MAX_PROMPTS = 8
CLASS_MAX_GROUP_SIZE = 16
CLASS_MAX_NEW_TOKENS = 128

FEATURE_SEED = 1729  # the fixed random projection of hidden states to probe features
STATIC_CACHE_STEP = 128  # static KV cache lengths are multiples of this


@dataclass(frozen=True)
class SamplingConfig:
    """What to sample. Frozen and hashable: a valid Streamlit cache key.

    Attributes:
        prompts: (P,) user prompts, plain text (the chat template is applied by ``sample``).
        group_size: G samples per prompt.
        temperature: softmax temperature for sampling and for the reported log-probs; 0 = greedy.
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        max_new_tokens: response length cap; a row that hits it ends with reason "length".
        seed: seeds the per-request generator; the same seed reproduces the whole batch.
        policy_mode: "identical" (policy = reference, KL exactly 0) or "steered" (the policy sees
            ``instruction``, the reference does not).
        instruction: the steered policy's hidden instruction (ignored in identical mode).
        topk: K alternatives stored per position.
        greedy: also decode one greedy response per prompt (ReMax's baseline).
        feature_dim: F, dims of the value-probe features.
    """

    prompts: tuple[str, ...]
    group_size: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    seed: int = 0
    policy_mode: PolicyMode = "identical"
    instruction: str = DEFAULT_INSTRUCTION
    topk: int = 5
    greedy: bool = True
    feature_dim: int = 16

    def __post_init__(self) -> None:
        if isinstance(self.prompts, str):
            raise ValueError("prompts must be a tuple of strings, not one string")
        object.__setattr__(self, "prompts", tuple(self.prompts))
        problems = _problems(self)
        if problems:
            raise ValueError("invalid SamplingConfig: " + "; ".join(problems))

    @property
    def num_sequences(self) -> int:
        """B = P * G."""
        return len(self.prompts) * self.group_size


def _problems(cfg: SamplingConfig) -> list[str]:
    """Every rule the config breaks, as readable sentences (empty when valid)."""
    out = []
    if not cfg.prompts:
        out.append("give at least one prompt")
    if len(cfg.prompts) > MAX_PROMPTS:
        out.append(f"at most {MAX_PROMPTS} prompts (got {len(cfg.prompts)})")
    for i, prompt in enumerate(cfg.prompts):
        if not isinstance(prompt, str) or not prompt.strip():
            out.append(f"prompt {i + 1} is empty")
        elif len(prompt) > MAX_PROMPT_CHARS:
            out.append(f"prompt {i + 1} is longer than {MAX_PROMPT_CHARS} characters")
    if not 1 <= cfg.group_size <= MAX_GROUP_SIZE:
        out.append(f"group_size must be 1..{MAX_GROUP_SIZE} (got {cfg.group_size})")
    if len(cfg.prompts) * cfg.group_size > MAX_SEQUENCES:
        out.append(f"prompts x group_size must be at most {MAX_SEQUENCES}")
    if not 1 <= cfg.max_new_tokens <= MAX_NEW_TOKENS:
        out.append(f"max_new_tokens must be 1..{MAX_NEW_TOKENS} (got {cfg.max_new_tokens})")
    if not (math.isfinite(cfg.temperature) and 0.0 <= cfg.temperature <= MAX_TEMPERATURE):
        out.append(f"temperature must be in [0, {MAX_TEMPERATURE}] (got {cfg.temperature})")
    if not (math.isfinite(cfg.top_p) and 0.0 < cfg.top_p <= 1.0):
        out.append(f"top_p must be in (0, 1] (got {cfg.top_p})")
    if not 0 <= cfg.seed < 2**63:
        out.append("seed must be a non-negative integer below 2**63")
    if cfg.policy_mode not in POLICY_MODES:
        out.append(f"policy_mode must be one of {POLICY_MODES} (got {cfg.policy_mode!r})")
    if cfg.policy_mode == "steered" and not cfg.instruction.strip():
        out.append("steered mode needs a non-empty instruction")
    if len(cfg.instruction) > MAX_INSTRUCTION_CHARS:
        out.append(f"instruction is longer than {MAX_INSTRUCTION_CHARS} characters")
    if not 1 <= cfg.topk <= MAX_TOPK:
        out.append(f"topk must be 1..{MAX_TOPK}")
    if not 1 <= cfg.feature_dim <= 64:
        out.append("feature_dim must be 1..64")
    return out


def capped(
    cfg: SamplingConfig,
    max_prompts: int = CLASS_MAX_PROMPTS,
    max_group_size: int = CLASS_MAX_GROUP_SIZE,
    max_new_tokens: int = CLASS_MAX_NEW_TOKENS,
) -> tuple[SamplingConfig, tuple[str, ...]]:
    """Shrink a config to classroom limits and say what changed.

    Args:
        cfg: a valid config.
        max_prompts: keep at most this many prompts (the first ones).
        max_group_size: cap on G.
        max_new_tokens: cap on the response length.

    Returns:
        (the capped config, one human-readable message per change; empty when nothing changed).
    """
    messages = []
    changes: dict[str, Any] = {}
    if len(cfg.prompts) > max_prompts:
        changes["prompts"] = cfg.prompts[:max_prompts]
        messages.append(f"Using the first {max_prompts} of {len(cfg.prompts)} prompts.")
    if cfg.group_size > max_group_size:
        changes["group_size"] = max_group_size
        messages.append(f"Group size capped at {max_group_size} (asked {cfg.group_size}).")
    if cfg.max_new_tokens > max_new_tokens:
        changes["max_new_tokens"] = max_new_tokens
        messages.append(
            f"Response length capped at {max_new_tokens} tokens (asked {cfg.max_new_tokens})."
        )
    return (replace(cfg, **changes) if changes else cfg), tuple(messages)


# ---------------------------------------------------------------------------------------------
# Policy sources: how the policy differs from the reference (the plain base model, plain prompt)


class PolicySource(Protocol):
    """How the policy is obtained from the shared base model.

    The reference is always the base model on the plain prompt. A source gives the policy's
    prompt ids and, through ``activate``, may switch the weights the policy runs with (the hook a
    LoRA adapter trained in the app would use; it must not change the model for other requests).
    """

    mode: str
    shares_reference: bool  # True: the policy IS the reference, score once, KL exactly 0

    def context_ids(self, bundle: ModelBundle, prompt: str) -> list[int]:
        """Policy prompt ids (chat-templated). Caller holds ``bundle.lock``."""
        ...

    def activate(self, bundle: ModelBundle) -> contextlib.AbstractContextManager:
        """Context in which ``bundle.model`` computes the policy (no-op for prompt-only sources)."""
        ...


@dataclass(frozen=True)
class IdenticalPolicy:
    """Policy = reference: the state at the first step of RL training (KL exactly 0)."""

    mode: str = "identical"
    shares_reference: bool = True

    def context_ids(self, bundle: ModelBundle, prompt: str) -> list[int]:
        """The plain chat-templated prompt."""
        return bundle.chat_ids(prompt)

    def activate(self, bundle: ModelBundle) -> contextlib.AbstractContextManager:
        """No-op: the base weights are the policy."""
        return contextlib.nullcontext()


@dataclass(frozen=True)
class SteeredPolicy:
    """Policy = base model plus a hidden instruction in its prompt; the reference never sees it."""

    instruction: str = DEFAULT_INSTRUCTION
    mode: str = "steered"
    shares_reference: bool = False

    def context_ids(self, bundle: ModelBundle, prompt: str) -> list[int]:
        """The chat-templated prompt with the instruction appended to the user turn."""
        return bundle.chat_ids(prompt, self.instruction)

    def activate(self, bundle: ModelBundle) -> contextlib.AbstractContextManager:
        """No-op: only the prompt differs."""
        return contextlib.nullcontext()


def policy_source(cfg: SamplingConfig) -> PolicySource:
    """The PolicySource a config asks for."""
    if cfg.policy_mode == "steered":
        return SteeredPolicy(cfg.instruction)
    return IdenticalPolicy()


# ---------------------------------------------------------------------------------------------
# Decode options


DecodeWeights = Literal["model", "int8"]


@dataclass(frozen=True)
class DecodeOptions:
    """How the decode loop runs.

    Every switch except ``weights`` is speed only: the sampled tokens are those of the plain loop
    (same seed, same bytes; tested on the tiny model). ``weights="int8"`` is an explicit,
    approximate option: it changes which tokens are drawn, never how they are scored.

    Attributes:
        static_cache: preallocate a ``StaticCache`` (fixed shapes, needed for a compiled decode
            step); None means "on CUDA only".
        compile_decode: run the one-token decode step through ``torch.compile`` (CUDA graphs via
            mode "reduce-overhead" on CUDA). The compiled callable is kept per bundle.
        compile_mode: torch.compile mode; None means "reduce-overhead" on CUDA, "default" elsewhere.
        compile_backend: torch.compile backend; None means inductor ("eager" lets CPU tests trace
            the compiled path without generating code).
        weights: "model" decodes with the bundle's own weights. "int8" (CPU only) decodes with a
            copy of the model whose Linear layers (incl. the LM head) use int8 dynamic
            quantization (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations
            quantized per call). Draws stay deterministic per seed, but differ from the float
            model's; the log-probs, KL and entropy are still the exact float teacher-forced pass
            of the bundle's model, and ``Rollout.meta["decode_weights"]`` says which was used.
            Ignored (float decode) on other devices and for policy sources that change weights
            (a LoRA adapter lives in the float model only).
        share_prompt_prefill: run each distinct context once and copy its KV cache to the G
            rows that share it: in the decode prefill (dynamic cache only; same draws) and in the
            teacher-forced scoring passes (``shared_context_hidden``; same scores up to float
            rounding, about 1e-6).
        prefetch_noise: draw the sampling noise of the next steps in a helper thread while the
            model runs (the same draws, in the same order, from the request's generator).
        reuse_decode_hidden: score the policy from the final hidden states the decode loop
            already computed (the float model, under the policy's ``activate``), instead of a
            second teacher-forced policy pass; the same numbers up to float rounding (about
            1e-6). Not with int8 weights or a static cache (then the policy pass runs).
        lean_step: on the CPU, decode with ``decode_step.LeanDecoder`` (preallocated KV
            buffers; the float step gives bitwise the transformers step's logits, the int8 step
            reads a fused int8 copy) for Llama-shaped models; the prefill stays the model's own
            float forward. Callers turn it off while a LoRA adapter is active (the lean step
            reads the base weights).
        adapt_threads: choose torch's thread count per phase (``lm.threads.choose``: every core
            while the rest of the machine is idle, the start-up count otherwise; back to one at
            once when a decode step comes out slow) and restore the start-up count after.
            Only where results do not depend on it (bitwise the same under 1 and 2 threads;
            tested): the lean decode step and the scoring passes of prompt-only sources; a LoRA
            policy's run stays at the start-up count (transformers' one-query SDPA is not).
    """

    static_cache: bool | None = None
    compile_decode: bool = False
    compile_mode: str | None = None
    compile_backend: str | None = None
    weights: DecodeWeights = "model"
    share_prompt_prefill: bool = True
    prefetch_noise: bool = True
    reuse_decode_hidden: bool = True
    lean_step: bool = True
    adapt_threads: bool = True


FAST_DECODE = DecodeOptions(weights="int8")  # the labelled approximate fast path (CPU)
PLAIN_DECODE = DecodeOptions(  # the loop as it was: every row prefilled, two scoring passes
    share_prompt_prefill=False,
    prefetch_noise=False,
    reuse_decode_hidden=False,
    lean_step=False,
    adapt_threads=False,
)


# ---------------------------------------------------------------------------------------------
# Progress, queue and time estimates


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
def _model_turn(
    bundle: ModelBundle, run: RunProgress, report: Callable[[float, str], None]
) -> Iterator[None]:
    """Hold ``bundle.lock`` (reporting the queue while waiting) and publish ``run`` meanwhile."""
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


def _prompt_only(source: Any) -> bool:
    """True for sources that differ from the base model by their context only (no adapter)."""
    return isinstance(source, (IdenticalPolicy, SteeredPolicy)) or source is None


def _weights_kind(bundle: ModelBundle, decode: DecodeOptions, source: Any) -> str:
    """The decode weights: "int8" (int8 copy: CPU, prompt-only source) or the dtype name."""
    if decode.weights == "int8" and bundle.device.type == "cpu" and _prompt_only(source):
        return "int8"
    return bundle.dtype_name


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


def _estimates(
    bundle: ModelBundle, cfg: SamplingConfig, decode: DecodeOptions, source: Any
) -> tuple[float, float]:
    """(decode seconds, scoring seconds) expected for a request, assuming no early EOS."""
    kind = _weights_kind(bundle, decode, source)
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
    reuse = decode.reuse_decode_hidden and _weights_kind(bundle, decode, effective) != "int8"
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
    decode_s, score_s = _estimates(bundle, cfg, decode or DecodeOptions(), source)
    return decode_s + score_s


def speed_measured(bundle: ModelBundle) -> bool:
    """True once a run on this bundle has measured its rates (estimates are no longer a prior)."""
    return any(isinstance(k, tuple) and k[0] == "step" for k in bundle.usage.speed)


def calibrate(bundle: ModelBundle, decode: DecodeOptions | None = None) -> float:
    """Measure this bundle's rates with one short run, so the first estimate is not a prior.

    Samples 1 prompt x 8 rows x 6 tokens (about a second for SmolLM2 on 2 CPU cores; call it once
    after loading, e.g. inside the ``cache_resource`` loader). Holds the lock like any request.

    Returns:
        The wall seconds it took.
    """
    start = time.perf_counter()
    cfg = SamplingConfig(prompts=("Say hello.",), group_size=8, max_new_tokens=6, seed=0)
    sample(bundle, cfg, decode=decode)
    return time.perf_counter() - start


def _ema(old: float | None, new: float, weight: float = 0.5) -> float:
    return new if old is None else (1 - weight) * old + weight * new


def _record_speed(
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


# ---------------------------------------------------------------------------------------------
# Sampling


def sample(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    progress: Callable[[float, str], None] | None = None,
    decode: DecodeOptions | None = None,
    source: PolicySource | None = None,
) -> Rollout:
    """Sample ``cfg.group_size`` responses per prompt and score each token under both models.

    Args:
        bundle: the shared model (see ``roll_viz.lm.models.load_models``).
        cfg: what to sample.
        progress: optional callback ``(fraction in [0, 1], message)``. While the request waits
            for the model it is called about twice a second with fraction 0 and a "Waiting for
            the model" message (lock NOT held); then with the lock held, during decoding with
            "Sampling responses: <done> / <total> tokens, about <s> s left" after each step.
            The live numbers are also in ``queue_status(bundle).running`` (a ``RunProgress``).
        decode: decode-loop options (speed switches; ``weights="int8"`` is the labelled
            approximate fast path).
        source: the policy to sample from; None means ``policy_source(cfg)`` (identical or
            steered). A trained LoRA policy passes its own source (``lm.update``).

    Returns:
        A Rollout with B = P * G rows (rows of one prompt contiguous) and T = the longest response.
    """
    report = progress or (lambda fraction, message: None)
    decode = decode or DecodeOptions()
    source = source or policy_source(cfg)
    num_prompts, group = len(cfg.prompts), cfg.group_size
    num_rows = num_prompts * group
    decode_rows = num_rows + (num_prompts if cfg.greedy else 0)
    group_ids = torch.arange(num_prompts).repeat_interleave(group)  # (B,)
    lp_temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    kind = _weights_kind(bundle, decode, source)
    est_decode, est_score = _estimates(bundle, cfg, decode, source)
    run = RunProgress(decode_rows * cfg.max_new_tokens, est_decode, est_score)

    def tell(fraction: float, message: str) -> None:
        run.fraction, run.message = fraction, message
        report(fraction, message)

    def count(done: int, total: int) -> None:
        run.tokens_done = done
        left = math.ceil(run.eta_seconds())
        tell(0.05 + 0.75 * done / total, f"Sampling responses: {done} / {total} tokens, "
             f"about {left} s left")  # fmt: skip

    with _model_turn(bundle, run, report), torch.inference_mode():
        tell(0.0, "Applying the chat template")
        policy_ctx = [source.context_ids(bundle, p) for p in cfg.prompts]
        ref_ctx = (
            policy_ctx if source.shares_reference else [bundle.chat_ids(p) for p in cfg.prompts]
        )
        rows_ctx = [policy_ctx[g] for g in group_ids.tolist()]
        if cfg.greedy:
            rows_ctx += policy_ctx
        generator = torch.Generator(device=bundle.device).manual_seed(cfg.seed)
        timings: dict = {}
        reuse = decode.reuse_decode_hidden and kind != "int8"
        capture: dict | None = {} if reuse else None
        run.phase, run.decode_started = "decode", time.monotonic()
        with source.activate(bundle):
            generated = decode_batch(
                bundle,
                rows_ctx,
                num_sampled=num_rows,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                generator=generator,
                options=replace(
                    decode,
                    weights="int8" if kind == "int8" else "model",
                    lean_step=decode.lean_step and _prompt_only(source),
                ),
                counter=count,
                timings=timings,
                capture=capture,
            )
        sampled, greedy_rows = generated[:num_rows], generated[num_rows:]
        token_ids, response_mask = _pad_right(sampled)  # (B, T)
        finish = tuple("eos" if r and r[-1] in bundle.eos_ids else "length" for r in sampled)

        run.phase, run.score_started = "score", time.monotonic()
        base_threads = torch.get_num_threads()

        def adapt() -> None:  # every core for the next pass while the machine is idle
            # prompt-only sources: passes measured bitwise the same under 1 and 2 threads
            if decode.adapt_threads and _prompt_only(source):
                threads.apply(threads.choose(base_threads))

        tell(0.8, "Scoring the responses under the policy")
        hidden_of = shared_context_hidden if decode.share_prompt_prefill else response_hidden
        forward_passes = 0 if source.shares_reference else 1
        if capture and "hidden" in capture:  # the decode loop's own states predict each token
            policy_hidden = capture.pop("hidden")[:num_rows, : token_ids.shape[1]]
        else:
            forward_passes += 1
            adapt()
            with source.activate(bundle):
                policy_hidden = hidden_of(bundle, rows_ctx[:num_rows], token_ids, response_mask)
        if source.shares_reference:
            ref_hidden = None
        else:
            tell(0.88, "Scoring the same tokens under the reference")
            ref_rows = [ref_ctx[g] for g in group_ids.tolist()]
            adapt()
            ref_hidden = hidden_of(bundle, ref_rows, token_ids, response_mask)
        valid = response_mask.to(bundle.device)
        head = bundle.model.get_output_embeddings()
        adapt()
        scores = score_positions(
            head,
            policy_hidden[valid],
            None if ref_hidden is None else ref_hidden[valid],
            token_ids.to(bundle.device)[valid],
            temperature=lp_temperature,
            k=cfg.topk,
        )
        features = probe_features(
            policy_hidden if ref_hidden is None else ref_hidden, cfg.feature_dim
        )
        features = features * response_mask[..., None]
        threads.apply(base_threads)
        score_s = time.monotonic() - run.score_started
        width = token_ids.shape[1]
        scored = forward_passes * sum(len(c) + width for c in rows_ctx[:num_rows])

        run.phase = "text"
        tell(0.95, "Decoding text")
        tokenizer = bundle.tokenizer
        responses = tuple(_response_text(tokenizer, r, bundle.eos_ids) for r in sampled)
        greedy = tuple(_response_text(tokenizer, r, bundle.eos_ids) for r in greedy_rows)
        vocab_ids = sorted(
            {i for row in sampled for i in row} | set(scores.topk_ids.flatten().tolist())
        )
        vocab = {i: tokenizer.decode([i]) for i in vocab_ids}
        run.phase = "done"
    _record_speed(
        bundle, kind, decode_rows, timings, scored, score_s, cfg.prompts,
        [len(c) for c in policy_ctx], forward_passes, num_rows * cfg.max_new_tokens,
    )  # fmt: skip
    # Leave inference mode with ordinary tensors (callers may use them with autograd or in place).
    valid = response_mask.clone()
    token_ids, features = token_ids.clone(), features.clone()
    tokens = tuple(tuple(vocab[i] for i in row) for row in sampled)

    def spread(values: Tensor) -> Tensor:  # (N, ...) valid positions -> (B, T, ...) zero padded
        out = torch.zeros((*valid.shape, *values.shape[1:]), dtype=values.dtype)
        out[valid] = values.clone()
        return out

    meta = {
        "model": bundle.name,
        "model_spec": bundle.spec,
        "device": str(bundle.device),
        "dtype": bundle.dtype_name,
        "seed": cfg.seed,
        "group_size": group,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
        "policy_mode": cfg.policy_mode,
        "instruction": cfg.instruction if cfg.policy_mode == "steered" else "",
        "logprob_temperature": lp_temperature,
        "logprob_note": (
            f"log_softmax(logits / {lp_temperature:g}) over the full vocabulary, "
            "same temperature for policy and reference; top-p truncation not applied"
        ),
        "kl_note": (
            "identical: the policy IS the reference, reference scores reuse the policy's, "
            "so KL is exactly 0 (the start of RL training)"
            if source.shares_reference
            else "steered: the policy sees the hidden instruction, the reference scores the same "
            "tokens without it; exact KL(policy || ref) over the full vocabulary"
        ),
        "decode_weights": "int8-dynamic" if kind == "int8" else kind,
        "decode_note": (
            "responses drawn by an int8 dynamically quantized copy of the model (fast decode); "
            f"scores from the {bundle.dtype_name} model"
            if kind == "int8"
            else f"responses drawn by the {bundle.dtype_name} model"
        ),
        "topk": cfg.topk,
        "feature_dim": cfg.feature_dim,
        "feature_note": (
            f"reference final hidden state x fixed random projection (seed {FEATURE_SEED})"
        ),
    }
    return Rollout(
        prompts=cfg.prompts,
        group_ids=group_ids,
        responses=responses,
        token_ids=token_ids,
        tokens=tokens,
        response_mask=valid.float(),
        logprobs=spread(scores.logprobs),
        ref_logprobs=spread(scores.ref_logprobs),
        exact_kl=spread(scores.kl),
        entropy=spread(scores.entropy),
        topk_ids=spread(scores.topk_ids),
        topk_logprobs=spread(scores.topk_logprobs),
        topk_ref_logprobs=spread(scores.topk_ref_logprobs),
        finish_reasons=finish,
        greedy_responses=greedy,
        features=features,
        vocab=vocab,
        meta=tuple(sorted(meta.items())),
    )


# ---------------------------------------------------------------------------------------------
# One run for identical concurrent requests

MAX_FLIGHTS = 64  # at most this many distinct runs tracked at once; beyond, requests run alone


class _Flight:
    """One in-flight run that identical requests wait on."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Rollout | None = None
        self.error: BaseException | None = None
        self.fraction = 0.0
        self.message = "Waiting for the model"
        self.followers = 0


_FLIGHTS: dict[tuple, _Flight] = {}
_FLIGHTS_LOCK = threading.Lock()


def in_flight() -> int:
    """How many distinct shared runs are in progress (entries are dropped when a run ends)."""
    with _FLIGHTS_LOCK:
        return len(_FLIGHTS)


def shared_sample(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    progress: Callable[[float, str], None] | None = None,
    decode: DecodeOptions | None = None,
    source: PolicySource | None = None,
) -> Rollout:
    """``sample`` with single-flight: identical concurrent requests share one sampling run.

    Requests are identical when they use the same bundle, an equal (frozen) ``cfg``, equal decode
    options and an equal prompt-only policy source (identical or steered; a LoRA policy changes
    between calls, so it always runs alone). The first caller runs ``sample``; callers that come
    while it runs wait for its result and get the SAME Rollout object (treat it as read-only),
    or its exception. Their ``progress`` is called from their own thread about 4 times a second
    with the run's fraction and message. Nothing is kept after the run: a later identical request
    samples again (same seed, same bytes), so caching across time stays the caller's choice
    (e.g. Streamlit's ``cache_data``).

    Args:
        bundle: the shared model.
        cfg: what to sample.
        progress: optional ``(fraction, message)`` callback, as for ``sample``.
        decode: decode-loop options.
        source: the policy; None means ``policy_source(cfg)``.

    Returns:
        The Rollout of the (possibly shared) run.
    """
    decode = decode or DecodeOptions()
    effective = source or policy_source(cfg)
    if not isinstance(effective, (IdenticalPolicy, SteeredPolicy)):
        return sample(bundle, cfg, progress, decode, source)
    key = (bundle, cfg, decode, effective)
    with _FLIGHTS_LOCK:
        flight = _FLIGHTS.get(key)
        leader = flight is None
        if leader:
            if len(_FLIGHTS) >= MAX_FLIGHTS:
                flight = None
            else:
                flight = _FLIGHTS[key] = _Flight()
        else:
            flight.followers += 1
    if flight is None:
        return sample(bundle, cfg, progress, decode, source)
    if leader:

        def relay(fraction: float, message: str) -> None:
            flight.fraction, flight.message = fraction, message
            if progress is not None:
                progress(fraction, message)

        try:
            flight.result = sample(bundle, cfg, relay, decode, source)
        except BaseException as err:
            flight.error = err
            raise
        finally:
            with _FLIGHTS_LOCK:
                _FLIGHTS.pop(key, None)
            flight.done.set()
        return flight.result
    while not flight.done.wait(0.25):
        if progress is not None:
            progress(flight.fraction, flight.message + " (shared with an identical request)")
    if flight.error is not None:
        raise RuntimeError("the shared sampling run failed") from flight.error
    if progress is not None:
        progress(1.0, "Done (shared with an identical request)")
    assert flight.result is not None
    return flight.result


def _distinct(contexts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(the distinct contexts in order of first appearance, each row's index into them)."""
    unique: dict[tuple[int, ...], int] = {}
    index = [unique.setdefault(tuple(c), len(unique)) for c in contexts]
    return [list(c) for c in unique], index


def _pad_right(rows: list[list[int]]) -> tuple[Tensor, Tensor]:
    """(B, T) long ids right-padded with 0, and the (B, T) bool mask of real tokens."""
    width = max([len(r) for r in rows] + [1])
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[b, : len(row)] = True
    return ids, mask


def _pad_left(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """(N, L) long ids left-padded with ``pad_id``, and the (N, L) long attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[b, width - len(row) :] = 1
    return ids, mask


def _response_text(tokenizer: Any, ids: list[int], eos_ids: tuple[int, ...]) -> str:
    """Decoded response without its final EOS token (untrusted model text, kept as a plain str)."""
    body = ids[:-1] if ids and ids[-1] in eos_ids else ids
    return tokenizer.decode(body, skip_special_tokens=False)


def next_tokens(
    logits: Tensor,
    num_sampled: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    noise: Tensor | None = None,
) -> Tensor:
    """Pick the next token of every row: sampled for the first ``num_sampled`` rows, greedy after.

    The draw is ``torch.multinomial(probs, 1)``, which for one sample is the exponential race
    ``argmax(probs / q)`` with ``q ~ Exp(1)`` drawn by ``exponential_`` from the generator.
    Passing ``noise`` (that ``q``, drawn earlier from the same generator) gives the same token.

    Args:
        logits: (N, V) float32 next-token logits.
        num_sampled: rows 0..num_sampled-1 sample; the rest take the argmax.
        temperature: > 0 to sample; 0 makes every row greedy.
        top_p: keep the smallest set of most likely tokens whose mass reaches top_p (1 = all).
        generator: the request's generator (the global RNG is never used).
        noise: optional (num_sampled, V) float32 Exp(1) draws to use instead of drawing now.

    Returns:
        (N,) long token ids.
    """
    if num_sampled == 0 or temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits[:num_sampled] / temperature, dim=-1)  # (n, V)

    def draw(weights: Tensor) -> Tensor:  # (n, V) -> (n, 1)
        if noise is None:
            return torch.multinomial(weights, 1, generator=generator)
        return (weights / noise).argmax(dim=-1, keepdim=True)

    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p  # the top token always stays
        picked = order.gather(-1, draw(sorted_probs * keep)).squeeze(-1)
    else:
        picked = draw(probs).squeeze(-1)
    if num_sampled == logits.shape[0]:
        return picked
    return torch.cat([picked, logits[num_sampled:].argmax(dim=-1)])


class _NoiseStream:
    """The Exp(1) draws of each decode step, made ahead by a helper thread, in generator order.

    ``torch.multinomial`` spends most of its time in ``exponential_`` over the whole vocabulary
    (about 20 ms for 18 x 49152 on this CPU, single-threaded); the draws do not depend on the
    logits, so a helper thread makes step k+1's while the model computes step k. Only the helper
    touches the generator until ``close``. The generator ends up to ``AHEAD`` draws further than
    the plain loop leaves it (nothing uses it after decoding).
    """

    AHEAD = 2

    def __init__(self, generator: torch.Generator, shape: tuple[int, int], steps: int) -> None:
        self.generator, self.shape = generator, shape
        self.queue: queue.Queue = queue.Queue(maxsize=self.AHEAD)
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(steps,), name="roll_viz.noise", daemon=True
        )
        self.thread.start()

    def _run(self, steps: int) -> None:
        try:
            with torch.inference_mode():
                for _ in range(steps):
                    q = torch.empty(self.shape).exponential_(1, generator=self.generator)
                    while not self.stop.is_set():
                        try:
                            self.queue.put(q, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if self.stop.is_set():
                        return
        except BaseException as err:  # surfaced by next()
            self.queue.put(err)

    def next(self) -> Tensor:
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def _int8_model(bundle: ModelBundle) -> Any:
    """The bundle's int8 decode copy (built once under the lock; the float model is untouched)."""
    if "int8" not in bundle.compiled_steps:
        with warnings.catch_warnings():  # torch.ao points at torchao; the eager API still works
            warnings.simplefilter("ignore")
            clone = copy.deepcopy(bundle.model)
            bundle.compiled_steps["int8"] = torch.ao.quantization.quantize_dynamic(
                clone, {torch.nn.Linear}, dtype=torch.qint8, inplace=True
            )
    return bundle.compiled_steps["int8"]


def decode_batch(
    bundle: ModelBundle,
    contexts: list[list[int]],
    num_sampled: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    generator: torch.Generator,
    progress: Callable[[float], None] | None = None,
    options: DecodeOptions | None = None,
    counter: Callable[[int, int], None] | None = None,
    timings: dict | None = None,
    capture: dict | None = None,
) -> list[list[int]]:
    """Autoregressive decode of all rows in one batch with a KV cache.

    Prompts are left-padded; position ids count real tokens only. A row stops at its first EOS
    (kept in its output); finished rows keep feeding the pad token until all rows are done.
    Caller holds ``bundle.lock`` inside ``torch.inference_mode()``.

    Speed (options): the prefill runs once per distinct context and its cache is copied to the
    rows that share it; the logits of the prefill are kept for the last position only; the
    sampling noise is drawn ahead in a helper thread; ``weights="int8"`` decodes with the int8
    copy (CPU). None of these but ``weights`` changes the draws.

    Args:
        bundle: the shared model.
        contexts: (N,) prompt id lists.
        num_sampled: rows before this index sample, rows after it decode greedily.
        temperature: sampling temperature (0 = greedy for all rows).
        top_p: nucleus mass.
        max_new_tokens: most tokens per row.
        generator: the per-request generator, on ``bundle.device``.
        progress: optional callback with the fraction of steps done.
        options: static cache / compiled step / prefill sharing / noise / weights switches.
        counter: optional callback ``(tokens_done, tokens_total)`` after each step; tokens_done
            counts the rows still running at each step, tokens_total is N * max_new_tokens (the
            last call has tokens_done == tokens_total when rows stopped early: all are done).
        timings: optional dict filled with "prefill_s", "steps" and "step_s" (median-free mean
            seconds per decode step after the prefill).
        capture: optional dict; with a dynamic cache it gets "hidden", the (N, steps, H) final
            hidden states from which each step's token was drawn (column t predicts token t).

    Returns:
        (N,) lists of generated ids, each ending with an EOS id or of length max_new_tokens.
    """
    options = options or DecodeOptions()
    model, device = bundle.model, bundle.device
    use_static = options.static_cache if options.static_cache is not None else device.type == "cuda"
    lean = None
    if options.lean_step and device.type == "cpu" and not use_static:
        lean = _lean_decoder(bundle, options.weights)
    if options.weights == "int8" and device.type == "cpu" and lean is None:
        model = _int8_model(bundle)
    clock = time.perf_counter()
    num_rows = len(contexts)
    total = num_rows * max_new_tokens
    share = options.share_prompt_prefill and not use_static
    if share:
        prefill_ctx, index = _distinct(contexts)
    else:
        index, prefill_ctx = list(range(num_rows)), contexts
    ids, attn = _pad_left(prefill_ctx, bundle.pad_id)
    ids, attn = ids.to(device), attn.to(device)
    width = ids.shape[1]
    cache = None
    if use_static:
        from transformers import StaticCache

        # Cache length rounded up to a multiple of STATIC_CACHE_STEP: fewer distinct shapes, so a
        # compiled step recompiles less often. The mask covers the whole cache; unwritten slots
        # stay 0 until their step.
        cache_len = -(-(width + max_new_tokens) // STATIC_CACHE_STEP) * STATIC_CACHE_STEP
        cache = StaticCache(config=model.config, max_cache_len=cache_len)
        attn = torch.cat(
            [attn, torch.zeros(num_rows, cache_len - width, dtype=attn.dtype, device=device)], 1
        )
    positions = (attn[:, :width].cumsum(-1) - 1).clamp_min(0)
    keep_hidden = capture is not None and not use_static
    head = model.get_output_embeddings()

    def forward(fn: Any, **kwargs: Any) -> tuple[Tensor | None, Tensor, Any]:
        """(last hidden (n, H) or None, last logits (n, V), cache) of one forward call."""
        if keep_hidden:  # the CausalLM forward, split to keep the final hidden state
            base = model.base_model(**kwargs)
            last = base.last_hidden_state[:, -1:]
            return last[:, -1], head(last)[:, -1], base.past_key_values
        out = fn(**kwargs, logits_to_keep=1)
        return None, out.logits[:, -1, :], out.past_key_values

    hidden, logits, cache = forward(
        model,
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    )
    if share and len(prefill_ctx) < num_rows:
        rows = torch.tensor(index, device=device)
        cache.reorder_cache(rows)  # (P, ...) -> (N, ...): row i gets its context's cache
        logits, attn, positions = logits[rows], attn[rows], positions[rows]
        hidden = None if hidden is None else hidden[rows]
    step_fn = _decode_step_fn(bundle, options) if use_static else model
    buffers = None
    if lean is not None:  # the prefill's cache moves into preallocated buffers
        keys = cache.layers[0].keys
        buffers = lean.allocate(num_rows, width + max_new_tokens, keys.dtype, device)
        lean.load_cache(buffers, cache, width)
        cache = None
    hiddens = []
    eos = torch.tensor(bundle.eos_ids, device=device)
    done = torch.zeros(num_rows, dtype=torch.bool, device=device)
    next_pos = positions[:, -1:] + 1
    sampling = num_sampled > 0 and temperature > 0
    noise = None
    if sampling and options.prefetch_noise and device.type == "cpu":
        noise = _NoiseStream(generator, (num_sampled, logits.shape[-1]), max_new_tokens)
    prefill_s = time.perf_counter() - clock
    columns = []
    produced = 0
    base_threads = torch.get_num_threads()
    # only the lean step is bitwise the same under any thread count (transformers' one-query
    # SDPA is not), so only it may change the count mid-run
    adapt = options.adapt_threads and lean is not None
    own = () if noise is None else (noise.thread.native_id,)
    watch = threads.StepWatch()
    count_now = base_threads
    step_clock = time.perf_counter()
    try:
        for step in range(max_new_tokens):
            if adapt and step % threads.RECHECK_STEPS == 0:
                count_now = threads.apply(threads.choose(base_threads, own))
            q = noise.next() if noise is not None else None
            if hidden is not None:
                hiddens.append(hidden)
            token = next_tokens(logits.float(), num_sampled, temperature, top_p, generator, q)
            produced += num_rows - int(done.sum())
            token = torch.where(done, bundle.pad_id, token)
            columns.append(token)
            done = done | torch.isin(token, eos)
            finished = step == max_new_tokens - 1 or bool(done.all())
            if progress is not None:
                progress((step + 1) / max_new_tokens)
            if counter is not None:
                counter(total if finished else produced, total)
            if finished:
                break
            if use_static:
                slot = torch.zeros_like(attn)
                slot[:, width + step] = 1
                attn = attn + slot
            else:
                attn = torch.cat(
                    [attn, torch.ones(num_rows, 1, dtype=attn.dtype, device=device)], 1
                )
            if lean is not None:
                hidden, logits = lean.step(buffers, token, next_pos, width + step, attn)
                hidden = hidden if keep_hidden else None
            else:
                hidden, logits, cache = forward(
                    step_fn,
                    input_ids=token[:, None],
                    attention_mask=attn,
                    position_ids=next_pos,
                    past_key_values=cache,
                    use_cache=True,
                )
            next_pos = next_pos + 1
            now = time.perf_counter()
            if adapt and watch.slow(count_now, now - step_clock):
                count_now = threads.apply(base_threads)  # contention: one thread until a recheck
            step_clock = now
    finally:
        if noise is not None:
            noise.close()
        threads.apply(base_threads)
    if timings is not None:
        steps = len(columns) - 1
        timings["prefill_s"] = prefill_s
        timings["prefill_tokens"] = int(ids.numel())
        timings["steps"] = steps
        timings["step_s"] = (time.perf_counter() - clock - prefill_s) / max(steps, 1)
    if keep_hidden and capture is not None:
        capture["hidden"] = torch.stack(hiddens, dim=1)  # (N, steps, H)
    table = torch.stack(columns, dim=1).cpu()  # (N, steps)
    rows_out = []
    eos_set = set(bundle.eos_ids)
    for row in table.tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos_set), len(row))
        rows_out.append(row[:end])
    return rows_out


def _lean_decoder(bundle: ModelBundle, weights: str) -> LeanDecoder | None:
    """The bundle's lean decode step for these weights (built once under the lock), or None."""
    if not LeanDecoder.supports(bundle.model):
        return None
    key = f"lean:{weights}"
    if key not in bundle.compiled_steps:
        bundle.compiled_steps[key] = LeanDecoder(bundle.model, weights)
    return bundle.compiled_steps[key]


def _decode_step_fn(bundle: ModelBundle, options: DecodeOptions) -> Any:
    """The model, or a torch.compile'd wrapper of it (kept per bundle, never set on the model)."""
    if not options.compile_decode:
        return bundle.model
    mode = options.compile_mode or (
        "reduce-overhead" if bundle.device.type == "cuda" else "default"
    )
    backend = options.compile_backend or "inductor"
    key = f"{backend}:{mode}"
    if key not in bundle.compiled_steps:
        kwargs = {"mode": mode} if backend == "inductor" else {}
        bundle.compiled_steps[key] = torch.compile(
            bundle.model, backend=backend, dynamic=False, **kwargs
        )
    return bundle.compiled_steps[key]


def response_hidden(
    bundle: ModelBundle, contexts: list[list[int]], token_ids: Tensor, mask: Tensor
) -> Tensor:
    """Teacher-forced final hidden states that predict each response token.

    The batch is [left-padded context | right-padded response]; position ids count real tokens.

    Args:
        bundle: the shared model (caller holds the lock, inside inference mode).
        contexts: (B,) prompt id lists.
        token_ids: (B, T) response ids.
        mask: (B, T) bool, real response tokens.

    Returns:
        (B, T, H) hidden states on ``bundle.device``; row b, column t predicts token_ids[b, t].
    """
    ctx_ids, ctx_mask = _pad_left(contexts, bundle.pad_id)
    width = ctx_ids.shape[1]
    ids = torch.cat([ctx_ids, token_ids], dim=1).to(bundle.device)
    attn = torch.cat([ctx_mask, mask.long()], dim=1).to(bundle.device)
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    hidden = bundle.model.base_model(
        input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False
    ).last_hidden_state  # (B, L + T, H)
    return hidden[:, width - 1 : width - 1 + token_ids.shape[1]]


def shared_context_hidden(
    bundle: ModelBundle, contexts: list[list[int]], token_ids: Tensor, mask: Tensor
) -> Tensor:
    """``response_hidden`` with each distinct context run once and its KV cache shared.

    The G rows of one prompt share its context: the context pass runs on the P distinct
    contexts (left-padded), its cache is copied to the B rows, then one cached pass runs over the
    (B, T) right-padded responses. Same numbers as ``response_hidden`` up to float rounding
    (different batch shapes); inference only (no autograd through a cache).

    Args:
        bundle: the shared model (caller holds the lock, inside inference mode).
        contexts: (B,) prompt id lists.
        token_ids: (B, T) response ids.
        mask: (B, T) bool, real response tokens.

    Returns:
        (B, T, H) hidden states on ``bundle.device``; row b, column t predicts token_ids[b, t].
    """
    distinct, index = _distinct(contexts)
    if len(distinct) == len(contexts) or token_ids.shape[1] < 2:
        return response_hidden(bundle, contexts, token_ids, mask)
    device = bundle.device
    ctx_ids, ctx_mask = _pad_left(distinct, bundle.pad_id)
    ctx_ids, ctx_mask = ctx_ids.to(device), ctx_mask.to(device)
    positions = (ctx_mask.cumsum(-1) - 1).clamp_min(0)
    out = bundle.model.base_model(
        input_ids=ctx_ids, attention_mask=ctx_mask, position_ids=positions, use_cache=True
    )
    rows = torch.tensor(index, device=device)
    cache = out.past_key_values
    cache.reorder_cache(rows)  # (P, ...) -> (B, ...)
    first = out.last_hidden_state[:, -1][rows]  # (B, H): predicts response token 0
    attn = torch.cat([ctx_mask[rows], mask.long().to(device)], dim=1)
    resp_pos = positions[rows][:, -1:] + 1 + torch.arange(token_ids.shape[1] - 1, device=device)
    hidden = bundle.model.base_model(
        input_ids=token_ids[:, :-1].to(device),
        attention_mask=attn[:, :-1],
        position_ids=resp_pos,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state  # (B, T - 1, H): column t predicts token t + 1
    return torch.cat([first[:, None], hidden], dim=1)


def probe_features(hidden: Tensor, dim: int) -> Tensor:
    """Project hidden states to ``dim`` features with a fixed seeded Gaussian matrix.

    Args:
        hidden: (B, T, H) hidden states.
        dim: F.

    Returns:
        (B, T, F) float32 CPU features, hidden @ W with W ~ N(0, 1/H), W fixed by FEATURE_SEED.
    """
    size = hidden.shape[-1]
    weight = torch.randn(
        size, dim, generator=torch.Generator().manual_seed(FEATURE_SEED)
    ) / math.sqrt(size)
    return hidden.float().cpu() @ weight


# ---------------------------------------------------------------------------------------------
# CLI


def _round(values: list[float], digits: int = 6) -> list[float]:
    return [round(float(v), digits) for v in values]


def rollout_json(rollout: Rollout, rewards: Tensor | None = None, reward_name: str = "") -> dict:
    """The CLI's JSON view of a rollout: one entry per sample with its per-token numbers."""
    samples = []
    for b, response in enumerate(rollout.responses):
        n = int(rollout.response_mask[b].sum())
        samples.append(
            {
                "prompt": rollout.prompts[int(rollout.group_ids[b])],
                "group": int(rollout.group_ids[b]),
                "response": response,
                "token_ids": rollout.token_ids[b, :n].tolist(),
                "tokens": list(rollout.tokens[b]),
                "logprobs": _round(rollout.logprobs[b, :n].tolist()),
                "ref_logprobs": _round(rollout.ref_logprobs[b, :n].tolist()),
                "kl": _round(rollout.exact_kl[b, :n].tolist()),
                "entropy": _round(rollout.entropy[b, :n].tolist()),
                "finish_reason": rollout.finish_reasons[b],
                "reward": None if rewards is None else float(rewards[b]),
            }
        )
    return {
        "meta": dict(rollout.meta),
        "reward": reward_name or None,
        "greedy_responses": list(rollout.greedy_responses),
        "samples": samples,
    }
