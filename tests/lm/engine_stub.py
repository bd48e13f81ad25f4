"""A tiny OpenAI-compatible server over ``LocalEngine``, for the HTTP engine's unit tests.

It answers the subset vLLM serves (``/v1/models``, ``/v1/completions`` for sampling and for
``prompt_logprobs`` scoring, adapter load/unload) in vLLM's shapes, from the in-process tiny
model, so the HTTP client, the Rollout assembly and the conformance check run without vLLM.
``mode`` switches it to misbehave: "garbage" (not JSON), "shape" (JSON of the wrong shape),
"error" (HTTP 500), "hang" (answers after ``hang_s``).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import safetensors.torch
import torch
from peft import LoraConfig

from roll_viz.lm.engine import LocalEngine
from roll_viz.lm.lora import LoraPolicy, adapter_layers

SERVED = "smollm2"


def load_folder(bundle, path: str) -> LoraPolicy:
    """A LoraPolicy of ``bundle`` with the weights of a saved peft adapter folder."""
    config = LoraConfig.from_pretrained(path)
    tensors = safetensors.torch.load_file(f"{path}/adapter_model.safetensors")
    policy = LoraPolicy(bundle, rank=config.r, alpha=config.lora_alpha)
    with bundle.lock, torch.no_grad():
        for name, layer in adapter_layers(bundle):
            if policy.name in layer.lora_A:
                layer.lora_A[policy.name].weight.copy_(
                    tensors[f"base_model.model.{name}.lora_A.weight"]
                )
                layer.lora_B[policy.name].weight.copy_(
                    tensors[f"base_model.model.{name}.lora_B.weight"]
                )
    return policy


class Stub:
    """A running stub server (``url``); ``close()`` stops it."""

    def __init__(self, local: LocalEngine, mode: str = "ok", hang_s: float = 5.0) -> None:
        self.local = local
        self.mode = mode
        self.hang_s = hang_s
        self.delay_s = 0.0  # added to every completion (to make concurrent requests overlap)
        self.requests: list[dict] = []
        self.loaded: dict[str, str] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: object, kind: str = "application/json") -> None:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _misbehave(self) -> bool:
                if stub.mode == "garbage":
                    self._send(200, b"<html>not an engine</html>", "application/json")
                elif stub.mode == "shape":
                    self._send(200, {"data": "nope", "choices": [{"index": "x"}]})
                elif stub.mode == "error":
                    self._send(500, {"error": {"message": "EngineDeadError"}})
                elif stub.mode == "hang":
                    time.sleep(stub.hang_s)
                    self._send(200, {})
                else:
                    return False
                return True

            def do_GET(self) -> None:
                if self._misbehave():
                    return
                if self.path != "/v1/models":
                    self._send(404, {"error": {"message": "not found"}})
                    return
                data = [{"id": SERVED}] + [{"id": n, "parent": SERVED} for n in stub.loaded]
                self._send(200, {"data": data})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                stub.requests.append({"path": self.path, **body})
                if self._misbehave():
                    return
                if self.path == "/v1/load_lora_adapter":
                    stub.loaded[body["lora_name"]] = body["lora_path"]
                    stub.local.adapters[body["lora_name"]] = load_folder(
                        stub.local.bundle, body["lora_path"]
                    )
                    self._send(200, b"Success", "text/plain")
                elif self.path == "/v1/unload_lora_adapter":
                    if stub.loaded.pop(body["lora_name"], None) is None:
                        self._send(404, {"error": {"message": "not loaded"}})
                    else:
                        stub.local.adapters.pop(body["lora_name"]).close()
                        self._send(200, b"Success", "text/plain")
                elif self.path == "/v1/completions":
                    self._send(200, stub.completions(body))
                else:
                    self._send(404, {"error": {"message": "not found"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def completions(self, body: dict) -> dict:
        """vLLM's answer shapes, computed by the local engine."""
        time.sleep(self.delay_s)
        adapter = None if body["model"] == SERVED else body["model"]
        if "prompt_logprobs" in body:
            k = max(1, int(body["prompt_logprobs"]))
            seqs = body["prompt"]
            scored = self.local.score([s[:1] for s in seqs], [s[1:] for s in seqs], adapter, k)
            choices = []
            for i, seq in enumerate(seqs):
                entries: list = [None]
                for j, token in enumerate(seq[1:]):
                    entry = {
                        str(t): {"logprob": lp, "rank": r + 1}
                        for r, (t, lp) in enumerate(
                            zip(scored.topk_ids[i][j], scored.topk_logprobs[i][j], strict=True)
                        )
                    }
                    entry[str(token)] = {"logprob": scored.logprobs[i][j], "rank": 0}
                    entries.append(entry)
                choices.append({"index": i, "text": "", "prompt_logprobs": entries,
                                "token_ids": [0], "finish_reason": "length"})  # fmt: skip
            return {"choices": choices}
        n = int(body.get("n", 1))
        k = max(1, int(body.get("logprobs", 1)))
        drawn = self.local.sample(
            body["prompt"], n, body["max_tokens"], body["temperature"], body["seed"], adapter, k,
            body.get("top_p", 1.0),
        )  # fmt: skip
        choices = []
        for i, ids in enumerate(drawn.token_ids):
            top = [
                {f"token_id:{t}": lp for t, lp in zip(tid, tlp, strict=True)}
                for tid, tlp in zip(drawn.topk_ids[i], drawn.topk_logprobs[i], strict=True)
            ]
            for j, token in enumerate(ids):
                top[j][f"token_id:{token}"] = drawn.logprobs[i][j]
            choices.append({
                "index": i, "text": "", "token_ids": list(ids),
                "finish_reason": "stop" if drawn.finish_reasons[i] == "eos" else "length",
                "logprobs": {"token_logprobs": list(drawn.logprobs[i]), "top_logprobs": top,
                             "tokens": [f"token_id:{t}" for t in ids]},
            })  # fmt: skip
        return {"choices": choices}

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
