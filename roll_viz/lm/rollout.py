"""The one door into the model for a rollout: which engine answers, and the Rollout it returns.

``current(spec, bundle)`` is the engine for model ``spec``; ``engine.sample(request, progress)``
returns the ``Rollout``. The choice is made here, never by a page:

- the in-process model (``InProcess``) answers by default: ``lm.sampling.sample`` (identical
  concurrent requests share one run), with the float or the int8 decode (``Request.decode``),
  and a session's LoRA policy (``Request.policy``) as the policy source;
- the operator's vLLM server (``Remote``) answers when ``ROLL_VIZ_ENGINE`` is set, the server is
  up (probed once per ``PROBE_TTL_S`` for the whole process) and it serves ``spec``
  (``ROLL_VIZ_ENGINE_SPEC``, ``smollm2`` by default): ``lm.engine_rollout``, a LoRA policy's
  adapter synced to the server first (``lm.engine_sync``);
- a server that fails mid-request is marked down (re-probed before the next use) and the request
  runs in-process: nothing is lost; ``on_failure`` (a page's warning) hears why.

Other model specs (``tiny``, a folder) always run in-process: the server serves one model. A
visitor never chooses: the operator's environment does.

Multi-turn episodes against the toy tools (``lm.episodes``) go through the same door:
``current(spec, bundle).episodes(EpisodeRequest(...))`` returns an ``EpisodeBatch``, in-process
or through the server (each turn's context sent as token ids, its answer appended as the ids
the server returned), with the same fallback. ``reencode`` re-renders an episode's history from
text (the extension-property check), and the tasks (``TASKS``, ``task_prompt``) and the
bounds are offered here.

The behaviour samplers of a training run (``fp32``, ``bf16``, ``int8``, ``top_p``:
``lm.behaviour_sampler.draw``) stay behind ``lm.train``: a step needs the sampler's log mu beside
its Rollout. An engine gives a training run its own sampler (``training_sampler``).

The names the pages need from the sampling side of ``lm`` (limits, the queue's plan, the warm-up,
the mismatch lab's behaviour log-probs, the teacher's scores, the Episodes page's update step
``episode_update``) are offered here too, so ``ui`` and
the pages reach ``lm`` through six modules only (``tests/test_layers.py``): ``rollout``,
``models``, ``lora``, ``update``, ``train`` and ``runfile``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from roll_viz.core.records import Rollout
from roll_viz.lm import engine_check, engine_rollout, sampling, serving
from roll_viz.lm.behaviour import ENGINE_SOURCE as ENGINE_SOURCE
from roll_viz.lm.behaviour import SOURCE_LABELS as SOURCE_LABELS
from roll_viz.lm.behaviour import SOURCES as SOURCES
from roll_viz.lm.behaviour import Behaviour, behaviour_logprobs, engine_behaviour
from roll_viz.lm.decode import FAST_DECODE, DecodeOptions
from roll_viz.lm.engine import EngineError
from roll_viz.lm.engine_http import ENV_MODEL, ENV_URL, HttpEngine, from_env
from roll_viz.lm.engine_sync import AdapterSync
from roll_viz.lm.episode_update import MAX_UPDATE_TOKENS as MAX_UPDATE_TOKENS
from roll_viz.lm.episode_update import EpisodeUpdate as EpisodeUpdate
from roll_viz.lm.episode_update import check_vocabulary as check_vocabulary
from roll_viz.lm.episode_update import episode_update as episode_update
from roll_viz.lm.episodes import MAX_EPISODE_GROUP as MAX_EPISODE_GROUP
from roll_viz.lm.episodes import MAX_EPISODE_TASKS as MAX_EPISODE_TASKS
from roll_viz.lm.episodes import MAX_EPISODE_TOKENS as MAX_EPISODE_TOKENS
from roll_viz.lm.episodes import MAX_TURN_TOKENS as MAX_TURN_TOKENS
from roll_viz.lm.episodes import MAX_TURNS as MAX_TURNS
from roll_viz.lm.episodes import EpisodeBatch, EpisodeRequest, engine_episodes, sample_episodes
from roll_viz.lm.flight import SingleFlight
from roll_viz.lm.lagged import trainer_ahead as trainer_ahead
from roll_viz.lm.models import DEFAULT_MODEL, ModelBundle
from roll_viz.lm.request import MAX_INSTRUCTION_CHARS as MAX_INSTRUCTION_CHARS
from roll_viz.lm.request import MAX_PROMPT_CHARS as MAX_PROMPT_CHARS
from roll_viz.lm.request import (
    IdenticalPolicy,
    PolicySource,
    SamplingConfig,
    SteeredPolicy,
    policy_source,
)
from roll_viz.lm.sampling import CLASS_MAX_GROUP_SIZE as CLASS_MAX_GROUP_SIZE
from roll_viz.lm.sampling import CLASS_MAX_NEW_TOKENS as CLASS_MAX_NEW_TOKENS
from roll_viz.lm.sampling import CLASS_MAX_PROMPTS as CLASS_MAX_PROMPTS
from roll_viz.lm.sampling import calibrate as calibrate
from roll_viz.lm.sampling import capped as capped
from roll_viz.lm.sampling import sample
from roll_viz.lm.serving import SamplePlan
from roll_viz.lm.teacher import PRESET_TEMPLATES as PRESET_TEMPLATES
from roll_viz.lm.teacher import recorded_teacher as recorded_teacher
from roll_viz.lm.teacher import score_teacher as score_teacher
from roll_viz.lm.teacher import teacher_instruction as teacher_instruction
from roll_viz.lm.toy_tools import TASKS as TASKS
from roll_viz.lm.toy_tools import task_prompt as task_prompt
from roll_viz.lm.transcript import reencode as reencode_text
from roll_viz.lm.warm import is_warm as is_warm
from roll_viz.lm.warm import warm_up as warm_up

ENV_SPEC = "ROLL_VIZ_ENGINE_SPEC"
PROBE_TTL_S = 30.0

#: a failure message for a page, or None (the caller says nothing)
OnFailure = Callable[[EngineError], None] | None


@dataclass(frozen=True)
class Request:
    """What to sample, from which policy, with which decode weights.

    Attributes:
        cfg: prompts, G, temperature, ... (``SamplingConfig``).
        decode: "float" or "int8": which weights draw the answers in-process (scores stay float;
            an engine always draws with its own weights).
        policy: a session's LoRA policy (``lm.lora.LoraPolicy``), None for ``policy_source(cfg)``.
        steps: the policy's updates so far (the version an engine serves it under).
    """

    cfg: SamplingConfig
    decode: str = "float"
    policy: Any = None
    steps: int = 0


def decode_options(decode: str) -> DecodeOptions:
    """The in-process decode loop's options for ``Request.decode`` ("float" or "int8")."""
    return FAST_DECODE if decode == "int8" else DecodeOptions()


