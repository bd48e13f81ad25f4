"""Multi-turn episodes of the real model against the toy tools, token-exact and seeded.

API (``lm.rollout`` offers it to the pages: ``current(spec, bundle).episodes(request)``):

- ``EpisodeRequest(tasks, group_size, max_turns, max_turn_tokens, temperature, top_p, seed,
  policy, steps)``: frozen, validated against the bounds below (every broken rule in one
  message);
- ``sample_episodes(bundle, request, progress) -> EpisodeBatch``: the in-process model;
- ``engine_episodes(bundle, engine, request, progress, adapter) -> EpisodeBatch``: a rollout
  engine (``lm.engine.RolloutEngine``: the operator's vLLM server, or ``LocalEngine``);
- ``score_transcripts(bundle, episodes, temperature, policy)``: a fresh teacher-forced scoring
  of the sampled tokens of finished transcripts, (policy, reference) log-probs per assistant
  segment (what the in-process path stores, and what a trainer computes);
- ``EpisodeBatch``: the episodes (task-major, the G of one task contiguous), which engine drew
  them, and ``note``: how the log-probs were made, in one sentence.

How an episode is made (``toy_tools`` for the environments, ``transcript`` for the template):

1. the context starts as the system prompt (the environment's tool syntax), a worked exchange
   (user, assistant, tool messages written by hand, ``sampled=False``) and the task's question
   (``toy_tools.task_prompt``), each as the chat template writes it, then the assistant's
   header: all turn -1;
2. each turn, every unfinished episode draws up to ``max_turn_tokens`` tokens; they are appended
   to its context VERBATIM (never decoded and re-encoded: the extension property), the
   environment answers the decoded text (``toy_tools.step``) and its reply is appended as one
   tool (or user) message tokenised once, with the template's close of the assistant turn before
   it and the next assistant header after it;
3. an episode stops at an answer ("answer"), after ``max_turns`` turns ("max_turns"), or when the
   next turn would not fit in ``MAX_EPISODE_TOKENS`` ("max_tokens"); the environment's reply to
   the last turn is kept (without a header after it) when it fits in the bound, else left out;
4. in-process, one teacher-forced pass over the finished transcripts scores every sampled token
   under the policy and one under the reference (none when the policy IS the reference: the
   same numbers), ``log_softmax(logits / T)`` over the full vocabulary as ``lm.sampling`` does
   (T = the sampling temperature, 1 for greedy). Through an engine, the policy's log-probs are
   those the engine returned with its draws, the reference's its ``score`` of the same tokens
   (raw log-probs, temperature 1, as ``lm.engine`` reports them).

Seeds: in-process, turn t of a request draws from ``torch.Generator().manual_seed(turn_seed(seed,
t))`` for all its rows in one decode batch (never the global RNG). Through an engine each
episode's turn is its own request with seed ``row_seed(seed, row, t)`` (vLLM seeds per request:
rows of identical contexts under one seed would draw the same tokens). The two paths draw
different tokens for the same seed; each is reproducible per seed.

Bounds (``EpisodeRequest`` rejects more): ``MAX_EPISODE_TASKS`` (6) tasks,
``MAX_EPISODE_GROUP`` (8) episodes per task, ``MAX_TURNS`` (4) agent turns, ``MAX_TURN_TOKENS``
(64) tokens per turn, ``MAX_EPISODE_TOKENS`` (1024) tokens per transcript, prompt included; the
tools' own bounds are in ``toy_tools``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from roll_viz.core.agentic.episode import Episode, Segment
from roll_viz.lm import toy_tools
from roll_viz.lm.decode import DecodeOptions, decode_batch, pad_right
from roll_viz.lm.engine import RolloutEngine
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.scoring import response_hidden, score_positions
from roll_viz.lm.transcript import ChatPieces

MAX_EPISODE_TASKS = 6
MAX_EPISODE_GROUP = 8
MAX_TURNS = 4
MAX_TURN_TOKENS = 64
MAX_EPISODE_TOKENS = 1024  # the whole transcript, prompt included (the tiny model's bytes too)
MAX_TEMPERATURE = 2.0

Progress = Callable[[float, str], None] | None


@dataclass(frozen=True)
class EpisodeRequest:
    """Which tasks, how many episodes each, and how they are sampled. Frozen and validated.

    Attributes:
        tasks: task ids of ``toy_tools.TASKS`` (at most ``MAX_EPISODE_TASKS``, no repeats).
        group_size: G episodes per task (1..``MAX_EPISODE_GROUP``).
        max_turns: agent turns per episode (1..``MAX_TURNS``).
        max_turn_tokens: tokens the model may write per turn (1..``MAX_TURN_TOKENS``); a turn
            cut there is closed by the template and the episode goes on.
        temperature: sampling temperature in [0, ``MAX_TEMPERATURE``]; 0 = greedy.
        top_p: nucleus mass in (0, 1].
        seed: the request's seed (``turn_seed`` / ``row_seed``).
        policy: a LoRA policy (``lm.lora.LoraPolicy``) or None: the base model, which is then
            also the reference.
        steps: the policy's updates so far (the name an engine serves its adapter under).
    """

    tasks: tuple[str, ...]
    group_size: int = 4
    max_turns: int = 3
    max_turn_tokens: int = 24
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    policy: Any = None
    steps: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.tasks, str):
            raise ValueError("tasks must be a tuple of task ids, not one string")
        object.__setattr__(self, "tasks", tuple(self.tasks))
        problems = []
        unknown = [t for t in self.tasks if t not in toy_tools.TASKS]
        if not self.tasks:
            problems.append("give at least one task")
        if unknown:
            problems.append(f"unknown tasks {unknown}; known: {sorted(toy_tools.TASKS)}")
        if len(set(self.tasks)) != len(self.tasks):
            problems.append("each task at most once")
        if len(self.tasks) > MAX_EPISODE_TASKS:
            problems.append(f"at most {MAX_EPISODE_TASKS} tasks (got {len(self.tasks)})")
        for name, value, top in (
            ("group_size", self.group_size, MAX_EPISODE_GROUP),
            ("max_turns", self.max_turns, MAX_TURNS),
            ("max_turn_tokens", self.max_turn_tokens, MAX_TURN_TOKENS),
        ):
            if not 1 <= value <= top:
                problems.append(f"{name} must be 1..{top} (got {value})")
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            problems.append(f"temperature must be in [0, {MAX_TEMPERATURE}]")
        if not 0.0 < self.top_p <= 1.0:
            problems.append("top_p must be in (0, 1]")
        if not 0 <= self.seed < 2**63:
            problems.append("seed must be a non-negative integer below 2**63")
        if problems:
            raise ValueError("invalid EpisodeRequest: " + "; ".join(problems))

    @property
    def logprob_temperature(self) -> float:
        """The temperature of the in-process log-probs (the sampling one, 1 for greedy)."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass(frozen=True)
