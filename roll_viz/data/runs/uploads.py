"""Uploaded run files: one folder per server process, a quota, freed when their sessions end.

``UploadStore`` keeps each upload under ``<temp>/roll-viz-uploads-<pid>/<sha256[:16]>/<name>``:

- one folder per server process, so two servers never share (or delete) each other's files; at
  start-up (the first use in a process) the folders of processes that no longer run, and the
  shared folder older versions kept, are removed;
- a quota (``UPLOAD_QUOTA_BYTES``, ``ROLL_VIZ_UPLOAD_QUOTA_MB``): a save that would pass it first
  removes the uploads nobody holds, then is refused with a message;
- holders: a session that saves or opens an upload holds it (``hold``); ``release(holder)`` when
  the session ends drops its holds, and an upload nobody holds is removed ``GRACE_S`` seconds
  later (a reconnecting session, which Streamlit gives a new websocket, takes it back in time):
  the reconnect grace of the runs (``ROLL_VIZ_RECONNECT_GRACE_S``, 120 s by default), the
  removal timed on one shared thread (``timers.Deadlines``; a ``threading.Timer`` per closed
  session held 20 threads for 120 s after each class, #33);
- the folder is compared by real path (``RunsJail``), so a temp folder reached through a link
  (macOS's ``/tmp``) works.

Several files, or a zip (verl and TRL write one file per step), become one run: ``save_files``
writes them into one folder ``<hash>/<label>/`` that ``open_run`` reads as a single run with one
history (a ``completions/`` folder inside keeps its place beside ``trainer_state.json``). A zip is
unpacked by ``zip_members`` under caps and never run: only members ending in a reader's suffix
are written, each under its own base name (no folder from the archive is trusted: ``..``,
absolute and drive paths cannot lead out), links, encrypted members and anything else are
skipped; at most ``MAX_ZIP_MEMBERS`` members and ``MAX_UNZIPPED_BYTES`` unpacked bytes, counted
on the bytes actually inflated (a header that lies about a member's size stops at the cap).
Nothing is unpickled or executed.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from roll_viz.data.runs.jail import RunsJail
from roll_viz.data.runs.timers import Deadlines

PREFIX = "roll-viz-uploads"
UPLOAD_QUOTA_BYTES = 1024 * 2**20  # all uploads of one server together (default 1 GiB)
MAX_UPLOAD_BYTES = 200 * 2**20  # one file (Streamlit's server.maxUploadSize is the same)


def _grace_from_env(default: float = 120.0) -> float:
    """``ROLL_VIZ_RECONNECT_GRACE_S`` in [1, 3600] s (as ``ui.reconnect`` reads it), else 120."""
    try:
        value = float(os.environ.get("ROLL_VIZ_RECONNECT_GRACE_S", ""))
    except ValueError:
        return default
    return value if 1.0 <= value <= 3600.0 else default


GRACE_S = _grace_from_env()  # an upload nobody holds is removed this long after its last holder
#: the one thread that removes uploads whose grace ended (shared by the stores of a process)
TIMERS = Deadlines("roll-viz-upload-purge")
UPLOAD_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
ZIP_SUFFIX = ".zip"
MAX_ZIP_MEMBERS = 2000  # entries of one zip (folders and skipped files count too)
MAX_UPLOAD_FILES = 2000  # files of one multi-file upload
MAX_UNZIPPED_BYTES = 1024 * 2**20  # bytes one zip may unpack to (counted while inflating)
_CHUNK = 1 << 20
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, default: str = "run.jsonl") -> str:
    """The base name of ``name`` with anything but letters, digits and ``._-`` replaced."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    safe = _SAFE_NAME.sub("_", base)[:80].lstrip(".")
    return safe or default


def _place(name: str) -> str:
    """Where a file of a multi-file upload or zip goes in the run folder (relative, safe).

    Only the base name is kept; a file whose folder is ``completions`` stays in a
    ``completions/`` folder (TRL's layout, read with ``trainer_state.json`` beside it).
    """
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    base = safe_name(parts[-1] if parts else "")
    if len(parts) > 1 and parts[-2] == "completions":
        return f"completions/{base}"
    return base


def _wanted(name: str) -> bool:
    """A zip member worth unpacking: a reader's suffix, not hidden, not macOS metadata."""
    parts = name.replace("\\", "/").split("/")
    return (
        not parts[-1].startswith(".")
        and "__MACOSX" not in parts
        and parts[-1].lower().endswith(UPLOAD_SUFFIXES)
    )


