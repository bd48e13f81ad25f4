"""The upload guard: bytes only under ids given to a page with an uploader, freed when it goes.

Streamlit 1.67 stores a PUT to ``/_stcore/upload_file/<session>/<id>`` for any live session and
any id (4 x 25 MB from a page with no uploader were kept, and stayed after the session closed).
Here the guard wraps a real ``MemoryUploadedFileManager`` with a stand-in runtime; the server
test (``tests/bench/test_upload_guard_server.py``) sends the same requests over HTTP.
"""

from __future__ import annotations

import pytest
from starlette.exceptions import HTTPException
from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
from streamlit.runtime.uploaded_file_manager import UploadedFileRec

from roll_viz.ui import guard, upload_guard
from roll_viz.ui.upload_guard import UploadGuard


class FakeRuntime:
    """What the guard reads of the Runtime: which sessions are connected."""

    def __init__(self) -> None:
        self.connected: set[str] = set()

    def is_active_session(self, session_id: str) -> bool:
        return session_id in self.connected

    def get_app_session(self, session_id: str) -> None:
        return None


@pytest.fixture
def setup():
    runtime = FakeRuntime()
    runtime.connected |= {"with", "without"}
    manager = MemoryUploadedFileManager("/_stcore/upload_file")
    pages = {"with": {"up": None}, "without": {}}  # session -> uploader widget id -> types
    g = UploadGuard(runtime, manager, lambda rt, sid: pages.get(sid, {}), grace_s=10.0)
    g.install()
    yield runtime, manager, g
    g.stop()


def _rec(file_id: str, size: int = 100, name: str = "a.jsonl") -> UploadedFileRec:
    return UploadedFileRec(file_id=file_id, name=name, type="text/plain", data=b"x" * size)


def test_a_page_without_an_uploader_gets_no_url_and_its_put_is_refused(setup):
    runtime, manager, _ = setup
    assert manager.get_upload_urls("without", ["a.jsonl"]) == []
    assert not runtime.is_active_session("without")  # the route refuses before reading
    with pytest.raises(HTTPException) as err:
        manager.add_file("without", _rec("made-up"))
    assert err.value.status_code == 403
    assert manager.get_stats() == {}


def test_an_uploader_gets_ids_and_only_those_ids_are_stored(setup):
    runtime, manager, g = setup
    (info,) = manager.get_upload_urls("with", ["a.jsonl"])
    assert info.upload_url == f"/_stcore/upload_file/with/{info.file_id}"
    assert runtime.is_active_session("with")
    manager.add_file("with", _rec(info.file_id, 5000))
    assert [f.file_id for f in manager.get_files("with", [info.file_id])] == [info.file_id]
    assert g.total_bytes() == 5000
    with pytest.raises(HTTPException) as err:
        manager.add_file("with", _rec("not-given"))
    assert err.value.status_code == 403
    with pytest.raises(HTTPException):  # an id of one session is not another's
        manager.add_file("without", _rec(info.file_id))


