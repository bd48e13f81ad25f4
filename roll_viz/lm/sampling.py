"""Sample G responses per prompt from the policy and score every token under policy and reference.

``sample(bundle, cfg)`` is the whole flow, in order:

1. chat-template each prompt twice: the policy's context (through a ``PolicySource``) and the
   reference's context (the plain prompt) (``lm.request``);
2. decode all P*G sampled rows (plus P greedy rows for ReMax's baseline) in ONE batch with a KV
   cache, left-padded prompts, temperature and top-p, drawing with ``torch.multinomial`` from a
   per-request ``torch.Generator`` seeded from ``cfg.seed`` (never the global RNG), stopping each
   row at EOS or after ``max_new_tokens`` (``lm.decode``);
3. one batched teacher-forced forward pass per model over context + response, then log-probs,
   exact KL, entropy and top-K from the final hidden states (``roll_viz.lm.scoring``);
4. reference-model features for a value probe: the final hidden state at each response position
   times a FIXED seeded random projection to F dims (``lm.scoring.probe_features``).

Everything runs inside ``torch.inference_mode()`` while holding ``bundle.lock``.

For a classroom (many students, one CPU model):

- ``lm.rollout.shared_sample`` = ``sample`` with single-flight: identical concurrent requests
  (same bundle, config, decode options, prompt-only policy) share one run and one Rollout.
- ``sample`` waits for the model through ``serving.model_turn`` (reporting "Waiting for the
  model ..." through ``progress``) and publishes its progress there; ``serving.queue_status``,
  ``serving.estimate_seconds`` and ``serving.plan`` answer from it (``calibrate(bundle)``
  measures the rates once at start-up).
- ``capped`` shrinks a config to the classroom limits (``CLASS_MAX_*``).
- The decode loop runs each distinct prompt's prefill once and copies its KV cache to the G rows
  (the teacher-forced scoring passes do the same), keeps prefill logits for the last position
  only, skips the sort when top_p == 1, and draws the sampling noise of the next step in a helper
  thread; all of it gives the tokens of the plain loop (same seed, same bytes). The switches
  that change draws are the explicit ``DecodeOptions(weights="int8")`` (``FAST_DECODE``) and the
  opt-in ``weights="bf16"`` (``BF16_DECODE``): decode with an int8 / bfloat16 copy, score with
  the float model, labelled in ``meta``. A LoRA policy decodes through the lean step over the
  base weights plus its adapter's low-rank product (``DecodeOptions.merge_adapter``), and its
  reference (the same weights, adapter off, the same contexts) decodes beside it in the same
  steps, fed the policy's tokens (``DecodeOptions.pair_reference``): every token is scored from
  the very logits it was drawn from and the reference's, so steps 3 and 4 run no forward pass.

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
  or ``reuse_decode_hidden=False`` the policy gets its own teacher-forced pass. A LoRA policy's
  scores (both models) come from the paired decode steps' logits (above), the same numbers up
  to float rounding.
- Rows of one prompt share the prompt's context, computed once and copied (not paged/shared in
  memory) to each row's KV cache.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core.records import Rollout, RolloutMeta, build_rollout
from roll_viz.lm import threads
from roll_viz.lm.decode import DecodeOptions, decode_batch, pad_right, prefill, weights_kind
from roll_viz.lm.lean_step import LeanDecoder
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.request import (
    PolicySource,
    SamplingConfig,
    policy_source,
    prompt_only,
)
from roll_viz.lm.scoring import (
    FEATURE_SEED,
    TokenScores,
    probe_features,
    response_hidden,
    score_logits,
    score_positions,
    shared_context_hidden,
)
from roll_viz.lm.serving import RunProgress, estimates, model_turn, record_speed

# Classroom limits applied by ``capped`` (what a CPU box answers in seconds).
CLASS_MAX_PROMPTS = 8
CLASS_MAX_GROUP_SIZE = 16
CLASS_MAX_NEW_TOKENS = 128


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
            The live numbers are also in ``serving.queue_status(bundle).running``.
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
    num_rows = cfg.num_sequences
    decode_rows = num_rows + (len(cfg.prompts) if cfg.greedy else 0)
    kind = weights_kind(bundle, decode, source)
    est_decode, est_score = estimates(bundle, cfg, decode, source)
    run = RunProgress(decode_rows * cfg.max_new_tokens, est_decode, est_score)

    def tell(fraction: float, message: str) -> None:
        run.fraction, run.message = fraction, message
        report(fraction, message)

    with model_turn(bundle, run, report), torch.inference_mode():
        tell(0.0, "Applying the chat template")
        ctx = _contexts(bundle, cfg, source)
        drawn = _decode(bundle, cfg, decode, source, kind, ctx, run, tell)
        scored = _score(bundle, cfg, decode, source, ctx, drawn, run, tell)
        run.phase = "text"
        tell(0.95, "Decoding text")
        texts = _texts(bundle, drawn, scored.scores)
        run.phase = "done"
    record_speed(
        bundle,
        kind,
        decode_rows,
        drawn.timings,
        scored.tokens,
        scored.seconds,
        cfg.prompts,
        [len(c) for c in ctx.policy],
        scored.passes,
        num_rows * cfg.max_new_tokens,
    )
    return _rollout(bundle, cfg, source, kind, ctx, drawn, scored, texts)


@dataclass(frozen=True)
class _Contexts:
    """Step 1: chat-templated prompt ids of one request.

    Attributes:
        policy: (P,) the policy's context per prompt.
        reference: (P,) the reference's context per prompt (the policy's when it IS the reference).
        group_ids: (B,) prompt index of each sampled row (rows of one prompt contiguous).
        rows: the context of every decoded row: B sampled rows, then P greedy rows if asked.
    """

    policy: list[list[int]]
    reference: list[list[int]]
    group_ids: Tensor
    rows: list[list[int]]


def _contexts(bundle: ModelBundle, cfg: SamplingConfig, source: PolicySource) -> _Contexts:
    """Step 1: the policy's and the reference's contexts, and each decoded row's."""
    group_ids = torch.arange(len(cfg.prompts)).repeat_interleave(cfg.group_size)  # (B,)
    policy_ctx = [source.context_ids(bundle, p) for p in cfg.prompts]
    ref_ctx = policy_ctx if source.shares_reference else [bundle.chat_ids(p) for p in cfg.prompts]
    rows_ctx = [policy_ctx[g] for g in group_ids.tolist()]
    if cfg.greedy:
        rows_ctx += policy_ctx
    return _Contexts(policy_ctx, ref_ctx, group_ids, rows_ctx)


