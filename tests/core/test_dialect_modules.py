"""The dialect modules (core/pipeline/dialects/<name>.py): each exposes every fact, with the values
the app used before they moved there (hand-checked against the old translation code)."""

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

from roll_viz.core import pipeline
from roll_viz.core.pipeline import dialects
from roll_viz.core.pipeline.dialects import shared
from roll_viz.data.runs import FORMATS

FRAMEWORKS = ("roll", "verl", "openrlhf", "trl")
STAGES = Path(pipeline.__file__).parent


def test_registry_is_a_literal_dict_of_the_four_records():
    assert tuple(dialects.DIALECTS) == FRAMEWORKS == pipeline.FRAMEWORKS
    for name, record in dialects.DIALECTS.items():
        assert name == record.NAME
        assert isinstance(record, dialects.Dialect)
        module = importlib.import_module(f"roll_viz.core.pipeline.dialects.{name}")
        assert record is module.DIALECT
        # the record names its file's facts: each field is the module's object of that name
        assert [
            f for f in dialects.REQUIRED if getattr(record, f) is not getattr(module, f, None)
        ] == []
    with pytest.raises(ValueError, match="framework must be one of"):
        dialects.get("deepspeed")


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_module_exposes_the_required_facts(name):
    d = dialects.get(name)
    missing = [attr for attr in dialects.REQUIRED if not hasattr(d, attr)]
    assert not missing
    for table in ("DEFAULTS", "CHOICES", "HELP", "LOSS_DEFAULTS", "LOSS_CHOICES", "LOSS_HELP"):
        assert isinstance(getattr(d, table), dict)
    keys = {**d.DEFAULTS, **d.LOSS_DEFAULTS}
    assert set(d.HELP) == set(d.DEFAULTS)
    assert set(d.LOSS_HELP) == set(d.LOSS_DEFAULTS)
    assert set(d.CHOICES) <= set(d.DEFAULTS)
    assert set(d.LOSS_CHOICES) <= set(d.LOSS_DEFAULTS)
    assert set(d.LOSS_KEYS) <= set(keys)
    assert set(d.ALIASES) == set(shared.GENERIC_KNOBS)
    assert {k for k in d.ALIASES.values() if k is not None} <= set(d.DEFAULTS)
    assert d.ALIASES["estimator"] == d.ESTIMATOR_KEY
    assert d.ESTIMATOR_KEY in d.CHOICES
    assert d.ALIASES["beta"] == d.BETA_KEY
    assert set(d.CLIP_KEYS) <= set(d.LOSS_DEFAULTS)
    assert set(d.BOOL_VALUES) <= set(d.CHOICES)
    assert tuple(d.KL_NAMES) == shared.CANONICAL_KL
    assert set(d.KL_CANON.values()) <= set(shared.CANONICAL_KL)
    if d.KL_ESTIMATOR_KEY is None:
        assert d.KL_CANON == {}
    else:
        assert d.CHOICES[d.KL_ESTIMATOR_KEY] == tuple(d.KL_CANON)
        assert d.ALIASES["kl_estimator"] == d.KL_ESTIMATOR_KEY
    assert set(d.RETURN_ESTIMATORS) <= set(d.CHOICES[d.ESTIMATOR_KEY])
    assert d.GAE_PADDING in ("unmasked", "carry", "masked", None)
    assert set(d.RECIPES) <= set(shared.RECIPE_NAMES)
    for recipe in d.RECIPES.values():
        pipeline.resolve_config(name, recipe)  # every recipe is a valid config
    for fn in ("estimator_name", "kl_estimator", "to_native", "from_native", "from_canonical"):
        assert callable(getattr(d, fn))
    assert isinstance(d.SINGLETON_NOTE, str)
    assert isinstance(d.SINGLETON_BEHAVIOUR, str)


