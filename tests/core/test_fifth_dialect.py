"""A fifth framework is one file: a toy dialect written here, registered, and run everywhere.

The toy ("toy", label "Toy RL") is a GRPO trainer whose keys are its own (``baseline``,
``scale``, ``kl_weight``): group mean, optionally divided by the group std (unbiased, eps 1e-6),
the KL only in the loss. Its loss reuses TRL's loss table and functions, as a new framework
built from the same primitives would. Nothing outside this file is touched: ``run``,
``policy_loss``, the era presets and the self-test find it through the registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from core.test_dialect_modules import record_problems
from roll_viz.analysis import selftest
from roll_viz.core import pipeline
from roll_viz.core.ops import apply_mask, group_stats
from roll_viz.core.pipeline import dialects, eras
from roll_viz.core.pipeline.advantages import token_rewards
from roll_viz.core.pipeline.dialects import shared, trl
from roll_viz.core.pipeline.dialects.record import Dialect, EraSetting, SelfTestCases
from roll_viz.core.pipeline.kl import kl_term_mean
from roll_viz.core.pipeline.postprocess import require_group_size
from roll_viz.core.records import Batch, RunningMoments, Trace
from roll_viz.ui.instant.payload import browser_coverage

# ------------------------------------------------------------------ the toy framework's file

NAME = "toy"
STD_EPS = 1e-6
DEFAULTS: dict[str, Any] = {
    "baseline": "group_mean",
    "scale": True,
    "kl_weight": 0.0,
    **shared.VIZ_DEFAULTS,
}
CHOICES: dict[str, tuple] = {
    "baseline": ("group_mean", "none"),  # a bool key ("scale") is checked by its default's type
    **shared.VIZ_CHOICES,
}
HELP: dict[str, str] = {
    "baseline": "baseline subtracted from each reward: the group mean, or none.",
    "scale": "divide by the group std (unbiased) + 1e-6.",
    "kl_weight": "coefficient of the k3 KL term in the loss.",
    **shared.VIZ_HELP,
}
ALIASES: dict[str, str | None] = {knob: None for knob in shared.GENERIC_KNOBS}
ALIASES |= {"estimator": "baseline", "beta": "kl_weight"}
KL_CANON: dict[str, str] = {}


def estimator_name(config: Mapping[str, Any]) -> str:
    """The toy always estimates with a group baseline."""
    return "grpo"


def pipeline_fn(batch: Batch, cfg: dict[str, Any], running: RunningMoments | None) -> Trace:
    """(r - group mean) / (group std + eps), broadcast to every token; KL only in the loss."""
    mask, scores = batch.response_mask, batch.scores
    conv = shared.Conventions(cfg, std_ddof=1, eps=STD_EPS, whiten_ddof=None)
    notes = shared.base_notes(batch) + conv.notes
    require_group_size(batch.group_ids, batch.group_labels, "toy")
    stats = group_stats(scores, batch.group_ids, ddof=conv.std_ddof)
    baseline = stats.mean if cfg["baseline"] == "group_mean" else torch.zeros_like(scores)
    scale = stats.std + conv.eps if cfg["scale"] else torch.ones_like(scores)
    advantages = apply_mask(((scores - baseline) / scale)[:, None].expand_as(mask), mask)
    tokens = token_rewards(scores, mask)
    kl = shared.batch_kl(batch, "k3", clamp=None)
    return shared.make_trace(
        NAME,
        cfg,
        batch,
        masked=(tokens, advantages),
        rewards=scores.clone(),
        baseline=baseline,
        scale=scale,
        clip_frac=0.0,
        kl=kl,
        beta=cfg["kl_weight"],
        next_beta=cfg["kl_weight"],
        kl_in_reward=False,
        kl_loss=kl_term_mean(kl, mask),
        token_rewards=tokens,
        advantages=advantages,
        returns=advantages,
        running=running,
        notes=notes,
    )


def train_config(config, beta, adaptive, target_kl, horizon) -> dict[str, Any]:
    """One training step's config: beta as the loss KL coefficient (no controller)."""
    return {**config, "kl_weight": beta}


def loss_spec(cfg: dict[str, Any], notes: list[str]):
    """TRL's loss, its KL coefficient read from the toy's key."""
    return trl.loss_spec({**cfg, trl.BETA_KEY: cfg["kl_weight"]}, notes)


