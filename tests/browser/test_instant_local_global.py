"""The instant local-vs-global panel on the real Local vs Global page, in a real browser.

Drags (programmatic input events) and arrow-keys the panel's G, switches what the local side
divides by, and checks the numbers the panel shows (per-sample rows and its live state) equal
Python's ``roll_viz.analysis.local_global.local_vs_global`` on the same first-G subset, and, at
the sidebar's G, the server's own CSV of the page. A release moves the sidebar's G and the URL
on a preset; on a live batch it does not (sampling again would change the answers). Prints the
input -> redrawn time on the classroom batch (BENCHMARK, never asserted) and writes the panel's
screenshot 05_local_vs_global_instant.png (see the `shots` fixture).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import urllib.parse
from pathlib import Path

import pytest
import torch

from benchmarks.browser import bench_inputs
from benchmarks.classroom import CLASSROOM
from roll_viz.analysis.local_global import local_vs_global
from roll_viz.ui.instant.payload import subset_scores
from tests.browser import streamlit_page as sp
from tests.js.test_local_global_conformance import pipeline_oracle

ROOT_SEL = "[data-testid=rv-lg-instant]"
READY = f"{ROOT_SEL}[data-state=ready]"
SHOT = "05_local_vs_global_instant.png"
TOL = 1e-9


def _open(page, server, query: dict[str, str], timeout: float = 180_000) -> None:
    sp.goto(page, f"{server}/{sp.PAGES['05_local_vs_global']}?{urllib.parse.urlencode(query)}")
    page.wait_for_selector(READY, timeout=timeout)


def _state(page) -> dict:
    """The panel's data, knobs and live numbers (NaN as None), read from its parent element."""
    return page.locator(ROOT_SEL).evaluate(
        """(el) => {
          const s = el.parentNode.__rvLocalGlobal;
          const a = (x) => Array.from(x, (v) => (Number.isNaN(v) ? null : v));
          return {values: s.values, scores: a(s.data.scores), group_ids: s.data.group_ids,
                  labels: s.data.group_labels, shown_scores: a(s.shown.scores),
                  shown_gids: s.shown.group_ids, local: a(s.res.local),
                  global: a(s.res.global), updates: Number(el.dataset.updates)};
        }"""
    )


def _rows(page) -> list[dict]:
    """The displayed per-sample rows: their cell texts and the exact values they carry."""
    return page.locator("[data-testid=rv-lg-row]").evaluate_all(
        """(rows) => rows.map((r) => ({cells: Array.from(r.cells, (c) => c.textContent),
                                       local: Number(r.dataset.local),
                                       global: Number(r.dataset.global),
                                       reward: Number(r.dataset.reward)}))"""
    )


def _close(a: float | None, e: float, what: str) -> None:
    if math.isnan(e):
        assert a is None or math.isnan(a), f"{what}: {a} vs NaN"
    else:
        assert a is not None, f"{what}: undefined vs {e}"
        assert abs(a - e) <= TOL * (1 + abs(e)), f"{what}: {a} vs {e}"


def _assert_matches_python(page) -> dict:
    """Panel == local_vs_global (or the pipeline oracle for Dr.GRPO / eps) on its own subset."""
    js = _state(page)
    G, std, eps = js["values"]["G"], js["values"]["std"], js["values"]["eps"]
    scores = torch.tensor(js["scores"], dtype=torch.float64)
    gids = torch.tensor(js["group_ids"])
    sub, sub_g = subset_scores(scores, gids, G)
    assert js["shown_gids"] == sub_g.tolist()
    if std == "group" and eps == 1e-6:
        lg = local_vs_global(sub, sub_g, js["labels"])
        local, glob = lg.local.tolist(), lg.global_.tolist()
    else:
        local, glob = pipeline_oracle(sub, sub_g, std, eps)
    rows = _rows(page)
    assert len(rows) == len(local) == len(js["local"])
    for b, row in enumerate(rows):
        _close(js["local"][b], local[b], f"state local[{b}]")
        _close(js["global"][b], glob[b], f"state global[{b}]")
        _close(None if math.isnan(row["local"]) else row["local"], local[b], f"row local[{b}]")
        _close(None if math.isnan(row["global"]) else row["global"], glob[b], f"row global[{b}]")
        # the visible text is the same number, rounded
        shown_local = row["cells"][6]
        if math.isnan(local[b]):
            assert shown_local == "undefined"
        else:
            assert abs(float(shown_local) - local[b]) <= 5.1e-5, (b, shown_local)
        assert abs(float(row["cells"][7]) - glob[b]) <= 5.1e-5
        assert row["cells"][1] == js["labels"][sub_g[b]]
    return js


