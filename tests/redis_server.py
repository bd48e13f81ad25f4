"""A throwaway ``redis-server`` for the tests: started on a free port in a temporary folder,
stopped by PID. Missing binary: the caller skips with the reason, unless REQUIRE_E2E=1 (CI), where
``.ci/run`` installs it and its absence is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_redis() -> None:
    """Skip (or fail under REQUIRE_E2E=1) when Debian's redis-server is not installed."""
    if Path(REDIS).exists():
        return
    if os.environ.get("REQUIRE_E2E") == "1":
        pytest.fail(f"REQUIRE_E2E=1 but {REDIS} is missing (apt-get install -y redis-server)")
    pytest.skip("redis-server is not installed (apt-get install -y redis-server)")


class RedisServer:
    """One redis-server process: ``url`` to connect, ``stop()`` and ``start()`` to restart."""

    def __init__(self, folder: Path, appendonly: bool = False) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.appendonly = appendonly
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        args = [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        args += ["--save", "", "--appendonly", "yes" if self.appendonly else "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
