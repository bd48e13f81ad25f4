"""Sequence-level masks: OPSM, product vs geometric ratio, TRM, keep sampling mask.

Hand-computed numbers, a plain-loop oracle that shares no code with the package, TRL 1.16's own
``get_off_policy_mask`` called live, verl's rejection rules for Geo-RS and TRM, and the keep
sampling mask's closed-form gradient against autograd.
"""

import math

import pytest
import torch

from roll_viz.core.pipeline import sequence_masks as sm
from roll_viz.core.pipeline.dialects import corrections as fc
from roll_viz.core.pipeline.dialects import sequence_rules as sr

F = torch.float64
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=torch.bool)
LP = torch.tensor(
    [[-1.0, -2.0, -0.5], [-0.3, -0.1, 0.0], [-1.0, -1.0, -1.0], [0.0, 0.0, 0.0]], dtype=F
)
MU = torch.tensor(
    [[-0.7, -1.4, -0.6], [-0.3, -0.4, 0.0], [-1.1, -0.9, -1.0], [0.0, 0.0, 0.0]], dtype=F
)
# per-token advantages: row 0 mixes signs with a negative mean (the slime case)
ADV = torch.tensor(
    [[-0.5, 0.4, -0.5], [-1.0, -1.0, 0.0], [-2.0, -2.0, -2.0], [0.0, 0.0, 0.0]], dtype=F
)


def _oracle_opsm(delta):
    keep = []
    for b in range(4):
        idx = [t for t in range(3) if MASK[b, t]]
        if not idx:
            keep.append(True)
            continue
        a = sum(ADV[b, t].item() for t in idx) / len(idx)
        kl = sum(MU[b, t].item() - LP[b, t].item() for t in idx) / len(idx)
        keep.append(not (a < 0 and kl > delta))
    return keep


def test_opsm_by_hand():
    # row 0: seq KL = (0.3 + 0.6 - 0.1) / 3 = 0.2667, A mean = -0.2 -> dropped at delta 0.1
    # row 1: seq KL = (0 - 0.3) / 2 = -0.15 -> kept; row 2: (-0.1 + 0.1 + 0) / 3 = 0 -> kept
    rule = sm.opsm(ADV, LP, MU, MASK, 0.1)
    assert rule.statistic.tolist() == pytest.approx([0.8 / 3, -0.15, 0.0, 0.0], abs=1e-12)
    assert rule.keep_rows.tolist() == [False, True, True, True]
    assert rule.keep[0].tolist() == [False, False, False]
    assert rule.removed_rows == 1
    for delta in (0.0, 0.1, 0.3, -0.0):
        assert sm.opsm(ADV, LP, MU, MASK, delta).keep_rows.tolist() == _oracle_opsm(delta)
    with pytest.raises(ValueError, match="delta"):
        sm.opsm(ADV, LP, MU, MASK, -0.1)


def test_opsm_matches_trl_get_off_policy_mask_live():
    from trl.trainer.grpo_trainer import GRPOTrainer

    seq_adv = sm.sequence_advantage(ADV, MASK)[:, None]  # TRL's advantages are (B, 1)
    for delta in (0.0, 0.1, 0.27):
        theirs = GRPOTrainer.get_off_policy_mask(
            advantages=seq_adv,
            per_token_logps=LP,
            sampling_per_token_logps=MU,
            mask=MASK.to(F),
            off_policy_threshold=delta,
        )
        ours = sm.opsm(ADV, LP, MU, MASK, delta).keep_rows
        assert theirs.squeeze(-1).bool().tolist() == ours.tolist()


def test_slime_per_token_rule_leaks_a_positive_token():
    rejected = sr.slime_opsm_per_token(ADV, LP, MU, MASK, 0.1)
    assert rejected[0].tolist() == [1.0, 0.0, 1.0]  # the middle token (A = +0.4) leaks
    fixed = sm.opsm(ADV, LP, MU, MASK, 0.1)
    assert (~fixed.keep[0]).tolist() == [True, True, True]


def test_product_and_geometric_ratios():
    log_prod, log_geo = sm.log_sequence_ratios(LP, MU, MASK)
    # row 0: d = -0.3, -0.6, 0.1 -> sum -0.8, mean -0.2667; row 1: 0, 0.3 -> 0.3, 0.15
    assert log_prod.tolist() == pytest.approx([-0.8, 0.3, 0.0, 0.0], abs=1e-12)
    assert log_geo.tolist() == pytest.approx([-0.8 / 3, 0.15, 0.0, 0.0], abs=1e-12)
    prod = sm.ratio_mask(LP, MU, MASK, 0.5, 2.0, geometric=False)
    assert prod.statistic[0].item() == pytest.approx(math.exp(-0.8))  # 0.449 < 0.5: dropped
    assert prod.keep_rows.tolist() == [False, True, True, True]
    geo = sm.ratio_mask(LP, MU, MASK, 0.5, 2.0, geometric=True)
    assert geo.keep_rows.tolist() == [True, True, True, True]
    with pytest.raises(ValueError, match="low"):
        sm.ratio_mask(LP, MU, MASK, 2.0, 0.5, geometric=True)


