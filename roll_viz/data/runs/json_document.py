"""Whole-file JSON documents (UNIPO JSON, TRL ``trainer_state.json``): capped, parsed once per open.

JSONL files stream line by line (``parse``); a document has to be parsed in one piece, so it is
refused before parsing when it is over ``parse.MAX_JSON_BYTES`` or when its estimated parsed
size passes ``parse.JSON_MEMORY_MULTIPLE`` times its bytes. Numbers are read as everywhere
(``json_numbers.loads``: a number a float cannot hold is an ``Unreadable`` in its place). The
caps are read from ``parse`` at call time (one place for every cap, and tests can lower them).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from roll_viz.data.runs import parse
from roll_viz.data.runs.json_numbers import loads

_ONCE = threading.local()  # the documents parsed during the current ``parse_once`` block


@contextlib.contextmanager
def parse_once() -> Iterator[None]:
    """Within the block, each JSON document is parsed once (detect, rows and header share it).

    Nothing is kept after the block: the scan's summaries are all that stays in memory.
    """
    outer = getattr(_ONCE, "docs", None)
    if outer is None:
        _ONCE.docs = {}
    try:
        yield
    finally:
        if outer is None:
            _ONCE.docs = None


def read_json_document(path: Path) -> Any:
    """A whole-file JSON document (capped at ``MAX_JSON_BYTES``); once per ``parse_once``."""
    stat = path.stat()
    docs = getattr(_ONCE, "docs", None)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    if docs is not None and key in docs:
        return docs[key]
    doc = _read_json_document(path, stat.st_size)
    if docs is not None:
        docs.clear()  # one document at a time
        docs[key] = doc
    return doc


def _read_json_document(path: Path, size: int) -> Any:
    if size > parse.MAX_JSON_BYTES:
        raise parse.DocumentTooLarge(
            path,
            None,
            None,
            f"{size} bytes: larger than the JSON cap {parse.MAX_JSON_BYTES} "
            "(JSONL streams without it)",
        )
    raw = path.read_bytes()
    objects = sum(raw.count(c) for c in (b"{", b"[", b",", b":"))
    if 72 * objects > parse.JSON_MEMORY_MULTIPLE * max(size, 1):
        raise parse.DocumentTooLarge(
            path,
            None,
            None,
            f"{objects} JSON values in {size} bytes: parsing it would take more than "
            f"{parse.JSON_MEMORY_MULTIPLE}x its size in memory; "
            "save it as JSONL (one entry a line)",
        )
    try:
        return loads(raw)
    except UnicodeDecodeError as err:
        raise parse.RunFormatError(path, None, None, f"not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise parse.RunFormatError(
            path, err.lineno, None, f"invalid JSON at column {err.colno}: {err.msg}"
        ) from None
    except RecursionError:
        raise parse.RunFormatError(path, None, None, "JSON nested too deeply") from None
