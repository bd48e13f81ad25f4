"""Lesson rooms in Redis: shared between processes, the lesson carried as text, Redis gone or
restarted. (The store's rules run on both backends in ``test_votes.py``.)"""

from __future__ import annotations

import logging
import threading

import pytest

from roll_viz.data.lessons import builtin_lessons
from roll_viz.ui import lesson_fix, lesson_loop, lesson_page, lesson_steps, rooms, vote_page
from roll_viz.ui.votes import AnswerSpec, VoteError, VoteStore, owner_key
from roll_viz.ui.votes_redis import RedisVoteStore
from tests.redis_server import RedisServer, need_redis
from tests.ui.test_lesson_pages import browser_key, click, phone, plain, teacher, url_param


def use_store(monkeypatch, store) -> None:
    """Every page module that reads ``rooms.STORE`` reads ``store`` (as a hall's process would)."""
    for module in (lesson_page, vote_page, lesson_steps, lesson_loop, lesson_fix):
        monkeypatch.setattr(module, "STORE", store)


@pytest.fixture
def server(tmp_path):
    need_redis()
    srv = RedisServer(tmp_path, appendonly=True).start()
    yield srv
    srv.stop()


def test_without_the_variable_the_store_is_in_process(monkeypatch):
    monkeypatch.delenv(rooms.ENV_REDIS, raising=False)
    assert isinstance(rooms.make_store(), VoteStore)
    assert isinstance(rooms.make_store(""), VoteStore)


def test_two_processes_share_one_room_and_its_lesson(server):
    lesson = next(iter(builtin_lessons().values()))
    teacher_side = rooms.make_store(server.url)  # two stores, two connection pools: two processes
    phone_side = rooms.make_store(server.url)
    specs = [AnswerSpec(options=2)] * len(lesson.steps)
    code, key = teacher_side.create_room(lesson.id, specs, content=lesson, owner="k" * 32)
    got = phone_side.content(code)
    # parsed again from its TOML text: the same lesson (its answers are parsed expressions, whose
    # syntax trees compare by identity: compare their sources)
    assert got.text == lesson.text
    assert got.text
    assert (got.id, got.title, [g.id for g in got.steps]) == (
        lesson.id,
        lesson.title,
        [g.id for g in lesson.steps],
    )
    assert [g.answer.source for g in got.gates] == [g.answer.source for g in lesson.gates]
    token = phone_side.join(code)
    phone_side.vote(code, token, 0, 1, 1)
    assert teacher_side.tally(code, key).rounds[1] == {1.0: 1}
    teacher_side.set_phase(code, key, "locked")
    with pytest.raises(VoteError) as info:
        phone_side.vote(code, token, 0, 1, 0)
    assert info.value.reason == "closed"


def test_fifty_phones_on_two_processes_each_vote_counts_once(server):
    a, b = RedisVoteStore(server.url), RedisVoteStore(server.url)
    code, key = a.create_room("hall", [AnswerSpec(options=4)])
    tokens = [(a if i % 2 else b).join(code) for i in range(50)]
    barrier = threading.Barrier(50)
    errors: list[Exception] = []

    def phone(i: int) -> None:
        store = a if i % 2 else b
        barrier.wait()
        try:
            store.vote(code, tokens[i], 0, 1, i % 4)
            store.vote(code, tokens[i], 0, 1, (i + 1) % 4)  # a changed answer replaces the first
        except VoteError as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=phone, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    tally = a.tally(code, key)
    assert tally.answered[1] == 50
    assert sum(tally.rounds[1].values()) == 50
    assert tally.rounds[1] == {0.0: 12, 1.0: 13, 2.0: 13, 3.0: 12}
    assert len(b.export_rows(code, key)) == 50


def test_redis_gone_is_one_message_and_a_restart_keeps_the_room(server):
    store = RedisVoteStore(server.url)
    code, _ = store.create_room("hall", [AnswerSpec(options=2)])
    token = store.join(code)
    store.vote(code, token, 0, 1, 1)
    server.stop()
    for call in (lambda: store.view(code), lambda: store.vote(code, token, 0, 1, 0)):
        with pytest.raises(VoteError) as info:
            call()
        assert info.value.reason == "store_down"
        assert "Redis" in str(info.value)
    server.start()  # the append-only file brings the room back
    assert store.view(code).answered == 1
    assert store.my_answer(code, token) == 1.0


def test_a_room_from_redis_is_never_unpickled(server):
    store = rooms.make_store(server.url)
    code, _ = store.create_room(
        "x", [AnswerSpec(options=2)], content=builtin_lessons()["seed_chain"]
    )
    raw = store.r.get(f"rv:{code}:content")
    assert raw.startswith("{")  # JSON holding the TOML text
    assert '"text"' in raw


