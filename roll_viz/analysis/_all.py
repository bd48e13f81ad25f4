"""Comparison helpers behind the Local vs global, Sensitivity, Frameworks and Self-test pages.

Everything here is pure (no Streamlit, no plotly): it takes records (``Batch``, ``Rollout``) or
plain tables, calls the pipeline (``roll_viz.core.pipeline.run``) and returns tensors, pandas tables
and small frozen records that the pages show and the tests check.

What roll-viz simplifies here compared with production recipes:
    - local vs global normalization uses ROLL's ``reward_norm`` conventions (unbiased std,
      ``/(std + 1e-6)``) for both sides, on response-level rewards (one number per sample);
    - a sweep point reruns the whole pipeline on the same cached batch (no new samples); a smaller
      group size G is emulated by keeping the first g samples of every prompt;
    - the self-test compares against hand values written as literals (docs/algorithms.md, T1-T14)
      and, for the full-vocabulary KL, against an exact enumeration on the categorical the stored
      top-K log-probs define (top-K tokens plus one "rest" bucket).
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.records import Batch, Rollout, Trace

# ---------------------------------------------------------------------------------------------
# Shared constants
# ---------------------------------------------------------------------------------------------

#: The seed's worked example: one prompt ("quantum"), three sampled answers and their rewards.
EXAMPLE_PROMPT = "quantum"
EXAMPLE_REWARDS: tuple[float, float, float] = (8.2, 6.5, 9.1)
#: A second, low-variance prompt for the editable table, so local amplification shows at once.
LOW_VARIANCE_PROMPT = "capital of France"
LOW_VARIANCE_REWARDS: tuple[float, float, float] = (5.0, 5.1, 4.9)

#: ROLL's group/batch std epsilon: ``(r - mean) / (std + EPS)``.
ROLL_EPS = 1e-6

#: Generic sweep parameters (keys of ``pipeline.ALIASES[fw]``, plus the group size ``G``).
SWEEP_PARAMS: tuple[str, ...] = ("beta", "gamma", "lam", "G")


_THREADS_LOCK = threading.Lock()
_THREADS_STATE = {"depth": 0, "saved": 0}


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run a burst of small tensor ops on one torch intra-op thread, then restore the setting.

    A sweep is dozens of pipeline runs on (B, T) <= (64, 128) tensors; their matmuls are far
    faster on one thread than split across busy cores (measured on the 2-core CI machine under
    load: a 22-run sweep on 64 x 128 tokens took 1450 ms with 2 threads, 35 ms with 1).
    ``torch.set_num_threads`` is process-wide, so nested/concurrent users share one counter and
    the last one out restores the saved value.
    """
    with _THREADS_LOCK:
        if _THREADS_STATE["depth"] == 0:
            _THREADS_STATE["saved"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _THREADS_STATE["depth"] += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_STATE["depth"] -= 1
            if _THREADS_STATE["depth"] == 0:
                torch.set_num_threads(_THREADS_STATE["saved"])


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|$<>~-])")


