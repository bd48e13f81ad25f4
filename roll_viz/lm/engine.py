"""One rollout interface, two engines: the in-process torch model and a vLLM server over HTTP.

A rollout engine answers two questions at the token level:

- ``sample(prompts, group_size, max_new_tokens, temperature, seed, adapter)``: G answers per
  chat-templated prompt (token ids), with the sampler's log-probability of each drawn token, the
  top-K alternatives at each position and why each answer ended (``EngineSample``);
- ``score(prompt_ids, response_ids, adapter)``: the log-probability of given response tokens
  after given prompts, with the top-K at each position (``EngineScore``), the reference model's
  pass when ``adapter`` is None.

``LocalEngine`` answers from the shared in-process model (``lm.models``), holding
``bundle.lock`` like every request; ``lm.engine_http.HttpEngine`` asks an OpenAI-compatible vLLM
server. Both report RAW log-probabilities (``log_softmax`` of the logits at temperature 1,
whatever the sampling temperature), as vLLM does by default (``logprobs_mode=raw_logprobs``), so
the two are comparable token for token (``lm.engine_check``).

The pages' rollout goes through one door, ``lm.rollout``: its in-process engine IS
``lm.sampling.sample`` (its numbers are today's, bit for bit), its remote engine is
``lm.engine_rollout`` over ``HttpEngine``. ``LocalEngine`` is this token-level interface answered
in-process: the reference ``lm.engine_check`` compares a server against (the Self-test page's
engine line) and what the tests' stub server answers with. ``LocalEngine.sample`` decodes with
the same loop, generator and options, so for one seed it draws the same tokens as
``sampling.sample`` without greedy rows (a test checks it).

An adapter is named by a string: for ``LocalEngine`` a live ``LoraPolicy`` of the bundle is passed
through ``adapters`` (name -> policy); for the HTTP engine, the name the adapter was loaded under
(``lm.engine_sync``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from roll_viz.lm.decode import DecodeOptions, decode_batch, pad_right
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.scoring import response_hidden, score_positions

DEFAULT_TOPK = 5


class EngineError(RuntimeError):
    """A rollout engine could not answer; the message is one sentence a page can show."""


@dataclass(frozen=True)
class EngineSample:
    """G sampled answers per prompt (rows of one prompt contiguous, prompt-major).

    Attributes:
        prompt_index: (B,) the prompt each row answers.
        token_ids: (B,) generated ids per row (an answer that ended at EOS ends with it).
        logprobs: (B,) per row, the sampler's raw log pi of each drawn token.
        topk_ids: (B,) per row, per position, the K most likely token ids (most likely first).
        topk_logprobs: (B,) per row, per position, their raw log pi.
        finish_reasons: (B,) "eos" or "length".
        engine: which engine answered ("in-process" or "vLLM at <url>").
    """

    prompt_index: tuple[int, ...]
    token_ids: tuple[tuple[int, ...], ...]
    logprobs: tuple[tuple[float, ...], ...]
    topk_ids: tuple[tuple[tuple[int, ...], ...], ...]
    topk_logprobs: tuple[tuple[tuple[float, ...], ...], ...]
    finish_reasons: tuple[str, ...]
    engine: str = ""


@dataclass(frozen=True)
class EngineScore:
    """Log-probabilities of given response tokens, one entry per (prompt, response) pair.

    Attributes:
        logprobs: per pair, per response token, raw log p of that token.
        topk_ids: per pair, per position, the K most likely ids (most likely first).
        topk_logprobs: per pair, per position, their raw log p.
        extra: per pair, per position, further {token id: log p} the engine returned (the
            scored token, and for the HTTP engine the top-K); empty for the local engine.
    """

    logprobs: tuple[tuple[float, ...], ...]
    topk_ids: tuple[tuple[tuple[int, ...], ...], ...]
    topk_logprobs: tuple[tuple[tuple[float, ...], ...], ...]
    extra: tuple[tuple[dict[int, float], ...], ...] = ()


class RolloutEngine(Protocol):
    """What the model layer asks of a rollout engine (see the module docstring)."""

    label: str

    def sample(
        self,
        prompts: list[list[int]],
        group_size: int,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        adapter: str | None = None,
        topk: int = DEFAULT_TOPK,
        top_p: float = 1.0,
    ) -> EngineSample:
        """G answers per prompt, with the sampler's log-probs and top-K."""
        ...

    def score(
        self,
        prompt_ids: list[list[int]],
        response_ids: list[list[int]],
        adapter: str | None = None,
        topk: int = DEFAULT_TOPK,
    ) -> EngineScore:
        """Log-probs of each response after its prompt, under base (+ adapter)."""
        ...


