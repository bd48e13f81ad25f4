"""The fix gate ("fix this run"): its format, good and hostile files, and its recorded outcomes."""

from __future__ import annotations

import pytest

from roll_viz.analysis.lesson_answers import compute_gate, compute_lesson, run_env
from roll_viz.data.lessons import (
    LESSON_ORDER,
    MAX_CHOICES,
    LessonError,
    builtin_lesson_ids,
    builtin_lessons,
    parse_lesson,
)
from roll_viz.data.recorded_runs import RECORDED, load_recorded

FIX = """title = "T"

[[gates]]
id = "fix"
stage = "training"
batch = "recorded:hack_beta0"
question = "Which change fixes this run?"
kind = "fix"
choices = [
  { label = "beta = 1", run = "hack_beta1" },
  { label = "REINFORCE++", run = "rpp_global" },
  { label = "nothing", run = "hack_beta0" },
]
answer = "run_kl[-1] < 0.25 * base_run_kl[-1]"
explanation = "The KL anchors the policy."
"""

SEEN = """
[gates.seen]
question = "What did the runs show?"
choices = ["The KL penalty held the policy", "Any change works"]
answer = 0
"""


def error_of(text: str) -> str:
    with pytest.raises(LessonError) as info:
        parse_lesson(text, "x")
    return str(info.value)


def test_a_fix_gate_reads_its_runs_and_a_seen_step():
    lesson = parse_lesson(FIX + SEEN, "x")
    gate = lesson.gates[0]
    assert gate.kind == "fix"
    assert [(c.label, c.value, c.run) for c in gate.choices] == [
        ("beta = 1", 0.0, "hack_beta1"),
        ("REINFORCE++", 1.0, "rpp_global"),
        ("nothing", 2.0, "hack_beta0"),
    ]
    assert [s.role for s in lesson.steps] == ["gate", "seen"]
    seen = lesson.steps[1]
    assert seen.kind == "choice"
    assert all(c.run is None for c in seen.choices)  # the seen step's readings have no runs
    assert seen.explanation == "The KL anchors the policy."  # the teacher explains after it


@pytest.mark.parametrize(
    ("old", "new", "field", "problem"),
    [
        ('stage = "training"', 'stage = "kl"', "stage", "training"),
        ('batch = "recorded:hack_beta0"', 'batch = "pirate"', "batch", "recorded"),
        ('kind = "fix"', 'kind = "fix"\nfigure = "kl"', "figure", "training"),
        # a change without a recording cannot be offered: no made-up outcome
        ('run = "rpp_global"', 'run = "lower_lr"', "choices", "not a recorded run"),
        ('run = "rpp_global"', "run = 3", "choices", "not a recorded run"),
        ('{ label = "nothing", run = "hack_beta0" }', '"nothing"', "choices", "label = ..."),
        ('run = "rpp_global" }', 'run = "rpp_global", value = 1 }', "choices", "label = ..."),
        ('{ label = "nothing", run = "hack_beta0" }', '{ label = "nothing" }', "choices", "run"),
        ('label = "nothing"', 'label = "beta = 1"', "choices", "same label"),
        ('label = "nothing"', 'label = ""', "choices", "non-empty"),
        ('label = "nothing"', f'label = "{"x" * 201}"', "choices", "longer"),
        ("answer = ", 'answer = "run_kl[-1] < base_klx"\nx = ', "x", "not a field"),
        ("run_kl[-1] < 0.25", "open(1) < 0.25", "answer", ""),
    ],
)
def test_a_bad_fix_gate_gets_one_message_naming_gate_and_field(old, new, field, problem):
    assert old in FIX
    message = error_of(FIX.replace(old, new))
    assert f"gate 'fix', field {field!r}" in message
    assert problem in message
    assert "\n" not in message


