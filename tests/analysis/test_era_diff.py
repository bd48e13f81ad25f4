"""The recipes of record (GRPO 2024, prime-rl, Tinker, V3.2, ScaleRL / Olmo 3) on one batch, and
MaxRL beside GRPO; ``defaults_2026`` is the ScaleRL / Olmo 3 record's alias."""

import math

import pytest
import torch

from roll_viz.analysis import era_diff
from roll_viz.core.pipeline import FRAMEWORKS, dialects, policy_loss, resolve_config
from roll_viz.core.pipeline.eras import ERAS, check_eras
from roll_viz.core.records import Batch

F = torch.float64


def _batch():
    # group "mixed": rewards 1, 0 (lengths 1, 2); group "solved": 1, 1 (lengths 1, 1)
    mask = torch.tensor([[1, 0], [1, 1], [1, 0], [1, 0]], dtype=F)
    lp = torch.tensor([[-0.5, 0.0], [-1.0, -2.0], [-0.3, 0.0], [-0.7, 0.0]], dtype=F)
    ref = torch.tensor([[-0.7, 0.0], [-1.0, -1.5], [-0.2, 0.0], [-0.7, 0.0]], dtype=F)
    return Batch(
        scores=torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=F),
        response_mask=mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        group_labels=("mixed", "solved"),
        logprobs=lp,
        ref_logprobs=ref,
    )


def _k3(x):
    return math.exp(-x) - 1 + x


def test_every_dialect_accepts_every_recipe():
    check_eras()
    assert len(ERAS) == 5
    for era in ERAS.values():
        assert set(era.configs) == set(FRAMEWORKS)
        for fw in FRAMEWORKS:
            cfg = resolve_config(fw, era.config(fw))
            want = (0.2, 0.28) if era.key == "scalerl_olmo3" else (0.2, 0.2)  # clip-higher
            assert dialects.get(fw).clip_range(cfg) == want


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_2024_has_k3_kl_loss_at_004_and_2026_none(fw):
    batch = _batch()
    diff = era_diff.diff_eras(batch, fw)
    old, new = diff.runs["grpo_2024"], diff.runs["scalerl_olmo3"]
    assert old.kl_term > 0
    assert new.kl_term == 0
    assert diff.runs["deepseek_v32"].kl_term > 0
    assert diff.runs["prime_rl"].kl_term == diff.runs["tinker"].kl_term == 0
    cfg = old.config
    res = policy_loss(
        fw,
        cfg,
        logprobs=batch.logprobs,
        old_logprobs=batch.logprobs,
        advantages=old.trace.advantages,
        response_mask=batch.response_mask,
        ref_logprobs=batch.ref_logprobs,
    )
    assert res.coefficients["kl"] == pytest.approx(0.04)
    x = batch.logprobs - batch.ref_logprobs
    k3 = (torch.exp(-x) - 1 + x) * batch.response_mask  # the loss's KL is k3 in every dialect
    torch.testing.assert_close(res.per_token["kl"], k3, atol=1e-15, rtol=0)
    assert not old.kept.logical_not().any()
    assert new.kept.tolist() == [True, True, False, False]
    assert new.filtered == ("solved",)
    assert diff.samples["filtered [ScaleRL]"].tolist() == [False, False, True, True]
    assert diff.samples["filtered [prime-rl]"].tolist() == [False, False, True, True]
    assert not diff.samples["filtered [Tinker]"].any()


def test_trl_by_hand():
    batch = _batch()
    diff = era_diff.diff_eras(batch, "trl")
    s = diff.samples
    # 2024: group std (ddof 1) of [1, 0] = sqrt(1/2), TRL eps 1e-4; "solved" gets 0
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert s["A [2024]"].tolist() == pytest.approx([a, -a, 0.0, 0.0], abs=1e-12)
    # seq-mean-token-mean over all 4 rows: policy term 0 on policy; KL = 0.04 * mean_i mean_t k3
    d = batch.logprobs - batch.ref_logprobs  # k3(d) = exp(-d) - 1 + d
    k3 = [[_k3(float(d[b, t])) for t in range(2)] for b in range(4)]
    row = [k3[0][0], (k3[1][0] + k3[1][1]) / 2, k3[2][0], k3[3][0]]
    old = diff.runs["grpo_2024"]
    assert old.kl_term == pytest.approx(0.04 * sum(row) / 4, abs=1e-15)
    assert old.policy_term == pytest.approx(0.0, abs=1e-15)
    assert s["denominator [2024]"].tolist() == [4.0, 8.0, 4.0, 4.0]
    # 2026: "solved" dropped; batch std of the kept rewards [1, 0] = sqrt(1/2); token mean of 3
    new = diff.runs["scalerl_olmo3"]
    assert s["A [ScaleRL]"].tolist()[:2] == pytest.approx([a, -a], abs=1e-12)
    assert new.loss == pytest.approx(-(a * 1 - a * 2) / 3, abs=1e-12)
    assert s["denominator [ScaleRL]"].tolist()[:2] == [3.0, 3.0]
    assert new.grad[1].tolist() == pytest.approx([a / 3, a / 3], abs=1e-12)
    assert "3 tokens" in new.denominator


