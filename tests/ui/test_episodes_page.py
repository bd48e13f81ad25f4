"""AppTest of the Episodes page: its sources, the mask view and its mistakes, the credit rules,
and an ATIF file on the page and on Your run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import nav
from roll_viz.core.agentic import credit, masks
from roll_viz.data import episode_pieces
from roll_viz.data.recorded_episodes import load_recorded_episodes
from roll_viz.ui import episodes_page as page
from tests.ui import apptest

ATIF = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "atif"


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _html(at) -> str:
    return " ".join(str(h.proto.body) for h in at.get("html"))


def test_registered_in_the_page_table():
    entry = nav.page("episodes")
    assert entry.file == "pages/episodes.py"
    assert entry.url_path == "Episodes"
    assert "episodes" in nav.tour()


# ------------------------------------------------------------------ a hand-built set, the views


def _views_app() -> None:
    from dataclasses import replace

    from roll_viz.analysis import episode_sets
    from roll_viz.ui import episodes_page

    one, pieces = episode_sets.make_episode(episode_sets.HISTORY_TRANSCRIPT)
    won = replace(one, turn_rewards=(0.5, 0.0))
    lost = replace(one, outcome=0.0, turn_rewards=(0.5, 0.0))
    short = replace(one, segments=one.segments[:4], outcome=0.0, turn_rewards=(0.0,))
    data = episodes_page.EpisodeSet(
        (won, lost, short),
        (tuple(pieces), tuple(pieces), tuple(pieces[:15])),
        "three hand-built episodes",
        eos_id=episode_sets.eos_id(episode_sets.HISTORY_TRANSCRIPT),
    )
    episodes_page.draw_views(data)


@pytest.fixture
def views():
    at = AppTest.from_function(_views_app, default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_right_mask_trains_the_sampled_tokens_only(views):
    got = _metrics(views)
    # 8 sampled tokens in each full episode, 4 in the short one
    assert got["Tokens trained"] == "20"
    assert got["Gradient on context"] == "0.0%"
    html = _html(views)
    assert "assistant (prompt):" in html  # the history message is drawn as prompt
    assert "&lt;call&gt;" in html
    assert "<call>" not in html


#: episode-level GRPO of the returns 1.5, 0.5, 0 (unbiased std); each row's |A| on its tokens
_R = (1.5, 0.5, 0.0)
_MEAN = sum(_R) / 3
_STD = (sum((r - _MEAN) ** 2 for r in _R) / 2) ** 0.5
_A = [abs(r - _MEAN) / (_STD + 1e-6) for r in _R]


def _share(context: list[int], trained: list[int]) -> str:
    """Share of sum |A| on context tokens, rows (won, lost, short) of tokens each."""
    hit = sum(a * n for a, n in zip(_A, context, strict=True))
    return f"{hit / sum(a * n for a, n in zip(_A, trained, strict=True)):.1%}"


@pytest.mark.parametrize(
    ("label", "trained", "context"),
    [
        # + the tool's 2 tokens in the two full episodes (10, 10, 4 completion tokens)
        ("tool output trained", "24", _share([2, 2, 0], [10, 10, 4])),
        # + the history's 4 tokens in all three (12, 12, 8 assistant tokens)
        ("history turns trained", "32", _share([4, 4, 4], [12, 12, 8])),
        ("last turn only", "12", "0.0%"),
        ("pad == EOS masks the EOS", "15", "0.0%"),
    ],
)
def test_each_mistake_shows_what_it_trains(views, label, trained, context):
    views.radio(key="ep_mask").set_value(label).run()
    assert not views.exception, [e.message for e in views.exception]
    got = _metrics(views)
    assert got["Tokens trained"] == trained
    assert got["Gradient on context"] == context
    assert "trained by the mistake" in _html(views) or "dropped by the mistake" in _html(views)


def test_mask_as_attention_counts_broken_positions(views):
    views.radio(key="ep_mask").set_value("loss mask used as attention mask").run()
    # the shown episode: the tool's second token loses the first, the answer's 4 lose both
    assert _metrics(views)["Positions with broken context"] == "5"


def test_think_template_without_a_tokenizer_says_so(views):
    views.radio(key="ep_mask").set_value("<think> stripped, re-encoded").run()
    assert any("tokenizer" in i.value for i in views.info)


def test_credit_rules_side_by_side_with_their_numbers(views):
    table = next(d.value for d in views.dataframe if "paper or framework" in d.value.columns)
    assert list(table["rule"]) == [r.label for r in credit.CREDIT_RULES.values()]
    assert {"turn 1", "turn 2", "formula", "with these numbers"} <= set(table.columns)
    assert table["with these numbers"].str.len().min() > 5
    stops = next(d.value for d in views.dataframe if "turns taken" in d.value.columns)
    assert list(stops["turns taken"]) == [1, 2]
    assert any("verl #7244" in m.value for m in views.markdown)
    # the chosen rule's formula, as code (plain text)
    assert any("A_t" in c.value for c in views.code)


def test_credit_rule_on_the_tokens_follows_the_pick(views):
    label = credit.CREDIT_RULES["turn_index_sum"].label
    views.selectbox(key="ep_credit").set_value(label).run()
    assert not views.exception
    assert any(label in s.value for s in views.subheader)


def test_episode_picker_moves_the_views_to_that_episode(views):
    views.selectbox(key="ep_row").set_value(3).run()
    assert any(c.value.startswith("3\\: calc") for c in views.caption)
    table = next(d.value for d in views.dataframe if "sampled" in d.value.columns)
    assert len(table) == 4  # the short episode's four segments


# ------------------------------------------------------------------------------- the real page


def test_recorded_episodes_open_by_default_without_the_model():
    at = apptest.open_page("episodes")
    assert at.radio(key="ep_src").value == "recorded"
    assert not at.error, [e.value for e in at.error]
    name = at.selectbox(key="ep_set").value
    first = load_recorded_episodes(name).batch.episodes[0]
    # oracle: the sampled assistant tokens of every recorded episode, counted here
    sampled = sum(
        len(s.token_ids)
        for e in load_recorded_episodes(name).batch.episodes
        for s in e.segments
        if s.role == "assistant" and s.sampled
    )
    assert _metrics(at)["Tokens trained"] == str(sampled)
    assert first.n_turns >= 2  # a real two-to-three-turn tool episode
    html = _html(at)
    assert "tool, turn 1:" in html
    assert "[" not in "".join(episode_pieces.pieces(first))  # every token shown as its text
    assert len(at.get("plotly_chart")) == 2


@pytest.mark.parametrize("name", ["lookup", "guess"])
def test_every_recorded_set_opens(name):
    at = apptest.open_page("episodes", ep_set=name)
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key="ep_set").value == name
    assert int(_metrics(at)["Tokens trained"]) > 0


def test_live_episodes_on_the_tiny_model():
    at = apptest.open_page("episodes", ep_src="live", ep_g="2", ep_turns="2", ep_tokens="8")
    assert at.radio(key="ep_src").value == "live"
    assert any("Sample episodes" in i.value for i in at.info)
    at.button(key="ep_sample").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("sampled live" in c.value for c in at.caption)
    assert int(_metrics(at)["Tokens trained"]) > 0
    assert len(at.get("plotly_chart")) == 2
    # the worked exchange in the prompt holds assistant messages: the history mistake trains them
    right = int(_metrics(at)["Tokens trained"])
    at.radio(key="ep_mask").set_value("history turns trained").run()
    assert int(_metrics(at)["Tokens trained"]) > right


def test_a_bad_link_value_is_named_and_replaced():
    at = apptest.open_page("episodes", ep_src="live", ep_g="99")
    said = " ".join(w.value for w in at.warning)
    assert "ep\\_g\\=99 is not allowed" in said


def test_atif_upload_on_the_page():
    at = apptest.open_page("episodes", ep_src="file")
    up = at.file_uploader(key=page.KEY_UPLOAD)
    up.upload("calculator.json", (ATIF / "calculator.json").read_bytes()).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("calculator.json" in c.value for c in at.caption)
    assert _metrics(at)["Tokens trained"] == "11"


def test_atif_problems_are_named_without_a_server_path():
    at = apptest.open_page("episodes", ep_src="file")
    up = at.file_uploader(key=page.KEY_UPLOAD)
    up.upload("group.jsonl", (ATIF / "group.jsonl").read_bytes()).run()
    said = " ".join(w.value for w in at.warning)
    assert "group.jsonl" in said
    assert "/tmp" not in said
    assert "upload.jsonl" not in said
    assert not at.exception


@pytest.fixture
def no_runs_folder(monkeypatch):
    monkeypatch.delenv("ROLL_VIZ_RUNS", raising=False)


def test_atif_opens_on_your_run(no_runs_folder):
    at = apptest.open_page("your_run")
    up = at.file_uploader(key="run_upload")
    up.upload("calculator.json", (ATIF / "calculator.json").read_bytes()).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(h.value.startswith("Agent trajectories (ATIF)") for h in at.header)
    assert _metrics(at)["Tokens trained"] == "11"
    assert at.radio(key="yr_mask").value == "right mask"
    assert not [e.value for e in at.error]


def test_the_views_read_the_core():
    # the page's choices are the core's rules, each once, plus the re-encoding check
    assert set(page.MASK_CHOICES.values()) == {*masks.MASK_RULES, page.THINK}
    assert set(page.CREDIT_CHOICES.values()) == set(credit.CREDIT_RULES)
    assert re.fullmatch(r"[^:]+", page.DEFAULT_CREDIT)


# ------------------------------------------------------------------ section 4: one update step


def _update_app() -> None:
    """Live tiny-model episodes, half of each group's outcomes set to 1: nonzero advantages."""
    from dataclasses import replace

    from roll_viz.lm.episodes import EpisodeRequest, sample_episodes
    from roll_viz.ui import episodes_page
    from roll_viz.ui.episode_sources import token_pieces
    from roll_viz.ui.flow import ensure_model

    bundle = ensure_model("tiny")
    request = EpisodeRequest(("calc-1",), group_size=2, max_turns=2, max_turn_tokens=8, seed=1)
    drawn = sample_episodes(bundle, request).episodes
    episodes = (replace(drawn[0], outcome=1.0), *drawn[1:])
    data = episodes_page.EpisodeSet(
        episodes,
        tuple(token_pieces(bundle, e) for e in episodes),
        "two tiny-model episodes",
        model="tiny",
        drawn_by=bundle.name,
        temperature=request.logprob_temperature,
    )
    episodes_page.draw_views(data)


