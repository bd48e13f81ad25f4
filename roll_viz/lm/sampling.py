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

Simplifications against real RL stacks (verl, ROLL, OpenRLHF):

- Policy and reference share one copy of the weights. ``identical``: the policy IS the reference
  (the first step of RL training), so the reference scores are the policy's, reused: KL is exactly
  0. ``steered``: the policy sees a hidden instruction appended to the user turn, the reference
  scores the same response tokens without it. That gives a real per-token KL without training.
  A policy fine-tuned in the app would be a third ``PolicySource`` (a LoRA adapter over the base).
- The reported log-probs come from the teacher-forced pass, not from the decode loop (as verl and
  ROLL recompute "old log-probs"); they are ``log_softmax(logits / temperature)`` over the full
  vocabulary, without top-p truncation. With temperature 0 (greedy) they use temperature 1.
- Rows of one prompt share the prompt's context; there is no prompt deduplication in the KV cache.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from roll_viz.core.records import Rollout
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
# Sampling


@dataclass(frozen=True)
class DecodeOptions:
    """How the decode loop runs (speed only: results are the same up to float rounding).

    Attributes:
        static_cache: preallocate a ``StaticCache`` (fixed shapes, needed for a compiled decode
            step); None means "on CUDA only".
        compile_decode: run the one-token decode step through ``torch.compile`` (CUDA graphs via
            mode "reduce-overhead" on CUDA). The compiled callable is kept per bundle.
        compile_mode: torch.compile mode; None means "reduce-overhead" on CUDA, "default" elsewhere.
        compile_backend: torch.compile backend; None means inductor ("eager" lets CPU tests trace
            the compiled path without generating code).
    """

    static_cache: bool | None = None
    compile_decode: bool = False
    compile_mode: str | None = None
    compile_backend: str | None = None