def plan(bundle: ModelBundle, request: Request) -> SamplePlan:
    """What ``request`` costs in-process (seconds, and with the fast decode) and the queue now."""
    return serving.plan(bundle, request.cfg, decode_options(request.decode))


class Engine(Protocol):
    """A rollout engine behind the door: ``label`` ("" in-process) and ``sample``."""

    label: str

    def sample(self, request: Request, progress: Any = None) -> Rollout:
        """The request's Rollout (B = P * G rows, rows of one prompt contiguous)."""
        ...

    def episodes(self, request: EpisodeRequest, progress: Any = None) -> EpisodeBatch:
        """G multi-turn episodes per task against the toy tools (``lm.episodes``)."""
        ...


@dataclass(frozen=True)
class InProcess:
    """The shared in-process model: ``lm.sampling.sample``, bit for bit.

    A prompt-only policy (identical or steered) goes through ``shared_sample``, so
    identical concurrent requests share one run; a LoRA policy samples alone.
    """

    bundle: ModelBundle
    label: str = ""

    def sample(self, request: Request, progress: Any = None) -> Rollout:
        """The Rollout of ``request`` from the in-process model."""
        options = decode_options(request.decode)
        if request.policy is None:
            return shared_sample(self.bundle, request.cfg, progress, options)
        return sampling.sample(self.bundle, request.cfg, progress, options, request.policy)

    def episodes(self, request: EpisodeRequest, progress: Any = None) -> EpisodeBatch:
        """The request's episodes from the in-process model (``lm.episodes.sample_episodes``)."""
        return sample_episodes(self.bundle, request, progress)


