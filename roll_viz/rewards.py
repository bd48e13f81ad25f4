"""Toy reward functions a student can predict by hand, and weighted sums of them.

Every reward has ONE signature, ``fn(prompt: str, response: str, **params) -> float``, and every
parameter has a default and a help text in ``REWARD_PARAMS``. ``REWARD_FNS`` is the literal
registry the UI lists. No user-supplied code is ever executed: keyword patterns are compiled with
``re`` under a length cap and a guard against nested quantifiers, and the arithmetic reward uses a
tiny recursive-descent parser (never ``eval``).

The rewards:

- ``target_length``: 1 when the response has exactly ``target`` words, falling linearly to 0 at
  ``target +- tolerance`` words. Example: target 20, tolerance 20, 30 words -> 0.5.
- ``keyword``: 1 if the keyword (or regex) occurs in the response, else 0. Case-insensitive by
  default.
- ``arithmetic``: for prompts like "What is 17 + 25?": 1 if the LAST number in the response equals
  the answer (exactly, as a fraction), else 0. 0 when the prompt holds no arithmetic expression.
- ``one_sentence``: 1 if the response is exactly one sentence (one run of ``.``/``!``/``?``, at
  the end), else 0.
- ``positive_words``: ``per_word`` for each occurrence of a word from a small lexicon
  (``POSITIVE_WORDS``), capped at ``cap``. Example: "a great, happy day" -> 2 * 0.25 = 0.5.

Two more, for training runs only (``EXTRA_REWARDS``; the UI's selector lists ``REWARD_FNS``):
``letter_share`` (share of ASCII letters) and ``char_length`` (``per_char`` x characters).

Simplifications: real RLHF uses a learned reward model or a verifier with far more parsing. These
toy rewards only exist to make the rest of the pipeline predictable. Optional Gaussian noise (a
seeded generator, so it is reproducible) imitates a noisy reward model.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import re2
import torch
from torch import Tensor

from roll_viz.core.records import Rollout

RewardFn = Callable[..., float]  # (prompt, response, **params) -> float

MAX_PATTERN_CHARS = 100
MAX_TEXT_CHARS = 5000  # rewards read at most this much of a response
MAX_NOISE_SIGMA = 10.0
MAX_PATTERN_MEMORY = 1 << 20  # bytes of RE2 program memory per pattern
MAX_PARAM_ABS = 1e6  # numeric reward parameters must lie in [-1e6, 1e6]

# fmt: off
POSITIVE_WORDS = frozenset((
    "amazing", "awesome", "beautiful", "best", "bright", "brilliant", "calm", "charming",
    "cheerful", "cozy", "delight", "delightful", "enjoy", "enjoyed", "excellent", "exceptional",
    "excited", "exciting", "fantastic", "fun", "glad", "good", "great", "happy", "hope", "joy",
    "joyful", "kind", "laughter", "love", "lovely", "nice", "peaceful", "perfect", "pleasant",
    "positive", "relaxing", "smile", "stunning", "sunny", "superb", "sweet", "thank", "thanks",
    "thrilled", "vibrant", "warm", "wonderful",
))
# fmt: on

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_WORD = re.compile(r"[A-Za-z']+")


def _words(text: str) -> list[str]:
    """Whitespace-separated words (punctuation attached to a word does not split it)."""
    return text[:MAX_TEXT_CHARS].split()


def target_length(prompt: str, response: str, *, target: int = 20, tolerance: int = 20) -> float:
    """1 at exactly ``target`` words, linearly down to 0 at ``target +- tolerance`` words.

    Args:
        prompt: unused.
        response: the response text; words are whitespace-separated.
        target: the ideal number of words.
        tolerance: how many words away from target the reward reaches 0 (> 0).

    Returns:
        max(0, 1 - |words - target| / tolerance).
    """
    if tolerance <= 0:
        raise ValueError("tolerance must be positive")
    return max(0.0, 1.0 - abs(len(_words(response)) - target) / tolerance)


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str, regex: bool = False, case_sensitive: bool = False) -> Any:
    """Compile a user keyword with a linear-time engine (RE2): no input can stall the server.

    Python's ``re`` backtracks, so a pattern such as ``.*.*.*.*.*#`` or ``(a+)+$`` can take
    exponential time on a response and block the shared process. RE2 matches in time linear in
    the text for every pattern it accepts; it rejects back-references and look-arounds, which
    need backtracking. Patterns are also capped at ``MAX_PATTERN_CHARS`` characters, texts at
    ``MAX_TEXT_CHARS`` and RE2's compiled program at ``MAX_PATTERN_MEMORY`` bytes.

    Args:
        pattern: a keyword, or a regular expression when ``regex`` is True.
        regex: treat ``pattern`` as a regular expression (otherwise it is matched literally).
        case_sensitive: match case exactly.

    Returns:
        The compiled pattern (``.search(text)`` like ``re``).

    Raises:
        ValueError: empty or over-long pattern, or a regular expression RE2 cannot compile
            (syntax error, back-reference, look-around), with the reason.
    """
    if not pattern:
        raise ValueError("the keyword pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the keyword pattern is longer than {MAX_PATTERN_CHARS} characters")
    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.literal = not regex
    options.log_errors = False
    options.max_mem = MAX_PATTERN_MEMORY
    try:
        return re2.compile(pattern, options)
    except re2.error as err:
        reason = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else err
        raise ValueError(f"invalid regular expression {pattern!r}: {reason}") from None


def keyword(
    prompt: str,
    response: str,
    *,
    pattern: str = "pirate",
    regex: bool = False,
    case_sensitive: bool = False,
) -> float:
    """1 if ``pattern`` occurs anywhere in the response, else 0.

    Args:
        prompt: unused.
        response: the response text.
        pattern: keyword (literal) or regular expression (``regex=True``).
        regex: interpret the pattern as a regular expression.
        case_sensitive: match case exactly (default: ignore case).

    Returns:
        1.0 or 0.0.
    """
    found = compile_pattern(pattern, regex, case_sensitive).search(response[:MAX_TEXT_CHARS])
    return 1.0 if found else 0.0


class _ExprParser:
    """Recursive descent over tokens with exact Fraction arithmetic.

    Grammar: expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := '-' factor | number | '(' expr ')'.
    """

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in {"+", "-"}:
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in {"*", "/"}:
            op, rhs = self.take(), self.factor()
            if op == "/" and rhs == 0:
                raise ZeroDivisionError
            value = value * rhs if op == "*" else value / rhs
        return value

    def factor(self) -> Fraction:
        token = self.peek()
        if token == "-":
            self.take()
            return -self.factor()
        if token == "(":
            self.take()
            value = self.expr()
            if self.peek() != ")":
                raise ValueError("missing )")
            self.take()
            return value
        if token is None or not token[0].isdigit():
            raise ValueError("expected a number")
        return Fraction(self.take())


_EXPR_SPAN = re.compile(r"[\d(][\d\s.+\-*/x×÷()]*[\d)]")
_EXPR_TOKEN = re.compile(r"\d+(?:\.\d+)?|[+\-*/()]")


def arithmetic_answer(prompt: str) -> Fraction | None:
    """The value of the first arithmetic expression in the prompt, or None.

    Understands integers and decimals, + - * / (also x, × and ÷), parentheses and precedence.
    "What is 12 + 30 - 5?" -> 37. "Compute (2 + 3) x 4." -> 20. Never calls eval.
    """
    for span in _EXPR_SPAN.findall(prompt[:MAX_TEXT_CHARS]):
        text = span.replace("×", "*").replace("x", "*").replace("÷", "/")
        tokens = _EXPR_TOKEN.findall(text)
        if "".join(tokens) != re.sub(r"\s+", "", text) or not any(t in "+-*/" for t in tokens):
            continue  # stray characters, or a lone number: not an expression
        parser = _ExprParser(tokens)
        try:
            value = parser.expr()
        except (ValueError, ZeroDivisionError):
            continue
        if parser.peek() is None:
            return value
    return None


def last_number(text: str) -> Fraction | None:
    """The last number written in the text ("1,234", "-5", "2.50", "3/4"), or None."""
    found = _NUMBER.findall(text[:MAX_TEXT_CHARS])
    if not found:
        return None
    return Fraction(found[-1].replace(",", ""))


def arithmetic(prompt: str, response: str) -> float:
    """1 if the last number in the response equals the prompt's arithmetic answer, else 0.

    Args:
        prompt: e.g. "What is 17 + 25?" (first arithmetic expression in it is evaluated).
        response: e.g. "17 + 25 = 42." (the LAST number counts: 42).

    Returns:
        1.0 or 0.0 (also 0.0 when the prompt holds no expression or the response no number).
    """
    answer = arithmetic_answer(prompt)
    given = last_number(response)
    return 1.0 if answer is not None and given is not None and given == answer else 0.0


def one_sentence(prompt: str, response: str) -> float:
    """1 if the response is exactly one sentence: it ends with . ! or ? and has no other end inside.

    An end inside is a run of . ! ? followed by whitespace ("Hi. Bye." is two sentences; "3.5"
    and "e.g.x" do not end a sentence).

    Args:
        prompt: unused.
        response: the response text.

    Returns:
        1.0 or 0.0.
    """
    text = response[:MAX_TEXT_CHARS].strip()
    if not text or text[-1] not in ".!?":
        return 0.0
    return 1.0 if len(re.findall(r"[.!?]+(?=\s|$)", text)) == 1 else 0.0


def positive_words(
    prompt: str, response: str, *, per_word: float = 0.25, cap: float = 1.0
) -> float:
    """``per_word`` for each response word in ``POSITIVE_WORDS`` (any case), capped at ``cap``.

    Args:
        prompt: unused.
        response: the response text.
        per_word: reward per positive word.
        cap: the most the reward can be.

    Returns:
        min(cap, per_word * count).
    """
    count = sum(1 for w in _WORD.findall(response[:MAX_TEXT_CHARS]) if w.lower() in POSITIVE_WORDS)
    return min(cap, per_word * count)


REWARD_FNS: dict[str, RewardFn] = {
    "target_length": target_length,
    "keyword": keyword,
    "arithmetic": arithmetic,
    "one_sentence": one_sentence,
    "positive_words": positive_words,
}

REWARD_PARAMS: dict[str, dict[str, tuple[Any, str]]] = {
    "target_length": {
        "target": (20, "ideal number of words: reward 1 there"),
        "tolerance": (20, "words away from the target where the reward reaches 0"),
    },
    "keyword": {
        "pattern": ("pirate", "keyword (or regular expression) to look for"),
        "regex": (False, "treat the pattern as a regular expression"),
        "case_sensitive": (False, "match upper/lower case exactly"),
    },
    "arithmetic": {},
    "one_sentence": {},
    "positive_words": {
        "per_word": (0.25, "reward per positive word"),
        "cap": (1.0, "maximum reward"),
    },
}

REWARD_HELP: dict[str, str] = {
    "target_length": "1 at the target word count, falling linearly to 0 at target +- tolerance.",
    "keyword": "1 if the keyword occurs in the response, else 0.",
    "arithmetic": "1 if the last number in the response equals the prompt's arithmetic answer.",
    "one_sentence": "1 if the response is exactly one sentence ending in . ! or ?",
    "positive_words": "per_word for each positive word (great, happy, love, ...), capped.",
}


# ---------------------------------------------------------------------------------------------
# Training-only rewards: the same signature, listed by the training CLI and ``lm.runfile``'s
# ``RewardChoice``, not by the UI's reward selector (``REWARD_FNS``).


def letter_share(prompt: str, response: str) -> float:
    """Share of the response's characters that are ASCII letters (0 for an empty response).

    A dense reward even a random byte-level model can climb (the tiny test model), and a gameable
    one on a real model (it ignores meaning entirely).
    """
    text = response[:5000]
    if not text:
        return 0.0
    return sum(1 for c in text if c.isascii() and c.isalpha()) / len(text)


def char_length(prompt: str, response: str, *, per_char: float = 0.01) -> float:
    """``per_char`` times the number of characters: raw length, the classic gameable reward."""
    return per_char * len(response[:5000])


EXTRA_REWARDS: dict[str, RewardFn] = {
    "letter_share": letter_share,
    "char_length": char_length,
}
EXTRA_PARAMS: dict[str, dict[str, tuple[Any, str]]] = {
    "letter_share": {},
    "char_length": {"per_char": (0.01, "reward per character")},
}
EXTRA_HELP: dict[str, str] = {
    "letter_share": "share of the response's characters that are ASCII letters",
    "char_length": "per_char x number of characters (raw length)",
}


Params = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class RewardSpec:
    """A weighted sum of toy rewards plus optional Gaussian noise. Frozen and hashable.

    Attributes:
        terms: ((name, weight, params), ...); params are (key, value) pairs sorted by key
            (a dict is accepted and converted). Missing params take REWARD_PARAMS defaults.
        noise_sigma: std of Gaussian noise added to every score (0 = none).
        noise_seed: seed of the noise generator (same seed, same noise).
    """

    terms: tuple[tuple[str, float, Params], ...] = (("target_length", 1.0, ()),)
    noise_sigma: float = 0.0
    noise_seed: int = 0

    def __post_init__(self) -> None:
        if not self.terms:
            raise ValueError("a RewardSpec needs at least one term")
        terms = []
        for term in self.terms:
            if len(term) != 3:
                raise ValueError(f"a reward term is (name, weight, params), got {term!r}")
            name, weight, params = term
            if name not in REWARD_FNS:
                raise ValueError(f"unknown reward {name!r}; choose from {sorted(REWARD_FNS)}")
            if not math.isfinite(float(weight)):
                raise ValueError(f"weight of {name} must be finite")
            pairs = tuple(sorted(dict(params).items()))
            unknown = {k for k, _ in pairs} - set(REWARD_PARAMS[name])
            if unknown:
                raise ValueError(f"reward {name} has no parameter(s) {sorted(unknown)}")
            problems = param_problems(name, pairs)  # fail early: never inside a reward fn
            if problems:
                raise ValueError(f"reward {name}: " + "; ".join(problems.values()))
            terms.append((name, float(weight), pairs))
        object.__setattr__(self, "terms", tuple(terms))
        if not (math.isfinite(self.noise_sigma) and 0.0 <= self.noise_sigma <= MAX_NOISE_SIGMA):
            raise ValueError(f"noise_sigma must be in [0, {MAX_NOISE_SIGMA}]")

    @classmethod
    def single(cls, name: str, **params: Any) -> RewardSpec:
        """One reward with weight 1 and the given params."""
        return cls(terms=((name, 1.0, tuple(sorted(params.items()))),))


#: Bounds of numeric reward parameters: (low, high, low_inclusive). Stated in the UI.
PARAM_BOUNDS: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("target_length", "target"): (0.0, 1000.0, True),
    ("target_length", "tolerance"): (0.0, 1000.0, False),
    ("positive_words", "per_word"): (-MAX_PARAM_ABS, MAX_PARAM_ABS, True),
    ("positive_words", "cap"): (0.0, MAX_PARAM_ABS, True),
}


def param_problems(name: str, params: Params | Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with a reward's parameters, one short message per bad parameter.

    The sidebar shows each message next to its field and keeps the last valid value, so a bad
    value never reaches a reward function (and never a traceback on a page).

    Args:
        name: a key of REWARD_FNS.
        params: (key, value) pairs or a dict; missing keys take their defaults.

    Returns:
        Parameter name -> message; empty when every parameter is valid.
    """
    problems: dict[str, str] = {}
    merged = resolved_params(name, params)
    for param, value in merged.items():
        bounds = PARAM_BOUNDS.get((name, param))
        if bounds is None:
            continue
        low, high, low_inclusive = bounds
        try:
            number = float(value)
        except (TypeError, ValueError):
            problems[param] = f"{param} must be a number, got {value!r}"
            continue
        above_low = number >= low if low_inclusive else number > low
        if not math.isfinite(number) or not above_low or number > high:
            side = "[" if low_inclusive else "("
            problems[param] = f"{param} must be in {side}{low:g}, {high:g}], got {value!r}"
    if name == "keyword":
        try:
            compile_pattern(
                str(merged["pattern"]), bool(merged["regex"]), bool(merged["case_sensitive"])
            )
        except ValueError as err:
            problems["pattern"] = str(err)
    return problems


