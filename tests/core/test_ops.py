import random

import pytest
import torch

from core import oracles
from core.cases import close
from roll_viz.core import ops


@pytest.mark.parametrize("T", [1, 2, 7, 63, 64, 65, 200, 513])
@pytest.mark.parametrize("discount", [0.0, 0.5, 0.95, 0.99, 1.0])
def test_reverse_discounted_cumsum_matches_loop(T, discount):
    g = torch.Generator().manual_seed(T)
    x = torch.randn(5, T, dtype=torch.float64, generator=g)
    expected = [oracles.reverse_cumsum(row, discount) for row in x.tolist()]
    close(ops.reverse_discounted_cumsum(x, discount), expected, 1e-10)
    close(ops.reverse_discounted_cumsum(x, discount, block=8), expected, 1e-10)


def test_reverse_discounted_cumsum_hand_values():
    x = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    close(ops.reverse_discounted_cumsum(x, 1.0), [[1, 1, 1]])
    close(ops.reverse_discounted_cumsum(x, 0.0), [[0, 0, 1]])
    close(ops.reverse_discounted_cumsum(x, 0.9 * 0.95), [[0.731025, 0.855, 1.0]])
    with pytest.raises(ValueError, match="discount"):
        ops.reverse_discounted_cumsum(x, 1.5)


def test_scan_is_exact_for_discount_one_over_long_rows():
    x = torch.ones(2, 1000, dtype=torch.float64)
    assert ops.reverse_discounted_cumsum(x, 1.0)[0, 0].item() == 1000.0


@pytest.mark.parametrize("seed", range(5))
def test_group_stats_matches_loop(seed):
    rng = random.Random(seed)
    B = rng.randint(1, 30)
    gids = [rng.randrange(6) for _ in range(B)]
    values = [rng.uniform(-5, 5) for _ in range(B)]
    stats = ops.group_stats(torch.tensor(values, dtype=torch.float64), torch.tensor(gids))
    groups = oracles.groups_of(gids)
    for i in range(B):
        xs = [values[j] for j in groups[gids[i]]]
        assert stats.count[i].item() == len(xs)
        assert stats.mean[i].item() == pytest.approx(oracles.mean(xs), abs=1e-12)
        assert stats.sum[i].item() == pytest.approx(sum(xs), abs=1e-12)
        if len(xs) > 1:
            assert stats.std[i].item() == pytest.approx(oracles.std(xs), abs=1e-12)
        else:
            assert torch.isnan(stats.std[i])


def test_group_stats_uses_ids_not_positions():
    values = torch.tensor([1.0, 10.0, 3.0, 30.0], dtype=torch.float64)
    stats = ops.group_stats(values, torch.tensor([0, 1, 0, 1]))
    close(stats.mean, [2.0, 20.0, 2.0, 20.0])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("ddof", "mode"), [(1, "add"), (0, "floor"), (0, "add")])
def test_masked_whiten_matches_loop(seed, ddof, mode):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 6, dtype=torch.float64, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.3).to(torch.float64)
    mask[0, 0] = mask[1, 1] = 1.0
    expected = oracles.whiten(x.tolist(), mask.tolist(), ddof, 1e-8, floor=mode == "floor")
    close(ops.masked_whiten(x, mask, ddof=ddof, eps=1e-8, eps_mode=mode), expected, 1e-10)


def test_masked_whiten_style_table_value():
    returns = torch.tensor([[1.0, 1, 1], [0, 0, 0]], dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.float64)
    assert ops.masked_var(returns, mask).item() == pytest.approx(0.3)
    out = ops.masked_whiten(returns, mask)
    close(out, [[0.9128709, 0.9128709, 0.9128709], [-0.9128709] * 3], 1e-6)


def test_masked_var_needs_two_tokens():
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="at least 2 valid tokens"):
        ops.masked_var(x, torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    assert ops.masked_var(x, torch.tensor([[1.0, 0.0]], dtype=torch.float64), ddof=0) == 0


def test_masked_mean_empty_row_is_zero_and_masks_inf_padding():
    x = torch.tensor([[1.0, float("inf")], [2.0, 4.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    close(ops.masked_mean(x, mask, dim=-1), [1.0, 0.0])
    assert ops.masked_sum(x, mask).item() == 1.0


def test_compact_and_scatter_round_trip():
    x = torch.arange(10, dtype=torch.float64).reshape(2, 5)
    mask = torch.tensor([[1, 0, 1, 0, 1], [0, 0, 0, 0, 0]], dtype=torch.float64)
    xc, mc, order = ops.compact_valid(x, mask)
    close(xc[0, :3], [0, 2, 4])
    close(mc, [[1, 1, 1, 0, 0], [0] * 5])
    close(ops.scatter_back(xc, order), x)


def test_last_token_index():
    mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 0, 0]], dtype=torch.float64)
    assert ops.last_token_index(mask).tolist() == [1, 2, 0]


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_full_vocab_kl_matches_loop(chunk):
    g = torch.Generator().manual_seed(chunk)
    p = torch.randn(2, 5, 11, dtype=torch.float64, generator=g)
    q = torch.randn(2, 5, 11, dtype=torch.float64, generator=g)
    out = ops.full_vocab_kl(p, q, chunk_size=chunk)
    assert out.shape == (2, 5)
    expected = [
        [oracles.full_kl(a, b) for a, b in zip(pr, qr, strict=True)]
        for pr, qr in zip(p.tolist(), q.tolist(), strict=True)
    ]
    close(out, expected, 1e-12)
    assert bool((out >= -1e-15).all())
    close(ops.full_vocab_kl(p, p, chunk), torch.zeros(2, 5), 1e-14)


def test_full_vocab_kl_t7_categorical():
    p = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64).log()
    q = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64).log()
    assert ops.full_vocab_kl(p, q).item() == pytest.approx(0.087659725, abs=1e-9)
