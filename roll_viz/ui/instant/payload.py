"""The batch the browser pipeline (``pipeline.js``) recomputes from, built once in Python.

The payload carries the calculator's inputs (scores, mask, group ids, log-probs, values, greedy
baseline scores) as base64 little-endian arrays (float64 bit-exact, so the browser reproduces
``roll_viz.core.pipeline.run`` to rounding), the framework's *resolved* config (Python's
``resolve_config`` stays the only source of defaults and validation), the estimator choices and
the generic-knob aliases of that framework. No model or user text is included except the group
labels, which the component only ever renders with ``textContent``.

This module imports no Streamlit, so the conformance tests can use it directly.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from roll_viz.analysis.common import ROLL_EPS
from roll_viz.analysis.reward_table import GLOBAL_CONFIG, LOCAL_CONFIG
from roll_viz.core.pipeline import (
    ALIASES,
    CHOICES,
    DEFAULTS,
    ESTIMATOR_KEY,
    dialects,
    prepare_batch,
    resolve_config,
)
from roll_viz.core.pipeline.dialects.shared import VIZ_DEFAULTS
from roll_viz.core.records import Batch, RunningMoments
from roll_viz.views.compare_charts import OKABE_ITO
from roll_viz.views.scales import ADVANTAGE_RANGE

PAYLOAD_VERSION = 1

# generic knob -> slider spec (min, max, step); the config key comes from ALIASES[framework]
SLIDERS: dict[str, tuple[float, float, float]] = {
    "beta": (0.0, 1.0, 0.001),
    "gamma": (0.0, 1.0, 0.01),
    "lam": (0.0, 1.0, 0.01),
}


def encode_array(x: Tensor | None, dtype: str = "f8") -> dict[str, Any] | None:
    """A (B,) or (B, T) tensor as ``{"dtype", "shape", "b64"}`` (little-endian bytes).

    Args:
        x: tensor or None.
        dtype: "f8" (float64, bit-exact), "u1" (0/1 mask) or "i4" (group ids).

    Returns:
        The encoding, or None for None.
    """
    if x is None:
        return None
    torch_dtype = {"f8": torch.float64, "u1": torch.uint8, "i4": torch.int32}[dtype]
    arr = x.detach().to(torch_dtype).contiguous().cpu().numpy()
    data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return {"dtype": dtype, "shape": list(arr.shape), "b64": base64.b64encode(data).decode()}


def batch_payload(batch: Batch) -> dict[str, Any]:
    """The validated batch, encoded for ``pipeline.js``'s ``decodeBatch``.

    Args:
        batch: the calculator input; validated with ``prepare_batch`` (ValueError if bad).

    Returns:
        JSON-serializable dict with the Batch's field names.
    """
    clean = prepare_batch(batch)
    return {
        "scores": encode_array(clean.scores),
        "response_mask": encode_array(clean.response_mask, "u1"),
        "group_ids": encode_array(clean.group_ids, "i4"),
        "group_labels": [str(label) for label in clean.group_labels],
        "logprobs": encode_array(clean.logprobs),
        "ref_logprobs": encode_array(clean.ref_logprobs),
        "values": encode_array(clean.values),
        "baseline_scores": encode_array(clean.baseline_scores),
    }


def jsonable_config(framework: str, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The reward-stage keys of a resolved config (``DEFAULTS[framework]``), tuples as lists.

    Policy-update (loss) keys are left out: ``pipeline.run`` does not read them, so they cannot
    change what the browser recomputes.
    """
    return {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in cfg.items()
        if k in DEFAULTS[framework]
    }


def max_group_size(batch: Batch) -> int:
    """Largest number of samples of one prompt in the batch."""
    return int(torch.bincount(torch.as_tensor(batch.group_ids).to(torch.long)).max().item())


