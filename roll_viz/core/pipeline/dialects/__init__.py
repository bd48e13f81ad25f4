"""The four framework dialects: one module per framework, a literal dict registry.

Everything roll-viz knows about a framework lives in its module (``roll``, ``verl``,
``openrlhf``, ``trl``): its order of operations (``pipeline``), config keys with defaults,
choices and help, the policy-update keys, KL estimator names, the beta / controller / clip keys,
the named recipes, the translation of the sidebar's generic knobs (``to_native``), the loss spec
and its metric names, and the facts other layers branch on (``HAS_REWARD_NORM``,
``KL_IN_LOSS_ONLY``, ``ADAPTIVE_BETA``, ``GAE_PADDING``, ...). ``shared`` holds what the four
share, ``config`` validates a config against a dialect's tables.

Every module exposes the same names (``REQUIRED`` lists them; a test checks each module)::

    from roll_viz.core.pipeline import dialects
    d = dialects.get("verl")
    d.BETA_KEY, d.KL_NAMES["k3"], d.to_native({"beta": 0.1}), d.RECIPES["grpo"]

The tables below (``DEFAULTS``, ``ALIASES``, ``KL_NAMES``, ...) are built from the modules;
``roll_viz.core.pipeline`` re-exports them unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from torch import Tensor

from roll_viz.core.pipeline.dialects import (
    openrlhf,
    roll,
    shared,
    trl,
    verl,
)
from roll_viz.core.pipeline.dialects.config import resolve
from roll_viz.core.pipeline.dialects.record import FIELDS, Dialect, EraSetting
from roll_viz.core.pipeline.losses import LossInputs, LossResult, loss_from_spec

#: name -> dialect record (``Dialect``, each framework file's ``DIALECT``), in the order the
#: pages list them.
DIALECTS: dict[str, Dialect] = {
    "roll": roll.DIALECT,
    "verl": verl.DIALECT,
    "openrlhf": openrlhf.DIALECT,
    "trl": trl.DIALECT,
}

FRAMEWORKS: tuple[str, ...] = tuple(DIALECTS)
#: The app's own default flow (the pages open on it).
DEFAULT_FRAMEWORK = "roll"

#: The names every dialect record has (the ``Dialect`` fields, in order).
REQUIRED: tuple[str, ...] = FIELDS


def get(framework: str) -> Dialect:
    """The dialect record of ``framework``.

    Raises:
        ValueError: unknown framework (the message lists the known ones).
    """
    if framework not in DIALECTS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    return DIALECTS[framework]


# ------------------------------------------------------------- tables built from the modules

DEFAULTS: dict[str, dict[str, Any]] = {}
CHOICES: dict[str, dict[str, tuple]] = {}
HELP: dict[str, dict[str, str]] = {}
LOSS_DEFAULTS: dict[str, dict[str, Any]] = {}
LOSS_CHOICES: dict[str, dict[str, tuple]] = {}
LOSS_HELP: dict[str, dict[str, str]] = {}
LOSS_KEYS: dict[str, tuple[str, ...]] = {}
ESTIMATOR_KEY: dict[str, str] = {}
ALIASES: dict[str, dict[str, str | None]] = {}
#: Canonical KL estimator (k1/abs/k2/k3) -> each dialect's own name (None: it has none).
KL_NAMES: dict[str, dict[str, str | None]] = {}
#: Any dialect's KL estimator name -> canonical (the union of every ``KL_CANON``).
KL_CANON: dict[str, str] = {}
#: Generic estimator recipe -> dialect -> its settings (None: the dialect cannot run it).
RECIPES: dict[str, dict[str, dict | None]] = {}
#: Display name of each dialect.
LABELS: dict[str, str] = {}

#: table above -> the record field it collects per dialect
_PER_DIALECT: tuple[tuple[dict, str], ...] = (
    (DEFAULTS, "DEFAULTS"),
    (CHOICES, "CHOICES"),
    (HELP, "HELP"),
    (LOSS_DEFAULTS, "LOSS_DEFAULTS"),
    (LOSS_CHOICES, "LOSS_CHOICES"),
    (LOSS_HELP, "LOSS_HELP"),
    (LOSS_KEYS, "LOSS_KEYS"),
    (ESTIMATOR_KEY, "ESTIMATOR_KEY"),
    (ALIASES, "ALIASES"),
    (KL_NAMES, "KL_NAMES"),
    (LABELS, "LABEL"),
)


def _index() -> None:
    """Fill the tables above from ``DIALECTS``, in place (other modules hold them by name)."""
    for table, field in _PER_DIALECT:
        table.clear()
        table.update({name: getattr(d, field) for name, d in DIALECTS.items()})
    KL_CANON.clear()
    KL_CANON.update({k: v for d in DIALECTS.values() for k, v in d.KL_CANON.items()})
    RECIPES.clear()
    for recipe in shared.RECIPE_NAMES:
        RECIPES[recipe] = {name: d.RECIPES.get(recipe) for name, d in DIALECTS.items()}


_index()


def register(dialect: Dialect) -> None:
    """Add a framework's record to the registry (and to the tables above), after the others.

    A new framework file is listed in ``DIALECTS`` itself; this is for a record written
    elsewhere (``tests/core/test_fifth_dialect.py`` runs a toy fifth dialect this way).
    ``FRAMEWORKS`` stays the shipped four; the registry and the tables are what the pipeline,
    the losses, the eras and the self-test ask.

    Raises:
        ValueError: a framework of that name is already registered.
    """
    if dialect.NAME in DIALECTS:
        raise ValueError(f"framework {dialect.NAME!r} is already registered")
    DIALECTS[dialect.NAME] = dialect
    _index()


def unregister(name: str) -> None:
    """Remove a framework added with ``register`` (a shipped one cannot be removed)."""
    if name in FRAMEWORKS:
        raise ValueError(f"{name!r} is a shipped framework")
    DIALECTS.pop(name, None)
    _index()


def resolve_config(framework: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The framework's defaults overlaid with ``config``, every value validated.

    Args:
        framework: one of FRAMEWORKS.
        config: the framework's own keys (and viz_ keys); missing keys take the shipped defaults.

    Returns:
        A new dict with every key of ``DEFAULTS[framework]`` and ``LOSS_DEFAULTS[framework]``.

    Raises:
        ValueError: unknown framework, unknown key, or a bad value (the message names the key).
    """
    return resolve(get(framework), config)


