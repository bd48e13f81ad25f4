"""Real-browser fixtures: a `streamlit run Home.py` server on 127.0.0.1 and Debian's Chromium.

The server runs the tiny test model (ROLL_VIZ_MODEL=tiny) and is killed with its whole process
group at teardown. Without /usr/bin/chromium every e2e test is skipped with the reason, unless
REQUIRE_E2E=1 (CI), which turns that into a failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_TIMEOUT_S = 90


def pytest_collection_modifyitems(config, items):
    """Mark every test in this folder `e2e`; skip (or fail in CI) without a browser."""
    here = Path(__file__).parent
    missing = not Path(CHROMIUM).exists()
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = True
    for item in items:
        if here not in Path(str(item.fspath)).parents:
            continue
        item.add_marker(pytest.mark.e2e)
        if missing and os.environ.get("REQUIRE_E2E") != "1":
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{CHROMIUM} or the playwright package is missing "
                    "(apt-get install -y chromium; REQUIRE_E2E=1 makes this a failure)"
                )
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


@pytest.fixture(scope="session")
def server():
    """Base URL of a headless `streamlit run Home.py` on a free local port."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"REQUIRE_E2E=1 but {CHROMIUM} is missing (apt-get install -y chromium)")
    port = _free_port()
    env = {**os.environ, "ROLL_VIZ_MODEL": "tiny", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env["ROLL_VIZ_RUNS"] = str(ROOT / "tests" / "fixtures" / "runs")  # the Your run page
    log = (ROOT / ".pytest_cache").joinpath("e2e_server.log")
    log.parent.mkdir(exist_ok=True)
    out = log.open("w")
    proc = subprocess.Popen(
        [
            _python(),
            "-m",
            "streamlit",
            "run",
            "Home.py",
            "--server.headless=true",
            "--server.address=127.0.0.1",
            f"--server.port={port}",
            "--server.fileWatcherType=none",
            "--browser.gatherUsageStats=false",
        ],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            out.close()
            pytest.fail(f"streamlit exited early ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as resp:
                if resp.read().decode().strip() == "ok":
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"streamlit did not become healthy:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    yield base
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    out.close()


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by the Python playwright package (no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh browser context (no shared session state) and page per test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()
