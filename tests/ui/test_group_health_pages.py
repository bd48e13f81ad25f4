"""AppTest: the group-health banner and the 'Recipes of record' switch on batch pages.

Every page that shows a batch draws the banner (one row of chips, a per-prompt popover) and the
recipes switch in the same row; switched on, the page's own numbers appear under each recipe of
record picked (all five by default), with the note that the std is now the minority choice. Runs on
the committed presets (no model): quantum has a two-term reward, so its banner puts each term's
group std next to the combined one.
"""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import nav
from roll_viz.analysis import era_diff, era_pages, group_health
from roll_viz.core.pipeline.eras import ERAS, STD_MINORITY
from roll_viz.core.records import batch_from_rollout
from roll_viz.data.presets import load_preset
from roll_viz.rewards import score_rollout
from roll_viz.ui import frameworks_page as fw_ui
from roll_viz.views import health as health_view
from tests.ui.apptest import open_page

#: page key -> the banner's key on that page (ui.health_banner.batch_health(key=...))
BANNERS = {
    "samples": "samples_health",
    "rewards": "rewards_health",
    "advantages": "adv_health",
    "local_global": "lg_health",
    "sensitivity": "sw_health",
    "update": "upd_health",
    "frameworks": "fw_health",
}


def html_bodies(at: AppTest) -> list[str]:
    """The bodies of every st.html element on the page."""
    return [el.proto.body for el in at.get("html")]


def banner_html(at: AppTest) -> str:
    bodies = [b for b in html_bodies(at) if health_view.CSS_CLASS in b]
    assert len(bodies) >= 1, "no group-health banner"
    return bodies[0]


def era_toggle(at: AppTest, key: str):
    return at.toggle(key=f"{key}_era")


@pytest.mark.parametrize("page", list(BANNERS))
def test_banner_on_every_batch_page(page):
    """The banner counts the preset's groups, and the era switch is off (nothing computed)."""
    at = open_page(page, preset="arithmetic")
    body = banner_html(at)
    _, _, rollout = load_preset("arithmetic")
    health = group_health.group_health(score_rollout(rollout, load_preset("arithmetic")[1]),
                                       rollout.group_ids)  # fmt: skip
    assert f"{health.n_groups} groups:" in body
    for status in ("all-good", "all-bad", "mixed"):
        assert f"{health.counts[status]} {status}" in body
    toggle = era_toggle(at, BANNERS[page])
    assert toggle.value is False
    assert not [d for d in at.dataframe if "quantity" in d.value.columns]


#: every page with the recipes switch: BANNERS, Token KL and Normalisation (their banner keys)
ERA_PAGES = {**BANNERS, "kl": "kl_health", "normalisation": "group_health"}


@pytest.mark.parametrize("page", list(ERA_PAGES))
def test_recipes_switch_shows_the_page_numbers(page):
    """Switched on: the page's quantities under every recipe of record, and the std note."""
    at = open_page(page, preset="arithmetic")
    era_toggle(at, ERA_PAGES[page]).set_value(True).run()
    assert not at.exception, [e.message for e in at.exception]
    tables = [d.value for d in at.dataframe if "quantity" in d.value.columns]
    assert len(tables) == 1
    shown = tables[0]
    assert list(shown["quantity"]) == list(era_pages.PAGE_QUANTITIES[page])
    labels = [era.label for era in ERAS.values()]
    assert [c for c in shown.columns if c not in ("quantity", "what it is")] == labels
    assert any(STD_MINORITY in c.value for c in at.caption)
    if page == "frameworks":
        dialects = [d.value for d in at.dataframe if "dialect" in d.value.columns and
                    "loss [2024]" in d.value.columns]  # fmt: skip
        assert len(dialects) == 1
        assert len(dialects[0]) == 4
        assert {"loss [prime-rl]", "loss [Tinker]", "loss [V3.2]"} <= set(dialects[0].columns)


def test_the_picked_recipes_are_the_columns():
    """Two recipes picked: the table has exactly those columns, their numbers era_pages'."""
    at = open_page("advantages", preset="arithmetic")
    era_toggle(at, "adv_health").set_value(True).run()
    at.session_state["adv_health_eras_pick"] = ["prime_rl", "grpo_2024"]
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    shown = next(d.value for d in at.dataframe if "quantity" in d.value.columns)
    assert list(shown.columns) == ["quantity", ERAS["grpo_2024"].label, "prime-rl", "what it is"]
    row = shown.set_index("quantity").loc["std level"]
    assert (row[ERAS["grpo_2024"].label], row["prime-rl"]) == ("group", "none")


def test_era_numbers_match_the_analysis():
    """The Advantages page's 'max |A|' cells are era_pages' numbers on the preset batch."""
    at = open_page("advantages", preset="arithmetic")
    era_toggle(at, "adv_health").set_value(True).run()
    shown = next(d.value for d in at.dataframe if "quantity" in d.value.columns)
    row = shown.set_index("quantity").loc["max |A|"]
    _, spec, rollout = load_preset("arithmetic")
    batch = batch_from_rollout(rollout, score_rollout(rollout, spec))
    diff = era_diff.diff_eras(batch, "roll", list(rollout.prompts))
    want = era_pages.page_numbers(diff, "advantages", batch.response_mask)
    assert row.to_dict() == want.set_index("quantity").loc["max |A|"].to_dict()


def test_two_term_reward_shows_each_terms_std():
    """quantum scores one_sentence + target_length: both stds sit next to the combined one."""
    at = open_page("samples", preset="quantum")
    body = banner_html(at)
    match = re.search(r"std: reward ([0-9.e+-]+|n/a) · one_sentence ([0-9.e+-]+|n/a) · "
                      r"target_length ([0-9.e+-]+|n/a)", body)  # fmt: skip
    assert match, body
    _, spec, rollout = load_preset("quantum")
    scores = score_rollout(rollout, spec)
    assert float(match.group(1)) == pytest.approx(float(scores.std()), rel=1e-2)


def test_normalisation_and_eras_pages_keep_their_banner():
    """The two pages that had the banner still draw it (now from ui.health_banner)."""
    for page in ("normalisation", "eras"):
        at = open_page(page, preset="arithmetic")
        assert banner_html(at)


def test_frameworks_page_lists_the_2026_additions():
    """The Frameworks page's table names each addition in each framework, with page links."""
    at = open_page("frameworks", preset="arithmetic")
    table = next(d.value for d in at.dataframe if {"what", "ROLL", "TRL"} <= set(d.value.columns))
    assert len(table) == len(fw_ui.ADDITIONS)
    assert any("use_opd" in v for v in table["ROLL"])
    assert any("scale_rewards" in v for v in table["TRL"])
    assert set(table["page"]) <= {p.title for p in nav.PAGES}


def test_frameworks_page_explains_the_recipes_of_record():
    """One row per recipe of record, the std note, and the old name's alias said."""
    at = open_page("frameworks", preset="arithmetic")
    table = next(d.value for d in at.dataframe if "advantage divisor" in d.value.columns)
    assert table["recipe"].tolist() == [e.label for e in ERAS.values()]
    assert table["advantage divisor"].tolist().count("none: r - group mean") == 3
    assert any(STD_MINORITY in i.value for i in at.info)
    assert any("'defaults_2026' is ScaleRL / Olmo 3" in m.value for m in at.markdown)
