"""The decode loop: all rows of a request in one batch with a KV cache, top-p draws, int8 copy.

``decode_batch(bundle, contexts, ...)`` decodes every row (P*G sampled rows plus P greedy rows)
at once: prompts left-padded, position ids counting real tokens, temperature and top-p drawn
with ``torch.multinomial`` from the request's own ``torch.Generator`` (``next_tokens``), each
row stopping at EOS or after ``max_new_tokens``. ``DecodeOptions`` holds its switches:

- speed only (the tokens of the plain loop, same seed, same bytes): each distinct prompt's
  prefill runs once and its KV cache is copied to the G rows; the prefill keeps the logits of
  the last position only; the sort is skipped when top_p == 1; the sampling noise of the next
  step is drawn ahead in a helper thread (``_NoiseStream``); the lean step (``lm.lean_step``);
  the thread count per phase (``lm.threads``);
- the switch that changes draws: ``weights="int8"`` (``FAST_DECODE``) decodes with an int8
  dynamically quantized copy of the model, ``weights="bf16"`` (``BF16_DECODE``, opt-in) with a
  bfloat16 copy of the lean step's projections (CPU only); scoring stays with the float model;
- with a LoRA adapter on, the lean step reads the base weights and adds the adapter's low-rank
  product (``merge_adapter``; the peft model's draws up to float rounding), and the reference's
  rows (adapter off) can decode beside the policy's in the same steps (``reference``,
  ``DecodeOptions.pair_reference``): its scores then need no teacher-forced pass.

Padding helpers (``pad_left``, ``pad_right``, ``distinct``) are shared with the teacher-forced
passes in ``lm.scoring``.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from roll_viz.lm import threads
from roll_viz.lm.lean_step import LeanDecoder, adapter_active
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.request import prompt_only

STATIC_CACHE_STEP = 128  # static KV cache lengths are multiples of this

DecodeWeights = Literal["model", "int8", "bf16"]


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
            (a LoRA adapter lives in the float model only). "bf16" (CPU only, opt-in) decodes
            with the lean step over a bfloat16 copy of the projections and the head
            (``LeanDecoder(model, "bf16")``): half the bytes per step, AMX / AVX-512 BF16 where
            the CPU has them; like int8 it changes the draws, never the float scores, and is
            labelled in ``meta``. Needs a Llama-shaped model (else the float decode runs).
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
        lean_step: on the CPU, decode with ``lean_step.LeanDecoder`` (preallocated KV
            buffers; the float step gives bitwise the transformers step's logits, the int8 step
            reads a fused int8 copy) for Llama-shaped models; the prefill stays the model's own
            float forward. While a LoRA adapter is active (``lean_step.adapter_active``) the
            step runs on merged weights (``merge_adapter``) or not at all.
        merge_adapter: with an active LoRA adapter, decode with the lean step over the base
            weights plus the adapter's low-rank product (``LeanDecoder(model, "lora")``: no
            copy of the weights) instead of through peft's LoRA layers. The draws are those of
            the peft model up to float rounding of the logits (about 1e-6), deterministic per
            seed and under any thread count.
        pair_reference: with ``merge_adapter``, a LoRA policy whose reference is the base model
            over the same contexts decodes the reference's rows beside its own in each lean
            step (``decode_batch(reference=...)``): the reference's log-probs, the exact KL,
            entropy and top-K come from the decode steps' own logits, with no teacher-forced
            pass and no second application of the head; the same numbers up to float rounding
            (about 1e-6; tested).
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
    merge_adapter: bool = True
    pair_reference: bool = True
    adapt_threads: bool = True


FAST_DECODE = DecodeOptions(weights="int8")  # the labelled approximate fast path (CPU)
BF16_DECODE = DecodeOptions(weights="bf16")  # opt-in: bfloat16 lean decode, float scores (CPU)
PLAIN_DECODE = DecodeOptions(  # the loop as it was: every row prefilled, two scoring passes
    share_prompt_prefill=False,
    prefetch_noise=False,
    reuse_decode_hidden=False,
    lean_step=False,
    merge_adapter=False,
    pair_reference=False,
    adapt_threads=False,
)


def weights_kind(bundle: ModelBundle, decode: DecodeOptions, source: Any) -> str:
    """The decode weights: "int8" / "bf16" (a copy: CPU, prompt-only source) or the dtype name."""
    if decode.weights == "int8" and bundle.device.type == "cpu" and prompt_only(source):
        return "int8"
    lean = decode.lean_step and LeanDecoder.supports(bundle.model)
    if decode.weights == "bf16" and bundle.device.type == "cpu" and prompt_only(source) and lean:
        return "bf16"
    return bundle.dtype_name


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
    scaled = logits[:num_sampled]
    if temperature != 1.0:  # x / 1 == x bit for bit: skip the pass
        scaled = scaled / temperature
    probs = torch.softmax(scaled, dim=-1)  # (n, V)

    def draw(weights: Tensor) -> Tensor:  # (n, V) of this call's own -> (n, 1)
        if noise is None:
            return torch.multinomial(weights, 1, generator=generator)
        return weights.div_(noise).argmax(dim=-1, keepdim=True)  # in place: the same quotients

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
    clock = time.perf_counter()
    num_rows = len(contexts)
    total = num_rows * max_new_tokens
    share = options.share_prompt_prefill and not use_static
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
    keep_hidden = capture is not None and not use_static

    def forward(fn: Any, **kwargs: Any) -> tuple[Tensor | None, Tensor, Any]:
        """(last hidden (n, H) or None, last logits (n, V), cache) of one forward call."""
        return _last_position(model, keep_hidden, fn, **kwargs)

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
    pair = (
        reference is not None
        and lean is not None
        and lean.weights == "lora"
        and tuple(reference.attn.shape) == (num_rows, width)
    )
    ref_hidden, ref_logits, ref_hiddens = None, None, []
    if pair and reference is not None:
        ref_hidden, ref_logits = reference.hidden, reference.logits
    if lean is not None:  # the prefill's cache moves into preallocated buffers
        keys = cache.layers[0].keys
        lean_rows = num_rows * (2 if pair else 1)
        buffers = lean.allocate(lean_rows, width + max_new_tokens, keys.dtype, device)
        lean.load_cache(buffers, cache, width)
        if pair and reference is not None:  # the reference's rows after the policy's
            lean.load_cache(buffers, reference.cache, width, first_row=num_rows)
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
            if ref_hidden is not None:
                ref_hiddens.append(ref_hidden)
            token = next_tokens(logits.float(), num_sampled, temperature, top_p, generator, q)
            produced += num_rows - int(done.sum())
            token = torch.where(done, bundle.pad_id, token)
            columns.append(token)
            if pair and on_logits is not None:
                on_logits(logits, ref_logits, token)
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
            if pair:  # one step for both: each weight is read once for the two row sets
                both = torch.cat([token, token])
                hidden, logits = lean.step(
                    buffers,
                    both,
                    torch.cat([next_pos, next_pos]),
                    width + step,
                    torch.cat([attn, attn]),
                    adapted=num_rows,
                )
                ref_hidden, ref_logits = hidden[num_rows:], logits[num_rows:]
                hidden, logits = hidden[:num_rows], logits[:num_rows]
                hidden = hidden if keep_hidden else None
            elif lean is not None:
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
    if pair and capture is not None:
        capture["ref_hidden"] = torch.stack(ref_hiddens, dim=1)  # (N, steps, H)
    table = torch.stack(columns, dim=1).cpu()  # (N, steps)
    rows_out = []
    eos_set = set(bundle.eos_ids)
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
