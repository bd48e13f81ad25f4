"""Engine conformance: the same tokens scored by the in-process model and by the engine.

``conformance(bundle, engine)`` samples a small seeded batch on the engine, then scores exactly
those tokens three ways and reports the largest |delta log p| of each comparison:

- base: the engine's reference scoring vs the in-process model's (``LocalEngine.score``);
- adapter: the same under a seeded random LoRA adapter (B != 0, so it moves the log-probs),
  synced to the engine as after an update step, vs peft in-process;
- sampler: the log pi the engine's sampler reported for its own tokens vs the engine's scoring
  of them (the two halves of one engine agree; a BOS off by one shows here).

fp32 on both sides agrees to about 5e-5 (measured: 4.4e-5 base, 2.7e-5 adapter); a bf16 server,
another tokenizer or a shifted position gives 0.1 nats and more. ``TOLERANCE`` is the line. The
suite (``tests/engine``) and the Self-test page (when an engine is configured) call this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from roll_viz.lm.engine import EngineError, LocalEngine, RolloutEngine
from roll_viz.lm.engine_rollout import templater
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.models import ModelBundle

TOLERANCE = 1e-4
CHECK_PROMPTS = ("Explain quantum entanglement in one sentence.", "Write a haiku about the sea.")
ADAPTER_SEED = 7
ADAPTER_B_SCALE = 0.05


@dataclass(frozen=True)
class Conformance:
    """Largest |delta log p| per comparison, and the verdict.

    Attributes:
        base: engine vs in-process, base model.
        adapter: engine vs in-process (peft), a random LoRA adapter (None: not checked).
        sampler: the engine's sampler log pi vs its own scoring of the same tokens.
        adapter_shift: largest |log p change| the adapter caused (shows it was really applied).
        tokens: scored positions per comparison.
        seconds: wall time of the check.
        engine: the engine's label.
        error: why the check could not run ("" when it ran).
    """

    base: float = float("nan")
    adapter: float | None = None
    sampler: float = float("nan")
    adapter_shift: float = float("nan")
    tokens: int = 0
    seconds: float = 0.0
    engine: str = ""
    error: str = ""
    detail: dict = field(default_factory=dict)

    @property
    def worst(self) -> float:
        """The largest of the compared differences."""
        values = [self.base, self.sampler] + ([] if self.adapter is None else [self.adapter])
        return max(values)

    @property
    def passed(self) -> bool:
        """Every comparison within ``TOLERANCE`` (and the check ran)."""
        return not self.error and self.worst <= TOLERANCE

    def summary(self) -> str:
        """One line: the figures and the verdict."""
        if self.error:
            return f"engine conformance could not run: {self.error}"
        adapter = "not checked" if self.adapter is None else f"{self.adapter:.1e}"
        verdict = "ok" if self.passed else f"FAILS (> {TOLERANCE:.0e})"
        return (
            f"max |delta log p| over {self.tokens} tokens: base {self.base:.1e}, adapter "
            f"{adapter}, sampler vs scoring {self.sampler:.1e} ({verdict})"
        )


def _max_delta(a: tuple, b: tuple) -> float:
    flat_a = [x for row in a for x in row]
    flat_b = [x for row in b for x in row]
    if len(flat_a) != len(flat_b):
        raise EngineError(f"scored {len(flat_a)} vs {len(flat_b)} tokens")
    if not flat_a:
        return 0.0
    return float((torch.tensor(flat_a) - torch.tensor(flat_b)).abs().max())


def random_adapter(bundle: ModelBundle, seed: int = ADAPTER_SEED) -> LoraPolicy:
    """A LoRA policy whose B matrices are seeded noise (a fresh one would be the base model)."""
    policy = LoraPolicy(bundle, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with bundle.lock, torch.no_grad():
        for _, b_weight in policy._pairs():
            b_weight.copy_(torch.randn(b_weight.shape, generator=generator) * ADAPTER_B_SCALE)
    return policy


def conformance(
    bundle: ModelBundle,
    engine: RolloutEngine,
    sync: object | None = None,
    max_new_tokens: int = 24,
    group_size: int = 2,
    seed: int = 1234,
) -> Conformance:
    """Score the same tokens through both engines (see the module docstring).

    Args:
        bundle: the in-process model (the same weights the engine serves).
        engine: the engine under test.
        sync: an ``engine_sync.AdapterSync`` for the adapter comparison (None: base only).
        max_new_tokens: answer length of the sampled batch.
        group_size: answers per prompt.
        seed: the engine's sampling seed.

    Returns:
        A Conformance; ``error`` says why when the engine failed (nothing is raised).
    """
    start = time.perf_counter()
    label = getattr(engine, "label", "engine")
    local = LocalEngine(bundle)
    try:
        tpl = templater(bundle)
        prompts = [tpl.chat_ids(p) for p in CHECK_PROMPTS]
        drawn = engine.sample(prompts, group_size, max_new_tokens, 1.0, seed)
        rows = [prompts[g] for g in drawn.prompt_index]
        answers = [list(r) for r in drawn.token_ids]
        engine_base = engine.score(rows, answers)
        local_base = local.score(rows, answers)
        base = _max_delta(engine_base.logprobs, local_base.logprobs)
        sampler = _max_delta(drawn.logprobs, engine_base.logprobs)
        adapter = shift = None
        if sync is not None:
            policy = random_adapter(bundle)
            try:
                name = sync.served_name(policy, 1)
                local.adapters[name] = policy
                engine_lora = engine.score(rows, answers, name)
                local_lora = local.score(rows, answers, name)
                adapter = _max_delta(engine_lora.logprobs, local_lora.logprobs)
                shift = _max_delta(local_lora.logprobs, local_base.logprobs)
                sync.forget(policy)
            finally:
                policy.close()
    except EngineError as err:
        return Conformance(seconds=time.perf_counter() - start, engine=label, error=str(err))
    tokens = sum(len(a) for a in answers)
    return Conformance(
        base=base,
        adapter=adapter,
        sampler=sampler,
        adapter_shift=float("nan") if shift is None else shift,
        tokens=tokens,
        seconds=time.perf_counter() - start,
        engine=label,
        detail={"rows": len(answers), "finish": list(drawn.finish_reasons)},
    )
