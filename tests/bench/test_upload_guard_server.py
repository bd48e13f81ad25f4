"""Streamlit's upload endpoint on the running app: bytes only where an uploader is, freed after.

The defect: files PUT to ``/_stcore/upload_file/<session>/<id>`` from a page with no uploader
were accepted (4 x 25 MB) and stayed in memory after the session closed. Here websocket clients
(``bench.st_client``) open a page without an uploader and the *Your run* page, ask for upload
URLs as the frontend does and PUT bytes with the XSRF cookie; the bytes the server holds are
read from Streamlit's own metrics (``/_stcore/metrics``, ``UploadedFileManager``; cached 5 s).
The server keeps a closed session 2 s instead of 120 s (``server.disconnectedSessionTTL``) so
the release is seen within the test.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path

import pytest

from roll_viz.bench.server import streamlit_server
from roll_viz.bench.st_client import Session, UploadedFile, put_file, xsrf_cookie

pytestmark = pytest.mark.server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TTL_S = 2
RELEASE_WAIT_S = 30.0  # the grace, plus the sweeper's period, plus a loaded machine
METRICS_TTL_S = 5.5  # Streamlit caches the cache_memory_bytes family 5 s
_HELD = re.compile(r'cache_memory_bytes\{cache_type="UploadedFileManager"[^}]*\}\s+(\d+)')


def held_bytes(base: str) -> int:
    """Bytes Streamlit's uploaded-file manager holds (its own metric; 0 when none)."""
    url = f"{base}/_stcore/metrics?families=cache_memory_bytes"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return sum(int(m.group(1)) for m in _HELD.finditer(text))


async def _scenario(base: str) -> dict:
    xsrf = xsrf_cookie(base)
    out: dict = {"xsrf": bool(xsrf)}
    plain = Session(base)
    await plain.connect()
    res = await plain.run(page="Samples")
    out["plain_status"] = res.status
    forged = f"/_stcore/upload_file/{plain.session_id}/made-up-id"
    out["forged_put"] = put_file(base, forged, "big.jsonl", b"x" * 2_000_000, xsrf)[0]
    out["plain_urls"] = await plain.file_urls(["big.jsonl"])
    await asyncio.sleep(METRICS_TTL_S)
    out["held_after_forged"] = held_bytes(base)

    student = Session(base)
    await student.connect()
    res = await student.run(page="Your_run")
    out["uploader"] = "run_upload" in res.widgets
    data = (FIXTURES / "uploads" / "verl_steps.zip").read_bytes()
    ((file_id, url),) = await student.file_urls(["verl_steps.zip"])
    out["given_put"] = put_file(base, url, "verl_steps.zip", data, xsrf)[0]
    other = f"/_stcore/upload_file/{student.session_id}/not-given"
    out["other_id_put"] = put_file(base, other, "x.jsonl", b"y" * 1000, xsrf)[0]
    out["no_xsrf_put"] = put_file(base, url, "verl_steps.zip", data)[0]
    await asyncio.sleep(METRICS_TTL_S)
    out["held_after_upload"] = held_bytes(base)
    out["size"] = len(data)
    upload = UploadedFile(file_id, "verl_steps.zip", len(data), url)
    res = await student.run(files={"run_upload": [upload]}, widgets=res.widgets)
    out["upload_run"] = res
    await student.close()
    await plain.close()
    deadline = time.monotonic() + RELEASE_WAIT_S
    while time.monotonic() < deadline and held_bytes(base):
        await asyncio.sleep(1.0)
    out["held_after_close"] = held_bytes(base)
    return out


def test_uploads_only_where_an_uploader_is_and_released_with_the_session():
    env = {"STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": str(TTL_S)}
    with streamlit_server(model="tiny", extra_env=env) as srv:
        out = asyncio.run(_scenario(srv.base))
        tracebacks = srv.tracebacks()
    assert out["xsrf"]
    assert out["plain_status"] == "FINISHED_SUCCESSFULLY"
    assert out["forged_put"] == 400  # refused before the body is read
    assert out["plain_urls"] == []  # no uploader on the page: no upload URL
    assert out["held_after_forged"] == 0
    assert out["uploader"]
    assert out["given_put"] == 204
    assert out["other_id_put"] == 403
    assert out["no_xsrf_put"] == 403  # Streamlit's own check stays in force
    assert out["held_after_upload"] == out["size"]
    run = out["upload_run"]
    assert run.status == "FINISHED_SUCCESSFULLY"
    assert run.exceptions == []
    assert run.error_alerts == []
    # the uploaded zip opened as a run: its Format metric reads verl
    assert any(kind == "metric" and text == "verl" for _, kind, _, text in run.parts), run.parts
    assert out["held_after_close"] == 0
    assert tracebacks == []
