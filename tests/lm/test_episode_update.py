"""The update step on a batch of episodes (``lm.episode_update``) on the tiny model.

- the gradient coefficient per token is the closed form -m_t A_t ratio_t / sum m (autograd),
  exactly 0 outside the mask, with ratios != 1 (recorded log-probs moved on purpose);
- the log-probs are those of a plain forward over the whole transcript (attention = ones on
  real tokens): the loss mask with its holes is not the attention mask (TRL #4974);
- the shared base is unchanged, the step is the adapter's; tool output moves only through
  context under the right mask and gets a gradient under "tool output trained";
- episodes drawn by another model's vocabulary are refused with a message that says so;
- the lm's episodes carry their progress: the running sum of the per-turn progress rewards.
"""

import dataclasses

import pytest
import torch

from roll_viz.core.agentic import masks
from roll_viz.data.recorded_episodes import load_recorded_episodes
from roll_viz.lm import episode_update as episode_update_mod
from roll_viz.lm import rollout
from roll_viz.lm.episode_update import episode_update
from roll_viz.lm.episodes import EpisodeRequest, sample_episodes
from roll_viz.lm.lora import LoraPolicy

REQUEST = EpisodeRequest(
    tasks=("calc-1", "guess-1"), group_size=2, max_turns=3, max_turn_tokens=10, seed=3
)
ASSISTANT = masks.ROLE_INDEX["assistant"]


@pytest.fixture(scope="module")
def drawn(tiny):
    return sample_episodes(tiny, REQUEST)


def _shifted(episodes):
    """The episodes with every recorded log-prob moved by a fixed pattern: ratios != 1."""

    def seg(s, k):
        if s.logprobs is None:
            return s
        lps = tuple(lp + 0.3 * ((i + k) % 3 - 1) for i, lp in enumerate(s.logprobs))
        return dataclasses.replace(s, logprobs=lps)

    return tuple(
        dataclasses.replace(e, segments=tuple(seg(s, k) for k, s in enumerate(e.segments)))
        for e in episodes
    )


def _advantages(shape):
    gen = torch.Generator().manual_seed(11)
    return torch.randn(shape, generator=gen)


def _plain_logprobs(bundle, ids, temperature):
    """log p(token i | tokens < i) for i >= 1: one plain forward of the transcript alone."""
    with bundle.lock, torch.no_grad():
        logits = bundle.model(torch.tensor([list(ids)])).logits[0].float()
    out = [0.0]
    for i in range(1, len(ids)):
        row = logits[i - 1] / temperature
        out.append(float(row[ids[i]] - torch.logsumexp(row, dim=0)))
    return out


def _step(tiny, episodes, rule="correct", lr=1e-2):
    batch = masks.batch_episodes(episodes)
    mask = masks.MASK_RULES[rule].fn(batch, masks.MaskContext())
    adv = _advantages(batch.token_ids.shape)
    with LoraPolicy(tiny, seed=0) as policy:
        got = episode_update(
            policy, episodes, adv, mask, lr=lr, temperature=REQUEST.logprob_temperature
        )
        steps = policy.steps
    return batch, mask, adv, got, steps


def test_grad_coef_is_the_closed_form_and_zero_outside_the_mask(tiny, drawn):
    episodes = _shifted(drawn.episodes)
    _, mask, adv, got, steps = _step(tiny, episodes)
    assert steps == 1
    # a plain loop oracle: old = the episode's recorded log-prob, ratio = exp(logp - old)
    n_mask = sum(
        1 for b in range(mask.shape[0]) for t in range(1, mask.shape[1]) if bool(mask[b, t])
    )
    checked = 0
    for b, ep in enumerate(episodes):
        recorded = [lp for s in ep.segments for lp in (s.logprobs or (None,) * len(s.token_ids))]
        for t in range(len(ep.token_ids)):
            coef = float(got.grad_coef[b, t])
            if t == 0 or not bool(mask[b, t]):
                assert coef == 0.0  # exactly: no gradient outside the mask
                continue
            ratio = torch.exp(torch.tensor(float(got.logprobs_before[b, t]) - recorded[t]))
            want = -float(adv[b, t]) * float(ratio) / n_mask
            assert coef == pytest.approx(want, rel=1e-4, abs=1e-9)
            checked += 1
    assert checked == n_mask > 0
    ratios = got.ratio[got.mask > 0]
    assert float((ratios - 1).abs().max()) > 0.2  # the ratio is really in the coefficient
    want_loss = float((-(got.advantages * got.ratio * got.mask)).sum() / got.mask.sum())
    assert got.loss == pytest.approx(want_loss, rel=1e-5)


