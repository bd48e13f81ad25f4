"""Loss masks over multi-turn transcripts: each rule against a brute-force reading of its thread,
the loss and its closed-form gradient against autograd, the broken causal context, and the
extension property (re-encoding changes exactly the marked positions; sampled tokens are never
re-encoded).

The brute-force readings walk the segments of each episode with plain Python and share no code
with ``roll_viz.core.agentic.masks``.
"""

from __future__ import annotations

import random

import pytest
import torch

from roll_viz.core.agentic.episode import Episode, Segment
from roll_viz.core.agentic.extension import check_extension, per_turn_samples, strip_think
from roll_viz.core.agentic.masks import (
    MASK_RULES,
    MAX_EPISODES,
    attention_breaks,
    batch_episodes,
    grad_coefficients,
    pg_loss,
    rule_effects,
    rule_mask,
)

EOS = 0


def calc_episode(think: bool = True) -> Episode:
    """A 3-turn calculator episode: prompt (5 tokens), 3 assistant turns, 2 tool answers."""
    first = "<think>product first</think>\ncalc 3*4" if think else "calc 3*4"
    return Episode(
        "calc-1",
        "calculator",
        (
            Segment("system", "You add.", (1, 2, 3), -1),
            Segment("user", "(3*4)+5?", (4, 5), -1),
            Segment(
                "assistant",
                first,
                (10, 11, 12, EOS),
                0,
                True,
                (-0.5, -0.25, -1.0, -0.125),
                tool_call="calc 3*4",
            ),
            Segment("tool", "12", (20, 21), 0),
            Segment(
                "assistant",
                "calc 12+5",
                (13, 14, EOS),
                1,
                True,
                (-1.0, -0.5, -0.25),
                tool_call="calc 12+5",
            ),
            Segment("tool", "17", (22, 23, 24), 1),
            Segment("assistant", "17", (15, EOS), 2, True, (-0.75, -0.5)),
        ),
        1.0,
    )


def short_episode() -> Episode:
    return Episode(
        "calc-1",
        "calculator",
        (
            Segment("user", "2+2?", (4, 6), -1),
            Segment("assistant", "4", (16, EOS), 0, True, (-0.2, -0.1)),
        ),
        0.0,
    )


def history_episode() -> Episode:
    """A dataset conversation: an earlier assistant turn given, not sampled (turn 0)."""
    return Episode(
        "chat",
        "chat",
        (
            Segment("user", "hi", (4,), -1),
            Segment("assistant", "hello", (30, EOS), 0),
            Segment("user", "sum?", (5,), 0),
            Segment("assistant", "3", (31, EOS), 1, True, (-0.3, -0.4)),
        ),
        1.0,
    )


def toy_reencode(text: str) -> list[int]:
    """A tokenizer-free re-encoding: one id per word, then three template ids (longer)."""
    return [1000 + len(w) for w in text.split()] + [7, 8, 9]


# --------------------------------------------------------------------------- brute force


def brute(episode: Episode, rule: str, eos: int | None = EOS, reencode=toy_reencode) -> list[bool]:
    """Each rule read straight off its thread, one token at a time."""
    if rule == "tool_mask_misaligned":
        return brute_misaligned(episode, reencode)
    out = []
    started = False
    last = max(s.turn for s in episode.segments if s.role == "assistant" and s.sampled)
    for seg in episode.segments:
        started = started or seg.sampled
        for tok in seg.token_ids:
            generated = seg.role == "assistant" and seg.sampled
            if rule in ("correct", "mask_as_attention"):
                out.append(generated)
            elif rule == "tool_trained":  # TRL's completion_mask without the tool mask
                out.append(started)
            elif rule == "history_trained":  # every role == "assistant" message
                out.append(seg.role == "assistant")
            elif rule == "last_turn_only":
                out.append(generated and seg.turn == last)
            elif rule == "pad_is_eos":  # mask = ids != pad_id with pad_id == eos
                out.append(generated and (eos is None or tok != eos))
            else:
                raise AssertionError(rule)
    return out


def brute_misaligned(episode: Episode, reencode) -> list[bool]:
    """TRL #5144: the tool mask counts re-tokenised tool calls, cut to the sampled length."""
    out, started = [], False
    for seg in episode.segments:
        started = started or seg.sampled
        n = len(seg.token_ids)
        if started and seg.role == "assistant" and seg.tool_call is not None:
            n = len(reencode(seg.text))
        out += [started and seg.role == "assistant" and seg.sampled] * n
    return out[: len(episode.token_ids)]


EPISODES = [calc_episode(), short_episode(), history_episode()]


@pytest.mark.parametrize("rule", list(MASK_RULES))
def test_each_rule_matches_its_brute_force_reading(rule):
    batch = batch_episodes(EPISODES, pad_id=EOS)
    mask = rule_mask(batch, rule, eos_id=EOS, reencode=toy_reencode)
    for b, episode in enumerate(EPISODES):
        n = len(episode.token_ids)
        assert mask[b, :n].tolist() == brute(episode, rule)
        assert not mask[b, n:].any()  # padding is never trained


