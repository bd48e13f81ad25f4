"""The mismatch lab's sequence rules on a hand-made batch, and their figures."""

from __future__ import annotations

import math

import pytest
import torch

from roll_viz.analysis import mismatch
from roll_viz.analysis import sequence_lab as sl
from roll_viz.views import sequence_charts

F = torch.float64
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
OLD = torch.tensor(
    [[-1.0, -1.0, -1.0, -1.0], [-0.5, -0.5, 0, 0], [-2.0, -0.1, -0.3, -0.4]], dtype=F
)
# row 0: d = -0.1 per token (4 tokens); row 1: d = +0.05; row 2: one token d = -0.5
MU = OLD - torch.tensor([[-0.1] * 4, [0.05, 0.05, 0, 0], [-0.5, 0, 0, 0]], dtype=F)
ADV = torch.tensor([-1.0, -1.0, 1.0], dtype=F)


def _lab(source="bf16", staleness=0.0, **kw):
    lab = mismatch.mismatch_lab(OLD, MU, MASK, ADV, mismatch.Settings(staleness=staleness))
    return sl.sequence_lab(lab, OLD, MU, ADV, sl.SeqSettings(**kw), source)


def test_rows_each_rule_removes_by_hand():
    seq = _lab(opsm_delta=0.05, low=0.8, high=1.25, trm_delta=0.1)
    table = seq.lab.table.set_index("method")
    # OPSM at s = 0: seq KL(mu || pi_old) = mean(mu - old): row 0 +0.1 > 0.05 with A < 0 -> out
    assert int(table.loc["OPSM", "rows removed"]) == 1
    # product: row 0 e^-0.4 = 0.670 < 0.8 -> out; row 2 e^-0.5 = 0.607 -> out; row 1 e^0.1 in
    assert int(table.loc["sequence_mask (product)", "rows removed"]) == 2
    # geometric: e^-0.1 = 0.905, e^0.05, e^-0.125 = 0.882: all in
    assert int(table.loc["Geo-RS (geometric mean)", "rows removed"]) == 0
    # TRM: max k2 = 0.005, 0.00125, 0.125 (row 2's token d = -0.5) -> row 2 out
    assert int(table.loc["TRM (max token k2)", "rows removed"]) == 1
    frame = seq.sequences
    assert frame["product pi_old/mu"].tolist() == pytest.approx(
        [math.exp(-0.4), math.exp(0.1), math.exp(-0.5)]
    )
    assert frame["max token k2"].tolist() == pytest.approx([0.005, 0.00125, 0.125])
    assert frame["trl: OPSM"].tolist() == ["removed", "kept", "kept"]
    # the lab reuses the token lab's plain loss: a rule removing nothing leaves it unchanged
    assert table.loc["Geo-RS (geometric mean)", "loss with"] == pytest.approx(seq.lab.plain.loss)


def test_prime_rl_loss_beside_the_rules_by_hand():
    seq = _lab()
    row = seq.lab.table.set_index("method").loc["default loss (DPPO + KL)"]
    # s = 0: pi_theta = pi_old, d = log pi - log mu = -0.1 x4, +0.05 x2, -0.5, 0, 0, 0; no
    # |p - p_mu| reaches 0.2, so nothing is masked; -A r + 1e-3 d^2 over 10 tokens
    pg = 4 * math.exp(-0.1) + 2 * math.exp(0.05) - (math.exp(-0.5) + 3)
    kl = 1e-3 * (4 * 0.01 + 2 * 0.0025 + 0.25)
    assert int(row["masked"]) == 0
    assert row["loss with"] == pytest.approx((pg + kl) / 10, abs=1e-12)
    assert seq.rule_names[-1] == "prime-rl: default loss (DPPO + KL)"


def test_staleness_drives_opsm():
    # pi_theta = pi_old + s A: A < 0 rows move away from mu, their seq KL grows by s
    seq = _lab(staleness=0.5, opsm_delta=0.3)
    # row 0: 0.1 + 0.5, row 1: -0.05 + 0.5, row 2 (A > 0): 0.5 / 4 - 0.5
    assert seq.sequences["seq KL (mu || pi_theta)"].tolist() == pytest.approx([0.6, 0.45, -0.375])
    assert seq.sequences["trl: OPSM"].tolist() == ["removed", "removed", "kept"]


def test_keep_sampling_rule_only_for_a_truncated_sampler():
    assert len(_lab().rule_names) == 5  # four sequence rules and prime-rl's loss
    seq = _lab(source="top_p")
    assert seq.rule_names[-2] == "deepseek: keep sampling mask"
    keep = seq.lab.corrections[-2]
    # d = log S on a truncated sampler: the term -log S per row is -mean d
    assert seq.sequences["mean -log S"].tolist() == pytest.approx([0.1, -0.05, 0.125])
    assert "mean -log S" not in _lab().sequences.columns
    assert keep.weights[MASK].tolist() == pytest.approx([1.0] * int(MASK.sum()))


def test_grid_marks_the_removed_cells():
    seq = _lab(opsm_delta=0.05, trm_delta=0.1)
    fig = sequence_charts.rows_removed_grid(seq)
    z = fig.data[0].z
    assert z.shape == (3, 5)
    assert z[:, 0].tolist() == [1.0, 0.0, 0.0]  # OPSM removes row 0
    assert z[:, 3].tolist() == [0.0, 0.0, 1.0]  # TRM removes row 2
    ratio = sequence_charts.product_vs_geometric(seq, 0.8, 1.25)
    assert list(ratio.data[1].y) == pytest.approx(
        [math.exp(-0.1), math.exp(0.05), math.exp(-0.125)]
    )


def test_a_token_mask_is_drawn_as_partial():
    # pi_theta far above mu on one token of an A > 0 row: prime-rl's DPPO mask drops it alone
    mu = MU.clone()
    mu[2, 1] = -3.0  # p = e^-0.1 = 0.905 against p_mu = 0.050: p - p_mu > 0.2 with A > 0
    lab = mismatch.mismatch_lab(OLD, mu, MASK, ADV, mismatch.Settings(staleness=0.0))
    seq = sl.sequence_lab(lab, OLD, mu, ADV, sl.SeqSettings(), "bf16")
    assert seq.sequences["prime-rl: default loss (DPPO + KL)"].tolist() == [
        "kept", "kept", "1 tokens",
    ]  # fmt: skip
    z = sequence_charts.rows_removed_grid(seq).data[0].z
    assert z[:, -1].tolist() == [0.0, 0.0, 0.5]
