"""One user's LoRA adapter over the SHARED base model, and the peft injection behind it.

``LoraPolicy(bundle, ...)`` gives one user a LoRA adapter (peft 0.21.2) over the shared base
weights of ``bundle.model``. It is a ``PolicySource`` (``lm.request``):
``sample(bundle, cfg, source=policy)`` samples from it, and its reference is the base model with
the adapter switched off (one copy of the weights, as TRL's GRPOTrainer does with PEFT:
``ref_model = None``). ``lm.update.update_step`` trains it (and builds its optimizer).

Design (why peft layers injected into the shared model, kept disabled):

- The sampler runs ``bundle.model`` inside ``source.activate(bundle)``, so the policy has to be
  computed BY ``bundle.model``. The LoRA layers are therefore injected into it once per bundle
  (peft's multi-adapter support: one named adapter per user, ``rv_lora_<n>``), and every LoRA layer
  stays DISABLED (``disable_adapters``: the layer calls its untouched ``base_layer`` only, so the
  output is bitwise the base model's) except inside ``activate``, which the caller enters while
  holding ``bundle.lock``; it enables exactly this user's adapter and disables it again on exit,
  also on error. Other users, who hold the same lock for their own requests, can never observe an
  enabled adapter.
- The base weights are never written: the original ``nn.Linear`` modules become the LoRA layers'
  ``base_layer`` (same Parameter objects, ``requires_grad`` False), the optimizer only sees this
  user's A and B matrices, and ``close()`` deletes the named adapter; when the last adapter of a
  bundle is closed, peft's ``unload()`` puts the original modules back (the model's module tree is
  then exactly what ``load_models`` built).
- A functional alternative (``torch.func.functional_call`` with W + s * B A) would leave the module
  tree untouched, but the sampler could not use it, and its backward forms a full-size dW for
  every adapted matrix (one more weight-sized matmul per layer, about +50 % backward time).
- Per-user memory: rank r adapter on all 7 linear maps of each layer (q, k, v, o, gate, up, down);
  SmolLM2-135M at r=8 has 2.44 M adapter parameters (9.8 MB fp32), AdamW keeps two more copies
  (19.5 MB): about 29 MB per user (``LoraPolicy.nbytes()``), freed by ``close()``.
- Fused forward (``LoraPolicy.fused``, what ``lm.update`` trains through): inside it each adapted
  layer computes ``base(x)`` and adds ``scaling * (x A^T) B^T`` with one in-place ``addmm`` (peft's
  forward does a matmul, a scaling multiply and an add as three passes over the output), the same
  numbers up to float rounding. With ``base_dtype=torch.bfloat16`` the frozen base matmul runs in
  bfloat16 (AMX-BF16 / AVX-512 BF16 on this CPU; weights cast once per context and shared by every
  pass inside it) and its output goes back to float32; the adapter's A and B, their matmuls and
  gradients, the residual stream, norms, attention and the head stay float32.
- Randomness: LoRA A is drawn from a ``torch.Generator`` seeded by ``seed`` (uniform in
  +-1/sqrt(fan_in), peft's kaiming-uniform(a=sqrt(5)) bound), B is zero, so a fresh adapter IS the
  base model and the same seed gives the same adapter. peft's own init draws from the global RNG,
  so injection runs inside ``torch.random.fork_rng`` and the global state is restored.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from roll_viz.lm.models import ModelBundle
from roll_viz.lm.reaper import Cancelled, release_later

DEFAULT_RANK = 8
DEFAULT_ALPHA = 16.0
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_PREFIX = "rv_lora_"


# ---------------------------------------------------------------------------------------------
# The per-bundle adapter registry (peft multi-adapter injection)


class _Hub:
    """The LoRA layers injected into one bundle's model; all use under ``bundle.lock``."""

    def __init__(self) -> None:
        self.tuner: Any = None  # peft LoraModel wrapping bundle.model (None: not injected)
        self.layers: list[tuple[str, Any]] = []  # (module name, LoraLayer), sorted by name
        self.names: set[str] = set()
        self.counter = itertools.count()