@dataclass(frozen=True)
class Remote:
    """The operator's vLLM server, falling back to ``InProcess`` when it fails mid-request."""

    bundle: ModelBundle
    http: HttpEngine
    on_failure: OnFailure = None

    @property
    def label(self) -> str:
        """How pages name the engine ("vLLM at <url>")."""
        return self.http.label

    def sample(self, request: Request, progress: Any = None) -> Rollout:
        """The Rollout of ``request`` from the server (else from the in-process model)."""
        try:
            if request.policy is None:
                return engine_rollout.shared_engine_sample(
                    self.bundle, self.http, request.cfg, progress
                )
            name = adapter_sync(self.http.url).served_name(request.policy, request.steps)
            return engine_rollout.engine_sample(
                self.bundle, self.http, request.cfg, request.policy, name, progress
            )
        except EngineError as err:
            _DOWN.set()
            if self.on_failure is not None:
                self.on_failure(err)
            return InProcess(self.bundle).sample(request, progress)

    def episodes(self, request: EpisodeRequest, progress: Any = None) -> EpisodeBatch:
        """The request's episodes through the server (else from the in-process model)."""
        try:
            name = None
            if request.policy is not None:
                name = adapter_sync(self.http.url).served_name(request.policy, request.steps)
            return engine_episodes(self.bundle, self.http, request, progress, name)
        except EngineError as err:
            _DOWN.set()
            if self.on_failure is not None:
                self.on_failure(err)
            return InProcess(self.bundle).episodes(request, progress)


# ---------------------------------------------------------------------------------------------
# The choice: environment, probe, fallback


@dataclass(frozen=True)
class Probe:
    """The operator's engine as last probed.

    Attributes:
        engine: the server, None when none is configured or it is not usable.
        why: one sentence when configured but not usable ("" otherwise).
    """

    engine: HttpEngine | None
    why: str


_PROBES: dict[tuple[str, str], tuple[float, Probe]] = {}
_SYNCS: dict[str, AdapterSync] = {}
_LOCK = threading.Lock()
_DOWN = threading.Event()  # a request failed: re-probe before the next use


def configured() -> bool:
    """Whether the operator set ``ROLL_VIZ_ENGINE``."""
    return bool((os.environ.get(ENV_URL) or "").strip())


def served_spec() -> str:
    """The app's model spec the engine serves (other specs stay in-process)."""
    return (os.environ.get(ENV_SPEC) or DEFAULT_MODEL).strip()


def forget() -> None:
    """Drop every probe: the next use probes again (the server restarted, a test's new stub)."""
    with _LOCK:
        _PROBES.clear()


def probe() -> Probe:
    """The operator's engine, probed at most once per ``PROBE_TTL_S`` for the whole process."""
    if not configured():
        return Probe(None, "")
    if _DOWN.is_set():
        forget()
        _DOWN.clear()
    key = (os.environ.get(ENV_URL, ""), os.environ.get(ENV_MODEL, ""))
    now = time.monotonic()
    with _LOCK:
        found = _PROBES.get(key)
    if found is not None and now - found[0] < PROBE_TTL_S:
        return found[1]
    engine, why = from_env({ENV_URL: key[0], ENV_MODEL: key[1]})
    answer = Probe(engine, why)
    with _LOCK:
        _PROBES[key] = (now, answer)
    return answer


def remote(spec: str) -> HttpEngine | None:
    """The server that answers for model ``spec`` (None: the in-process model answers)."""
    if spec != served_spec():
        return None
    return probe().engine


def label(spec: str) -> str:
    """What distinguishes a sample by engine: "" in-process, else the server's label."""
    found = remote(spec)
    return found.label if found is not None else ""