def subset_groups(batch: Batch, group_size: int) -> Batch:
    """The first ``group_size`` samples (in row order) of every prompt: what the G slider shows.

    Args:
        batch: the full batch.
        group_size: G >= 1; groups with fewer samples keep all of theirs.

    Returns:
        A new Batch with the selected rows (group ids and labels unchanged).
    """
    if group_size < 1:
        raise ValueError(f"group size must be >= 1, got {group_size}")
    gids = torch.as_tensor(batch.group_ids).to(torch.long)
    seen: dict[int, int] = {}
    keep = []
    for row, g in enumerate(gids.tolist()):
        seen[g] = seen.get(g, 0) + 1
        if seen[g] <= group_size:
            keep.append(row)
    idx = torch.tensor(keep, dtype=torch.long)

    def pick(x):
        return None if x is None else torch.as_tensor(x)[idx]

    return Batch(
        scores=pick(batch.scores),
        response_mask=pick(batch.response_mask),
        group_ids=gids[idx],
        group_labels=tuple(batch.group_labels),
        logprobs=pick(batch.logprobs),
        ref_logprobs=pick(batch.ref_logprobs),
        values=pick(batch.values),
        baseline_scores=pick(batch.baseline_scores),
    )


@functools.cache
def browser_coverage() -> dict[str, dict[str, list | None]]:
    """What ``pipeline.js`` computes exactly, per framework with a browser port (JSON-ready).

    Each dialect record's ``BROWSER_COVERAGE`` (key -> the values covered, None for any value)
    plus the ``viz_`` keys every dialect accepts; ``covered`` in pipeline.js reads it from the
    payload, so the tables are written once, in the records.
    """
    return {
        name: {
            **{k: None if v is None else list(v) for k, v in d.BROWSER_COVERAGE.items()},
            **dict.fromkeys(VIZ_DEFAULTS),
        }
        for name, d in dialects.DIALECTS.items()
        if d.BROWSER_COVERAGE is not None
    }


def browser_covers(framework: str, config: Mapping[str, Any], running: bool = False) -> bool:
    """Whether ``pipeline.js`` computes ``config`` exactly: its ``covered``, in Python.

    ``config`` is a resolved config cut to the reward-stage keys (``jsonable_config``). A
    config that reads running statistics is covered only with ``running`` (the component is
    sent the session's running moments, as the Rewards page's bars are); the payload carries
    none (the server's running moments belong to the session).
    """
    table = browser_coverage().get(framework)
    if table is None or any(key not in config for key in table):
        return False
    for key, value in config.items():
        if key not in table or (table[key] is not None and value not in table[key]):
            return False
        if value == "running" and not running:
            return False
    return True  # gamma / lambda outside [0, 1]: resolve_config has refused them already


def instant_payload(
    batch: Batch,
    framework: str,
    config: Mapping[str, Any] | None = None,
    running: RunningMoments | None = None,
) -> dict[str, Any]:
    """Everything the instant component needs, sent once per batch/config.

    Args:
        batch: the calculator input (the page's ``ui.current_batch`` / the Batch it traces).
        framework: "roll", "verl", "openrlhf" or "trl".
        config: that framework's keys (resolved here; ValueError on a bad key or value).
        running: running reward statistics before this batch (ROLL "running" norm types).

    Returns:
        JSON-serializable dict: version, framework, config (resolved), batch (encoded),
        running, estimator_key, estimators (the framework's choices), aliases (generic knob ->
        config key or None), sliders, max_group_size, scale_floor (view -> the smallest
        colour range it draws: the advantages share the heatmaps' +-3), coverage
        (``browser_coverage``: what pipeline.js computes exactly, per framework).
    """
    cfg = resolve_config(framework, config)
    est_key = ESTIMATOR_KEY[framework]
    return {
        "version": PAYLOAD_VERSION,
        "framework": framework,
        "config": jsonable_config(framework, cfg),
        "batch": batch_payload(batch),
        "running": None
        if running is None
        else {"mean": running.mean, "var": running.var, "count": running.count},
        "estimator_key": est_key,
        "estimators": list(CHOICES[framework][est_key]),
        "aliases": dict(ALIASES[framework]),
        "sliders": {k: list(v) for k, v in SLIDERS.items()},
        "max_group_size": max_group_size(batch),
        "scale_floor": {"advantages": ADVANTAGE_RANGE},
        "coverage": browser_coverage(),
    }