def test_the_rules_on_the_calculator_episode_by_hand():
    batch = batch_episodes([calc_episode()])
    row = {
        r: rule_mask(batch, r, eos_id=EOS, reencode=toy_reencode)[0].int().tolist()
        for r in MASK_RULES
    }
    #            prompt     turn 0        tool   turn 1     tool      turn 2
    assert row["correct"] == [0] * 5 + [1] * 4 + [0, 0] + [1] * 3 + [0] * 3 + [1, 1]
    assert row["tool_trained"] == [0] * 5 + [1] * 14
    assert row["history_trained"] == row["correct"]  # nothing given: every assistant turn sampled
    assert row["last_turn_only"] == [0] * 17 + [1, 1]
    assert row["pad_is_eos"] == [0] * 5 + [1, 1, 1, 0] + [0, 0] + [1, 1, 0] + [0] * 3 + [1, 0]
    # turn 0 re-encodes to 7 ids (4 sampled), turn 1 to 5 (3 sampled): the mask is 5 longer
    # than the completion (TRL #5144), and cut to length it trains the tool answer 12 and
    # leaves out the first tokens of turn 1
    assert row["tool_mask_misaligned"] == [0] * 5 + [1] * 7 + [0, 0] + [1] * 5


def test_history_turns_are_trained_only_by_the_nemo_rule():
    batch = batch_episodes([history_episode()])
    assert rule_mask(batch, "correct")[0].int().tolist() == [0, 0, 0, 0, 1, 1]
    assert rule_mask(batch, "history_trained")[0].int().tolist() == [0, 1, 1, 0, 1, 1]


def test_per_turn_samples_train_turn_j_n_minus_j_times_under_the_nemo_rule():
    samples = per_turn_samples(calc_episode())
    assert len(samples) == 3
    batch = batch_episodes(samples)
    counts = {"correct": {}, "history_trained": {}}
    for rule, seen in counts.items():
        mask = rule_mask(batch, rule)
        for b in range(3):
            for t in range(batch.turn.shape[1]):
                if mask[b, t]:
                    seen[int(batch.turn[b, t])] = seen.get(int(batch.turn[b, t]), 0) + 1
    assert counts["correct"] == {0: 4, 1: 3, 2: 2}  # each turn's tokens once
    assert counts["history_trained"] == {0: 3 * 4, 1: 2 * 3, 2: 1 * 2}  # turn j: (3 - j) times
    assert [s.sampled for s in samples[2].segments if s.role == "assistant"] == [False, False, True]


def test_pad_is_eos_needs_the_eos_id():
    batch = batch_episodes([calc_episode()])
    assert torch.equal(rule_mask(batch, "pad_is_eos"), rule_mask(batch, "correct"))
    effects = rule_effects(batch, torch.ones(batch.token_ids.shape, dtype=torch.float64))
    assert "EOS" in effects["pad_is_eos"].note
    assert "tokenizer" in effects["tool_mask_misaligned"].note


def test_attention_breaks_against_a_brute_force_reading():
    batch = batch_episodes(EPISODES)
    for rule in MASK_RULES:
        mask = rule_mask(batch, rule, eos_id=EOS, reencode=toy_reencode)
        broken = attention_breaks(batch, mask)
        for b, episode in enumerate(EPISODES):
            n = len(episode.token_ids)
            hidden, started = [], False
            for seg in episode.segments:
                started = started or seg.sampled
                hidden += [started] * len(seg.token_ids)
            hidden = [h and not m for h, m in zip(hidden, mask[b, :n].tolist(), strict=True)]
            want = [any(hidden[:t]) for t in range(n)]
            assert broken[b, :n].tolist() == want
    calc = attention_breaks(batch, rule_mask(batch, "correct"))[0]
    assert calc.int().tolist() == [0] * 10 + [1] * 9  # every token after the first tool answer


def test_loss_and_gradient_closed_form_match_autograd():
    gen = torch.Generator().manual_seed(3)
    batch = batch_episodes(EPISODES)
    adv = torch.randn(batch.token_ids.shape, generator=gen, dtype=torch.float64)
    for rule in MASK_RULES:
        mask = rule_mask(batch, rule, eos_id=EOS, reencode=toy_reencode)
        logp = torch.randn(batch.token_ids.shape, generator=gen, dtype=torch.float64)
        logp.requires_grad_(True)
        pg_loss(logp, adv, mask).backward()
        assert torch.allclose(logp.grad, grad_coefficients(adv, mask), atol=1e-12, rtol=0)


