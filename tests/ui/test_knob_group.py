"""G over a preset, drawn in the browser: the rows it picks are the server's rows.

Over a committed preset the Advantages page sends the preset's WHOLE batch to its estimator
heatmaps once (``flow.preset_payload``) and the browser draws the first G samples of every
prompt (pipeline.js ``subsetGroups``; the AppTest helper does the same with
``payload.subset_groups``), so a G move of the sidebar needs no new batch. Here what the browser
draws at a G equals, token by token, what the server computes for that G on its own subsampled
rollout (the page's token table, one column per estimator), and the batch sent does not change
with G. With the probe critic (fitted on the rows shown) the page does not follow G.
"""

from __future__ import annotations

import json
import math

from roll_viz import ui
from tests.ui.apptest import estimator_grids, open_page


def _component(at) -> dict:
    found = [
        el.proto for el in at.get("bidi_component")
        if el.proto.component_name == "roll_viz.instant_estimators"
    ]  # fmt: skip
    assert len(found) == 1
    return json.loads(found[0].json)


def _server_columns(at) -> dict:
    at.toggle(key="show_token_table").set_value(True)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    for el in at.dataframe:
        if "advantage" in el.value.columns and "token_id" in el.value.columns:
            return el.value
    raise AssertionError("no token table")


def _check_same_rows(at, group_size: int) -> None:
    table = _server_columns(at)
    data = _component(at)
    assert data["payload"]["follows_G"] is True
    assert data["G"] == group_size
    grids = estimator_grids(at)
    assert grids
    prompts = table["sample"].str.split("/").str[0].nunique()
    for title, grid in grids.items():
        est = title.split(" ")[0]
        assert len(grid) == prompts * group_size, title  # the first G samples of each prompt
        drawn = [v for row in grid for v in row if v is not None]
        server = table[f"A_{est}"].tolist()
        assert len(drawn) == len(server), title
        for a, b in zip(drawn, server, strict=True):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), title


def test_the_browser_rows_at_each_G_are_the_servers():
    at = open_page("advantages", preset="sentiment", G="2")
    _check_same_rows(at, 2)
    bulk = _component(at)["bulk_id"]
    at.slider(key=ui.KEY_G).set_value(3)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    _check_same_rows(at, 3)
    assert _component(at)["bulk_id"] == bulk  # the same whole batch: only G changed


def test_the_probe_critic_follows_G_where_it_does_not_read_it():
    # the probe is fitted on the rows shown: the payload carries it on this G's rows, and the
    # estimators that read it are named (drawn from the server's numbers after a G move)
    at = open_page("advantages", preset="sentiment", G="2", critic="probe")
    _check_same_rows(at, 2)
    data = _component(at)
    assert data["G"] == 2
    assert "gae" in data["on_rows"]
    assert "grpo" not in data["on_rows"]
    assert set(data["on_rows"]) <= set(data["server"])
