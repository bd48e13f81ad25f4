"""Start and stop a local ``streamlit run`` server: the one server launcher of the project.

``streamlit_server(script=..., model=...)`` runs the app headless on a free 127.0.0.1 port with
the tiny test model by default, waits until ``/_stcore/health`` answers, yields a ``Server`` and
kills the server's whole process group afterwards. The load benchmark
(``benchmarks.classroom_load``), the classroom benchmark and the browser tests start their servers
here; ``Server.tracebacks()``
reads the exceptions the server logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from roll_viz import nav

ROOT = Path(__file__).resolve().parents[1]
ENTRY = nav.ENTRY  # the script `streamlit run` starts (the router)
SERVER_START_TIMEOUT_S = 90.0


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health(base: str, timeout: float = 2.0) -> bool:
    """True when ``base``/_stcore/health answers ``ok``."""
    try:
        with urllib.request.urlopen(f"{base}/_stcore/health", timeout=timeout) as resp:
            return resp.read().decode().strip() == "ok"
    except OSError:
        return False


@dataclasses.dataclass
class Server:
    """A running ``streamlit run app.py``: its base URL, process and log file."""

    base: str
    proc: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        """The server's pid (for RSS)."""
        return self.proc.pid

    def tracebacks(self) -> list[str]:
        """The exception line of every traceback the server logged.

        Catches a page that failed even when a page guard turned the error into a friendly
        message. Plain and rich (boxed, coloured) tracebacks are both recognised.
        """
        text = _ANSI.sub("", self.log.read_text(errors="replace"))
        found, inside = [], False
        for line in text.splitlines():
            if "Traceback (most recent call last)" in line:
                inside = True
            elif inside and _EXC_LINE.match(line):
                found.append(line.strip())
                inside = False
        return found


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b.*")


@contextlib.contextmanager
def streamlit_server(
    model: str = "tiny",
    log: Path | None = None,
    script: str = ENTRY,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """Start ``streamlit run <script>`` headless on a free 127.0.0.1 port; kill its group after.

    The one server launcher of the project: the load benchmark and the browser tests use it.

    Args:
        model: ROLL_VIZ_MODEL for the server (the tiny test model by default).
        log: where the server's output goes (default: .pytest_cache/load_server.log).
        script: the app script, relative to the repository (default: the router).
        extra_env: more environment for the server (e.g. ROLL_VIZ_RUNS).

    Yields:
        The Server, once /_stcore/health answers.
    """
    port = free_port()
    env = {**os.environ, "ROLL_VIZ_MODEL": model, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.update(extra_env or {})
    log = log or ROOT / ".pytest_cache" / "load_server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    venv = ROOT / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                python,
                "-m",
                "roll_viz",
                "serve",  # as ``make run``: the model stack imported before the first page
                script,
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
        try:
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while not health(base):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"streamlit exited early ({proc.returncode}):\n{log.read_text()[-3000:]}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit not healthy:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
            yield Server(base, proc, log)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