def _server_csv(page) -> list[dict]:
    """The page's own per-sample table (Python, the sidebar's G), downloaded as CSV."""
    button = page.locator(".st-key-lg_batch_csv button")
    if not button.is_visible():
        page.get_by_text("Per-sample and per-prompt tables").click()
    # a download's data is the run's (a deferred file): a rerun still going (the panel's first
    # values reaching the server, late on a busy machine) would replace it under the click
    sp.wait_idle(page)
    with page.expect_download() as info:
        button.click()
    text = Path(info.value.path()).read_text()
    return list(csv.DictReader(io.StringIO(text)))


def _assert_equals_server(page) -> None:
    rows, server = _rows(page), _server_csv(page)
    assert len(rows) == len(server)
    for b, (row, srv) in enumerate(zip(rows, server, strict=True)):
        assert row["reward"] == pytest.approx(float(srv["reward"]), abs=TOL)
        for key, col in (("local", "local advantage"), ("global", "global advantage")):
            e = float(srv[col]) if srv[col] else math.nan
            _close(None if math.isnan(row[key]) else row[key], e, f"{key}[{b}] vs server")


def test_preset_knobs_match_python_and_release_drives_the_sidebar(server, page, shots):
    _open(page, server, {"preset": "arithmetic"})
    assert sp.exceptions(page) == []
    status = page.locator("[data-testid=rv-lg-status]").inner_text()
    assert status.startswith("Computed in the browser: 16 samples, 4 prompts, G = 4"), status
    js = _assert_matches_python(page)
    assert js["values"] == {"G": 4, "std": "group", "eps": 1e-6}
    _assert_equals_server(page)  # at the sidebar's G the panel IS the page's Python table

    # dragging: every input event recomputes in place, no rerun, nothing settled yet
    before = js["updates"]
    n = sp.runs(page)
    bench_inputs(page, "rv-lg-G", [3, 2, 1])
    js = _state(page)
    assert js["updates"] == before + 3
    assert js["values"]["G"] == 1
    assert all(v is None for v in js["local"])  # G = 1: no group std, nothing to plot
    assert "not plotted" in page.locator("[data-testid=rv-lg-summary]").inner_text()
    _assert_matches_python(page)
    bench_inputs(page, "rv-lg-G", [2])
    _assert_matches_python(page)
    assert sp.runs(page) == n  # no rerun asked for, none run: the server saw none of it

    # arrow key = input + release: the sidebar's G, the URL and the Python tables follow
    page.locator("[data-testid=rv-lg-G]").focus()
    sp.after_rerun(page, lambda: page.keyboard.press("ArrowRight"))
    assert sp.exceptions(page) == []
    assert sp.query(page.url)["G"] == "3"
    assert sp.slider_value(page, "G").startswith("3")
    js = _assert_matches_python(page)
    assert js["values"]["G"] == 3
    assert page.get_by_text("the sidebar's G = 3").count() == 1
    _assert_equals_server(page)
    # the panel still offers the preset's full G although the sidebar shows 3
    assert page.locator("[data-testid=rv-lg-G]").get_attribute("max") == "4"

    # what the local side divides by: Dr.GRPO (mean only) and eps have no sidebar counterpart
    sp.after_rerun(page, lambda: page.locator("[data-testid=rv-lg-std]").select_option("none"))
    js = _assert_matches_python(page)
    assert js["values"]["std"] == "none"
    assert js["values"]["G"] == 3
    assert sp.query(page.url)["G"] == "3"
    bench_inputs(page, "rv-lg-eps", [-2])
    js = _assert_matches_python(page)
    assert js["values"]["eps"] == pytest.approx(1e-2)
    assert page.locator("[data-testid=rv-lg-eps-value]").inner_text() == "0.01"
    # the sidebar's G moves the panel's G; the panel-only knobs stay as the student set them
    sp.press_knob_and_settle(page, "G", "ArrowLeft")  # G picks the rows: the page reruns
    assert sp.query(page.url)["G"] == "2"
    js = _assert_matches_python(page)
    assert js["values"] == {"G": 2, "std": "none", "eps": pytest.approx(1e-2)}
    sp.after_rerun(page, lambda: page.locator("[data-testid=rv-lg-std]").select_option("group"))
    _assert_matches_python(page)
    bench_inputs(page, "rv-lg-G", [4])
    _assert_matches_python(page)

    # the screenshot: the whole panel below Streamlit's fixed header
    page.set_viewport_size({"width": 1400, "height": 1700})
    page.locator(ROOT_SEL).evaluate("(el) => el.scrollIntoView({block: 'center'})")
    bench_inputs(page, "rv-lg-eps", [-6])  # back to ROLL's eps; waits for a painted frame
    assert "all-equal rewards" in page.locator("[data-testid=rv-lg-summary]").inner_text()
    page.locator(ROOT_SEL).screenshot(path=str(shots / SHOT))


