"""Size measured honestly: on what ``ruff format`` makes of the code, ``# fmt: skip`` dropped.

A line budget counted on hand-folded code measures the folding. Here every product module is
formatted as the formatter would have it (its ``# fmt: skip`` markers removed first), then
counted: modules, functions and the package per folder. ``make loc`` prints the table;
``tests/test_size.py`` holds the rules.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a module over SIZE_NOTE lines says why (a ``Size:`` line in its docstring); none over SIZE_MAX
SIZE_NOTE, SIZE_MAX = 600, 800
#: a function over FUNCTION_NOTE lines says why in its docstring (a ``Size:`` line)
FUNCTION_NOTE = 100
#: ``# fmt: skip`` markers allowed in the product (aligned tables that read better as typed)
FMT_SKIPS = 10
#: the product package's formatted lines (roll_viz/, pages/, app.py; benchmarks and tests aside)
PRODUCT_MAX = 40_000
SKIP = re.compile(r"\s*#\s*fmt:\s*skip\s*$", re.MULTILINE)
SIZE_LINE = re.compile(r"^Size:\s*\S", re.MULTILINE)


def product_files(root: Path = ROOT) -> list[Path]:
    """The product's Python files: the package, the page scripts and the router."""
    files = sorted((root / "roll_viz").rglob("*.py"))
    files += sorted((root / "pages").glob("*.py")) if (root / "pages").exists() else []
    return files + [p for p in (root / "app.py",) if p.exists()]


def formatted(root: Path = ROOT) -> dict[Path, str]:
    """Each product file (relative path) as ``ruff format`` writes it with its skips dropped."""
    files = product_files(root)
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            out = Path(tmp) / path.relative_to(root)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(SKIP.sub("", path.read_text()))
        shutil.copy(ROOT / "pyproject.toml", Path(tmp) / "pyproject.toml")  # the house's width
        subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--quiet", tmp], check=True, cwd=tmp
        )
        return {p.relative_to(root): (Path(tmp) / p.relative_to(root)).read_text() for p in files}


def lines(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def long_functions(text: str) -> list[tuple[str, int, int, bool]]:
    """(name, first line, length, says why) of every function over FUNCTION_NOTE lines."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > FUNCTION_NOTE:
                why = bool(SIZE_LINE.search(ast.get_docstring(node) or ""))
                out.append((node.name, node.lineno, n, why))
    return out


def fmt_skips(root: Path = ROOT) -> list[str]:
    """``path:line`` of every ``# fmt: skip`` in the product."""
    return [
        f"{p.relative_to(root)}:{i}"
        for p in product_files(root)
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if SKIP.search(line)
    ]


def folders(texts: dict[Path, str]) -> Counter:
    """Formatted lines per folder (the package's sub-folders, pages, the router)."""
    out: Counter = Counter()
    for path, text in texts.items():
        parts = path.parts
        key = "/".join(parts[:2]) if parts[0] == "roll_viz" and len(parts) > 2 else parts[0]
        out[key] += lines(text)
    return out


def main() -> None:
    texts = formatted()
    for folder, n in sorted(folders(texts).items(), key=lambda kv: -kv[1]):
        print(f"{n:7d}  {folder}")
    total = sum(lines(t) for t in texts.values())
    print(f"{total:7d}  product (budget {PRODUCT_MAX})")
    big = sorted(((lines(t), p) for p, t in texts.items() if lines(t) > SIZE_NOTE), reverse=True)
    for n, p in big:
        print(f"  module {p}: {n} lines" + (" (over the cap)" if n > SIZE_MAX else ""))
    for p, t in texts.items():
        for name, at, n, why in long_functions(t):
            print(f"  function {p}:{at} {name}: {n} lines" + ("" if why else " (says not why)"))
    print(f"  fmt: skip markers: {len(fmt_skips())} (at most {FMT_SKIPS})")


if __name__ == "__main__":
    main()