def sample(
    bundle: ModelBundle,
    cfg: SamplingConfig,
    progress: Callable[[float, str], None] | None = None,
    decode: DecodeOptions | None = None,
) -> Rollout:
    """Sample ``cfg.group_size`` responses per prompt and score each token under both models.

    Args:
        bundle: the shared model (see ``roll_viz.lm.models.load_models``).
        cfg: what to sample.
        progress: optional callback ``(fraction in [0, 1], message)``, called with the lock held.
        decode: speed options of the decode loop (static cache, compiled step).

    Returns:
        A Rollout with B = P * G rows (rows of one prompt contiguous) and T = the longest response.
    """
    report = progress or (lambda fraction, message: None)
    decode = decode or DecodeOptions()
    source = policy_source(cfg)
    num_prompts, group = len(cfg.prompts), cfg.group_size
    num_rows = num_prompts * group
    group_ids = torch.arange(num_prompts).repeat_interleave(group)  # (B,)
    lp_temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    with bundle.lock, torch.inference_mode():
        report(0.0, "Applying the chat template")
        policy_ctx = [source.context_ids(bundle, p) for p in cfg.prompts]
        ref_ctx = (
            policy_ctx if source.shares_reference else [bundle.chat_ids(p) for p in cfg.prompts]
        )
        rows_ctx = [policy_ctx[g] for g in group_ids.tolist()]
        if cfg.greedy:
            rows_ctx += policy_ctx
        generator = torch.Generator(device=bundle.device).manual_seed(cfg.seed)
        with source.activate(bundle):
            generated = decode_batch(
                bundle,
                rows_ctx,
                num_sampled=num_rows,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                generator=generator,
                progress=lambda f: report(0.05 + 0.75 * f, "Sampling responses"),
                options=decode,
            )
        sampled, greedy_rows = generated[:num_rows], generated[num_rows:]
        token_ids, response_mask = _pad_right(sampled)  # (B, T)
        finish = tuple("eos" if r and r[-1] in bundle.eos_ids else "length" for r in sampled)

        report(0.8, "Scoring the responses under the policy")
        with source.activate(bundle):
            policy_hidden = response_hidden(bundle, rows_ctx[:num_rows], token_ids, response_mask)
        if source.shares_reference:
            ref_hidden = None
        else:
            report(0.88, "Scoring the same tokens under the reference")
            ref_rows = [ref_ctx[g] for g in group_ids.tolist()]
            ref_hidden = response_hidden(bundle, ref_rows, token_ids, response_mask)
        valid = response_mask.to(bundle.device)
        head = bundle.model.get_output_embeddings()
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

        report(0.95, "Decoding text")
        tokenizer = bundle.tokenizer
        responses = tuple(_response_text(tokenizer, r, bundle.eos_ids) for r in sampled)
        greedy = tuple(_response_text(tokenizer, r, bundle.eos_ids) for r in greedy_rows)
        vocab_ids = sorted(
            {i for row in sampled for i in row} | set(scores.topk_ids.flatten().tolist())
        )
        vocab = {i: tokenizer.decode([i]) for i in vocab_ids}
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
    logits: Tensor, num_sampled: int, temperature: float, top_p: float, generator: torch.Generator
) -> Tensor:
    """Pick the next token of every row: sampled for the first ``num_sampled`` rows, greedy after.

    Args:
        logits: (N, V) float32 next-token logits.
        num_sampled: rows 0..num_sampled-1 sample; the rest take the argmax.
        temperature: > 0 to sample; 0 makes every row greedy.
        top_p: keep the smallest set of most likely tokens whose mass reaches top_p (1 = all).
        generator: the request's generator (the global RNG is never used).

    Returns:
        (N,) long token ids.
    """
    if num_sampled == 0 or temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits[:num_sampled] / temperature, dim=-1)  # (n, V)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p  # the top token always stays
        choice = torch.multinomial(sorted_probs * keep, 1, generator=generator)
        picked = order.gather(-1, choice).squeeze(-1)
    else:
        picked = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    if num_sampled == logits.shape[0]:
        return picked
    return torch.cat([picked, logits[num_sampled:].argmax(dim=-1)])


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
) -> list[list[int]]:
    """Autoregressive decode of all rows in one batch with a KV cache.

    Prompts are left-padded; position ids count real tokens only. A row stops at its first EOS
    (kept in its output); finished rows keep feeding the pad token until all rows are done.
    Caller holds ``bundle.lock`` inside ``torch.inference_mode()``.

    Args:
        bundle: the shared model.
        contexts: (N,) prompt id lists.
        num_sampled: rows before this index sample, rows after it decode greedily.
        temperature: sampling temperature (0 = greedy for all rows).
        top_p: nucleus mass.
        max_new_tokens: most tokens per row.
        generator: the per-request generator, on ``bundle.device``.
        progress: optional callback with the fraction of steps done.
        options: static cache / compiled step switches.

    Returns:
        (N,) lists of generated ids, each ending with an EOS id or of length max_new_tokens.
    """
    options = options or DecodeOptions()
    model, device = bundle.model, bundle.device
    ids, attn = _pad_left(contexts, bundle.pad_id)
    ids, attn = ids.to(device), attn.to(device)
    num_rows, width = ids.shape
    use_static = options.static_cache if options.static_cache is not None else device.type == "cuda"
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
    out = model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    cache = out.past_key_values
    step_fn = _decode_step_fn(bundle, options) if use_static else model
    eos = torch.tensor(bundle.eos_ids, device=device)
    done = torch.zeros(num_rows, dtype=torch.bool, device=device)
    next_pos = positions[:, -1:] + 1
    columns = []
    for step in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()
        token = next_tokens(logits, num_sampled, temperature, top_p, generator)
        token = torch.where(done, bundle.pad_id, token)
        columns.append(token)
        done = done | torch.isin(token, eos)
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if use_static:
            slot = torch.zeros_like(attn)
            slot[:, width + step] = 1
            attn = attn + slot
        else:
            attn = torch.cat([attn, torch.ones(num_rows, 1, dtype=attn.dtype, device=device)], 1)
        out = step_fn(
            input_ids=token[:, None],
            attention_mask=attn,
            position_ids=next_pos,
            past_key_values=cache,
            use_cache=True,
        )
        next_pos = next_pos + 1
        if progress is not None:
            progress((step + 1) / max_new_tokens)
    table = torch.stack(columns, dim=1).cpu()  # (N, steps)
    rows = []
    eos_set = set(bundle.eos_ids)
    for row in table.tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos_set), len(row))
        rows.append(row[:end])
    return rows


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
