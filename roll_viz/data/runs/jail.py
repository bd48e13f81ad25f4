"""The runs folder as a jail: every path a run opens is resolved and must stay inside the folder.

A visitor names a run by its place in an allowed folder (``dir:<name>``, ``upload:<hash>/<name>``);
``RunsJail(root).resolve(name)`` turns that into a real path only when:

- the name is not empty and names an entry *below* the folder, never the folder itself
  (``dir:``, ``dir:.``, ``dir:a/..`` are refused);
- its real path (``os.path.realpath(..., strict=True)``: every symbolic link followed) lies
  inside the folder's own real path: a link to a file or folder outside is refused, and so is
  a link loop or a broken link;
- it exists.

``open_run(path, jail=...)`` applies the same test to every file the scan would read (the files
of a per-step folder, a ``completions/`` subfolder, ``trainer_state.json`` beside it): entries
that lead outside are left out with a note that names neither their target nor their content.

Messages never quote a refused file's content nor show a server path: ``public_message`` turns a
reader's error into ``<name inside the folder>:<line>: <field>: <message>`` and any other
``OSError`` into a sentence without the path. The folder is compared by real path on both sides,
so it works when the folder itself is reached through a link (macOS's ``/tmp``).
"""

from __future__ import annotations

import os
from pathlib import Path

from roll_viz.data.runs.parse import RunFormatError


class JailError(ValueError):
    """A run name that is refused (its message shows no server path and no file content)."""


def real(path: str | Path) -> Path:
    """The real path (every link followed).

    Raises:
        JailError: a link loop, a broken link or a path that does not exist.
    """
    try:
        return Path(os.path.realpath(path, strict=True))
    except (OSError, RuntimeError, ValueError) as err:
        raise JailError("cannot be opened (missing, a broken link or a link loop)") from err


class RunsJail:
    """An allowed folder; names below it resolve to real paths inside it, nothing else.

    Args:
        root: the folder (may itself be reached through a link).
        label: how messages name the folder ("the runs folder", "the upload folder").
    """

    def __init__(self, root: str | Path, label: str = "the runs folder") -> None:
        self.root = real(root)
        self.label = label
        if not self.root.is_dir():
            raise JailError(f"{label} is not a folder")

    def contains(self, path: str | Path) -> bool:
        """True when ``path``'s real path lies strictly below the folder."""
        try:
            target = real(path)
        except JailError:
            return False
        return self.root in target.parents

    def check(self, path: str | Path) -> Path:
        """``path``'s real path when it lies strictly below the folder.

        Raises:
            JailError: outside, the folder itself, a loop, a broken link, missing.
        """
        target = real(path)
        if target == self.root:
            raise JailError(f"names {self.label} itself, not a run in it")
        if self.root not in target.parents:
            raise JailError(f"leads outside {self.label}")
        return target

    def resolve(self, name: str) -> Path:
        """The real path of the entry ``name`` (relative, below the folder).

        Raises:
            JailError: empty, absolute, the folder itself, outside, a loop, missing.
        """
        if not name or not name.strip() or "\0" in name:
            raise JailError(f"names {self.label} itself, not a run in it")
        rel = Path(name)
        if rel.is_absolute():
            raise JailError(f"is not a name inside {self.label}")
        if os.path.normpath(name) in (".", ""):
            raise JailError(f"names {self.label} itself, not a run in it")
        return self.check(self.root / rel)

    def public(self, path: str | Path) -> str:
        """``path`` as a name inside the folder ("run1/3.jsonl"), never a server path."""
        p = Path(path)
        for base in (self.root, Path(os.path.abspath(self.root))):
            try:
                return p.relative_to(base).as_posix() or "."
            except ValueError:
                continue
        try:
            return real(p).relative_to(self.root).as_posix()
        except (JailError, ValueError):
            return p.name


def public_message(err: BaseException, jail: RunsJail | None = None) -> str:
    """One line describing ``err`` for a page: no server path, no content of a refused file.

    Args:
        err: a ``RunFormatError``, ``JailError``, ``OSError`` or other ``ValueError``.
        jail: the folder the run came from (names files relative to it).

    Returns:
        The line.
    """
    if isinstance(err, RunFormatError):
        name = jail.public(err.file) if jail is not None else Path(err.file).name
        where = name if err.line is None else f"{name}:{err.line}"
        head = f"{where}: {err.field}: " if err.field else f"{where}: "
        return head + " ".join(err.message.split())
    if isinstance(err, JailError):
        return str(err)
    if isinstance(err, OSError):
        return f"the file cannot be read ({err.strerror or type(err).__name__})"
    return " ".join(str(err).split())
