"""verl PF-PPO (``algorithm.use_pf_ppo``): the row weights, the seeded draw and what each trainer
trains on, against hand numbers and plain-loop oracles that share no code with the package.

verl (``core_algos.compute_pf_ppo_reweight_data``, called in ``ray_trainer.compute_advantage``'s
gae branch only): weights from ``token_level_scores.sum(-1)``, ``clamp(w + 1e-8, min=1e-8)``,
``torch.multinomial(w, B, replacement=True)``. The legacy trainer trains on the drawn rows; the
v1 trainer writes the drawn rows' advantages and returns back onto the batch's own rows.
"""

import math

import pytest
import torch

from roll_viz.cli import calculator
from roll_viz.core.pipeline import policy_loss, run
from roll_viz.core.pipeline.dialects import verl_pf_ppo as pf
from roll_viz.core.records import Batch, trace_to_dict

F64 = torch.float64
LENGTHS = [3, 1, 4, 2, 4, 2]
B, T = len(LENGTHS), 4
MASK = torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in LENGTHS], dtype=F64)
SCORES = torch.tensor([1.0, -0.5, 0.25, 1.0, 0.0, -0.5], dtype=F64)
VALUES = torch.tensor([[0.1 * (i + 1) - 0.05 * t for t in range(T)] for i in range(B)], dtype=F64)
BATCH = Batch(
    scores=SCORES,
    response_mask=MASK,
    group_ids=torch.tensor([0, 0, 0, 1, 1, 1]),
    values=VALUES * MASK,
)


def _oracle_weights(scores, method, power):
    """compute_weights + clamp(w + 1e-8, min=1e-8), one row at a time."""
    s = [float(x) for x in scores]
    top, bottom = max(s), min(s)
    out = []
    for x in s:
        if method == "pow":
            w = abs(x) ** power
        elif method == "max_min":
            w = 1.0 if x in (top, bottom) else 0.0
        else:
            w = 0.4 if x == top else 0.1
        out.append(max(w + 1e-8, 1e-8))
    return out


def _oracle_draw(weights, seed):
    """Inverse CDF on the uniform doubles the same generator gives, one draw at a time."""
    u = torch.rand(len(weights), generator=torch.Generator().manual_seed(seed), dtype=F64)
    total = sum(weights)
    rows = []
    for x in u.tolist():
        acc, pick = 0.0, len(weights) - 1
        for j, w in enumerate(weights):
            acc += w / total
            if acc > x:
                pick = j
                break
        rows.append(pick)
    return rows


def test_weights_hand_numbers():
    s = torch.tensor([2.0, -1.0, 0.0, 0.5], dtype=F64)
    eps = 1e-8
    assert pf.weights(s, "pow", 2.0).tolist() == pytest.approx([4 + eps, 1 + eps, eps, 0.25 + eps])
    assert pf.weights(s, "pow", 1.0).tolist() == pytest.approx([2 + eps, 1 + eps, eps, 0.5 + eps])
    # max 2.0 and min -1.0 get 1, the others 0
    assert pf.weights(s, "max_min", 2.0).tolist() == pytest.approx([1 + eps, 1 + eps, eps, eps])
    tied = torch.tensor([1.0, 0.0, 1.0, 0.5], dtype=F64)
    assert pf.weights(tied, "max_random", 2.0).tolist() == pytest.approx(
        [0.4 + eps, 0.1 + eps, 0.4 + eps, 0.1 + eps]
    )
    assert pf.weights(s, "pow", 2.0)[2].item() == 1e-8  # the clamp's floor, exactly


