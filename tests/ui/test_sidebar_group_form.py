"""G in the sidebar: live, it waits for "Sample" with the other edits; over a preset, at once.

Live, every change of G is a new sampling, so the slider sits in the "Sample" form (issue:
every edit of prompts, G or T re-sampled, 17 + 26 + 19 s to set up one request). Over a
preset's committed batch G only keeps the first G samples of each prompt, so it applies at once.
Both are the same widget key: the URL's ``G=`` and the instant knobs' release drive it.
"""

from __future__ import annotations

from benchmarks import classroom
from roll_viz import ui
from roll_viz.ui import resources, state
from tests.ui.apptest import open_page


def _g_slider(at):
    return at.sidebar.slider(key=ui.KEY_G)


def _rows_per_prompt(at) -> int:
    table = next(d.value for d in at.dataframe if "response" in d.value.columns)
    prompts = table["prompt"].tolist()
    return prompts.count(prompts[0])


def test_live_g_waits_for_sample_and_samples_once():
    at = open_page("samples", preset="quantum", live="true", G="2", T="8")
    assert _g_slider(at).proto.form_id  # inside the live sampling form
    assert _g_slider(at).value == 2
    assert _rows_per_prompt(at) == 2
    store = resources.live_store()
    before = set(store.items)
    _g_slider(at).set_value(3)
    at.run()  # another rerun: the pending G does not sample
    assert not at.exception, [e.message for e in at.exception]
    assert _rows_per_prompt(at) == 2
    assert set(store.items) == before
    _g_slider(at).set_value(3)
    at.sidebar.slider(key="T").set_value(12)
    next(b for b in at.sidebar.button if b.label == "Sample").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    added = set(store.items) - before
    assert len(added) == 1  # G and T together: one request, one sampling
    sampling = next(iter(added))[1]  # the store's key: (model, sampling, ...)
    assert (sampling.group_size, sampling.max_new_tokens) == (3, 12)
    assert _rows_per_prompt(at) == 3
    assert at.session_state[ui.KEY_G] == 3  # the bound key: the browser writes G=3 to the URL


def test_preset_g_subsets_at_once_and_keeps_the_url_binding():
    at = open_page("samples", preset="quantum", G="5")
    assert not _g_slider(at).proto.form_id  # no form: subsetting costs nothing
    assert _rows_per_prompt(at) == 5
    _g_slider(at).set_value(3)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert _rows_per_prompt(at) == 3
    assert at.session_state[ui.KEY_G] == 3  # the bound key (the browser writes G= to the URL)


def test_the_classroom_benchmark_presses_the_forms_sample_button():
    """bench may not import ui: its copy of the button key must stay the sidebar's."""
    assert classroom.SAMPLE_APPLY == state.KEY_SAMPLE_APPLY
    assert state.KEY_G in classroom.FORM_KNOBS