def record_problems(d: dialects.Dialect) -> list[str]:
    """What is wrong with the tables a record adds beside the config keys (empty: nothing).

    Every loss option and self-test config resolves, the self-test seeds name a known case, the
    browser coverage names only the dialect's keys with values it accepts, the run formats are
    the registered ones.
    """
    out = []
    for name, keys in d.LOSS_OPTIONS.items():
        try:
            pipeline.resolve_config(d.NAME, keys)
        except ValueError as err:
            out.append(f"LOSS_OPTIONS[{name!r}]: {err}")
    configs = [c for _, c, _, _ in d.SELFTEST.seed] + [d.SELFTEST.group_norm[0], *d.SELFTEST.masks]
    for config in configs:
        try:
            pipeline.resolve_config(d.NAME, config)
        except ValueError as err:
            out.append(f"SELFTEST: {err}")
    out += [f"SELFTEST seed {n!r}: case {c!r}" for n, _, c, _ in d.SELFTEST.seed if c not in CASES]
    keys = {**d.DEFAULTS, **d.LOSS_DEFAULTS}
    for key, values in (d.BROWSER_COVERAGE or {}).items():
        if key not in keys:
            out.append(f"BROWSER_COVERAGE: {key!r} is not a {d.NAME} key")
        elif values is not None and d.CHOICES.get(key) is not None:
            out += [
                f"BROWSER_COVERAGE[{key!r}]: {v!r} is not a choice"
                for v in values
                if v not in d.CHOICES[key]
            ]
    out += [f"RUN_FORMATS: {f!r} is not a run format" for f in d.RUN_FORMATS if f not in FORMATS]
    return out


#: the self-test's seed cases (analysis/selftest.py _seed_batch)
CASES = ("one", "whiten", "two")


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_the_record_tables_are_consistent(name):
    assert record_problems(dialects.get(name)) == []


def test_the_record_check_catches_bad_tables():
    bad = dataclasses.replace(
        dialects.get("trl"),
        LOSS_OPTIONS={"x": {"no_such_key": 1}},
        BROWSER_COVERAGE={"scale_rewards": ("group", "median"), "lambd": None},
        RUN_FORMATS=("trl", "no-such-format"),
    )
    found = record_problems(bad)
    assert [f.split(":")[0] for f in found] == [
        "LOSS_OPTIONS['x']",
        "BROWSER_COVERAGE['scale_rewards']",
        "BROWSER_COVERAGE",
        "RUN_FORMATS",
    ]


# (framework, BETA_KEY, CLIP_KEYS, KL_ESTIMATOR_KEY, ADAPTIVE_BETA, HAS_REWARD_NORM,
#  KL_IN_LOSS_ONLY, STD_EPS, GAE_PADDING) as lm/train.py, views/explain.py and the UI had them
FACTS = [
    ("roll", "init_kl_coef", ("pg_clip", "pg_clip_low", "pg_clip_high"), "kl_penalty", True, True,
     False, 1e-6, "unmasked"),
    ("verl", "kl_coef", ("clip_ratio", "clip_ratio_low", "clip_ratio_high"), "kl_penalty", True,
     False, False, 1e-6, "carry"),
    ("openrlhf", "init_coef", ("eps_clip",), "kl_estimator", True, False, False, 1e-9, "masked"),
    ("trl", "beta", ("epsilon",), None, False, False, True, 1e-4, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "beta", "clip", "kl_key", "adaptive", "norm", "loss_only", "eps", "gae"), FACTS
)
def test_facts_per_dialect(name, beta, clip, kl_key, adaptive, norm, loss_only, eps, gae):
    d = dialects.get(name)
    assert (beta, clip, kl_key) == (d.BETA_KEY, d.CLIP_KEYS, d.KL_ESTIMATOR_KEY)
    assert (adaptive, norm, loss_only) == (d.ADAPTIVE_BETA, d.HAS_REWARD_NORM, d.KL_IN_LOSS_ONLY)
    assert (eps, gae) == (d.STD_EPS, d.GAE_PADDING)


