"""Scoring kernels against plain loops, and block splitting that never changes a number."""

import math

import torch

from roll_viz.lm import scoring
from roll_viz.lm.scoring import (
    default_block_rows,
    entropy_from_logprobs,
    exact_kl,
    logprobs_from_logits,
    score_positions,
)


def test_kl_and_entropy_match_plain_loops():
    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(3, 7, generator=g), -1)
    logq = torch.log_softmax(torch.randn(3, 7, generator=g), -1)
    for i in range(3):
        kl = sum(
            math.exp(a) * (a - b) for a, b in zip(logp[i].tolist(), logq[i].tolist(), strict=True)
        )
        ent = -sum(math.exp(a) * a for a in logp[i].tolist())
        assert abs(exact_kl(logp, logq)[i].item() - kl) < 1e-6
        assert abs(entropy_from_logprobs(logp)[i].item() - ent) < 1e-6
    assert torch.equal(exact_kl(logp, logp), torch.zeros(3))


def test_sum_pi2_by_hand_and_by_loop():
    # p = (1/2, 1/4, 1/4): sum p^2 = 1/4 + 1/16 + 1/16 = 3/8
    head = torch.nn.Linear(1, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[math.log(2.0)], [0.0], [0.0]]))
        out = score_positions(head, torch.ones(1, 1), None, torch.tensor([0]), k=2)
    assert abs(out.sum_pi2.item() - 3 / 8) < 1e-6
    g = torch.Generator().manual_seed(4)
    hp = torch.randn(6, 1, generator=g)
    with torch.no_grad():
        got = score_positions(head, hp, None, torch.zeros(6, dtype=torch.long), k=2).sum_pi2
        logits = head(hp)
    for i in range(6):
        z = [math.exp(v) for v in logits[i].tolist()]
        assert abs(got[i].item() - sum((v / sum(z)) ** 2 for v in z)) < 1e-6


def test_hand_sized_kl():
    # p = (1/2, 1/2), q = (1/4, 3/4): KL = 0.5 ln 2 + 0.5 ln(2/3)
    logp = torch.tensor([[math.log(0.5), math.log(0.5)]])
    logq = torch.tensor([[math.log(0.25), math.log(0.75)]])
    expected = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    assert abs(exact_kl(logp, logq).item() - expected) < 1e-6
    assert abs(entropy_from_logprobs(logp).item() - math.log(2)) < 1e-6


def test_temperature_scales_logits():
    logits = torch.tensor([[0.0, 2.0]])
    lp = logprobs_from_logits(logits, temperature=2.0)
    expected = torch.log_softmax(torch.tensor([[0.0, 1.0]]), -1)
    torch.testing.assert_close(lp, expected)


def test_blocks_do_not_change_results():
    g = torch.Generator().manual_seed(1)
    head = torch.nn.Linear(4, 11, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(11, 4, generator=g))
    hp, hr = torch.randn(10, 4, generator=g), torch.randn(10, 4, generator=g)
    targets = torch.randint(0, 11, (10,), generator=g)
    with torch.no_grad():
        whole = score_positions(head, hp, hr, targets, temperature=0.7, k=3, block_rows=10)
        blocks = score_positions(head, hp, hr, targets, temperature=0.7, k=3, block_rows=3)
        auto = score_positions(head, hp, hr, targets, temperature=0.7, k=3)
        same = score_positions(head, hp, None, targets, temperature=0.7, k=3, block_rows=4)
    # equal up to float summation order (a block's shape may change the vectorised reduction)
    for name in ("logprobs", "ref_logprobs", "kl", "entropy", "topk_logprobs", "topk_ref_logprobs"):
        torch.testing.assert_close(getattr(whole, name), getattr(blocks, name), atol=1e-6, rtol=0)
        torch.testing.assert_close(getattr(whole, name), getattr(auto, name), atol=1e-6, rtol=0)
    assert torch.equal(whole.topk_ids, blocks.topk_ids)
    lp = torch.log_softmax(head(hp).detach() / 0.7, -1)
    torch.testing.assert_close(whole.logprobs, lp.gather(-1, targets[:, None])[:, 0])
    assert torch.equal(same.kl, torch.zeros(10))
    assert torch.equal(same.logprobs, same.ref_logprobs)
    assert whole.topk_ids.shape == (10, 3)


def test_empty_and_block_size():
    head = torch.nn.Linear(4, 5, bias=False)
    out = score_positions(head, torch.zeros(0, 4), None, torch.zeros(0, dtype=torch.long), k=2)
    assert out.logprobs.shape == (0,)
    assert out.topk_ids.shape == (0, 2)
    assert default_block_rows(49152) * 49152 * 24 <= 256 * 2**20
    assert default_block_rows(10**12) == 1


def test_shared_context_scoring_matches_full_teacher_forcing(tiny, steered):
    rows = [[1, 5, 9, 12], [1, 5, 9, 12], [1, 7, 12], [1, 7, 12], [1, 5, 9, 12]]
    token_ids = torch.tensor([[40, 41, 42], [43, 44, 0], [45, 46, 47], [48, 0, 0], [49, 50, 51]])
    mask = token_ids != 0
    with tiny.lock, torch.inference_mode():
        full = scoring.response_hidden(tiny, rows, token_ids, mask)
        shared = scoring.shared_context_hidden(tiny, rows, token_ids, mask)
    assert shared.shape == full.shape == (5, 3, 64)
    torch.testing.assert_close(shared[mask], full[mask], atol=1e-5, rtol=1e-5)


def test_sub_rows_keep_every_bit(monkeypatch):
    g = torch.Generator().manual_seed(2)
    head = torch.nn.Linear(4, 13, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(13, 4, generator=g))
    hp, hr = torch.randn(21, 4, generator=g), torch.randn(21, 4, generator=g)
    targets = torch.randint(0, 13, (21,), generator=g)
    with torch.no_grad():
        sub = score_positions(head, hp, hr, targets, temperature=0.7, k=3, block_rows=10)
        monkeypatch.setattr(scoring, "SUB_ROWS", 10**6)  # the whole block in one pass
        whole = score_positions(head, hp, hr, targets, temperature=0.7, k=3, block_rows=10)
    names = ("logprobs", "ref_logprobs", "kl", "entropy", "topk_ids", "topk_logprobs")
    for name in (*names, "topk_ref_logprobs"):
        # every per-vocabulary operation works row by row: splitting rows changes no bit
        assert torch.equal(getattr(sub, name), getattr(whole, name)), name
