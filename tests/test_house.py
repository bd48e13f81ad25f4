"""Four rules that keep the code easy to read, each failing with the rule, the file and the line.

1. No import circle between modules, inside a folder too (lazy imports count).
2. Imports sit at the top of a module; only heavy optional dependencies may be imported lazily.
3. A module over 600 lines says why in a ``Size:`` line of its docstring; module names are unique
   across the library folders (``cli/`` and ``bench/`` may reuse the name of what they drive).
4. Framework names are compared only inside ``core/pipeline/dialects/``: every other layer asks
   the dialect instead of branching on its name.
5. One knob, one name: a shared key or bound (``ONE_DEFINITION``: ``KEY_BETA``, ``MAX_EPOCHS``)
   is assigned in one module; every other module imports it (a second copy drifts: the Update
   page allowed 4 epochs while ``UpdateConfig`` allowed 8, and ``KEY_BETA`` meant "beta" in the
   sidebar and "tr_beta" on the Training page).
6. Native framework keys stay in the dialect records: outside ``core/pipeline/dialects/`` no
   string literal equals a framework-specific config key (collected from the records). The
   modules that still hold some are listed with their count (``NATIVE_KEY_DEBT``), which may only
   go down; any other module holds none.

Each rule has a self-test that shows it catches a violation (as ``test_layers.py`` does).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import Counter
from pathlib import Path

from roll_viz.core.pipeline import dialects

ROOT = Path(__file__).resolve().parents[1]

#: third-party modules that may be imported inside a function: each is heavy or optional, and
#: importing it at start-up would cost every page (or every CLI call) seconds it never needs.
LAZY_OK = (
    "transformers",
    "peft",
    "pyarrow",
    "playwright",
    "safetensors",
    "tokenizers",
    "torch.ao",
    "torch._dynamo",
    "trl",  # the training benchmark's peer, a dev-only install
    "datasets",
    "polars",  # the runs benchmark's NDJSON peer, a dev-only install
    "streamlit.proto",  # the load benchmark speaks the wire protocol; a plain run never needs it
)
MAX_LINES = 600
LIBRARY = ("core", "lm", "data", "analysis", "views", "ui")
FRAMEWORK_BRANCH = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](roll|verl|openrlhf|trl)["']""")
DIALECTS = Path("roll_viz/core/pipeline/dialects")
#: names assigned at module level in exactly one module (rule 5)
ONE_DEFINITION = ("KEY_BETA", "MAX_EPOCHS")
#: rule 6: native keys that are also the app's own names for the same thing (the generic sidebar
#: knobs are added from the records' ALIASES): the sampling length, the adaptive controller's
#: target and horizon, and a reward function's parameter.
APP_WORDS = frozenset({"max_new_tokens", "target", "horizon", "target_kl"})
#: rule 6's debt: modules outside the dialects that still spell native keys, with their count
#: (207 literals in 22 modules before the dialect records, 48 in 14 after; lower a number when
#: you move some into a record, delete the line at 0).
NATIVE_KEY_DEBT = {
    "pages/rewards.py": 1,
    "pages/token_kl.py": 1,
    "pages/training.py": 1,
    "roll_viz/analysis/history.py": 4,
    "roll_viz/analysis/reward_table.py": 6,
    "roll_viz/analysis/silent_bugs/bugs_groups.py": 10,
    "roll_viz/analysis/silent_bugs/bugs_loss.py": 4,
    "roll_viz/cli/train.py": 1,
    "roll_viz/core/pipeline/postprocess.py": 2,
    "roll_viz/core/records.py": 1,
    "roll_viz/lm/runfile.py": 1,
    "roll_viz/ui/mismatch_page.py": 4,
    "roll_viz/ui/training_demos.py": 2,
    "roll_viz/ui/training_page.py": 9,
    "roll_viz/views/explain.py": 1,
}