def test_logprobs_are_a_plain_full_forward_not_the_loss_mask_as_attention(tiny, drawn):
    _, mask, _, got, _ = _step(tiny, drawn.episodes)
    # old = the recorded sampling log-probs, at the sampling temperature: ratio 1 at the step
    assert bool(got.old_recorded[mask.bool() & got.valid].all())
    ratios = got.ratio[got.mask > 0]
    assert float((ratios - 1).abs().max()) < 1e-3
    for b, ep in enumerate(drawn.episodes):
        plain = _plain_logprobs(tiny, ep.token_ids, REQUEST.logprob_temperature)
        n = len(ep.token_ids)
        assert got.logprobs_before[b, :n].tolist() == pytest.approx(plain, abs=2e-4)
    # the check can fail: the loss mask as attention changes the positions after a tool output
    ep = drawn.episodes[0]
    holes = mask[0, : len(ep.token_ids)].long()
    holes[0] = 1
    with tiny.lock, torch.no_grad():
        cut = tiny.model(torch.tensor([list(ep.token_ids)]), attention_mask=holes[None]).logits[0]
        full = tiny.model(torch.tensor([list(ep.token_ids)])).logits[0]
    assert float((cut - full).abs().max()) > 1e-3


def test_the_base_is_unchanged_and_only_the_adapter_moved(tiny, drawn):
    base = {k: v.detach().clone() for k, v in tiny.model.named_parameters() if "lora" not in k}
    ep = drawn.episodes[0]
    before = _plain_logprobs(tiny, ep.token_ids, 1.0)
    _, _, _, got, _ = _step(tiny, drawn.episodes)
    after_base = dict(tiny.model.named_parameters())
    for name, value in base.items():
        assert torch.equal(after_base[name], value), name
    assert _plain_logprobs(tiny, ep.token_ids, 1.0) == before  # the adapter is gone again
    assert float(got.delta.abs().max()) > 1e-4  # the adapter's step moved the policy
    assert got.grad_norm > 0


def test_tool_output_moves_by_context_only_unless_the_mistake_trains_it(tiny, drawn):
    batch, _, _, right, _ = _step(tiny, drawn.episodes, "correct")
    # the environment's replies (a tool's, or a user's "no call found"), not the worked demo's
    tool = (batch.role != ASSISTANT) & (batch.turn >= 0) & batch.valid
    assert tool.any()
    assert float(right.grad_coef[tool].abs().max()) == 0.0
    assert float(right.delta[tool].abs().max()) > 0.0  # context: the shared weights moved
    _, _, _, wrong, _ = _step(tiny, drawn.episodes, "tool_trained")
    assert float(wrong.grad_coef[tool].abs().min()) > 0.0  # every tool token gets a gradient


def test_bad_input_is_one_clear_error(tiny, drawn):
    batch = masks.batch_episodes(drawn.episodes)
    shape = batch.token_ids.shape
    with LoraPolicy(tiny, seed=0) as policy:
        with pytest.raises(ValueError, match="shape"):
            episode_update(policy, drawn.episodes, torch.zeros(1, 1), torch.ones(shape))
        with pytest.raises(ValueError, match="trains no token"):
            episode_update(policy, drawn.episodes, torch.zeros(shape), torch.zeros(shape))
        recorded = load_recorded_episodes("lookup").batch.episodes  # SmolLM2's ids
        other = masks.batch_episodes(recorded).token_ids.shape
        with pytest.raises(ValueError, match="needs the model that drew these tokens"):
            episode_update(policy, recorded, torch.zeros(other), torch.ones(other))
        assert policy.steps == 0
    assert rollout.episode_update is episode_update  # the door offers it to the pages


def test_progress_is_the_running_sum_of_the_progress_rewards(drawn):
    for ep in drawn.episodes:
        total, want = 0.0, []
        for r in ep.turn_rewards:
            total += r
            want.append(total)
        assert ep.progress == pytest.approx(tuple(want))
        assert len(ep.progress) == ep.n_turns


def test_row_chunks_give_the_one_pass_numbers(tiny, drawn, monkeypatch):
    chunked = _step(tiny, drawn.episodes)[3]
    assert len(episode_update_mod._row_chunks(chunked.valid)) > 1  # the default really chunks
    monkeypatch.setattr(episode_update_mod, "MICRO_TOKENS", 10**9)
    assert len(episode_update_mod._row_chunks(chunked.valid)) == 1
    whole = _step(tiny, drawn.episodes)[3]
    assert torch.allclose(chunked.grad_coef, whole.grad_coef, atol=1e-7)
    assert torch.allclose(chunked.delta, whole.delta, atol=1e-4)
    assert chunked.grad_norm == pytest.approx(whole.grad_norm, rel=1e-4)