def zip_members(data: bytes, limit: int = MAX_UNZIPPED_BYTES) -> Iterator[tuple[str, Iterator]]:
    """The run files of a zip as ``(place in the run folder, chunks of its bytes)``.

    Checked before anything is written: a readable zip, at most ``MAX_ZIP_MEMBERS`` entries,
    declared sizes within ``limit``, no two files with the same place. While the chunks are read,
    the bytes actually inflated are counted against ``limit`` (a lying header stops there).
    Skipped: folders, links, encrypted members, files no reader takes, macOS ``__MACOSX``.

    Raises:
        ValueError: not a zip, too many entries, too large, two files with the same name, or
            no run file in it (the message names no server path).
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError):
        raise ValueError("the .zip file cannot be read as a zip archive") from None
    infos = archive.infolist()
    if len(infos) > MAX_ZIP_MEMBERS:
        raise ValueError(f"the zip has {len(infos)} entries, more than {MAX_ZIP_MEMBERS}")
    chosen: dict[str, zipfile.ZipInfo] = {}
    declared = 0
    for info in infos:
        mode = info.external_attr >> 16
        if (
            info.is_dir()
            or stat.S_ISLNK(mode)
            or info.flag_bits & 0x1
            or not _wanted(info.filename)
        ):
            continue
        place = _place(info.filename)
        if place in chosen:
            raise ValueError(f"the zip has two files named {place}: put one run in a zip")
        chosen[place] = info
        declared += info.file_size
    if not chosen:
        raise ValueError(
            f"the zip holds no run file (expected files ending in {', '.join(UPLOAD_SUFFIXES)})"
        )
    if declared > limit:
        raise ValueError(f"the zip unpacks to more than {limit // 2**20} MB")
    budget = [limit]

    def chunks(info: zipfile.ZipInfo) -> Iterator[bytes]:
        try:
            with archive.open(info) as member:
                while chunk := member.read(_CHUNK):
                    budget[0] -= len(chunk)
                    if budget[0] < 0:
                        raise ValueError(f"the zip unpacks to more than {limit // 2**20} MB")
                    yield chunk
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError):
            raise ValueError(f"the zip member {_place(info.filename)} cannot be read") from None

    for place, info in sorted(chosen.items()):
        yield place, chunks(info)


def quota_from_env() -> int:
    """The upload quota in bytes: ``ROLL_VIZ_UPLOAD_QUOTA_MB`` (1 MB - 1 TB), else 1 GiB."""
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
        self.quota = quota_from_env() if quota is None else int(quota)
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

    def save_files(self, files: Sequence[tuple[str, bytes]], holder: str) -> str:
        """Keep several files, or one zip, as one run folder; returns "<hash>/<label>".

        ``files`` are ``(name, data)`` pairs as uploaded; a ``.zip`` among them is unpacked
        (``zip_members``), the others are kept under their safe base names. One plain file is
        ``save`` (its own id). The folder is named by the hash of every name and content, so the
        same upload maps to the same run; it is written to a ``.part`` folder and renamed when
        complete, and counted against the quota like a single file.

        Raises:
            ValueError: a file too large or of a type no reader takes, a bad or oversized zip,
                two files with the same name, too many files, or the quota is full.
        """
        if not files:
            raise ValueError("no file uploaded")
        if len(files) > MAX_UPLOAD_FILES:
            raise ValueError(f"{len(files)} files, more than {MAX_UPLOAD_FILES} in one upload")
        if len(files) == 1 and not files[0][0].lower().endswith(ZIP_SUFFIX):
            return self.save(files[0][0], files[0][1], holder)
        for name, data in files:
            if len(data) > MAX_UPLOAD_BYTES:
                raise ValueError(f"{safe_name(name)} is larger than {MAX_UPLOAD_BYTES // 2**20} MB")
            if not name.lower().endswith((*UPLOAD_SUFFIXES, ZIP_SUFFIX)):
                raise ValueError(
                    f"{safe_name(name)}: expected files ending in one of "
                    f"{', '.join((*UPLOAD_SUFFIXES, ZIP_SUFFIX))}"
                )
        h = hashlib.sha256()
        for name, data in sorted(files, key=lambda f: f[0]):
            h.update(safe_name(name).encode() + b"\0" + hashlib.sha256(data).digest())
        digest = h.hexdigest()[:16]
        first = safe_name(sorted(name for name, _ in files)[0])
        label = first.rsplit(".", 1)[0] if first.lower().endswith(ZIP_SUFFIX) else "files"
        label = f"{label}_{len(files)}_files" if len(files) > 1 else label
        target = self.root / digest / label
        with self._lock:
            if not target.is_dir():
                self._write_folder(target, files)
            self._hold(digest, holder)
        return f"{digest}/{label}"

    def _write_folder(self, target: Path, files: Sequence[tuple[str, bytes]]) -> None:
        """Write an upload's files into ``target`` through a ``.part`` folder (lock held)."""
        room = self.quota - self._used()
        if room < sum(len(d) for n, d in files if not n.lower().endswith(ZIP_SUFFIX)):
            self._purge(force=True)
            room = self.quota - self._used()
        part = target.parent.with_name(target.parent.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        try:
            folder = part / target.name
            folder.mkdir(parents=True)
            written: set[str] = set()
            for name, data in files:
                if name.lower().endswith(ZIP_SUFFIX):
                    members = zip_members(data)
                else:
                    members = iter([(_place(name), iter([data]))])
                for place, chunks in members:
                    if place in written:
                        raise ValueError(f"two files named {place}: upload one run at a time")
                    written.add(place)
                    path = folder / place
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with open(path, "wb") as handle:
                        for chunk in chunks:
                            room -= len(chunk)
                            if room < 0:
                                raise ValueError(self._full_message())
                            handle.write(chunk)
            target.parent.mkdir(parents=True, exist_ok=True)
            folder.replace(target)
        finally:
            shutil.rmtree(part, ignore_errors=True)

    def _full_message(self) -> str:
        return (
            f"the server's upload space ({self.quota // 2**20} MB for everyone) is full: try "
            "again when other students have closed their runs"
        )

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
        orphaned = False
        with self._lock:
            for digest, holders in list(self._holders.items()):
                holders.discard(holder)
                if not holders:
                    del self._holders[digest]
                    self._orphaned[digest] = now
                    orphaned = True
            self._purge()
        if orphaned and self.grace_s > 0:
            TIMERS.call_later(self.grace_s + 0.5, self.purge)

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
