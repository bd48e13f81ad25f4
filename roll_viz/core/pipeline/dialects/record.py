"""The ``Dialect`` record: everything roll-viz knows about one framework, as one typed value.

Each framework file (``roll.py``, ``verl.py``, ...) defines its tables and functions at module
level, where they read best, and ends with ``DIALECT = Dialect.of(globals())``: each field is
the file's name of the same spelling (upper case: tables and facts; lower case: functions), so a
reader finds every field's definition under its own name in the framework file. The registry
(``dialects.DIALECTS``) holds these records, so every other layer asks the record
(``dialects.get("verl").BETA_KEY``, ``.train_config(...)``, ``.ERAS["grpo_2024"]``).

A record is data, not a class hierarchy: a fifth framework is one more file that builds one more
record (``tests/core/test_fifth_dialect.py`` does it from a test).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

    from roll_viz.core.pipeline.losses import LossInputs, LossSpec, MetricContext
    from roll_viz.core.pipeline.rollout_correction import Correction
    from roll_viz.core.records import Batch, RunningMoments, Trace

Config = Mapping[str, Any]
#: a dialect's correction on one batch: (the correction, its name as shown, per sequence)
CorrectionFound = tuple["Correction", str, bool]


@dataclass(frozen=True)
class EraSetting:
    """One era preset as a dialect says it (``core/pipeline/eras.py`` holds the era's words).

    Attributes:
        config: the dialect's native config for the era (its own keys; reward stage and loss
            together; ``resolve_config`` accepts it).
        notes: what the dialect cannot say of the era's recipe, or says differently.
    """

    config: Config
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SelfTestCases:
    """The self-test page's cases in a dialect's own keys (``analysis/selftest.py`` runs them).

    Attributes:
        seed: (name, config, case, expected per-sample advantages) per hand-checked example
            (docs/reference-values.md); case "one": the seed's group on one token each,
            "whiten": lengths 3/2/4, "two": the two-group example T14.
        group_norm: (config, expected advantages) of the seed group's normalization (T1), checked
            at every position of the current batch.
        masks: configs the mask check runs (KL into the reward where the dialect can).
    """

    seed: tuple[tuple[str, Config, str, tuple[float, ...]], ...]
    group_norm: tuple[Config, tuple[float, float, float]]
    masks: tuple[Config, ...]


@dataclass(frozen=True)
class Dialect:
    """One framework: its config tables, facts and functions (fields as the module names them).

    Tables (each module's docstrings say more): ``DEFAULTS``/``CHOICES``/``HELP`` (reward
    stage), ``LOSS_DEFAULTS``/``LOSS_CHOICES``/``LOSS_HELP``/``LOSS_KEYS`` (policy update),
    ``ALIASES`` (generic knob -> native key), ``KL_CANON``/``KL_NAMES`` (KL estimator names),
    ``CONTROLLER_KEYS`` (beta and its controller's keys: what a training step sets),
    ``RECIPES`` (named recipes), ``ERAS`` (era presets), ``LOSS_OPTIONS`` (the loss options the
    Update and Training pages offer), ``SELFTEST`` (the self-test page's cases), ``RUN_FORMATS``
    (the run formats the framework writes), ``BROWSER_COVERAGE`` (what the browser port computes
    exactly; None: no port, the instant panel takes the server path).
    Functions take and return plain dicts of the dialect's own keys.
    """

    NAME: str
    LABEL: str
    DEFAULTS: dict[str, Any]
    CHOICES: dict[str, tuple]
    HELP: dict[str, str]
    LOSS_DEFAULTS: dict[str, Any]
    LOSS_CHOICES: dict[str, tuple]
    LOSS_HELP: dict[str, str]
    LOSS_KEYS: tuple[str, ...]
    ESTIMATOR_KEY: str
    ALIASES: dict[str, str | None]
    BOOL_VALUES: dict[str, dict[bool, Any]]
    KL_CANON: dict[str, str]
    KL_NAMES: dict[str, str | None]
    KL_ESTIMATOR_KEY: str | None
    BETA_KEY: str
    CONTROLLER_KEYS: tuple[str, ...]
    CLIP_KEYS: tuple[str, ...]
    ADAPTIVE_BETA: bool
    HAS_REWARD_NORM: bool
    KL_IN_LOSS_ONLY: bool
    STD_EPS: float
    RETURN_ESTIMATORS: tuple[str, ...]
    GAE_PADDING: str | None
    ESTIMATOR_INPUTS: dict[str, tuple[str, ...]]
    SINGLETON_NOTE: str
    SINGLETON_BEHAVIOUR: str
    RECIPES: dict[str, dict[str, Any]]
    ERAS: Mapping[str, EraSetting]
    LOSS_OPTIONS: dict[str, dict[str, Any]]
    SELFTEST: SelfTestCases
    RUN_FORMATS: tuple[str, ...]
    BROWSER_COVERAGE: Mapping[str, tuple | None] | None
    estimator_name: Callable[[Config], str]
    kl_estimator: Callable[[Config], str]
    to_native: Callable[[Config], dict[str, Any]]
    from_native: Callable[..., dict[str, Any]]
    from_canonical: Callable[[Mapping[str, object]], tuple[dict, tuple[str, ...]]]
    norm_config: Callable[[str], dict[str, Any] | None]
    kl_placement: Callable[[bool, float], dict[str, Any] | None]
    train_config: Callable[[Config, float, bool, float, float], dict[str, Any]]
    beta_blocked: Callable[[Config], str | None]
    #: (low, high) epsilon of the ratio clip of a resolved config (its CLIP_KEYS read as the
    #: framework reads them)
    clip_range: Callable[[Config], tuple[float, float]]
    unread_inputs: Callable[[Config], tuple[str, ...]]
    pipeline: Callable[[Batch, dict[str, Any], RunningMoments | None], Trace]
    loss_agg_modes: Callable[[Config], dict[str, tuple[str, Any]]]
    loss_spec: Callable[[dict[str, Any], list[str]], LossSpec]
    loss_metrics: Callable[[MetricContext], dict[str, float]]
    #: whether a config's loss reads the sampler's log-probs mu beyond the spec's own
    #: corrections (verl bypass_mode); None: never.
    reads_rollout_logprobs: Callable[[Config], bool] | None
    #: (resolved config, old (B, T), mu (B, T), mask (B, T)) -> (the correction the loss applies to
    #: pi_old / mu at the first update, its name as shown, whether it counts sequences), or None;
    #: the field itself None: the dialect offers no correction.
    mismatch_correction: Callable[[Config, Tensor, Tensor, Tensor], CorrectionFound | None] | None
    #: (resolved config, notes, LossInputs, sample_mask, resample) -> (the inputs as this
    #: framework's trainer rewrites them before its loss, the metrics the rewrite logs): ROLL's
    #: sample-level mask, verl's PF-PPO rows and rollout correction, TRL's truncation mask
    #: (``shared.inputs_as_given`` where it rewrites nothing).
    rewrite_loss_inputs: Callable[..., tuple[LossInputs, dict[str, float]]]

    @classmethod
    def of(cls, namespace: Mapping[str, Any], **given: Any) -> Dialect:
        """The record of a framework file: each field is the file's name of the same spelling.

        Args:
            namespace: the file's ``globals()``.
            given: fields the file sets otherwise (e.g. ``mismatch_correction=None``).

        Raises:
            TypeError: naming the fields the file neither defines nor gives.
        """
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in given and n not in namespace]
        if missing:
            raise TypeError(f"{namespace.get('NAME', '?')}: the dialect lacks {missing}")
        return cls(**{n: given[n] if n in given else namespace[n] for n in names})

    def native_keys(self) -> frozenset[str]:
        """Every config key of this dialect (reward stage, loss, aliases), ``viz_`` keys aside."""
        keys = {*self.DEFAULTS, *self.LOSS_DEFAULTS, *self.LOSS_KEYS, *self.CONTROLLER_KEYS}
        keys |= {k for k in self.ALIASES.values() if k is not None}
        return frozenset(k for k in keys if not k.startswith("viz_"))


#: The field names of a record, in order (``dialects.REQUIRED``).
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Dialect))
