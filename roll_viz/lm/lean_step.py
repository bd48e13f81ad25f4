"""A lean one-token decode step for Llama-family models on the CPU (SmolLM2 and the tiny model).

Why not ``model(input_ids=token, past_key_values=cache)``: on a 2-core CPU a decode step is
bound by reading the weights (about 5 GB/s per core), and transformers' step adds a growing
``torch.cat`` of the KV cache per layer and step plus per-module bookkeeping. This step

- writes each new key/value into preallocated buffers (no copy of the cache per step),
- calls the model's own norms, rotary embedding and weights (float: the very same tensors, so
  the logits are bitwise those of the transformers step; tested), and
- with ``weights="int8"`` holds an int8 copy of every projection (per-output-channel weight
  scales, activations quantized per call, ``torch.ao`` dynamic quantization) with q/k/v and
  gate/up fused into one matrix each: a quarter of the bytes to read per step. This is the
  labelled approximate fast path: the prompt prefill and all scoring stay in float.

Measured on the 2-core box (one step, 18 rows, context 90, median ms; ``p5`` in the note):
transformers float 184, this step float 189 / int8 88 with one thread; 149 / 132 / 56 with two.

- with ``weights="bf16"`` (opt-in, CPU) holds a bfloat16 copy of every projection and of the
  head (q/k/v and gate/up fused), fed bfloat16 activations, the results back in float32: half
  the bytes to read per step, and AMX / AVX-512 BF16 matmuls where the CPU has them. Like int8
  it changes which tokens are drawn, never how they are scored (the bound on its next-token
  distributions is tested: ``tests/lm/test_speed.py``).
- with ``weights="lora"`` (what ``decode.decode_batch`` runs while an adapter is on) reads the
  shared base weights and adds the active peft LoRA adapter as a low-rank side product
  ``s (x A^T) B^T`` on the leading ``adapted`` rows only; the rows after them run the base
  model, i.e. the reference, in the same matmuls: each weight is read once per step for the
  policy's and the reference's rows together (a decode step is bound by reading the weights,
  so the reference's rows cost little), and nothing is copied. SmolLM2, one thread, load
  about 1: peft's LoRA layers about 190 ms per decode step; 8 rows on a merged copy 126-145
  ms (plus about 0.2 s per call to build the copy); 8 policy + 8 reference rows with the side
  product 132-136 ms (the float32 matmuls stream the weights at about 5 GB/s at 8 and at 16
  rows alike). The logits equal peft's forward (policy rows) and the base model's (reference
  rows) up to float rounding (tested to 1e-5).
- with ``weights="merged"`` folds the active adapter into copies of the projections
  (``W + s * B @ A``, about 0.4 GB for SmolLM2, built per call); kept for comparison.

Only models whose modules look like ``LlamaForCausalLM`` (``model.model.layers[i].self_attn.
q_proj`` ...) get a lean step (``LeanDecoder.supports``); others use transformers' step. The
shared base model is never changed: the float step reads its weights, the int8 and merged steps
own their copies. With ``weights="model"`` a peft LoRA wrapper is read through to its base layer,
so ``decode.decode_batch`` uses that step only while no adapter is active (``adapter_active``)
and the low-rank step otherwise.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

Project = Callable[[Tensor], Tensor]


def _base(module: Any) -> Any:
    """The plain Linear under a peft LoRA wrapper (or the module itself)."""
    return getattr(module, "base_layer", module)


def _lora_delta(module: Any) -> Tensor | None:
    """``s * B @ A`` summed over the active adapters of an enabled peft LoRA layer, else None.

    Raises:
        ValueError: a LoRA variant the merge does not cover (DoRA, fan-in-fan-out weights).
    """
    if not hasattr(module, "lora_A") or module.disable_adapters or module.merged:
        return None  # not a LoRA layer, adapters off, or already merged into the base weight
    delta = None
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if module.use_dora.get(name, False) or getattr(module, "fan_in_fan_out", False):
            raise ValueError("the merged decode step covers plain LoRA adapters only")
        part = module.get_delta_weight(name)  # (B @ A) * scaling, peft's own merge
        delta = part if delta is None else delta + part
    return delta


def adapter_active(model: Any) -> bool:
    """True when a peft LoRA layer of ``model`` is enabled with an adapter (its output differs)."""
    for module in model.modules():
        on = hasattr(module, "lora_A") and not module.disable_adapters and not module.merged
        if on and any(name in module.lora_A for name in module.active_adapters):
            return True
    return False


class _LowRank:
    """``x W^T`` with the base weight, the active LoRA adapter added on the first rows only.

    ``W`` is the shared base weight (no copy); the adapter is ``s (x A^T) B^T`` summed over the
    active adapters, added by one in-place ``addmm`` per adapter (as ``lora.fused`` trains):
    peft's forward up to float rounding. ``span[0]`` is how many leading rows carry the adapter
    (the decoder sets it per step): the rows after them are the reference (adapter off), which
    reads the same weights in the same matmul.
    """

    def __init__(self, module: Any, span: list[int]) -> None:
        self.weight = _base(module).weight
        self.adapters = _lora_factors(module)
        self.span = span

    def __call__(self, x: Tensor) -> Tensor:
        out = F.linear(x, self.weight)
        rows = self.span[0]
        if self.adapters and rows:
            flat = x.reshape(-1, x.shape[-1])[:rows]
            target = out.view(-1, out.shape[-1])[:rows]
            for a_weight, b_weight, scaling in self.adapters:
                target.addmm_(F.linear(flat, a_weight), b_weight.t(), alpha=scaling)
        return out


def _lora_factors(module: Any) -> list[tuple[Tensor, Tensor, float]]:
    """(A, B, scaling) of each active adapter of an enabled peft LoRA layer (empty: none).

    Raises:
        ValueError: a LoRA variant the low-rank step does not cover (DoRA, fan-in-fan-out
            weights, dropout, a bias on B).
    """
    if not hasattr(module, "lora_A") or module.disable_adapters or module.merged:
        return []
    out = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        plain = (
            not module.use_dora.get(name, False)
            and not getattr(module, "fan_in_fan_out", False)
            and isinstance(module.lora_dropout[name], torch.nn.Identity)
            and not getattr(module, "lora_bias", {}).get(name, False)
        )
        if not plain:
            raise ValueError("the low-rank decode step covers plain LoRA adapters only")
        a_weight, b_weight = module.lora_A[name].weight, module.lora_B[name].weight
        out.append((a_weight, b_weight, float(module.scaling[name])))
    return out


def _float_linear(module: Any, merge: bool = False) -> Project:
    """``x W^T`` with the module's own weight, or with its active LoRA adapter folded in."""
    weight = _base(module).weight
    delta = _lora_delta(module) if merge else None
    if delta is not None:
        weight = weight + delta  # a new tensor: the shared base weight stays as it is
    return lambda x: F.linear(x, weight)