class EpisodeBatch:
    """The episodes of one request.

    Attributes:
        episodes: (B,) task-major: the G episodes of ``request.tasks[i]`` are rows i*G..i*G+G-1.
        engine: "" in-process, else the engine's label.
        note: how the tokens were drawn and the log-probs made (one or two sentences).
        model: the model's name.
    """

    episodes: tuple[Episode, ...]
    engine: str
    note: str
    model: str


def turn_seed(seed: int, turn: int) -> int:
    """The in-process generator's seed for turn ``turn`` of a request seeded ``seed``."""
    return _mix(f"episodes|{seed}|{turn}")


def row_seed(seed: int, row: int, turn: int) -> int:
    """The engine request's seed for episode ``row``'s turn ``turn``."""
    return _mix(f"episodes|{seed}|{row}|{turn}")


def _mix(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % 2**63


# ---------------------------------------------------------------------------------------------
# The episode loop (shared by both paths)


@dataclass
class _Live:
    """One episode while it runs (mutable book-keeping, frozen into an ``Episode`` at the end)."""

    task: toy_tools.Task
    state: toy_tools.EnvState
    ids: list[int]
    segments: list[Segment]
    rewards: list[float] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    stop: str = ""


#: (contexts, turn, rows) -> per row: (sampled ids, the sampler's log-probs or None)
Draw = Callable[[list[list[int]], int, list[int]], list[tuple[list[int], list[float] | None]]]


def _start(bundle: ModelBundle, pieces: ChatPieces, task: toy_tools.Task) -> _Live:
    """An episode's prompt, all turn -1: system message, worked exchange, question, header.

    The messages are ``toy_tools.task_prompt(task)``; its worked exchange is written, not sampled.
    """
    tok = bundle.tokenizer
    segments = [
        Segment(role, text, tuple(pieces.message_ids(tok, role, text)), -1)
        for role, text in toy_tools.task_prompt(task)
    ]
    last = segments[-1]
    segments[-1] = Segment(last.role, last.text, last.token_ids + tuple(pieces.header_ids(tok)), -1)
    ids = [t for s in segments for t in s.token_ids]
    return _Live(task, toy_tools.reset(task), ids, segments)


def _roll(
    bundle: ModelBundle, request: EpisodeRequest, draw: Draw, report: Progress
) -> list[_Live]:
    """Run every episode of ``request`` turn by turn (module docstring, steps 1-3)."""
    tok, eos = bundle.tokenizer, set(bundle.eos_ids)
    pieces = ChatPieces.of(tok)
    tasks = [toy_tools.TASKS[t] for t in request.tasks]
    live = [_start(bundle, pieces, t) for t in tasks for _ in range(request.group_size)]
    header = pieces.header_ids(tok)
    for turn in range(request.max_turns):
        rows = [i for i, e in enumerate(live) if not e.stop]
        for i in list(rows):
            if len(live[i].ids) + request.max_turn_tokens > MAX_EPISODE_TOKENS:
                live[i].stop = "max_tokens"  # only the prompt can be this long (checked below)
                rows.remove(i)
        if not rows:
            break
        if report is not None:
            report(turn / request.max_turns, f"Turn {turn + 1} of {request.max_turns}")
        drawn = draw([live[i].ids for i in rows], turn, rows)
        for i, (ids, logprobs) in zip(rows, drawn, strict=True):
            ep = live[i]
            ep.states.append(toy_tools.state_id(ep.task, ep.state))
            ended = bool(ids) and ids[-1] in eos
            text = tok.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
            step = toy_tools.step(ep.task, ep.state, text)
            ep.segments.append(
                Segment(
                    "assistant",
                    text,
                    tuple(ids),
                    turn,
                    sampled=True,
                    logprobs=None if logprobs is None else tuple(logprobs),
                    tool_call=step.call,
                )
            )
            ep.rewards.append(step.reward)
            ep.state = step.state
            reply = pieces.close_ids(tok, bool(ids) and ids[-1] == tok.eos_token_id)
            reply += pieces.message_ids(tok, step.role, step.observation)
            total = len(ep.ids) + len(ids) + len(reply)
            if step.done:
                ep.stop = "answer"
            elif turn == request.max_turns - 1:
                ep.stop = "max_turns"
            elif total + len(header) + request.max_turn_tokens > MAX_EPISODE_TOKENS:
                ep.stop = "max_tokens"
            else:
                reply += header
            if total <= MAX_EPISODE_TOKENS:  # else the reply is left out: the bound holds
                ep.segments.append(Segment(step.role, step.observation, tuple(reply), turn))
            else:
                reply = []
            ep.ids += [*ids, *reply]
    return live


def _freeze(live: list[_Live], seed: int) -> tuple[Episode, ...]:
    return tuple(
        Episode(
            task=e.task.id,
            env=e.task.env,
            segments=tuple(e.segments),
            outcome=toy_tools.outcome(e.task, e.state),
            turn_rewards=tuple(e.rewards),
            states=tuple(e.states),
            stop=e.stop or "max_turns",
            seed=seed,
            # the turn rewards are progress increments (toy_tools): the state score is their sum
            progress=tuple(itertools.accumulate(e.rewards)),
        )
        for e in live
    )


def _with_scores(
    episodes: tuple[Episode, ...], scores: list[tuple[list[float], list[float]]]
) -> tuple[Episode, ...]:
    """Episodes with each assistant segment's (policy, reference) log-probs filled in, in order."""
    found = iter(scores)

    def scored(seg: Segment) -> Segment:
        if not seg.sampled:
            return seg
        logprobs, ref = next(found)
        return replace(seg, logprobs=tuple(logprobs), ref_logprobs=tuple(ref))

    return tuple(replace(ep, segments=tuple(scored(s) for s in ep.segments)) for ep in episodes)


# ---------------------------------------------------------------------------------------------
# In-process


def sample_episodes(
    bundle: ModelBundle, request: EpisodeRequest, progress: Progress = None
) -> EpisodeBatch:
    """Sample G episodes per task from the in-process model, then score them (module docstring).

    Holds ``bundle.lock`` for the whole request (turns and scoring).
    """
    source = request.policy

    def draw(contexts: list[list[int]], turn: int, rows: list[int]) -> list:
        generator = torch.Generator(device=bundle.device).manual_seed(turn_seed(request.seed, turn))
        with _activate(source, bundle):
            sampled = decode_batch(
                bundle,
                contexts,
                num_sampled=len(contexts),
                temperature=request.temperature,
                top_p=request.top_p,
                max_new_tokens=request.max_turn_tokens,
                generator=generator,
                options=DecodeOptions(),
            )
        return [(ids, None) for ids in sampled]

    with bundle.lock, torch.inference_mode():
        episodes = _freeze(_roll(bundle, request, draw, progress), request.seed)
        if progress is not None:
            progress(0.9, "Scoring the sampled tokens under the policy and the reference")
        scores = _score_locked(bundle, episodes, request.logprob_temperature, source)
    note = (
        f"Drawn in-process by {bundle.name} ({bundle.dtype_name}); log-probs "
        f"log_softmax(logits / {request.logprob_temperature:g}) from one teacher-forced pass "
        "over each finished transcript"
        + (
            ", the reference is the policy (the same numbers)."
            if source is None
            else ", the reference is the base model without the adapter."
        )
    )
    return EpisodeBatch(_with_scores(episodes, scores), "", note, bundle.name)


def _activate(source: Any, bundle: ModelBundle) -> Any:
    """The policy's weights on (a LoRA policy's ``activate``), a no-op for the base model."""
    if source is None:
        return contextlib.nullcontext()
    return source.activate(bundle)


def score_transcripts(
    bundle: ModelBundle,
    episodes: tuple[Episode, ...],
    temperature: float = 1.0,
    policy: Any = None,
) -> list[tuple[list[float], list[float]]]:
    """A fresh teacher-forced scoring of every assistant segment's tokens, in transcript order.

    One pass per model over each whole transcript (``Episode.token_ids``); the hidden state at
    position i predicts token i + 1. Takes ``bundle.lock``.

    Returns:
        Per assistant segment (episodes in order, segments in order): (policy log-probs,
        reference log-probs); the reference's are the policy's when ``policy`` is None.
    """
    with bundle.lock, torch.inference_mode():
        return _score_locked(bundle, episodes, temperature, policy)


def _score_locked(
    bundle: ModelBundle, episodes: tuple[Episode, ...], temperature: float, policy: Any
) -> list[tuple[list[float], list[float]]]:
    """``score_transcripts`` with the lock held, inside inference mode."""
    rows = [list(ep.token_ids) for ep in episodes]
    targets, mask = pad_right([r[1:] for r in rows])  # (B, T-1): token i+1 of each transcript
    sampled = torch.zeros_like(mask)
    lengths = []
    for b, ep in enumerate(episodes):
        start = 0
        for seg in ep.segments:
            if seg.sampled:
                # the segment's tokens sit at transcript positions start..; targets are shifted by 1
                sampled[b, start - 1 : start - 1 + len(seg.token_ids)] = True
                lengths.append(len(seg.token_ids))
            start += len(seg.token_ids)
    contexts = [r[:1] for r in rows]
    with _activate(policy, bundle):
        hidden = response_hidden(bundle, contexts, targets, mask)
    ref_hidden = None if policy is None else response_hidden(bundle, contexts, targets, mask)
    valid = sampled.to(bundle.device)
    scores = score_positions(
        bundle.model.get_output_embeddings(),
        hidden[valid],
        None if ref_hidden is None else ref_hidden[valid],
        targets.to(bundle.device)[valid],
        temperature=temperature,
        k=1,
    )
    logprobs, ref = scores.logprobs.tolist(), scores.ref_logprobs.tolist()
    out, k = [], 0
    for n in lengths:
        out.append((logprobs[k : k + n], ref[k : k + n]))
        k += n
    return out


# ---------------------------------------------------------------------------------------------
# Through a rollout engine


def engine_episodes(
    bundle: ModelBundle,
    engine: RolloutEngine,
    request: EpisodeRequest,
    progress: Progress = None,
    adapter: str | None = None,
) -> EpisodeBatch:
    """Sample G episodes per task through a rollout engine, token-exact (module docstring).

    The engine takes each context as token ids and returns the drawn ids with their log-probs,
    so the transcript is built by appending ids exactly as in-process. Each episode's turn is one
    ``engine.sample`` call (G = 1, its own ``row_seed``); the reference's log-probs come from one
    ``engine.score`` call over every assistant segment after its own prefix (adapter None).

    Args:
        bundle: the in-process model whose tokenizer and chat template build the contexts.
        engine: the rollout engine (``HttpEngine`` or ``LocalEngine``).
        request: what to sample (``request.policy`` is not used: name its adapter).
        progress: optional ``(fraction, message)`` callback.
        adapter: the engine's name of the policy's adapter, None for the base model.

    Raises:
        EngineError: the engine failed (the caller falls back in-process).
    """

    def draw(contexts: list[list[int]], turn: int, rows: list[int]) -> list:
        out = []
        for context, row in zip(contexts, rows, strict=True):
            answer = engine.sample(
                [context],
                1,
                request.max_turn_tokens,
                request.temperature,
                row_seed(request.seed, row, turn),
                adapter=adapter,
                topk=1,
                top_p=request.top_p,
            )
            out.append((list(answer.token_ids[0]), list(answer.logprobs[0])))
        return out

    episodes = _freeze(_roll(bundle, request, draw, progress), request.seed)
    prefixes, responses, policy = [], [], []
    for ep in episodes:
        start = 0
        ids = ep.token_ids
        for seg in ep.segments:
            if seg.sampled:
                prefixes.append(list(ids[:start]))
                responses.append(list(seg.token_ids))
                policy.append(list(seg.logprobs or ()))
            start += len(seg.token_ids)
    if progress is not None:
        progress(0.9, "Scoring the sampled tokens under the reference")
    ref = engine.score(prefixes, responses, adapter=None, topk=1).logprobs
    scores = [(p, list(r)) for p, r in zip(policy, ref, strict=True)]
    note = (
        f"Drawn by the engine ({engine.label}), each turn's context sent as token ids and its "
        "answer appended as the ids it returned; log-probs are the engine's raw ones "
        "(temperature 1): the policy's from its draws, the reference's from its scoring pass"
        + (
            ""
            if request.temperature == 1.0
            else f" (sampled at temperature {request.temperature:g})"
        )
        + "."
    )
    return EpisodeBatch(_with_scores(episodes, scores), engine.label, note, bundle.name)
