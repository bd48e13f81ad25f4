"""``python -m roll_viz hall``: a lecture hall on one machine, from parts people already run.

It starts, each as its own process, stopped by PID when the hall stops (Ctrl-C or SIGTERM):

- Debian's ``redis-server`` on 127.0.0.1 and a free port, with an append-only file (fsync every
  second) in the hall's folder: lesson rooms, students and votes live there
  (``ROLL_VIZ_REDIS``), so every app process sees the same room and a restarted Redis keeps it;
- N app processes (``python -m roll_viz serve``; one per core by default), each on 127.0.0.1 and
  its own port, one torch thread each when N fills the cores, all sharing one Streamlit cookie
  secret (an upload's XSRF cookie stays valid on another process after a failover) and, when
  ``ROLL_VIZ_ENGINE`` is set, the same vLLM engine;
- Debian's ``haproxy`` in front, on ``--address:--port`` (127.0.0.1:8500 unless told otherwise):
  sticky by a cookie it inserts (a Streamlit session lives in one process, and students behind
  one network address share an IP, so the source address cannot be the key), health-checked on
  Streamlit's ``/_stcore/health``; when a process dies its students' next request goes to another
  (``option redispatch``), where the room and every vote are waiting in Redis.

It prints the one address to open and, on stop, stops them all. ``--dry-run`` writes the
configuration and prints the commands without starting anything.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REDIS = "redis-server"
HAPROXY = "haproxy"
#: at most this many app processes (each holds a model copy: about 0.6 GB with the bundled one)
MAX_PROCESSES = 16
DEFAULT_PORT = 8500
#: the checkout the apps run from (``python -m roll_viz`` finds the package and ``app.py`` there)
ROOT = Path(__file__).resolve().parents[2]
READY_S = 180.0
#: what a Redis restart keeps (the ``--appendonly`` / ``--appendfsync`` flags of ``commands``)
PERSISTENCE = (
    "lesson rooms and votes persist in Redis's append-only file (fsync every second): a Redis "
    "restart keeps them and loses at most the last second of votes; if that file is lost, the "
    "pages say the lesson state is gone"
)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def haproxy_config(address: str, port: int, app_ports: list[int]) -> str:
    """The proxy's configuration: cookie-sticky round robin over the apps, websockets kept open."""
    servers = "\n".join(
        f"  server app{i} 127.0.0.1:{p} check cookie app{i}" for i, p in enumerate(app_ports, 1)
    )
    return f"""global
  maxconn 4096

defaults
  mode http
  timeout connect 5s
  timeout client 1h
  timeout server 1h
  timeout tunnel 1h
  option redispatch
  retries 2

frontend hall
  bind {address}:{port}
  default_backend apps

backend apps
  balance roundrobin
  cookie RVHALL insert indirect nocache httponly
  option httpchk GET /_stcore/health
  http-check expect status 200
  default-server inter 1s fall 2 rise 1
{servers}
"""


