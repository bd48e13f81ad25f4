"""Golden vectors from the frameworks' own loss code (dev tool; the test suite does not run it).

Runs each framework's policy-loss, KL and advantage code on a fixed, seeded batch for every option
it ships for single-turn RL, and writes compact JSON vectors to ``tests/fixtures/peers/<name>.json``
(inputs once per file; per vector the options under the framework's own names, the loss, the
gradient of the loss w.r.t. the current log-probs by autograd, and the logged metrics), with the
source and commit each number came from. ``tests/core/test_peer_vectors.py`` checks roll-viz's
calculator against them.

Sources (never copied into this repository; Apache-2.0, see each file's ``licence`` field):

* ROLL: the bare git mirror under ``/work/.mirror`` at its HEAD commit, extracted with
  ``git archive`` into a temporary folder.
* verl: the PyPI wheel ``verl==0.9.1`` (``pip download --no-deps``, unpacked, never installed),
  the release roll-viz follows. The mirror's HEAD (0.10.0.dev, 1dda039) differs from it in one
  line the vectors see: its ``compute_policy_loss_gspo`` forces ``seq-mean-token-mean`` where
  0.9.1 uses the configured ``loss_agg_mode``.
* OpenRLHF: the PyPI wheel ``openrlhf==0.11.2`` (``pip download --no-deps``, read, never
  installed). The mirror's HEAD is the older 0.11.0 API (``is_correction_enable`` / ``_type``);
  roll-viz follows 0.11.2 (``is_correction_level`` / ``_mode`` / ``_gating``).

Helpers: ``peer_inputs`` (the batch and the option grids), ``peer_stubs`` (stand-ins, verl and
OpenRLHF calls), ``peer_roll`` (ROLL calls), ``trl_live`` (TRL calls).

All are imported with small stand-ins for the heavy imports (ray, megatron, deepspeed,
tensordict, omegaconf, transformers, their config classes, their data containers).
* TRL: the installed ``trl`` (1.16.0, in requirements-dev.txt), called through
  ``GRPOTrainer._compute_loss`` with a stand-in ``self`` (``tests/peers/trl_live.py``, which the
  test also uses live).

Usage::

    .venv/bin/python tests/peers/make_vectors.py            # all four
    .venv/bin/python tests/peers/make_vectors.py verl roll  # some
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parents[1]))  # the repository root: benchmarks.framework_peers
import peer_inputs as pin  # noqa: E402
import peer_roll  # noqa: E402
import peer_stubs as stubs  # noqa: E402

from benchmarks import framework_peers  # noqa: E402

OUT = HERE.parent / "fixtures" / "peers"
MIRRORS = Path("/work/.mirror")
LICENCE = "Apache-2.0 (the framework's code was run, not copied; only its outputs are stored)"
F64 = torch.float64


# ------------------------------------------------------------------------------------ helpers


def rnd(x: float) -> float:
    """A float rounded to 10 significant digits (JSON size; the test tolerance is 2e-6)."""
    x = float(x)
    if x == 0.0 or not math.isfinite(x):
        return x
    return float(f"{x:.10g}")


def rows(t: torch.Tensor) -> list:
    """A tensor as nested lists of rounded floats."""
    return [rnd(v) for v in t.tolist()] if t.dim() == 1 else [rows(r) for r in t]


def scalar_metrics(metrics: dict) -> dict[str, float]:
    """The numeric scalar metrics (tensors -> float), rounded, names unchanged."""
    out = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[name] = rnd(value)
    return out


def head_commit(git_dir: Path) -> str:
    """The HEAD commit hash of a bare mirror."""
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def extract(git_dir: Path, paths: list[str], dest: Path) -> str:
    """``git archive HEAD paths`` into dest; returns the HEAD commit hash."""
    commit = head_commit(git_dir)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "HEAD", *paths],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def write(name: str, header: dict, vectors: list[dict], inputs: dict) -> None:
    """Write one framework's JSON (compact, one vector a line)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    body = {**header, "licence": LICENCE, "inputs": inputs, "vectors": vectors}
    text = json.dumps(body, separators=(",", ":"))
    text = text.replace(',{"case"', ',\n{"case"')
    path.write_text(text + "\n")
    print(f"{path}: {len(vectors)} vectors, {len(text) / 1024:.1f} KB")


