"""Every registered policy term (policy_terms.POLICY_TERMS): closed-form gradient vs autograd.

The parametrisation is the registry itself, so a kind added to ``POLICY_TERMS`` runs here; without
an entry in ``EXAMPLES`` (its parameters and the ratio levels it supports) it fails.
"""

import math

import pytest
import torch

from core.cases import close
from roll_viz.core.pipeline import KL_ESTIMATORS, LOSS_CHOICES
from roll_viz.core.pipeline.dialects import openrlhf, roll, trl, verl
from roll_viz.core.pipeline.losses import LossInputs, LossResult, LossSpec, loss_from_spec
from roll_viz.core.pipeline.policy_terms import POLICY_TERMS, policy_term

F = torch.float64

#: kind -> (LossSpec parameters, ratio levels with their log-ratio clamp)
EXAMPLES: dict[str, tuple[dict, tuple[tuple[str, float | None], ...]]] = {
    "ppo": (
        {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 3.0},
        (("token", 20.0), ("token", None), ("sequence", None), ("sequence-token", 10.0)),
    ),
    "clip_cov": ({"clip_cov": (0.3, -5.0, 5.0, 0)}, (("token", None),)),
    "pg": ({}, (("token", None),)),
    "cispo": (
        {"cispo_low": 0.8, "cispo_high": 1.2, "unified_mask": True},
        (("token", 20.0), ("sequence", None)),
    ),
    "sapo": ({"tau_pos": 1.0, "tau_neg": 1.05}, (("token", 20.0), ("sequence", None))),
    "dppo_tv": ({"eps_low": 0.2, "eps_high": 0.2, "trunc_c": 1.5}, (("token", 20.0),)),
    "dppo_kl": ({"eps_low": 0.05, "eps_high": 0.05, "trunc_c": 3.0}, (("token", 20.0),)),
    "topr": ({"topr_weights": (1.0, 0.5)}, (("token", None),)),
    "kimi": ({"kimi_tau": 0.3}, (("token", None),)),
    "vespo": ({"vespo": (2.0, 3.0, 3.0, 2.0)}, (("token", None),)),
    "kl_cov": ({"kl_cov_ratio": 0.2, "kl_cov_coef": 0.5}, (("token", None),)),
    "geo_mean": ({"eps_low": 0.2, "eps_high": 0.2}, (("token", None),)),
    "prime_default": ({"prime": (0.2, 0.1, 1.5, 0.05)}, (("token", None),)),
}

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-all-rows")

#: the KL loss term's forms (``loss_kl.kl_loss_term``): form -> (LossSpec fields, ratio level)
KL_FORMS: dict[str, tuple[dict, str]] = {
    "plain": ({}, "token"),
    "log-ratio-clamped": ({"kl_log_ratio_clamp": 20.0}, "token"),
    "straight-through": ({"kl_straight_through": True}, "token"),
    "is-weight-clip": ({"kl_is_weight_clip": 2.0}, "token"),
    "ratio-corrected": ({"kl_ratio_correction": True}, "token"),
    "ratio-corrected-sequence": ({"kl_ratio_correction": True}, "sequence"),
}


def _batch(seed, B=5, T=6):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[1] = 0  # a zero-length row
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F)
    old = -torch.rand((B, T), generator=gen, dtype=F) * 3 - 0.05
    lp = old + 0.4 * torch.randn((B, T), generator=gen, dtype=F)
    lp[0, 0] = old[0, 0] + (25.0 if seed % 2 else -25.0)  # beyond a +-20 log-ratio clamp
    adv = torch.randn((B, T), generator=gen, dtype=F)
    ref = old + 0.3 * torch.randn((B, T), generator=gen, dtype=F)
    scores = torch.randn(B, generator=gen, dtype=F)
    lp = torch.where(mask == 0, -math.inf, lp).requires_grad_()  # padding may hold -inf
    return lp, old, adv, mask, ref, scores


def _loss(kind, level, clamp, mode, seed, kl_on, **kl):
    params, _ = EXAMPLES[kind]
    kl = {"beta": 0.1, "kl_clamp": 10.0} | kl
    spec = LossSpec(kind=kind, level=level, clamp=clamp, kl_on=kl_on, **kl, **params)
    modes = {"policy": (mode, None), "kl": (mode, None), "entropy": (mode, None), "value": None}
    lp, old, adv, mask, ref, scores = _batch(seed)
    inputs = LossInputs(
        logprobs=lp,
        old_logprobs=old,
        advantages=adv,
        response_mask=mask,
        ref_logprobs=ref,
        scores=scores,
    )
    res = loss_from_spec(
        spec, modes, lambda ctx: {}, framework="toy", config={}, notes=[], inputs=inputs
    )
    return res, lp, mask