@dataclass
class Hall:
    """The processes of one hall and where they listen.

    Attributes:
        folder: configuration, Redis's append-only file and the processes' logs.
        address, port: where the proxy listens (the one address students open).
        processes: how many app processes.
        redis_port: Redis's port on 127.0.0.1.
        app_ports: each app process's port on 127.0.0.1.
        procs: name -> process, in start order.
    """

    folder: Path
    address: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    processes: int = 2
    redis_port: int = 0
    app_ports: list[int] = field(default_factory=list)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def redis_url(self) -> str:
        """Where the apps find Redis (``ROLL_VIZ_REDIS``)."""
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def url(self) -> str:
        """The one address students open."""
        return f"http://{self.address}:{self.port}"

    def commands(self, streamlit_flags: list[str]) -> dict[str, list[str]]:
        """Each process's name and argv, in start order."""
        redis_args = [
            "--port",
            str(self.redis_port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.folder),
        ]
        persist = ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
        cmds = {"redis": [REDIS, *redis_args, *persist]}
        for i, p in enumerate(self.app_ports, 1):
            cmds[f"app{i}"] = [
                sys.executable,
                "-m",
                "roll_viz",
                "serve",
                f"--server.port={p}",
                "--server.address=127.0.0.1",
                "--server.headless=true",
                "--browser.gatherUsageStats=false",
                *streamlit_flags,
            ]
        cmds["proxy"] = [HAPROXY, "-f", str(self.folder / "haproxy.cfg"), "-db"]
        return cmds

    def app_env(self, secret: str) -> dict[str, str]:
        """The environment of every app process (Redis, the shared cookie secret, threads)."""
        env = dict(os.environ)
        env["ROLL_VIZ_REDIS"] = self.redis_url
        env["STREAMLIT_SERVER_COOKIE_SECRET"] = secret
        if self.processes >= (os.cpu_count() or 1):
            env.setdefault("ROLL_VIZ_THREADS", "1")  # N processes already fill the cores
        return env

    def start(self, streamlit_flags: list[str]) -> None:
        """Start Redis, the apps and the proxy; return once the proxy answers (or raise)."""
        self.redis_port = free_port()
        self.app_ports = [free_port() for _ in range(self.processes)]
        (self.folder / "haproxy.cfg").write_text(
            haproxy_config(self.address, self.port, self.app_ports)
        )
        secret = secrets.token_urlsafe(32)
        for name, argv in self.commands(streamlit_flags).items():
            log = (self.folder / f"{name}.log").open("wb")
            env = self.app_env(secret) if name.startswith("app") else None
            self.procs[name] = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )
        self.wait_ready()

    def wait_ready(self, timeout: float = READY_S) -> None:
        """Wait until every app answers its health check and the proxy answers (or raise)."""
        deadline = time.monotonic() + timeout
        pending = {f"app{i}": p for i, p in enumerate(self.app_ports, 1)}
        pending["proxy"] = self.port
        while pending:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    tail = (self.folder / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail}")
            for name, p in list(pending.items()):
                host = self.address if name == "proxy" else "127.0.0.1"
                if _healthy(host, p):
                    del pending[name]
            if time.monotonic() > deadline:
                raise RuntimeError(f"not ready after {timeout:.0f} s: {sorted(pending)}")
            time.sleep(0.25)

    def stop(self) -> None:
        """Stop every process of the hall by PID (the proxy first, Redis last)."""
        for _name, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _healthy(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(f"GET /_stcore/health HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            return s.recv(64).split(b" ")[1:2] == [b"200"]
    except (OSError, IndexError):
        return False


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The hall's options; what follows ``--`` goes to every app's ``streamlit run``."""
    streamlit_flags: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, streamlit_flags = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(prog="python -m roll_viz hall", description=__doc__.split("\n")[0])
    p.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="app processes")
    p.add_argument("--address", default="127.0.0.1", help="where the proxy listens")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the proxy's port")
    p.add_argument("--dir", default=None, help="folder for config, Redis data and logs")
    p.add_argument("--dry-run", action="store_true", help="write the config, print the commands")
    args = p.parse_args(argv)
    if not 1 <= args.processes <= MAX_PROCESSES:
        p.error(f"--processes must be 1..{MAX_PROCESSES}")
    return args, streamlit_flags


def main(argv: list[str]) -> int:
    """Run a hall until Ctrl-C or SIGTERM; returns the exit code."""
    args, flags = parse(argv)
    missing = [b for b in (REDIS, HAPROXY) if shutil.which(b) is None]
    if missing and not args.dry_run:
        print(
            f"error: {', '.join(missing)} not found: apt-get install -y redis-server haproxy",
            file=sys.stderr,
        )
        return 2
    folder = Path(args.dir or tempfile.mkdtemp(prefix="roll-viz-hall-"))
    folder.mkdir(parents=True, exist_ok=True)
    hall = Hall(folder=folder, address=args.address, port=args.port, processes=args.processes)
    if args.dry_run:
        hall.redis_port, hall.app_ports = 6379, [8601 + i for i in range(args.processes)]
        (folder / "haproxy.cfg").write_text(haproxy_config(hall.address, hall.port, hall.app_ports))
        for name, cmd in hall.commands(flags).items():
            print(f"{name}: {' '.join(cmd)}")
        print(PERSISTENCE)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        print(f"roll-viz hall: starting Redis, {args.processes} app processes and the proxy")
        hall.start(flags)
        print(f"roll-viz hall: open {hall.url}  (logs and Redis data in {folder})", flush=True)
        print(f"roll-viz hall: {PERSISTENCE}", flush=True)
        print("roll-viz hall: Ctrl-C stops every process of the hall", flush=True)
        while all(p.poll() is None for p in (hall.procs["proxy"], hall.procs["redis"])):
            time.sleep(1.0)
        print("roll-viz hall: the proxy or Redis stopped; stopping the hall", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except RuntimeError as err:
        print(f"roll-viz hall: {err}", file=sys.stderr)
        return 1
    finally:
        hall.stop()