T1 = (0.201965964, -1.085567055, 0.883601091)  # docs/reference-values.md T1, eps 1e-6
TOY = Dialect(
    NAME=NAME,
    LABEL="Toy RL",
    DEFAULTS=DEFAULTS,
    CHOICES=CHOICES,
    HELP=HELP,
    LOSS_DEFAULTS=trl.LOSS_DEFAULTS,
    LOSS_CHOICES=trl.LOSS_CHOICES,
    LOSS_HELP=trl.LOSS_HELP,
    LOSS_KEYS=(*trl.LOSS_DEFAULTS, "kl_weight"),
    ESTIMATOR_KEY="baseline",
    ALIASES=ALIASES,
    BOOL_VALUES={},
    KL_CANON=KL_CANON,
    KL_NAMES=shared.kl_names(KL_CANON),
    KL_ESTIMATOR_KEY=None,
    BETA_KEY="kl_weight",
    CONTROLLER_KEYS=("kl_weight",),
    CLIP_KEYS=("epsilon",),
    ADAPTIVE_BETA=False,
    HAS_REWARD_NORM=False,
    KL_IN_LOSS_ONLY=True,
    STD_EPS=STD_EPS,
    RETURN_ESTIMATORS=(),
    GAE_PADDING=None,
    ESTIMATOR_INPUTS={},
    SINGLETON_NOTE="The toy needs two samples per group.",
    SINGLETON_BEHAVIOUR="The toy refuses a group of one.",
    RECIPES={"grpo": {"baseline": "group_mean", "scale": True}},
    ERAS={
        "grpo_2024": EraSetting(
            config={"baseline": "group_mean", "scale": True, "kl_weight": 0.04, "epsilon": 0.2},
            notes=("the toy's loss is TRL's",),
        ),
        # every recipe of record: the toy says each in its keys (the last one's old name is
        # defaults_2026, an alias the lookups below still use)
        **{
            key: EraSetting(config={"baseline": "group_mean", "scale": False, "kl_weight": 0.0})
            for key in ("prime_rl", "tinker")
        },
        "deepseek_v32": EraSetting(
            config={"baseline": "group_mean", "scale": False, "kl_weight": 0.04},
            notes=("the toy's KL is TRL's plain k3",),
        ),
        "scalerl_olmo3": EraSetting(
            config={"baseline": "group_mean", "scale": False, "kl_weight": 0.0},
            notes=("the toy has no batch std: the group mean alone",),
        ),
    },
    LOSS_OPTIONS={},
    SELFTEST=SelfTestCases(
        seed=(("toy group mean / std (T1)", {"baseline": "group_mean"}, "one", T1),),
        group_norm=({"baseline": "group_mean", "scale": True}, T1),
        masks=({"baseline": "group_mean"}, {"baseline": "none"}),
    ),
    RUN_FORMATS=(),
    BROWSER_COVERAGE=None,  # no JavaScript port: the instant panel takes the server path
    estimator_name=estimator_name,
    kl_estimator=lambda config: "k3",
    to_native=lambda generic: shared.widgets_to_native(DEFAULTS, ALIASES, CHOICES, generic),
    from_native=lambda config=None: shared.widgets_from_native(config or DEFAULTS, ALIASES),
    from_canonical=lambda c: shared.canonical_to_native(ALIASES, shared.kl_names(KL_CANON), c),
    norm_config=lambda mode: None,
    kl_placement=lambda in_reward, beta: None if in_reward else {},
    train_config=train_config,
    beta_blocked=lambda config: "the toy puts the KL only in the loss",
    clip_range=trl.clip_range,
    unread_inputs=lambda cfg: ("values", "sum_pi_squared"),
    pipeline=pipeline_fn,
    loss_agg_modes=trl.loss_agg_modes,
    loss_spec=loss_spec,
    loss_metrics=trl.loss_metrics,
    mismatch_correction=None,
    reads_rollout_logprobs=None,
    rewrite_loss_inputs=shared.inputs_as_given,
)

# ---------------------------------------------------------------------------------- the tests


@pytest.fixture
def toy():
    dialects.register(TOY)
    try:
        yield TOY
    finally:
        dialects.unregister(NAME)


def _batch() -> Batch:
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return Batch(
        scores=torch.tensor([1.0, 0.0, 0.0, 1.0]),
        response_mask=mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        logprobs=torch.full((4, 3), -1.0),
        ref_logprobs=torch.full((4, 3), -1.2),
    )