def _loop_loss_2026_token_mean(batch, kept, adv):
    """Plain loops: -sum over kept tokens of A (ratio 1) / number of kept tokens."""
    num, den = 0.0, 0
    for b in range(batch.scores.shape[0]):
        if not kept[b]:
            continue
        for t in range(batch.response_mask.shape[1]):
            if batch.response_mask[b, t]:
                num += -float(adv[b, t])
                den += 1
    return num / den


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_2026_loss_matches_the_loop_and_autograd(fw):
    gen = torch.Generator().manual_seed(1)
    B, T = 9, 5
    lengths = torch.tensor([2, 5, 3, 4, 1, 5, 2, 3, 4])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F)
    lp = -1.0 + 0.3 * torch.randn(B, T, generator=gen, dtype=F)
    batch = Batch(
        scores=torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0], dtype=F),
        response_mask=mask,
        group_ids=torch.arange(3).repeat_interleave(3),
        logprobs=lp,
        ref_logprobs=lp + 0.1,
    )
    new = era_diff.run_era(batch, ERAS["defaults_2026"], fw)
    assert new.kept.tolist() == [True] * 3 + [False] * 3 + [True] * 3
    assert new.loss == pytest.approx(
        _loop_loss_2026_token_mean(batch, new.kept, new.advantages), abs=1e-12
    )
    sub = era_diff.subset(batch, new.kept)
    logp = sub.logprobs.clone().requires_grad_(True)
    res = policy_loss(
        fw,
        new.config,
        logprobs=logp,
        old_logprobs=sub.logprobs,
        advantages=new.trace.advantages,
        response_mask=sub.response_mask,
        ref_logprobs=sub.ref_logprobs,
    )
    res.total.backward()
    torch.testing.assert_close(new.grad[new.kept], logp.grad, atol=1e-12, rtol=0)
    assert new.grad[~new.kept].abs().sum() == 0


def test_clip_higher_shows_with_a_moved_policy():
    batch = _batch()
    moved = batch.logprobs.clone()
    moved[0, 0] += math.log(1.25)  # ratio 1.25 on a token with A > 0: clipped at 1.2, not 1.28
    ref = batch.ref_logprobs.clone()
    ref[0, 0] = moved[0, 0]  # no KL slope there, so the 2024 gradient is the policy's alone
    batch = Batch(**{**batch.__dict__, "ref_logprobs": ref})
    diff = era_diff.diff_eras(batch, "trl", new_logprobs=moved)
    assert diff.runs["grpo_2024"].grad[0, 0] == 0
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert float(diff.runs["scalerl_olmo3"].grad[0, 0]) == pytest.approx(-a * 1.25 / 3, 1e-12)


def test_everything_filtered_is_not_an_error():
    batch = _batch()
    batch = Batch(**{**batch.__dict__, "scores": torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=F)})
    new = era_diff.diff_eras(batch, "verl").runs["scalerl_olmo3"]
    assert new.loss == 0.0
    assert new.trace is None
    assert "no answer left" in new.denominator


def test_notes_say_what_a_dialect_cannot_express():
    new = ERAS["defaults_2026"]
    for fw in ("verl", "openrlhf"):
        assert any("cannot" in n for n in new.dialect_notes(fw))
    assert any("has none" in n for n in new.dialect_notes("trl"))
    assert any("use_bias_correction_kl" in n for n in ERAS["grpo_2024"].dialect_notes("trl"))
    with pytest.raises(ValueError, match="framework"):
        new.config("nemo")