def _sources(root: Path) -> list[Path]:
    files = sorted((root / "roll_viz").rglob("*.py"))
    files += sorted((root / "benchmarks").rglob("*.py")) if (root / "benchmarks").exists() else []
    files += sorted((root / "pages").glob("*.py")) if (root / "pages").exists() else []
    files += [p for p in (root / "app.py",) if p.exists()]
    return files


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _targets(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The project modules an import node names (a submodule where it names one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        if sub in known:
            out.append(sub)
        elif source in known:
            out.append(source)
    return out


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported project module: line of the first such import}."""
    paths = {_module_name(p, root): p for p in _sources(root)}
    known = set(paths)
    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        edges: dict[str, int] = {}
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, module, path.name == "__init__.py", known):
                    if target != module:
                        edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def circles(root: Path = ROOT) -> list[str]:
    """Every import circle, as 'a.py:L -> b.py:L -> a' (one entry per circle found)."""
    graph = import_graph(root)
    paths = {_module_name(p, root): p.relative_to(root) for p in _sources(root)}
    found: list[str] = []
    seen_cycles: set[frozenset[str]] = set()
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        color[node] = 1
        stack.append(node)
        for nxt in graph.get(node, {}):
            if color.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                key = frozenset(cycle)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    hops = [f"{paths[a]}:{graph[a][b]}" for a, b in itertools.pairwise(cycle)]
                    found.append(" -> ".join(hops) + f" -> {paths[cycle[-1]]}")
            elif nxt not in color:
                visit(nxt)
        stack.pop()
        color[node] = 2

    for module in sorted(graph):
        if module not in color:
            visit(module)
    return found


def _lazy_ok(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in LAZY_OK)


def late_imports(root: Path = ROOT) -> list[str]:
    """Imports inside a function or class body, except the heavy optional ones (LAZY_OK)."""
    out = []
    for path in _sources(root):
        tree = ast.parse(path.read_text(), filename=str(path))
        top = set(map(id, tree.body))
        for stmt in tree.body:  # `if TYPE_CHECKING:` / `try:` blocks at module level are top too
            if isinstance(stmt, ast.If | ast.Try):
                top |= {id(n) for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in top:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                names = [("." * node.level) + (node.module or "")]
            if all(_lazy_ok(n) for n in names):
                continue
            out.append(
                f"{path.relative_to(root)}:{node.lineno}: imports {', '.join(names)} inside a "
                "function (imports go at the top; only heavy optional packages may wait)"
            )
    return out


def oversized(root: Path = ROOT) -> list[str]:
    """Modules over MAX_LINES without a ``Size:`` line in their docstring."""
    out = []
    for path in _sources(root):
        text = path.read_text()
        lines = text.count("\n") + 1
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not re.search(r"^Size:\s*\S", doc, re.MULTILINE):
            out.append(
                f"{path.relative_to(root)}:1: {lines} lines without a 'Size: <why>' line in its "
                f"docstring (split it, or say why it is one file over {MAX_LINES} lines)"
            )
    return out


def repeated_names(root: Path = ROOT) -> list[str]:
    """Module basenames used twice across the library folders (one name, one meaning)."""
    files = [p for folder in LIBRARY for p in sorted((root / "roll_viz" / folder).rglob("*.py"))]
    files += [p for p in (root / "roll_viz" / "rewards.py",) if p.exists()]
    names = Counter(p.stem for p in files if not p.stem.startswith("__"))
    return [
        f"{p.relative_to(root)}:1: module name {p.stem!r} is used {names[p.stem]} times in "
        "the library folders (one name, one meaning)"
        for p in files
        if names[p.stem] > 1
    ]


def framework_branches(root: Path = ROOT) -> list[str]:
    """Comparisons against a framework's name outside the dialects folder."""
    out = []
    for path in _sources(root):
        rel = path.relative_to(root)
        if DIALECTS in rel.parents:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FRAMEWORK_BRANCH.search(line):
                out.append(
                    f"{rel}:{number}: branches on a framework's name (ask the dialect in "
                    f"{DIALECTS}/ instead): {line.strip()}"
                )
    return out


def second_definitions(root: Path = ROOT) -> list[str]:
    """Module-level assignments of a ``ONE_DEFINITION`` name beyond its first module."""
    seen: dict[str, list[str]] = {name: [] for name in ONE_DEFINITION}
    for path in _sources(root):
        for node in ast.parse(path.read_text()).body:
            targets = (
                node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            )
            for target in targets:
                if isinstance(target, ast.Name) and target.id in seen:
                    seen[target.id].append(f"{path.relative_to(root)}:{node.lineno}")
    return [
        f"{where}: {name} is assigned again (first in {places[0]}; import that one)"
        for name, places in seen.items()
        for where in places[1:]
    ]


def native_keys() -> frozenset[str]:
    """Every framework-specific config key of the registered dialect records (rule 6)."""
    keys = frozenset().union(*(d.native_keys() for d in dialects.DIALECTS.values()))
    generic = {k for d in dialects.DIALECTS.values() for k in d.ALIASES}
    return keys - generic - APP_WORDS


def native_key_literals(root: Path, keys: frozenset[str]) -> dict[str, list[str]]:
    """Product module (dialects and benchmarks aside) -> its string literals equal to a key."""
    out: dict[str, list[str]] = {}
    for path in _sources(root):
        rel = path.relative_to(root)
        if DIALECTS in rel.parents or rel.parts[0] == "benchmarks":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in keys:
                out.setdefault(str(rel), []).append(f"{node.lineno}: {node.value!r}")
    return out


def native_key_growth(root: Path, keys: frozenset[str], debt: dict[str, int]) -> list[str]:
    """Modules holding more native-key literals than ``debt`` allows them, or paid off (rule 6)."""
    literals = native_key_literals(root, keys)
    grown = [
        f"{rel}: {len(found)} native framework keys (allowed {debt.get(rel, 0)}; ask the "
        f"dialect record in {DIALECTS}/ instead): {', '.join(found)}"
        for rel, found in literals.items()
        if len(found) > debt.get(rel, 0)
    ]
    paid = [
        f"{rel}: no native framework key left: delete its debt line"
        for rel in debt
        if rel not in literals
    ]
    return grown + paid


def test_no_import_circle():
    found = circles()
    assert not found, (
        "import circle (move the shared part into a module both import):\n" + "\n".join(found)
    )


def test_imports_at_the_top():
    found = late_imports()
    assert not found, "\n".join(found)


def test_big_modules_say_why():
    found = oversized()
    assert not found, "\n".join(found)


def test_module_names_are_unique():
    found = repeated_names()
    assert not found, "\n".join(found)


def test_framework_names_stay_in_the_dialects():
    found = framework_branches()
    assert not found, "\n".join(found)


def test_native_keys_stay_in_the_dialects():
    found = native_key_growth(ROOT, native_keys(), NATIVE_KEY_DEBT)
    assert not found, "\n".join(found)


def test_one_knob_is_defined_once():
    found = second_definitions()
    assert not found, "\n".join(found)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checks_catch_violations(tmp_path):
    _write(tmp_path, "roll_viz/__init__.py", "")
    _write(tmp_path, "roll_viz/ui/__init__.py", "")
    _write(tmp_path, "roll_viz/ui/a.py", "from roll_viz.ui import b\n")
    _write(tmp_path, "roll_viz/ui/b.py", "def f():\n    from roll_viz.ui.a import g\n")
    _write(tmp_path, "roll_viz/lm/__init__.py", "")
    _write(tmp_path, "roll_viz/lm/c.py", "def f():\n    import peft\n    from .d import x\n")
    _write(tmp_path, "roll_viz/lm/d.py", '"""Short."""\n' + "x = 1\n" * MAX_LINES)
    _write(tmp_path, "roll_viz/lm/e.py", '"""Long.\n\nSize: one table.\n"""\n' + "y = 1\n" * 700)
    _write(tmp_path, "roll_viz/core/__init__.py", "")
    _write(tmp_path, "roll_viz/core/a.py", "")
    _write(tmp_path, "pages/p.py", 'if fw == "verl":\n    pass\n')
    _write(tmp_path, "roll_viz/core/pipeline/dialects/verl.py", 'NAME = "verl"\nok = x == "verl"\n')

    found = circles(tmp_path)
    assert len(found) == 1
    assert "roll_viz/ui/a.py:1 -> roll_viz/ui/b.py:2 -> roll_viz/ui/a.py" in found[0]
    late = late_imports(tmp_path)
    assert any("roll_viz/lm/c.py:3" in v for v in late)
    assert any("roll_viz/ui/b.py:2" in v for v in late)
    assert not any("c.py:2" in v for v in late), "peft is heavy and optional: it may wait"
    big = oversized(tmp_path)
    assert [v.split(":")[0] for v in big] == ["roll_viz/lm/d.py"]
    assert any(v.startswith("roll_viz/core/a.py") for v in repeated_names(tmp_path))
    branches = framework_branches(tmp_path)
    assert branches == [branches[0]]
    assert branches[0].startswith("pages/p.py:1")


def test_one_definition_catches_a_second(tmp_path):
    _write(tmp_path, "roll_viz/lm/update.py", "MAX_EPOCHS = 4\nKEY_BETA: str = 'beta'\n")
    _write(tmp_path, "roll_viz/ui/page.py", "from roll_viz.lm.update import MAX_EPOCHS\n")
    assert second_definitions(tmp_path) == []  # one assignment each, the rest import it
    _write(tmp_path, "roll_viz/ui/page.py", "MAX_EPOCHS = 8\n\ndef f():\n    KEY_BETA = 1\n")
    _write(tmp_path, "roll_viz/ui/train.py", "KEY_BETA: str = 'tr_beta'\n")
    found = second_definitions(tmp_path)
    assert [v.split(": ")[0] for v in found] == ["roll_viz/ui/train.py:1", "roll_viz/ui/page.py:1"]
    assert "first in roll_viz/lm/update.py:2" in found[0]


def test_native_key_rule_catches_a_new_literal(tmp_path):
    keys = native_keys()
    assert {"adv_estimator", "kl_loss_coef", "init_coef"} <= keys
    assert not keys & {"beta", "gamma", "estimator", "max_new_tokens"}  # the app's own names
    _write(tmp_path, "roll_viz/core/pipeline/dialects/verl.py", 'K = "adv_estimator"\n')
    _write(tmp_path, "benchmarks/peer.py", 'K = "adv_estimator"\n')
    _write(tmp_path, "roll_viz/ui/page.py", '"""Reads adv_estimator."""\nK = "gamma"\n')
    assert native_key_growth(tmp_path, keys, {}) == []  # dialects, benchmarks, prose: fine
    _write(tmp_path, "pages/p.py", 'cfg = {"adv_estimator": "grpo", "init_coef": 0.1}\n')
    found = native_key_growth(tmp_path, keys, {})
    assert len(found) == 1
    assert found[0].startswith("pages/p.py: 2 native framework keys")
    assert native_key_growth(tmp_path, keys, {"pages/p.py": 2}) == []  # its recorded debt
    assert len(native_key_growth(tmp_path, keys, {"pages/p.py": 1})) == 1  # debt only goes down
    paid = native_key_growth(tmp_path, keys, {"pages/p.py": 2, "roll_viz/ui/page.py": 1})
    assert paid == ["roll_viz/ui/page.py: no native framework key left: delete its debt line"]
