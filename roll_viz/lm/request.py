"""What to sample: ``SamplingConfig`` with its hard limits, and the policy it samples from.

A ``SamplingConfig`` is frozen and validated on construction (every broken rule in one
message). A ``PolicySource`` says how the policy differs from the reference (the base model on
the plain prompt): ``identical`` (the policy IS the reference: KL exactly 0, the first step of
RL training) or ``steered`` (a hidden instruction appended to the policy's user turn only). A
LoRA policy trained in the app is a third source (``lm.lora.LoraPolicy``).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from roll_viz.lm.models import ModelBundle

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


def prompt_only(source: Any) -> bool:
    """True for sources that differ from the base model by their context only (no adapter)."""
    return isinstance(source, (IdenticalPolicy, SteeredPolicy)) or source is None
