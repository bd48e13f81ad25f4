"""Class votes: an in-process room store shared by the teacher's page and the phones' page.

One Streamlit server process serves every browser, so its store is one object behind one
``threading.Lock``; every operation is O(1) except a tally or an export,
which is O(answers of one room). No Streamlit here: the pages call it, the tests drive it
directly. Several server processes (a lecture hall) share rooms through Redis instead
(``votes_redis``, same API); ``rooms.STORE`` is the one a process uses.

A room walks through a lesson's steps. Each step has two rounds (vote, then re-vote after
discussion, as in Peer Instruction) and a phase: ``open`` (phones may answer), ``locked`` (no
more answers) or ``revealed`` (the teacher shows the distribution and the real answer).

Who may do what:

- the teacher holds the room's secret ``teacher_key``: next, back, lock, open, reveal, re-vote,
  reset, tally, export. The pages derive it from the teacher's browser (``owner_key``: an HMAC of
  the browser's student-key cookie and the room code), so it is never in a URL: the projected or
  copied link carries the room code only, and a refresh of the teacher's browser finds the key
  again;
- a phone joins with the short room code under an anonymous student token that the page derives
  from the phone's browser the same way (``voter_token``); it may answer the current step and
  round while the phase is open, and read back only its own answer. Votes are keyed by that
  token: one answer per student per round (changing it before the lock replaces it, so it is
  counted once). The token is never read from a URL, so a made-up one cannot add a student.

Bounds (the phones' requests are untrusted): ``MAX_ROOMS`` rooms, ``MAX_STUDENTS`` students a
room, ``MAX_CHANGES`` answer changes a student per round, ``MAX_STEPS`` steps a lesson; an answer
must be one of the step's options or a finite number in its range; a room expires after
``ROOM_IDLE_S`` without activity or ``ROOM_MAX_AGE_S`` after it was created.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import hmac
import io
import math
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from roll_viz.data.lessons import MAX_STEPS

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no I, O, 0, 1: easy to read off a screen
CODE_LENGTH = 5
MAX_ROOMS = 50
MAX_STUDENTS = 300
MAX_CHANGES = 10
MAX_NOTES = 64  # a room's small teacher notes (a follow-up's seed drawn in class)
ROOM_IDLE_S = 3 * 3600.0
ROOM_MAX_AGE_S = 12 * 3600.0
ROUNDS = (1, 2)
PHASES = ("open", "locked", "revealed")

CODE_RE = re.compile(rf"^[{CODE_ALPHABET}]{{{CODE_LENGTH}}}$")
NOTE_RE = re.compile(r"^[a-z0-9_.]{1,60}$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


def _derive(browser_key: str, purpose: str, code: str) -> str:
    digest = hmac.new(
        browser_key.encode(), f"roll-viz lesson {purpose} {code.upper()}".encode(), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest[:18]).decode()  # 24 URL-safe characters, 144 bits


def owner_key(browser_key: str, code: str) -> str:
    """The teacher key of room ``code`` for the browser whose secret key is ``browser_key``.

    One-way (HMAC-SHA256): the key reveals nothing of the browser's own key, and a browser
    without that key cannot compute it.
    """
    return _derive(browser_key, "teacher", code)


def voter_token(browser_key: str, code: str) -> str:
    """The anonymous student token of that browser in room ``code`` (one browser, one student)."""
    return _derive(browser_key, "voter", code)


def check_note(name: object, value: object) -> None:
    """A note is a short lowercase name and an integer (VoteError("bad_step") otherwise)."""
    if not isinstance(name, str) or not NOTE_RE.match(name):
        raise VoteError("bad_step", "a note's name is 1..60 of a-z, 0-9, _ and .")
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**53:
        raise VoteError("bad_step", "a note's value is an integer")


def expired(created: float, touched: float, now: float) -> bool:
    """Whether a room is past its idle time or its maximum age (both stores ask here)."""
    return now - touched > ROOM_IDLE_S or now - created > ROOM_MAX_AGE_S


def check_vote(
    cur_step: int,
    cur_round: int,
    phase: str,
    specs: Sequence[AnswerSpec],
    step: object,
    rnd: object,
    answer: object,
) -> float:
    """The answer a phone may cast now, as a float (both stores ask here).

    Raises:
        VoteError: "stale" (not the current step and round: no late or replayed votes),
            "closed" (locked or revealed), "bad_answer".
    """
    if step != cur_step or rnd != cur_round:
        raise VoteError("stale", "the teacher has moved on: reload the question")
    if phase != "open":
        raise VoteError("closed", "voting is closed for this question")
    return specs[cur_step].check(answer)


def counts_change(old: float | None, value: float, changes: int, max_changes: int) -> bool:
    """Whether a vote writes anything: False for a replay of the same answer.

    Raises:
        VoteError: "too_many" when a changed answer would pass ``max_changes``.
    """
    if old is None:
        return True
    if old == value:
        return False
    if changes >= max_changes:
        raise VoteError("too_many", "you changed your answer too many times")
    return True


class VoteError(ValueError):
    """A refused request.

    ``reason`` is one of: no_room, not_teacher, full, unknown_student, stale, closed,
    bad_answer, too_many, bad_step; and, from the hall's Redis store, ``STORE_REASONS``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