def test_a_fix_gate_takes_no_knob_or_followup_and_bounded_choices():
    knob = FIX + '[gates.knob]\nchange = { beta = 1 }\nquestion = "q"\nanswer = "1"\n'
    assert "field 'knob'" in error_of(knob)
    followup = FIX + '[gates.followup]\nbatch = "sample"\n'
    assert "field 'followup'" in error_of(followup)
    many = ",\n".join(f'{{ label = "c{i}", run = "hack_beta1" }}' for i in range(MAX_CHOICES + 1))
    start = FIX.index("choices = [")
    end = FIX.index("]\nanswer")
    assert f"2..{MAX_CHOICES} choices" in error_of(FIX[:start] + f"choices = [{many}" + FIX[end:])
    assert "2..6 choices" in error_of(FIX[:start] + "choices = 7\n" + FIX[end + 2 :])


def test_a_fix_choice_shape_is_refused_elsewhere():
    # a run on an ordinary choice gate is not a field it has
    body = FIX.replace('kind = "fix"', 'kind = "choice"')
    assert "field 'choices'" in error_of(body)


def test_outcomes_are_the_recorded_runs_evaluated_by_hand():
    gate = parse_lesson(FIX, "x").gates[0]
    result = compute_gate(gate)
    kl = {name: load_recorded(name).series("kl_exact")[-1] for name in RECORDED}
    # by hand: fixed when the run's last KL is under a quarter of the collapse's (1.72)
    expected = [kl[c.run] < 0.25 * kl["hack_beta0"] for c in gate.choices]
    assert expected == [True, False, False]
    assert [o.fixed for o in result.outcomes] == expected
    assert [o.run for o in result.outcomes] == ["hack_beta1", "rpp_global", "hack_beta0"]
    assert result.outcomes[0].env["run_kl"] == run_env(load_recorded("hack_beta1"))["run_kl"]
    assert result.right == (0,)
    assert result.value == 1.0
    assert result.shown == "Fixes the run: beta = 1"
    assert result.is_right(0)
    assert not result.is_right(1)
    assert not result.is_right(None)
    assert result.env["run_kl"][-1] == pytest.approx(kl["hack_beta0"])  # the collapse's own


def test_a_fix_gate_with_no_fix_or_a_failing_expression_names_the_answer():
    never = parse_lesson(FIX.replace("0.25 *", "0.0 *"), "x").gates[0]
    with pytest.raises(LessonError, match="field 'answer': no choice's run fixes"):
        compute_gate(never)
    bad = parse_lesson(FIX.replace("run_kl[-1] <", "run_kl[99] <"), "x").gates[0]
    with pytest.raises(LessonError, match="field 'answer': on run 'hack_beta1'"):
        compute_gate(bad)


def test_the_builtin_fix_lesson_maps_every_choice_to_a_real_run():
    lesson = builtin_lessons()["fix_this_run"]
    assert [s.role for s in lesson.steps] == ["gate", "seen", "gate", "seen"]
    fix = lesson.gates[1]
    assert fix.kind == "fix"
    assert fix.batch == "recorded:hack_beta0"
    assert all(c.run in RECORDED for c in fix.choices)
    results = compute_lesson(lesson)
    assert results[0].shown == "Both climb"
    fixed = {o.run for o in results[2].outcomes if o.fixed}
    assert fixed == {"hack_beta1", "adaptive_beta"}
    # the explanation's numbers are the recordings'
    for run, last_kl in (("hack_beta1", 0.03), ("adaptive_beta", 0.13), ("era_2024", 1.7)):
        assert load_recorded(run).series("kl_exact")[-1] == pytest.approx(last_kl, abs=0.02)


def test_the_fix_lesson_is_a_later_lesson():
    ids = builtin_lesson_ids()
    assert ids[0] == "seed_chain"  # the first (default) lesson stays the first
    assert ids.index("fix_this_run") > ids.index("teaching_loop")
    assert set(LESSON_ORDER) <= set(ids)
    assert list(builtin_lessons()) == list(ids)
