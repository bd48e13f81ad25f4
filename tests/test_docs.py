"""What the app cites exists in the repository: every docs/ path and reference id (T1 ...)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*ROOT.glob("pages/*.py"), *ROOT.glob("*.py"), *(ROOT / "roll_viz").rglob("*.py")]


def test_cited_docs_exist():
    cited = {m for p in SOURCES for m in re.findall(r"docs/[\w./-]+\.md", p.read_text())}
    assert cited, "the pages cite no docs at all?"
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, f"cited but not in the repository: {missing}"


def test_cited_reference_ids_are_in_the_reference_table():
    table = (ROOT / "docs" / "reference-values.md").read_text()
    listed = set(re.findall(r"^\| (T\d+) \|", table, flags=re.M))
    cited = set()
    for path in [*ROOT.glob("pages/*.py"), ROOT / "roll_viz" / "analysis" / "selftest.py"]:
        cited |= set(re.findall(r"\bT(\d{1,2})\b", path.read_text()))
    missing = sorted(f"T{n}" for n in cited if f"T{n}" not in listed)
    assert not missing, f"cited reference ids without a row in docs/reference-values.md: {missing}"
