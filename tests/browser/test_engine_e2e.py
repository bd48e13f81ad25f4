"""The app on an engine in a real browser: the sidebar's "answers from" line and a live page.

The engine is the stub server over the tiny model (``tests/lm/engine_stub.py``, vLLM's answer
shapes), run in this process; the app is its own ``streamlit run`` with ``ROLL_VIZ_ENGINE``
pointing at it. The real vLLM server is exercised by ``tests/engine``.
"""

from __future__ import annotations

import pytest

from benchmarks.server import streamlit_server
from roll_viz import nav
from roll_viz.lm.engine import LocalEngine
from roll_viz.lm.models import load_models
from tests.browser import streamlit_page as sp
from tests.lm.engine_stub import Stub


@pytest.fixture(scope="module")
def engine_app(tmp_path_factory):
    stub = Stub(LocalEngine(load_models("tiny", device="cpu", dtype="float32")))
    log = tmp_path_factory.mktemp("engine_app") / "streamlit.log"
    env = {"ROLL_VIZ_ENGINE": stub.url, "ROLL_VIZ_ENGINE_SPEC": "tiny"}
    try:
        with streamlit_server(script=nav.ENTRY, log=log, extra_env=env) as srv:
            yield srv.base, stub
    finally:
        stub.close()


@pytest.mark.browser
def test_sidebar_says_vllm_and_the_page_answers_from_it(page, engine_app, tmp_path):
    base, stub = engine_app
    url = f"{base}/{nav.url_path('kl')}?live=true&G=2&T=4&prompts=Hi&policy=steered"
    sp.goto(page, url, 240_000)
    assert sp.exceptions(page) == []
    line = page.get_by_text(f"answers from: vLLM at {stub.url}")
    line.wait_for()
    line.scroll_into_view_if_needed()
    assert any(r.get("n") == 2 for r in stub.requests)  # the batch came from the engine
    page.screenshot(path=str(tmp_path / "engine_sidebar.png"))