def canonical_kl(framework: str, name: object) -> str | None:
    """A dialect's KL estimator name -> k1/abs/k2/k3 (None when unknown or not given).

    Args:
        framework: the dialect (unknown names fall back to any dialect's reading).
        name: its estimator name (e.g. roll "mse", verl "low_var_kl").
    """
    if name is None:
        return None
    if name in shared.CANONICAL_KL:
        return str(name)
    own = DIALECTS[framework].KL_CANON if framework in DIALECTS else {}
    return own.get(str(name), KL_CANON.get(str(name)))


def loss_agg_modes(framework: str, config: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Which canonical aggregation each loss term of a framework uses.

    Args:
        framework: one of FRAMEWORKS.
        config: a resolved dialect config (``resolve_config``).

    Returns:
        "policy", "kl", "entropy", "value" -> (AGG_MODES name, scale_factor); "value" is None
        for TRL (GRPO has no critic).
    """
    return get(framework).loss_agg_modes(config)


def policy_loss(
    framework: str,
    config: dict[str, Any] | None = None,
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    values: Tensor | None = None,
    old_values: Tensor | None = None,
    returns: Tensor | None = None,
    scores: Tensor | None = None,
    rollout_logprobs: Tensor | None = None,
    difficulty: Tensor | None = None,
    sample_mask: Tensor | None = None,
    resample: Tensor | None = None,
) -> LossResult:
    """One framework's policy-update loss, per-token pieces, gradient coefficients and metrics.

    Args:
        framework: a registered dialect; its ``rewrite_loss_inputs`` rewrites the inputs as its
            trainer does before the loss (ROLL's sample mask, verl's PF-PPO rows and rollout
            correction, TRL's truncation mask).
        config: that dialect's keys (reward-stage keys are accepted and ignored here); missing
            keys take the shipped defaults (``LOSS_DEFAULTS``, ``DEFAULTS``).
        logprobs: (B, T) current-policy log-probs of the sampled tokens; may require grad.
        old_logprobs: (B, T) rollout ("old") log-probs (treated as constants).
        advantages: (B, T) or (B,) advantages (constants).
        response_mask: (B, T) 0/1 loss mask.
        ref_logprobs: (B, T) reference log-probs; needed when the KL loss is on.
        entropy: (B, T) policy entropy per position; needed when the entropy coefficient is not 0.
            Kept differentiable if it requires grad.
        values: (B, T) new critic predictions (kept differentiable); with ``returns`` (and
            ``old_values`` when the framework clips) gives ``terms["value"]``.
        old_values: (B, T) critic values at rollout time.
        returns: (B, T) value targets.
        scores: (B,) response scores (needed by ROLL ``pg_variant: topr``).
        rollout_logprobs: (B, T) the sampler's log-probs mu (needed by OpenRLHF
            ``is_correction_level`` token / seq and verl ``loss_mode: bypass_mode``, where it
            replaces ``old_logprobs``).
        difficulty: (B,) sample difficulty in [0, 1] (ROLL ``difficulty_loss_weight``).
        sample_mask: (B,) 0/1 ROLL sample-level keep mask (``roll.sample_level_mask``). With it
            ``response_mask`` is ROLL's ``response_mask`` before the mask: the loss runs on
            ``final_response_mask = response_mask * sample_mask[:, None]`` with the advantages 0
            outside it (``compute_advantage`` ran on that mask), and the metrics ROLL logs over
            the unmasked mask are printed as ROLL logs them, each with a note giving the value
            over the final mask.
        resample: (B,) the rows verl PF-PPO drew (``Trace.resample``): under the legacy trainer
            (``use_v1: false``) the update trains on those rows of every input; under the v1
            trainer on the batch's own rows (the Trace's advantages already are the drawn ones).

    Returns:
        LossResult (see its docstring). Padding may hold anything (even inf) in every input.

    Raises:
        ValueError: bad framework / key / value, a shape mismatch, a non-finite value on a
            response token, or a missing input the config needs (the message starts with the
            argument's name).
    """
    dialect = get(framework)
    cfg = resolve(dialect, config)
    notes: list[str] = []
    spec = dialect.loss_spec(cfg, notes)
    given = LossInputs(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        advantages=advantages,
        response_mask=response_mask,
        ref_logprobs=ref_logprobs,
        entropy=entropy,
        values=values,
        old_values=old_values,
        returns=returns,
        scores=scores,
        rollout_logprobs=rollout_logprobs,
        difficulty=difficulty,
    )
    inputs, trainer_metrics = dialect.rewrite_loss_inputs(cfg, notes, given, sample_mask, resample)
    result = loss_from_spec(
        spec,
        dialect.loss_agg_modes(cfg),
        dialect.loss_metrics,
        framework=framework,
        config=cfg,
        notes=notes,
        inputs=inputs,
    )
    return dataclasses.replace(result, metrics={**result.metrics, **trainer_metrics})