@pytest.mark.parametrize("method", ["pow", "max_min", "max_random"])
@pytest.mark.parametrize("power", [2.0, 0.5, 3.0])
def test_weights_match_the_loop_oracle(method, power):
    g = torch.Generator().manual_seed(7)
    s = torch.randn(11, generator=g, dtype=F64)
    s[3] = s[8] = s.max()  # a tie at the max
    got = pf.weights(s, method, power).tolist()
    assert got == pytest.approx(_oracle_weights(s, method, power), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("seed", [0, 1, 5, 123])
def test_draw_is_the_inverse_cdf_of_the_generators_uniforms(seed):
    w = _oracle_weights(SCORES, "pow", 2.0)
    rows = pf.draw(torch.tensor(w, dtype=F64), seed).tolist()
    assert rows == _oracle_draw(w, seed)
    assert pf.draw(torch.tensor(w, dtype=F64), seed).tolist() == rows  # seeded: repeatable
    assert SCORES[rows].abs().min() > 0  # a score of 0 has weight 1e-8: practically never drawn


def test_draw_leaves_the_global_rng_alone():
    torch.manual_seed(3)
    before = torch.rand(3, dtype=F64)
    torch.manual_seed(3)
    pf.draw(torch.ones(5, dtype=F64), 0)
    assert torch.equal(torch.rand(3, dtype=F64), before)


def _plain_gae_padding_value():
    """gamma = lam = 1, score on the last token: raw A_t = score - V_t; whitened raw 0."""
    raw = [float(SCORES[i]) - float(VALUES[i, t]) for i in range(B) for t in range(LENGTHS[i])]
    n = len(raw)
    mean = sum(raw) / n
    var = sum((x - mean) ** 2 for x in raw) / (n - 1)
    return -mean / math.sqrt(var + 1e-8)


def test_v1_rows_get_the_drawn_rows_advantages_and_returns():
    plain = run(BATCH, "verl", {})
    trace = run(BATCH, "verl", {"use_pf_ppo": True, "viz_pf_ppo_seed": 4})
    rows = trace.resample.tolist()
    assert rows == _oracle_draw(_oracle_weights(SCORES, "pow", 2.0), 4)
    pad = _plain_gae_padding_value()
    for i in range(B):
        j = rows[i]
        for t in range(T):
            if t >= LENGTHS[i]:
                want_a = want_r = 0.0
            elif t < LENGTHS[j]:
                want_a, want_r = float(plain.advantages[j, t]), float(plain.returns[j, t])
            else:  # past the drawn row's end: its padding
                want_a, want_r = pad, 0.0
            assert float(trace.advantages[i, t]) == pytest.approx(want_a, abs=1e-12)
            assert float(trace.returns[i, t]) == pytest.approx(want_r, abs=1e-12)
    shorter = [i for i in range(B) if LENGTHS[rows[i]] < LENGTHS[i]]
    assert shorter, "the case must draw a shorter row onto a longer one"
    assert torch.equal(trace.token_rewards, plain.token_rewards)  # the rows' own rewards
    assert any("rows drawn (row x times)" in n for n in trace.notes)
    assert trace_to_dict(trace)["resample"] == rows
    assert "resample" not in trace_to_dict(plain)


def test_legacy_trainer_trains_on_the_drawn_rows():
    cfg = {
        "use_pf_ppo": True,
        "use_v1": False,
        "viz_pf_ppo_seed": 2,
        "loss_agg_mode": "seq-mean-token-mean",
    }
    trace = run(BATCH, "verl", cfg)
    plain = run(BATCH, "verl", {})
    assert torch.equal(trace.advantages, plain.advantages)  # the Trace keeps the batch's rows
    rows = trace.resample.tolist()
    g = torch.Generator().manual_seed(9)
    old = (-0.5 - torch.rand(B, T, generator=g, dtype=F64)) * MASK
    lp = (old + 0.3 * torch.randn(B, T, generator=g, dtype=F64)) * MASK
    got = policy_loss(
        "verl",
        cfg,
        logprobs=lp,
        old_logprobs=old,
        advantages=trace.advantages,
        response_mask=MASK,
        resample=trace.resample,
    )
    # plain loop: vanilla PPO clip 0.2, dual clip 3, seq-mean-token-mean over the drawn rows
    total = 0.0
    for j in rows:
        row = []
        for t in range(LENGTHS[j]):
            a = float(trace.advantages[j, t])
            r = math.exp(float(lp[j, t]) - float(old[j, t]))
            loss = max(-a * r, -a * min(max(r, 0.8), 1.2))
            if a < 0:
                loss = min(loss, -a * 3.0)
            row.append(loss)
        total += sum(row) / len(row)
    assert got.total.item() == pytest.approx(total / B, rel=1e-12)
    unsampled = policy_loss(
        "verl", cfg, logprobs=lp, old_logprobs=old, advantages=trace.advantages, response_mask=MASK
    )
    assert unsampled.total.item() != pytest.approx(got.total.item())


def test_only_gae_resamples():
    trace = run(BATCH, "verl", {"use_pf_ppo": True, "adv_estimator": "grpo"})
    assert trace.resample is None
    assert torch.equal(trace.advantages, run(BATCH, "verl", {"adv_estimator": "grpo"}).advantages)
    assert any("gae branch only" in n for n in trace.notes)


def test_refusals():
    with pytest.raises(ValueError, match=r"^use_pf_ppo: together with the decoupled"):
        run(BATCH, "verl", {"use_pf_ppo": True, "rollout_is": "token"})
    with pytest.raises(ValueError, match=r"weight_pow: .* not finite"):
        run(BATCH, "verl", {"use_pf_ppo": True, "weight_pow": -1.0})  # a score of 0
    with pytest.raises(ValueError, match=r"^resample: only verl"):
        policy_loss(
            "roll",
            {},
            logprobs=MASK,
            old_logprobs=MASK,
            advantages=SCORES,
            response_mask=MASK,
            resample=torch.arange(B),
        )


def test_calculator_trains_on_the_drawn_rows_under_the_legacy_trainer():
    """``roll-viz compute``: the output names the rows drawn and its loss is the drawn rows'."""
    old = (-0.5 - 0.1 * MASK.cumsum(-1)) * MASK
    lp = (old + 0.2 * torch.sin(torch.arange(B * T, dtype=F64)).reshape(B, T)) * MASK
    batch = {
        "scores": SCORES.tolist(),
        "response_mask": MASK.tolist(),
        "group": ["a"] * 3 + ["b"] * 3,
        "values": (VALUES * MASK).tolist(),
        "logprobs": lp.tolist(),
        "old_logprobs": old.tolist(),
    }
    cfg = {"framework": "verl", "use_pf_ppo": True, "use_v1": False, "viz_pf_ppo_seed": 4}
    out = calculator.compute({"batch": batch, "config": cfg})
    trace = run(BATCH, "verl", {k: v for k, v in cfg.items() if k != "framework"})
    assert out["resample"] == trace.resample.tolist()
    rows = trace.resample
    drawn = policy_loss(
        "verl",
        {"use_v1": False},
        logprobs=lp[rows],
        old_logprobs=old[rows],
        advantages=trace.advantages[rows],
        response_mask=MASK[rows],
    )
    assert out["loss"]["total"] == pytest.approx(drawn.total.item(), rel=1e-12)
    own = policy_loss(
        "verl", {}, logprobs=lp, old_logprobs=old, advantages=trace.advantages, response_mask=MASK
    )
    assert out["loss"]["total"] != pytest.approx(own.total.item())