@dataclass(frozen=True)
class _Drawn:
    """Step 2: what the decode loop produced.

    Attributes:
        sampled: (B,) generated ids of the sampled rows (each ends with EOS or is full length).
        greedy: (P,) generated ids of the greedy rows (empty without ``cfg.greedy``).
        token_ids: (B, T) the sampled ids, right-padded with 0.
        mask: (B, T) bool, real response tokens.
        finish: (B,) "eos" or "length".
        timings: the decode loop's timings (``decode_batch``).
        hidden: (B, T, H) the decode loop's own final hidden states, or None (not kept).
        ref_hidden: (B, T, H) the reference's, when its rows decoded beside the policy's.
        scores: the valid positions' scores from the decode's own logits (with ref_hidden).
    """

    sampled: list[list[int]]
    greedy: list[list[int]]
    token_ids: Tensor
    mask: Tensor
    finish: tuple[str, ...]
    timings: dict
    hidden: Tensor | None
    ref_hidden: Tensor | None = None
    scores: TokenScores | None = None


def _pairs_reference(
    bundle: ModelBundle, decode: DecodeOptions, source: PolicySource, kind: str, ctx: _Contexts
) -> bool:
    """Whether the reference may decode beside the policy (an adapter policy, the lean step)."""
    return (
        decode.pair_reference
        and decode.merge_adapter
        and decode.lean_step
        and decode.static_cache is not True
        and bundle.device.type == "cpu"
        and kind == bundle.dtype_name
        and not prompt_only(source)
        and not source.shares_reference
        and ctx.reference == ctx.policy
        and LeanDecoder.supports(bundle.model)
    )


