"""The one lesson-room store of this server process: Redis in a lecture hall, else in-process.

``ROLL_VIZ_REDIS=redis://host:port/db`` (what ``python -m roll_viz hall`` sets for each app
process) puts rooms, students, votes and their bounds in Redis, shared by every process behind
the hall's proxy (``votes_redis``); without it they live in this process (``votes.VoteStore``),
the default of ``make run``. A room's lesson travels as its id and TOML text and is parsed again
where it is read (nothing is pickled).
"""

from __future__ import annotations

import os
from functools import lru_cache

from roll_viz.data.lessons import Lesson, parse_lesson
from roll_viz.ui.votes import VoteStore
from roll_viz.ui.votes_redis import RedisVoteStore

ENV_REDIS = "ROLL_VIZ_REDIS"


def lesson_json(lesson: Lesson) -> dict:
    """A room's content as Redis stores it: the lesson's id and its TOML text."""
    return {"id": lesson.id, "text": lesson.text}


@lru_cache(maxsize=64)
def _parse(lesson_id: str, text: str) -> Lesson:
    return parse_lesson(text, lesson_id=lesson_id)


def lesson_from_json(data: dict) -> Lesson:
    """The inverse of ``lesson_json`` (parsed once per process and text, then shared: frozen)."""
    return _parse(str(data["id"]), str(data["text"]))


def make_store(url: str | None = None) -> VoteStore | RedisVoteStore:
    """The store for ``url``: Redis, or in-process when empty.

    ``url`` defaults to the ``ROLL_VIZ_REDIS`` environment variable (unset = in-process).
    """
    url = os.environ.get(ENV_REDIS, "") if url is None else url
    if not url:
        return VoteStore()
    return RedisVoteStore(url, encode=lesson_json, decode=lesson_from_json)


#: the one store of this server process
STORE = make_store()
