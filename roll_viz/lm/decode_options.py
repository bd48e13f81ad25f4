"""The decode loop's switches: ``DecodeOptions`` and its named presets, and which weights decode.

Every switch but ``weights`` is speed only (the plain loop's tokens, same seed, same bytes);
``FAST_DECODE`` (int8) and ``BF16_DECODE`` are the labelled approximate paths, ``PLAIN_DECODE``
the loop as it was. ``lm.decode`` runs the loop and re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from roll_viz.lm.lean_step import LeanDecoder
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.request import prompt_only

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
