"""LoRA weight sync: a session's adapter, saved after each step and loaded into the engine.

RL stacks that split generation from training (verl, ROLL) push the trainer's LoRA weights into
the rollout engine after each update. ``AdapterSync(engine, folder)`` does the same for roll-viz's
per-session ``lm.lora.LoraPolicy``:

- ``served_name(policy, steps)`` saves the adapter (peft's folder layout: ``adapter_config.json``
  and ``adapter_model.safetensors``) and loads it into the engine under a versioned name
  (``rv_lora_3-s5``: adapter ``rv_lora_3`` after 5 steps); the older version of the same adapter
  is unloaded first, so a session never has two versions resident;
- at most ``max_resident`` adapters stay loaded (the server's ``--max-cpu-loras``); the least
  recently used is unloaded and reloaded from the saved weights on its next use;
- ``forget(policy)`` unloads it (a closed session), and every call drops adapters whose policy
  was closed;
- adapters that touch ``lm_head`` or the embeddings are refused (``AdapterRefused``, with the
  reason): the server runs with ``--lora-target-modules`` that leave the LM head out (LoRA on the
  logits crashes prompt_logprobs scoring on vLLM 0.32), and vLLM drops an lm_head delta from
  prompt log-probs (vllm-project/vllm#51594).

The folder must be readable by the server (the same machine: the engine listens on 127.0.0.1).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from roll_viz.lm.engine import EngineError
from roll_viz.lm.lora import adapter_layers

MAX_RESIDENT = 8
REFUSED_PARTS = ("lm_head", "embed_tokens", "wte", "embed_out")


class AdapterRefused(EngineError):
    """This adapter cannot be served by the engine (the message says why)."""


def refusal(policy: Any) -> str:
    """Why the engine cannot serve ``policy``'s adapter ("" when it can)."""
    touched = sorted(
        {
            part
            for name, layer in adapter_layers(policy.bundle)
            if policy.name in layer.lora_A
            for part in REFUSED_PARTS
            if part in name.split(".")
        }
    )
    if touched:
        return (
            f"adapter {policy.name} trains {', '.join(touched)}: the engine serves LoRA on the "
            "attention and MLP projections only (vLLM scores an lm_head or embedding delta "
            "wrongly, vllm-project/vllm#51594); it stays on the in-process model"
        )
    return ""


def save_adapter(policy: Any, folder: Path) -> Path:
    """Write ``policy``'s adapter as a peft folder (under ``bundle.lock``); returns the folder."""
    import safetensors.torch
    from peft import LoraConfig

    bundle = policy.bundle
    tensors, targets = {}, set()
    with bundle.lock:
        for name, layer in adapter_layers(bundle):
            if policy.name not in layer.lora_A:
                continue
            targets.add(name.rsplit(".", 1)[-1])
            prefix = f"base_model.model.{name}"
            tensors[f"{prefix}.lora_A.weight"] = layer.lora_A[policy.name].weight.detach().clone()
            tensors[f"{prefix}.lora_B.weight"] = layer.lora_B[policy.name].weight.detach().clone()
    if not tensors:
        raise AdapterRefused(f"adapter {policy.name} has no LoRA layers (closed?)")
    folder.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(
        {k: v.float().contiguous() for k, v in tensors.items()},
        str(folder / "adapter_model.safetensors"),
        metadata={"format": "pt"},
    )
    LoraConfig(
        r=policy.rank,
        lora_alpha=policy.alpha,
        lora_dropout=0.0,
        target_modules=sorted(targets),
        bias="none",
        task_type="CAUSAL_LM",
        base_model_name_or_path=bundle.spec,
    ).save_pretrained(str(folder))
    return folder


class AdapterSync:
    """Versioned LoRA adapters on one engine (see the module docstring).

    Args:
        engine: an engine with ``load_adapter(name, path)`` and ``unload_adapter(name)``.
        folder: where adapter folders are written (None: a temporary folder of this process).
        max_resident: most adapters loaded at once.
    """

    def __init__(self, engine: Any, folder: Path | None = None, max_resident: int = MAX_RESIDENT):
        self.engine = engine
        self.folder = Path(folder or tempfile.mkdtemp(prefix="roll-viz-adapters-"))
        self.max_resident = max(1, int(max_resident))
        self.lock = threading.Lock()
        self.resident: OrderedDict[str, tuple[str, Any]] = OrderedDict()  # policy -> (served, p)
        self.loads = 0

    def served_name(self, policy: Any, steps: int) -> str:
        """The engine's name for ``policy`` after ``steps`` steps, loading it when needed.

        Raises:
            AdapterRefused: the adapter touches lm_head or the embeddings.
            engine.EngineError: the engine failed to load it.
        """
        reason = refusal(policy)
        if reason:
            raise AdapterRefused(reason)
        name = f"{policy.name}-s{int(steps)}"
        with self.lock:
            self._drop_closed()
            current = self.resident.get(policy.name)
            if current is not None and current[0] == name:
                self.resident.move_to_end(policy.name)
                return name
            if current is not None:  # an older version of this adapter: unload it first
                self._unload(policy.name)
            while len(self.resident) >= self.max_resident:
                self._unload(next(iter(self.resident)))
            path = save_adapter(policy, self.folder / name)
            self.engine.load_adapter(name, str(path))
            self.loads += 1
            self.resident[policy.name] = (name, policy)
            return name

    def forget(self, policy: Any) -> None:
        """Unload ``policy``'s adapter and delete its saved weights (a session ended)."""
        with self.lock:
            if policy.name in self.resident:
                self._unload(policy.name)

    def close(self) -> None:
        """Unload every adapter and remove the folder."""
        with self.lock:
            for key in list(self.resident):
                try:
                    self._unload(key)
                except EngineError:
                    self.resident.pop(key, None)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _drop_closed(self) -> None:
        for key, (_, policy) in list(self.resident.items()):
            if getattr(policy, "closed", False):
                self._unload(key)

    def _unload(self, key: str) -> None:
        name, _ = self.resident.pop(key)
        try:
            self.engine.unload_adapter(name)
        finally:
            shutil.rmtree(self.folder / name, ignore_errors=True)