def resolved_params(name: str, params: Params | Mapping[str, Any]) -> dict[str, Any]:
    """The reward's defaults from REWARD_PARAMS updated with ``params``."""
    merged = {key: default for key, (default, _) in REWARD_PARAMS[name].items()}
    merged.update(dict(params))
    return merged


def score_responses(
    prompts: tuple[str, ...] | list[str], responses: tuple[str, ...] | list[str], spec: RewardSpec
) -> Tensor:
    """Score each (prompt, response) pair with the spec's weighted sum, plus seeded noise.

    Args:
        prompts: (B,) the prompt each response answers (one per response).
        responses: (B,) response texts.
        spec: which rewards, weights, params and noise.

    Returns:
        (B,) float64 scores: sum_i weight_i * fn_i(prompt, response, **params_i) + sigma * noise,
        with noise ~ N(0, 1) from a generator seeded with ``spec.noise_seed``.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
    totals = torch.zeros(len(responses), dtype=torch.float64)
    for name, weight, params in spec.terms:
        fn, kwargs = REWARD_FNS[name], resolved_params(name, params)
        values = [fn(p, r, **kwargs) for p, r in zip(prompts, responses, strict=True)]
        totals = totals + weight * torch.tensor(values, dtype=torch.float64)
    if spec.noise_sigma > 0:
        generator = torch.Generator().manual_seed(spec.noise_seed)
        totals = totals + spec.noise_sigma * torch.randn(
            len(responses), generator=generator, dtype=torch.float64
        )
    return totals


def score_rollout(rollout: Rollout, spec: RewardSpec) -> Tensor:
    """(B,) float64 scores of a rollout's responses (each against its own prompt)."""
    prompts = [rollout.prompts[int(g)] for g in rollout.group_ids]
    return score_responses(prompts, rollout.responses, spec)


def score_greedy(rollout: Rollout, spec: RewardSpec) -> Tensor:
    """(B,) float64: each sample gets the score of its prompt's greedy response (ReMax baseline).

    The greedy responses are scored once per prompt; noise (if any) uses ``noise_seed + 1`` so it
    is independent of the samples' noise.

    Raises:
        ValueError: the rollout has no greedy responses.
    """
    if len(rollout.greedy_responses) != len(rollout.prompts):
        raise ValueError("this rollout has no greedy responses (sample with greedy=True)")
    greedy_spec = RewardSpec(spec.terms, spec.noise_sigma, spec.noise_seed + 1)
    per_prompt = score_responses(rollout.prompts, rollout.greedy_responses, greedy_spec)  # (P,)
    return per_prompt[rollout.group_ids]
