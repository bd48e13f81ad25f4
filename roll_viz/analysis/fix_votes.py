"""Which knob changes the class chose on a fix gate: the options whose outcomes the reveal plays.

A fix gate ("fix this run", ``data.lessons``) reveals the recorded outcome of the class's top
choices side by side; this picks them from a room's tally. Pure: answers come in as
``{round: Counter(option -> count)}``; nothing here reads a store.
"""

from __future__ import annotations

from collections.abc import Mapping

#: how many of the class's choices the reveal plays side by side
TOP_CHOICES = 3


def top_choices(
    rounds: Mapping[int, Mapping[float, int]], n_options: int, k: int = TOP_CHOICES
) -> tuple[int, ...]:
    """The class's ``k`` most voted options, from the latest round that has votes.

    The latest round is the re-vote after discussion when there was one, else the first vote.
    Ties are broken by the order of the options: with equal votes, the option listed first
    (the lower index) comes first, so the same tally always plays the same runs. Options
    nobody chose are left out, as is any answer that is not an option index.

    Args:
        rounds: round -> option index (as a float, as the store keeps it) -> votes.
        n_options: the gate's number of options.
        k: at most this many (``TOP_CHOICES``).

    Returns:
        Option indexes, most voted first; () when nobody voted.
    """
    for rnd in sorted(rounds, reverse=True):
        counts: dict[int, int] = {}
        for value, n in rounds[rnd].items():
            i = int(value)
            if i == value and 0 <= i < n_options and n > 0:
                counts[i] = counts.get(i, 0) + int(n)
        if counts:
            ranked = sorted(counts, key=lambda i: (-counts[i], i))
            return tuple(ranked[:k])
    return ()
