"""The one page table: every page's key, file, navigation title, URL path and section.

Plain data with no import, read by the router (``app.py`` through ``roll_viz.ui.nav``), the page
links (``ui.page_url``), the benchmarks and the tests. The order is the navigation's order; the
sections tell the chain's story: one step stage by stage, the same step compared and probed,
beyond one step, and the checks. ``url_path`` is the path a shared link uses (``/Token_KL``);
Home is ``/`` and has none. ``LECTURE`` is the README recipe's page order: the pages' Back and
Next links and their numbers come from it (``tour``, ``neighbours``, ``number``).
"""

from __future__ import annotations

from typing import NamedTuple


class Page(NamedTuple):
    """One page of the app.

    Attributes:
        key: short name used in code (``ui.page_link("kl", ...)``).
        file: the page script, relative to the repository root (where ``app.py`` lives).
        title: label in the navigation (the page's own ``page_setup`` title).
        url_path: the path segment of the page's URL ("" for Home, served at ``/``).
        section: navigation section header ("" for the unlabelled top entry).
    """

    key: str
    file: str
    title: str
    url_path: str
    section: str


ENTRY = "app.py"  # the script `streamlit run` starts: it only routes
HOME = "home"

CHAIN = "One step, stage by stage"
PROBE = "Compare and probe"
BEYOND = "Beyond one step"
LESSONS = "Lessons"
CHECKS = "Checks"

PAGES: tuple[Page, ...] = (
    Page("home", "pages/home.py", "Home", "", ""),
    Page("samples", "pages/samples.py", "Samples", "Samples", CHAIN),
    Page("rewards", "pages/rewards.py", "Rewards", "Rewards", CHAIN),
    Page("kl", "pages/token_kl.py", "Token KL", "Token_KL", CHAIN),
    Page("advantages", "pages/advantages.py", "Advantages", "Advantages", CHAIN),
    Page(
        "local_global",
        "pages/local_vs_global.py",
        "Local vs global",
        "Local_vs_Global",
        CHAIN,
    ),
    Page("normalisation", "pages/normalisation.py", "Normalisation", "Normalisation", CHAIN),
    Page("update", "pages/update.py", "Update", "Update", CHAIN),
    Page("sensitivity", "pages/sensitivity.py", "Sensitivity", "Sensitivity", PROBE),
    Page("frameworks", "pages/frameworks.py", "Frameworks", "Frameworks", PROBE),
    Page("eras", "pages/eras.py", "Eras", "Eras", PROBE),
    Page("teacher", "pages/teacher.py", "Teacher as reference", "Teacher", PROBE),
    Page("training", "pages/training.py", "Training", "Training", BEYOND),
    Page("your_run", "pages/your_run.py", "Your run", "Your_run", BEYOND),
    Page("mismatch", "pages/mismatch.py", "Sampler ≠ trainer", "Sampler_vs_trainer", BEYOND),
    Page("episodes", "pages/episodes.py", "Episodes (multi-turn)", "Episodes", BEYOND),
    Page("silent_bugs", "pages/silent_bugs.py", "Silent bugs", "Silent_bugs", LESSONS),
    Page("lesson", "pages/lesson.py", "Lesson (teacher)", "Lesson", LESSONS),
    Page("vote", "pages/vote.py", "Vote (phones)", "vote", LESSONS),
    Page("self_test", "pages/self_test.py", "Self-test", "Self_test", CHECKS),
)

#: The lecture's page order, the README's recipe ("Giving a lecture"): the pages' Back and Next
#: links follow it, and its pages after Home are numbered 1, 2, ... in their titles and links.
LECTURE: tuple[str, ...] = (
    "home",
    "samples",
    "rewards",
    "kl",
    "advantages",
    "local_global",
    "normalisation",
    "update",
    "training",
    "frameworks",
)
#: pages without Back and Next: the classroom tools (the teacher's projector, the phones)
OFF_TOUR: tuple[str, ...] = ("lesson", "vote")

BY_KEY: dict[str, Page] = {p.key: p for p in PAGES}
BY_FILE: dict[str, Page] = {p.file: p for p in PAGES}
URL_PATHS: tuple[str, ...] = tuple(p.url_path for p in PAGES)


def page(key: str) -> Page:
    """The page with this key.

    Raises:
        KeyError: no page has that key.
    """
    return BY_KEY[key]


def url_path(key: str) -> str:
    """URL path segment of a page ("" for Home)."""
    return BY_KEY[key].url_path


def tour() -> tuple[str, ...]:
    """Every page with Back and Next, in their order: the lecture, then the rest in table order."""
    rest = tuple(p.key for p in PAGES if p.key not in LECTURE and p.key not in OFF_TOUR)
    return LECTURE + rest


def number(key: str) -> int | None:
    """A lecture page's number (Samples is 1); None for Home and for pages off the lecture."""
    return LECTURE.index(key) if key in LECTURE and key != HOME else None


def numbered_title(key: str) -> str:
    """The page's title with its lecture number ("6. Normalisation"), or the plain title."""
    n = number(key)
    return f"{n}. {BY_KEY[key].title}" if n else BY_KEY[key].title


def neighbours(key: str) -> tuple[str | None, str | None]:
    """(the page before, the page after) in ``tour()``; the last page's next is Home.

    Raises:
        KeyError: ``key`` has no Back and Next (a classroom tool, or no such page).
    """
    order = tour()
    if key not in order:
        raise KeyError(key)
    i = order.index(key)
    return (order[i - 1] if i else None, order[i + 1] if i + 1 < len(order) else HOME)
