"""The lesson file format and its safe answer expressions, including hostile files."""

from __future__ import annotations

import ast

import pytest

from roll_viz.data import lesson_expr
from roll_viz.data.lesson_expr import ExprError, compile_expression, evaluate
from roll_viz.data.lessons import (
    MAX_FILE_BYTES,
    MAX_GATES,
    NAMES,
    LessonError,
    builtin_lessons,
    load_lesson,
    parse_lesson,
)

GATE = """
[[gates]]
id = "g1"
stage = "advantage"
batch = "inline"
rewards = [[8.2, 6.5, 9.1]]
settings = { estimator = "grpo" }
question = "Which answer is pushed down?"
kind = "choice"
choices = ["Answer 1", "Answer 2", "Answer 3"]
answer = "argmin(advantage)"
"""


def _balanced(levels: int) -> str:
    return "1e12" if levels == 0 else f"({_balanced(levels - 1)}*{_balanced(levels - 1)})"


#: 1e12 ** 32 = 1e384 overflows to inf, written 6 levels deep and under 300 characters
BALANCED_OVERFLOW = _balanced(5)


def lesson(body: str = GATE, title: str = "T") -> str:
    return f'title = "{title}"\n' + body


def allowed(name: str) -> bool:
    return name in NAMES or (name.startswith("base_") and name[5:] in NAMES)


def value(src: str, env: dict | None = None) -> float:
    return evaluate(compile_expression(src, allowed), env or {})


def error_of(text: str | bytes) -> str:
    with pytest.raises(LessonError) as info:
        parse_lesson(text, "x")
    return str(info.value)


# ----------------------------------------------------------------------------------- the format


def test_builtin_lessons_parse():
    lessons = builtin_lessons()
    assert "seed_chain" in lessons
    seed = lessons["seed_chain"]
    stages = [g.stage for g in seed.gates]
    for stage in ("reward", "normalisation", "kl", "advantage", "local_global", "update"):
        assert stage in stages
    assert stages[-1] == "training"
    assert seed.minutes == 20
    # knobs follow their gate and inherit its batch unless they change it
    ids = [g.id for g in seed.steps]
    assert ids.index("how_much.knob") == ids.index("how_much") + 1
    knob = seed.steps[ids.index("beta_kl.knob")]
    assert knob.batch == "pirate"
    assert dict(knob.settings)["beta"] == 0.1
    assert knob.parent == "beta_kl"


def test_minimal_lesson_and_defaults():
    parsed = parse_lesson(lesson(), "x")
    gate = parsed.gates[0]
    assert gate.framework == "roll"
    assert [c.value for c in gate.choices] == [0.0, 1.0, 2.0]
    assert gate.figure == "advantages"
    assert parsed.steps == parsed.gates


def test_sign_and_number_gates():
    body = GATE.replace('kind = "choice"', 'kind = "sign"').replace(
        'choices = ["Answer 1", "Answer 2", "Answer 3"]\n', ""
    )
    gate = parse_lesson(lesson(body), "x").gates[0]
    assert [c.value for c in gate.choices] == [1.0, 0.0, -1.0]
    body = GATE.replace(
        'kind = "choice"', 'kind = "number"\nmin = -3\nmax = 0\nstep = 0.1'
    ).replace('choices = ["Answer 1", "Answer 2", "Answer 3"]\n', "")
    gate = parse_lesson(lesson(body), "x").gates[0]
    assert (gate.low, gate.high, gate.step, gate.tolerance) == (-3.0, 0.0, 0.1, 0.05)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('stage = "advantage"', 'stage = "magic"', "stage"),
        ('batch = "inline"', 'batch = "nope"', "batch"),
        ('kind = "choice"', 'kind = "essay"', "kind"),
        ('answer = "argmin(advantage)"', 'answer = "argmin(advantag)"', "answer"),
        ('answer = "argmin(advantage)"', "answer = 3", "answer"),
        (
            'settings = { estimator = "grpo" }',
            'settings = { estimator = "ppo9" }',
            "settings.estimator",
        ),
        ('settings = { estimator = "grpo" }', "settings = { beta = -1 }", "settings.beta"),
        ('settings = { estimator = "grpo" }', "settings = { warp = 1 }", "settings.warp"),
        ('settings = { estimator = "grpo" }', "settings = { G = 0 }", "settings.G"),
        ('choices = ["Answer 1", "Answer 2", "Answer 3"]', 'choices = ["only one"]', "choices"),
        ('choices = ["Answer 1", "Answer 2", "Answer 3"]', 'choices = ["a", "a"]', "choices"),
        ("rewards = [[8.2, 6.5, 9.1]]", 'rewards = [["x"]]', "rewards"),
        ("rewards = [[8.2, 6.5, 9.1]]", "rewards = [[nan]]", "rewards"),
        ('question = "Which answer is pushed down?"', 'question = ""', "question"),
        ('id = "g1"', 'id = "G 1!"', "id"),
        ('id = "g1"', 'id = "g1"\ncolour = "red"', "colour"),
    ],
)
def test_one_message_names_gate_and_field(old, new, field):
    message = error_of(lesson(GATE.replace(old, new)))
    assert f"field {field!r}" in message
    assert "gate " in message
    assert message.count("\n") == 0


def test_bad_knob_names_the_knob():
    body = GATE + '[gates.knob]\nchange = { beta = "lots" }\nquestion = "q"\nanswer = "1"\n'
    message = error_of(lesson(body))
    assert "gate 'g1.knob'" in message
    assert "change.beta" in message