def _cases():
    for kind in POLICY_TERMS:
        levels = EXAMPLES[kind][1] if kind in EXAMPLES else (("token", None),)
        for level, clamp in levels:
            yield pytest.param(kind, level, clamp, id=f"{kind}-{level}-{clamp}")


def test_every_registered_kind_has_an_example():
    assert set(EXAMPLES) == set(POLICY_TERMS), "add the new kind's parameters to EXAMPLES"


@pytest.mark.parametrize("kl_on", [False, True])
@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("kind", "level", "clamp"), list(_cases()))
def test_closed_form_gradient_matches_autograd(kind, level, clamp, mode, seed, kl_on):
    assert kind in EXAMPLES, f"{kind}: registered without an example in EXAMPLES"
    res, lp, mask = _loss(kind, level, clamp, mode, seed, kl_on)
    assert isinstance(res, LossResult)
    (grad,) = torch.autograd.grad(res.total, lp)
    assert bool(torch.isfinite(grad).all())
    close(res.per_token["grad_coef"], grad, 1e-12, rtol=1e-12)
    assert bool((res.per_token["grad_coef"][mask == 0] == 0).all())
    assert bool(res.per_token["grad_coef"].abs().sum() > 0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", list(KL_FORMS))
@pytest.mark.parametrize("estimator", list(KL_ESTIMATORS))
def test_kl_term_gradient_matches_autograd(estimator, form, mode):
    """The KL term's closed-form share of grad_coef, for every registered estimator and form."""
    fields, level = KL_FORMS[form]
    kl = {"kl_estimator": estimator, "beta": 0.3, **fields}
    on, lp, mask = _loss("pg", level, None, mode, 4, True, **kl)
    (grad,) = torch.autograd.grad(on.total, lp)
    close(on.per_token["grad_coef"], grad, 1e-12, rtol=1e-12)
    off, _, _ = _loss("pg", level, None, mode, 4, False, **kl)
    kl_share = on.per_token["grad_coef"] - off.per_token["grad_coef"]
    assert bool(kl_share.abs().sum() > 0)  # the KL term moved the gradient
    assert bool((kl_share[mask == 0] == 0).all())


@pytest.mark.parametrize("kind", sorted(POLICY_TERMS))
def test_clip_masks_are_bool_and_on_the_mask(kind):
    res, _, mask = _loss(kind, "token", None, "token-mean", 3, False)
    for name in res.clip_masks:
        flags = res.per_token[name]
        assert flags.dtype == torch.bool, name
        assert not bool((flags & (mask == 0)).any()), name


def test_unknown_kind_names_the_registry():
    with pytest.raises(ValueError, match="loss kind must be one of"):
        policy_term("nope")


@pytest.mark.parametrize(
    "kind", [k for k, term in POLICY_TERMS.items() if term.outside is not None]
)
def test_outside_regulariser_gradient_matches_autograd(kind):
    """A term's regulariser on tokens its loss mask dropped (``unmasked_token_sum``)."""
    params, _ = EXAMPLES[kind]
    spec = LossSpec(kind=kind, level="token", clamp=None, unmasked_token_sum=True, **params)
    modes = {"policy": ("token-mean", None), "kl": ("token-mean", None)}
    modes |= {"entropy": ("token-mean", None), "value": None}
    lp, old, adv, mask, _ref, scores = _batch(5)
    metric_mask = mask.clone()
    dropped = mask.clone()
    dropped[2] = 0.0  # the loss drops row 2; the metric mask keeps it
    lp = torch.where(metric_mask == 0, -math.inf, lp.detach()).requires_grad_()
    inputs = LossInputs(
        logprobs=lp,
        old_logprobs=old,
        advantages=adv * dropped,
        response_mask=dropped,
        metric_mask=metric_mask,
        scores=scores,
    )
    res = loss_from_spec(
        spec, modes, lambda ctx: {}, framework="toy", config={}, notes=[], inputs=inputs
    )
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-12, rtol=1e-12)
    assert bool((grad[2] != 0).any())  # the dropped row's regulariser has a gradient


def _loss_tables():
    return {
        ("roll", "pg_variant"): roll.PG_VARIANTS,
        ("verl", "loss_mode"): verl.LOSS_MODES,
        ("openrlhf", "policy_loss_type"): openrlhf.POLICY_LOSS_TYPES,
        ("trl", "loss_type"): trl.LOSS_TYPES,
    }


@pytest.mark.parametrize("where", list(_loss_tables()), ids=lambda w: f"{w[0]}-{w[1]}")
def test_each_dialect_loss_table_covers_its_choices_with_registered_kinds(where):
    framework, switch = where
    table = _loss_tables()[where]
    assert {row.kind for row in table.values()} <= set(POLICY_TERMS)
    names = {name.split(":")[0] for name in table}  # verl: bypass_mode by its loss_type
    assert names == set(LOSS_CHOICES[framework][switch])
