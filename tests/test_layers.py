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


#: the lm modules ui/ and the pages may import (issue #27, "one door into the model"): the rollout
#: door (``lm.rollout``: which engine answers, the sampling side's names), the shared model, a
#: session's adapter and its update, a training run and its file. Everything else of lm (the
#: engines, decode loops, queues, reaper ...) is reached through them, so no page picks a backend.
UI_LM_MODULES = frozenset({"rollout", "models", "lora", "update", "train", "runfile"})
MAX_UI_LM_MODULES = 6
#: page glue: each page's Streamlit code (``ui/*_page.py``) and the Training page's parts
GLUE_PARTS = frozenset(
    {"training_demos", "training_mu", "training_steps", "training_view", "run_files"}
)


def _lm_modules(path: Path) -> list[tuple[int, str]]:
    """(line, lm module) of every import of a ``roll_viz.lm`` module in the file (lazy too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "roll_viz.lm":  # from roll_viz.lm import sampling, models
                names = [f"roll_viz.lm.{alias.name}" for alias in node.names]
            else:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["roll_viz", "lm"]:
                found.append((node.lineno, parts[2] if len(parts) > 2 else "__init__"))
    return found


def lm_door_violations(root: Path = ROOT) -> list[str]:
    """Imports by ui/ and the pages of an lm module outside UI_LM_MODULES."""
    doors = ", ".join(f"lm.{m}" for m in sorted(UI_LM_MODULES))
    out = []
    for path in _sources(root):
        if _layer_of(path, root) not in ("ui", "pages"):
            continue
        for line, module in _lm_modules(path):
            if module not in UI_LM_MODULES:
                out.append(
                    f"{path.relative_to(root)}:{line}: imports roll_viz.lm.{module} (ui and the "
                    f"pages reach lm through {doors} only)"
                )
    return out


def _is_glue(module: str) -> bool:
    return module.endswith("_page") or module in GLUE_PARTS


def glue_violations(root: Path = ROOT) -> list[str]:
    """Imports of a page's glue by a ui module that is not itself page glue (flow, sidebar ...)."""
    out = []
    for path in sorted((root / "roll_viz" / "ui").rglob("*.py")):
        if _is_glue(path.stem):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "roll_viz.ui":
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module.removeprefix("roll_viz.ui.")]
            elif isinstance(node, ast.Import):
                modules = [alias.name.removeprefix("roll_viz.ui.") for alias in node.names]
            else:
                continue
            for module in modules:
                if "." not in module and _is_glue(module):
                    out.append(
                        f"{path.relative_to(root)}:{node.lineno}: imports roll_viz.ui.{module} "
                        "(a page's glue: move what is shared into a module the pages share)"
                    )
    return out


def test_ui_and_pages_reach_lm_through_six_modules():
    assert len(UI_LM_MODULES) <= MAX_UI_LM_MODULES
    assert all((PACKAGE / "lm" / f"{m}.py").exists() for m in UI_LM_MODULES)
    problems = lm_door_violations()
    assert not problems, "lm reached past its doors:\n" + "\n".join(problems)


def test_no_shared_ui_module_imports_a_page_glue():
    problems = glue_violations()
    assert not problems, "page glue imported:\n" + "\n".join(problems)


def test_the_lm_door_and_glue_checks_catch_violations(tmp_path):
    (tmp_path / "roll_viz" / "ui").mkdir(parents=True)
    (tmp_path / "roll_viz" / "cli").mkdir(parents=True)
    (tmp_path / "pages").mkdir()
    (tmp_path / "roll_viz" / "ui" / "a.py").write_text(
        "from roll_viz.lm import rollout, sampling\n"
        "def f():\n    import roll_viz.lm.engine_http\n"
        "from roll_viz.ui import your_run_page as runs\n"
    )
    (tmp_path / "roll_viz" / "ui" / "ok.py").write_text(
        "from roll_viz.lm.rollout import current\nfrom roll_viz.lm import models, train\n"
    )
    (tmp_path / "roll_viz" / "ui" / "b_page.py").write_text("from roll_viz.ui.c_page import x\n")
    (tmp_path / "pages" / "p.py").write_text("from roll_viz.lm.decode import FAST_DECODE\n")
    (tmp_path / "roll_viz" / "cli" / "c.py").write_text("from roll_viz.lm import sampling\n")
    doors = lm_door_violations(tmp_path)
    assert any("a.py:1: imports roll_viz.lm.sampling" in p for p in doors)
    assert any("a.py:3: imports roll_viz.lm.engine_http" in p for p in doors)
    assert any("p.py:1: imports roll_viz.lm.decode" in p for p in doors)
    assert len(doors) == 3, doors  # lm.rollout, lm.models, lm.train and the CLI's import pass
    glue = glue_violations(tmp_path)
    assert len(glue) == 1, glue  # a page's glue importing another page's glue passes
    assert "a.py:4: imports roll_viz.ui.your_run_page" in glue[0]


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