def test_kl_name_tables_are_the_old_ones():
    assert dialects.KL_NAMES == {
        "roll": {"k1": "kl", "abs": "abs", "k2": "mse", "k3": "k3"},
        "verl": {"k1": "kl", "abs": "abs", "k2": "mse", "k3": "low_var_kl"},
        "openrlhf": {"k1": "k1", "abs": None, "k2": "k2", "k3": "k3"},
        "trl": {"k1": None, "abs": None, "k2": None, "k3": None},
    }
    assert dialects.KL_CANON == {
        "kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3",
        "k3": "k3",
    }  # fmt: skip
    assert dialects.canonical_kl("verl", "low_var_kl") == "k3"
    assert dialects.canonical_kl("openrlhf", "mse") == "k2"  # any dialect's reading
    assert dialects.canonical_kl("roll", "bogus") is None
    assert dialects.canonical_kl("roll", None) is None
    assert dialects.get("trl").kl_estimator(pipeline.resolve_config("trl", {})) == "k3"
    assert dialects.get("roll").kl_estimator(pipeline.resolve_config("roll", {})) == "k1"


KNOBS = {
    "estimator": "grpo",
    "beta": 0.1,
    "gamma": 0.9,
    "lam": 0.8,
    "kl_estimator": "k3",
    "kl_in_reward": True,
    "clip": 2.0,
    "whiten": True,
}
VIZ = {"viz_std_ddof": None, "viz_whiten_ddof": None, "viz_eps": None}

# what ui/settings.resolve_config(framework, KNOBS) returned before to_native existed
TO_NATIVE = {
    "roll": {
        "adv_estimator": "grpo", "gamma": 0.9, "lambd": 0.8, "norm_mean_type": None,
        "norm_std_type": None, "reward_clip": 2.0, "whiten_rewards": False,
        "whiten_advantages": True, "advantage_clip": None, "add_token_level_kl": True,
        "init_kl_coef": 0.1, "kl_penalty": "k3", "target_kl": None, "kl_horizon": 10000,
        "use_kl_loss": False, "kl_loss_coef": 0.0, "max_len_mask": False,
        "difficulty_mask": False, "difficulty_low_threshold": 0.0,
        "difficulty_high_threshold": 1.0, "error_max_len_clip": False,
        "error_max_len_threshold": 9999999999, **VIZ,
    },
    "verl": {
        "adv_estimator": "grpo", "gamma": 0.9, "lam": 0.8, "norm_adv_by_std_in_grpo": True,
        "use_kl_in_reward": True, "kl_penalty": "k3", "kl_ctrl_type": "fixed", "kl_coef": 0.1,
        "target_kl": 0.1, "horizon": 10000, "use_kl_loss": False, "kl_loss_coef": 0.001,
        "kl_loss_type": "low_var_kl", "gdpo_reward_keys": None, "gdpo_reward_weights": None,
        "use_pf_ppo": False, "reweight_method": "pow", "weight_pow": 2.0, "viz_pf_ppo_seed": 0,
        **VIZ,
    },
    "openrlhf": {  # grpo is not an OpenRLHF estimator name: gae stays; clip 2 -> (-2, 2)
        "advantage_estimator": "gae", "gamma": 0.9, "lambd": 0.8, "kl_estimator": "k3",
        "init_coef": 0.1, "target": None, "horizon": 10000, "use_loss": False,
        "clip_range": (-2.0, 2.0), "no_std_norm": False, "overlong_buffer_len": None,
        "overlong_penalty_factor": 1.0, "stop_properly_penalty_coef": None,
        "max_new_tokens": None, **VIZ,
    },
    "trl": {
        "scale_rewards": "group", "beta": 0.1,
        "multi_objective_aggregation": "sum_then_normalize", "reward_weights": None, **VIZ,
    },
}  # fmt: skip


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_to_native_gives_what_the_sidebar_translation_gave(name):
    d = dialects.get(name)
    native = d.to_native(KNOBS)
    assert native == TO_NATIVE[name]
    assert list(native) == list(d.DEFAULTS)  # key order of the shipped defaults
    assert d.to_native({}) == d.DEFAULTS
    assert d.to_native({}) is not d.DEFAULTS  # a fresh dict


