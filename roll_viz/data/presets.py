"""Prompt presets with precomputed rollouts of the real bundled model, committed as small JSON.

``PRESETS[name] = (description, SamplingConfig, RewardSpec)`` is the literal registry; the file
``data/presets/<name>.json`` holds the rollout SmolLM2-135M-Instruct produced for that config
on CPU in float32, so the app paints instantly and tests run without the model.

Regenerate (after changing a preset or the sampler) with::

    python -m roll_viz.data.presets --regenerate [NAME ...]

JSON format (``rollout_to_dict``): per-row lists of the valid positions only (padding is restored
as zeros, which is what ``sample`` writes there), float32 values written as the shortest decimal
that reads back as the identical float32, probe features rounded to 4 decimals before storing.
The round trip ``rollout_from_dict(rollout_to_dict(r)) == r`` is exact for any rollout whose
padded positions are 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from roll_viz.core.records import Rollout, RolloutMeta, build_rollout
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample
from roll_viz.rewards import RewardSpec

PRESET_DIR = Path(__file__).with_name("presets")
FORMAT_VERSION = 1
FEATURE_DECIMALS = 4

PRESETS: dict[str, tuple[str, SamplingConfig, RewardSpec]] = {
    "quantum": (
        "One prompt, eight answers; reward = one sentence of about 20 words. Policy = reference.",
        SamplingConfig(
            prompts=("Explain quantum entanglement in one sentence.",),
            group_size=8,
            temperature=1.0,
            max_new_tokens=48,
            seed=0,
        ),
        RewardSpec(
            terms=(
                ("one_sentence", 1.0, ()),
                ("target_length", 1.0, (("target", 20), ("tolerance", 20))),
            )
        ),
    ),
    "arithmetic": (
        "Four arithmetic questions, four answers each; a verifiable reward: is the last number "
        "right?",
        SamplingConfig(
            prompts=("What is 2 + 3?", "What is 7 + 8?", "What is 9 - 4?", "What is 3 * 4?"),
            group_size=4,
            temperature=0.7,
            max_new_tokens=32,
            seed=0,
        ),
        RewardSpec(terms=(("arithmetic", 1.0, ()),)),
    ),
    "sentiment": (
        "Two open prompts; reward = positive words (0.25 each, at most 1).",
        SamplingConfig(
            prompts=(
                "Describe your weekend in two sentences.",
                "Write a short review of a new coffee shop.",
            ),
            group_size=4,
            temperature=1.0,
            max_new_tokens=48,
            seed=0,
        ),
        RewardSpec(terms=(("positive_words", 1.0, ()),)),
    ),
    "pirate": (
        "Steered policy: it secretly hears 'Answer like an excited pirate.', the reference does "
        "not. Real per-token KL without training; reward = pirate words.",
        SamplingConfig(
            prompts=("Describe the ocean in one sentence.", "What is the capital of France?"),
            group_size=4,
            temperature=1.0,
            max_new_tokens=48,
            seed=0,
            policy_mode="steered",
            instruction="Answer like an excited pirate.",
        ),
        RewardSpec(
            terms=(
                (
                    "keyword",
                    1.0,
                    (("pattern", r"\b(arr+|ahoy|matey|pirate|ye)\b"), ("regex", True)),
                ),
            )
        ),
    ),
}


# ---------------------------------------------------------------------------------------------
# Rollout <-> JSON-able dict


def _f32(values: list) -> list:
    """Nested lists of floats as the shortest decimals that read back as the same float32."""
    if values and isinstance(values[0], list):
        return [_f32(v) for v in values]
    return [float(str(x)) for x in np.asarray(values, dtype=np.float32)]


def rollout_to_dict(rollout: Rollout) -> dict[str, Any]:
    """A JSON-able dict of a rollout, valid positions only (see the module docstring).

    Args:
        rollout: any Rollout whose padded positions are 0.

    Returns:
        A dict of plain lists, strings and numbers.
    """
    lengths = rollout.response_mask.sum(dim=1).long().tolist()

    def rows(t: Tensor, floats: bool = True) -> list:
        out = [t[b, :n].tolist() for b, n in enumerate(lengths)]
        return [_f32(r) for r in out] if floats else out

    return {
        "format": FORMAT_VERSION,
        "prompts": list(rollout.prompts),
        "group_ids": rollout.group_ids.tolist(),
        "responses": list(rollout.responses),
        "width": int(rollout.token_ids.shape[1]),
        "topk": int(rollout.topk_ids.shape[2]),
        "lengths": lengths,
        "token_ids": rows(rollout.token_ids, floats=False),
        "tokens": [list(t) for t in rollout.tokens],
        "logprobs": rows(rollout.logprobs),
        "ref_logprobs": rows(rollout.ref_logprobs),
        "exact_kl": rows(rollout.exact_kl),
        "entropy": rows(rollout.entropy),
        "topk_ids": rows(rollout.topk_ids, floats=False),
        "topk_logprobs": rows(rollout.topk_logprobs),
        "topk_ref_logprobs": rows(rollout.topk_ref_logprobs),
        "finish_reasons": list(rollout.finish_reasons),
        "greedy_responses": list(rollout.greedy_responses),
        "features": None if rollout.features is None else rows(rollout.features),
        "feature_dim": None if rollout.features is None else int(rollout.features.shape[2]),
        "vocab": {str(k): v for k, v in sorted(rollout.vocab.items())},
        "meta": [list(pair) for pair in rollout.meta],
        # the live sampler's sum pi^2 (verl's optimal token baseline); absent in older files
        **({} if rollout.sum_pi_squared is None else {"sum_pi2": rows(rollout.sum_pi_squared)}),
    }


def rollout_from_dict(data: dict[str, Any]) -> Rollout:
    """Inverse of ``rollout_to_dict`` (padding restored as zeros).

    Raises:
        ValueError: unknown format version.
    """
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"unsupported rollout format {data.get('format')!r} (expected {FORMAT_VERSION})"
        )
    lengths, width, k = data["lengths"], data["width"], data["topk"]
    num_rows = len(lengths)

    def dense(key: str, tail: tuple[int, ...] = (), dtype: torch.dtype = torch.float32) -> Tensor:
        out = torch.zeros((num_rows, width, *tail), dtype=dtype)
        for b, n in enumerate(lengths):
            if n:
                out[b, :n] = torch.tensor(data[key][b], dtype=dtype)
        return out

    mask = torch.zeros(num_rows, width)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1.0
    features = None
    if data.get("features") is not None:
        features = dense("features", (data["feature_dim"],))
    return build_rollout(
        prompts=tuple(data["prompts"]),
        group_ids=torch.tensor(data["group_ids"], dtype=torch.long),
        responses=tuple(data["responses"]),
        token_ids=dense("token_ids", dtype=torch.long),
        tokens=tuple(tuple(t) for t in data["tokens"]),
        response_mask=mask,
        logprobs=dense("logprobs"),
        ref_logprobs=dense("ref_logprobs"),
        exact_kl=dense("exact_kl"),
        entropy=dense("entropy"),
        topk_ids=dense("topk_ids", (k,), torch.long),
        topk_logprobs=dense("topk_logprobs", (k,)),
        topk_ref_logprobs=dense("topk_ref_logprobs", (k,)),
        finish_reasons=tuple(data["finish_reasons"]),
        greedy_responses=tuple(data["greedy_responses"]),
        features=features,
        vocab={int(key): value for key, value in data["vocab"].items()},
        meta=RolloutMeta.of(data["meta"]),
        sum_pi_squared=dense("sum_pi2") if "sum_pi2" in data else None,
    )


def _config_dict(cfg: SamplingConfig, spec: RewardSpec) -> dict[str, Any]:
    """The preset's configs in JSON form, stored next to the rollout to detect stale files."""
    return json.loads(json.dumps({"sampling": asdict(cfg), "reward": asdict(spec)}))


