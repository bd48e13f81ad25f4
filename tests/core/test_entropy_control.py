"""The adaptive entropy target: TRL PR #6140's rule by hand, a plain loop, TRL's dialect path."""

import math

import pytest
import torch

from roll_viz.core.pipeline import dialects, policy_loss, resolve_config
from roll_viz.core.pipeline.dialects import trl
from roll_viz.core.pipeline.dialects.entropy_keys import ENTROPY_COEF_KEYS, entropy_overrides
from roll_viz.core.pipeline.entropy_control import EntropyTarget, entropy_curve


def _trl_loop(coef, target, delta, lo, hi, entropies):
    """GRPOTrainer._compute_loss's controller, transcribed: apply, then update."""
    last, out = math.inf, []
    for h in entropies:
        apply_coef = coef if last <= target else 0.0
        coef = min(coef + delta, hi) if h <= target else max(coef - delta, lo)
        last = h
        out.append((apply_coef, coef))
    return out


def test_by_hand():
    start = EntropyTarget(target=0.2, coef=0.01, delta=0.005)
    assert start.applied() == 0.0  # TRL's last entropy starts at +inf
    s1 = start.after(0.3)  # above target: 0.01 - 0.005
    assert s1.coef == pytest.approx(0.005)
    assert s1.applied() == 0.0
    s2 = s1.after(0.15)  # at / below target: + delta, and the next step applies it
    assert s2.coef == pytest.approx(0.01)
    assert s2.applied() == pytest.approx(0.01)
    assert s2.after(0.5).after(0.5).after(0.5).coef == 0.0  # clamped to coef_min
    top = EntropyTarget(target=1.0, coef=0.99, delta=0.05).after(0.1)
    assert top.coef == 1.0  # clamped to coef_max


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_trl_loop_and_the_trl_dialect(seed):
    gen = torch.Generator().manual_seed(seed)
    entropies = (0.1 + 0.25 * torch.rand(12, generator=gen, dtype=torch.float64)).tolist()
    curve = entropy_curve(EntropyTarget(target=0.2, coef=0.02, delta=0.01), entropies)
    assert curve == _trl_loop(0.02, 0.2, 0.01, 0.0, 1.0, entropies)
    # the TRL dialect's own path, fed the previous step's entropy, gives the same coefficients
    cfg = {**trl.LOSS_DEFAULTS, "entropy_coef": 0.02, "use_adaptive_entropy": True}
    cfg |= {"entropy_target": 0.2, "entropy_coef_delta": 0.01}
    last = None
    for (applied, after), h in zip(curve, entropies, strict=True):
        step = {**cfg, "viz_last_world_entropy": last}
        assert trl.applied_entropy_coef(step) == applied
        assert trl.next_entropy_coef(step, h) == after
        cfg["entropy_coef"], last = after, h


def test_bad_settings():
    with pytest.raises(ValueError, match="target"):
        EntropyTarget(target=0.0)
    with pytest.raises(ValueError, match="delta"):
        EntropyTarget(delta=-1.0)
    with pytest.raises(ValueError, match="entropy must be finite"):
        EntropyTarget().after(math.nan)


def test_every_dialect_takes_its_entropy_key():
    assert set(ENTROPY_COEF_KEYS) == set(dialects.DIALECTS)
    mask = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    lp = torch.tensor([[-1.0, -0.5]], dtype=torch.float64)
    ent = torch.tensor([[0.4, 0.2]], dtype=torch.float64)
    for framework in ENTROPY_COEF_KEYS:
        cfg = resolve_config(framework, entropy_overrides(framework, 0.1))
        res = policy_loss(
            framework, cfg, logprobs=lp, old_logprobs=lp, advantages=torch.zeros_like(lp),
            response_mask=mask, entropy=ent,
        )  # fmt: skip
        # A = 0: the loss is the bonus alone, -0.1 * mean entropy 0.3
        assert res.total.item() == pytest.approx(-0.03, abs=1e-12), framework
    with pytest.raises(ValueError, match="no entropy"):
        entropy_overrides("nemo", 0.1)