def current(spec: str, bundle: ModelBundle, on_failure: OnFailure = None) -> Engine:
    """The engine that answers for model ``spec`` (``bundle`` is its in-process model).

    Args:
        spec: the model spec the page asks for.
        bundle: the in-process model of ``spec`` (the fallback, and the tokenizer the server's
            answers are decoded with).
        on_failure: called with the error when the server fails mid-request (the request then
            runs in-process).
    """
    found = remote(spec)
    if found is None:
        return InProcess(bundle)
    return Remote(bundle, found, on_failure)


def adapter_sync(url: str) -> AdapterSync:
    """The one adapter sync of the server at ``url`` (made on first use, kept for the process)."""
    with _LOCK:
        found = _SYNCS.get(url)
        if found is None:
            found = _SYNCS[url] = AdapterSync(HttpEngine(url))
    return found


def training_sampler(spec: str, bundle: ModelBundle) -> Any:
    """A ``Trainer.sampler`` whose steps sample on the server (None: the run's own sampler)."""
    found = remote(spec)
    if found is None:
        return None
    return engine_rollout.training_sampler(bundle, found, adapter_sync(found.url))


def conformance(bundle: ModelBundle, url: str, model: str) -> engine_check.Conformance:
    """The server at ``url`` (serving ``model``) checked against the in-process ``bundle``."""
    return engine_check.conformance(bundle, HttpEngine(url, model), adapter_sync(url))


def reencode(bundle: ModelBundle, episode: Any, strip_think: bool = False) -> tuple[int, ...]:
    """``episode``'s history re-encoded from text by ``bundle``'s chat template (``lm.transcript``).

    Where it differs from ``episode.token_ids``, a trainer that re-encodes scores other tokens
    than were sampled. ``strip_think`` drops earlier turns' ``<think>`` blocks first.
    """
    with bundle.lock:
        return reencode_text(bundle.tokenizer, episode, strip_think)


# ---------------------------------------------------------------------------------------------
# The mismatch lab: behaviour log-probs of a batch


def _contexts(bundle: ModelBundle, cfg: SamplingConfig, rollout: Rollout) -> list[list[int]]:
    """Each row's policy context (caller holds ``bundle.lock``)."""
    src = policy_source(cfg)
    return [src.context_ids(bundle, cfg.prompts[g]) for g in rollout.group_ids.tolist()]


def behaviour_of(
    bundle: ModelBundle, cfg: SamplingConfig, rollout: Rollout, source: str, **options: Any
) -> Behaviour:
    """pi_old and mu of ``rollout``'s tokens under behaviour ``source`` (``lm.behaviour``).

    Args:
        bundle: the in-process model the batch was sampled from.
        cfg: the batch's SamplingConfig (its prompts, policy and temperature).
        rollout: the batch.
        source: one of ``SOURCES``.
        **options: ``top_p`` / ``top_k`` for those sources.
    """
    temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    with bundle.lock, torch.inference_mode():
        contexts = _contexts(bundle, cfg, rollout)
        mask = rollout.response_mask > 0
        return behaviour_logprobs(
            bundle,
            contexts,
            rollout.token_ids,
            mask,
            source=source,
            temperature=temperature,
            **options,
        )


def engine_behaviour_of(bundle: ModelBundle, cfg: SamplingConfig, rollout: Rollout) -> Behaviour:
    """The engine's log-probs of a batch it drew (mu) against the float32 trainer's (pi_old)."""
    with bundle.lock, torch.inference_mode():
        contexts = _contexts(bundle, cfg, rollout)
        mask = rollout.response_mask > 0
        return engine_behaviour(bundle, contexts, rollout.token_ids, mask, rollout.logprobs)


# ---------------------------------------------------------------------------------------------
# One run for identical concurrent requests

MAX_FLIGHTS = 64  # at most this many distinct runs tracked at once; beyond, requests run alone

_SHARED = SingleFlight(MAX_FLIGHTS)
_FLIGHTS = _SHARED.flights  # key -> the run in progress


def in_flight() -> int:
    """How many distinct shared runs are in progress (entries are dropped when a run ends)."""
    return _SHARED.in_flight()


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
    return _SHARED.run(key, lambda report: sample(bundle, cfg, report, decode, source), progress)
