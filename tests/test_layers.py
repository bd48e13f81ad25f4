"""The layer rules of the package, enforced on every import statement (lazy ones included).

Each folder of ``roll_viz/`` is one layer and imports only point down. A violation fails
``make test`` with the rule it broke, the file and the line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from roll_viz import nav

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "roll_viz"

#: layer -> the roll_viz layers it may import (besides itself). Read top to bottom = bottom up.
ALLOWED: dict[str, set[str]] = {
    "nav": set(),
    "core": set(),
    "rewards": {"core"},
    "lm": {"core", "rewards"},
    "data": {"core", "rewards", "lm"},
    "analysis": {"core", "rewards", "data"},
    "views": {"core", "rewards", "data", "analysis"},
    "ui": {"nav", "core", "rewards", "lm", "data", "analysis", "views"},
    "cli": {"core", "rewards", "lm", "data", "analysis"},
    "bench": {"nav", "core", "rewards", "lm", "data", "analysis", "cli"},
    "__main__": {"cli"},
    "__init__": set(),
    # app.py (the router) and pages/: layout and calls into ui, views and the analyses
    "pages": {"nav", "ui", "views", "analysis"},
}
#: layers that may import these third-party packages (everyone else must not).
THIRD_PARTY_ONLY: dict[str, set[str]] = {
    "streamlit": {"ui", "pages"},
    "plotly": {"views", "ui"},
}

#: the one Streamlit import outside ui/ and the pages: ``python -m roll_viz serve`` runs Streamlit
#: in its own process and tells it, before the first session, that ``pages/`` belongs to the router
SERVE_SWITCH = ("roll_viz/cli/serve.py", "streamlit.runtime.pages_manager")

#: the benchmarks: outside the product package (nothing a user runs imports them), one layer
BENCH_DIR = "benchmarks"

#: the "pages" layer: the router and the page scripts (outside the package)
PAGE_DIRS = ("pages",)
PAGE_FILES = ("app.py",)

WHY = {
    "nav": "nav is the page table, plain data: it imports nothing",
    "core": "core is pure tensor math: it imports nothing else of roll_viz",
    "rewards": "rewards score text with core records only",
    "lm": "lm (the model) never imports data, analysis, views, ui, cli or bench",
    "data": "data never imports analysis, views, ui, cli or bench",
    "analysis": "analysis never imports lm, views, ui, cli or bench (it answers from batches)",
    "views": "views never import lm, ui, cli or bench (figures only, no Streamlit)",
    "ui": "ui never imports cli or bench",
    "cli": "cli never imports views or ui (the command line never draws)",
    "bench": "bench never imports ui or views (browser benchmarks start a server instead)",
    "__main__": "python -m roll_viz only dispatches to cli",
    "__init__": "the package root holds the version only",
    "pages": "pages are thin: they import nav, ui, views and analysis only",
}


def _layer_of(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root)
    if rel.parts[0] in PAGE_DIRS or str(rel) in PAGE_FILES:
        return "pages"
    if rel.parts[0] == BENCH_DIR:
        return "bench"
    inner = rel.relative_to("roll_viz")
    return inner.parts[0].removesuffix(".py") if len(inner.parts) > 1 else inner.stem


def _sources(root: Path = ROOT) -> list[Path]:
    files = sorted((root / "roll_viz").rglob("*.py"))
    files += sorted((root / BENCH_DIR).rglob("*.py"))
    for folder in PAGE_DIRS:
        files += sorted((root / folder).glob("*.py"))
    files += [root / name for name in PAGE_FILES if (root / name).exists()]
    return files


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "roll_viz":
                found += [(node.lineno, f"roll_viz.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def violations(root: Path = ROOT) -> list[str]:
    """Every import that breaks a layer rule, as 'file:line: imports X (rule)'."""
    out = []
    for path in _sources(root):
        layer = _layer_of(path, root)
        allowed = ALLOWED[layer] | {layer}
        for line, module in _imports(path):
            top = module.split(".")[0]
            where = f"{path.relative_to(root)}:{line}"
            if top == BENCH_DIR and layer != "bench":
                out.append(f"{where}: imports {module} (the product never imports the benchmarks)")
            elif top == "roll_viz":
                parts = module.split(".")
                target = parts[1] if len(parts) > 1 else "__init__"
                if target not in allowed:
                    out.append(f"{where}: imports {module} ({WHY[layer]})")
            elif module.startswith("streamlit.proto") and layer == "bench":
                continue  # the load benchmark speaks Streamlit's wire protocol, not its UI
            elif module == SERVE_SWITCH[1] and str(path.relative_to(root)) == SERVE_SWITCH[0]:
                continue  # the launcher sets Streamlit's pages switch before the first session
            elif top in THIRD_PARTY_ONLY and layer not in THIRD_PARTY_ONLY[top]:
                only = ", ".join(sorted(THIRD_PARTY_ONLY[top]))
                out.append(f"{where}: imports {top} (only {only} may import {top})")
    return out


def test_every_module_has_a_layer():
    layers = {_layer_of(p) for p in _sources()}
    assert layers <= set(ALLOWED), f"modules outside any layer: {sorted(layers - set(ALLOWED))}"


def test_imports_point_down():
    problems = violations()
    assert not problems, "layer rule broken:\n" + "\n".join(problems)


def test_the_check_catches_a_violation(tmp_path):
    # A core module that imports the UI (lazily) and plotly must be reported with its rule.
    (tmp_path / "roll_viz" / "core").mkdir(parents=True)
    (tmp_path / "pages").mkdir()
    (tmp_path / "roll_viz" / "core" / "bad.py").write_text(
        "def f():\n    from roll_viz.ui import flow\n    import plotly\n"
    )
    (tmp_path / "pages" / "x.py").write_text("from roll_viz.lm import models\n")
    (tmp_path / "roll_viz" / "core" / "timed.py").write_text("from benchmarks import server\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "b.py").write_text("from roll_viz.ui import flow\n")
    problems = violations(tmp_path)
    assert any("timed.py:1: imports benchmarks" in p for p in problems)
    assert any("b.py:1: imports roll_viz.ui" in p and "bench never" in p for p in problems)
    assert any("bad.py:2: imports roll_viz.ui" in p and "pure tensor math" in p for p in problems)
    assert any("bad.py:3: imports plotly" in p for p in problems)
    assert any("x.py:1: imports roll_viz.lm" in p and "pages are thin" in p for p in problems)


LAYER_PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


@pytest.mark.parametrize("folder", LAYER_PACKAGES)
def test_each_layer_says_what_it_may_import(folder):
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
    assert "import" in doc.lower(), f"roll_viz/{folder}/__init__.py must state its import rules"


def test_every_page_in_the_table_exists_and_is_a_page():
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py")}
    assert {p.file for p in nav.PAGES} == files
    assert len({p.url_path for p in nav.PAGES}) == len(nav.PAGES)
    assert nav.PAGES[0].key == nav.HOME
    assert nav.PAGES[0].url_path == ""
