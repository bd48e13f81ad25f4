"""House rules of the losses, each with a self-test that shows it catches a violation.

1. ``loss_from_spec`` is a short composition (at most ``MAX_DISPATCH_LINES`` lines): the kinds'
   value and gradient live in ``policy_terms.POLICY_TERMS``, not in a chain inside it.
2. No ``if``/``elif`` (or conditional expression) branches on a loss kind outside the registry:
   not on ``spec.kind``, nor on a dialect's loss switch (``loss_mode``, ``pg_variant``,
   ``loss_type``, ``policy_loss_type``), nor on a name assigned from one. Each dialect maps its
   switch to a kind (and its metric names) in one table, read by lookup.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOSSES = ROOT / "roll_viz/core/pipeline/losses.py"
REGISTRY = ROOT / "roll_viz/core/pipeline/policy_terms.py"
MAX_DISPATCH_LINES = 80
#: the config keys that pick a loss kind in some dialect
LOSS_SWITCHES = frozenset({"loss_mode", "pg_variant", "loss_type", "policy_loss_type"})


def function_lengths(source: str, name: str) -> list[int]:
    """Line counts (def line to last line, docstring included) of every function ``name``."""
    return [
        node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]


def _is_switch(node: ast.AST, names: set[str]) -> bool:
    """A loss-kind selector: spec.kind, cfg["loss_mode"], cfg.get("pg_variant"), or a name."""
    if isinstance(node, ast.Attribute) and node.attr == "kind":
        base = node.value
        return (isinstance(base, ast.Name) and base.id == "spec") or (
            isinstance(base, ast.Attribute) and base.attr == "spec"
        )
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value in LOSS_SWITCHES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        is_get = node.func.attr == "get"
        return is_get and isinstance(first, ast.Constant) and first.value in LOSS_SWITCHES
    return isinstance(node, ast.Name) and node.id in names


def _switch_names(func: ast.AST) -> set[str]:
    """Local names assigned from a loss switch inside ``func`` (``mode = cfg["loss_mode"]``)."""
    names: set[str] = set()
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=False))
            for name, value in pairs:
                if isinstance(name, ast.Name) and _is_switch(value, set()):
                    names.add(name.id)
    return names


def kind_branches(source: str) -> list[str]:
    """``line: text`` of each if / elif / conditional expression testing a loss-kind selector."""
    tree = ast.parse(source)
    found = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)] or [tree]
    for scope in scopes:
        names = _switch_names(scope)
        for node in ast.walk(scope):
            if not isinstance(node, ast.If | ast.IfExp):
                continue
            for cmp in ast.walk(node.test):
                if isinstance(cmp, ast.Compare) and any(
                    _is_switch(x, names) for x in (cmp.left, *cmp.comparators)
                ):
                    found.append(f"{cmp.lineno}: {ast.unparse(cmp)}")
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def _library() -> list[Path]:
    return [p for p in sorted((ROOT / "roll_viz").rglob("*.py")) if p != REGISTRY]


# ------------------------------------------------------------------------------------ rules


def test_loss_from_spec_is_short():
    lengths = function_lengths(LOSSES.read_text(), "loss_from_spec")
    assert lengths, "losses.loss_from_spec is gone: update this rule"
    assert max(lengths) <= MAX_DISPATCH_LINES, (
        f"losses.loss_from_spec is {max(lengths)} lines (at most {MAX_DISPATCH_LINES}): put a "
        "kind's value and gradient in policy_terms.POLICY_TERMS"
    )


#: modules that still branch on a loss switch, with their count, which may only go down: verl's
#: rollout correction rewrites the loss inputs (old = mu, a rejection mask, IS weights) before the
#: loss runs, its operating mode chosen in ``verl_rollout.mode`` by comparing ``loss_mode`` with
#: bypass_mode, and its note says how geo_mean takes the decoupled IS weights (the per-row
#: geometric mean of them).
KNOWN = {
    "roll_viz/core/pipeline/dialects/verl_rollout.py": 2,
}


def test_no_branch_on_a_loss_kind_outside_the_registry():
    found = {
        str(p.relative_to(ROOT)): hits for p in _library() if (hits := kind_branches(p.read_text()))
    }
    over = {path: hits for path, hits in found.items() if len(hits) > KNOWN.get(path, 0)}
    assert over == {}, (
        "branch on a loss kind outside policy_terms.POLICY_TERMS (map the dialect's switch to "
        f"a kind in its loss table instead): {over}"
    )
    stale = {path: n for path, n in KNOWN.items() if len(found.get(path, ())) < n}
    assert stale == {}, f"fewer branches than KNOWN lists: lower the counts {stale}"


# ------------------------------------------------------------------------------- self-tests


def test_self_test_length_rule_catches_a_long_dispatcher():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_DISPATCH_LINES))
    source = f"def loss_from_spec(spec):\n{body}\n    return x0\n"
    assert function_lengths(source, "loss_from_spec") == [MAX_DISPATCH_LINES + 2]


def test_self_test_branch_rule_catches_each_selector():
    source = """
def loss(spec, cfg, ctx):
    mode = cfg["loss_mode"]
    kind, other = ctx.cfg["loss_type"], 1
    if spec.kind == "ppo":
        pass
    elif ctx.spec.kind in ("cispo", "tis"):
        pass
    if mode == "gpg":
        pass
    x = 1 if cfg.get("pg_variant") == "topr" else 0
    if cfg["loss_type"] != "grpo" and cfg["policy_loss_type"] == "gspo":
        pass
    if kind == "dapo" or other == 2:
        pass
    if gate.kind == "number" or cfg["loss_agg_mode"] == "token-mean":
        pass
    return POLICY_TERMS[spec.kind], LOSS_MODES[mode]
"""
    hits = kind_branches(source)
    assert [h.split(":")[0] for h in hits] == ["5", "7", "9", "11", "12", "12", "14"], hits