def preset_path(name: str) -> Path:
    """The committed JSON file of a preset."""
    return PRESET_DIR / f"{name}.json"


def load_preset(name: str) -> tuple[SamplingConfig, RewardSpec, Rollout]:
    """The preset's sampling config, reward spec and precomputed rollout.

    Raises:
        KeyError: unknown preset name.
        ValueError: the JSON was made for a different config (regenerate it).
    """
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    _, cfg, spec = PRESETS[name]
    data = json.loads(preset_path(name).read_text(encoding="utf-8"))
    if data.get("config") != _config_dict(cfg, spec):
        raise ValueError(
            f"preset {name!r} is stale: run `python -m roll_viz.data.presets --regenerate {name}`"
        )
    return cfg, spec, rollout_from_dict(data["rollout"])


def regenerate(names: list[str] | None = None, model: str | None = None) -> list[Path]:
    """Sample each preset with the real model on CPU in float32 and write its JSON file."""
    bundle = load_models(model, device="cpu", dtype="float32")
    written = []
    PRESET_DIR.mkdir(exist_ok=True)
    for name in names or sorted(PRESETS):
        description, cfg, spec = PRESETS[name]
        rollout = sample(bundle, cfg)
        if rollout.features is not None:
            rollout = replace(rollout, features=rollout.features.round(decimals=FEATURE_DECIMALS))
        data = {
            "name": name,
            "description": description,
            "config": _config_dict(cfg, spec),
            "rollout": rollout_to_dict(rollout),
        }
        path = preset_path(name)
        path.write_text(
            json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8"
        )
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    """``python -m roll_viz.data.presets --regenerate [NAME ...]``."""
    parser = argparse.ArgumentParser(prog="python -m roll_viz.data.presets")
    parser.add_argument(
        "--regenerate", action="store_true", help="resample and rewrite the JSON files"
    )
    parser.add_argument("--model", default=None, help="model spec (default: the bundled SmolLM2)")
    parser.add_argument("names", nargs="*", help="presets to regenerate (default: all)")
    args = parser.parse_args(argv)
    if not args.regenerate:
        for name, (description, _, _) in PRESETS.items():
            sys.stdout.write(f"{name}: {description}\n")
        return 0
    for path in regenerate(args.names or None, args.model):
        sys.stdout.write(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