def _rms_norm(module: Any) -> Project:
    """The model's RMSNorm as one fused op (``F.rms_norm``: bitwise the same here, 2x faster)."""
    weight, eps = module.weight, module.variance_epsilon
    shape = (weight.shape[0],)
    return lambda x: F.rms_norm(x, shape, weight, eps)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of (N, heads, 1, D) as transformers applies it, in one pass for q and k."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _int8_linear(weight: Tensor) -> Project:
    """A dynamically quantized Linear with per-output-channel int8 weights."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight = torch.nn.Parameter(weight.detach().float().clone(), requires_grad=False)
    with warnings.catch_warnings():  # torch.ao points at torchao; the eager API still works
        warnings.simplefilter("ignore")
        holder = quantize_dynamic(
            torch.nn.Sequential(linear),
            qconfig_spec={torch.nn.Linear: per_channel_dynamic_qconfig},
            dtype=torch.qint8,
        )
    return holder[0]


def _bf16_linear(weight: Tensor) -> Project:
    """``x W^T`` with a bfloat16 copy of W and bfloat16 inputs, the result in float32."""
    copy = weight.detach().to(torch.bfloat16)
    return lambda x: F.linear(x.to(torch.bfloat16), copy).float()


def _attend(q: Tensor, keys: Tensor, values: Tensor, allowed: Tensor) -> Tensor:
    """Grouped-query attention of one new position, as plain matmuls.

    Not ``F.scaled_dot_product_attention``: its CPU kernel splits a one-query attention by the
    thread count, so the result changes in the last bits between 1 and 2 threads; these matmuls
    do not (tested), and the thread count is chosen per phase (``lm.threads``).

    Args:
        q: (N, heads, 1, D) rotated queries.
        keys: (N, kv_heads, S, D) rotated keys so far.
        values: (N, kv_heads, S, D).
        allowed: (N, 1, 1, S) bool, True where the query may attend.

    Returns:
        (N, 1, heads, D), the heads in the order ``o_proj`` expects.
    """
    rows, heads, _, dim = q.shape
    kv_heads = keys.shape[1]
    grouped = q.view(rows, kv_heads, heads // kv_heads, dim)  # query head h uses kv head h // g
    scores = grouped @ keys.transpose(-1, -2) * dim**-0.5  # (N, kv, g, S)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ values).view(rows, 1, heads, dim)


class LeanDecoder:
    """One-token decode steps over preallocated KV buffers (see the module docstring).

    Use: ``buffers = allocate(rows, max_len, dtype, device)``, ``load_cache(buffers, cache,
    width)`` with the prefill's cache, then ``step(buffers, tokens, positions, slot, mask)`` for
    slots ``width, width + 1, ...``. The decoder is shared (kept per bundle); the buffers are the
    request's own.
    """

    def __init__(self, model: Any, weights: str = "model") -> None:
        """Build the step for ``model`` with its own float weights, merged LoRA or an int8 copy.

        Args:
            model: a ``LlamaForCausalLM``-shaped model (``supports(model)``).
            weights: "model" (the model's tensors), "lora" (the model's tensors plus the
                active LoRA adapter's low-rank product on the leading rows: build it inside
                the adapter's ``activate``, once per request), "merged" (the adapter folded
                into copies of the adapted projections), "int8" (quantized copy, CPU) or
                "bf16" (bfloat16 copy, CPU).
        """
        cfg = model.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.inter = cfg.intermediate_size
        self.weights = weights
        self.span = [0]  # "lora": leading rows that carry the adapter in the current step
        base = model.model
        self.embed, self.norm, self.rotary = (
            base.embed_tokens,
            _rms_norm(base.norm),
            base.rotary_emb,
        )
        self.layers = []
        for layer in base.layers:
            attn, mlp = layer.self_attn, layer.mlp
            if weights in ("int8", "bf16"):
                low = _int8_linear if weights == "int8" else _bf16_linear
                qkv = torch.cat([_base(m).weight for m in (attn.q_proj, attn.k_proj, attn.v_proj)])
                gate_up = torch.cat([_base(mlp.gate_proj).weight, _base(mlp.up_proj).weight])
                projections = (
                    low(qkv),
                    low(_base(attn.o_proj).weight),
                    low(gate_up),
                    low(_base(mlp.down_proj).weight),
                )
            elif weights == "lora":
                projections = (
                    tuple(_LowRank(m, self.span) for m in (attn.q_proj, attn.k_proj, attn.v_proj)),
                    _LowRank(attn.o_proj, self.span),
                    (_LowRank(mlp.gate_proj, self.span), _LowRank(mlp.up_proj, self.span)),
                    _LowRank(mlp.down_proj, self.span),
                )
            else:
                merge = weights == "merged"
                projections = (
                    tuple(_float_linear(m, merge) for m in (attn.q_proj, attn.k_proj, attn.v_proj)),
                    _float_linear(attn.o_proj, merge),
                    (_float_linear(mlp.gate_proj, merge), _float_linear(mlp.up_proj, merge)),
                    _float_linear(mlp.down_proj, merge),
                )
            norms = (_rms_norm(layer.input_layernorm), _rms_norm(layer.post_attention_layernorm))
            self.layers.append((*norms, projections))
        head = model.get_output_embeddings()
        if weights in ("int8", "bf16"):
            self.head = (_int8_linear if weights == "int8" else _bf16_linear)(head.weight)
        else:
            self.head = _float_linear(head)

    @staticmethod
    def supports(model: Any) -> bool:
        """True for a Llama-shaped causal LM without biases or a scaled/partial rotary."""
        cfg = getattr(model, "config", None)
        try:
            layer = model.model.layers[0]
            parts = (layer.self_attn.q_proj, layer.mlp.gate_proj, model.model.rotary_emb)
        except (AttributeError, IndexError, TypeError):
            return False
        return (
            getattr(cfg, "model_type", "") == "llama"
            and not getattr(cfg, "attention_bias", False)
            and not getattr(cfg, "mlp_bias", False)
            and getattr(cfg, "hidden_act", "") == "silu"
            and getattr(cfg, "pretraining_tp", 1) == 1
            and all(p is not None for p in parts)
        )

    def allocate(
        self, rows: int, max_len: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[list[Tensor], list[Tensor]]:
        """(keys, values): per layer (rows, kv_heads, max_len, head_dim) zero buffers."""
        shape = (rows, self.kv_heads, max_len, self.head_dim)
        keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        values = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        return keys, values

    @staticmethod
    def load_cache(
        buffers: tuple[list[Tensor], list[Tensor]], cache: Any, width: int, first_row: int = 0
    ) -> None:
        """Copy a transformers cache of ``width`` positions into the buffers' first slots.

        The cache's rows go to buffer rows ``first_row, first_row + 1, ...``.
        """
        keys, values = buffers
        for i, layer in enumerate(cache.layers):
            rows = slice(first_row, first_row + layer.keys.shape[0])
            keys[i][rows, :, :width] = layer.keys
            values[i][rows, :, :width] = layer.values

    def step(
        self,
        buffers: tuple[list[Tensor], list[Tensor]],
        tokens: Tensor,
        positions: Tensor,
        slot: int,
        mask: Tensor,
        adapted: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Feed one token per row at buffer slot ``slot``.

        Args:
            buffers: ``allocate``'s (keys, values), filled up to ``slot``.
            tokens: (N,) long ids.
            positions: (N, 1) long position ids (real tokens counted, left padding skipped).
            slot: the buffer index this token's key/value goes to (== tokens so far).
            mask: (N, slot + 1) attention mask over the buffer (1 = attend).
            adapted: ``weights="lora"`` only: the leading rows that carry the adapter (None:
                all); the other rows run the base model (the reference).

        Returns:
            (final hidden (N, H), logits (N, V)) of the new position.
        """
        self.span[0] = tokens.shape[0] if adapted is None else adapted
        keys, values = buffers
        rows, heads, kv_heads, dim = tokens.shape[0], self.heads, self.kv_heads, self.head_dim
        hidden = self.embed(tokens)[:, None]  # (N, 1, H)
        cos, sin = (c[:, None] for c in self.rotary(hidden, positions))  # (N, 1, 1, D)
        allowed = mask.bool()[:, None, None, :]  # (N, 1, 1, S): broadcasts over kv heads, group
        for i, (norm_in, norm_post, (qkv, out, gate_up, down)) in enumerate(self.layers):
            x = norm_in(hidden)
            if callable(qkv):  # fused: rotate the q and k heads in one pass
                fused = qkv(x).view(rows, heads + 2 * kv_heads, 1, dim)
                qk = _rotate(fused[:, : heads + kv_heads], cos, sin)
                q, k, v = qk[:, :heads], qk[:, heads:], fused[:, heads + kv_heads :]
            else:
                q, k, v = (proj(x) for proj in qkv)
                q = _rotate(q.view(rows, heads, 1, dim), cos, sin)
                k = _rotate(k.view(rows, kv_heads, 1, dim), cos, sin)
                v = v.view(rows, kv_heads, 1, dim)
            keys[i][:, :, slot : slot + 1] = k
            values[i][:, :, slot : slot + 1] = v
            attended = _attend(q, keys[i][:, :, : slot + 1], values[i][:, :, : slot + 1], allowed)
            hidden = hidden + out(attended.reshape(rows, 1, heads * dim))
            x = norm_post(hidden)
            if callable(gate_up):
                gate, up = gate_up(x).split([self.inter, self.inter], dim=-1)
            else:
                gate, up = (proj(x) for proj in gate_up)
            hidden = hidden + down(F.silu(gate) * up)
        last = self.norm(hidden)[:, 0]
        return last, self.head(last)
