"""``python -m roll_viz compute CASES.json|-``: the reward -> advantage calculator as a CLI.

Input: one object ``{"batch": {...}, "config": {...}}`` or a list of them. ``batch`` has
``scores`` (B,), ``response_mask`` (B, T) of 0/1, ``group`` (B,) prompt ids (strings or ints),
and optionally ``logprobs``, ``ref_logprobs``, ``values`` (B, T), ``baseline_scores`` (B,) and
``reward_components`` ({name: (B,)}: each reward function's score, for verl gdpo and TRL
normalize_then_sum) and ``sum_pi_squared`` (B, T) (the policy's sum of squared next-token
probabilities, for verl optimal_token_baseline).
``config`` has ``framework`` (roll | verl | openrlhf | trl, default roll) plus that framework's
own keys; missing keys take the framework's shipped defaults.

Output (stdout): one JSON object per case (a list for a list), in input order, with ``rewards``
(B,), ``kl``, ``token_rewards``, ``advantages``, ``returns`` (B, T) (masked positions 0) and the
rest of the Trace (baseline, scale, clip_frac, kl_coef, next_kl_coef, kl_in_reward, kl_loss,
running, notes, resolved config; ``resample``, the rows verl PF-PPO drew, when ``use_pf_ppo`` is
on with gae: the loss then trains on them as verl's trainer does).

Policy-update loss: with ``old_logprobs`` (B, T) in the batch, ``logprobs`` is the CURRENT
policy (required then) and ``old_logprobs`` the rollout policy: the pipeline's in-reward KL uses
old_logprobs vs ref_logprobs (as the frameworks do), and the loss (``policy_loss``) uses the
pipeline's advantages, logprobs vs old_logprobs for the ratio and logprobs vs ref_logprobs for a
KL loss; ref_logprobs is optional then (needed only when the config turns a KL loss on). An
optional ``entropy`` (B, T) feeds the entropy bonus, an optional ``rollout_logprobs`` (B, T)
(the sampler's mu) a train/rollout correction (OpenRLHF ``is_correction_*``). ``config`` also
takes each dialect's loss keys (``LOSS_DEFAULTS``). The output then also has per-token
``ratio``, ``pg_loss``, ``grad_coef`` (d loss / d logp_t), ``loss_weight`` and the 0/1 masks
``clipped_high``,
``clipped_low``, ``dual_clipped``, plus ``loss`` (total, policy, kl, entropy, value,
coefficients), ``metrics`` (the framework's own names; NaN as null), ``loss_notes`` and
``metric_notes`` (beside a logged number that is not the meaningful one: the masked value). The
critic loss needs new value predictions, which the calculator does not take (value is null).

Bad input exits with status 2 and one line on stderr naming the field; every case is computed
before anything is printed, so stdout is either complete or empty. Size caps (stated in the
message when hit): ``MAX_INPUT_BYTES`` of input, ``MAX_ROWS`` rows and ``MAX_POSITIONS`` token
positions over all cases, JSON nested at most ``MAX_DEPTH`` deep. A number a float cannot hold
(an integer of 400 or of 5,000 digits, ``1e400``) is a bad field named like ``batch.scores[0]``,
not a crash: the input is read by the run readers' ``json_numbers.loads``.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import torch

from roll_viz.core.pipeline import FRAMEWORKS, LossResult, policy_loss, run
from roll_viz.core.records import Batch, to_plain, trace_to_dict
from roll_viz.data.runs.json_numbers import first_unreadable, loads

BATCH_KEYS = (
    "scores",
    "response_mask",
    "group",
    "logprobs",
    "ref_logprobs",
    "values",
    "baseline_scores",
    "old_logprobs",
    "entropy",
    "reward_components",
    "rollout_logprobs",
    "sum_pi_squared",
)
USAGE = "usage: python -m roll_viz compute CASES.json|-"
MAX_INPUT_BYTES = 32 * 2**20  # the whole input (file or stdin)
MAX_ROWS = 100_000  # responses (batch.scores entries) over all cases
MAX_POSITIONS = 4_194_304  # token positions (rows x response_mask width) over all cases
MAX_DEPTH = 64  # nesting of the input JSON (a case needs 4)


class InputError(ValueError):
    """Bad calculator input; the message names the field."""


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _finite(x: int | float, where: str) -> bool:
    """``math.isfinite(x)``; an integer too large for a float is an InputError naming ``where``."""
    try:
        return math.isfinite(x)
    except OverflowError:
        raise InputError(f"{where}: integer too large for a float") from None


def _vector(obj: dict, key: str, length: int | None) -> list[float]:
    value = obj[key]
    if not isinstance(value, list):
        raise InputError(f"batch.{key}: expected a list of numbers")
    if length is not None and len(value) != length:
        raise InputError(f"batch.{key}: has {len(value)} entries, expected {length}")
    for i, x in enumerate(value):
        if not _is_number(x):
            raise InputError(f"batch.{key}[{i}]: expected a number, got {x!r:.40}")
        if not _finite(x, f"batch.{key}[{i}]"):
            raise InputError(f"batch.{key}[{i}]: non-finite number {x!r}")
    return [float(x) for x in value]


def _matrix(obj: dict, key: str, rows: int, cols: int | None) -> list[list[float]]:
    value = obj[key]
    if not isinstance(value, list) or len(value) != rows:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise InputError(f"batch.{key}: expected {rows} rows (one per score), got {got}")
    out = []
    for b, row in enumerate(value):
        if not isinstance(row, list):
            raise InputError(f"batch.{key}[{b}]: expected a list of numbers")
        if cols is None:
            cols = len(row)
        if len(row) != cols:
            raise InputError(f"batch.{key}[{b}]: has {len(row)} entries, expected {cols}")
        for t, x in enumerate(row):
            if not _is_number(x):
                raise InputError(f"batch.{key}[{b}][{t}]: expected a number, got {x!r:.40}")
            if not _finite(x, f"batch.{key}[{b}][{t}]"):
                raise InputError(f"batch.{key}[{b}][{t}]: non-finite number {x!r}")
        out.append([float(x) for x in row])
    return out


def parse_case(obj: Any) -> tuple[Batch, str, dict[str, Any]]:
    """Validate one JSON case and build the float64 Batch.

    Args:
        obj: ``{"batch": {...}, "config": {...}}`` as parsed from JSON.

    Returns:
        ``(batch, framework, config)`` where config excludes the "framework" key.

    Raises:
        InputError: (a ValueError) naming the offending field.
    """
    batch, framework, config, _loss = parse_loss_case(obj)
    return batch, framework, config


def _optional_inputs(raw: dict[str, Any], B: int, T: int) -> dict[str, Any]:
    """The optional tensors: (B, T) log-probs, values, entropy; (B,) baselines; components."""
    optional: dict[str, Any] = {}
    for key in (
        "logprobs",
        "ref_logprobs",
        "values",
        "old_logprobs",
        "entropy",
        "rollout_logprobs",
        "sum_pi_squared",
    ):
        if key in raw:
            optional[key] = torch.tensor(_matrix(raw, key, B, T), dtype=torch.float64)
    if "baseline_scores" in raw:
        optional["baseline_scores"] = torch.tensor(
            _vector(raw, "baseline_scores", B), dtype=torch.float64
        )
    if "reward_components" in raw:
        comps = raw["reward_components"]
        if not isinstance(comps, dict) or not comps:
            raise InputError("batch.reward_components: expected {name: [B numbers], ...}")
        optional["reward_components"] = {
            str(name): torch.tensor(_vector(comps, name, B), dtype=torch.float64) for name in comps
        }
    return optional


def parse_loss_case(obj: Any) -> tuple[Batch, str, dict[str, Any], dict[str, Any] | None]:
    """``parse_case`` plus the policy-update inputs.

    Args:
        obj: ``{"batch": {...}, "config": {...}}`` as parsed from JSON.

    Returns:
        ``(batch, framework, config, loss)``: ``loss`` is None without ``old_logprobs``, else a
        dict with (B, T) float64 ``logprobs`` (current policy), ``old_logprobs``,
        ``ref_logprobs`` (or None) and ``entropy`` (or None); the Batch then carries
        old_logprobs as its (rollout) logprobs.

    Raises:
        InputError: (a ValueError) naming the offending field.
    """
    if not isinstance(obj, dict):
        raise InputError("case: expected an object with 'batch' and 'config'")
    unreadable = first_unreadable(obj)
    if unreadable is not None:
        raise InputError(f"{unreadable[0]}: {unreadable[1].why}")
    for key in obj:
        if key not in ("batch", "config"):
            raise InputError(f"case: unknown key {key!r} (expected 'batch' and 'config')")
    if "batch" not in obj or not isinstance(obj["batch"], dict):
        raise InputError("batch: missing or not an object")
    config = obj.get("config", {})
    if not isinstance(config, dict):
        raise InputError("config: expected an object")
    config = dict(config)
    framework = config.pop("framework", "roll")
    if framework not in FRAMEWORKS:
        raise InputError(f"config.framework: {framework!r} is not one of {FRAMEWORKS}")
    raw = obj["batch"]
    for key in raw:
        if key not in BATCH_KEYS:
            raise InputError(f"batch.{key}: unknown key (known: {', '.join(BATCH_KEYS)})")
    for key in ("scores", "response_mask", "group"):
        if key not in raw:
            raise InputError(f"batch.{key}: missing")
    scores = _vector(raw, "scores", None)
    B = len(scores)
    if B == 0:
        raise InputError("batch.scores: empty")
    mask = _matrix(raw, "response_mask", B, None)
    T = len(mask[0])
    if T == 0:
        raise InputError("batch.response_mask: rows are empty (T must be >= 1)")
    for b, row in enumerate(mask):
        for t, x in enumerate(row):
            if x not in (0.0, 1.0):
                raise InputError(f"batch.response_mask[{b}][{t}]: must be 0 or 1, got {x:g}")
    groups = raw["group"]
    if not isinstance(groups, list) or len(groups) != B:
        raise InputError(f"batch.group: expected {B} prompt ids (one per score)")
    labels: dict[Any, int] = {}
    for i, g in enumerate(groups):
        if isinstance(g, bool) or not isinstance(g, str | int):
            raise InputError(f"batch.group[{i}]: expected a string or integer, got {g!r}")
        labels.setdefault(g, len(labels))
    optional = _optional_inputs(raw, B, T)
    loss = None
    for key in ("entropy", "rollout_logprobs"):
        if key in optional and "old_logprobs" not in optional:
            raise InputError(f"batch.{key}: only used by the loss, which needs old_logprobs")
    if "old_logprobs" in optional:
        if "logprobs" not in optional:
            raise InputError("batch.logprobs: needed with old_logprobs (the current policy)")
        loss = {
            "logprobs": optional.pop("logprobs"),
            "old_logprobs": optional.pop("old_logprobs"),
            "ref_logprobs": optional.get("ref_logprobs"),
            "entropy": optional.pop("entropy", None),
            "rollout_logprobs": optional.pop("rollout_logprobs", None),
        }
        if "ref_logprobs" in optional:  # the reward-side KL uses the rollout policy
            optional["logprobs"] = loss["old_logprobs"]
        else:
            optional.pop("ref_logprobs", None)
    if ("logprobs" in optional) != ("ref_logprobs" in optional):
        missing = "ref_logprobs" if "logprobs" in optional else "logprobs"
        raise InputError(f"batch.{missing}: logprobs and ref_logprobs must be given together")
    batch = Batch(
        scores=torch.tensor(scores, dtype=torch.float64),
        response_mask=torch.tensor(mask, dtype=torch.float64),
        group_ids=torch.tensor([labels[g] for g in groups], dtype=torch.long),
        group_labels=tuple(labels),
        **optional,
    )
    return batch, framework, config, loss


def loss_to_dict(result: LossResult) -> dict[str, Any]:
    """The JSON-ready loss fields of a LossResult (masks as 0/1, NaN metrics as null).

    Args:
        result: a ``policy_loss`` result.

    Returns:
        dict with ratio, pg_loss, grad_coef, loss_weight, clipped_high, clipped_low,
        dual_clipped (B, T), loss (total, the four terms, coefficients), metrics (the names
        the framework logs, its quirks included), loss_notes, metric_notes (name -> what the
        meaningful value is where the logged one is not), and the kind-specific per-token
        pieces (``valid``, ``phi``, ``kl_cov_chosen``, ``off_policy_kept``, ``entropy_kept``).
    """
    tok = result.per_token
    out: dict[str, Any] = {
        key: to_plain(tok[key]) for key in ("ratio", "pg_loss", "grad_coef", "loss_weight")
    }
    for key in ("clipped_high", "clipped_low", "dual_clipped"):
        out[key] = tok[key].to(torch.int64).tolist()
    terms = {k: None if v is None else v.detach().item() for k, v in result.terms.items()}
    out["loss"] = {
        "total": result.total.detach().item(),
        **terms,
        "coefficients": dict(result.coefficients),
    }
    out["metrics"] = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v
        for k, v in result.metrics.items()
    }
    out["loss_notes"] = list(result.notes)
    out["metric_notes"] = dict(result.metric_notes)
    base = {"ratio", "pg_loss", "grad_coef", "loss_weight", "clipped_high", "clipped_low"}
    base |= {"dual_clipped", "kl"}
    for key, value in tok.items():  # kind-specific pieces: dppo valid, vespo phi, kept masks
        if key not in base:
            is_mask = value.dtype == torch.bool
            out[key] = value.to(torch.int64).tolist() if is_mask else to_plain(value)
    return out


# which input field a pipeline ValueError is about, by the message's wording
_FIELD_HINTS = (
    ("config key", "config"),
    ("controller", "config"),
    ("per prompt", "batch.group"),
    ("critic values", "batch.values"),
    ("greedy baseline", "batch.baseline_scores"),
    ("valid tokens", "batch.response_mask"),
)


def _field_of(message: str) -> str:
    return next((field for hint, field in _FIELD_HINTS if hint in message), "batch")


def _loss_field_of(message: str) -> str:
    """Field of a ``policy_loss`` ValueError (its messages start with the argument's name)."""
    name = message.split(":", 1)[0].split("[", 1)[0]
    fields = ("logprobs", "old_logprobs", "ref_logprobs", "entropy", "response_mask")
    if name in (*fields, "rollout_logprobs", "scores"):
        return f"batch.{name}"
    return "config"


def _depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` nests at most ``limit`` lists/objects deep (iterative, no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def check_size(items: list) -> None:
    """Refuse inputs over the caps before any work (rows, token positions over all cases).

    Raises:
        InputError: naming the case and field that passes the cap.
    """
    rows = positions = 0
    for i, case in enumerate(items):
        batch = case.get("batch") if isinstance(case, dict) else None
        if not isinstance(batch, dict):
            continue
        scores, mask = batch.get("scores"), batch.get("response_mask")
        n = len(scores) if isinstance(scores, list) else 0
        width = len(mask[0]) if isinstance(mask, list) and mask and isinstance(mask[0], list) else 0
        rows += n
        positions += n * width
        where = f"case {i}: " if len(items) > 1 else ""
        if rows > MAX_ROWS:
            raise InputError(f"{where}batch.scores: more than {MAX_ROWS} rows in the input (cap)")
        if positions > MAX_POSITIONS:
            raise InputError(
                f"{where}batch.response_mask: more than {MAX_POSITIONS} token positions in the "
                "input (cap)"
            )


def compute(cases: Any) -> Any:
    """Run every case (a dict or a list of dicts); returns the same shape of output dicts.

    Raises:
        InputError: naming the case (for lists) and the field.
    """
    single = isinstance(cases, dict)
    items = [cases] if single else cases
    if not isinstance(items, list) or not items:
        raise InputError("input: expected a case object or a non-empty list of them")
    check_size(items)
    out = []
    for i, case in enumerate(items):
        where = "" if single else f"case {i}: "
        try:
            batch, framework, config, loss = parse_loss_case(case)
            trace = run(batch, framework, config)
            result = trace_to_dict(trace)
        except (OverflowError, RecursionError) as err:
            field = "config" if "batch" not in str(err) else "batch"
            raise InputError(f"{where}{field}: a number out of range ({err})") from None
        except ValueError as err:
            if isinstance(err, InputError):
                raise InputError(f"{where}{err}") from None
            raise InputError(f"{where}{_field_of(str(err))}: {err}") from None
        if loss is not None:
            try:
                res = policy_loss(
                    framework,
                    config,
                    advantages=trace.advantages,
                    response_mask=batch.response_mask,
                    scores=batch.scores,
                    sample_mask=trace.sample_mask,  # ROLL's sample-level masks, when on
                    resample=trace.resample,  # verl PF-PPO's drawn rows, when on
                    **loss,
                )
            except ValueError as err:
                raise InputError(f"{where}{_loss_field_of(str(err))}: {err}") from None
            result.update(loss_to_dict(res))
        out.append(result)
    return out[0] if single else out


def main(argv: list[str]) -> int:
    """CLI entry: read cases from a file or stdin, print results; returns the exit code."""
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        stream = sys.stdout if argv and argv[0] in ("-h", "--help") else sys.stderr
        stream.write(USAGE + "\n")
        return 0 if stream is sys.stdout else 2
    try:
        if argv[0] == "-":
            text = sys.stdin.read(MAX_INPUT_BYTES + 1)
        else:
            with open(argv[0], encoding="utf-8") as handle:
                text = handle.read(MAX_INPUT_BYTES + 1)
        if len(text) > MAX_INPUT_BYTES:
            raise InputError(f"input: larger than {MAX_INPUT_BYTES // 2**20} MB (cap)")
        try:
            cases = loads(text)  # NaN/Infinity parse; the field checks reject them
        except RecursionError:
            raise InputError(f"input: JSON nested too deeply (at most {MAX_DEPTH})") from None
        if not _depth_ok(cases):
            raise InputError(f"input: JSON nested too deeply (at most {MAX_DEPTH})")
        result = compute(cases)
        output = json.dumps(result, allow_nan=False)
    except OSError as err:
        sys.stderr.write(f"error: input file: {err.strerror or err}: {argv[0]}\n")
        return 2
    except json.JSONDecodeError as err:
        sys.stderr.write(f"error: input: invalid JSON at line {err.lineno} column {err.colno}\n")
        return 2
    except UnicodeDecodeError as err:
        sys.stderr.write(f"error: input: not UTF-8 text (byte {err.start})\n")
        return 2
    except ValueError as err:
        sys.stderr.write(f"error: {' '.join(str(err).split())}\n")
        return 2
    sys.stdout.write(output + "\n")
    return 0
