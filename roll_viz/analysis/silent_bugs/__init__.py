"""The field's silent bugs as one-click lessons: the wrong number and the right one, side by side.

One record per bug (``bug_record.SilentBug``), written in case modules by topic: ``bugs_loss``
and ``bugs_groups`` (the fourteen of field-2026.md section 2.3), then the cases of
field-2026-b.md: ``bugs_rewards`` (the reward stage), ``bugs_2026`` (async training, dynamic
sampling, the loss), ``bugs_offpolicy`` (sequence masks and the KL term) and ``bugs_multiturn``
(the masks and credit of a tool-using episode). The gallery's order is ``BUGS`` below (a case
module's bugs keep their order); a bug's ``id`` is its page's ``bug=`` URL value and must stay
stable.
"""

from __future__ import annotations

from roll_viz.analysis.silent_bugs import (
    bugs_2026,
    bugs_groups,
    bugs_loss,
    bugs_multiturn,
    bugs_offpolicy,
    bugs_rewards,
)
from roll_viz.analysis.silent_bugs.bug_record import Outcome, SilentBug, make_batch

__all__ = ["BUGS", "BY_ID", "IDS", "Outcome", "SilentBug", "bug", "make_batch"]

#: the fourteen of field-2026.md section 2.3 in the order a lecture meets them (loss, then groups)
FIELD_ORDER = (
    "loss-zero",
    "kl-zero-adv",
    "loo-std",
    "centred-std",
    "uneven-groups",
    "one-token-var",
    "trl-batch-std",
    "luspo-quadratic",
    "agg-names",
    "phantom-adv",
    "top-p-ratio",
    "cispo-cap",
    "per-trajectory-mean",
    "ce-filter",
)
_FIELD = {b.id: b for b in bugs_loss.BUGS + bugs_groups.BUGS}

#: every case module's bugs, in gallery order
BUGS: tuple[SilentBug, ...] = (
    tuple(_FIELD[i] for i in FIELD_ORDER)
    + bugs_rewards.BUGS
    + bugs_2026.BUGS
    + bugs_offpolicy.BUGS
    + bugs_multiturn.BUGS
)

BY_ID: dict[str, SilentBug] = {bug.id: bug for bug in BUGS}
IDS: tuple[str, ...] = tuple(BY_ID)


def bug(bug_id: str) -> SilentBug:
    """The lesson with this id.

    Raises:
        KeyError: no lesson has that id.
    """
    return BY_ID[bug_id]
