"""Fixtures for the benchmark tests: one tiny model and one tiny-model server per session."""

import pytest

from benchmarks.server import streamlit_server
from roll_viz.lm.models import load_models


@pytest.fixture(scope="session")
def tiny():
    return load_models("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory):
    """One ``streamlit run`` on the tiny model for the server tests that set nothing of their own.

    Each test speaks to it with its own sessions and student keys; one start instead of six
    (5-10 s each on the 2-core box). A test that needs other settings (a short grace, a quota)
    or reads the process's memory and threads starts its own. Each test still asserts the
    server's log holds no traceback: anything logged earlier in the session fails it too.
    """
    log = tmp_path_factory.mktemp("tiny_server") / "streamlit.log"
    with streamlit_server(model="tiny", log=log) as srv:
        yield srv