def apply_params(
    framework: str, config: Mapping[str, Any] | None, params: Mapping[str, Any]
) -> dict[str, Any]:
    """The config the settled slider values mean: generic knobs mapped to this framework's keys.

    Args:
        framework: dialect.
        config: the config the payload was built from.
        params: what the component reported, e.g. ``{"beta": 0.3, "gamma": 0.9, "lam": 0.95,
            "estimator": "grpo", "G": 4}`` (``G`` is not a config key; see ``subset_groups``).

    Returns:
        A resolved config (ValueError if a value is out of range).
    """
    cfg = dict(resolve_config(framework, config))
    aliases = ALIASES[framework]
    for knob in ("beta", "gamma", "lam", "estimator"):
        key = aliases.get(knob)
        if key is not None and params.get(knob) is not None:
            cfg[key] = params[knob]
    return resolve_config(framework, cfg)


# ---------------------------------------------------------------------------------------------
# Local vs global: the Local vs Global page's comparison, recomputed by local_global.js
# ---------------------------------------------------------------------------------------------
LOCAL_GLOBAL_VERSION = 1
#: log10(eps) slider of the local-vs-global component: min, max, step (ROLL's eps is 1e-6)
LOG10_EPS_RANGE: tuple[float, float, float] = (-8.0, 0.0, 0.25)


def local_global_payload(
    scores: Tensor,
    group_ids: Tensor,
    prompts: tuple[str, ...] | list[str],
) -> dict[str, Any]:
    """What ``local_global.js`` needs: the rewards, their prompts and ROLL's two resolved configs.

    The browser reproduces ``roll_viz.analysis.local_global.local_vs_global`` on the first G
    samples of every prompt (``subset_groups``'s rule) by running ``pipeline.js``'s ROLL dialect
    with exactly these configs (``LOCAL_CONFIG`` / ``GLOBAL_CONFIG`` resolved here, so Python
    stays the only source of defaults).

    Args:
        scores: (B,) response-level rewards (finite).
        group_ids: (B,) prompt index of each sample, 0..P-1, every prompt present.
        prompts: (P,) prompt texts (untrusted: the component renders them as text only).

    Returns:
        JSON-serializable dict: version, scores (f8), group_ids (i4), group_labels,
        max_group_size, local_config, global_config (resolved ROLL configs), eps (ROLL's 1e-6),
        log10_eps_range, palette (the server figures' prompt colours), coverage (ROLL's
        ``browser_coverage`` table).

    Raises:
        ValueError: mismatched lengths, non-finite scores or group ids outside 0..P-1.
    """
    scores = torch.as_tensor(scores).to(torch.float64).reshape(-1)
    gids = torch.as_tensor(group_ids).to(torch.long).reshape(-1)
    labels = [str(p) for p in prompts]
    if scores.numel() == 0 or scores.shape != gids.shape:
        raise ValueError(f"need B >= 1 scores and B group ids, got {scores.shape}, {gids.shape}")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores must be finite")
    if int(gids.min()) < 0 or int(gids.max()) >= len(labels):
        raise ValueError(f"group ids must be in 0..{len(labels) - 1}")
    if torch.bincount(gids, minlength=len(labels)).min() == 0:
        raise ValueError("every prompt needs at least one sample")
    return {
        "version": LOCAL_GLOBAL_VERSION,
        "scores": encode_array(scores),
        "group_ids": encode_array(gids, "i4"),
        "group_labels": labels,
        "max_group_size": int(torch.bincount(gids).max()),
        "local_config": jsonable_config("roll", resolve_config("roll", LOCAL_CONFIG)),
        "global_config": jsonable_config("roll", resolve_config("roll", GLOBAL_CONFIG)),
        "eps": ROLL_EPS,
        "log10_eps_range": list(LOG10_EPS_RANGE),
        "palette": list(OKABE_ITO),
        "coverage": browser_coverage()["roll"],
    }


def subset_scores(scores: Tensor, group_ids: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """(scores, group_ids) of the first ``group_size`` samples of every prompt (subset_groups)."""
    if group_size < 1:
        raise ValueError(f"group size must be >= 1, got {group_size}")
    gids = torch.as_tensor(group_ids).to(torch.long)
    seen: dict[int, int] = {}
    keep = []
    for row, g in enumerate(gids.tolist()):
        seen[g] = seen.get(g, 0) + 1
        if seen[g] <= group_size:
            keep.append(row)
    idx = torch.tensor(keep, dtype=torch.long)
    return torch.as_tensor(scores).to(torch.float64)[idx], gids[idx]
