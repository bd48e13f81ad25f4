"""The behaviour policy of each preset, precomputed on the real bundled model and committed.

For every preset (``data.presets``) the file ``data/presets/behaviour/<name>.json`` holds the
trainer's float32 recompute log pi_old of the preset's sampled tokens and the sampler's log mu
under each source of ``lm.behaviour`` (bf16, fp16, int8, and the processed log-probs of a top-p
or top-k sampler at the offered values), so the mismatch page paints instantly without the model.
``fp32`` needs no storage: its mu is pi_old.

Regenerate (after regenerating a preset or changing ``lm.behaviour``) with::

    python -m roll_viz.data.behaviour_presets [NAME ...]

Format: per row, the valid positions only; values rounded to 7 significant digits (the
mismatch is 1e-3 to 1e-1 nats); ``inside`` lists the positions a truncated sampler could draw.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from roll_viz.data.presets import PRESET_DIR, PRESETS, _config_dict, load_preset
from roll_viz.lm.behaviour import Behaviour, behaviour_logprobs
from roll_viz.lm.models import ModelBundle, load_models
from roll_viz.lm.request import policy_source

BEHAVIOUR_DIR = PRESET_DIR / "behaviour"
FORMAT_VERSION = 1
TOP_P_OPTIONS = (0.8, 0.9, 0.95, 0.99)
TOP_K_OPTIONS = (5, 20, 50)
STORED = ("bf16", "fp16", "int8")


def _key(source: str, value: float | int | None) -> str:
    return source if value is None else f"{source}={value:g}"


def variants() -> list[tuple[str, str, float | int | None]]:
    """(stored key, source, top-p or top-k value) of every stored mu."""
    out: list[tuple[str, str, float | int | None]] = [(s, s, None) for s in STORED]
    out += [(_key("top_p", p), "top_p", p) for p in TOP_P_OPTIONS]
    out += [(_key("top_k", k), "top_k", k) for k in TOP_K_OPTIONS]
    return out


def behaviour_path(name: str) -> Path:
    """The committed behaviour file of a preset."""
    return BEHAVIOUR_DIR / f"{name}.json"


def _rows(values: torch.Tensor, mask: torch.Tensor) -> list[list[float]]:
    return [[float(f"{v:.7g}") for v in values[b][mask[b]].tolist()] for b in range(len(mask))]


def compute(bundle: ModelBundle, name: str) -> dict[str, Any]:
    """Score one preset's tokens under every stored source (the JSON document)."""
    cfg, spec, rollout = load_preset(name)
    source = policy_source(cfg)
    mask = rollout.response_mask > 0
    temperature = cfg.temperature if cfg.temperature > 0 else 1.0
    doc: dict[str, Any] = {
        "name": name,
        "format": FORMAT_VERSION,
        "config": _config_dict(cfg, spec),
        "mu": {},
        "inside": {},
    }
    with bundle.lock, torch.inference_mode():
        contexts = [source.context_ids(bundle, cfg.prompts[g]) for g in rollout.group_ids.tolist()]
        for key, kind, value in variants():
            extra = (
                {"top_p": value} if kind == "top_p" else {"top_k": value} if kind == "top_k" else {}
            )
            got = behaviour_logprobs(
                bundle,
                contexts,
                rollout.token_ids,
                mask,
                source=kind,
                temperature=temperature,
                **extra,
            )
            if "old" not in doc:
                full = behaviour_logprobs(
                    bundle,
                    contexts,
                    rollout.token_ids,
                    mask,
                    source="fp32",
                    temperature=temperature,
                )
                doc["old"] = _rows(full.old, mask)
            doc["mu"][key] = _rows(torch.where(got.mask, got.mu, 0.0), mask)
            if kind in ("top_p", "top_k"):
                doc["inside"][key] = [
                    [t for t, ok in enumerate(got.mask[b][mask[b]].tolist()) if ok]
                    for b in range(len(mask))
                ]
    return doc


def load_behaviour(name: str, source: str, value: float | int | None = None) -> Behaviour | None:
    """A preset's stored pi_old and mu for a source (None when no file or no such entry).

    Args:
        name: preset name.
        source: one of ``lm.behaviour.SOURCES``.
        value: top-p mass or top-k count for those sources (one of the stored options).
    """
    path = behaviour_path(name)
    if name not in PRESETS or not path.exists():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    _, cfg, spec = PRESETS[name]
    if doc.get("config") != _config_dict(cfg, spec) or doc.get("format") != FORMAT_VERSION:
        return None
    _, _, rollout = load_preset(name)
    mask = rollout.response_mask > 0
    key = _key(source, value if source in ("top_p", "top_k") else None)
    if source != "fp32" and key not in doc["mu"]:
        return None
    old = torch.zeros(mask.shape, dtype=torch.float64)
    mu = torch.zeros(mask.shape, dtype=torch.float64)
    kept = mask.clone()
    for b in range(mask.shape[0]):
        n = int(mask[b].sum())
        old[b, :n] = torch.tensor(doc["old"][b], dtype=torch.float64)
        if source == "fp32":
            mu[b, :n] = old[b, :n]
        else:
            mu[b, :n] = torch.tensor(doc["mu"][key][b], dtype=torch.float64)
        if key in doc["inside"]:
            row = torch.zeros(mask.shape[1], dtype=torch.bool)
            row[torch.tensor(doc["inside"][key][b], dtype=torch.long)] = True
            kept[b] = mask[b] & row
    old = torch.where(kept, old, 0.0)
    mu = torch.where(kept, mu, 0.0)
    return Behaviour(source, old, mu, kept, int(mask.sum() - kept.sum()))


def regenerate(names: list[str] | None = None, model: str | None = None) -> list[Path]:
    """Score every preset (or ``names``) on the real model on CPU in float32; write the files."""
    bundle = load_models(model, device="cpu", dtype="float32")
    BEHAVIOUR_DIR.mkdir(exist_ok=True)
    written = []
    for name in names or sorted(PRESETS):
        path = behaviour_path(name)
        doc = compute(bundle, name)
        path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: regenerate the behaviour files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="presets (default: all)")
    parser.add_argument("--model", default=None, help="model spec (default: the bundled one)")
    args = parser.parse_args(argv)
    for path in regenerate(args.names or None, args.model):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
