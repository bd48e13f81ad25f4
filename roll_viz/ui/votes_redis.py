"""The class-vote store in Redis, shared by every app process of a lecture hall.

The same rooms, rules and bounds as ``votes.VoteStore`` (``python -m roll_viz hall`` runs it).

``ROLL_VIZ_REDIS=redis://host:port/db`` makes ``rooms.STORE`` this store; without it the
in-process store stays the default. Whichever process a phone's websocket lands on, it reads and
writes the same room, so a killed process loses no vote and a student who reconnects through the
proxy to another process finds the room where it was.

Keys (``rv:<code>:...``; every key of a room expires ``ROOM_MAX_AGE_S`` after its creation, the
room's hard limit, and is deleted with it):

- ``meta``: JSON of the room's small state (teacher key, lesson id, answer specs, step, round,
  phase, the saved state of each step seen, created / touched times);
- ``content``: JSON of the lesson content, made by the store's ``encode`` (never pickle: a room's
  content is read back with ``decode``, which parses it as the lesson reader parses a file);
- ``students``: hash token -> pseudonym number;
- ``votes:<step>:<round>``: hash token -> JSON [answer, time];
- ``changes``: hash "<step>:<round>:<token>" -> answer changes;
- ``notes``: hash name -> integer, the teacher's notes (``MAX_NOTES``);
- ``rv:rooms``: sorted set of live room codes (for ``MAX_ROOMS``);
- ``rv:epoch``: a random token set when the first room of this Redis's data is created, never
  deleted: it changes only when Redis lost its data (restarted without persistence, flushed).

Every change is a WATCH / MULTI / EXEC transaction on the keys it reads, retried when another
process changed them first, so two processes never double-count a vote or a student. Times come
from the wall clock (``time.time``), which every process of one machine shares.

If Redis cannot be reached every call raises ``VoteError("store_down")`` with one sentence the
pages show. A room this process saw that is gone with the epoch it was seen under raises
``VoteError("store_lost")``: Redis restarted without its data, and the pages say the lesson state
is gone and the teacher starts again (a room that expired, or one this process never saw, stays
"no room"). The hall starts Redis with an append-only file (fsync every second), so a restarted
Redis keeps its rooms and loses at most the last second of votes.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.exceptions import RedisError, WatchError

from roll_viz.ui.votes import (
    CODE_ALPHABET,
    CODE_LENGTH,
    CODE_RE,
    MAX_CHANGES,
    MAX_NOTES,
    MAX_ROOMS,
    MAX_STEPS,
    MAX_STUDENTS,
    PHASES,
    ROOM_MAX_AGE_S,
    ROUNDS,
    STORE_REASONS,
    TOKEN_RE,
    AnswerSpec,
    RoomView,
    Tally,
    VoteError,
    check_note,
    check_vote,
    counts_change,
    expired,
    owner_key,
)

ROOMS_KEY = "rv:rooms"
EPOCH_KEY = "rv:epoch"
#: rooms whose epoch a process remembers (the oldest forgotten first): a few halls' worth of rooms
MAX_SEEN = 4 * MAX_ROOMS
#: a transaction retried this many times before it gives up (contention between processes)
MAX_RETRIES = 64
STORE_DOWN = (
    "the lesson store (Redis) cannot be reached: votes are not being counted; ask the teacher "
    "to check the hall's Redis"
)
STORE_LOST = (
    "the lesson store (Redis) restarted without its saved data: this lesson's room, students and "
    "votes are gone. The teacher starts the lesson again (a new room code) and the class votes "
    "again"
)


def _key(code: str, part: str) -> str:
    return f"rv:{code}:{part}"


class RedisVoteStore:
    """The rooms of a lecture hall, in Redis (process-safe). Same API as ``votes.VoteStore``.

    Args:
        client: a ``redis.Redis`` (``decode_responses=True``) or a URL for one.
        encode: room content -> JSON-able value (the lesson's id and TOML text).
        decode: the inverse (parses the text again: nothing is unpickled or executed).
        clock: wall-clock seconds; injectable for the expiry tests.
        max_rooms, max_students, max_changes: the bounds (``votes``' constants by default).
    """

    def __init__(
        self,
        client: redis.Redis | str,
        encode: Callable[[object], Any] = lambda c: c,
        decode: Callable[[Any], object] = lambda c: c,
        clock: Callable[[], float] = time.time,
        max_rooms: int = MAX_ROOMS,
        max_students: int = MAX_STUDENTS,
        max_changes: int = MAX_CHANGES,
    ) -> None:
        if isinstance(client, str):
            client = redis.Redis.from_url(
                client, decode_responses=True, socket_timeout=5, socket_connect_timeout=2
            )
        self.r = client
        self._encode = encode
        self._decode = decode
        self._clock = clock
        self.max_rooms = max_rooms
        self.max_students = max_students
        self.max_changes = max_changes
        self._seen: dict[str, str | None] = {}  # room code -> the epoch it was last seen under

    # ----------------------------------------------------------------------------- internals

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; a Redis outage becomes one VoteError the pages show next to the action."""
        try:
            return fn()
        except RedisError:
            raise VoteError("store_down", STORE_DOWN) from None

    def _txn(self, keys: Sequence[str], body: Callable[[Any], Any]) -> Any:
        """Run ``body(pipe)`` under WATCH of ``keys``, again when another process wrote first.

        ``body`` reads (immediate mode), then calls ``pipe.multi()`` and queues its writes.
        """

        def attempt() -> Any:
            with self.r.pipeline() as pipe:
                for _ in range(MAX_RETRIES):
                    try:
                        pipe.watch(*keys)
                        out = body(pipe)
                        if pipe.explicit_transaction:
                            pipe.execute()
                        else:
                            pipe.reset()
                        return out
                    except WatchError:
                        continue
            raise VoteError("busy", "the room is busy: try again")

        return self._call(attempt)

    @staticmethod
    def _code(code: object) -> str:
        if not isinstance(code, str) or not CODE_RE.match(code.upper()):
            raise VoteError("no_room", "no room with this code")
        return code.upper()

    def _meta(self, pipe: Any, code: str) -> dict:
        raw, touched, epoch = pipe.mget(_key(code, "meta"), _key(code, "touched"), EPOCH_KEY)
        if raw is None:
            if code in self._seen and self._seen[code] != epoch:
                raise VoteError("store_lost", STORE_LOST)
            raise VoteError("no_room", "no room with this code (it may have expired)")
        self._remember(code, epoch)
        meta = json.loads(raw)
        meta["touched"] = max(meta["touched"], float(touched or 0.0))
        now = self._clock()
        if expired(meta["created"], meta["touched"], now):
            raise VoteError("no_room", "no room with this code (it may have expired)")
        return meta

    def _remember(self, code: str, epoch: str | None) -> None:
        """Note the epoch ``code`` was seen under (at most ``MAX_SEEN`` rooms)."""
        self._seen.pop(code, None)
        self._seen[code] = epoch
        while len(self._seen) > MAX_SEEN:
            del self._seen[next(iter(self._seen))]

    def _teacher_meta(self, pipe: Any, code: str, key: object) -> dict:
        meta = self._meta(pipe, code)
        if not isinstance(key, str) or not hmac.compare_digest(key, meta["teacher_key"]):
            raise VoteError("not_teacher", "only the teacher's link controls this room")
        meta["touched"] = self._clock()
        return meta

    def _room_keys(self, code: str, meta: dict | None = None) -> list[str]:
        parts = ("meta", "content", "students", "changes", "touched", "notes")
        keys = [_key(code, p) for p in parts]
        steps = range(len(meta["specs"])) if meta else range(MAX_STEPS)
        return keys + [_key(code, f"votes:{s}:{r}") for s in steps for r in ROUNDS]

    def _write_meta(self, pipe: Any, code: str, meta: dict) -> None:
        left = max(1, int(meta["created"] + ROOM_MAX_AGE_S - self._clock()) + 60)
        pipe.set(_key(code, "meta"), json.dumps(meta), ex=left)

    def _view(self, pipe: Any, code: str, meta: dict) -> RoomView:
        return RoomView(
            code=code,
            lesson_id=meta["lesson_id"],
            step=meta["step"],
            n_steps=len(meta["specs"]),
            round=meta["round"],
            phase=meta["phase"],
            answered=pipe.hlen(_key(code, f"votes:{meta['step']}:{meta['round']}")),
            students=pipe.hlen(_key(code, "students")),
        )

    def _purge(self) -> None:
        """Forget rooms past their idle or maximum age (their keys may outlive them by 60 s)."""
        now = self._clock()
        for code in self.r.zrange(ROOMS_KEY, 0, -1):
            raw = self.r.get(_key(code, "meta"))
            meta = json.loads(raw) if raw else None
            if meta:
                touched = max(meta["touched"], float(self.r.get(_key(code, "touched")) or 0.0))
                if not expired(meta["created"], touched, now):
                    continue
            self.r.delete(*self._room_keys(code, meta))
            self.r.zrem(ROOMS_KEY, code)

    # ---------------------------------------------------------------------------- the teacher

    def create_room(
        self,
        lesson_id: str,
        specs: Sequence[AnswerSpec],
        content: object = None,
        owner: str | None = None,
    ) -> tuple[str, str]:
        """Open a room for a lesson (see ``votes.VoteStore.create_room``)."""
        if not 1 <= len(specs) <= MAX_STEPS:
            raise VoteError("bad_step", f"a lesson has 1..{MAX_STEPS} steps")
        body = json.dumps(self._encode(content))

        def body_fn(pipe: Any) -> tuple[str, str]:
            if pipe.zcard(ROOMS_KEY) >= self.max_rooms:
                raise VoteError("full", "too many rooms are open on this server; try later")
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            while pipe.exists(_key(code, "meta")):
                code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            key = secrets.token_urlsafe(16) if owner is None else owner_key(owner, code)
            now = self._clock()
            meta = {
                "teacher_key": key,
                "lesson_id": str(lesson_id),
                "specs": [[s.options, s.low, s.high] for s in specs],
                "created": now,
                "touched": now,
                "step": 0,
                "round": 1,
                "phase": "open",
                "saved": {},
            }
            pipe.multi()
            pipe.set(EPOCH_KEY, secrets.token_urlsafe(12), nx=True)  # the first room of the data
            self._write_meta(pipe, code, meta)
            pipe.set(_key(code, "content"), body, ex=int(ROOM_MAX_AGE_S) + 60)
            pipe.zadd(ROOMS_KEY, {code: now})
            return code, key

        self._call(self._purge)
        return self._txn([ROOMS_KEY], body_fn)

    def is_teacher(self, code: object, key: object) -> bool:
        """Whether ``key`` controls room ``code`` (False for an unknown or expired room)."""
        try:
            code = self._code(code)
            self._call(lambda: self._teacher_meta(self.r, code, key))
        except VoteError as err:
            if err.reason in STORE_REASONS:
                raise
            return False
        return True

    def _teacher_change(self, code: str, key: str, change: Callable[[Any, dict], None]) -> RoomView:
        code = self._code(code)

        def body(pipe: Any) -> None:
            meta = self._teacher_meta(pipe, code, key)
            extra = change(pipe, meta)
            pipe.multi()
            self._write_meta(pipe, code, meta)
            for op in extra or ():
                op(pipe)

        self._txn([_key(code, "meta")], body)
        return self.view(code)  # read after the writes (a reset's deleted votes included)

    def goto(self, code: str, key: str, step: int) -> RoomView:
        """Move the room to a step; a step seen before comes back in its round and phase."""
        if isinstance(step, bool) or not isinstance(step, int):
            raise VoteError("bad_step", "a step is a whole number")

        def change(pipe: Any, meta: dict) -> None:
            if not 0 <= step < len(meta["specs"]):
                raise VoteError("bad_step", f"step {step} is not in this lesson")
            meta["saved"][str(meta["step"])] = [meta["round"], meta["phase"]]
            meta["step"] = step
            meta["round"], meta["phase"] = meta["saved"].get(str(step), [1, "open"])

        return self._teacher_change(code, key, change)

    def next(self, code: str, key: str) -> RoomView:
        """The next step (no-op on the last)."""
        view = self.view(code)
        return self.goto(code, key, min(view.step + 1, view.n_steps - 1))

    def back(self, code: str, key: str) -> RoomView:
        """The previous step (no-op on the first)."""
        view = self.view(code)
        return self.goto(code, key, max(view.step - 1, 0))

    def set_phase(self, code: str, key: str, phase: str) -> RoomView:
        """Lock ("locked"), reopen ("open") or reveal ("revealed") the current round."""
        if phase not in PHASES:
            raise VoteError("bad_step", f"phase must be one of {PHASES}")
        return self._teacher_change(code, key, lambda _p, meta: meta.update(phase=phase))

    def revote(self, code: str, key: str) -> RoomView:
        """Open round 2 of the current step (after discussion); round 1's answers are kept."""
        return self._teacher_change(
            code, key, lambda _p, meta: meta.update(round=ROUNDS[-1], phase="open")
        )

    def reset(self, code: str, key: str) -> RoomView:
        """Forget every answer of the current step and start again at round 1, open."""
        up = self._code(code)

        def change(pipe: Any, meta: dict) -> list:
            step = meta["step"]
            stale = [f for f in pipe.hkeys(_key(up, "changes")) if f.split(":")[0] == str(step)]
            meta.update(round=1, phase="open")
            ops = [lambda p, r=r: p.delete(_key(up, f"votes:{step}:{r}")) for r in ROUNDS]
            if stale:
                ops.append(lambda p: p.hdel(_key(up, "changes"), *stale))
            return ops

        return self._teacher_change(code, key, change)

    def tally(self, code: str, key: str, step: int | None = None) -> Tally:
        """Every round's answers of a step (default: the current one), as value -> count."""
        up = self._code(code)

        def read() -> Tally:
            meta = self._teacher_meta(self.r, up, key)
            s = meta["step"] if step is None else int(step)
            rounds, answered = {}, {}
            for rnd in ROUNDS:
                values = [json.loads(v)[0] for v in self.r.hvals(_key(up, f"votes:{s}:{rnd}"))]
                rounds[rnd] = Counter(values)
                answered[rnd] = len(values)
            return Tally(step=s, rounds=rounds, answered=answered)

        return self._call(read)

    def export_rows(self, code: str, key: str) -> list[tuple[int, int, str, float, float]]:
        """Every answer of the room: (step, round, student pseudonym, answer, seconds)."""
        up = self._code(code)

        def read() -> list[tuple[int, int, str, float, float]]:
            meta = self._teacher_meta(self.r, up, key)
            names = self.r.hgetall(_key(up, "students"))
            rows = []
            for s in range(len(meta["specs"])):
                for rnd in ROUNDS:
                    for token, raw in self.r.hgetall(_key(up, f"votes:{s}:{rnd}")).items():
                        value, t = json.loads(raw)
                        name = f"s{int(names.get(token, 0)):03d}"
                        rows.append((s, rnd, name, value, round(t - meta["created"], 3)))
            rows.sort(key=lambda r: (r[0], r[1], r[2]))
            return rows

        return self._call(read)

    def set_note(self, code: str, key: str, name: str, value: int) -> None:
        """Keep a small teacher note in the room (see ``VoteStore.set_note``)."""
        check_note(name, value)
        up = self._code(code)
        notes = _key(up, "notes")

        def body(pipe: Any) -> None:
            meta = self._teacher_meta(pipe, up, key)
            if not pipe.hexists(notes, name) and pipe.hlen(notes) >= MAX_NOTES:
                raise VoteError("bad_step", f"a room keeps at most {MAX_NOTES} notes")
            left = max(1, int(meta["created"] + ROOM_MAX_AGE_S - self._clock()) + 60)
            pipe.multi()
            pipe.hset(notes, name, value)
            pipe.expire(notes, left)

        self._txn([_key(up, "meta"), notes], body)

    def notes(self, code: str, key: str) -> dict[str, int]:
        """The teacher's notes of the room."""
        up = self._code(code)

        def read() -> dict[str, int]:
            self._teacher_meta(self.r, up, key)
            return {k: int(v) for k, v in self.r.hgetall(_key(up, "notes")).items()}

        return self._call(read)

    def close(self, code: str, key: str) -> None:
        """Delete the room and every answer in it."""
        up = self._code(code)

        def drop() -> None:
            meta = self._teacher_meta(self.r, up, key)
            self.r.delete(*self._room_keys(up, meta))
            self.r.zrem(ROOMS_KEY, up)

        self._call(drop)

    # ------------------------------------------------------------------------------ the phones

    def view(self, code: object) -> RoomView:
        """The room's public state (no answers). Raises VoteError("no_room")."""
        up = self._code(code)
        return self._call(lambda: self._view(self.r, up, self._meta(self.r, up)))

    def content(self, code: object) -> object:
        """The room's lesson content (questions and options). Raises VoteError("no_room")."""
        up = self._code(code)

        def read() -> object:
            self._meta(self.r, up)
            raw = self.r.get(_key(up, "content"))
            if raw is None:
                raise VoteError("no_room", "no room with this code (it may have expired)")
            return self._decode(json.loads(raw))

        return self._call(read)

    def join(self, code: object, token: str | None = None) -> str:
        """Join the room as a student; the same ``token`` joining again is the same student."""
        up = self._code(code)
        if token is not None and (not isinstance(token, str) or not TOKEN_RE.match(token)):
            raise VoteError("unknown_student", "not a student token")
        token = token or secrets.token_urlsafe(12)
        students = _key(up, "students")

        def body(pipe: Any) -> str:
            meta = self._meta(pipe, up)
            if pipe.hexists(students, token):
                return token
            n = pipe.hlen(students)
            if n >= self.max_students:
                raise VoteError("full", "this room is full")
            left = max(1, int(meta["created"] + ROOM_MAX_AGE_S - self._clock()) + 60)
            pipe.multi()
            pipe.hset(students, token, n + 1)
            pipe.expire(students, left)
            return token

        return self._txn([_key(up, "meta"), students], body)

    def knows(self, code: object, token: object) -> bool:
        """Whether ``token`` joined room ``code``."""
        try:
            up = self._code(code)
            self._call(lambda: self._meta(self.r, up))
        except VoteError as err:
            if err.reason in STORE_REASONS:
                raise
            return False
        return isinstance(token, str) and bool(
            self._call(lambda: self.r.hexists(_key(up, "students"), token))
        )

    def vote(self, code: object, token: object, step: object, rnd: object, answer: object) -> None:
        """Record a student's answer to the current step and round (see ``VoteStore.vote``)."""
        up = self._code(code)
        if not isinstance(token, str) or not TOKEN_RE.match(token):
            raise VoteError("unknown_student", "this phone has not joined the room")
        changes = _key(up, "changes")

        def body(pipe: Any) -> None:
            meta = self._meta(pipe, up)
            if not pipe.hexists(_key(up, "students"), token):
                raise VoteError("unknown_student", "this phone has not joined the room")
            specs = [AnswerSpec(*spec) for spec in meta["specs"]]
            value = check_vote(meta["step"], meta["round"], meta["phase"], specs, step, rnd, answer)
            votes = _key(up, f"votes:{meta['step']}:{meta['round']}")
            pipe.watch(votes)  # WATCH adds to the keys watched since the transaction began
            old = pipe.hget(votes, token)
            field = f"{meta['step']}:{meta['round']}:{token}"
            now = self._clock()
            left = max(1, int(meta["created"] + ROOM_MAX_AGE_S - now) + 60)
            before = None if old is None else json.loads(old)[0]
            n_changes = int(pipe.hget(changes, field) or 0) if old is not None else 0
            if not counts_change(before, value, n_changes, self.max_changes):
                return None  # a replay of the same answer: nothing changes
            pipe.multi()
            if old is not None:
                pipe.hincrby(changes, field, 1)
                pipe.expire(changes, left)
            pipe.hset(votes, token, json.dumps([value, now]))
            pipe.expire(votes, left)
            # activity without rewriting meta: votes in one room then conflict only on the same
            # step's hash, never with each other's meta writes
            pipe.set(_key(up, "touched"), repr(now), ex=left)
            return None

        self._txn([_key(up, "meta"), changes], body)

    def my_answer(self, code: object, token: object) -> float | None:
        """This student's answer to the current step and round (None if none)."""
        up = self._code(code)

        def read() -> float | None:
            meta = self._meta(self.r, up)
            if not isinstance(token, str):
                return None
            raw = self.r.hget(_key(up, f"votes:{meta['step']}:{meta['round']}"), token)
            return None if raw is None else float(json.loads(raw)[0])

        return self._call(read)

    def room_count(self) -> int:
        """Live rooms (after expiry)."""
        self._call(self._purge)
        return int(self._call(lambda: self.r.zcard(ROOMS_KEY)))
