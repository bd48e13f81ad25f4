"""Frameworks' own code as benchmark peers: a PyPI wheel, read, never installed.

verl is not a dependency of roll-viz (its package imports ray, megatron, vLLM and their
configs at the top). To time and check roll-viz against verl's own advantage code, this module
fetches the ``verl==0.9.1`` wheel with ``pip download --no-deps`` into a cache folder, unpacks
its ``verl/`` sources, registers small stand-ins for what ``core_algos.py`` imports at module
level (tensordict, transformers, omegaconf, the config classes, the device helpers) and imports
verl's ``core_algos`` from the wheel. ``ray_trainer.compute_advantage`` (whose module imports
ray) is compiled alone from the wheel's source, with ``core_algos`` and a ``DataProto``
stand-in (a dict of tensors and a dict of numpy arrays) in its scope: the function body is
verl's, unchanged.

Dev benchmarks only (``python -m benchmarks --only run_vs_stages``); nothing in the app
imports this module or downloads anything. The golden-vector tool ``tests/peers/make_vectors.py``
uses the same stand-ins (``tests/peers/peer_stubs.py`` imports them from here).

Every stand-in is undone by :func:`reset` (a module that was already imported is put back), so a
process that loads a peer is left as it was, the loaded functions aside.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import statistics
import subprocess
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import torch

VERL_VERSION = "0.9.1"

#: Seconds ``pip download`` may take before the peer is reported as skipped.
PIP_TIMEOUT_S = 300

#: (module name, the module it replaced or None), in the order they were registered.
_MADE: list[tuple[str, types.ModuleType | None]] = []


class PeerUnavailable(RuntimeError):
    """The framework's code cannot be had here (no pip, no network, a changed wheel)."""


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/roll-viz/peers`` (``~/.cache/roll-viz/peers`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "roll-viz" / "peers"


# ------------------------------------------------------------------------------- stand-ins


def reset() -> None:
    """Undo every stand-in and extracted module (the modules they replaced come back)."""
    for name, before in reversed(_MADE):
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before
    _MADE.clear()


def _register(name: str, module: types.ModuleType) -> None:
    _MADE.append((name, sys.modules.get(name)))
    sys.modules[name] = module


def mod(name: str, path: Path | None = None, **attrs) -> types.ModuleType:
    """Register a stand-in module (a package when ``path`` is given)."""
    m = types.ModuleType(name)
    if path is not None:
        m.__path__ = [str(path)]
    m.__dict__.update(attrs)
    _register(name, m)
    return m


def real(name: str, file: Path) -> types.ModuleType:
    """Import a framework source file under its own module name."""
    spec = importlib.util.spec_from_file_location(name, file)
    m = importlib.util.module_from_spec(spec)
    _register(name, m)
    spec.loader.exec_module(m)
    return m


def function_from(file: Path, name: str, **scope):
    """One top-level function of a source file, compiled alone (its module's imports are heavy).

    ``scope`` holds the names it needs besides ``torch`` (its annotations included).
    """
    tree = ast.parse(file.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"torch": torch, "Tensor": torch.Tensor, **scope}
    exec(compile(ast.Module([node], []), str(file), "exec"), namespace)
    return namespace[name]


class Cfg(SimpleNamespace):
    """Attribute config with the ``.get`` of omegaconf / verl's BaseConfig."""

    def get(self, key, default=None):
        """Attribute or default."""
        return getattr(self, key, default)

    def __contains__(self, key):
        return hasattr(self, key)


class AlgoConfig(Cfg):
    """verl ``AlgoConfig`` stand-in (the losses assert they did not get one)."""


class DataProtoStub:
    """verl ``DataProto`` stand-in: ``batch`` (tensors) and ``non_tensor_batch`` (numpy)."""

    def __init__(self, tensors, non_tensors=None):
        self.batch = dict(tensors)
        self.non_tensor_batch = dict(non_tensors or {})

    @classmethod
    def from_dict(cls, tensors=None, non_tensors=None, **kw):
        """A holder of ``tensors`` (and ``non_tensors``)."""
        return cls(tensors or {}, non_tensors)


# ------------------------------------------------------------------------------ the wheel


def download_wheel(name: str, version: str, dest: Path) -> Path:
    """The ``name==version`` wheel in ``dest`` (``pip download --no-deps`` when not there yet).

    Raises:
        PeerUnavailable: pip is missing, fails (no network, no such release) or times out.
    """
    dest.mkdir(parents=True, exist_ok=True)
    pattern = f"{name}-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", f"{name}=={version}", "--no-deps", "-q"]
    try:
        proc = subprocess.run(
            [*cmd, "-d", str(dest)], capture_output=True, text=True, timeout=PIP_TIMEOUT_S
        )
    except OSError as err:
        raise PeerUnavailable(f"pip could not run ({err})") from err
    except subprocess.TimeoutExpired:
        raise PeerUnavailable(
            f"pip download {name}=={version} took over {PIP_TIMEOUT_S} s"
        ) from None
    found = sorted(dest.glob(pattern))
    if proc.returncode != 0 or not found:
        errors = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
        why = errors[-1].strip() if errors else f"exit status {proc.returncode}, no wheel"
        raise PeerUnavailable(f"pip download {name}=={version} failed ({why})")
    return found[0]


def unpack(wheel: Path, dest: Path, package: str) -> Path:
    """``package/`` of ``wheel`` unpacked under ``dest`` (once); returns ``dest``."""
    done = dest / f".{wheel.name}.unpacked"
    if not done.exists():
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest, [n for n in zf.namelist() if n.startswith(f"{package}/")])
        done.touch()
    return dest


# ------------------------------------------------------------------------------------ verl


def load_verl_core(src: Path) -> types.ModuleType:
    """Import verl's ``trainer/ppo/core_algos.py`` from an unpacked wheel at ``src``.

    Stand-ins for its module-level imports; ``verl.utils.torch_functional`` and ``groupwise``
    are verl's. The stand-ins stay registered until :func:`reset` (the losses load on top).
    """
    v = src / "verl"
    mod("tensordict", TensorDict=dict)
    mod("transformers", PreTrainedTokenizer=object)
    mod("omegaconf", DictConfig=dict)
    mod("verl", v)
    mod("verl.trainer", v / "trainer")
    mod("verl.trainer.ppo", v / "trainer" / "ppo")
    mod("verl.trainer.config", v / "trainer" / "config", AlgoConfig=AlgoConfig)
    mod("verl.trainer.config.algorithm", RolloutCorrectionConfig=Cfg)
    utils = mod("verl.utils", v / "utils")
    mod(
        "verl.utils.device",
        get_device_name=lambda: "cpu",
        get_torch_device=lambda: torch.cpu,
        is_npu_available=False,
        is_cuda_available=False,
    )
    groupwise = real("verl.utils.groupwise", v / "utils" / "groupwise.py")
    utils.as_torch_index = groupwise.as_torch_index
    utils.group_mean_std = groupwise.group_mean_std
    real("verl.utils.import_utils", v / "utils" / "import_utils.py")
    utils.torch_functional = real(
        "verl.utils.torch_functional", v / "utils" / "torch_functional.py"
    )
    mod("verl.workers", v / "workers")
    mod("verl.workers.config", ActorConfig=Cfg, CriticConfig=Cfg)
    mod("verl.workers.config.actor", PolicyLossConfig=Cfg)
    mod("verl.protocol", DataProto=DataProtoStub)
    return real("verl.trainer.ppo.core_algos", v / "trainer" / "ppo" / "core_algos.py")


def _no_response_mask(data):
    raise KeyError("the peer batch carries response_mask (verl's fit computes it first)")


@dataclass
class VerlPeer:
    """verl's ``compute_advantage`` from the wheel, ready to call on a roll-viz batch."""

    compute_advantage: Any
    core_algos: types.ModuleType
    wheel: Path

    @property
    def label(self) -> str:
        """What is timed, for the JSON line."""
        return (
            f"verl {VERL_VERSION} trainer/ppo/ray_trainer.py::compute_advantage (PyPI wheel "
            f"{self.wheel.name}, heavy imports stubbed)"
        )

    def inputs(self, batch, cfg: dict) -> tuple[dict, dict, dict]:
        """(tensors, uids, call kwargs) as verl's trainer hands them to ``compute_advantage``.

        The tensors are the batch's own (same dtype, not copied): ``response_mask``, ``values``,
        and ``token_level_rewards`` = each score on its response's last token (what verl's
        reward manager writes; with ``use_kl_in_reward`` off the trainer passes the scores on
        unchanged). ``uid`` is the group id as a string per row (verl's uuid per prompt).
        """
        if cfg.get("use_kl_in_reward"):
            raise PeerUnavailable("use_kl_in_reward needs apply_kl_penalty, not wired here")
        mask = batch.response_mask
        rows = torch.arange(mask.shape[0])
        last = mask.sum(-1).long() - 1  # -1 (the last column) for an empty response, as in verl
        rewards = torch.zeros_like(mask, dtype=batch.scores.dtype)
        rewards[rows, last] = batch.scores
        tensors = {"response_mask": mask, "token_level_rewards": rewards}
        if batch.values is not None:
            tensors["values"] = batch.values
        uids = {"uid": np.array([str(g) for g in batch.group_ids.tolist()], dtype=object)}
        algo = AlgoConfig(
            adv_estimator=cfg["adv_estimator"],
            gamma=cfg["gamma"],
            lam=cfg["lam"],
            norm_adv_by_std_in_grpo=cfg["norm_adv_by_std_in_grpo"],
            use_pf_ppo=False,
        )
        kwargs = {
            "adv_estimator": cfg["adv_estimator"],
            "gamma": cfg["gamma"],
            "lam": cfg["lam"],
            "num_repeat": 1,
            "norm_adv_by_std_in_grpo": cfg["norm_adv_by_std_in_grpo"],
            "config": algo,
        }
        return tensors, uids, kwargs

    def call(self, tensors: dict, uids: dict, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """One ``compute_advantage`` call on a fresh ``DataProto``; (advantages, returns)."""
        data = self.compute_advantage(DataProtoStub(tensors, uids), **kwargs)
        return data.batch["advantages"], data.batch["returns"]


def verl_peer(cache: Path | None = None) -> VerlPeer:
    """The verl peer: ``compute_advantage`` (wheel cached under ``cache``/verl-<version>).

    Raises:
        PeerUnavailable: the wheel cannot be had or its code no longer loads with these
            stand-ins (the message says which).
    """
    root = (cache or default_cache()) / f"verl-{VERL_VERSION}"
    wheel = download_wheel("verl", VERL_VERSION, root)
    src = unpack(wheel, root / "src", "verl")
    try:
        core = load_verl_core(src)
        fn = function_from(
            src / "verl" / "trainer" / "ppo" / "ray_trainer.py",
            "compute_advantage",
            np=np,
            Optional=Optional,
            DataProto=DataProtoStub,
            AlgoConfig=AlgoConfig,
            AdvantageEstimator=core.AdvantageEstimator,
            core_algos=core,
            compute_response_mask=_no_response_mask,
        )
    except Exception as err:  # a wheel whose imports outgrew the stand-ins
        raise PeerUnavailable(
            f"verl {VERL_VERSION} did not load ({type(err).__name__}: {err})"
        ) from err
    finally:
        reset()
    return VerlPeer(compute_advantage=fn, core_algos=core, wheel=wheel)


def _masked_max_diff(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> float:
    """Largest |ours - theirs| over the response tokens (verl leaves padding unmasked)."""
    diff = (ours.double() - theirs.double()).abs() * mask.double()
    return diff.max().item()


def agreement(
    peer: VerlPeer, args: tuple, trace: Any, mask: torch.Tensor, ours: dict, times: dict
) -> dict:
    """The bench line's peer fields: the peer's median times, run / peer, and how far apart.

    ``args`` are ``peer.inputs(...)``; ``trace`` is ``run``'s on the same batch; ``ours`` holds
    ``run_ms`` / ``run_cpu_ms`` (medians), ``times`` the peer's ``peer_ms`` / ``peer_cpu_ms``
    lists. The peer runs once more on float64 copies, untimed, to tell rounding from logic.
    """
    peer_ms, peer_cpu_ms = (
        statistics.median(times["peer_ms"]),
        statistics.median(times["peer_cpu_ms"]),
    )
    advantages, returns = peer.call(*args)
    tensors, uids, kwargs = args
    wide = {k: v.double() for k, v in tensors.items()}
    advantages64, returns64 = peer.call(wide, uids, kwargs)
    return {
        "framework_peer_ms": round(peer_ms, 2),
        "framework_peer_cpu_ms": round(peer_cpu_ms, 2),
        "run_vs_peer": round(ours["run_ms"] / peer_ms, 2),
        "run_vs_peer_cpu": round(ours["run_cpu_ms"] / max(peer_cpu_ms, 1e-9), 2),
        "peer_max_abs_diff_advantages": _masked_max_diff(trace.advantages, advantages, mask),
        "peer_max_abs_diff_returns": _masked_max_diff(trace.returns, returns, mask),
        "peer_max_abs_diff_advantages_f64": _masked_max_diff(trace.advantages, advantages64, mask),
        "peer_max_abs_diff_returns_f64": _masked_max_diff(trace.returns, returns64, mask),
        "peer_note": "verl computes in the inputs' float32, run in float64 (the *_f64 "
        "diffs: verl again, untimed, on float64 copies); differences over the response "
        "tokens; token_level_rewards (each score on its last token, as verl's reward "
        "manager writes it) built once, outside the timing",
    }
