"""Uploaded run files: one folder per server process, a quota, freed when their sessions end.

``UploadStore`` keeps each upload under ``<temp>/roll-viz-uploads-<pid>/<sha256[:16]>/<name>``:

- one folder per server process, so two servers never share (or delete) each other's files; at
  start-up (the first use in a process) the folders of processes that no longer run, and the
  shared folder older versions kept, are removed;
- a quota (``UPLOAD_QUOTA_BYTES``, ``ROLL_VIZ_UPLOAD_QUOTA_MB``): a save that would pass it first
  removes the uploads nobody holds, then is refused with a message;
- holders: a session that saves or opens an upload holds it (``hold``); ``release(holder)`` when
  the session ends drops its holds, and an upload nobody holds is removed ``GRACE_S`` seconds
  later (a reconnecting session, which Streamlit gives a new websocket, takes it back in time);
- the folder is compared by real path (``RunsJail``), so a temp folder reached through a link
  (macOS's ``/tmp``) works.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from roll_viz.data.runs.jail import RunsJail

PREFIX = "roll-viz-uploads"
UPLOAD_QUOTA_BYTES = 1024 * 2**20  # all uploads of one server together (default 1 GiB)
MAX_UPLOAD_BYTES = 200 * 2**20  # one file (Streamlit's server.maxUploadSize is the same)
GRACE_S = 120.0  # an upload nobody holds is removed this long after its last holder left
UPLOAD_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _quota_from_env() -> int:
    raw = os.environ.get("ROLL_VIZ_UPLOAD_QUOTA_MB", "")
    try:
        mb = int(raw)
    except ValueError:
        return UPLOAD_QUOTA_BYTES
    return min(max(mb, 1), 1 << 20) * 2**20


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(parent: Path) -> list[str]:
    """Remove upload folders of processes that no longer run (and the old shared folder).

    Returns:
        The names of the folders removed.
    """
    removed = []
    for entry in parent.glob(f"{PREFIX}*"):
        suffix = entry.name[len(PREFIX) :]
        if suffix and not (suffix.startswith("-") and suffix[1:].isdigit()):
            continue
        stale = not suffix or not _pid_alive(int(suffix[1:]))
        if stale and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


class UploadStore:
    """This process's uploads (see the module docstring); thread-safe.

    Args:
        parent: where the per-process folder goes (default: the system temp folder).
        quota: bytes all uploads may take together.
        grace_s: how long an upload nobody holds is kept.
    """

    def __init__(
        self, parent: str | Path | None = None, quota: int | None = None, grace_s: float = GRACE_S
    ) -> None:
        self.parent = Path(parent) if parent is not None else Path(tempfile.gettempdir())
        self.quota = _quota_from_env() if quota is None else int(quota)
        self.grace_s = grace_s
        self._lock = threading.RLock()  # ``jail`` is read while the lock is held
        self._holders: dict[str, set[str]] = {}  # digest -> holders
        self._orphaned: dict[str, float] = {}  # digest -> time its last holder left
        self._jail: RunsJail | None = None

    @property
    def jail(self) -> RunsJail:
        """The upload folder as a jail (made, and stale folders cleaned, on first use)."""
        with self._lock:
            if self._jail is None:
                clean_stale(self.parent)
                root = self.parent / f"{PREFIX}-{os.getpid()}"
                root.mkdir(parents=True, exist_ok=True)
                self._jail = RunsJail(root, label="the upload folder")
            return self._jail

    @property
    def root(self) -> Path:
        """The real path of this process's upload folder."""
        return self.jail.root

    def used_bytes(self) -> int:
        """Bytes the uploads take now."""
        return sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file())

    def save(self, name: str, data: bytes, holder: str) -> str:
        """Keep ``data`` under its content hash for ``holder``; returns "<hash>/<safe name>".

        Raises:
            ValueError: too large, a file type no reader takes, or the quota is full.
        """
        if len(data) > MAX_UPLOAD_BYTES:
            raise ValueError(f"the file is larger than {MAX_UPLOAD_BYTES // 2**20} MB")
        safe = _SAFE_NAME.sub("_", Path(name).name)[:80] or "run.jsonl"
        if not safe.lower().endswith(UPLOAD_SUFFIXES):
            raise ValueError(f"expected a file ending in one of {', '.join(UPLOAD_SUFFIXES)}")
        digest = hashlib.sha256(data).hexdigest()[:16]
        target = self.root / digest / safe
        with self._lock:
            if not target.exists():
                if self._used() + len(data) > self.quota:
                    self._purge(force=True)
                if self._used() + len(data) > self.quota:
                    raise ValueError(
                        f"the server's upload space ({self.quota // 2**20} MB for everyone) is "
                        "full: try again when other students have closed their runs"
                    )
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(target.name + ".part")
                tmp.write_bytes(data)
                tmp.replace(target)
            self._hold(digest, holder)
        return f"{digest}/{safe}"

    def resolve(self, rel: str, holder: str | None = None) -> Path:
        """The real path of upload ``rel`` ("<hash>/<name>"), held by ``holder`` from now on.

        Raises:
            JailError: outside the upload folder, the folder itself, gone.
        """
        path = self.jail.resolve(rel)
        if holder is not None:
            with self._lock:
                self._hold(rel.split("/", 1)[0], holder)
        return path

    def release(self, holder: str) -> None:
        """``holder`` (a session) ended: its uploads nobody else holds go after ``grace_s``."""
        now = time.monotonic()
        with self._lock:
            for digest, holders in list(self._holders.items()):
                holders.discard(holder)
                if not holders:
                    del self._holders[digest]
                    self._orphaned[digest] = now
            self._purge()
        if self.grace_s > 0:
            timer = threading.Timer(self.grace_s + 0.5, self.purge)
            timer.daemon = True
            timer.start()

    def purge(self) -> list[str]:
        """Remove the uploads nobody held for ``grace_s``; returns their hashes."""
        with self._lock:
            return self._purge()

    # -- caller holds the lock ------------------------------------------------------------------
    def _hold(self, digest: str, holder: str) -> None:
        self._holders.setdefault(digest, set()).add(holder)
        self._orphaned.pop(digest, None)

    def _used(self) -> int:
        return self.used_bytes()

    def _purge(self, force: bool = False) -> list[str]:
        """Remove orphaned uploads (all of them when ``force``, else those past the grace)."""
        now = time.monotonic()
        gone = []
        for entry in list(self.root.iterdir()):
            digest = entry.name
            if digest in self._holders:
                continue
            left = self._orphaned.get(digest)
            if left is None:  # on disk but never held in this process: a leftover
                self._orphaned[digest] = left = now
            if force or now - left >= self.grace_s:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                self._orphaned.pop(digest, None)
                gone.append(digest)
        return gone
