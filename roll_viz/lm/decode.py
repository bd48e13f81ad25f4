"""The decode loop: all rows of a request in one batch with a KV cache, top-p draws, int8 copy.

``decode_batch(bundle, contexts, ...)`` decodes every row (P*G sampled rows plus P greedy rows)
at once: prompts left-padded, position ids counting real tokens, temperature and top-p drawn
with ``torch.multinomial`` from the request's own ``torch.Generator`` (``next_tokens``), each
row stopping at EOS or after ``max_new_tokens``. ``DecodeOptions`` holds its switches:

- speed only (the tokens of the plain loop, same seed, same bytes): each distinct prompt's
  prefill runs once and its KV cache is copied to the G rows; the prefill keeps the logits of
  the last position only; the sort is skipped when top_p == 1; the sampling noise of the next
  step is drawn ahead in a helper thread (``NoiseStream``); the lean step (``lm.lean_step``);
  the thread count per phase (``lm.threads``);
- the switch that changes draws: ``weights="int8"`` (``FAST_DECODE``) decodes with an int8
  dynamically quantized copy of the model, ``weights="bf16"`` (``BF16_DECODE``, opt-in) with a
  bfloat16 copy of the lean step's projections (CPU only); scoring stays with the float model;
- with a LoRA adapter on, the lean step reads the base weights and adds the adapter's low-rank
  product (``merge_adapter``; the peft model's draws up to float rounding), and the reference's
  rows (adapter off) can decode beside the policy's in the same steps (``reference``,
  ``DecodeOptions.pair_reference``): its scores then need no teacher-forced pass.

Padding helpers (``pad_left``, ``pad_right``, ``distinct``) are shared with the teacher-forced
passes in ``lm.scoring``. The switches live in ``lm.decode_options`` and the token draw in
``lm.token_draw``; their public names are re-exported here.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz.lm import threads
from roll_viz.lm.decode_options import BF16_DECODE as BF16_DECODE
from roll_viz.lm.decode_options import FAST_DECODE as FAST_DECODE
from roll_viz.lm.decode_options import PLAIN_DECODE as PLAIN_DECODE
from roll_viz.lm.decode_options import DecodeOptions
from roll_viz.lm.decode_options import weights_kind as weights_kind
from roll_viz.lm.lean_step import LeanDecoder, adapter_active
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.token_draw import NoiseStream
from roll_viz.lm.token_draw import next_tokens as next_tokens

STATIC_CACHE_STEP = 128  # static KV cache lengths are multiples of this


def distinct(contexts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(the distinct contexts in order of first appearance, each row's index into them)."""
    unique: dict[tuple[int, ...], int] = {}
    index = [unique.setdefault(tuple(c), len(unique)) for c in contexts]
    return [list(c) for c in unique], index


def pad_right(rows: list[list[int]]) -> tuple[Tensor, Tensor]:
    """(B, T) long ids right-padded with 0, and the (B, T) bool mask of real tokens."""
    width = max([len(r) for r in rows] + [1])
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[b, : len(row)] = True
    return ids, mask