def test_update_step_trains_the_replies_only_under_the_mistake():
    at = AppTest.from_function(_update_app, default_timeout=120)
    at.run()
    assert any("Take one update step" in i.value for i in at.info)
    at.button(key="ep_update").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    got = _metrics(at)
    assert got["Gradient on the environment's replies"] == "0"  # the right mask: context only
    assert float(got["Mean |delta log pi|, trained"]) > 0
    assert float(got["Mean |delta log pi|, replies"]) > 0  # moved through the shared weights
    assert "delta log pi (red &lt; 0 &lt; blue)" in _html(at)
    # the mistake: the step is taken again with its mask, and the replies get a gradient
    at.radio(key="ep_mask").set_value("tool output trained").run()
    assert any("Take one update step" in i.value for i in at.info)  # the settings changed
    at.button(key="ep_update").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert float(_metrics(at)["Gradient on the environment's replies"]) > 0


def test_update_step_on_live_episodes_runs():
    at = apptest.open_page("episodes", ep_src="live", ep_g="2", ep_turns="2", ep_tokens="8")
    at.button(key="ep_sample").click().run()
    at.button(key="ep_update").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert "Gradient on the environment's replies" in _metrics(at)


def test_update_step_on_another_models_tokens_says_it_needs_that_model():
    at = apptest.open_page("episodes")  # the recorded episodes: SmolLM2's ids, the tiny model
    at.button(key="ep_update").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("needs the model that drew them" in e.value for e in at.error)
    assert "Gradient on the environment's replies" not in _metrics(at)