_HUBS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_HUBS_LOCK = threading.Lock()  # guards _HUBS itself (not the model)


def _hub(bundle: ModelBundle) -> _Hub:
    with _HUBS_LOCK:
        hub = _HUBS.get(bundle)
        if hub is None:
            hub = _HUBS[bundle] = _Hub()
        return hub


def adapter_names(bundle: ModelBundle) -> tuple[str, ...]:
    """Names of the live adapters injected into ``bundle.model`` (sorted)."""
    return tuple(sorted(_hub(bundle).names))


def adapter_layers(bundle: ModelBundle) -> list[tuple[str, Any]]:
    """(module name, peft LoraLayer) of every layer injected into ``bundle.model``, by name."""
    return list(_hub(bundle).layers)


def _lora_config(rank: int, alpha: float, targets: tuple[str, ...]) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=0.0,
        target_modules=list(targets),
        bias="none",
        init_lora_weights=True,
    )


def _inject(bundle: ModelBundle, name: str, rank: int, alpha: float, targets: tuple) -> None:
    """Add adapter ``name`` to the bundle's model (caller holds the lock); leaves all disabled."""
    from peft.tuners.lora import LoraLayer, LoraModel

    hub = _hub(bundle)
    config = _lora_config(rank, alpha, targets)
    with torch.random.fork_rng(devices=[]):  # peft's init draws from the global RNG
        if hub.tuner is None:
            hub.tuner = LoraModel(bundle.model, config, name)
        else:
            hub.tuner.peft_config[name] = config
            hub.tuner.inject_adapter(bundle.model, name)
    hub.layers = sorted((n, m) for n, m in bundle.model.named_modules() if isinstance(m, LoraLayer))
    hub.names.add(name)
    for _, layer in hub.layers:
        layer.enable_adapters(False)


def _remove(bundle: ModelBundle, name: str) -> None:
    """Delete adapter ``name``; unload peft when it was the last (caller holds the lock)."""
    hub = _hub(bundle)
    if name not in hub.names or hub.tuner is None:
        return
    hub.names.discard(name)
    if hub.names:
        keep = sorted(hub.names)[0]
        for _, layer in hub.layers:  # move off the deleted adapter first (no peft warning)
            layer.set_adapter(keep)
        hub.tuner.delete_adapter(name)
        for _, layer in hub.layers:
            layer.enable_adapters(False)
    else:
        hub.tuner.unload()  # the original nn.Linear modules go back in place
        hub.tuner = None
        hub.layers = []


def _remove_orphan(bundle: ModelBundle, name: str) -> None:
    """A LoraPolicy was garbage-collected without ``close``: remove its adapter on the reaper.

    Runs wherever the collector ran (maybe a thread that holds ``bundle.lock``), so it only
    queues the removal. Measured before this existed (``churn_load`` classes of 10 students on
    the bundled model, one server): each class left 5 adapters (47 MB, 2,100 modules) in the
    shared model, from policies garbage-collected with their session but never closed.
    """

    def remove() -> None:
        with bundle.lock:
            _remove(bundle, name)

    release_later(remove)


def _fusable(layer: Any, name: str) -> bool:
    """Whether the fused forward computes exactly what peft's forward would for ``name``."""
    base = getattr(layer, "base_layer", None)
    return (
        isinstance(base, torch.nn.Linear)
        and name in layer.lora_A
        and isinstance(layer.lora_dropout[name], torch.nn.Identity)
        and not getattr(layer, "lora_variant", {}).get(name)
        and not layer.merged
        and not layer.lora_bias.get(name, False)
    )


class _Casts:
    """The base weights cast for one ``fused`` context, and the last input's cast.

    q, k and v read the same input, as do gate and up: it is cast once.
    """

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.weights: dict[int, Tensor] = {}
        self.last: tuple[Tensor, Tensor, int] | None = None  # (input, its cast, input version)

    def weight(self, weight: Tensor) -> Tensor:
        key = id(weight)
        if key not in self.weights:
            self.weights[key] = weight.detach().to(self.dtype)
        return self.weights[key]

    def input(self, x: Tensor) -> Tensor:
        if self.last is None or self.last[0] is not x or self.last[0]._version != self.last[2]:
            self.last = (x, x.to(self.dtype), x._version)
        return self.last[1]