def download_wheel(name: str, version: str, tmp: Path) -> Path:
    """``pip download name==version --no-deps`` into tmp/wheel (read, never installed)."""
    return framework_peers.download_wheel(name, version, tmp / "wheel")


def grad_of(loss: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
    """d loss / d lp (zeros where no path)."""
    (g,) = torch.autograd.grad(loss, lp, allow_unused=True)
    return torch.zeros_like(lp) if g is None else g


# --------------------------------------------------------------------------------------- verl


def run_verl(tmp: Path) -> None:
    """verl: ``workers/utils/losses.py::ppo_loss`` (policy + entropy + KL loss, as the trainer
    aggregates them) for every ``loss_mode`` x aggregation, every ``kl_loss_type`` (with ``+``),
    the rollout-correction weights and rejection, and the advantage estimators of core_algos."""
    version = "0.9.1"
    wheel = download_wheel("verl", version, tmp)
    subprocess.run(["unzip", "-q", str(wheel), "verl/*", "-d", str(tmp)], check=True)
    mods = stubs.load_verl(tmp)
    losses_mod, core = mods["losses"], mods["core_algos"]
    vectors = []
    for case in pin.CASES:
        for opts in pin.verl_loss_options():
            lp = case.lp.clone().requires_grad_(True)
            cfg = stubs.verl_actor_config(opts)
            # bypass_mode: apply_bypass_mode sets old_log_probs = rollout_log_probs (mu); the
            # engine counts batch_num_tokens on the loss mask before the loss rejects tokens
            bypass = opts["actor.policy_loss.loss_mode"] == "bypass_mode"
            data = stubs.TensorDictLike(
                dp_size=1,
                batch_num_tokens=case.mask.sum(),
                global_batch_size=case.B,  # ray_trainer passes ppo_mini_batch_size
                response_mask=case.mask,
                old_log_probs=case.mu if bypass else case.old,
                advantages=case.adv,
            )
            if opts.get("actor.use_kl_loss"):
                data["ref_log_prob"] = case.ref
            out = {"log_probs": lp}
            if opts.get("actor.entropy_coeff"):
                out["entropy"] = case.entropy
            torch.manual_seed(0)
            loss, metrics = losses_mod.ppo_loss(cfg, out, data)
            metrics = mods["rename_dict"](metrics, "actor/")  # ray_trainer: actor metrics
            vectors.append(
                {
                    "case": case.name,
                    "options": opts,
                    "loss": rnd(loss.item()),
                    "grad": rows(grad_of(loss, lp)),
                    "metrics": scalar_metrics(metrics),
                }
            )
        for opts in pin.verl_trainer_corrections():
            lp = case.lp.clone().requires_grad_(True)
            loss, metrics = stubs.run_verl_trainer_correction(mods, case, lp, opts)
            vectors.append(
                {
                    "case": case.name,
                    "options": opts,
                    "loss": rnd(loss.item()),
                    "grad": rows(grad_of(loss, lp)),
                    "metrics": scalar_metrics(metrics),
                }
            )
        for est in pin.verl_estimators(case):
            vectors.append(stubs.run_verl_estimator(core, case, est))
    for est in pin.verl_offset_estimators():
        offset = pin.SCORE_OFFSET
        vectors.append(stubs.run_verl_estimator(core, pin.CASES[0], est, offset=offset))
    for est in pin.verl_singleton_estimators():
        groups = pin.SINGLETON_GROUPS
        vectors.append(stubs.run_verl_estimator(core, pin.CASES[0], est, groups=groups))
    for case in pin.CASES[:1]:
        for rc in pin.verl_rollout_corrections():
            vectors.append(stubs.run_verl_rollout_correction(mods, case, rc))
    header = {
        "framework": "verl",
        "source": f"https://pypi.org/project/verl/{version}/ (wheel {wheel.name})",
        "commit": f"pypi verl=={version}",
        "mirror_commit": head_commit(MIRRORS / "verl-project+verl" / "repo"),
        "mirror_note": "the mirror's HEAD (0.10.0.dev) forces seq-mean-token-mean in "
        "compute_policy_loss_gspo; 0.9.1, the release roll-viz follows, uses loss_agg_mode",
        "code": [
            "verl/workers/utils/losses.py::ppo_loss",
            "verl/trainer/ppo/core_algos.py",
            "verl/trainer/ppo/rollout_corr_helper.py",
            "verl/trainer/ppo/v1/trainer_base.py (decoupled rollout correction, batch_num_tokens "
            "on loss_mask); verl/trainer/ppo/ray_trainer.py (the legacy trainer)",
        ],
    }
    write("verl", header, vectors, pin.dump_inputs())


# ---------------------------------------------------------------------------------------- ROLL


def run_roll(tmp: Path) -> None:
    """ROLL: ``ActorWorker.loss_func`` (pg_variant ppo, importance_sampling token / seq) and
    ``ActorPGWorker.loss_func`` (every pg_variant), with the sample weights."""
    git = MIRRORS / "alibaba+ROLL" / "repo"
    commit = extract(
        git,
        [
            "roll/pipeline/rlvr/actor_worker.py",
            "roll/pipeline/rlvr/actor_pg_worker.py",
            "roll/utils/functionals.py",
            "roll/utils/train_infer_corrections.py",
            "roll/pipeline/agentic/utils.py",
        ],
        tmp,
    )
    mods = peer_roll.load_roll(tmp)
    vectors = []
    for case in pin.CASES:
        for worker, opts in pin.roll_loss_options():
            default_agg = opts.get("loss_agg_mode") == "seq-mean-token-mean" and len(opts) == 2
            if case.name == "token" and worker == "actor_pg_worker" and not default_agg:
                continue  # file size: each variant once on token advantages
            lp = case.lp.clone().requires_grad_(True)
            loss, metrics = peer_roll.run_roll_loss(mods[worker], case, lp, opts)
            vectors.append(
                {
                    "case": case.name,
                    "worker": worker,
                    "options": opts,
                    "loss": rnd(loss.item()),
                    "grad": rows(grad_of(loss, lp)),
                    "metrics": scalar_metrics(metrics),
                }
            )
    for opts in pin.roll_estimators():
        vectors.append(peer_roll.run_roll_estimator(opts))
    for opts, prior in pin.roll_running_estimators():
        vectors.append(peer_roll.run_roll_estimator(opts, prior))
    for opts in pin.roll_corrections():
        vectors.append(peer_roll.run_roll_correction(pin.CASES[0], opts))
    header = {
        "framework": "roll",
        "source": "https://github.com/alibaba/ROLL",
        "commit": commit,
        "code": [
            "roll/pipeline/rlvr/actor_worker.py::ActorWorker.loss_func",
            "roll/pipeline/rlvr/actor_pg_worker.py::ActorPGWorker.loss_func",
            "roll/utils/functionals.py (reward_postprocess, compute_token_reward, "
            "compute_advantage)",
            "roll/utils/train_infer_corrections.py::compute_train_infer_correction",
        ],
    }
    write("roll", header, vectors, pin.dump_inputs())


# ------------------------------------------------------------------------------------ OpenRLHF


def run_openrlhf(tmp: Path) -> None:
    """OpenRLHF 0.11.2: ``PolicyLoss`` + the KL loss and entropy terms of
    ``PPOActor.training_step`` (``trainer/ray/ppo_actor.py``), batch info as
    ``utils/loss_utils.py::get_loss_batch_info`` builds it on one rank."""
    version = "0.11.2"
    wheel = download_wheel("openrlhf", version, tmp)
    src = tmp / "src"
    subprocess.run(["unzip", "-q", str(wheel), "-d", str(src)], check=True)
    pkg = next(src.glob("openrlhf-*.data/purelib"))
    mods = stubs.load_openrlhf(pkg)
    vectors = []
    for case in pin.CASES:
        for opts in pin.openrlhf_loss_options():
            lp = case.lp.clone().requires_grad_(True)
            loss, metrics = stubs.run_openrlhf_loss(mods, case, lp, opts)
            vectors.append(
                {
                    "case": case.name,
                    "options": opts,
                    "loss": rnd(loss.item()),
                    "grad": rows(grad_of(loss, lp)),
                    "metrics": scalar_metrics(metrics),
                }
            )
    maker = stubs.load_openrlhf_experience(pkg)
    for opts in pin.openrlhf_estimators():
        vectors.append(stubs.run_openrlhf_estimator(mods, maker, opts))
    header = {
        "framework": "openrlhf",
        "source": f"https://pypi.org/project/openrlhf/{version}/ (wheel {wheel.name})",
        "commit": f"pypi openrlhf=={version}",
        "mirror_commit": head_commit(MIRRORS / "OpenRLHF+OpenRLHF" / "repo"),
        "mirror_note": "the mirror's HEAD is 0.11.0 (is_correction_enable / is_correction_type); "
        "0.11.2, the release roll-viz follows, has is_correction_level / mode / gating",
        "code": [
            "openrlhf/models/loss.py::PolicyLoss",
            "openrlhf/models/utils.py::compute_approx_kl",
            "openrlhf/trainer/ray/ppo_actor.py::training_step (KL and entropy terms)",
            "openrlhf/trainer/ppo_utils/experience_maker.py::compute_advantages_and_returns",
        ],
    }
    write("openrlhf", header, vectors, pin.dump_inputs())


# ----------------------------------------------------------------------------------------- TRL


def run_trl(tmp: Path) -> None:
    """TRL: ``GRPOTrainer._compute_loss`` of the installed trl for every loss_type and option."""
    import trl
    from trl_live import trl_advantages, trl_loss

    vectors = []
    for case in pin.CASES[:1]:
        for opts in pin.trl_loss_options():
            lp = case.lp.clone().requires_grad_(True)
            loss, metrics = trl_loss(case, lp, opts)
            vectors.append(
                {
                    "case": case.name,
                    "options": opts,
                    "loss": rnd(loss.item()),
                    "grad": rows(grad_of(loss, lp)),
                    "metrics": scalar_metrics(metrics),
                }
            )
        for opts in pin.trl_two_step_options():
            lp = case.lp.clone().requires_grad_(True)
            loss, metrics = trl_loss(case, lp, opts, steps=2)
            vectors.append(
                {
                    "case": case.name,
                    "options": opts,
                    "steps": 2,
                    "loss": rnd(loss.item()),
                    "grad": rows(grad_of(loss, lp)),
                    "metrics": scalar_metrics(metrics),
                }
            )
    for rewards in (pin.TRL_REWARDS, pin.TRL_REWARDS_FLAT):
        per_func = torch.tensor(rewards, dtype=F64)
        for opts in pin.trl_estimators():
            vectors.append(
                {
                    "case": "estimator",
                    "options": opts,
                    "rewards_per_func": rewards,
                    "num_generations": 3,
                    "advantages": [rnd(x) for x in trl_advantages(per_func, 3, opts).tolist()],
                }
            )
    header = {
        "framework": "trl",
        "source": "https://github.com/huggingface/trl",
        "commit": f"pypi trl=={trl.__version__}",
        "code": [
            "trl/trainer/grpo_trainer.py::GRPOTrainer._compute_loss",
            "trl/trainer/grpo_trainer.py::GRPOTrainer._generate_and_score_completions (advantages)",
        ],
    }
    write("trl", header, vectors, pin.dump_inputs())


RUNNERS = {"verl": run_verl, "roll": run_roll, "openrlhf": run_openrlhf, "trl": run_trl}


def main(names: list[str]) -> None:
    """Regenerate the named frameworks' vectors (all when none named)."""
    torch.set_default_dtype(F64)
    for name in names or list(RUNNERS):
        with tempfile.TemporaryDirectory() as tmp:
            stubs.reset()
            RUNNERS[name](Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