def md_escape(text: object) -> str:
    """Text for a markdown renderer, shown literally (no emphasis, links, LaTeX or HTML).

    Prompts, table cells and messages typed by users go through this before ``st.markdown``.

    Args:
        text: anything; converted with ``str``.

    Returns:
        The text with every markdown/LaTeX/HTML special character backslash-escaped.
    """
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def _one_thread(fn: Callable) -> Callable:
    """Decorator: run ``fn`` inside ``single_threaded()``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded():
            return fn(*args, **kwargs)

    return wrapper


def default_reward_table() -> pd.DataFrame:
    """The editable reward table's starting rows: the seed example plus a low-variance prompt.

    Returns:
        DataFrame with columns ``prompt`` (str) and ``reward`` (float), 6 rows.
    """
    rows = [(EXAMPLE_PROMPT, r) for r in EXAMPLE_REWARDS]
    rows += [(LOW_VARIANCE_PROMPT, r) for r in LOW_VARIANCE_REWARDS]
    return pd.DataFrame(rows, columns=["prompt", "reward"])


# ---------------------------------------------------------------------------------------------
# Editable reward table -> scores and groups
# ---------------------------------------------------------------------------------------------

#: What each dialect does with a prompt that has a single sample (docs/algorithms.md, section 3).
SINGLETON_BEHAVIOUR: dict[str, str] = {
    "roll": (
        "ROLL (RLVR grpo) takes the unbiased std of one value, which is NaN, so the reward becomes "
        "NaN (the agentic pipeline returns 0 instead)."
    ),
    "verl": (
        "verl grpo uses mean 0 and std 1 for a group of one, so the advantage is the raw reward "
        "divided by 1 + 1e-6."
    ),
    "openrlhf": "OpenRLHF refuses to run: group estimators assert n_samples_per_prompt > 1.",
    "trl": "TRL refuses to run: GRPOTrainer requires num_generations >= 2 (nanstd would be NaN).",
}


class RewardTableError(ValueError):
    """A cell of the editable reward table cannot be read; the message names the row."""


@dataclass(frozen=True)
class RewardTable:
    """The editable reward table, parsed.

    Attributes:
        scores: (B,) float64 rewards, in table order (blank rows dropped).
        group_ids: (B,) long prompt index of each row, by first appearance (0..P-1).
        prompts: (P,) prompt text of each group.
        rows: (B,) 1-based row number in the editor of each kept row (for messages).
        singletons: prompts that have only one sample.
        messages: plain-language warnings for the page (singleton groups, constant groups).
    """

    scores: Tensor
    group_ids: Tensor
    prompts: tuple[str, ...]
    rows: tuple[int, ...]
    singletons: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()


def _is_blank(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()


def parse_reward_table(table: pd.DataFrame) -> RewardTable:
    """Read an editable (prompt, reward) table into scores and group ids.

    Rows whose prompt and reward are both blank are dropped (the editor's empty new rows).
    Rows of one prompt need not be contiguous; groups are numbered by first appearance.

    Args:
        table: DataFrame with columns ``prompt`` and ``reward``, one row per sampled answer.

    Returns:
        The parsed table; ``messages`` explains singleton and zero-variance groups.

    Raises:
        RewardTableError: a missing column, an empty prompt or reward on a filled row, a reward
            that is not a finite number, or no rows at all. The message names the row.
    """
    missing = [c for c in ("prompt", "reward") if c not in table.columns]
    if missing:
        raise RewardTableError(f"the table needs the column(s) {', '.join(missing)}")
    scores: list[float] = []
    prompts: list[str] = []
    rows: list[int] = []
    for i, (prompt, reward) in enumerate(zip(table["prompt"], table["reward"], strict=True)):
        row = i + 1
        if _is_blank(prompt) and _is_blank(reward):
            continue
        if _is_blank(prompt):
            raise RewardTableError(f"row {row}: the prompt is empty (type any name for the prompt)")
        if _is_blank(reward):
            raise RewardTableError(f"row {row}: the reward is empty (type a number such as 8.2)")
        try:
            value = float(str(reward).strip()) if isinstance(reward, str) else float(reward)
        except (TypeError, ValueError):
            raise RewardTableError(
                f"row {row}: the reward {str(reward)[:40]!r} is not a number (type e.g. 8.2)"
            ) from None
        if not math.isfinite(value):
            raise RewardTableError(f"row {row}: the reward {value} is not a finite number")
        scores.append(value)
        prompts.append(str(prompt).strip())
        rows.append(row)
    if not scores:
        raise RewardTableError("the table is empty: add at least two rows for one prompt")
    labels = tuple(dict.fromkeys(prompts))
    index = {p: k for k, p in enumerate(labels)}
    group_ids = torch.tensor([index[p] for p in prompts], dtype=torch.long)
    score_t = torch.tensor(scores, dtype=torch.float64)
    counts = torch.bincount(group_ids, minlength=len(labels))
    singletons = tuple(p for p, n in zip(labels, counts.tolist(), strict=True) if n == 1)
    messages: list[str] = []
    if singletons:
        names = ", ".join(repr(p) for p in singletons)
        how = " ".join(f"{fw}: {SINGLETON_BEHAVIOUR[fw]}" for fw in SINGLETON_BEHAVIOUR)
        messages.append(
            f"{names} has only one sample, so its group std is undefined and the local "
            f"advantage is left blank (NaN). What the dialects do: {how}"
        )
    for k, p in enumerate(labels):
        member = score_t[group_ids == k]
        if member.numel() > 1 and bool((member == member[0]).all()):
            messages.append(
                f"every reward of {p!r} is equal, so its local advantages are exactly 0: the "
                "prompt gives no learning signal under group normalization."
            )
    return RewardTable(
        scores=score_t,
        group_ids=group_ids,
        prompts=labels,
        rows=tuple(rows),
        singletons=singletons,
        messages=tuple(messages),
    )


# ---------------------------------------------------------------------------------------------
# Local (per-prompt group) vs global (whole batch) normalization
# ---------------------------------------------------------------------------------------------

#: ROLL configs (its own key names) for the two normalizations, on response-level rewards.
LOCAL_CONFIG: dict[str, object] = {
    "adv_estimator": "reinforce",
    "norm_mean_type": "group",
    "norm_std_type": "group",
    "gamma": 1.0,
    "add_token_level_kl": False,
}
GLOBAL_CONFIG: dict[str, object] = {
    **LOCAL_CONFIG,
    "norm_mean_type": "batch",
    "norm_std_type": "batch",
}


@dataclass(frozen=True)
class LocalGlobal:
    """Per-sample advantages under local and global normalization of the same rewards.

    Attributes:
        local: (B,) ``(r - group mean) / (group std + 1e-6)``; NaN for single-sample groups.
        global_: (B,) ``(r - batch mean) / (batch std + 1e-6)``.
        group_mean: (P,) mean reward of each prompt's group.
        group_std: (P,) unbiased std of each group (NaN for a group of one).
        batch_mean: mean of all B rewards.
        batch_std: unbiased std of all B rewards (NaN when B == 1).
        samples: per-sample table (prompt, sample, reward, group stats, both advantages).
        groups: per-prompt table (n, mean, std, and how much local normalization amplifies it).
    """

    local: Tensor
    global_: Tensor
    group_mean: Tensor
    group_std: Tensor
    batch_mean: float
    batch_std: float
    samples: pd.DataFrame
    groups: pd.DataFrame


def _response_batch(scores: Tensor, group_ids: Tensor) -> Batch:
    """A Batch of one token per sample (response-level rewards only, no KL inputs)."""
    n = scores.shape[0]
    labels = tuple(range(int(group_ids.max()) + 1)) if n else ()
    return Batch(
        scores=scores.to(torch.float64),
        response_mask=torch.ones(n, 1, dtype=torch.float64),
        group_ids=group_ids.to(torch.long),
        group_labels=labels,
    )


def _renumber(group_ids: Tensor) -> Tensor:
    """Map arbitrary group ids to 0..P'-1 in order of first appearance."""
    _, first = np.unique(group_ids.numpy(), return_index=True)
    order = group_ids.numpy()[np.sort(first)]
    lookup = {int(g): k for k, g in enumerate(order)}
    return torch.tensor([lookup[int(g)] for g in group_ids.tolist()], dtype=torch.long)


def _normalized_rewards(scores: Tensor, group_ids: Tensor, config: Mapping) -> Tensor:
    """ROLL's response-level normalized rewards for rows sorted into contiguous groups."""
    from roll_viz.core.pipeline import run

    order = torch.argsort(group_ids, stable=True)
    trace = run(_response_batch(scores[order], _renumber(group_ids[order])), "roll", config)
    out = torch.empty_like(scores, dtype=torch.float64)
    out[order] = trace.rewards.to(torch.float64)
    return out


def prompt_group_stats(scores: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-prompt count, mean and unbiased std (``ops.group_stats`` reduced to one row a group).

    Args:
        scores: (B,) rewards.
        group_ids: (B,) long prompt index 0..P-1.

    Returns:
        (count, mean, std), each (P,); std is NaN for a group of one.
    """
    from roll_viz.core.ops import group_stats

    stats = group_stats(scores.to(torch.float64), group_ids)
    n_groups = int(group_ids.max()) + 1
    first = torch.full((n_groups,), len(group_ids), dtype=torch.long)
    first = first.scatter_reduce(0, group_ids, torch.arange(len(group_ids)), reduce="amin")
    return stats.count[first], stats.mean[first], stats.std[first]


@_one_thread
def local_vs_global(
    scores: Tensor,
    group_ids: Tensor,
    prompts: Sequence[str] | None = None,
) -> LocalGlobal:
    """Normalize the same rewards per prompt (local) and over the whole batch (global).

    Both sides run through the pipeline's ROLL dialect (``norm_mean_type``/``norm_std_type``
    ``group`` vs ``batch``), so the numbers carry ROLL's conventions: unbiased std, 1e-6 added
    to the std. Single-sample groups get a NaN local advantage (their std is undefined).

    Args:
        scores: (B,) response-level rewards.
        group_ids: (B,) long prompt index of each sample, 0..P-1.
        prompts: (P,) display names of the prompts (defaults to "prompt 0", ...).

    Returns:
        Both advantage vectors, the group and batch statistics, and the two tables.
    """
    scores = scores.to(torch.float64)
    group_ids = group_ids.to(torch.long)
    count, g_mean, g_std = prompt_group_stats(scores, group_ids)
    n_groups = count.shape[0]
    names = list(prompts) if prompts is not None else [f"prompt {p}" for p in range(n_groups)]

    local = torch.full_like(scores, torch.nan)
    multi = count[group_ids] > 1
    if bool(multi.any()):
        local[multi] = _normalized_rewards(scores[multi], group_ids[multi], LOCAL_CONFIG)
    if scores.numel() > 1:
        global_ = _normalized_rewards(scores, torch.zeros_like(group_ids), GLOBAL_CONFIG)
        b_std = float(scores.std())
    else:
        global_ = torch.full_like(scores, torch.nan)
        b_std = math.nan
    b_mean = float(scores.mean())

    # Position of each sample inside its group (0..G-1), vectorised via a stable sort.
    order = torch.argsort(group_ids, stable=True)
    starts = torch.cumsum(count.to(torch.long), 0) - count.to(torch.long)
    within = torch.empty_like(group_ids)
    within[order] = torch.arange(len(group_ids)) - starts[group_ids[order]]

    samples = pd.DataFrame(
        {
            "prompt": [names[g] for g in group_ids.tolist()],
            "sample": within.tolist(),
            "reward": scores.numpy(),
            "group mean": g_mean[group_ids].numpy(),
            "group std": g_std[group_ids].numpy(),
            "local advantage": local.numpy(),
            "batch mean": np.full(len(scores), b_mean),
            "batch std": np.full(len(scores), b_std),
            "global advantage": global_.numpy(),
        }
    )
    amplification = (b_std + ROLL_EPS) / (g_std + ROLL_EPS)
    groups = pd.DataFrame(
        {
            "prompt": names,
            "n": count.to(torch.long).numpy(),
            "group mean": g_mean.numpy(),
            "group std": g_std.numpy(),
            "batch std": np.full(n_groups, b_std),
            "local / global scale": amplification.numpy(),
        }
    )
    return LocalGlobal(
        local=local,
        global_=global_,
        group_mean=g_mean,
        group_std=g_std,
        batch_mean=b_mean,
        batch_std=b_std,
        samples=samples,
        groups=groups,
    )


# ---------------------------------------------------------------------------------------------
# Generic settings -> framework configs
# ---------------------------------------------------------------------------------------------


def framework_config(
    framework: str, generic: Mapping[str, object], base: Mapping[str, object] | None = None
) -> tuple[dict, tuple[str, ...]]:
    """Translate generic settings (beta, gamma, lam, ...) into one dialect's own config keys.

    Args:
        framework: "roll", "verl", "openrlhf" or "trl".
        generic: values keyed by the generic names of ``pipeline.ALIASES[framework]``.
        base: the dialect's config to start from (its own keys); not modified.

    Returns:
        (config in the dialect's keys, generic names the dialect has no key for).
    """
    from roll_viz.core.pipeline import ALIASES

    aliases = ALIASES[framework]
    config = dict(base or {})
    ignored: list[str] = []
    for name, value in generic.items():
        key = aliases.get(name)
        if key is None:
            ignored.append(name)
        else:
            config[key] = value
    return config, tuple(ignored)


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
        valid tokens whose sign differs from ``reference``), ``agreement`` (Pearson r with
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
        out["sign_flips"] = float((_sign(a) != _sign(reference[valid])).double().mean())
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


@_one_thread
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
        from roll_viz.core.pipeline import run as run_fn
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
ESTIMATOR_EQUIVALENTS: dict[str, dict[str, dict | None]] = {
    "grpo": {
        "roll": {"adv_estimator": "grpo"},
        "verl": {"adv_estimator": "grpo"},
        "openrlhf": {"advantage_estimator": "group_norm"},
        "trl": {"scale_rewards": "group"},
    },
    "dr_grpo (no std)": {
        "roll": {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": None},
        "verl": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False},
        "openrlhf": {"advantage_estimator": "dr_grpo"},
        "trl": {"scale_rewards": "none"},
    },
    "liteppo (group mean, batch std)": {
        "roll": {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": "batch"},
        "verl": None,
        "openrlhf": None,
        "trl": {"scale_rewards": "batch"},
    },
    "rloo": {
        "roll": None,
        "verl": {"adv_estimator": "rloo"},
        "openrlhf": {"advantage_estimator": "rloo"},
        "trl": None,
    },
    "reinforce++": {
        "roll": {"adv_estimator": "reinforce", "norm_mean_type": "batch", "norm_std_type": "batch"},
        "verl": {"adv_estimator": "reinforce_plus_plus"},
        "openrlhf": {"advantage_estimator": "reinforce"},
        "trl": None,
    },
    "reinforce++ baseline": {
        "roll": {
            "adv_estimator": "reinforce",
            "norm_mean_type": "group",
            "norm_std_type": None,
            "whiten_advantages": True,
        },
        "verl": {"adv_estimator": "reinforce_plus_plus_baseline"},
        "openrlhf": {"advantage_estimator": "reinforce_baseline"},
        "trl": None,
    },
    "gae": {
        "roll": {"adv_estimator": "gae"},
        "verl": {"adv_estimator": "gae"},
        "openrlhf": {"advantage_estimator": "gae"},
        "trl": None,
    },
}


def generic_estimator(framework: str, config: Mapping[str, object]) -> str:
    """The generic estimator (key of ``ESTIMATOR_EQUIVALENTS``) a dialect config amounts to.

    Args:
        framework: the dialect.
        config: its config (its own keys).

    Returns:
        The first generic name whose settings all match ``config``; "grpo" if none does.
    """
    for name, per_fw in ESTIMATOR_EQUIVALENTS.items():
        settings = per_fw.get(framework)
        if settings and all(config.get(k) == v for k, v in settings.items()):
            return name
    return "grpo"


@dataclass(frozen=True)
class FrameworkComparison:
    """One batch through several dialects with matching generic settings.

    Attributes:
        traces: dialect -> its Trace (dialects that cannot run this setting are missing).
        samples: per-sample table: prompt, sample, score, and ``reward <fw>`` / ``advantage <fw>``
            (advantage = mean over the sample's valid tokens) for each dialect that ran.
        summary: one row per dialect: estimator used, max |difference| of rewards and of token
            advantages against the reference dialect, and the settings it had no key for.
        note_diffs: dialect -> the conventions in its ``Trace.notes`` that the reference does
            not share (those are what can change the numbers).
        reference_only: dialect -> the reference's conventions that this dialect does not share.
        skipped: dialect -> why it did not run (no equivalent estimator, or the pipeline's error).
        reference: the dialect the differences are measured against.
    """

    traces: dict[str, Trace]
    samples: pd.DataFrame
    summary: pd.DataFrame
    note_diffs: dict[str, tuple[str, ...]]
    reference_only: dict[str, tuple[str, ...]]
    skipped: dict[str, str]
    reference: str


#: Canonical KL estimator names (k1, abs, k2, k3) -> each dialect's own name (None: it has none).
KL_NAMES: dict[str, dict[str, str | None]] = {
    "roll": {"k1": "kl", "abs": "abs", "k2": "mse", "k3": "k3"},
    "verl": {"k1": "kl", "abs": "abs", "k2": "mse", "k3": "low_var_kl"},
    "openrlhf": {"k1": "k1", "abs": None, "k2": "k2", "k3": "k3"},
    "trl": {"k1": None, "abs": None, "k2": None, "k3": None},
}


def canonical_kl(framework: str, name: object) -> str | None:
    """A dialect's KL estimator name -> k1/abs/k2/k3 (None when unknown or not given).

    Args:
        framework: the dialect.
        name: its estimator name (e.g. roll "mse", verl "low_var_kl").

    Returns:
        The canonical name or None.
    """
    if name is None:
        return None
    if name in ("k1", "abs", "k2", "k3"):
        return str(name)
    for canonical, own in KL_NAMES.get(framework, {}).items():
        if own == name:
            return canonical
    return {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}.get(str(name))


def canonical_generic(framework: str, generic: Mapping[str, object]) -> dict:
    """Sidebar values (generic names, the sidebar dialect's own values) -> canonical settings.

    Args:
        framework: the sidebar's dialect (whose names ``generic`` uses for the KL estimator).
        generic: ``AppState.generic`` as a dict (estimator, beta, kl_estimator, kl_in_reward,
            gamma, lam, clip (0 = off), whiten).

    Returns:
        Dict with beta, gamma, lam (floats), kl_estimator (k1/abs/k2/k3 or absent),
        kl_in_reward, whiten (bools) and clip (float or None); the estimator is dropped.
    """
    out: dict[str, object] = {}
    for key in ("beta", "gamma", "lam"):
        if generic.get(key) is not None:
            out[key] = float(generic[key])
    for key in ("kl_in_reward", "whiten"):
        if key in generic and generic[key] is not None:
            out[key] = bool(generic[key])
    kl = canonical_kl(framework, generic.get("kl_estimator"))
    if kl is not None:
        out["kl_estimator"] = kl
    clip = generic.get("clip")
    out["clip"] = float(clip) if clip else None
    return out


def dialect_settings(framework: str, canonical: Mapping[str, object]) -> tuple[dict, tuple]:
    """Canonical settings -> one dialect's config keys, matching the meaning where names differ.

    OpenRLHF has no "KL in reward" switch (the KL is in the reward unless ``use_loss``), so
    ``kl_in_reward`` maps to ``use_loss = not kl_in_reward``; TRL's GRPO keeps the KL in the
    loss whatever is asked. A clip of c becomes OpenRLHF's range (-c, c).

    Args:
        framework: the dialect.
        canonical: output of ``canonical_generic``.

    Returns:
        (config in the dialect's keys, canonical names the dialect has no key for).
    """
    from roll_viz.core.pipeline import ALIASES

    aliases = ALIASES[framework]
    config: dict[str, object] = {}
    ignored: list[str] = []
    for name, value in canonical.items():
        key = aliases.get(name)
        if name == "kl_in_reward" and framework == "openrlhf":
            config["use_loss"] = not value
            continue
        if name == "kl_estimator":
            own = KL_NAMES[framework].get(str(value))
            if own is None or key is None:
                ignored.append(f"kl_estimator={value}")
            else:
                config[key] = own
            continue
        if key is None:
            if value not in (None, False, 1.0) or name in ("beta",):
                ignored.append(name)
            continue
        if name == "clip" and value is not None and framework == "openrlhf":
            value = (-float(value), float(value))
        config[key] = value
    return config, tuple(ignored)


def _mean_over_tokens(x: Tensor, mask: Tensor) -> Tensor:
    from roll_viz.core.ops import masked_mean

    return masked_mean(x, mask, dim=-1)


@_one_thread
def compare_frameworks(
    batch: Batch,
    generic: Mapping[str, object],
    estimator: str = "grpo",
    frameworks: Sequence[str] | None = None,
    reference: str | None = None,
    prompts: Sequence[str] | None = None,
) -> FrameworkComparison:
    """Run the same batch through each dialect with the same generic settings.

    Args:
        batch: the batch (values filled in when the estimator is GAE).
        generic: canonical settings (``canonical_generic``): gamma, lam, beta, kl_estimator,
            kl_in_reward, clip, whiten; each dialect gets the ones it has a key for (translated
            by ``dialect_settings``), everything else stays at the dialect's shipped default.
        estimator: a key of ``ESTIMATOR_EQUIVALENTS``.
        frameworks: dialects to run (default: all of ``pipeline.FRAMEWORKS``).
        reference: dialect the differences are measured against (default: the first that ran).
        prompts: (P,) prompt display names for the table.

    Returns:
        The comparison (traces, tables, convention differences, skipped dialects).
    """
    from roll_viz.core.pipeline import FRAMEWORKS, run

    if estimator not in ESTIMATOR_EQUIVALENTS:
        raise ValueError(f"estimator must be one of {tuple(ESTIMATOR_EQUIVALENTS)}")
    frameworks = tuple(frameworks or FRAMEWORKS)
    traces: dict[str, Trace] = {}
    skipped: dict[str, str] = {}
    ignored: dict[str, tuple[str, ...]] = {}
    used: dict[str, str] = {}
    for fw in frameworks:
        settings = ESTIMATOR_EQUIVALENTS[estimator].get(fw)
        if settings is None:
            skipped[fw] = f"{fw} has no {estimator} estimator"
            continue
        cfg, ign = dialect_settings(fw, generic)
        cfg.update(settings)
        try:
            traces[fw] = run(batch, fw, cfg)
        except ValueError as err:
            skipped[fw] = f"{fw} cannot run this setting: {err}"
            continue
        ignored[fw] = ign
        used[fw] = ", ".join(f"{k}={v}" for k, v in settings.items())
    ran = tuple(traces)
    ref = reference if reference in traces else (ran[0] if ran else None)

    ids = batch.group_ids.to(torch.long)
    names = (
        list(prompts) if prompts is not None else [f"prompt {p}" for p in range(int(ids.max()) + 1)]
    )
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids)
    starts = torch.cumsum(counts, 0) - counts
    within = torch.empty_like(ids)
    within[order] = torch.arange(len(ids)) - starts[ids[order]]
    samples = pd.DataFrame(
        {
            "prompt": [names[g] for g in ids.tolist()],
            "sample": within.tolist(),
            "score": batch.scores.to(torch.float64).numpy(),
        }
    )
    mask = batch.response_mask
    for fw in ran:
        samples[f"reward {fw}"] = traces[fw].rewards.to(torch.float64).numpy()
    for fw in ran:
        adv = _mean_over_tokens(traces[fw].advantages.to(torch.float64), mask)
        samples[f"advantage {fw}"] = adv.numpy()

    rows = []
    note_diffs: dict[str, tuple[str, ...]] = {}
    reference_only: dict[str, tuple[str, ...]] = {}
    for fw in ran:
        t = traces[fw]
        if ref is None:
            d_rew = d_adv = math.nan
        else:
            r = traces[ref]
            d_rew = float((t.rewards.double() - r.rewards.double()).abs().max())
            valid = mask > 0
            d_adv = float((t.advantages.double() - r.advantages.double())[valid].abs().max())
            ref_notes, own = set(r.notes), set(t.notes)
            note_diffs[fw] = tuple(n for n in t.notes if n not in ref_notes)
            reference_only[fw] = tuple(n for n in r.notes if n not in own)
        rows.append(
            {
                "dialect": fw,
                "estimator": used[fw],
                "max |diff| reward": d_rew,
                "max |diff| advantage": d_adv,
                "settings without a key": ", ".join(ignored[fw]),
            }
        )
    summary = pd.DataFrame(
        rows,
        columns=[
            "dialect",
            "estimator",
            "max |diff| reward",
            "max |diff| advantage",
            "settings without a key",
        ],
    )
    return FrameworkComparison(
        traces=traces,
        samples=samples,
        summary=summary,
        note_diffs=note_diffs,
        reference_only=reference_only,
        skipped=skipped,
        reference=ref or "",
    )


# ---------------------------------------------------------------------------------------------
# Self-test checks (the Self-test page and the unit tests run these same functions)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one named self-test check.

    Attributes:
        name: short title shown on the page.
        passed: whether every comparison was within tolerance.
        detail: the numbers behind the verdict (expected, got, max error, counts, ...).
        description: what exactly is compared, in plain language.
        summary: the one number that decides it, for a one-line display.
    """

    name: str
    passed: bool
    detail: dict = field(default_factory=dict)
    description: str = ""
    summary: str = ""


#: Tolerance for hand values printed to 9 decimals in docs/algorithms.md.
HAND_TOL = 2e-8
#: Response lengths of the T4/T5 whitening example.
WHITEN_LENGTHS = (3, 2, 4)
#: Second group of the T14 two-group example.
SECOND_GROUP = (1.0, 2.0, 3.0)

#: (name, dialect, config in the dialect's keys, case, expected per-sample advantages).
#: case "one": the seed's group on one token each; "whiten": lengths 3/2/4; "two": T14.
SEED_CASES: tuple[tuple[str, str, dict, str, tuple[float, ...]], ...] = (
    (
        "roll grpo (T1)",
        "roll",
        {"adv_estimator": "grpo"},
        "one",
        (0.201965964, -1.085567055, 0.883601091),
    ),
    (
        "roll grpo + whiten_advantages, lengths 3/2/4 (T5)",
        "roll",
        {"adv_estimator": "grpo", "whiten_advantages": True},
        "whiten",
        (-0.020933229, -1.622325266, 0.826862555),
    ),
    (
        "roll LitePPO: group mean, batch std, two groups (T14)",
        "roll",
        {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": "batch"},
        "two",
        (0.078098764, -0.419780858, 0.341682094, -0.292870366, 0.0, 0.292870366),
    ),
    (
        "verl grpo (T1)",
        "verl",
        {"adv_estimator": "grpo"},
        "one",
        (0.201965964, -1.085567055, 0.883601091),
    ),
    ("verl rloo (T2)", "verl", {"adv_estimator": "rloo"}, "one", (0.40, -2.15, 1.75)),
    (
        "verl reinforce_plus_plus_baseline, lengths 3/2/4 (T4)",
        "verl",
        {"adv_estimator": "reinforce_plus_plus_baseline"},
        "whiten",
        (-0.020933229, -1.622325271, 0.826862558),
    ),
    (
        "openrlhf group_norm, eps 1e-9 (T1)",
        "openrlhf",
        {"advantage_estimator": "group_norm"},
        "one",
        (0.201966117, -1.085567877, 0.883601760),
    ),
    ("openrlhf rloo (T2)", "openrlhf", {"advantage_estimator": "rloo"}, "one", (0.40, -2.15, 1.75)),
    (
        "openrlhf reinforce_baseline, biased whitening, lengths 3/2/4 (T4)",
        "openrlhf",
        {"advantage_estimator": "reinforce_baseline"},
        "whiten",
        (-0.022203043, -1.720735809, 0.877020186),
    ),
    (
        "trl scale_rewards=group, eps 1e-4 (T1)",
        "trl",
        {"scale_rewards": "group"},
        "one",
        (0.201950822, -1.085485666, 0.883534844),
    ),
    (
        "trl scale_rewards=batch, two groups (T14)",
        "trl",
        {"scale_rewards": "batch"},
        "two",
        (0.078096500, -0.419768687, 0.341672187, -0.292861875, 0.0, 0.292861875),
    ),
)

#: Group normalization of the seed example per dialect (T1): config and expected advantages.
GROUP_NORM_CASES: dict[str, tuple[dict, tuple[float, float, float]]] = {
    "roll": ({"adv_estimator": "grpo"}, (0.201965964, -1.085567055, 0.883601091)),
    "verl": ({"adv_estimator": "grpo"}, (0.201965964, -1.085567055, 0.883601091)),
    "openrlhf": (
        {"advantage_estimator": "group_norm"},
        (0.201966117, -1.085567877, 0.883601760),
    ),
    "trl": ({"scale_rewards": "group"}, (0.201950822, -1.085485666, 0.883534844)),
}

#: KL(p || q) for p = [0.6, 0.3, 0.1], q = [0.4, 0.4, 0.2] (algorithms.md T7).
T7_P = (0.6, 0.3, 0.1)
T7_Q = (0.4, 0.4, 0.2)
T7_KL = 0.087659725


def _no_kl(framework: str, config: Mapping[str, object]) -> dict:
    """The dialect config with gamma 1 and no KL anywhere near the rewards."""
    cfg, _ = framework_config(framework, {"gamma": 1.0, "beta": 0.0, "kl_in_reward": False})
    cfg.update(config)
    return cfg


def _seed_batch(case: str) -> tuple[Batch, Tensor]:
    """The seed example as a Batch; returns (batch, (B,) row of each expected value)."""
    if case == "one":
        scores = torch.tensor(EXAMPLE_REWARDS, dtype=torch.float64)
        mask = torch.ones(3, 1, dtype=torch.float64)
        ids = torch.zeros(3, dtype=torch.long)
    elif case == "whiten":
        scores = torch.tensor(EXAMPLE_REWARDS, dtype=torch.float64)
        width = max(WHITEN_LENGTHS)
        mask = (torch.arange(width)[None, :] < torch.tensor(WHITEN_LENGTHS)[:, None]).double()
        ids = torch.zeros(3, dtype=torch.long)
    elif case == "two":
        scores = torch.tensor(EXAMPLE_REWARDS + SECOND_GROUP, dtype=torch.float64)
        mask = torch.ones(6, 1, dtype=torch.float64)
        ids = torch.tensor([0, 0, 0, 1, 1, 1])
    else:
        raise ValueError(f"unknown seed case {case!r}")
    labels = tuple(range(int(ids.max()) + 1))
    return Batch(scores=scores, response_mask=mask, group_ids=ids, group_labels=labels), mask


def check_seed_case(
    name: str, framework: str, config: Mapping, case: str, expected: Sequence[float]
) -> CheckResult:
    """The seed's 8.2/6.5/9.1 example in one dialect against its hand value (every valid token).

    Args:
        name: display name of the case.
        framework: the dialect.
        config: the dialect's estimator settings (its own keys).
        case: "one" (one group, one token each), "whiten" (lengths 3/2/4) or "two" (T14).
        expected: (B,) hand-computed advantage of each sample.

    Returns:
        The check; ``detail`` holds expected and computed per-sample values and the max error.
    """
    from roll_viz.core.pipeline import run

    batch, mask = _seed_batch(case)
    want = torch.tensor(expected, dtype=torch.float64)
    try:
        adv = run(batch, framework, _no_kl(framework, config)).advantages.double()
    except ValueError as err:
        return CheckResult(f"seed example · {name}", False, {"error": str(err)})
    target = want[:, None] * mask
    err = float((adv - target).abs().max())
    got = [round(float(v), 9) for v in adv[:, 0]]
    return CheckResult(
        name=f"seed example · {name}",
        passed=err <= HAND_TOL,
        summary=f"max error {err:.1e} (tolerance {HAND_TOL:.0e})",
        detail={"expected": list(expected), "got": got, "max abs error": err},
        description=(
            f"rewards {', '.join(map(str, EXAMPLE_REWARDS))} through {framework}'s pipeline; "
            "every valid token must carry the hand value from docs/algorithms.md."
        ),
    )


def check_every_position(response_mask: Tensor, framework: str) -> CheckResult:
    """The seed group placed at every row of the current batch's mask, in one dialect.

    The current (B, T) mask rows are regrouped into groups of three (rows reused cyclically
    to fill the last group); group j gets the rewards rotated by j, so each reward visits every
    slot. Group normalization must put the hand value (T1, the dialect's eps) on every valid
    token of every row and exactly 0 on padding.

    Args:
        response_mask: (B, T) float mask of the current batch.
        framework: the dialect.

    Returns:
        The check; ``detail`` has the rows and valid tokens checked and the max errors.
    """
    from roll_viz.core.pipeline import run

    config, hand = GROUP_NORM_CASES[framework]
    n_rows = response_mask.shape[0]
    n_groups = max(1, math.ceil(n_rows / 3))
    rows = torch.arange(3 * n_groups) % n_rows
    mask = response_mask[rows].double()
    base = torch.tensor(EXAMPLE_REWARDS, dtype=torch.float64)
    hand_t = torch.tensor(hand, dtype=torch.float64)
    slot = (torch.arange(3)[None, :] + torch.arange(n_groups)[:, None]) % 3  # (groups, 3)
    scores = base[slot].reshape(-1)
    expected = hand_t[slot].reshape(-1)
    ids = torch.arange(n_groups).repeat_interleave(3)
    batch = Batch(
        scores=scores,
        response_mask=mask,
        group_ids=ids,
        group_labels=tuple(range(n_groups)),
    )
    name = f"seed example at every position · {framework}"
    try:
        adv = run(batch, framework, _no_kl(framework, config)).advantages.double()
    except ValueError as err:
        return CheckResult(name, False, {"error": str(err)})
    valid = mask > 0
    err = float((adv - expected[:, None])[valid].abs().max()) if bool(valid.any()) else 0.0
    leak = float(adv[~valid].abs().max()) if bool((~valid).any()) else 0.0
    return CheckResult(
        name=name,
        passed=err <= HAND_TOL and leak == 0.0,
        summary=f"{int(valid.sum())} tokens, max error {err:.1e}, padding max {leak:.1e}",
        detail={
            "rows": int(mask.shape[0]),
            "valid tokens checked": int(valid.sum()),
            "max abs error": err,
            "max |advantage| on padding": leak,
        },
        description=(
            "The current batch's response mask, regrouped in threes, each group given 8.2/6.5/"
            "9.1 in rotated order: every valid token must equal the hand value, padding 0."
        ),
    )


def coarse_categoricals(rollout: Rollout) -> tuple[Tensor, Tensor, Tensor]:
    """Policy and reference categoricals over the policy's top-K tokens plus one "rest" bucket.

    The rollout stores top-K log-probs, not full logits; lumping every other token into one
    bucket gives, for each position, an exact categorical that both models assign.

    Args:
        rollout: the sampled rollout.

    Returns:
        (p, q, valid): p and q are (N, K+1) probabilities at the N valid response positions
        (float64, rows sum to 1); valid is the (B, T) bool mask they come from.
    """
    valid = rollout.response_mask > 0
    p_top = rollout.topk_logprobs.double()[valid].exp()  # (N, K)
    q_top = rollout.topk_ref_logprobs.double()[valid].exp()
    p_rest = (1.0 - p_top.sum(-1, keepdim=True)).clamp(min=0.0)
    q_rest = (1.0 - q_top.sum(-1, keepdim=True)).clamp(min=0.0)
    p = torch.cat([p_top, p_rest], -1)
    q = torch.cat([q_top, q_rest], -1)
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True), valid


def categorical_kl_checks(p: Tensor, q: Tensor) -> dict[str, Tensor]:
    """Exact KL(p || q) by enumeration and E_p of the pipeline's k1 and k3 estimators.

    Args:
        p: (N, C) policy probabilities (rows sum to 1).
        q: (N, C) reference probabilities (rows sum to 1).

    Returns:
        ``exact``, ``e_k1``, ``e_k3``, each (N,).
    """
    from roll_viz.core.pipeline.kl import token_kl

    support = p > 0
    logp = torch.where(support, p.clamp(min=1e-300).log(), torch.zeros_like(p))
    logq = torch.where(support, q.clamp(min=1e-300).log(), torch.zeros_like(q))
    exact = (p * (logp - logq)).where(support, torch.zeros_like(p)).sum(-1)
    mask = support.double()
    e_k1 = (p * token_kl(logp, logq, mask, "k1")).sum(-1)
    e_k3 = (p * token_kl(logp, logq, mask, "k3")).sum(-1)
    return {"exact": exact, "e_k1": e_k1, "e_k3": e_k3}


def check_kl_estimators(rollout: Rollout | None) -> CheckResult:
    """E_p[k1] = E_p[k3] = exact KL, on T7's categorical and on the rollout's positions.

    Args:
        rollout: the current rollout, or None (then only the T7 categorical is checked).

    Returns:
        The check; ``detail`` has the T7 numbers, positions checked, the max errors and the
        largest amount by which the coarse KL exceeds the stored full-vocabulary ``exact_kl``.
    """
    t7 = categorical_kl_checks(
        torch.tensor([T7_P], dtype=torch.float64), torch.tensor([T7_Q], dtype=torch.float64)
    )
    detail: dict[str, object] = {
        "T7 exact KL (hand 0.087659725)": round(float(t7["exact"][0]), 9),
        "T7 E_p[k1]": round(float(t7["e_k1"][0]), 9),
        "T7 E_p[k3]": round(float(t7["e_k3"][0]), 9),
    }
    t7_err = max(abs(float(t7[k][0]) - T7_KL) for k in ("exact", "e_k1", "e_k3"))
    passed = t7_err <= 1e-8
    if rollout is not None and bool((rollout.response_mask > 0).any()):
        p, q, valid = coarse_categoricals(rollout)
        res = categorical_kl_checks(p, q)
        est_err = float(
            torch.maximum(
                (res["e_k1"] - res["exact"]).abs(), (res["e_k3"] - res["exact"]).abs()
            ).max()
        )
        stored = rollout.exact_kl.double()[valid]
        excess = float((res["exact"] - stored).max())
        tol = 1e-4 + 1e-3 * float(stored.abs().max())
        detail.update(
            {
                "positions checked": int(valid.sum()),
                "max |E_p[k] - enumerated KL|": est_err,
                "mean enumerated top-K+rest KL": float(res["exact"].mean()),
                "mean stored exact_kl (full vocabulary)": float(stored.mean()),
                "max (top-K+rest KL - exact_kl), must be <= tol": excess,
                "tol": tol,
            }
        )
        passed = passed and est_err <= 1e-9 and excess <= tol
        summary = (
            f"T7 error {t7_err:.1e}; {int(valid.sum())} positions, estimator error "
            f"{est_err:.1e}, top-K KL minus exact_kl at most {excess:.1e}"
        )
    else:
        summary = f"T7 error {t7_err:.1e}"
    return CheckResult(
        name="E_p[k1] = E_p[k3] = exact KL",
        passed=passed,
        summary=summary,
        detail=detail,
        description=(
            "The rollout keeps each position's top-K log-probs, not the full logits. For every "
            "response position both models' distributions are reduced to the policy's top-K "
            "tokens plus one 'all other tokens' bucket; on that categorical the pipeline's k1 "
            "and k3 estimators, averaged under the policy, must equal the enumerated KL "
            "exactly. Lumping tokens can only lose information, so that KL may not exceed the "
            "full-vocabulary exact_kl the sampler stored. Also T7: p=[0.6,0.3,0.1], "
            "q=[0.4,0.4,0.2] gives 0.087659725."
        ),
    )


def check_identical_policy(rollout: Rollout | None, batch: Batch) -> CheckResult:
    """KL = 0 exactly for an identical policy.

    With ``policy_mode == "identical"`` the stored exact_kl and every token KL estimator on the
    rollout must be exactly 0. For a steered rollout the reference log-probs are replaced by the
    policy's own (the identical-policy case by construction) and the same is required.

    Args:
        rollout: the current rollout, or None.
        batch: the current batch (its log-probs are used).

    Returns:
        The check; ``detail`` holds the largest |KL| per estimator.
    """
    from roll_viz.core.pipeline.kl import KL_ESTIMATORS, token_kl
    from roll_viz.core.records import meta_dict

    mode = meta_dict(rollout).get("policy_mode", "") if rollout is not None else ""
    source = "sampler" if mode == "identical" else "ref = policy"
    if batch.logprobs is None:
        return CheckResult("KL = 0 for an identical policy", True, {"skipped": "no log-probs"})
    mask = batch.response_mask
    ref = batch.ref_logprobs if mode == "identical" else batch.logprobs
    detail: dict[str, object] = {"policy mode": mode or "unknown"}
    worst = 0.0
    for name in KL_ESTIMATORS:
        value = float(token_kl(batch.logprobs, ref, mask, name).abs().max())
        detail[f"max |{name}|"] = value
        worst = max(worst, value)
    if mode == "identical" and rollout is not None:
        value = float(rollout.exact_kl.abs().max())
        detail["max |exact_kl|"] = value
        worst = max(worst, value)
        how = "The rollout was sampled with policy = reference, so its stored values are used."
    else:
        how = (
            "The current rollout is steered, so the reference log-probs are replaced by the "
            "policy's own (an identical policy by construction); choose policy mode "
            "'identical' in the sidebar to check the sampler's own numbers."
        )
    return CheckResult(
        name="KL = 0 for an identical policy",
        passed=worst == 0.0,
        summary=f"largest |KL| {worst:.1e} ({source})",
        detail=detail,
        description="Every token KL estimator (k1, abs, k2, k3) must be exactly 0. " + how,
    )


#: Configs the mask check runs per dialect (its own keys); KL goes into the reward where possible.
MASK_CASES: dict[str, tuple[dict, ...]] = {
    "roll": (
        {"adv_estimator": "gae"},
        {"adv_estimator": "grpo"},
        {"adv_estimator": "reinforce", "whiten_advantages": True},
    ),
    "verl": (
        {"adv_estimator": "gae"},
        {"adv_estimator": "grpo"},
        {"adv_estimator": "reinforce_plus_plus"},
        {"adv_estimator": "rloo"},
    ),
    "openrlhf": (
        {"advantage_estimator": "gae"},
        {"advantage_estimator": "group_norm"},
        {"advantage_estimator": "reinforce"},
    ),
    "trl": ({"scale_rewards": "group"}, {"scale_rewards": "batch"}),
}


def with_padding(batch: Batch) -> Batch:
    """A copy of the batch in which every other row loses the second half of its tokens.

    Used by the mask check when the current batch has no padding at all (every response hit
    the length cap), so that padding is still exercised on the real numbers.

    Args:
        batch: the batch.

    Returns:
        The same batch with a new (B, T) response mask (rows 1, 3, 5, ... half as long).
    """
    mask = batch.response_mask.double()
    lengths = mask.sum(-1)
    odd = (torch.arange(mask.shape[0]) % 2 == 1).double()
    keep = torch.where(odd > 0, torch.ceil(lengths / 2), lengths)
    new_mask = mask * (torch.arange(mask.shape[1])[None, :] < keep[:, None]).double()
    values = None if batch.values is None else batch.values.double() * new_mask
    return replace(batch, response_mask=new_mask, values=values)


def _mask_case(batch: Batch, framework: str, cfg: dict, poison_values: bool) -> tuple[float, float]:
    """(max |output| on padding, max change of valid advantages) when padding is poisoned."""
    from roll_viz.core.pipeline import run

    mask = batch.response_mask.double()
    pad = mask == 0
    values = batch.values if batch.values is not None else torch.zeros_like(mask)
    clean = replace(batch, values=values)
    noise = torch.linspace(3.0, 97.0, mask.numel(), dtype=torch.float64).reshape(mask.shape)

    def dirty(x: Tensor | None, sign: float) -> Tensor | None:
        return None if x is None else torch.where(pad, sign * noise, x.double())

    poisoned = replace(
        clean,
        logprobs=dirty(batch.logprobs, -1.0),
        ref_logprobs=dirty(batch.ref_logprobs, -1.0),
        values=dirty(values, 1.0) if poison_values else values,
    )
    a = run(clean, framework, cfg)
    b = run(poisoned, framework, cfg)
    on_pad = max(
        float(t[pad].abs().max()) if bool(pad.any()) else 0.0
        for tr in (a, b)
        for t in (tr.kl, tr.token_rewards, tr.advantages, tr.returns)
    )
    valid = ~pad
    change = float((a.advantages - b.advantages)[valid].abs().max()) if bool(valid.any()) else 0.0
    return on_pad, change


def check_masks(batch: Batch) -> CheckResult:
    """Masks never leak: padding is exactly 0 and garbage on padding changes no valid number.

    Each dialect/estimator in ``MASK_CASES`` runs twice, once as is and once with the padded
    positions of log-probs, reference log-probs and critic values overwritten with large
    values. Every (B, T) output must be exactly 0 on padding in both runs, and the advantages
    on valid tokens must be identical. The one documented exception is ROLL's GAE, which feeds
    the critic's unmasked values to the recursion (algorithms.md T8): there the padded values
    are left alone, the leak is reported, and the batch's own values must be 0 on padding so
    the app's numbers are unaffected. A batch without any padding is also checked with half of
    every other row masked (``with_padding``).

    Args:
        batch: the current batch (a zero critic is used if it has no values).

    Returns:
        The check; ``detail`` lists the worst padding value and valid-token change per case.
    """
    variants = [("", batch)]
    if not bool((batch.response_mask == 0).any()):
        variants.append((" (extra padding)", with_padding(batch)))
    has_kl = batch.logprobs is not None and batch.ref_logprobs is not None
    detail: dict[str, object] = {}
    passed = True
    for suffix, data in variants:
        pad = data.response_mask == 0
        for fw, cases in MASK_CASES.items():
            for extra in cases:
                generic = {"beta": 0.1, "kl_in_reward": True} if has_kl else {"beta": 0.0}
                cfg, _ = framework_config(fw, generic)
                cfg.update(extra)
                label = f"{fw} {next(iter(extra.values()))}{suffix}"
                roll_gae = fw == "roll" and extra.get("adv_estimator") == "gae"
                try:
                    on_pad, change = _mask_case(data, fw, cfg, poison_values=not roll_gae)
                    ok = on_pad == 0.0 and change == 0.0
                    text = f"padding max {on_pad:.3g}, valid-token change {change:.3g}"
                    if roll_gae and data.values is not None and bool(pad.any()):
                        own = float(data.values.double()[pad].abs().max())
                        _, leak = _mask_case(data, fw, cfg, poison_values=True)
                        ok = ok and own == 0.0
                        text += (
                            f"; padded critic values in this batch max {own:.3g}; with garbage "
                            f"values on padding ROLL's GAE shifts valid tokens by {leak:.3g} "
                            "(ROLL's documented unmasked-values behaviour, T8)"
                        )
                except ValueError as err:
                    detail[label] = f"not run: {err}"
                    continue
                passed = passed and ok
                detail[label] = text
    n_cases = sum(1 for v in detail.values() if not str(v).startswith("not run"))
    return CheckResult(
        name="masks never leak",
        passed=passed,
        summary=f"{n_cases} dialect/estimator runs, padding and valid tokens checked",
        detail=detail,
        description=(
            "Every dialect and estimator, run on the current batch with KL in the reward: KL, "
            "token rewards, advantages and returns are exactly 0 on padding, and overwriting "
            "the padded log-probs, reference log-probs and critic values with large numbers "
            "changes no advantage on a valid token. Exception, shown with its size: ROLL's GAE "
            "reads the critic's value at the first padded slot (as ROLL does), so there the "
            "check requires the app's critic values to be 0 on padding instead. A batch without "
            "padding is also checked with half of every other row masked."
        ),
    )


@_one_thread
def run_self_tests(rollout: Rollout | None, batch: Batch) -> list[CheckResult]:
    """Every self-test check on the current data (the Self-test page and the unit tests).

    Args:
        rollout: the current rollout (None for a batch without one: KL checks shrink).
        batch: the current batch.

    Returns:
        The checks in display order.
    """
    from roll_viz.core.pipeline import FRAMEWORKS

    checks = [check_seed_case(*case) for case in SEED_CASES]
    checks += [check_every_position(batch.response_mask, fw) for fw in FRAMEWORKS]
    checks.append(check_kl_estimators(rollout))
    checks.append(check_identical_policy(rollout, batch))
    checks.append(check_masks(batch))
    return checks


def checks_table(checks: Sequence[CheckResult]) -> pd.DataFrame:
    """The checks as a table for display and CSV download.

    Args:
        checks: results of ``run_self_tests``.

    Returns:
        DataFrame with columns check, result ("pass"/"FAIL"), numbers (the detail as text).
    """
    return pd.DataFrame(
        {
            "check": [c.name for c in checks],
            "result": ["pass" if c.passed else "FAIL" for c in checks],
            "numbers": ["; ".join(f"{k}: {v}" for k, v in c.detail.items()) for c in checks],
        }
    )