def test_pages_on_the_hall_store_and_when_redis_is_gone(server, monkeypatch):
    """The lesson and vote pages on the Redis store: a room started by the teacher's page is
    answered by a phone's page; with Redis gone both pages say so in one sentence (no traceback)
    and the teacher's page keeps the room in its URL."""
    hall_store = rooms.make_store(server.url)
    use_store(monkeypatch, hall_store)
    at = teacher()
    click(at, "lesson_start")
    code = url_param(at, "room")
    browser = browser_key(at)
    ph = phone(room=code)
    click(ph, "vote_0_1_2")
    assert hall_store.tally(code, owner_key(browser, code)).rounds[1] == {2.0: 1}
    assert "Your answer" in plain(ph)

    server.stop()
    ph.run()
    assert not ph.exception
    assert "lesson store (Redis) cannot be reached" in plain(ph)
    again = teacher(browser, room=code)
    assert not again.exception
    assert "lesson store (Redis) cannot be reached" in plain(again)
    assert url_param(again, "room") == code  # kept: the room comes back with Redis


@pytest.fixture
def volatile(tmp_path):
    """A Redis without persistence: a restart comes back empty."""
    need_redis()
    srv = RedisServer(tmp_path, appendonly=False).start()
    yield srv
    srv.stop()


def test_redis_restarted_without_its_data_says_the_lesson_is_gone(volatile):
    seen = RedisVoteStore(volatile.url)  # a process that served the room
    code, key = seen.create_room("hall", [AnswerSpec(options=2)])
    token = seen.join(code)
    seen.vote(code, token, 0, 1, 1)
    closed, closed_key = seen.create_room("hall", [AnswerSpec(options=2)])
    seen.view(closed)
    seen.close(closed, closed_key)
    with pytest.raises(VoteError) as info:  # closed by its teacher: no room, not a lost store
        seen.view(closed)
    assert info.value.reason == "no_room"
    never = RedisVoteStore(volatile.url)  # a process that never saw the room

    volatile.stop()
    volatile.start()  # the same port, no data
    calls = (
        lambda: seen.view(code),
        lambda: seen.content(code),
        lambda: seen.vote(code, token, 0, 1, 0),
        lambda: seen.my_answer(code, token),
        lambda: seen.is_teacher(code, key),
        lambda: seen.knows(code, token),
        lambda: seen.tally(code, key),
        lambda: seen.join(code),
    )
    for call in calls:
        with pytest.raises(VoteError) as info:
            call()
        assert info.value.reason == "store_lost"
        assert "restarted without its saved data" in str(info.value)
    with pytest.raises(VoteError) as info:
        never.view(code)
    assert info.value.reason == "no_room"  # it cannot tell a lost room from a made-up code
    # the teacher starts again: the new room works, the old code still says what happened
    fresh, _ = seen.create_room("hall", [AnswerSpec(options=2)])
    assert seen.view(fresh).students == 0
    assert never.view(fresh).students == 0
    with pytest.raises(VoteError) as info:
        seen.view(code)
    assert info.value.reason == "store_lost"


def test_pages_say_the_lesson_is_gone_when_redis_lost_its_data(volatile, monkeypatch):
    """Teacher and phone pages after a Redis restart without data: the sentence, no traceback;
    the teacher's page drops the room from its URL and offers a new lesson, the phone the join
    form."""
    hall_store = rooms.make_store(volatile.url)
    use_store(monkeypatch, hall_store)
    at = teacher()
    click(at, "lesson_start")
    code = url_param(at, "room")
    browser = browser_key(at)
    ph = phone(room=code)
    assert "No answer from this phone yet" in plain(ph)  # what to do, before any vote
    click(ph, "vote_0_1_2")
    assert "No answer from this phone yet" not in plain(ph)

    volatile.stop()
    volatile.start()
    ph.run()
    assert not ph.exception
    assert "restarted without its saved data" in plain(ph)
    again = teacher(browser, room=code)
    assert not again.exception
    assert "restarted without its saved data" in plain(again)
    assert "could not be drawn" not in plain(again) + plain(ph)  # not the page guard's
    assert url_param(again, "room") is None  # gone for good: a new lesson, a new code
    assert again.button(key="lesson_start")
    reopened = phone(room=code)
    assert not reopened.exception
    assert "restarted without its saved data" in plain(reopened)
    assert reopened.text_input(key="vote_code")  # the new room's code goes here


def test_a_store_failure_mid_page_is_its_one_sentence(server, monkeypatch, caplog):
    """Redis fails after the teacher's page checked the room (between two calls): the page says
    so in one sentence; the page guard (which logs a traceback and says "could not be drawn")
    never sees it."""
    hall_store = rooms.make_store(server.url)
    use_store(monkeypatch, hall_store)
    at = teacher()
    click(at, "lesson_start")
    code = url_param(at, "room")

    def down(_code):
        raise VoteError("store_down", "the lesson store (Redis) cannot be reached")

    monkeypatch.setattr(hall_store, "content", down)  # is_teacher answered; the next call fails
    with caplog.at_level(logging.ERROR, logger="roll_viz.pages"):
        again = teacher(browser_key(at), room=code)
    assert not again.exception
    assert "lesson store (Redis) cannot be reached" in plain(again)
    assert "could not be drawn" not in plain(again)
    assert not [r for r in caplog.records if r.name == "roll_viz.pages"]  # no traceback logged
    assert url_param(again, "room") == code