@dataclass
class LocalEngine:
    """The in-process engine: the shared torch model, one request at a time under its lock.

    Args:
        bundle: the shared model.
        adapters: adapter name -> a live ``LoraPolicy`` of ``bundle`` (the name the caller uses).
    """

    bundle: ModelBundle
    adapters: dict[str, Any] = field(default_factory=dict)
    label: str = "in-process"

    def _activate(self, adapter: str | None) -> contextlib.AbstractContextManager:
        if adapter is None:
            return contextlib.nullcontext()
        if adapter not in self.adapters:
            raise EngineError(f"the in-process engine has no adapter named {adapter!r}")
        return self.adapters[adapter].activate(self.bundle)

    def sample(
        self,
        prompts: list[list[int]],
        group_size: int,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        adapter: str | None = None,
        topk: int = DEFAULT_TOPK,
        top_p: float = 1.0,
    ) -> EngineSample:
        """Decode G rows per prompt in one batch (``lm.decode``), then score them at T = 1.

        The draws are those of ``sampling.sample`` for the same seed without greedy rows: the
        same contexts, generator, decode loop and options.
        """
        rows = [list(p) for p in prompts for _ in range(group_size)]
        index = tuple(i for i in range(len(prompts)) for _ in range(group_size))
        bundle = self.bundle
        with bundle.lock, torch.inference_mode():
            generator = torch.Generator(device=bundle.device).manual_seed(seed)
            with self._activate(adapter):
                generated = decode_batch(
                    bundle,
                    rows,
                    num_sampled=len(rows),
                    temperature=temperature,
                    top_p=top_p,
                    max_new_tokens=max_new_tokens,
                    generator=generator,
                    options=DecodeOptions(weights="model"),
                )
            scores = self._score_locked(rows, generated, adapter, topk)
        finish = tuple("eos" if r and r[-1] in bundle.eos_ids else "length" for r in generated)
        return EngineSample(
            prompt_index=index,
            token_ids=tuple(tuple(r) for r in generated),
            logprobs=scores.logprobs,
            topk_ids=scores.topk_ids,
            topk_logprobs=scores.topk_logprobs,
            finish_reasons=finish,
            engine=self.label,
        )

    def score(
        self,
        prompt_ids: list[list[int]],
        response_ids: list[list[int]],
        adapter: str | None = None,
        topk: int = DEFAULT_TOPK,
    ) -> EngineScore:
        """One teacher-forced pass over prompt + response (``scoring.response_hidden``), T = 1."""
        with self.bundle.lock, torch.inference_mode():
            return self._score_locked(prompt_ids, response_ids, adapter, topk)

    def _score_locked(
        self,
        prompt_ids: list[list[int]],
        response_ids: list[list[int]],
        adapter: str | None,
        topk: int,
    ) -> EngineScore:
        if len(prompt_ids) != len(response_ids):
            raise ValueError("prompt_ids and response_ids must have the same length")
        if not response_ids or all(len(r) == 0 for r in response_ids):
            empty = tuple(() for _ in response_ids)
            return EngineScore(empty, empty, empty, empty)
        bundle = self.bundle
        token_ids, mask = pad_right([list(r) for r in response_ids])
        with self._activate(adapter):
            hidden = response_hidden(bundle, [list(p) for p in prompt_ids], token_ids, mask)
        valid = mask.to(bundle.device)
        scores = score_positions(
            bundle.model.get_output_embeddings(),
            hidden[valid],
            None,
            token_ids.to(bundle.device)[valid],
            temperature=1.0,
            k=topk,
        )
        lengths = [len(r) for r in response_ids]
        return EngineScore(
            logprobs=_split(scores.logprobs.tolist(), lengths),
            topk_ids=_split(scores.topk_ids.tolist(), lengths),
            topk_logprobs=_split(scores.topk_logprobs.tolist(), lengths),
            extra=tuple(tuple({} for _ in range(n)) for n in lengths),
        )


def _split(flat: list, lengths: list[int]) -> tuple:
    """Cut a flat per-position list into per-row tuples (nested lists become tuples)."""
    out, start = [], 0
    for n in lengths:
        part = flat[start : start + n]
        out.append(tuple(tuple(x) if isinstance(x, list) else x for x in part))
        start += n
    return tuple(out)