def test_needs_logprobs():
    batch = _batch()
    batch = Batch(**{**batch.__dict__, "logprobs": None, "ref_logprobs": None})
    with pytest.raises(ValueError, match="logprobs"):
        era_diff.diff_eras(batch, "roll")


def test_maxrl_vs_grpo_by_hand():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=F)
    cmp = era_diff.maxrl_vs_grpo(scores, torch.tensor([0] * 4 + [1] * 4), ("hard", "none"))
    g = cmp.groups.set_index("prompt")
    # p = 1/4: MaxRL (1 - p) / (p + eps), about 3; GRPO (1 - p) / (std + eps), std = 1/2
    assert g.loc["hard", "A right, MaxRL"] == pytest.approx(0.75 / (0.25 + 1e-6), abs=1e-12)
    assert g.loc["hard", "A right, GRPO"] == pytest.approx(0.75 / (0.5 + 1e-6), abs=1e-12)
    assert math.isnan(g.loc["none", "A right, MaxRL"])
    want = [x / (0.25 + 1e-6) for x in (0.75, -0.25, -0.25, -0.25)]
    assert cmp.samples["A MaxRL"].tolist()[:4] == pytest.approx(want, abs=1e-12)
    assert cmp.samples["A MaxRL"].tolist()[4:] == [0.0] * 4


def _loop_loss_2024(batch, adv, kl_per_answer):
    """Plain loops: mean over answers of each answer's token mean of -A, plus 0.04 * k3 averaged
    per answer the same way, or over all tokens (OpenRLHF's KL loss is always a token mean)."""
    pg, kl_rows, kl_tokens, rows, tokens = 0.0, 0.0, 0.0, 0, 0
    for b in range(batch.scores.shape[0]):
        a_terms, k_terms = [], []
        for t in range(batch.response_mask.shape[1]):
            if batch.response_mask[b, t]:
                d = float(batch.logprobs[b, t] - batch.ref_logprobs[b, t])
                a_terms.append(-float(adv[b, t]))
                k_terms.append(_k3(d))
        if a_terms:
            pg += sum(a_terms) / len(a_terms)
            kl_rows += sum(k_terms) / len(k_terms)
            kl_tokens += sum(k_terms)
            rows += 1
            tokens += len(k_terms)
    kl = kl_rows / rows if kl_per_answer else kl_tokens / tokens
    return pg / rows + 0.04 * kl


@pytest.mark.parametrize(
    ("fw", "kl_per_answer"),
    [("roll", True), ("verl", True), ("openrlhf", False), ("trl", True)],
)
def test_2024_loss_matches_the_loop(fw, kl_per_answer):
    gen = torch.Generator().manual_seed(4)
    lengths = torch.tensor([2, 5, 3, 4, 1, 5])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).to(F)
    lp = -1.0 + 0.3 * torch.randn(6, 5, generator=gen, dtype=F)
    batch = Batch(
        scores=torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0], dtype=F),
        response_mask=mask,
        group_ids=torch.arange(2).repeat_interleave(3),
        logprobs=lp,
        ref_logprobs=lp + 0.2 * torch.randn(6, 5, generator=gen, dtype=F),
    )
    old = era_diff.run_era(batch, ERAS["grpo_2024"], fw)
    want = _loop_loss_2024(batch, old.advantages, kl_per_answer)
    assert old.loss == pytest.approx(want, abs=1e-12)
    assert old.kl_term == pytest.approx(float(old.kl_share.sum()), abs=1e-15)


def test_long_samples_is_the_wide_table_one_row_per_answer_and_recipe():
    batch = _batch()
    diff = era_diff.diff_eras(batch, "verl", eras=("tinker", "grpo_2024"))
    long = era_diff.long_samples(diff)
    assert len(long) == 4 * 2
    assert long["sample"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert long["recipe"].tolist()[:2] == ["Tinker", "GRPO as published (2024)"]
    row = long[(long["sample"] == 1) & (long["recipe"] == "Tinker")].iloc[0]
    assert row["A"] == diff.samples.loc[1, "A [Tinker]"] == pytest.approx(-0.5, abs=1e-12)
    assert row["loss weight"] == 2.0  # verl token-sum: each of its 2 tokens weighs 1
    assert list(long.columns) == ["sample", "prompt", "score", "recipe", *era_diff.ANSWER_COLUMNS]