#: the hall's store itself failed (Redis unreachable; Redis restarted without its data): the
#: pages show the error's sentence, never "this room has ended"
STORE_REASONS = frozenset({"store_down", "store_lost"})


@dataclass(frozen=True)
class AnswerSpec:
    """What one step accepts: an option index (``options`` > 0) or a number in [low, high]."""

    options: int = 0
    low: float = 0.0
    high: float = 0.0

    def check(self, answer: object) -> float:
        """The answer as a float, or VoteError("bad_answer")."""
        if isinstance(answer, bool) or not isinstance(answer, int | float):
            raise VoteError("bad_answer", "an answer is a number")
        try:
            value = float(answer)
        except OverflowError:
            raise VoteError("bad_answer", "an answer must be finite") from None
        if not math.isfinite(value):
            raise VoteError("bad_answer", "an answer must be finite")
        if self.options:
            if value != int(value) or not 0 <= value < self.options:
                raise VoteError("bad_answer", f"an answer is an option 0..{self.options - 1}")
            return float(int(value))
        if not self.low <= value <= self.high:
            raise VoteError("bad_answer", f"an answer is a number in [{self.low}, {self.high}]")
        return value


@dataclass
class _Room:
    code: str
    teacher_key: str
    lesson_id: str
    specs: tuple[AnswerSpec, ...]
    content: object
    created: float
    touched: float
    step: int = 0
    round: int = 1
    phase: str = "open"
    students: dict[str, int] = field(default_factory=dict)  # token -> pseudonym number
    votes: dict[tuple[int, int], dict[str, tuple[float, float]]] = field(default_factory=dict)
    changes: dict[tuple[int, int, str], int] = field(default_factory=dict)
    saved: dict[int, tuple[int, str]] = field(default_factory=dict)  # step -> (round, phase)
    notes: dict[str, int] = field(default_factory=dict)  # the teacher's notes (MAX_NOTES)


@dataclass(frozen=True)
class RoomView:
    """What anyone holding the room code may see: where the room is, never anyone's answers.

    Attributes:
        code: the room code.
        lesson_id: the lesson it runs.
        step: the current step (index into the lesson's steps).
        n_steps: steps in the lesson.
        round: 1 (vote) or 2 (re-vote).
        phase: "open", "locked" or "revealed".
        answered: how many students answered this step and round.
        students: how many phones joined.
    """

    code: str
    lesson_id: str
    step: int
    n_steps: int
    round: int
    phase: str
    answered: int
    students: int


@dataclass(frozen=True)
class Tally:
    """The teacher's view of one step: every round's answers as value -> count.

    Attributes:
        step: the step.
        rounds: round -> Counter of answer values (option index or number).
        answered: round -> number of students who answered.
    """

    step: int
    rounds: dict[int, Counter]
    answered: dict[int, int]


