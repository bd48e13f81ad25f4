"""The class-vote store: rounds, double votes, replays, wrong rooms, bounds, expiry, load.

Every store test runs twice: on the in-process store and on the Redis store of a lecture hall
(a real ``redis-server``, ``tests/redis_server.py``), which must behave the same.
"""

from __future__ import annotations

import csv
import io
import threading
import time

import pytest

from roll_viz.ui import votes
from roll_viz.ui.votes import (
    AnswerSpec,
    VoteError,
    VoteStore,
    csv_text,
    neutral_cell,
    owner_key,
    voter_token,
)
from roll_viz.ui.votes_redis import RedisVoteStore
from tests.redis_server import RedisServer, need_redis

SPECS = [AnswerSpec(options=3), AnswerSpec(low=-3.0, high=0.0), AnswerSpec(options=2)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    need_redis()
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server.url
    server.stop()


@pytest.fixture(params=["memory", "redis"])
def make_store(request):
    """A factory of empty stores of one backend: ``make_store(clock=..., max_rooms=...)``."""
    if request.param == "memory":
        return VoteStore
    url = request.getfixturevalue("redis_url")

    def make(**kwargs):
        store = RedisVoteStore(url, **kwargs)
        store.r.flushdb()
        return store

    return make


@pytest.fixture
def store(make_store, clock):
    return make_store(clock=clock)


@pytest.fixture
def room(store):
    code, key = store.create_room("seed_chain", SPECS, content="lesson")
    return code, key


def reason(fn, *args) -> str:
    with pytest.raises(VoteError) as info:
        fn(*args)
    return info.value.reason


def test_room_code_and_teacher_key(store, room):
    code, key = room
    assert len(code) == votes.CODE_LENGTH
    assert set(code) <= set(votes.CODE_ALPHABET)
    assert store.is_teacher(code, key)
    assert store.is_teacher(code.lower(), key)  # a code typed in lower case still works
    assert not store.is_teacher(code, "guess")
    assert store.content(code) == "lesson"
    assert reason(store.next, code, "guess") == "not_teacher"
    assert reason(store.tally, code, "guess") == "not_teacher"
    assert reason(store.export_rows, code, None) == "not_teacher"


def test_one_vote_per_student_per_round(store, room):
    code, key = room
    a, b = store.join(code), store.join(code)
    store.vote(code, a, 0, 1, 2)
    store.vote(code, a, 0, 1, 2)  # a replay of the same vote: still one
    store.vote(code, b, 0, 1, 1)
    store.vote(code, a, 0, 1, 0)  # a change before the lock replaces, never adds
    tally = store.tally(code, key)
    assert tally.answered[1] == 2
    assert tally.rounds[1] == {0.0: 1, 1.0: 1}
    assert store.my_answer(code, a) == 0.0
    assert store.view(code).answered == 2


def test_revote_keeps_both_rounds(store, room):
    code, key = room
    a, b = store.join(code), store.join(code)
    store.vote(code, a, 0, 1, 0)
    store.vote(code, b, 0, 1, 0)
    store.set_phase(code, key, "locked")
    assert reason(store.vote, code, a, 0, 1, 1) == "closed"
    store.revote(code, key)
    assert store.view(code).round == 2
    assert store.my_answer(code, a) is None  # a fresh round
    assert reason(store.vote, code, a, 0, 1, 1) == "stale"  # a late round-1 vote
    store.vote(code, a, 0, 2, 2)
    store.vote(code, b, 0, 2, 2)
    tally = store.tally(code, key)
    assert tally.rounds[1] == {0.0: 2}
    assert tally.rounds[2] == {2.0: 2}


def test_replayed_vote_for_an_old_step_is_refused(store, room):
    code, key = room
    a = store.join(code)
    store.vote(code, a, 0, 1, 1)
    store.next(code, key)
    assert reason(store.vote, code, a, 0, 1, 1) == "stale"
    store.vote(code, a, 1, 1, -1.25)
    assert store.tally(code, key).rounds[1] == {-1.25: 1}
    assert store.tally(code, key, step=0).rounds[1] == {1.0: 1}


def test_navigation_keeps_each_steps_state(store, room):
    code, key = room
    store.set_phase(code, key, "revealed")
    assert store.next(code, key).phase == "open"
    back = store.back(code, key)
    assert (back.step, back.phase) == (0, "revealed")
    assert store.back(code, key).step == 0  # no step before the first
    store.goto(code, key, 2)
    assert store.next(code, key).step == 2  # none after the last
    assert reason(store.goto, code, key, 3) == "bad_step"
    assert reason(store.goto, code, key, "1") == "bad_step"


def test_reset_forgets_the_step(store, room):
    code, key = room
    a = store.join(code)
    store.vote(code, a, 0, 1, 1)
    store.revote(code, key)
    store.vote(code, a, 0, 2, 2)
    view = store.reset(code, key)
    assert (view.round, view.phase, view.answered) == (1, "open", 0)
    assert store.tally(code, key).answered == {1: 0, 2: 0}


@pytest.mark.parametrize(
    "answer", [3, -1, 1.5, "1", None, True, float("nan"), float("inf"), [1], 10**400]
)
def test_bad_answers(store, room, answer):
    code, _ = room
    a = store.join(code)
    assert reason(store.vote, code, a, 0, 1, answer) == "bad_answer"


def test_number_answers_in_range(store, room):
    code, key = room
    a = store.join(code)
    store.goto(code, key, 1)
    assert reason(store.vote, code, a, 1, 1, 0.5) == "bad_answer"
    assert reason(store.vote, code, a, 1, 1, -1e308 * 10) == "bad_answer"
    store.vote(code, a, 1, 1, -3.0)


def test_wrong_room_and_forged_tokens(store, room):
    code, _ = room
    other, _ = store.create_room("other", SPECS)
    a = store.join(code)
    assert reason(store.vote, "ZZZZZ" if code != "ZZZZZ" else "YYYYY", a, 0, 1, 0) == "no_room"
    assert reason(store.vote, "<script>", a, 0, 1, 0) == "no_room"
    assert reason(store.vote, "A" * 10_000, a, 0, 1, 0) == "no_room"
    assert reason(store.vote, other, a, 0, 1, 0) == "unknown_student"  # token of another room
    assert reason(store.vote, code, "forged-token-123", 0, 1, 0) == "unknown_student"
    assert reason(store.vote, code, "x" * 100_000, 0, 1, 0) == "unknown_student"
    assert reason(store.vote, code, None, 0, 1, 0) == "unknown_student"
    assert not store.knows(code, "forged-token-123")


def test_bounds_students_changes_rooms(make_store, clock):
    store = make_store(clock=clock, max_rooms=2, max_students=3, max_changes=2)
    code, _ = store.create_room("l", SPECS)
    tokens = [store.join(code) for _ in range(3)]
    assert reason(store.join, code) == "full"
    store.vote(code, tokens[0], 0, 1, 0)
    store.vote(code, tokens[0], 0, 1, 1)
    store.vote(code, tokens[0], 0, 1, 2)
    assert reason(store.vote, code, tokens[0], 0, 1, 0) == "too_many"
    store.create_room("l", SPECS)
    assert reason(store.create_room, "l", SPECS) == "full"
    assert reason(store.create_room, "l", []) == "bad_step"
    assert reason(store.create_room, "l", [AnswerSpec(options=2)] * (votes.MAX_STEPS + 1)) == (
        "bad_step"
    )


def test_rooms_expire(store, clock, room):
    code, key = room
    a = store.join(code)
    clock.now += votes.ROOM_IDLE_S - 1
    store.vote(code, a, 0, 1, 1)  # activity keeps it alive
    clock.now += votes.ROOM_IDLE_S - 1
    assert store.is_teacher(code, key)
    clock.now += votes.ROOM_IDLE_S + 1
    assert not store.is_teacher(code, key)
    assert reason(store.view, code) == "no_room"
    assert store.room_count() == 0


def test_rooms_have_a_maximum_age(store, clock, room):
    code, key = room
    for _ in range(int(votes.ROOM_MAX_AGE_S // 3600) + 1):
        clock.now += 3600
        store.is_teacher(code, key)
    assert reason(store.view, code) == "no_room"


def test_expired_rooms_make_space(make_store, clock):
    store = make_store(clock=clock, max_rooms=1)
    store.create_room("l", SPECS)
    clock.now += votes.ROOM_IDLE_S + 1
    store.create_room("l", SPECS)
    assert store.room_count() == 1


def test_close_deletes_everything(store, room):
    code, key = room
    store.join(code)
    store.close(code, key)
    assert reason(store.view, code) == "no_room"


def test_export_rows_use_pseudonyms(store, room, clock):
    code, key = room
    a, b = store.join(code), store.join(code)
    clock.now += 5
    store.vote(code, b, 0, 1, 1)
    store.vote(code, a, 0, 1, 2)
    rows = store.export_rows(code, key)
    assert rows == [(0, 1, "s001", 2.0, 5.0), (0, 1, "s002", 1.0, 5.0)]
    assert all(a not in str(r) and b not in str(r) for r in rows)


@pytest.mark.parametrize(
    ("cell", "out"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+1+1", "'+1+1"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("-2.5", "-2.5"),
        ("-1e-06", "-1e-06"),
        ("Answer 2 (6.5)", "Answer 2 (6.5)"),
        (3, "3"),
        (None, ""),
    ],
)
def test_csv_cells_are_neutralised(cell, out):
    assert neutral_cell(cell) == out


def test_csv_text_round_trips():
    text = csv_text(["a", "b"], [["=1+1", 'say "hi", ok'], [-2.5, "x"]])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [["a", "b"], ["'=1+1", 'say "hi", ok'], ["-2.5", "x"]]


def test_sixty_phones_voting_at_once(make_store):
    """60 threads join and vote at the same moment: every vote counted once, none refused."""
    store = make_store()
    code, key = store.create_room("load", [AnswerSpec(options=4)])
    tokens = [store.join(code) for _ in range(60)]
    barrier = threading.Barrier(60)
    seconds: list[float] = []
    errors: list[Exception] = []
    lock = threading.Lock()

    def phone(i: int) -> None:
        barrier.wait()
        start = time.perf_counter()
        try:
            store.vote(code, tokens[i], 0, 1, i % 4)
            store.vote(code, tokens[i], 0, 1, i % 4)  # a double tap
            store.view(code)
        except VoteError as err:  # pragma: no cover - reported below
            errors.append(err)
        with lock:
            seconds.append(time.perf_counter() - start)

    threads = [threading.Thread(target=phone, args=(i,)) for i in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    tally = store.tally(code, key)
    assert tally.answered[1] == 60
    assert tally.rounds[1] == {0.0: 15, 1.0: 15, 2.0: 15, 3.0: 15}
    assert len(seconds) == 60  # every phone finished (the latency is the benchmarks' business)


def test_owner_key_and_voter_token_are_per_browser_and_per_room(store):
    mine, theirs = "a" * 32, "b" * 32
    code, key = store.create_room("seed_chain", SPECS, owner=mine)
    assert key == owner_key(mine, code)
    assert store.is_teacher(code, owner_key(mine, code))
    assert not store.is_teacher(code, owner_key(theirs, code))
    assert owner_key(mine, code) != voter_token(mine, code)  # a phone of the teacher's browser
    other, _ = store.create_room("seed_chain", SPECS, owner=mine)
    assert owner_key(mine, other) != owner_key(mine, code)


def test_joining_twice_with_one_token_is_one_student(store, room):
    code, _ = room
    token = voter_token("c" * 32, code)
    assert store.join(code, token) == token
    assert store.join(code, token) == token
    assert store.view(code).students == 1
    with pytest.raises(VoteError) as info:
        store.join(code, "bad token!")
    assert info.value.reason == "unknown_student"
    assert store.view(code).students == 1