def pad_left(rows: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """(N, L) long ids left-padded with ``pad_id``, and the (N, L) long attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[b, width - len(row) :] = 1
    return ids, mask


def _last_position(
    model: Any, keep_hidden: bool, fn: Any, **kwargs: Any
) -> tuple[Tensor | None, Tensor, Any]:
    """(last hidden (n, H) or None, last logits (n, V), cache) of one forward call."""
    if keep_hidden:  # the CausalLM forward, split to keep the final hidden state
        base = model.base_model(**kwargs)
        last = base.last_hidden_state[:, -1:]
        return last[:, -1], model.get_output_embeddings()(last)[:, -1], base.past_key_values
    out = fn(**kwargs, logits_to_keep=1)
    return None, out.logits[:, -1, :], out.past_key_values


@dataclass(frozen=True)
class Prefill:
    """The prompt pass of a decode: one row per context, a dynamic cache (see ``prefill``).

    Attributes:
        hidden: (N, H) final hidden state of each row's last context position.
        logits: (N, V) the logits from it (they draw the first response token).
        cache: the transformers cache of the contexts, N rows.
        attn: (N, L) long attention mask of the left-padded contexts.
    """

    hidden: Tensor
    logits: Tensor
    cache: Any
    attn: Tensor


def prefill(bundle: ModelBundle, contexts: list[list[int]]) -> Prefill:
    """The model's forward over the left-padded contexts, each distinct context run once.

    What ``decode_batch`` runs first, for the model as it is now (the reference: call it
    outside a policy's ``activate``); ``decode_batch(reference=...)`` pairs it with the policy's
    rows. Caller holds ``bundle.lock`` inside ``torch.inference_mode()``.
    """
    device = bundle.device
    unique, index = distinct(contexts)
    ids, attn = pad_left(unique, bundle.pad_id)
    ids, attn = ids.to(device), attn.to(device)
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    hidden, logits, cache = _last_position(
        bundle.model,
        True,
        bundle.model,
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        use_cache=True,
    )
    if len(unique) < len(contexts):
        rows = torch.tensor(index, device=device)
        cache.reorder_cache(rows)
        hidden, logits, attn = hidden[rows], logits[rows], attn[rows]
    return Prefill(hidden, logits, cache, attn)


def int8_model(bundle: ModelBundle) -> Any:
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
    reference: Prefill | None = None,
    on_logits: Callable[[Tensor, Tensor, Tensor], None] | None = None,
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
            hidden states from which each step's token was drawn (column t predicts token t),
            and with a paired reference "ref_hidden", the reference's (N, steps, H).
        reference: the reference's ``prefill`` of the same contexts. With an active LoRA
            adapter and the lean step, the reference's rows decode beside the policy's in the
            same steps (adapter off on them, fed the policy's tokens): its final hidden states
            and logits of each response token come out of the decode, with no second pass.
            Ignored (no "ref_hidden") when the step cannot pair them.
        on_logits: with a paired reference, called after each draw with (the policy's (N, V)
            logits, the reference's (N, V) logits, the (N,) tokens drawn from them).

    Returns:
        (N,) lists of generated ids, each ending with an EOS id or of length max_new_tokens.
    """
    options = options or DecodeOptions()
    model, use_static, lean = _decode_weights(bundle, options)
    device = bundle.device
    clock = time.perf_counter()
    keep_hidden = capture is not None and not use_static
    share = options.share_prompt_prefill and not use_static
    start = _prefill_rows(bundle, model, contexts, max_new_tokens, share, use_static, keep_hidden)
    steps = _steps(bundle, options, model, lean, start, reference, keep_hidden, use_static)
    pair = steps.pair
    sampling = num_sampled > 0 and temperature > 0
    noise = None
    if sampling and options.prefetch_noise and device.type == "cpu":
        noise = NoiseStream(generator, (num_sampled, start.logits.shape[-1]), max_new_tokens)
    prefill_s = time.perf_counter() - clock
    each = _EachStep(
        num_sampled, temperature, top_p, generator, noise, progress, counter, on_logits
    )
    columns, hiddens, ref_hiddens = _decode_steps(
        steps, start, reference if pair else None, each, options.adapt_threads
    )
    if timings is not None:
        n_steps = len(columns) - 1
        timings["prefill_s"] = prefill_s
        timings["prefill_tokens"] = start.tokens
        timings["steps"] = n_steps
        timings["step_s"] = (time.perf_counter() - clock - prefill_s) / max(n_steps, 1)
    if keep_hidden and capture is not None:
        capture["hidden"] = torch.stack(hiddens, dim=1)  # (N, steps, H)
    if pair and capture is not None:
        capture["ref_hidden"] = torch.stack(ref_hiddens, dim=1)  # (N, steps, H)
    return _until_eos(columns, bundle.eos_ids)


def _decode_weights(bundle: ModelBundle, options: DecodeOptions) -> tuple[Any, bool, Any]:
    """Which weights decode: (the model or its int8 copy, a static cache?, the lean step or None).

    With a LoRA adapter on, the base weights are not the policy: no int8 copy, and the lean step
    only when it can add the adapter's low-rank product (``merge_adapter``).
    """
    model, device = bundle.model, bundle.device
    use_static = options.static_cache if options.static_cache is not None else device.type == "cuda"
    lean = None
    adapted = adapter_active(model)  # a LoRA adapter is on: the base weights are not the policy
    if options.lean_step and device.type == "cpu" and not use_static:
        if not adapted:
            lean = lean_decoder(bundle, options.weights)
        elif options.merge_adapter and LeanDecoder.supports(model):
            lean = LeanDecoder(model, "lora")  # base weights + the adapter's low-rank product
    if options.weights == "int8" and device.type == "cpu" and lean is None and not adapted:
        model = int8_model(bundle)
    return model, use_static, lean


@dataclass(frozen=True)
class _Start:
    """Where the decode steps start: the prefill of every row, its prompt padded to ``width``.

    Attributes:
        hidden: (N, H) last final hidden state, or None when not kept.
        logits: (N, V) last logits (they draw the first response token).
        cache: the transformers cache of the N rows.
        attn: (N, width) attention mask, or (N, cache length) with a static cache.
        positions: (N, width) position ids counting real tokens.
        width: the padded prompt width.
        tokens: the tokens the prefill ran (each distinct context once when shared).
        max_new_tokens: most tokens per row (the steps to come).
    """

    hidden: Tensor | None
    logits: Tensor
    cache: Any
    attn: Tensor
    positions: Tensor
    width: int
    tokens: int
    max_new_tokens: int


def _prefill_rows(
    bundle: ModelBundle,
    model: Any,
    contexts: list[list[int]],
    max_new_tokens: int,
    share: bool,
    use_static: bool,
    keep_hidden: bool,
) -> _Start:
    """The prefill of every row, each distinct context once when ``share`` (cache copied)."""
    device = bundle.device
    num_rows = len(contexts)
    if share:
        prefill_ctx, index = distinct(contexts)
    else:
        index, prefill_ctx = list(range(num_rows)), contexts
    ids, attn = pad_left(prefill_ctx, bundle.pad_id)
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
    hidden, logits, cache = _last_position(
        model,
        keep_hidden,
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
    return _Start(hidden, logits, cache, attn, positions, width, int(ids.numel()), max_new_tokens)


def _lean_buffers(
    lean: Any, start: _Start, reference: Prefill | None, max_new_tokens: int, device: Any
) -> Any:
    """The lean step's KV buffers, the prefill's cache (and a paired reference's) moved in."""
    if lean is None:
        return None
    num_rows, width = start.logits.shape[0], start.width
    keys = start.cache.layers[0].keys
    lean_rows = num_rows * (2 if reference is not None else 1)
    buffers = lean.allocate(lean_rows, width + max_new_tokens, keys.dtype, device)
    lean.load_cache(buffers, start.cache, width)
    if reference is not None:  # the reference's rows after the policy's
        lean.load_cache(buffers, reference.cache, width, first_row=num_rows)
    return buffers


def _steps(
    bundle: ModelBundle,
    options: DecodeOptions,
    model: Any,
    lean: Any,
    start: _Start,
    reference: Prefill | None,
    keep_hidden: bool,
    use_static: bool,
) -> _Steps:
    """What the steps after the prefill run on; the reference pairs with the lean LoRA step only."""
    pair = (
        reference is not None
        and lean is not None
        and lean.weights == "lora"
        and tuple(reference.attn.shape) == (start.logits.shape[0], start.width)
    )
    return _Steps(
        bundle=bundle,
        step_fn=_decode_step_fn(bundle, options) if use_static else model,
        model=model,
        lean=lean,
        buffers=_lean_buffers(
            lean, start, reference if pair else None, start.max_new_tokens, bundle.device
        ),
        pair=pair,
        keep_hidden=keep_hidden,
        use_static=use_static,
        width=start.width,
    )


@dataclass(frozen=True)
class _Steps:
    """What every decode step after the prefill runs on.

    Attributes:
        bundle: the shared model (pad and EOS ids, device).
        step_fn: the one-token forward (the model, or its compiled step with a static cache).
        model: the model the prefill ran (``_last_position`` splits it to keep hidden states).
        lean: the lean decode step, or None (then ``step_fn``).
        buffers: the lean step's KV buffers, or None.
        pair: the reference's rows decode beside the policy's (lean step with the adapter).
        keep_hidden: keep the final hidden state of each step.
        use_static: a static cache (the mask covers the whole cache).
        width: the padded prompt width.
    """

    bundle: ModelBundle
    step_fn: Any
    model: Any
    lean: Any
    buffers: Any
    pair: bool
    keep_hidden: bool
    use_static: bool
    width: int


@dataclass(frozen=True)
class _EachStep:
    """How each step draws its token (``next_tokens``) and whom it tells (``decode_batch``'s)."""

    num_sampled: int
    temperature: float
    top_p: float
    generator: torch.Generator
    noise: NoiseStream | None
    progress: Callable[[float], None] | None
    counter: Callable[[int, int], None] | None
    on_logits: Callable[[Tensor, Tensor, Tensor], None] | None


def _decode_steps(
    steps: _Steps,
    start: _Start,
    reference: Prefill | None,
    each: _EachStep,
    adapt_threads: bool,
) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """The decode steps: (the (N,) token of each step, the hidden states, the reference's).

    A row stops at its first EOS and then feeds the pad token until every row is done; the
    noise stream is closed and the thread count restored however the loop ends.
    """
    bundle, device = steps.bundle, steps.bundle.device
    max_new_tokens, progress, counter = start.max_new_tokens, each.progress, each.counter
    num_rows = start.logits.shape[0]
    total = num_rows * max_new_tokens
    hidden, logits, cache, attn = start.hidden, start.logits, start.cache, start.attn
    if steps.lean is not None:  # the prefill's cache lives in the lean step's buffers now
        cache = None
    ref_hidden, ref_logits, ref_hiddens = None, None, []
    if reference is not None:
        ref_hidden, ref_logits = reference.hidden, reference.logits
    hiddens = []
    eos = torch.tensor(bundle.eos_ids, device=device)
    done = torch.zeros(num_rows, dtype=torch.bool, device=device)
    next_pos = start.positions[:, -1:] + 1
    noise = each.noise
    columns = []
    produced = 0
    base_threads = torch.get_num_threads()
    # only the lean step is bitwise the same under any thread count (transformers' one-query
    # SDPA is not), so only it may change the count mid-run
    adapt = adapt_threads and steps.lean is not None
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
            if ref_hidden is not None:
                ref_hiddens.append(ref_hidden)
            token = next_tokens(
                logits.float(), each.num_sampled, each.temperature, each.top_p, each.generator, q
            )
            produced += num_rows - int(done.sum())
            token = torch.where(done, bundle.pad_id, token)
            columns.append(token)
            if steps.pair and each.on_logits is not None:
                each.on_logits(logits, ref_logits, token)
            done = done | torch.isin(token, eos)
            finished = step == max_new_tokens - 1 or bool(done.all())
            if progress is not None:
                progress((step + 1) / max_new_tokens)
            if counter is not None:
                counter(total if finished else produced, total)
            if finished:
                break
            attn = _grow_mask(attn, steps, step)
            hidden, logits, cache, ref_hidden, ref_logits = _step_forward(
                steps, token, next_pos, attn, cache, step
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
    return columns, hiddens, ref_hiddens


def _grow_mask(attn: Tensor, steps: _Steps, step: int) -> Tensor:
    """The attention mask with this step's token in: its static-cache slot, or one more column."""
    if steps.use_static:
        slot = torch.zeros_like(attn)
        slot[:, steps.width + step] = 1
        return attn + slot
    ones = torch.ones(attn.shape[0], 1, dtype=attn.dtype, device=attn.device)
    return torch.cat([attn, ones], 1)


def _step_forward(
    steps: _Steps, token: Tensor, next_pos: Tensor, attn: Tensor, cache: Any, step: int
) -> tuple[Tensor | None, Tensor, Any, Tensor | None, Tensor | None]:
    """One token's forward: (hidden, logits, cache, the reference's hidden and logits)."""
    lean, buffers, num_rows = steps.lean, steps.buffers, token.shape[0]
    if steps.pair:  # one step for both: each weight is read once for the two row sets
        both = torch.cat([token, token])
        hidden, logits = lean.step(
            buffers,
            both,
            torch.cat([next_pos, next_pos]),
            steps.width + step,
            torch.cat([attn, attn]),
            adapted=num_rows,
        )
        ref_hidden, ref_logits = hidden[num_rows:], logits[num_rows:]
        hidden, logits = hidden[:num_rows], logits[:num_rows]
        return (hidden if steps.keep_hidden else None), logits, cache, ref_hidden, ref_logits
    if lean is not None:
        hidden, logits = lean.step(buffers, token, next_pos, steps.width + step, attn)
        return (hidden if steps.keep_hidden else None), logits, cache, None, None
    hidden, logits, cache = _last_position(
        steps.model,
        steps.keep_hidden,
        steps.step_fn,
        input_ids=token[:, None],
        attention_mask=attn,
        position_ids=next_pos,
        past_key_values=cache,
        use_cache=True,
    )
    return hidden, logits, cache, None, None


def _until_eos(columns: list[Tensor], eos_ids: Any) -> list[list[int]]:
    """(N,) lists of generated ids, each cut after its first EOS."""
    table = torch.stack(columns, dim=1).cpu()  # (N, steps)
    rows_out = []
    eos_set = set(eos_ids)
    for row in table.tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos_set), len(row))
        rows_out.append(row[:end])
    return rows_out


def lean_decoder(bundle: ModelBundle, weights: str) -> LeanDecoder | None:
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
