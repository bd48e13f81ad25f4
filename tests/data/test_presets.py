"""Committed presets: real-model rollouts that load without the model, round trip exactly."""

import dataclasses
import json

import pytest
import torch

from roll_viz.core.records import Rollout
from roll_viz.data.presets import (
    PRESET_DIR,
    PRESETS,
    load_preset,
    rollout_from_dict,
    rollout_to_dict,
)
from roll_viz.lm.sampling import sample
from roll_viz.rewards import score_greedy, score_rollout
from tests.lm.helpers import steered_config, tiny_model


@pytest.fixture(scope="module")
def steered():
    return sample(tiny_model(), steered_config())


def assert_rollouts_equal(a: Rollout, b: Rollout):
    for field in dataclasses.fields(Rollout):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype, field.name
            assert torch.equal(x, y), field.name
        else:
            assert x == y, field.name


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_loads_and_is_consistent(name):
    cfg, spec, r = load_preset(name)
    assert r.prompts == cfg.prompts
    assert len(r.responses) == cfg.num_sequences
    assert r.token_ids.shape[1] <= cfg.max_new_tokens
    assert r.topk_ids.shape[2] == cfg.topk
    assert r.features is not None
    assert r.features.shape[2] == cfg.feature_dim
    assert set(r.finish_reasons) <= {"eos", "length"}
    assert len(r.greedy_responses) == len(cfg.prompts)
    valid = r.response_mask.bool()
    assert (r.logprobs[valid] <= 0).all()
    assert (r.exact_kl[valid] >= 0).all()
    meta = dict(r.meta)
    assert meta["model_spec"] == "smollm2"
    assert meta["policy_mode"] == cfg.policy_mode
    if cfg.policy_mode == "identical":
        assert (r.exact_kl == 0).all()
        assert torch.equal(r.logprobs, r.ref_logprobs)
    else:
        assert r.exact_kl.sum() > 1.0
    assert score_rollout(r, spec).shape == (cfg.num_sequences,)
    assert score_greedy(r, spec).shape == (cfg.num_sequences,)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_round_trip_is_exact(name):
    _, _, r = load_preset(name)
    back = rollout_from_dict(json.loads(json.dumps(rollout_to_dict(r))))
    assert_rollouts_equal(r, back)


def test_sampled_rollout_round_trip_is_exact(steered):
    back = rollout_from_dict(json.loads(json.dumps(rollout_to_dict(steered))))
    assert_rollouts_equal(steered, back)


def test_presets_small():
    total = sum(p.stat().st_size for p in PRESET_DIR.glob("*.json"))
    assert total < 3 * 2**20
    assert {p.stem for p in PRESET_DIR.glob("*.json")} == set(PRESETS)


def test_unknown_preset():
    with pytest.raises(KeyError, match="unknown preset"):
        load_preset("nope")


def test_stale_preset_detected(monkeypatch):
    import roll_viz.data.presets as presets

    description, cfg, spec = PRESETS["quantum"]
    changed = dict(PRESETS, quantum=(description, dataclasses.replace(cfg, seed=99), spec))
    monkeypatch.setattr(presets, "PRESETS", changed)
    with pytest.raises(ValueError, match="stale"):
        presets.load_preset("quantum")
