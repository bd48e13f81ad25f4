"""Hyperparameter sweeps: rerun the pipeline over a grid of beta, gamma, lam or G on one batch.

Simplified: a sweep point reruns the whole pipeline on the same cached batch (no new samples);
a smaller group size G is emulated by keeping the first g samples of every prompt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from roll_viz.analysis.common import SWEEP_PARAMS, one_thread
from roll_viz.analysis.local_global import framework_config
from roll_viz.core.pipeline import dialects, run
from roll_viz.core.records import Batch, Rollout, Trace


def subsample_groups(batch: Batch, g: int) -> tuple[Batch, Tensor]:
    """Keep the first ``g`` samples of every prompt's group (deterministic, order-preserving).

    Args:
        batch: the full batch; rows of a prompt need not be contiguous.
        g: samples to keep per prompt (>= 1); groups smaller than ``g`` keep all their rows.

    Returns:
        (the sub-batch, (B',) long row index into the original batch).
    """
    if g < 1:
        raise ValueError(f"group size must be >= 1, got {g}")
    ids = batch.group_ids.to(torch.long)
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(ids)
    rank[order] = torch.arange(len(ids)) - starts[ids[order]]
    keep = torch.nonzero(rank < g).flatten()

    def take(x: Tensor | None) -> Tensor | None:
        return None if x is None else x[keep]

    sub = Batch(
        scores=batch.scores[keep],
        response_mask=batch.response_mask[keep],
        group_ids=ids[keep],
        group_labels=batch.group_labels,
        logprobs=take(batch.logprobs),
        ref_logprobs=take(batch.ref_logprobs),
        values=take(batch.values),
        baseline_scores=take(batch.baseline_scores),
    )
    return sub, keep


# ---------------------------------------------------------------------------------------------
# Sensitivity sweeps
# ---------------------------------------------------------------------------------------------

#: Default grids of the sweep parameters (G's grid is 1..the batch's group size).
DEFAULT_GRIDS: dict[str, tuple[float, ...]] = {
    "beta": tuple(float(v) for v in np.round(np.linspace(0.0, 0.5, 11), 4)),
    "gamma": tuple(float(v) for v in np.round(np.linspace(0.8, 1.0, 11), 4)),
    "lam": tuple(float(v) for v in np.round(np.linspace(0.0, 1.0, 11), 4)),
}


def default_grid(param: str, group_size: int, points: int = 11) -> tuple[float, ...]:
    """The default sweep grid of ``param`` (``G``: 2..group_size, as integers).

    Args:
        param: one of ``SWEEP_PARAMS``.
        group_size: samples per prompt in the batch (the largest G to try).
        points: number of grid points for the continuous parameters.

    Returns:
        Grid values, ascending.
    """
    if param == "G":
        return tuple(float(g) for g in range(min(2, group_size), group_size + 1))
    if param not in DEFAULT_GRIDS:
        raise ValueError(f"sweep parameter must be one of {SWEEP_PARAMS}, got {param!r}")
    lo, hi = DEFAULT_GRIDS[param][0], DEFAULT_GRIDS[param][-1]
    return tuple(float(v) for v in np.round(np.linspace(lo, hi, points), 4))


def _sign(x: Tensor, tol: float = 1e-12) -> Tensor:
    return torch.where(x.abs() <= tol, torch.zeros_like(x), torch.sign(x))


def advantage_stats(
    advantages: Tensor, mask: Tensor, reference: Tensor | None, other: Tensor | None
) -> dict[str, float]:
    """Summary statistics of one advantage tensor over its valid tokens.

    Args:
        advantages: (B, T) advantages of this setting.
        mask: (B, T) float 0/1 response mask.
        reference: (B, T) advantages of the current (sidebar) setting on the same rows, or None.
        other: (B, T) advantages of the comparison estimator at this setting, or None.

    Returns:
        ``spread`` (unbiased std over valid tokens), ``mean_abs``, ``sign_flips`` (fraction of
        valid tokens whose sign is the opposite of ``reference``'s: a token that merely became
        0, or was 0, is not a flip), ``agreement`` (Pearson r with
        ``other``; NaN if either side is constant) and ``sign_agreement`` (fraction of valid
        tokens with the same sign as ``other``).
    """
    valid = mask > 0
    a = advantages[valid].to(torch.float64)
    out = {
        "spread": float(a.std()) if a.numel() > 1 else math.nan,
        "mean_abs": float(a.abs().mean()) if a.numel() else math.nan,
        "sign_flips": math.nan,
        "agreement": math.nan,
        "sign_agreement": math.nan,
    }
    if reference is not None and a.numel():
        opposite = _sign(a) * _sign(reference[valid].to(torch.float64)) < 0
        out["sign_flips"] = float(opposite.double().mean())
    if other is not None and a.numel():
        b = other[valid].to(torch.float64)
        out["sign_agreement"] = float((_sign(a) == _sign(b)).double().mean())
        da, db = a - a.mean(), b - b.mean()
        na, nb = float(da.norm()), float(db.norm())
        if a.numel() > 1 and na > 1e-12 and nb > 1e-12:
            out["agreement"] = float((da * db).sum()) / (na * nb)  # Pearson r
    return out


def kl_is_zero(rollout: Rollout) -> bool:
    """Whether the rollout's policy equals its reference everywhere (exact KL exactly 0).

    Args:
        rollout: the rollout; uses ``exact_kl`` (B, T).

    Returns:
        True when every stored full-vocabulary KL is 0 (beta then cannot change anything).
    """
    return bool((rollout.exact_kl == 0).all())


def sweep_is_flat(table: pd.DataFrame, metric: str = "spread", tol: float = 1e-12) -> bool:
    """Whether a sweep's metric does not move over the grid (the knob has no effect).

    Args:
        table: output of ``sweep``.
        metric: column to look at.
        tol: largest max - min that still counts as flat.

    Returns:
        True for at least two finite values within ``tol`` of each other.
    """
    values = table[metric].dropna()
    return len(values) > 1 and float(values.max() - values.min()) < tol


@one_thread
def sweep(
    batch: Batch,
    framework: str,
    config: Mapping[str, object],
    param: str,
    values: Sequence[float],
    param2: str | None = None,
    values2: Sequence[float] = (),
    compare_config: Mapping[str, object] | None = None,
    run_fn: Callable[..., Trace] | None = None,
) -> pd.DataFrame:
    """Rerun the pipeline over a 1-D or 2-D grid of beta/gamma/lam/G and summarise each point.

    Each grid point is one ``pipeline.run`` on the same cached batch (milliseconds each; the
    points cannot be stacked into one batch because global whitening couples all rows). The
    statistics are computed vectorised over tokens. G is emulated by keeping the first g samples
    of every group (``subsample_groups``); sign flips then compare the same kept rows.

    Args:
        batch: the current batch (values filled in if the estimator needs a critic).
        framework: the dialect.
        config: the dialect's config for the current sidebar setting (its own keys).
        param: first swept parameter, one of ``SWEEP_PARAMS``.
        values: grid of ``param``.
        param2: optional second parameter (2-D grid).
        values2: grid of ``param2``.
        compare_config: config of a second estimator for the agreement columns, or None.
        run_fn: the pipeline's ``run`` (injected in tests); defaults to ``pipeline.run``.

    Returns:
        Long table: one row per grid point with columns ``param`` (and ``param2``), ``spread``,
        ``mean_abs``, ``sign_flips``, ``agreement``, ``sign_agreement``, ``error`` (the
        pipeline's message where a point is invalid, e.g. G=1 under GRPO, else "").
    """
    if run_fn is None:
        run_fn = run
    for name in (param, param2):
        if name is not None and name not in SWEEP_PARAMS:
            raise ValueError(f"sweep parameter must be one of {SWEEP_PARAMS}, got {name!r}")
    if param2 == param:
        raise ValueError("the two swept parameters must differ")
    reference = run_fn(batch, framework, dict(config)).advantages
    grid = [(v,) for v in values] if param2 is None else [(v, w) for w in values2 for v in values]
    names = (param,) if param2 is None else (param, param2)
    rows: list[dict] = []
    for point in grid:
        setting = dict(zip(names, point, strict=True))
        sub, keep = batch, None
        if "G" in setting:
            sub, keep = subsample_groups(batch, int(setting["G"]))
        generic = {k: v for k, v in setting.items() if k != "G"}
        cfg, _ = framework_config(framework, generic, config)
        row: dict[str, object] = dict(setting)
        try:
            adv = run_fn(sub, framework, cfg).advantages
            other = None
            if compare_config is not None:
                cmp_cfg, _ = framework_config(framework, generic, compare_config)
                other = run_fn(sub, framework, cmp_cfg).advantages
            ref = reference if keep is None else reference[keep]
            row.update(advantage_stats(adv, sub.response_mask, ref, other))
            row["error"] = ""
        except ValueError as err:
            row.update(dict.fromkeys(("spread", "mean_abs", "sign_flips"), math.nan))
            row.update({"agreement": math.nan, "sign_agreement": math.nan, "error": str(err)})
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# The same batch through every dialect
# ---------------------------------------------------------------------------------------------

#: For a generic estimator, each dialect's closest settings (its own keys; None: it has none).
#: Each dialect module's ``RECIPES`` holds its column (``core/pipeline/dialects/<name>.py``).
ESTIMATOR_EQUIVALENTS: dict[str, dict[str, dict | None]] = dialects.RECIPES


def beta_sweep_config(framework: str, config: Mapping[str, object]) -> tuple[dict, list[str]]:
    """The config a beta sweep runs with, and why beta may not reach the advantages.

    Beta acts on the advantages only through the KL in the reward: where the dialect has a
    "KL in reward" switch that is off, the sweep turns it on (and says so); otherwise the
    dialect says why beta is flat (TRL: the KL is only in the loss; OpenRLHF with use_loss).

    Args:
        framework: the dialect.
        config: its config for the current sidebar setting (its own keys); not modified.

    Returns:
        (the config to sweep, notes to show).
    """
    dialect = dialects.get(framework)
    base = dict(config)
    notes: list[str] = []
    switch = dialect.ALIASES.get("kl_in_reward")
    if switch and not base.get(switch):
        base[switch] = True
        notes.append(
            "beta only reaches the advantages when the KL is in the reward, so this sweep turns "
            f"'{switch}' on (the sidebar's setting is off)."
        )
    else:
        blocked = dialect.beta_blocked(base)
        if blocked:
            notes.append(blocked)
    return base, notes
