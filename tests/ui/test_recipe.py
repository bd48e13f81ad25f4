"""Every link of the README's lecture recipe shows the claim its line makes (tiny live model).

The links are read from the README's table ("Giving a lecture"), so a changed link is tested as
written; each has a claim below, and a link without one fails. The Update line is checked in a
fresh session and after the teacher's warm-up (which must not move the lecture's adapter).
"""

from __future__ import annotations

import json
import re
import urllib.parse
import weakref
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import nav
from roll_viz.lm import warm
from roll_viz.ui import update_page as upd
from tests.ui import apptest
from tests.ui.apptest import estimator_grids, token_reward_grids

README = Path(__file__).resolve().parents[2] / "README.md"
TABLE_TITLE = "**Page order, and the link for each point**"


def recipe_links() -> list[str]:
    """The backticked links of the recipe table's link column, in order."""
    text = README.read_text()
    start = text.index(TABLE_TITLE)
    rows = [r for r in text[start:].split("\n\n")[1].splitlines() if r.startswith("| ")][2:]
    return [link for row in rows for link in re.findall(r"`([^`]+)`", row.split("|")[3])]


def open_link(link: str) -> AppTest:
    """Open a recipe link through the router, as a browser given that URL does."""
    path, _, query = link.lstrip("/").partition("?")
    page = next(p.key for p in nav.PAGES if p.url_path == path)
    params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
    at = apptest.open_page(page, **params)
    assert not at.error, [e.value for e in at.error]
    return at


def charts(at: AppTest) -> dict[str, dict]:
    return {
        el.proto.id.rsplit("-", 1)[-1]: json.loads(el.proto.spec) for el in at.get("plotly_chart")
    }


def frame_with(at: AppTest, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def _home(at: AppTest) -> None:
    assert "The signal chain" in [s.value for s in at.subheader]


def _samples(at: AppTest) -> None:
    answers = frame_with(at, "response")
    assert len(answers) == 8
    assert answers["prompt_id"].nunique() == 1
    assert frame_with(at, "token_id")["logprob"].lt(0).any()  # token surprise -log p > 0


def _rewards(at: AppTest) -> None:
    assert set(frame_with(at, "raw_reward")["raw_reward"]) <= {0.0, 1.0}  # verifiable 0/1


def _token_kl(at: AppTest) -> None:
    kl = frame_with(at, "k3")
    assert kl["exact_kl"].gt(0).all()  # a real KL: the steered policy differs on every answer
    assert {"k1", "k3"} <= set(kl.columns)
    assert "in the reward" in token_reward_grids(at)  # beta in the reward (drawn in the browser)


def _rows(at: AppTest) -> list[list[float]]:
    grid = next(iter(estimator_grids(at).values()))
    return [[v for v in row if v is not None] for row in grid]


def _advantages_grpo(at: AppTest) -> None:
    assert all(max(r) - min(r) < 1e-6 for r in _rows(at) if r)  # one number per answer


def _advantages_gae(at: AppTest) -> None:
    assert any(max(r) - min(r) > 1e-3 for r in _rows(at) if r)  # one per token


def _local_global(at: AppTest) -> None:
    table = frame_with(at, "local advantage")
    assert {8.2, 6.5, 9.1} <= {round(float(r), 1) for r in table["reward"]}
    glob = next(c for c in table.columns if "global" in c)
    assert (table["local advantage"] - table[glob]).abs().max() > 0.1  # local amplifies


def _normalisation(at: AppTest) -> None:
    line = next(m.value for m in at.markdown if m.value.startswith("All-fail group"))
    group, batch = (float(x) for x in re.findall(r"under (?:the )?\w+ std \*\*([\d.]+)", line))
    assert group > 10 * batch  # the group std turns length noise into a full-size advantage


def _step(at: AppTest) -> AppTest:
    at.button(key=upd.KEY_STEP).click().run()
    assert not at.exception
    assert not at.error
    return at


def _update_zero_loss(at: AppTest) -> None:
    statement = " ".join(i.value for i in _step(at).info)
    assert "Epoch 1: policy loss = 0 (to rounding" in statement
    assert "the gradient is not" in statement
    assert re.search(r"gradient norm is \*\*(?!0\*\*)[0-9.e-]+\*\*", statement)
    assert any(m.value.startswith("Step 1 of this session") for m in at.markdown)


def _update_steered(at: AppTest) -> None:
    _step(at)
    assert not any("policy loss = 0" in i.value for i in at.info)
    assert any("the ratio starts away from 1" in c.value for c in at.caption)


def _training(at: AppTest) -> None:
    names = {t.get("legendgroup") or "" for t in charts(at)["tr_hack_curves"]["data"]}
    assert any("beta = 0" in n for n in names)
    assert any("beta = 1" in n for n in names)


def _frameworks(at: AppTest) -> None:
    assert list(frame_with(at, "dialect")["dialect"]) == ["roll", "verl", "openrlhf", "trl"]


#: link -> the claim its recipe line makes, checked on the page it opens
CLAIMS = {
    "/": _home,
    "Samples?preset=quantum": _samples,
    "Rewards?preset=arithmetic": _rewards,
    "Token_KL?preset=pirate": _token_kl,
    "Advantages?preset=pirate&est=grpo": _advantages_grpo,
    "Advantages?preset=pirate&est=gae": _advantages_gae,
    "Local_vs_Global": _local_global,
    "Normalisation": _normalisation,
    "Update?live=true&G=4&T=16&policy=identical&est=grpo": _update_zero_loss,
    "Update?live=true&G=4&T=16&policy=steered": _update_steered,
    "Training?tab=Reward+hacking": _training,
    "Frameworks?preset=pirate&est=grpo": _frameworks,
}


@pytest.fixture(autouse=True)
def _adapter_at_step_0():
    """AppTests share one session: leave its adapter at step 0 for the next test."""
    yield
    at = apptest.open_page("update", live="true", G="4", T="16")
    at.button(key=upd.KEY_RESET).click().run()


def test_every_recipe_link_has_a_claim():
    assert recipe_links() == list(CLAIMS)


@pytest.mark.parametrize("link", list(CLAIMS))
def test_the_link_shows_its_claim(link):
    CLAIMS[link](open_link(link))


def test_the_update_claim_holds_after_the_teachers_warm_up(monkeypatch):
    monkeypatch.setattr(warm, "_WARMED", weakref.WeakSet())  # as on a fresh server
    home = apptest.open_page(None, live="true")
    home.button(key="warm_up").click().run()
    assert not home.exception
    assert any("your adapter is untouched" in s.value for s in home.success)
    _update_zero_loss(open_link("Update?live=true&G=4&T=16&policy=identical&est=grpo"))