def test_geometric_is_length_invariant_and_the_product_is_not():
    # the same per-token gap d = -0.1 on 5 and on 50 tokens
    mask = torch.zeros(2, 50, dtype=torch.bool)
    mask[0, :5], mask[1, :] = True, True
    lp = torch.full((2, 50), -1.1, dtype=F)
    mu = torch.full((2, 50), -1.0, dtype=F)
    geo = sm.ratio_mask(lp, mu, mask, 0.8, 1.25, geometric=True)
    prod = sm.ratio_mask(lp, mu, mask, 0.8, 1.25, geometric=False)
    assert geo.statistic.tolist() == pytest.approx([math.exp(-0.1)] * 2)
    assert prod.statistic.tolist() == pytest.approx([math.exp(-0.5), math.exp(-5.0)])
    assert geo.keep_rows.tolist() == [True, True]
    assert prod.keep_rows.tolist() == [False, False]


def test_geometric_mask_equals_verl_geo_rs_and_trl_sequence_mask_is_the_product():
    # verl's k1 is log mu - log pi_old, so pass pi_old as "logp"
    for low, high in ((0.9, 1.1), (0.75, 1.2), (0.5, 2.0)):
        geo = sm.ratio_mask(LP, MU, MASK, low, high, geometric=True)
        verl = sr.verl_geo_rs(LP, MU, MASK, low, high)
        assert (MASK & ~verl.masked).tolist() == geo.keep.tolist()  # the rows verl rejects
        assert verl.counted.tolist() == MASK.tolist()  # the v1 trainer still counts them
        prod = sm.ratio_mask(LP, MU, MASK, low, high, geometric=False)
        trl = fc.trl_correction(LP, MU, MASK, mode="sequence_mask", clip_min=low, clip_max=high)
        assert (MASK & ~trl.masked).tolist() == prod.keep.tolist()


def test_trm_by_hand_and_against_verl_seq_max_k2():
    # max token k2 = d^2 / 2: row 0 0.18 (d = -0.6), row 1 0.045, row 2 0.005
    rule = sm.trust_region_mask(LP, MU, MASK, 0.05)
    assert rule.statistic.tolist() == pytest.approx([0.18, 0.045, 0.005, 0.0], abs=1e-12)
    assert rule.keep_rows.tolist() == [False, True, True, True]
    for delta in (0.001, 0.01, 0.05, 0.2):
        verl = sr.verl_trm(LP, MU, MASK, delta)
        kept = sm.trust_region_mask(LP, MU, MASK, delta).keep
        assert (MASK & ~verl.masked).tolist() == kept.tolist()
    # any one token decides: the mean k2 of row 0 (0.0767) would keep it at 0.1, the max does not
    k2_mean = (0.045 + 0.18 + 0.005) / 3
    assert k2_mean < 0.1
    assert not sm.trust_region_mask(LP, MU, MASK, 0.1).keep_rows[0]


def test_trl_opsm_correction_keeps_the_denominator():
    corr = sr.trl_opsm(LP, MU, MASK, ADV, 0.1)
    assert corr.counted.tolist() == MASK.tolist()
    assert corr.masked[0].tolist() == [True, True, True]
    assert corr.weights[0].tolist() == [0.0, 0.0, 0.0]
    assert corr.weights[1, 0] == 1.0


def test_top_p_support_and_the_renormalisation_term():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=F))
    assert sm.top_p_support(logits, 0.7).tolist() == [True, True, False, False]  # 0.5 < 0.7
    assert sm.top_p_support(logits, 0.79).tolist() == [True, True, False, False]  # 0.8 !< 0.79
    assert sm.top_p_support(logits, 0.81).tolist() == [True, True, True, False]
    assert sm.top_p_support(logits, 0.1).tolist() == [True, False, False, False]
    support = sm.top_p_support(logits, 0.7)
    assert sm.support_log_mass(logits, support).item() == pytest.approx(math.log(0.8))
    with pytest.raises(ValueError, match="top_p"):
        sm.top_p_support(logits, 0.0)


def test_keep_sampling_gradient_closed_form_against_autograd():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 3, 7, generator=gen, dtype=F).requires_grad_()
    support = sm.top_p_support(logits, 0.6)
    probs = torch.softmax(logits.detach(), -1)
    tokens = probs.argmax(-1)  # the top token is always in the support
    renorm, term = sm.keep_sampling_logprobs(logits, tokens, support)
    mass = (probs * support).sum(-1)
    assert torch.allclose(term.detach(), -mass.log(), atol=1e-12)
    renorm_oracle = (probs.gather(-1, tokens[..., None]).squeeze(-1) / mass).log()
    assert torch.allclose(renorm.detach(), renorm_oracle, atol=1e-12)
    (grad,) = torch.autograd.grad(renorm.sum(), logits)
    # d/dz_v [log p_y - log p(S)] = 1[v = y] - p_v 1[v in S] / p(S)
    onehot = torch.nn.functional.one_hot(tokens, 7).to(F)
    closed = onehot - probs * support / mass[..., None]
    assert torch.allclose(grad, closed, atol=1e-12)


def test_keep_sampling_correction_reads_ratio_one_on_a_top_p_sampler():
    # a top-p sampler's processed log-prob is log pi_old - log S: renormalising pi_old on the
    # same support leaves ratio 1, where the plain ratio reads S (TRL #6945)
    log_s = torch.tensor([[-0.2, -0.05, -0.4]], dtype=F)
    old = torch.tensor([[-1.0, -0.5, -2.0]], dtype=F)
    mu = old - log_s
    m = torch.ones(1, 3, dtype=torch.bool)
    corr = sr.keep_sampling(old, mu, m, log_s)
    assert corr.weights[0].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert torch.exp(old - mu)[0].tolist() == pytest.approx(torch.exp(log_s)[0].tolist())