def test_the_toy_is_a_complete_record(toy):
    assert dialects.get("toy") is toy
    assert tuple(dialects.DIALECTS)[-1] == "toy"
    assert dialects.DEFAULTS["toy"] is DEFAULTS
    assert dialects.LABELS["toy"] == "Toy RL"
    assert dialects.RECIPES["grpo"]["toy"] == {"baseline": "group_mean", "scale": True}
    with pytest.raises(ValueError, match="already registered"):
        dialects.register(TOY)
    assert "toy" not in browser_coverage()  # no browser port: the panel says "server path"
    assert record_problems(toy) == []  # the checks every shipped record passes


def test_run_finds_the_toy(toy):
    trace = pipeline.run(_batch(), "toy", {"baseline": "group_mean"})
    # each group is {1, 0}: mean 0.5, unbiased std 0.7071 -> +-0.7071 on every valid token
    want = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64) * 0.5 / (0.5**0.5 + STD_EPS)
    torch.testing.assert_close(trace.advantages, want[:, None] * _batch().response_mask.double())
    assert trace.framework == "toy"
    no_scale = pipeline.run(_batch(), "toy", {"scale": False})
    half = torch.tensor([0.5, -0.5, -0.5, 0.5], dtype=torch.float64)
    torch.testing.assert_close(no_scale.advantages[:, 0], half)
    with pytest.raises(ValueError, match="unknown toy config key"):
        pipeline.run(_batch(), "toy", {"adv_estimator": "grpo"})


def test_policy_loss_finds_the_toy(toy):
    batch = _batch()
    logprobs = batch.logprobs.clone().requires_grad_(True)
    kwargs = dict(
        old_logprobs=batch.logprobs,
        advantages=torch.tensor([1.0, -1.0, -1.0, 1.0])[:, None].expand(4, 3),
        response_mask=batch.response_mask,
        ref_logprobs=batch.ref_logprobs,
    )
    got = pipeline.policy_loss("toy", {"kl_weight": 0.1}, logprobs=logprobs, **kwargs)
    want = pipeline.policy_loss("trl", {"beta": 0.1}, logprobs=logprobs, **kwargs)
    torch.testing.assert_close(got.total, want.total)  # the toy's loss is TRL's
    assert got.framework == "toy"


def test_the_eras_find_the_toy(toy):
    eras.check_eras()
    assert eras.ERAS["grpo_2024"].config("toy")["kl_weight"] == 0.04
    assert "toy" in eras.ERAS["defaults_2026"].configs
    assert eras.ERAS["deepseek_v32"].config("toy")["kl_weight"] == 0.04
    assert eras.ERAS["defaults_2026"].dialect_notes("toy") == (
        "the toy has no batch std: the group mean alone",
    )


def test_the_self_test_runs_the_toy(toy):
    assert ("toy group mean / std (T1)", "toy", {"baseline": "group_mean"}, "one", T1) in (
        selftest.seed_cases()
    )
    checks = selftest.run_self_tests(None, _batch())
    names = [c.name for c in checks]
    assert "seed example · toy group mean / std (T1)" in names
    assert any(name.endswith("· toy") for name in names)  # every position, the toy's T1
    assert all(c.passed for c in checks if "toy" in c.name), [
        (c.name, c.detail) for c in checks if "toy" in c.name and not c.passed
    ]
    masks = next(c for c in checks if c.name == "masks never leak")
    assert any(label.startswith("toy ") for label in masks.detail)
    assert masks.passed, masks.detail


def test_unregistering_restores_the_four():
    dialects.register(TOY)
    dialects.unregister("toy")
    assert tuple(dialects.DIALECTS) == dialects.FRAMEWORKS
    assert "toy" not in dialects.DEFAULTS
    assert set(dialects.RECIPES["grpo"]) == set(dialects.FRAMEWORKS)
    with pytest.raises(ValueError, match="shipped framework"):
        dialects.unregister("roll")


def test_a_record_of_a_file_names_what_the_file_lacks():
    toy = {f.name: getattr(TOY, f.name) for f in dataclasses.fields(Dialect)}
    assert Dialect.of(toy) == TOY
    del toy["BETA_KEY"]
    with pytest.raises(TypeError, match=r"toy: the dialect lacks \['BETA_KEY'\]"):
        Dialect.of(toy)
    assert Dialect.of(toy, BETA_KEY=TOY.BETA_KEY) == TOY