def test_to_native_skips_values_of_another_dialect():
    native = dialects.get("openrlhf").to_native(
        {"estimator": "group_norm", "beta": 0.05, "kl_estimator": "mse", "clip": 5}
    )
    assert native["advantage_estimator"] == "group_norm"
    assert native["kl_estimator"] == "k1"  # "mse" is ROLL/verl's name: skipped
    assert native["clip_range"] == (-5.0, 5.0)
    assert dialects.get("roll").to_native({"clip": 0.0})["reward_clip"] is None  # 0 = off


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_from_native_round_trip(name):
    d = dialects.get(name)
    assert d.to_native(d.from_native()) == d.DEFAULTS
    native = d.to_native(KNOBS)
    assert d.to_native(d.from_native(native)) == native
    assert dialects.get("openrlhf").from_native() == {
        "estimator": "gae", "gamma": 1.0, "lam": 1.0, "beta": 0.01, "kl_estimator": "k1",
        "kl_in_reward": False, "clip": 10.0, "whiten": False,
    }  # fmt: skip


def test_norm_and_kl_placement_are_the_old_overrides():
    roll, verl, openrlhf, trl = (dialects.get(n) for n in FRAMEWORKS)
    assert roll.norm_config("group") == {"norm_mean_type": "group", "norm_std_type": "group"}
    assert roll.norm_config("none") == {"norm_mean_type": None, "norm_std_type": None}
    assert verl.norm_config("group") is openrlhf.norm_config("batch") is trl.norm_config("group")
    assert trl.norm_config("group") is None
    assert roll.kl_placement(True, 0.07) == {
        "add_token_level_kl": True, "use_kl_loss": False, "kl_loss_coef": 0.0,
    }  # fmt: skip
    assert roll.kl_placement(False, 0.07) == {
        "add_token_level_kl": False, "use_kl_loss": True, "kl_loss_coef": 0.07,
    }  # fmt: skip
    assert verl.kl_placement(True, 0.07) == {
        "use_kl_in_reward": True, "use_kl_loss": False, "kl_loss_coef": 0.07,
    }  # fmt: skip
    assert openrlhf.kl_placement(True, 0.07) == {"use_loss": False}
    assert trl.kl_placement(True, 0.07) is None
    assert trl.kl_placement(False, 0.07) == {}


def test_train_config_is_the_old_dialect_config():
    roll, verl, openrlhf, trl = (dialects.get(n) for n in FRAMEWORKS)
    base = {"adv_estimator": "grpo"}
    assert roll.train_config(base, 0.02, True, 0.1, 50.0) == {
        "adv_estimator": "grpo", "init_kl_coef": 0.02, "add_token_level_kl": True,
        "target_kl": 0.1, "kl_horizon": 50.0,
    }  # fmt: skip
    off = roll.train_config({**base, "add_token_level_kl": False}, 0.02, False, 0.1, 50.0)
    assert off["add_token_level_kl"] is False
    assert off["target_kl"] is None
    assert verl.train_config(base, 0.5, False, 0.1, 50.0) == {
        "adv_estimator": "grpo", "kl_coef": 0.5, "use_kl_in_reward": True,
        "kl_ctrl_type": "fixed", "target_kl": 0.1, "horizon": 50.0,
    }  # fmt: skip
    assert openrlhf.train_config({}, 0.02, True, 0.1, 50.0) == {
        "init_coef": 0.02, "target": 0.1, "horizon": 50.0,
    }  # fmt: skip
    assert trl.train_config({}, 0.04, False, 0.1, 50.0) == {"beta": 0.04}
    assert base == {"adv_estimator": "grpo"}  # not modified


