"""AppTest of the silent-bug gallery page.

Every lesson renders, Reveal shows roll-viz's number, and a link's bad ``bug=`` value gets the
app's notice instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import nav
from roll_viz.analysis import silent_bugs
from roll_viz.ui import silent_bugs_page
from roll_viz.views import silent_bugs_charts

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "pages" / "silent_bugs.py"
TIMEOUT = 120


def open_gallery(**params: str) -> AppTest:
    """The page script on its own (it draws the shared sidebar itself) with ``params``."""
    at = AppTest.from_file(str(PAGE), default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def chosen(at: AppTest) -> str:
    (group,) = [g for g in at.get("button_group") if g.key == silent_bugs_page.KEY_CHOICE]
    return group.value


@pytest.mark.parametrize("bug_id", silent_bugs.IDS)
def test_every_lesson_renders_and_reveals_the_right_number(bug_id):
    bug = silent_bugs.bug(bug_id)
    at = open_gallery(bug=bug_id)
    assert chosen(at) == bug_id
    assert next(s.value for s in at.subheader).replace("\\", "") == bug.title
    # the question comes first: no number before Reveal
    assert not at.metric
    assert not at.get("plotly_chart")
    at.radio(key=f"silent_bug_pick_{bug_id}").set_value((bug.answer + 1) % len(bug.choices))
    at.button(key=f"silent_bug_reveal_{bug_id}").click().run()
    assert not at.exception, [e.message for e in at.exception]
    outcome = bug.compute()
    values = [m.value for m in at.metric]
    assert values == [
        silent_bugs_charts.value_text(outcome.wrong),
        silent_bugs_charts.value_text(outcome.right),
    ]
    assert len(at.get("plotly_chart")) == 1
    assert any(outcome.formula == c.value for c in at.code)
    assert at.warning  # the wrong prediction is named
    # hiding again brings the question back
    at.button(key=f"silent_bug_hide_{bug_id}").click().run()
    assert not at.metric


def test_reveal_shows_roll_viz_number_for_the_2075_lesson():
    at = open_gallery(bug="loo-std")
    at.radio(key="silent_bug_pick_loo-std").set_value(1).run()
    at.button(key="silent_bug_reveal_loo-std").click().run()
    assert [m.value for m in at.metric] == ["-2075", "-0.95"]
    assert any("Right" in s.value for s in at.success)


@pytest.mark.parametrize("bad", ["nope", "<script>alert(1)</script>", "LOO-STD", ""])
def test_bad_link_value_gets_a_notice(bad):
    at = open_gallery(bug=bad)
    if bad == "":
        assert chosen(at) == silent_bugs.IDS[0]
        return
    notices = [w.value for w in at.warning]
    assert any("is not allowed" in n and "using loss" in n for n in notices), notices
    assert chosen(at) == silent_bugs.IDS[0]
    assert silent_bugs_page.KEY_BUG not in at.query_params
    assert not at.error


def test_a_click_writes_the_url():
    at = open_gallery()
    assert silent_bugs_page.KEY_BUG not in at.query_params
    group = next(g for g in at.get("button_group") if g.key == silent_bugs_page.KEY_CHOICE)
    group.set_value("phantom-adv").run()
    assert not at.exception
    assert at.query_params[silent_bugs_page.KEY_BUG] == "phantom-adv"
    assert next(s.value for s in at.subheader).startswith("Phantom")


def test_registered_in_the_page_table_and_opens_through_the_router():
    page = nav.page("silent_bugs")
    assert page.file == "pages/silent_bugs.py"
    at = AppTest.from_file(str(ROOT / nav.ENTRY), default_timeout=TIMEOUT)
    at.run()  # AppTest matches a page with a custom url_path only after a first run
    at.switch_page(page.file)
    at.query_params["bug"] = "cispo-cap"
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert next(t.value for t in at.title).startswith("Silent bugs")
    assert chosen(at) == "cispo-cap"


def test_thread_links_are_github_urls():
    assert silent_bugs_page.thread_links("THUDM/slime#1414, areal-project/AReaL#1673") == [
        ("THUDM/slime#1414", "https://github.com/THUDM/slime/issues/1414"),
        ("areal-project/AReaL#1673", "https://github.com/areal-project/AReaL/issues/1673"),
    ]
    assert silent_bugs_page.thread_links("earlier notes") == []