def test_loss_by_hand_and_the_rule_effects():
    episode = calc_episode()
    batch = batch_episodes([episode])
    adv = torch.full(batch.token_ids.shape, 2.0, dtype=torch.float64)
    effects = rule_effects(batch, adv, eos_id=EOS, reencode=toy_reencode)
    lps = [x for s in episode.segments if s.logprobs for x in s.logprobs]
    # L = -sum(A log pi) / n = -2 * sum(lps) / 9
    assert effects["correct"].loss == pytest.approx(-2 * sum(lps) / 9, abs=1e-12)
    assert effects["correct"].n_trained == 9
    # tool output has no sampling log-prob: no loss without the model's log-probs
    assert effects["tool_trained"].loss is None
    assert effects["tool_trained"].scale == pytest.approx(9 / 14)
    assert int(effects["tool_trained"].added.sum()) == 5
    # dropping the three EOS: the other six tokens each get 9/6 of their gradient
    pad = effects["pad_is_eos"]
    assert int(pad.removed.sum()) == 3
    assert pad.scale == pytest.approx(1.5)
    kept = pad.mask & ~pad.removed
    assert torch.allclose(pad.grad[kept], torch.full_like(pad.grad[kept], -2 / 6))
    assert torch.allclose(pad.grad_error[pad.removed], torch.full((3,), 2 / 9, dtype=torch.float64))
    assert int(effects["mask_as_attention"].broken.sum()) == 9
    assert not effects["correct"].broken.any()


def test_model_logprobs_give_every_rule_a_loss():
    batch = batch_episodes(EPISODES)
    adv = torch.ones(batch.token_ids.shape, dtype=torch.float64)
    logp = -torch.ones(batch.token_ids.shape, dtype=torch.float64)
    for name, effect in rule_effects(batch, adv, logprobs=logp, eos_id=EOS).items():
        # -sum(1 * -1) / n = 1 for every non-empty mask
        assert effect.loss == pytest.approx(1.0), name


def test_batch_keeps_the_sampled_tokens_and_bounds_its_input():
    calls = []

    def spy(text):
        calls.append(text)
        return toy_reencode(text)

    batch = batch_episodes(EPISODES, pad_id=7)
    rule_mask(batch, "correct", reencode=spy)
    assert calls == []  # building the batch and the correct mask re-encode nothing
    for b, episode in enumerate(EPISODES):
        n = len(episode.token_ids)
        assert tuple(batch.token_ids[b, :n].tolist()) == episode.token_ids
        assert set(batch.token_ids[b, n:].tolist()) <= {7}
    assert batch.last_turn.tolist() == [2, 0, 1]
    seg = batch_episodes(EPISODES, unit="segment")
    assert seg.token_ids.shape == (3, 7)
    assert rule_mask(seg, "correct")[0].int().tolist() == [0, 0, 1, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="cap"):
        batch_episodes([short_episode()] * (MAX_EPISODES + 1))
    with pytest.raises(ValueError, match="no episodes"):
        batch_episodes([])
    with pytest.raises(KeyError, match="known"):
        rule_mask(batch, "nope")


# --------------------------------------------------------------------------- extension property


def test_strip_think_follows_the_qwen3_template():
    assert strip_think("<think>a</think>\n\nanswer") == "answer"
    assert strip_think("<think>a</think>b</think>\nc") == "c"
    assert strip_think("no tags") == "no tags"


def test_reencoding_that_gives_the_same_tokens_marks_nothing():
    episode = calc_episode()
    table = {s.text: s.token_ids for s in episode.segments}
    report = check_extension(episode, lambda text: table[text], transform=lambda t: t)
    assert report.holds
    assert report.n_differing == 0
    assert report.first_difference is None
    assert [c.equal for c in report.segments] == [True, True]  # turns 0 and 1; the last is kept


def test_think_stripping_changes_exactly_the_marked_positions():
    episode = calc_episode()
    table = {s.text: s.token_ids for s in episode.segments}
    table["calc 3*4"] = (10, 12)  # turn 0 without its reasoning: 2 tokens instead of 4
    report = check_extension(episode, lambda text: table[text])
    assert report.segments[0].sampled == (10, 11, 12, EOS)
    assert report.segments[0].rendered == (10, 12)
    assert report.segments[0].differs == (False, True, True, True)
    assert report.segments[1].equal
    # the transcript: equal up to position 6, then every later position shifted by two
    assert report.first_difference == 6
    for i, d in enumerate(report.differs):
        a = report.sampled[i] if i < len(report.sampled) else None
        b = report.rendered[i] if i < len(report.rendered) else None
        assert d == (a != b)
    assert len(report.rendered) == len(report.sampled) - 2
    assert episode == calc_episode()  # the episode itself is untouched


def test_random_reencodings_mark_exactly_the_differing_positions():
    rng = random.Random(5)
    episode = calc_episode()
    for _ in range(50):
        table = {
            s.text: tuple(rng.choice((t, t, 99)) for t in s.token_ids) for s in episode.segments
        }
        report = check_extension(episode, lambda text, table=table: table[text], lambda t: t)
        changed = set()
        for check in report.segments:
            changed |= {check.start + i for i, d in enumerate(check.differs) if d}
        assert {i for i, d in enumerate(report.differs) if d} == changed  # same lengths: exact
