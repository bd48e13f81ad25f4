"""The Self-test page's checks, run as unit tests (one source of truth: roll_viz.analysis)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from roll_viz import rewards
from roll_viz.analysis import selftest
from roll_viz.core.records import batch_from_rollout
from roll_viz.data import presets
from tests.synthetic import batch_of, consistent_rollout


def _data(kind: str):
    if kind.startswith("preset:"):
        _, spec, rollout = presets.load_preset(kind.split(":", 1)[1])
        scores = rewards.score_rollout(rollout, spec)
        batch = batch_from_rollout(rollout, scores, values=torch.zeros_like(rollout.response_mask))
        return rollout, batch
    rollout = consistent_rollout(identical=kind == "identical", seed=3)
    return rollout, batch_of(rollout)


DATA = ["steered", "identical", *(f"preset:{name}" for name in presets.PRESETS)]


@pytest.mark.parametrize("kind", DATA)
def test_every_self_test_check_passes(kind):
    rollout, batch = _data(kind)
    checks = selftest.run_self_tests(rollout, batch)
    failed = {c.name: c.detail for c in checks if not c.passed}
    assert not failed
    names = [c.name for c in checks]
    assert len(names) == len(set(names)) == len(selftest.SEED_CASES) + 4 + 3
    table = selftest.checks_table(checks)
    assert list(table.columns) == ["check", "result", "numbers"]
    assert set(table["result"]) == {"pass"}


@pytest.mark.parametrize("case", selftest.SEED_CASES, ids=lambda c: c[0])
def test_seed_cases_catch_a_wrong_hand_value(case):
    name, fw, cfg, kind, expected = case
    assert selftest.check_seed_case(name, fw, cfg, kind, expected).passed
    wrong = tuple(v + 1e-6 for v in expected)
    assert not selftest.check_seed_case(name, fw, cfg, kind, wrong).passed


def test_every_position_check_fails_if_the_pipeline_leaks(monkeypatch):
    import roll_viz.core.pipeline as pipeline

    real = pipeline.run

    def leaky(batch, fw="roll", config=None, running=None):
        trace = real(batch, fw, config, running)
        return replace(trace, advantages=trace.advantages + 1e-3 * (batch.response_mask == 0))

    monkeypatch.setattr(pipeline, "run", leaky)
    rollout = consistent_rollout()
    result = selftest.check_every_position(rollout.response_mask, "verl")
    assert not result.passed
    assert result.detail["max |advantage| on padding"] == pytest.approx(1e-3)


def test_kl_check_catches_inconsistent_exact_kl():
    rollout = consistent_rollout(seed=5)
    broken = replace(rollout, exact_kl=rollout.exact_kl * 0.5)
    assert selftest.check_kl_estimators(rollout).passed
    assert not selftest.check_kl_estimators(broken).passed
    assert selftest.check_kl_estimators(None).passed  # T7 only


def test_categorical_kl_t7_by_hand():
    p = torch.tensor([[0.6, 0.3, 0.1]], dtype=torch.float64)
    q = torch.tensor([[0.4, 0.4, 0.2]], dtype=torch.float64)
    res = selftest.categorical_kl_checks(p, q)
    for key in ("exact", "e_k1", "e_k3"):
        assert res[key].item() == pytest.approx(0.087659725, abs=1e-9)


def test_identical_check_uses_the_sampler_numbers_when_identical():
    rollout = consistent_rollout(identical=True)
    batch = batch_of(rollout)
    assert "max |exact_kl|" in selftest.check_identical_policy(rollout, batch).detail
    broken = replace(rollout, exact_kl=rollout.exact_kl + 1e-9 * rollout.response_mask)
    assert not selftest.check_identical_policy(broken, batch).passed


def test_mask_check_detects_nonzero_critic_on_padding_for_roll_gae():
    rollout = consistent_rollout()
    batch = batch_of(rollout)
    assert selftest.check_masks(batch).passed
    dirty = replace(batch, values=torch.ones_like(batch.response_mask))
    result = selftest.check_masks(dirty)
    assert not result.passed
    assert "T8" in result.detail["roll gae"]


def test_mask_check_adds_padding_when_the_batch_has_none():
    rollout = consistent_rollout()
    full = replace(batch_of(rollout), response_mask=torch.ones_like(rollout.response_mask))
    padded = selftest.with_padding(full)
    assert (padded.response_mask == 0).any()
    assert padded.response_mask[0].sum() == full.response_mask[0].sum()
    result = selftest.check_masks(full)
    assert result.passed
    assert any(k.endswith("(extra padding)") for k in result.detail)
