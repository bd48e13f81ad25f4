"""Streamlit's upload endpoint on the running app: bytes only where an uploader is, freed after.

The defect: files PUT to ``/_stcore/upload_file/<session>/<id>`` from a page with no uploader
were accepted (4 x 25 MB) and stayed in memory after the session closed. Here websocket clients
(``benchmarks.st_client``) open a page without an uploader and the *Your run* page, ask for upload
URLs as the frontend does and PUT bytes with the XSRF cookie; the bytes the server holds are
read from Streamlit's own metrics (``/_stcore/metrics``, ``UploadedFileManager``; cached 5 s).
The server keeps a closed session 2 s instead of 120 s (``server.disconnectedSessionTTL``) so
the release is seen within the test.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import time
import urllib.request
from pathlib import Path

import pytest

from benchmarks.server import streamlit_server
from benchmarks.st_client import Session, UploadedFile, put_file, run_coroutine, xsrf_cookie

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
    _LAST_READ[base] = time.monotonic()
    return sum(int(m.group(1)) for m in _HELD.finditer(text))


#: base URL -> when this test last read the metrics (its server's cache was filled then)
_LAST_READ: dict[str, float] = {}


async def fresh_held_bytes(base: str) -> int:
    """``held_bytes`` computed now: waits out the cache only if this test filled it lately.

    Nothing else asks the test's own server for its metrics, so a first read is fresh.
    """
    last = _LAST_READ.get(base)
    if last is not None:
        await asyncio.sleep(max(0.0, last + METRICS_TTL_S - time.monotonic()))
    return held_bytes(base)


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
    out["held_after_forged"] = await fresh_held_bytes(base)

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
    out["held_after_upload"] = await fresh_held_bytes(base)
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
        out = run_coroutine(_scenario(srv.base))
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


async def _crafted(base: str) -> dict:
    """The #33 attack: an upload URL for ``bomb.jsonl.gz``, the PUT, the uploader set to it."""
    xsrf = xsrf_cookie(base)
    out: dict = {}
    student = Session(base)
    await student.connect()
    res = await student.run(page="Your_run")
    out["uploader"] = "run_upload" in res.widgets
    bomb = gzip.compress(b'{"prompt": "p", "response": "r", "reward": 1}\n' * 1000)
    out["bomb_urls"] = await student.file_urls(["bomb.jsonl.gz"])
    # asked as a good name, sent under the crafted one
    ((file_id, url),) = await student.file_urls(["steps.jsonl"])
    out["renamed_put"] = put_file(base, url, "bomb.jsonl.gz", bomb, xsrf)[0]
    # set on the uploader anyway (as a crafted client may): the page must still run
    crafted = UploadedFile(file_id, "bomb.jsonl.gz", len(bomb), url)
    out["set_run"] = await student.run(files={"run_upload": [crafted]}, widgets=res.widgets)
    out["again"] = await student.run(files={"run_upload": [crafted]}, widgets=res.widgets)
    # over the server's upload quota (1 MB here): refused before it is stored
    ((_, big_url),) = await student.file_urls(["big.jsonl"])
    out["big_put"] = put_file(base, big_url, "big.jsonl", b"x" * (QUOTA_MB * 2**20 + 1), xsrf)[0]
    out["held_after_refusals"] = await fresh_held_bytes(base)
    # and the session keeps working: a good upload opens as a run
    data = (FIXTURES / "uploads" / "verl_steps.zip").read_bytes()
    ((good_id, good_url),) = await student.file_urls(["verl_steps.zip"])
    out["good_put"] = put_file(base, good_url, "verl_steps.zip", data, xsrf)[0]
    good = UploadedFile(good_id, "verl_steps.zip", len(data), good_url)
    out["good_run"] = await student.run(files={"run_upload": [good]}, widgets=res.widgets)
    # an id given on the Training page (its run-file uploader takes .jsonl), set on Your run's
    train = await student.run(page="Training")
    out["train_uploader"] = "tr_open_file" in train.widgets
    ((other_id, other_url),) = await student.file_urls(["r.jsonl"])
    out["other_put"] = put_file(base, other_url, "r.jsonl", b'{"type": "header"}\n', xsrf)[0]
    res = await student.run(page="Your_run")
    other = UploadedFile(other_id, "r.jsonl", 19, other_url)
    out["cross_run"] = await student.run(files={"run_upload": [other]}, widgets=res.widgets)
    await student.close()
    return out


QUOTA_MB = 1  # the guard's cap on all held uploads (ROLL_VIZ_UPLOAD_QUOTA_MB); Streamlit's 200


def test_issue_33_a_crafted_name_and_size_are_refused_and_the_session_keeps_working():
    env = {"ROLL_VIZ_UPLOAD_QUOTA_MB": str(QUOTA_MB)}
    with streamlit_server(model="tiny", extra_env=env) as srv:
        out = run_coroutine(_crafted(srv.base))
        tracebacks = srv.tracebacks()
    assert out["uploader"]
    assert out["bomb_urls"] == []  # no uploader on the page takes .gz: no URL
    assert out["renamed_put"] == 403  # the URL was given for steps.jsonl
    for key in ("set_run", "again"):
        run = out[key]
        assert run.status == "FINISHED_SUCCESSFULLY", key
        assert run.exceptions == [], (key, run.exceptions)  # was "This app has encountered..."
    assert out["big_put"] == 413
    assert out["held_after_refusals"] == 0  # nothing of the refused files was kept
    assert out["good_put"] == 204
    good = out["good_run"]
    assert good.status == "FINISHED_SUCCESSFULLY"
    assert good.exceptions == []
    assert any(kind == "metric" and text == "verl" for _, kind, _, text in good.parts), good.parts
    assert out["train_uploader"]
    assert out["other_put"] == 204
    cross = out["cross_run"]
    assert cross.status == "FINISHED_SUCCESSFULLY"
    assert cross.exceptions == []
    assert cross.toasts == ["Upload refused: r.jsonl is not a file this uploader takes."]
    assert tracebacks == []
