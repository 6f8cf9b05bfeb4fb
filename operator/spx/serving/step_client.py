"""The one-server step A/B's HTTP client: OpenAI completions and vLLM's ``POST /collective_rpc``.

Token IDs are drawn from the server's own ``/tokenize`` of a fixed text (ordinary, non-special IDs of its
tokenizer); a prompt is a list of token IDs sent to ``/v1/completions`` with ``max_tokens`` 1 and temperature 0,
so the request is one prefill step (and its sampled token); ``usage.prompt_tokens`` is read back.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Mapping
from typing import Any

#: Text whose token IDs the prompts are drawn from (any ordinary text the tokenizer splits into many IDs).
ID_SOURCE_TEXT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May? Weng earns 12 dollars an hour for "
    "babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
)


class StepRequestError(RuntimeError):
    """One request of the step A/B failed (HTTP error, malformed answer)."""


class Client:
    """A keep-alive HTTP connection to one server's OpenAI API."""

    def __init__(self, host: str, port: int, model: str, timeout: float) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.model = model

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST JSON, return the JSON answer. Raises StepRequestError for a non-200 or malformed answer."""
        payload = json.dumps(body).encode()
        try:
            self.conn.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as err:
            self.conn.close()
            raise StepRequestError(f"POST {path}: {type(err).__name__}: {err}") from err
        if resp.status != 200:
            raise StepRequestError(f"POST {path}: HTTP {resp.status}: {data[:300].decode(errors='replace')}")
        try:
            out = json.loads(data)
        except ValueError as err:
            raise StepRequestError(f"POST {path}: not JSON: {data[:200]!r}") from err
        if not isinstance(out, dict):
            raise StepRequestError(f"POST {path}: expected a JSON object, got {data[:200]!r}")
        return out

    def token_ids(self) -> list[int]:
        """Distinct ordinary token IDs of :data:`ID_SOURCE_TEXT` (``/tokenize``, no special tokens)."""
        out = self.post("/tokenize", {"model": self.model, "prompt": ID_SOURCE_TEXT, "add_special_tokens": False})
        ids = sorted({int(i) for i in out.get("tokens", [])})
        if len(ids) < 8:
            raise StepRequestError(f"/tokenize gave {len(ids)} distinct token IDs for the source text; need ≥ 8")
        return ids

    def prefill(self, ids: list[int]) -> tuple[float, int | None]:
        """One ``max_tokens`` 1 completion of a token-ID prompt: (latency ms, usage.prompt_tokens)."""
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0}
        t0 = time.perf_counter()
        out = self.post("/v1/completions", body)
        ms = (time.perf_counter() - t0) * 1000.0
        usage = out.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return ms, tokens if isinstance(tokens, int) else None

    def rpc(self, method: str, *args: str, timeout: float | None = None) -> list[Any]:
        """``POST /collective_rpc`` (``VLLM_SERVER_DEV_MODE=1``): call ``method`` on every worker, one result each.

        Raises:
            StepRequestError: HTTP error (vLLM answers 500 with the worker's exception), or no ``results`` list.
        """
        body: dict[str, Any] = {"method": method, "args": list(args)}
        if timeout is not None:
            body["timeout"] = timeout
        out = self.post("/collective_rpc", body)
        results = out.get("results")
        if not isinstance(results, list):
            raise StepRequestError(f"/collective_rpc {method}: no results list in {str(out)[:200]}")
        return results

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()