def _decode(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    decode: DecodeOptions,
    source: PolicySource,
    kind: str,
    ctx: _Contexts,
    run: RunProgress,
    tell: Callable[[float, str], None],
) -> _Drawn:
    """Step 2: decode every row in one batch from the request's own seeded generator."""
    num_rows = cfg.num_sequences

    def count(done: int, total: int) -> None:
        run.tokens_done = done
        left = math.ceil(run.eta_seconds())
        tell(
            0.05 + 0.75 * done / total,
            f"Sampling responses: {done} / {total} tokens, about {left} s left",
        )

    generator = torch.Generator(device=bundle.device).manual_seed(cfg.seed)
    timings: dict = {}
    reuse = decode.reuse_decode_hidden and kind not in ("int8", "bf16")  # float states only
    capture: dict | None = {} if reuse else None
    run.phase, run.decode_started = "decode", time.monotonic()
    reference, steps = None, []
    lp_temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    if reuse and _pairs_reference(bundle, decode, source, kind, ctx):
        reference = prefill(bundle, ctx.rows)  # adapter off: the reference's prompt pass

    def on_logits(policy_logits: Tensor, ref_logits: Tensor, token: Tensor) -> None:
        # the scores of this step's tokens from the logits they were drawn from
        rows = slice(0, num_rows)
        steps.append(
            score_logits(
                policy_logits[rows], ref_logits[rows], token[rows], lp_temperature, cfg.topk
            )
        )

    with source.activate(bundle):
        generated = decode_batch(
            bundle,
            ctx.rows,
            num_sampled=num_rows,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            generator=generator,
            options=replace(
                decode,
                weights=kind if kind in ("int8", "bf16") else "model",
                lean_step=decode.lean_step,  # merged weights while an adapter is on
            ),
            counter=count,
            timings=timings,
            capture=capture,
            reference=reference,
            on_logits=on_logits if reference is not None else None,
        )
    sampled, greedy_rows = generated[:num_rows], generated[num_rows:]
    token_ids, response_mask = pad_right(sampled)  # (B, T)
    width = token_ids.shape[1]
    finish = tuple("eos" if r and r[-1] in bundle.eos_ids else "length" for r in sampled)
    hidden = ref_hidden = scores = None
    if capture and "hidden" in capture:  # the decode loop's own states predict each token
        hidden = capture.pop("hidden")[:num_rows, :width]
    if capture and "ref_hidden" in capture and steps:  # the reference decoded alongside
        ref_hidden = capture.pop("ref_hidden")[:num_rows, :width]
        valid = response_mask.to(bundle.device)
        scores = TokenScores(
            *(torch.stack([s[i] for s in steps], dim=1)[:, :width][valid].cpu() for i in range(8))
        )
    return _Drawn(
        sampled, greedy_rows, token_ids, response_mask, finish, timings, hidden, ref_hidden, scores
    )


@dataclass(frozen=True)
class _Scored:
    """Steps 3 and 4: per-token scores and probe features of the sampled rows.

    Attributes:
        scores: the valid positions' scores (flattened, ``scoring.TokenScores``).
        features: (B, T, F) probe features, zero on padding.
        seconds: wall seconds of the scoring phase.
        passes: teacher-forced forward passes run (0, 1 or 2).
        tokens: tokens those passes covered (for the forward rate).
    """

    scores: TokenScores
    features: Tensor
    seconds: float
    passes: int
    tokens: int


def _score(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    decode: DecodeOptions,
    source: PolicySource,
    ctx: _Contexts,
    drawn: _Drawn,
    run: RunProgress,
    tell: Callable[[float, str], None],
) -> _Scored:
    """Steps 3 and 4: score each token under policy and reference; the reference's features."""
    num_rows = cfg.num_sequences
    token_ids, response_mask = drawn.token_ids, drawn.mask
    lp_temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    run.phase, run.score_started = "score", time.monotonic()
    base_threads = torch.get_num_threads()

    def adapt() -> None:  # every core for the next pass while the machine is idle
        # prompt-only sources: passes measured bitwise the same under 1 and 2 threads
        if decode.adapt_threads and prompt_only(source):
            threads.apply(threads.choose(base_threads))

    if drawn.scores is not None and drawn.ref_hidden is not None:  # scored while decoding
        features = probe_features(drawn.ref_hidden, cfg.feature_dim) * response_mask[..., None]
        return _Scored(drawn.scores, features, time.monotonic() - run.score_started, 0, 0)
    tell(0.8, "Scoring the responses under the policy")
    hidden_of = shared_context_hidden if decode.share_prompt_prefill else response_hidden
    forward_passes = 0 if source.shares_reference else 1
    if drawn.hidden is not None:
        policy_hidden = drawn.hidden
    else:
        forward_passes += 1
        adapt()
        with source.activate(bundle):
            policy_hidden = hidden_of(bundle, ctx.rows[:num_rows], token_ids, response_mask)
    if source.shares_reference:
        ref_hidden = None
    else:
        tell(0.88, "Scoring the same tokens under the reference")
        ref_rows = [ctx.reference[g] for g in ctx.group_ids.tolist()]
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
    features = probe_features(policy_hidden if ref_hidden is None else ref_hidden, cfg.feature_dim)
    features = features * response_mask[..., None]
    threads.apply(base_threads)
    score_s = time.monotonic() - run.score_started
    width = token_ids.shape[1]
    scored = forward_passes * sum(len(c) + width for c in ctx.rows[:num_rows])
    return _Scored(scores, features, score_s, forward_passes, scored)


