"""The operator's engine setting when the engine is not usable: one sentence, in-process answers.

No vLLM here: an address nobody listens on, and a server that answers garbage.
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from roll_viz.lm import rollout
from tests.ui.apptest import open_page


@pytest.fixture
def garbage_url():
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>hello</html>")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("kind", ["unreachable", "garbage", "bad"])
def test_unusable_engine_says_so_and_the_app_answers(kind, garbage_url, monkeypatch):
    url = {"unreachable": "http://127.0.0.1:1", "garbage": garbage_url, "bad": "nonsense"}[kind]
    monkeypatch.setenv("ROLL_VIZ_ENGINE", url)
    rollout.forget()
    at = open_page("kl", live="true", G="2", T="4", prompts="Hi")
    captions = [c.value for c in at.sidebar.caption]
    assert "answers from: the in-process model (the engine is not available)" in captions
    why = next(c for c in captions if "in-process model instead" in c)
    assert "Traceback" not in why
    assert "\n" not in why
    assert at.dataframe  # the page drew its tables from the in-process model


def test_no_engine_configured_shows_nothing(monkeypatch):
    monkeypatch.delenv("ROLL_VIZ_ENGINE", raising=False)
    at = open_page("kl")
    assert not any("answers from" in c.value for c in at.sidebar.caption)


def test_live_page_answers_from_the_engine(stub_engine):
    at = open_page("kl", live="true", G="2", T="4", prompts="Hi", policy="steered", seed="31")
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert f"answers from: vLLM at {stub_engine.url}" in captions
    sampled = [r for r in stub_engine.requests if r.get("n") == 2]
    assert sampled  # the page's batch came from the engine
    assert at.dataframe


def test_self_test_shows_the_engine_conformance(stub_engine):
    at = open_page("self_test")
    lines = [s.value for s in at.success if "Engine (vLLM at" in s.value]
    assert len(lines) == 1
    assert "max |delta log p|" in lines[0]
    assert "(ok)" in lines[0]