def test_preset_seed_is_frozen():
    body = GATE.replace(
        'batch = "inline"\nrewards = [[8.2, 6.5, 9.1]]', 'batch = "quantum"\nseed = 7'
    )
    assert "field 'seed'" in error_of(lesson(body))


def test_recorded_runs_take_no_settings():
    body = GATE.replace(
        'batch = "inline"\nrewards = [[8.2, 6.5, 9.1]]', 'batch = "recorded:hack_beta0"'
    )
    assert "field 'settings'" in error_of(lesson(body))


def test_duplicate_ids_and_toml_errors():
    assert "used twice" in error_of(lesson(GATE + GATE))
    assert "field 'file'" in error_of("title = ")
    assert "field 'file'" in error_of(b"\xff\xfe title")


def test_bounds_file_size_and_gate_count(tmp_path):
    big = lesson(GATE) + "# " + "x" * MAX_FILE_BYTES + "\n"
    assert "more than" in error_of(big)
    path = tmp_path / "big.toml"
    path.write_text(big)
    with pytest.raises(LessonError, match="more than"):
        load_lesson(path)
    many = "".join(GATE.replace('id = "g1"', f'id = "g{i}"') for i in range(MAX_GATES + 1))
    assert "field 'gates'" in error_of(lesson(many))
    assert "field 'question'" in error_of(
        lesson(GATE.replace("Which answer is pushed down?", "q" * 5000))
    )


def test_script_in_text_is_kept_as_plain_text():
    hostile = "<script>alert(1)</script> **bold** [link](javascript:alert(1))"
    body = GATE.replace("Which answer is pushed down?", hostile.replace('"', "'"))
    gate = parse_lesson(lesson(body), "x").gates[0]
    assert gate.question == hostile.replace('"', "'")  # stored verbatim; pages escape it


def test_missing_file(tmp_path):
    with pytest.raises(LessonError, match="cannot be read"):
        load_lesson(tmp_path / "none.toml")


# ------------------------------------------------------------------------------ the evaluator


def test_grammar_works():
    env = {"advantage": [0.2, -1.1, 0.9], "advantages": [[1.0, 2.0], [3.0]], "beta": 0.1}
    assert value("advantage[1]", env) == -1.1
    assert value("advantages[0][-1]", env) == 2.0
    assert value("argmin(advantage)", env) == 1.0
    assert value("max(abs(advantage))", env) == pytest.approx(1.1)
    assert value("round(mean(advantage), 3)", env) == pytest.approx(0.0)
    assert value("where(min(advantage) < 0, 1, 0)", env) == 1.0
    assert value("1 < 2 < 3 and not 0", env) == 1.0
    assert value("-(2 + 3) * 4 / 8", env) == -2.5
    assert value("base_beta", {"base_beta": 0.5}) == 0.5


@pytest.mark.parametrize(
    "src",
    [
        "__import__('os').system('echo hacked')",
        "advantage.__class__",
        "().__class__.__bases__[0].__subclasses__()",
        "open('/etc/passwd')",
        "eval('1')",
        "exec('x=1')",
        "lambda: 1",
        "[x for x in advantage]",
        "2 ** 10 ** 10",
        "10 ** 9999",
        "'text'",
        "advantage[0:2]",
        "max(*advantage)",
        "round(x=1)",
        "x := 1",
        "{1: 2}",
        "advantage if 1 else 0",
        "9" * 200,
        "1e999",
    ],
)
def test_hostile_expressions_are_refused(src):
    with pytest.raises(ExprError):
        compile_expression(src, allowed)


def test_hostile_expression_in_a_file_names_the_answer_field():
    body = GATE.replace('answer = "argmin(advantage)"', "answer = \"__import__('os')\"")
    assert "field 'answer'" in error_of(lesson(body))


def test_depth_length_and_size_bounds():
    deep = "(" * 150 + "1" + ")" * 150
    with pytest.raises(ExprError):
        compile_expression(deep, allowed)
    nested = (
        "abs(" * (lesson_expr.MAX_EXPR_DEPTH + 1) + "1" + ")" * (lesson_expr.MAX_EXPR_DEPTH + 1)
    )
    with pytest.raises(ExprError, match=r"nested|longer"):
        compile_expression(nested, allowed)
    with pytest.raises(ExprError, match="longer"):
        compile_expression("1+" * 200 + "1", allowed)
    with pytest.raises(ExprError, match="parts"):
        compile_expression("<".join(["1"] * 140), allowed)  # flat: a 140-term comparison


def test_only_whitelisted_nodes_survive():
    expr = compile_expression("where(abs(advantage[1]) > 0.5 and beta == 0, -1, 2)", allowed)
    kinds = {type(n).__name__ for n in ast.walk(expr.tree)}
    assert kinds <= {
        "Expression",
        "Call",
        "Name",
        "Load",
        "Compare",
        "Gt",
        "Eq",
        "BoolOp",
        "And",
        "Subscript",
        "Constant",
        "UnaryOp",
        "USub",
    }


@pytest.mark.parametrize(
    ("src", "match"),
    [
        ("1 / 0", "division by zero"),
        ("advantage[7]", "out of range"),
        ("advantage[0.5]", "whole number"),
        ("advantage", "list"),
        ("advantage + 1", "list"),
        ("beta[0]", "indexing a number"),
        ("scores[0]", "not available"),
        (BALANCED_OVERFLOW, "finite"),
        ("round(1, 99)", "digits"),
        ("mean(beta)", "list"),
    ],
)
def test_evaluation_errors_are_clear(src, match):
    with pytest.raises(ExprError, match=match):
        value(src, {"advantage": [0.2, -1.1, 0.9], "beta": 0.1})