@dataclass(frozen=True)
class _Texts:
    """The decoded text of a request: responses, greedy responses, and each id's token text."""

    responses: tuple[str, ...]
    greedy: tuple[str, ...]
    vocab: dict[int, str]


def _texts(bundle: ModelBundle, drawn: _Drawn, scores: TokenScores) -> _Texts:
    """Decode the responses and every token id shown (sampled or a top-K alternative)."""
    tokenizer = bundle.tokenizer
    responses = tuple(_response_text(tokenizer, r, bundle.eos_ids) for r in drawn.sampled)
    greedy = tuple(_response_text(tokenizer, r, bundle.eos_ids) for r in drawn.greedy)
    vocab_ids = sorted(
        {i for row in drawn.sampled for i in row} | set(scores.topk_ids.flatten().tolist())
    )
    vocab = {i: tokenizer.decode([i]) for i in vocab_ids}
    return _Texts(responses, greedy, vocab)


def _rollout(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    source: PolicySource,
    kind: str,
    ctx: _Contexts,
    drawn: _Drawn,
    scored: _Scored,
    texts: _Texts,
) -> Rollout:
    """The Rollout of a request, with ordinary tensors (outside inference mode) and its meta."""
    # Leave inference mode with ordinary tensors (callers may use them with autograd or in place).
    valid = drawn.mask.clone()
    token_ids, features = drawn.token_ids.clone(), scored.features.clone()
    tokens = tuple(tuple(texts.vocab[i] for i in row) for row in drawn.sampled)
    scores = scored.scores

    def spread(values: Tensor) -> Tensor:  # (N, ...) valid positions -> (B, T, ...) zero padded
        out = torch.zeros((*valid.shape, *values.shape[1:]), dtype=values.dtype)
        out[valid] = values.clone()
        return out

    return build_rollout(
        prompts=cfg.prompts,
        group_ids=ctx.group_ids.clone(),
        responses=texts.responses,
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
        sum_pi_squared=spread(scores.sum_pi2),
        finish_reasons=drawn.finish,
        greedy_responses=texts.greedy,
        features=features,
        vocab=texts.vocab,
        meta=_meta(bundle, cfg, source, kind),
    )


def _meta(bundle: ModelBundle, cfg: SamplingConfig, source: PolicySource, kind: str) -> RolloutMeta:
    """What the Rollout says about how it was made (model, decoding, scoring conventions)."""
    lp_temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    meta = RolloutMeta(
        model=bundle.name,
        model_spec=bundle.spec,
        device=str(bundle.device),
        dtype=bundle.dtype_name,
        seed=cfg.seed,
        group_size=cfg.group_size,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        policy_mode=cfg.policy_mode,
        instruction=cfg.instruction if cfg.policy_mode == "steered" else "",
        logprob_temperature=lp_temperature,
        logprob_note=(
            f"log_softmax(logits / {lp_temperature:g}) over the full vocabulary, "
            "same temperature for policy and reference; top-p truncation not applied"
        ),
        kl_note=(
            "identical: the policy IS the reference, reference scores reuse the policy's, "
            "so KL is exactly 0 (the start of RL training)"
            if source.shares_reference
            else "steered: the policy sees the hidden instruction, the reference scores the same "
            "tokens without it; exact KL(policy || ref) over the full vocabulary"
        ),
        decode_weights={"int8": "int8-dynamic", "bf16": "bfloat16-lean"}.get(kind, kind),
        decode_note={
            "int8": "responses drawn by an int8 dynamically quantized copy of the model (fast "
            f"decode); scores from the {bundle.dtype_name} model",
            "bf16": "responses drawn by a bfloat16 copy of the model's projections (opt-in fast "
            f"decode); scores from the {bundle.dtype_name} model",
        }.get(kind, f"responses drawn by the {bundle.dtype_name} model"),
        topk=cfg.topk,
        feature_dim=cfg.feature_dim,
        feature_note=(
            f"reference final hidden state x fixed random projection (seed {FEATURE_SEED})"
        ),
    )
    return meta


def _response_text(tokenizer: Any, ids: list[int], eos_ids: tuple[int, ...]) -> str:
    """Decoded response without its final EOS token (untrusted model text, kept as a plain str)."""
    body = ids[:-1] if ids and ids[-1] in eos_ids else ids
    return tokenizer.decode(body, skip_special_tokens=False)


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