def _fused_forward(layer: Any, name: str, casts: _Casts, x: Tensor) -> Tensor:
    """``base(x) + scaling * (x A^T) B^T``: the adapter added by one in-place addmm."""
    base = layer.base_layer
    if layer.disable_adapters or casts.dtype == x.dtype:
        out = torch.nn.functional.linear(x, base.weight, base.bias)
        if layer.disable_adapters:
            return out
    else:
        bias = None if base.bias is None else base.bias.to(casts.dtype)
        out = torch.nn.functional.linear(casts.input(x), casts.weight(base.weight), bias)
        out = out.to(x.dtype)
    a_weight = layer.lora_A[name].weight
    b_weight = layer.lora_B[name].weight
    low = torch.nn.functional.linear(x, a_weight)  # (..., r)
    flat = out.view(-1, out.shape[-1])
    flat.addmm_(low.reshape(-1, low.shape[-1]), b_weight.t(), alpha=layer.scaling[name])
    return out


# ---------------------------------------------------------------------------------------------
# The policy source


class LoraPolicy:
    """One user's LoRA policy over the shared base model; a ``PolicySource`` for the sampler.

    The reference stays the base model (adapter off). Create, step with ``update.update_step``
    (which owns ``optimizer``), sample
    with ``lm.sampling.sample(bundle, cfg, source=policy)``, and ``close()`` when done (or use it
    as a context manager). Every method that touches the model takes ``bundle.lock`` itself,
    except ``activate``, which the caller enters while holding it (as the sampler does).

    Args:
        bundle: the shared model.
        rank: LoRA r.
        alpha: LoRA alpha (scale alpha / r).
        seed: seeds the init of the A matrices (B starts at 0).
        target_modules: names of the linear maps to adapt (Llama's seven by default).
    """

    mode: str = "lora"
    shares_reference: bool = False

    def __init__(
        self,
        bundle: ModelBundle,
        rank: int = DEFAULT_RANK,
        alpha: float = DEFAULT_ALPHA,
        seed: int = 0,
        target_modules: tuple[str, ...] = LLAMA_TARGETS,
    ) -> None:
        self.bundle = bundle
        self.rank = int(rank)
        self.alpha = float(alpha)
        self.seed = int(seed)
        self.steps = 0
        self.optimizer: torch.optim.Optimizer | None = None  # built by update.update_step
        self._closed = False
        self._cancelled = False
        hub = _hub(bundle)
        with bundle.lock:
            self.name = f"{ADAPTER_PREFIX}{next(hub.counter)}"
            _inject(bundle, self.name, self.rank, self.alpha, tuple(target_modules))
            # a policy dropped without close() (its session's state went away with it) must
            # not leave its adapter in the shared model: the finalizer removes it then
            self._orphan_guard = weakref.finalize(self, _remove_orphan, bundle, self.name)
            self._orphan_guard.atexit = False
            self._params = self._collect()
            generator = torch.Generator().manual_seed(self.seed)
            with torch.no_grad():
                for a_weight, b_weight in self._pairs():
                    bound = 1.0 / math.sqrt(a_weight.shape[1])
                    draw = torch.rand(a_weight.shape, generator=generator, dtype=torch.float32)
                    a_weight.copy_((draw * 2 - 1) * bound)
                    b_weight.zero_()

    # PolicySource protocol --------------------------------------------------------------------

    def context_ids(self, bundle: ModelBundle, prompt: str) -> list[int]:
        """The plain chat-templated prompt (the adapter, not the prompt, is what differs)."""
        return bundle.chat_ids(prompt)

    @contextlib.contextmanager
    def activate(self, bundle: ModelBundle) -> Iterator[None]:
        """This user's adapter on, every other adapter off; caller holds ``bundle.lock``.

        Raises:
            RuntimeError: closed policy, another bundle, or the lock is not held.
        """
        if self._closed:
            raise RuntimeError("this LoRA policy was closed")
        if self._cancelled:
            raise Cancelled("this LoRA policy was released")
        if bundle is not self.bundle:
            raise RuntimeError("this LoRA policy belongs to another model bundle")
        if not bundle.lock.locked():
            raise RuntimeError("hold bundle.lock around LoraPolicy.activate")
        layers = _hub(bundle).layers
        try:
            for _, layer in layers:
                layer.set_adapter(self.name)
                layer.enable_adapters(True)
            yield
        finally:
            for _, layer in layers:
                layer.enable_adapters(False)

    @contextlib.contextmanager
    def fused(self, bundle: ModelBundle, base_dtype: torch.dtype = torch.float32) -> Iterator[None]:
        """The fused LoRA forward on every adapted layer (inside ``activate``, lock held).

        Same numbers as peft's forward up to float rounding with ``base_dtype`` float32; with
        bfloat16 the frozen base matmuls run in bfloat16 (weights cast once for the context) and
        the adapter stays float32 (module docstring). Layers the fused path cannot reproduce
        (dropout, DoRA, merged weights, bias) keep peft's forward.

        Raises:
            RuntimeError: the lock is not held.
        """
        if not bundle.lock.locked():
            raise RuntimeError("hold bundle.lock around LoraPolicy.fused")
        casts = _Casts(base_dtype)
        patched = []
        try:
            for _, layer in _hub(bundle).layers:
                if _fusable(layer, self.name):
                    layer.forward = functools.partial(_fused_forward, layer, self.name, casts)
                    patched.append(layer)
            yield
        finally:
            for layer in patched:
                del layer.forward
            casts.weights.clear()
            casts.last = None

    # Parameters, memory, lifetime -------------------------------------------------------------

    def _collect(self) -> list[Tensor]:
        return [w for pair in self._pairs() for w in pair]

    def _pairs(self) -> list[tuple[Tensor, Tensor]]:
        out = []
        for _, layer in _hub(self.bundle).layers:
            if self.name in layer.lora_A:
                out.append((layer.lora_A[self.name].weight, layer.lora_B[self.name].weight))
        return out

    def parameters(self) -> list[Tensor]:
        """This adapter's trainable tensors (A then B of each adapted layer, by module name)."""
        return list(self._params)

    def nbytes(self) -> dict[str, int]:
        """Bytes held for this user: adapter weights, AdamW state, and their total."""
        adapter = sum(p.numel() * p.element_size() for p in self._params)
        optim = 0
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                for value in state.values():
                    if isinstance(value, Tensor):
                        optim += value.numel() * value.element_size()
        return {"adapter": adapter, "optimizer": optim, "total": adapter + optim}

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran."""
        return self._closed

    @property
    def cancelled(self) -> bool:
        """Whether ``release()`` ran: work on it stops at its next boundary."""
        return self._cancelled

    def check(self) -> None:
        """Raise ``Cancelled`` once released (called by steps at their boundaries)."""
        if self._cancelled:
            raise Cancelled("this LoRA policy was released")

    def release(self) -> None:
        """Cancel work on this adapter and free it on the reaper thread; returns at once.

        What a closing session calls (on Streamlit's event loop): a step in progress stops at
        its next boundary (``check``), and ``close`` runs once the model lock is free, off the
        request path.
        """
        self._cancelled = True
        if not self._closed:
            release_later(self.close)

    def close(self) -> None:
        """Delete the adapter from the shared model and drop the optimizer (idempotent).

        Takes ``bundle.lock``: do not call it while holding the lock, nor on a request path
        (``release`` is the non-blocking form).
        """
        if self._closed:
            return
        with self.bundle.lock:
            if self._closed:
                return
            _remove(self.bundle, self.name)
            self._closed = True
        self._orphan_guard.detach()
        self.optimizer = None
        self._params = []

    def __enter__(self) -> LoraPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