def test_live_batch_escapes_prompts_and_keeps_the_sidebar(server, page):
    prompts = "<b>bold</b> & 'q'\nWhat is 2 + 2?"
    _open(
        page,
        server,
        {"live": "true", "prompts": prompts, "G": "3", "T": "8", "seed": "1"},
        timeout=240_000,
    )
    assert sp.exceptions(page) == []
    table = page.locator("[data-testid=rv-lg-table]")
    assert table.locator("b").count() == 0
    assert page.locator(ROOT_SEL).locator("b").count() == 0  # legend, rows: text only
    assert "<b>bold</b> & 'q'" in table.inner_text()
    _assert_matches_python(page)
    _assert_equals_server(page)
    page.locator("[data-testid=rv-lg-G]").focus()
    sp.after_rerun(page, lambda: page.keyboard.press("ArrowLeft"))
    assert sp.exceptions(page) == []
    assert _state(page)["values"]["G"] == 2
    assert sp.query(page.url)["G"] == "3"  # a live batch is not sampled again
    _assert_matches_python(page)


def test_instant_local_global_benchmark_on_the_classroom_batch(server, page, capsys):
    query = urllib.parse.urlencode(CLASSROOM)
    sp.goto(page, f"{server}/{sp.PAGES['05_local_vs_global']}?{query}", timeout=240_000)
    page.wait_for_selector(READY, timeout=120_000)
    values = [8 - i for i in range(1, 8)] + [i for i in range(2, 9)]  # a new value every time
    values = (values * 3)[:30]
    timing = bench_inputs(page, "rv-lg-G", values)
    assert sp.exceptions(page) == []
    assert _state(page)["values"]["G"] == values[-1]
    _assert_matches_python(page)
    line = (
        "BENCHMARK instant-knob input->redrawn page=Local_vs_Global batch=8x8 knob=G "
        f"client-path n={len(values)} "
        f"recompute+redraw median={statistics.median(timing['sync']):.1f}ms "
        f"max={max(timing['sync']):.1f}ms "
        f"painted median={statistics.median(timing['painted']):.1f}ms "
        "bytes-sent-per-move=0 (server path: see slider-release->redrawn)"
    )
    with capsys.disabled():
        print("\n" + line)