def test_the_apps_size_caps_hold(setup, monkeypatch):
    _, manager, g = setup
    monkeypatch.setattr(upload_guard, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(upload_guard, "MAX_SERVER_BYTES", 1500)
    a, b = manager.get_upload_urls("with", ["a.jsonl", "b.jsonl"])
    with pytest.raises(HTTPException) as err:
        manager.add_file("with", _rec(a.file_id, 1001))
    assert err.value.status_code == 413
    manager.add_file("with", _rec(a.file_id, 1000))
    manager.add_file("with", _rec(a.file_id, 900))  # a replaced file counts once
    with pytest.raises(HTTPException) as err:
        manager.add_file("with", _rec(b.file_id, 700, "b.jsonl"))  # 900 + 700 > 1500 in all
    assert err.value.status_code == 413
    manager.add_file("with", _rec(b.file_id, 600, "b.jsonl"))
    assert g.total_bytes() == 1500


def test_ids_per_session_are_bounded(setup, monkeypatch):
    _, manager, _ = setup
    monkeypatch.setattr(upload_guard, "MAX_PENDING_IDS", 3)
    assert len(manager.get_upload_urls("with", ["a", "b"])) == 2
    assert len(manager.get_upload_urls("with", ["c", "d", "e"])) == 1
    assert manager.get_upload_urls("with", ["f"]) == []


def test_a_removed_file_loses_its_id(setup):
    _, manager, _ = setup
    (info,) = manager.get_upload_urls("with", ["a.jsonl"])
    manager.add_file("with", _rec(info.file_id))
    manager.remove_file("with", info.file_id)
    assert manager.get_stats() == {}
    with pytest.raises(HTTPException):
        manager.add_file("with", _rec(info.file_id))


def test_files_are_freed_when_the_session_stays_away_past_the_grace(setup):
    runtime, manager, g = setup
    (info,) = manager.get_upload_urls("with", ["a.jsonl"])
    manager.add_file("with", _rec(info.file_id, 25_000))
    runtime.connected.discard("with")  # the tab closed
    assert g.sweep(now=100.0) == []  # first seen away
    assert g.sweep(now=105.0) == []  # within the grace: a reconnect finds its file
    runtime.connected.add("with")  # it came back
    assert g.sweep(now=111.0) == []
    runtime.connected.discard("with")
    assert g.sweep(now=112.0) == []
    assert g.total_bytes() == 25_000
    assert g.sweep(now=122.0) == ["with"]
    assert manager.get_stats() == {}
    assert g.sessions() == []


def test_a_session_streamlit_shuts_down_is_forgotten(setup):
    runtime, manager, g = setup
    (info,) = manager.get_upload_urls("with", ["a.jsonl"])
    manager.add_file("with", _rec(info.file_id))
    manager.remove_session_files("with")
    assert manager.get_stats() == {}
    assert g.sessions() == []
    assert not runtime.is_active_session("with")  # no id left: the route refuses again


def test_outside_a_server_nothing_is_installed():
    assert guard.real_server() is None
    assert guard.install_server_guards() is False


RUN_TYPES = [".jsonl", ".json", ".parquet", ".csv", ".zip"]  # Your run's uploader
LESSON_TYPES = [".toml"]


@pytest.fixture
def typed():
    """A page with Your run's uploader and a lesson uploader; ``holder`` picks the one read."""
    runtime = FakeRuntime()
    runtime.connected.add("s")
    manager = MemoryUploadedFileManager("/_stcore/upload_file")
    reading: list[str | None] = [None]
    g = UploadGuard(
        runtime,
        manager,
        lambda rt, sid: {"run": RUN_TYPES, "lesson": LESSON_TYPES},
        grace_s=10.0,
        holder=lambda rt, sid, ids: reading[0],
    )
    g.install()
    yield manager, g, reading
    g.stop()


@pytest.mark.parametrize(
    "name", ["bomb.jsonl.gz", "run.exe", "a.jsonl\0.gz", "noext", "run.jsonl.", "x.py"]
)
def test_issue_33_a_name_no_uploader_takes_gets_no_url(typed, name):
    manager, g, _ = typed
    assert manager.get_upload_urls("s", [name]) == []
    assert manager.get_upload_urls("s", ["ok.jsonl", name]) == []  # all or nothing
    assert g.refused == 2
    assert g.sessions() in ([], ["s"])
    assert manager.get_upload_urls("s", ["RUN.JSONL"])  # Streamlit's check ignores case


def test_a_put_under_another_name_than_asked_is_refused(typed):
    manager, _, _ = typed
    (info,) = manager.get_upload_urls("s", ["steps.jsonl"])
    with pytest.raises(HTTPException) as err:
        manager.add_file("s", _rec(info.file_id, 100, "bomb.jsonl.gz"))
    assert err.value.status_code == 403
    assert manager.get_stats() == {}
    manager.add_file("s", _rec(info.file_id, 100, "steps.jsonl"))
    assert manager.get_stats() != {}


def test_a_file_set_on_an_uploader_that_does_not_take_it_is_left_out(typed, monkeypatch):
    """An id given for the lesson uploader (.toml), set on Your run's: an empty slot + toast."""
    manager, g, reading = typed
    toasts = []
    monkeypatch.setattr(upload_guard, "_notice", toasts.append)
    (lesson,) = manager.get_upload_urls("s", ["l.toml"])
    (run,) = manager.get_upload_urls("s", ["r.jsonl"])
    manager.add_file("s", _rec(lesson.file_id, 10, "l.toml"))
    manager.add_file("s", _rec(run.file_id, 10, "r.jsonl"))
    reading[0] = "run"  # Your run's uploader reads its value
    assert manager.get_files("s", [lesson.file_id]) == []
    assert [r.name for r in manager.get_files("s", [run.file_id])] == ["r.jsonl"]
    reading[0] = "lesson"
    assert [r.name for r in manager.get_files("s", [lesson.file_id])] == ["l.toml"]
    reading[0] = None  # not an uploader's read (the guard's own bookkeeping): all given
    assert len(manager.get_files("s", [lesson.file_id, run.file_id])) == 2
    assert toasts == ["Upload refused: l.toml is not a file this uploader takes."]
    assert g.refused == 1


def test_a_put_whose_type_no_uploader_on_the_page_takes_any_more_is_415(typed):
    manager, g, _ = typed
    (info,) = manager.get_upload_urls("s", ["r.jsonl"])
    g.uploaders = lambda rt, sid: {"lesson": LESSON_TYPES}  # the student moved to another page
    with pytest.raises(HTTPException) as err:
        manager.add_file("s", _rec(info.file_id, 10, "r.jsonl"))
    assert err.value.status_code == 415