class VoteStore:
    """The rooms of one server process (thread-safe).

    Args:
        clock: seconds (monotonic is fine); injectable for the expiry tests.
        max_rooms, max_students, max_changes: the bounds (module constants by default).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        max_rooms: int = MAX_ROOMS,
        max_students: int = MAX_STUDENTS,
        max_changes: int = MAX_CHANGES,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rooms: dict[str, _Room] = {}
        self.max_rooms = max_rooms
        self.max_students = max_students
        self.max_changes = max_changes

    # ----------------------------------------------------------------------------- internals

    def _purge(self, now: float) -> None:
        dead = [
            code for code, room in self._rooms.items() if expired(room.created, room.touched, now)
        ]
        for code in dead:
            del self._rooms[code]

    def _room(self, code: object) -> _Room:
        now = self._clock()
        self._purge(now)
        if not isinstance(code, str) or not CODE_RE.match(code.upper()):
            raise VoteError("no_room", "no room with this code")
        room = self._rooms.get(code.upper())
        if room is None:
            raise VoteError("no_room", "no room with this code (it may have expired)")
        return room

    def _teacher(self, code: object, key: object) -> _Room:
        room = self._room(code)
        if not isinstance(key, str) or not hmac.compare_digest(key, room.teacher_key):
            raise VoteError("not_teacher", "only the teacher's link controls this room")
        room.touched = self._clock()
        return room

    def _view(self, room: _Room) -> RoomView:
        answered = len(room.votes.get((room.step, room.round), {}))
        return RoomView(
            code=room.code,
            lesson_id=room.lesson_id,
            step=room.step,
            n_steps=len(room.specs),
            round=room.round,
            phase=room.phase,
            answered=answered,
            students=len(room.students),
        )

    # ---------------------------------------------------------------------------- the teacher

    def create_room(
        self,
        lesson_id: str,
        specs: Sequence[AnswerSpec],
        content: object = None,
        owner: str | None = None,
    ) -> tuple[str, str]:
        """Open a room for a lesson.

        Args:
            lesson_id: the lesson's id (shown to phones, used by the pages).
            specs: one AnswerSpec per step of the lesson (1..MAX_STEPS).
            content: what the pages need to show the questions (the parsed lesson); public to
                anyone with the room code, like the questions on the projector.
            owner: the teacher's browser key; the teacher key is then ``owner_key(owner, code)``
                (without one it is random, for callers that keep it themselves).

        Returns:
            (room code, teacher key).

        Raises:
            VoteError: "full" when MAX_ROOMS live rooms exist; "bad_step" for a bad step list.
        """
        if not 1 <= len(specs) <= MAX_STEPS:
            raise VoteError("bad_step", f"a lesson has 1..{MAX_STEPS} steps")
        with self._lock:
            now = self._clock()
            self._purge(now)
            if len(self._rooms) >= self.max_rooms:
                raise VoteError("full", "too many rooms are open on this server; try later")
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            while code in self._rooms:
                code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            key = secrets.token_urlsafe(16) if owner is None else owner_key(owner, code)
            self._rooms[code] = _Room(
                code=code,
                teacher_key=key,
                lesson_id=str(lesson_id),
                specs=tuple(specs),
                content=content,
                created=now,
                touched=now,
            )
            return code, key

    def is_teacher(self, code: object, key: object) -> bool:
        """Whether ``key`` controls room ``code`` (False for an unknown or expired room)."""
        with self._lock:
            try:
                self._teacher(code, key)
            except VoteError:
                return False
            return True

    def goto(self, code: str, key: str, step: int) -> RoomView:
        """Move the room to a step (back and next use it).

        A step seen before comes back in its round and phase; a new one starts at round 1, open.
        """
        with self._lock:
            room = self._teacher(code, key)
            if isinstance(step, bool) or not isinstance(step, int):
                raise VoteError("bad_step", "a step is a whole number")
            if not 0 <= step < len(room.specs):
                raise VoteError("bad_step", f"step {step} is not in this lesson")
            room.saved[room.step] = (room.round, room.phase)
            room.step = step
            room.round, room.phase = room.saved.get(step, (1, "open"))
            return self._view(room)

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
        with self._lock:
            room = self._teacher(code, key)
            room.phase = phase
            return self._view(room)

    def revote(self, code: str, key: str) -> RoomView:
        """Open round 2 of the current step (after discussion); round 1's answers are kept."""
        with self._lock:
            room = self._teacher(code, key)
            room.round = ROUNDS[-1]
            room.phase = "open"
            return self._view(room)

    def reset(self, code: str, key: str) -> RoomView:
        """Forget every answer of the current step and start again at round 1, open."""
        with self._lock:
            room = self._teacher(code, key)
            for rnd in ROUNDS:
                room.votes.pop((room.step, rnd), None)
            room.changes = {k: v for k, v in room.changes.items() if k[0] != room.step}
            room.round = 1
            room.phase = "open"
            return self._view(room)

    def tally(self, code: str, key: str, step: int | None = None) -> Tally:
        """Every round's answers of a step (default: the current one), as value -> count."""
        with self._lock:
            room = self._teacher(code, key)
            s = room.step if step is None else int(step)
            rounds = {}
            answered = {}
            for rnd in ROUNDS:
                votes = room.votes.get((s, rnd), {})
                rounds[rnd] = Counter(v for v, _ in votes.values())
                answered[rnd] = len(votes)
            return Tally(step=s, rounds=rounds, answered=answered)

    def export_rows(self, code: str, key: str) -> list[tuple[int, int, str, float, float]]:
        """Every answer of the room: (step, round, student pseudonym, answer, seconds).

        The pseudonym is ``s001``, ``s002``... in joining order (never the token); seconds
        count from the room's creation.
        """
        with self._lock:
            room = self._teacher(code, key)
            rows = []
            for (s, rnd), votes in sorted(room.votes.items()):
                for token, (value, t) in votes.items():
                    name = f"s{room.students.get(token, 0):03d}"
                    rows.append((s, rnd, name, value, round(t - room.created, 3)))
            rows.sort(key=lambda r: (r[0], r[1], r[2]))
            return rows

    def set_note(self, code: str, key: str, name: str, value: int) -> None:
        """Keep a small teacher note in the room (e.g. the seed a follow-up was drawn with).

        Raises:
            VoteError: not the teacher; "bad_step" for a bad name or value or too many notes.
        """
        check_note(name, value)
        with self._lock:
            room = self._teacher(code, key)
            if name not in room.notes and len(room.notes) >= MAX_NOTES:
                raise VoteError("bad_step", f"a room keeps at most {MAX_NOTES} notes")
            room.notes[name] = value

    def notes(self, code: str, key: str) -> dict[str, int]:
        """The teacher's notes of the room (a copy)."""
        with self._lock:
            return dict(self._teacher(code, key).notes)

    def close(self, code: str, key: str) -> None:
        """Delete the room and every answer in it."""
        with self._lock:
            room = self._teacher(code, key)
            del self._rooms[room.code]

    # ------------------------------------------------------------------------------ the phones

    def view(self, code: object) -> RoomView:
        """The room's public state (no answers). Raises VoteError("no_room")."""
        with self._lock:
            return self._view(self._room(code))

    def content(self, code: object) -> object:
        """The room's lesson content (questions and options). Raises VoteError("no_room")."""
        with self._lock:
            return self._room(code).content

    def join(self, code: object, token: str | None = None) -> str:
        """Join the room as a student; the same ``token`` joining again is the same student.

        Args:
            code: room code.
            token: the page's ``voter_token`` for this browser; None draws a random one.

        Raises:
            VoteError: "no_room", "unknown_student" for a token of the wrong form, or "full"
                when MAX_STUDENTS phones joined.
        """
        with self._lock:
            room = self._room(code)
            if token is not None and (not isinstance(token, str) or not TOKEN_RE.match(token)):
                raise VoteError("unknown_student", "not a student token")
            if token in room.students:
                return token
            if len(room.students) >= self.max_students:
                raise VoteError("full", "this room is full")
            token = token or secrets.token_urlsafe(12)
            room.students[token] = len(room.students) + 1
            return token

    def knows(self, code: object, token: object) -> bool:
        """Whether ``token`` joined room ``code``."""
        with self._lock:
            try:
                room = self._room(code)
            except VoteError:
                return False
            return isinstance(token, str) and token in room.students

    def vote(self, code: object, token: object, step: object, rnd: object, answer: object) -> None:
        """Record a student's answer to the current step and round.

        Args:
            code: room code.
            token: the student's token from ``join``.
            step: the step the phone showed (a stale step is refused: no late or replayed votes).
            rnd: the round the phone showed.
            answer: an option index or a number (the step's AnswerSpec decides).

        Raises:
            VoteError: no_room, unknown_student, stale (not the current step/round), closed
                (locked or revealed), bad_answer, too_many (answer changed MAX_CHANGES times).
        """
        with self._lock:
            room = self._room(code)
            if not isinstance(token, str) or not TOKEN_RE.match(token):
                raise VoteError("unknown_student", "this phone has not joined the room")
            if token not in room.students:
                raise VoteError("unknown_student", "this phone has not joined the room")
            value = check_vote(room.step, room.round, room.phase, room.specs, step, rnd, answer)
            votes = room.votes.setdefault((room.step, room.round), {})
            change_key = (room.step, room.round, token)
            old = votes[token][0] if token in votes else None
            if not counts_change(old, value, room.changes.get(change_key, 0), self.max_changes):
                return  # a replay of the same answer: nothing changes
            if old is not None:
                room.changes[change_key] = room.changes.get(change_key, 0) + 1
            now = self._clock()
            votes[token] = (value, now)
            room.touched = now

    def my_answer(self, code: object, token: object) -> float | None:
        """This student's answer to the current step and round (None if none)."""
        with self._lock:
            room = self._room(code)
            votes = room.votes.get((room.step, room.round), {})
            if not isinstance(token, str) or token not in votes:
                return None
            return votes[token][0]

    def room_count(self) -> int:
        """Live rooms (after expiry)."""
        with self._lock:
            self._purge(self._clock())
            return len(self._rooms)


# ---------------------------------------------------------------------------------------------
# CSV export
# ---------------------------------------------------------------------------------------------

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


def neutral_cell(value: object) -> str:
    """A CSV cell a spreadsheet will not run: text starting with = + - @ tab or CR gets a "'".

    A plain number ("-2.5") is left as it is: it cannot be a formula.
    """
    text = "" if value is None else str(value)
    if text.startswith(_FORMULA_START) and not _PLAIN_NUMBER.match(text):
        return "'" + text
    return text


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """CSV text with every cell neutralised (``neutral_cell``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([neutral_cell(h) for h in header])
    for row in rows:
        writer.writerow([neutral_cell(c) for c in row])
    return out.getvalue()
