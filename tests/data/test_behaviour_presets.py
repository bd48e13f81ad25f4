"""The committed behaviour log-probs of every preset: they load, belong to the preset's tokens,
and carry a real mismatch (bf16, fp16, int8, top-p, top-k) next to the exact zero of fp32."""

import pytest
import torch

from roll_viz.data import behaviour_presets as bp
from roll_viz.data.presets import PRESETS, load_preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_its_behaviour_file(name):
    _, _, rollout = load_preset(name)
    mask = rollout.response_mask > 0
    fp32 = bp.load_behaviour(name, "fp32")
    assert fp32 is not None, f"regenerate: python -m roll_viz.data.behaviour_presets {name}"
    assert torch.equal(fp32.old, fp32.mu)
    assert fp32.mask.tolist() == mask.tolist()
    # pi_old is the float32 recompute of the preset's own tokens (the sampler's scores up to
    # batch-shape rounding and the 7 stored digits)
    assert float((fp32.old - rollout.logprobs.double())[mask].abs().max()) < 1e-3
    for source in bp.STORED:
        got = bp.load_behaviour(name, source)
        assert got is not None
        assert torch.equal(got.old, fp32.old)
        assert float((got.old - got.mu)[got.mask].abs().max()) > 1e-4, source


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_truncated_samplers_give_log_s_at_most_zero(name):
    for p in bp.TOP_P_OPTIONS:
        got = bp.load_behaviour(name, "top_p", p)
        d = (got.old - got.mu)[got.mask]
        assert bool((d <= 1e-6).all())
    for k in bp.TOP_K_OPTIONS:
        got = bp.load_behaviour(name, "top_k", k)
        assert bool(((got.old - got.mu)[got.mask] <= 1e-6).all())


def test_unknown_entries_give_none():
    assert bp.load_behaviour("pirate", "top_p", 0.5) is None  # not a stored option
    assert bp.load_behaviour("no_such_preset", "bf16") is None