def test_from_canonical_is_the_old_comparison_translation():
    canonical = {"beta": 0.1, "gamma": 0.9, "lam": 0.8, "kl_in_reward": True,
                 "whiten": True, "kl_estimator": "k3", "clip": 2.0}  # fmt: skip
    # what analysis/compare.dialect_settings returned (a True without a key is not listed as
    # ignored: True == 1.0, one of the values that change nothing)
    assert dialects.get("roll").from_canonical(canonical) == (
        {"init_kl_coef": 0.1, "gamma": 0.9, "lambd": 0.8, "add_token_level_kl": True,
         "whiten_advantages": True, "kl_penalty": "k3", "reward_clip": 2.0},
        (),
    )  # fmt: skip
    assert dialects.get("verl").from_canonical(canonical) == (
        {"kl_coef": 0.1, "gamma": 0.9, "lam": 0.8, "use_kl_in_reward": True,
         "kl_penalty": "low_var_kl"},
        ("clip",),
    )  # fmt: skip
    assert dialects.get("openrlhf").from_canonical(canonical) == (
        {"init_coef": 0.1, "gamma": 0.9, "lambd": 0.8, "use_loss": False, "kl_estimator": "k3",
         "clip_range": (-2.0, 2.0)},
        (),
    )  # fmt: skip
    assert dialects.get("trl").from_canonical(canonical) == (
        {"beta": 0.1},
        ("gamma", "lam", "kl_estimator=k3", "clip"),
    )


def test_recipes_are_the_old_estimator_table():
    recipes = dialects.RECIPES
    assert tuple(recipes) == shared.RECIPE_NAMES
    assert recipes["grpo"] == {
        "roll": {"adv_estimator": "grpo"},
        "verl": {"adv_estimator": "grpo"},
        "openrlhf": {"advantage_estimator": "group_norm"},
        "trl": {"scale_rewards": "group"},
    }
    assert recipes["rloo"]["roll"] is None
    assert recipes["rloo"]["trl"] is None
    assert recipes["liteppo (group mean, batch std)"]["verl"] is None
    assert recipes["dr_grpo (no std)"]["verl"] == {
        "adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False,
    }  # fmt: skip


def test_beta_blocked_says_why_beta_is_flat():
    assert dialects.get("roll").beta_blocked({}) is None
    assert dialects.get("verl").beta_blocked({}) is None
    assert dialects.get("openrlhf").beta_blocked({"use_loss": False}) is None
    assert "use_loss" in dialects.get("openrlhf").beta_blocked({"use_loss": True})
    assert "only in the loss" in dialects.get("trl").beta_blocked({})


def test_trl_reads_a_bool_scale_rewards():
    assert pipeline.resolve_config("trl", {"scale_rewards": True})["scale_rewards"] == "group"
    assert pipeline.resolve_config("trl", {"scale_rewards": False})["scale_rewards"] == "none"
    with pytest.raises(ValueError, match="adv_estimator"):
        pipeline.resolve_config("roll", {"adv_estimator": True})  # only TRL reads a bool


# ----------------------------------------------------------------- the stages name no framework

STAGE_MODULES = (
    "postprocess",
    "kl",
    "advantages",
    "values",
    "losses",
    "loss_variants",
    "policy_terms",
    "aggregation",
    "loss_inputs",
    "loss_kl",
)
NAMES = {"roll", "verl", "openrlhf", "trl"}


def framework_mentions(source: str) -> list[str]:
    """Framework names used as code (string values, identifiers, imports), not in prose."""
    found = []
    for node in ast.walk(ast.parse(source)):
        is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_text and node.value.lower() in NAMES:
            found.append(f"{node.lineno}: string {node.value!r}")
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [*node.module.split("."), *(a.name for a in node.names)]
        for name in names:
            if name == "roll_viz":  # the package, not the framework
                continue
            if {part.lower() for part in name.split("_")} & (NAMES | {"dialects"}):
                found.append(f"{node.lineno}: name {name!r}")
    return found


@pytest.mark.parametrize("stage", STAGE_MODULES)
def test_stage_modules_contain_no_framework_name(stage):
    assert framework_mentions((STAGES / f"{stage}.py").read_text()) == []


def test_the_check_catches_a_framework_name():
    source = 'import x\nROLL_AGG = 1\nif fw == "verl":\n    pass\ndef _trl_spec(): pass\n'
    source += "from roll_viz.core.pipeline.dialects import roll\n"
    assert len(framework_mentions(source)) == 5
