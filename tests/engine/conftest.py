"""The engine tests: a real vLLM server (``.engine-venv``) started once for the session, by PID.

Every test here is marked ``engine``. They run when ``ROLL_VIZ_ENGINE_TESTS=1`` (``make
engine-test``, and CI's engine step, which builds the venv first); otherwise they are skipped with
that reason, so ``make test`` stays independent of the engine. With the variable set, a missing
venv or a server that does not start is a failure, never a skip.

``ROLL_VIZ_ENGINE_TEST_URL`` points the tests at a server already running (development only: the
test that stops the server mid-request then starts and stops its own).
"""

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from roll_viz.lm import engine_server
from roll_viz.lm.engine_http import HttpEngine
from roll_viz.lm.models import load_models

HERE = Path(__file__).resolve().parent
ENABLED = os.environ.get("ROLL_VIZ_ENGINE_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    """Mark every test of this folder ``engine``; skip them unless the engine step asked."""
    skip = pytest.mark.skip(reason="engine tests run in their own step: make engine-test")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.engine)
            if not ENABLED:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The session's server: started here (stopped by PID at the end), or the given URL."""
    url = os.environ.get("ROLL_VIZ_ENGINE_TEST_URL")
    if url:
        yield SimpleNamespace(url=url, pid=None)
        return
    started = engine_server.start(scratch=tmp_path_factory.mktemp("engine"))
    print(f"\nENGINE server ready after {started.ready_s:.1f} s (PID {started.pid})")
    try:
        yield started
    finally:
        started.stop()
        assert started.process.poll() is not None, "the engine server did not stop"


@pytest.fixture(scope="session")
def engine(server):
    return HttpEngine(server.url)


@pytest.fixture(scope="session")
def bundle():
    """The real bundled model in float32: the weights the server serves."""
    return load_models("smollm2", device="cpu", dtype="float32")
