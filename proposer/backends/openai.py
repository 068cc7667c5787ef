"""The ``openai:URL`` backend: any OpenAI-compatible HTTP server (vLLM ``vllm serve``, SGLang, llama.cpp, OpenAI).

Standard library only (``urllib.request`` + ``json`` + a thread pool): no HTTP client dependency.

Decisions:

* ``base_url`` is the API root, e.g. ``http://127.0.0.1:8000/v1``; a URL with no path gets ``/v1`` appended and
  a URL with no scheme gets ``http://``. Loopback hosts never go through an ``http_proxy`` from the environment.
* Plain prompts go to ``POST /completions`` (``prompt``, ``n``, ``logprobs=1``); with ``chat=True`` to
  ``POST /chat/completions`` (the prompt is the one user message; ``logprobs=true``). One request per prompt
  asks for all ``n`` samples (split into requests of at most ``max_n_per_request``); a server that returns fewer
  choices than asked is asked again for the rest. Prompts run concurrently, at most ``concurrency`` requests in
  flight.
* Log-probs: completions API ``choices[i].logprobs.token_logprobs``, chat API
  ``choices[i].logprobs.content[j].logprob``. vLLM reports log-probs of the *unprocessed* model distribution
  (its default ``logprobs_mode="raw_logprobs"``), which is what PPO-clip needs as behaviour log-probs.
* Token ids, best effort: the request carries vLLM's extensions ``return_token_ids`` (vLLM >= 0.10.2: the choice
  has ``token_ids``, the completion choice / chat response has ``prompt_token_ids``) and
  ``return_tokens_as_token_ids`` (log-prob tokens come back as ``"token_id:N"``). A server that rejects them
  with HTTP 400/422 (a strict OpenAI endpoint) is asked again without them; when that works they stay off.
  ``token_ids`` is only filled when it lines up one-to-one with ``logprobs``.
* Seeds: the request seed is ``sampling.seed`` (else derived from the backend ``seed`` and a call counter, like the
  hf backend) plus the prompt's index in the call, so two equal prompts in one call get different samples.
* Failures: connection errors, timeouts, HTTP 408/409/429 and 5xx are retried ``max_retries`` times with
  exponential backoff (``backoff`` * 2^k, at most ``max_backoff`` s, a ``Retry-After`` header is honoured up to
  that cap). Then, or at once for any other HTTP error, ``BackendError`` with one line: method, URL, status and
  reason.
* ``chat=True`` sends the prompt unchanged as the user turn (the OpenAI API has no assistant prefill, so the hf
  backend's trick of moving a trailing ``<answer_1>`` into the assistant turn is not done here).
* ``finish_reason`` is ``"length"`` when the server says so, otherwise ``"stop"``; the server's own value is in
  ``meta["server_finish_reason"]``.
* ``load_adapter(path, version)``: for ``vllm serve --enable-lora`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``:
  ``POST /load_lora_adapter`` (path as the *server* sees it), then requests use the adapter name as ``model``;
  the previous adapter is unloaded, best effort.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evaluators.netaddr import is_loopback_host
from proposer.backends.base import CONCURRENT, AdapterState, Completion, SamplingParams
from proposer.errors import BackendError

RETRY_STATUS = frozenset({408, 409, 429})  # and every 5xx
VLLM_EXTRAS = ("return_token_ids", "return_tokens_as_token_ids")
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


def _one_line(text: Any, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def normalize_base_url(url: str) -> str:
    """``host:port`` -> ``http://host:port/v1``; ``http://h:p/`` -> ``http://h:p/v1``; a given path is kept."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BackendError(f"openai: bad server URL {url!r} (expected http(s)://host:port/v1)")
    path = parts.path.rstrip("/") or "/v1"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class _HTTPFailure(Exception):
    """One failed attempt: retryable or not, with the one-line description used in the final error."""

    def __init__(self, desc: str, retryable: bool, status: int | None = None, body: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(desc)
        self.desc, self.retryable, self.status, self.body, self.retry_after = desc, retryable, status, body, retry_after


class OpenAIBackend(AdapterState):
    """Backend protocol over an OpenAI-compatible server (completions or chat API)."""

    capabilities = AdapterState.capabilities | {CONCURRENT}  # the server batches requests; seeds travel with them

    def __init__(self, base_url: str, model: str | None = None, api_key_env: str | None = "OPENAI_API_KEY",
                 chat: bool = False, timeout: float = 60, max_retries: int = 4, concurrency: int = 8,
                 logprobs: bool = True, *, backoff: float = 0.5, max_backoff: float = 8.0,
                 max_n_per_request: int = 128, token_ids: bool = True, extra_body: dict[str, Any] | None = None,
                 policy_version: int = 0, name: str | None = None, seed: int | None = None) -> None:
        self.base_url = normalize_base_url(base_url)
        self.chat = bool(chat)
        self.timeout = float(timeout)
        if self.timeout <= 0:
            raise BackendError(f"openai: timeout must be > 0, got {timeout}")
        self.max_retries = max(0, int(max_retries))
        self.concurrency = max(1, int(concurrency))
        self.want_logprobs = bool(logprobs)
        self.backoff = max(0.0, float(backoff))
        self.max_backoff = max(0.0, float(max_backoff))
        self.max_n_per_request = max(1, int(max_n_per_request))
        self._extras_on = bool(token_ids)  # vLLM token-id extensions; switched off when the server rejects them
        self.extra_body = dict(extra_body or {})
        self.seed = seed
        self.policy_version = int(policy_version)
        self.name = name or f"openai:{self.base_url}"
        self._api_key = os.environ.get(api_key_env) if api_key_env else None
        host = urllib.parse.urlsplit(self.base_url).hostname
        handlers: list[Any] = [urllib.request.ProxyHandler({})] if is_loopback_host(host) else []
        self._opener = urllib.request.build_opener(*handlers)
        self._lock = threading.Lock()
        self._calls = 0
        self._adapter_seq = itertools.count()
        self.adapter_path: str | None = None
        self.adapter_name: str | None = None
        self.base_model = model or self._first_model()
        self.model = self.base_model

    # ---------------------------------------------------------------------------------------------- HTTP
    def _url(self, endpoint: str) -> str:
        return f"{self.base_url}/{endpoint.lstrip('/')}"

    def _attempt(self, method: str, url: str, body: dict[str, Any] | None, want_json: bool = True) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                text = exc.read().decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - the body is only decoration for the message
                text = ""
            retry_after = None
            ra = exc.headers.get("Retry-After") if exc.headers else None
            if ra:
                try:
                    retry_after = float(ra)
                except ValueError:
                    retry_after = None
            detail = _server_message(text)
            desc = f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
            retryable = exc.code in RETRY_STATUS or exc.code >= 500
            raise _HTTPFailure(desc, retryable, exc.code, text, retry_after) from None
        except urllib.error.URLError as exc:
            raise _HTTPFailure(f"connection failed: {exc.reason}", True) from None
        except TimeoutError:
            raise _HTTPFailure(f"timed out after {self.timeout:g} s", True) from None
        except OSError as exc:  # reset / refused / remote disconnected while reading
            raise _HTTPFailure(f"connection failed: {exc}", True) from None
        text = raw.decode("utf-8", "replace")
        if not want_json:  # e.g. vLLM's /load_lora_adapter answers 200 with a plain-text line
            return text
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise _HTTPFailure(f"response is not JSON ({exc}): {_one_line(text, 80)!r}", False) from None

    def _request(self, method: str, endpoint: str, body: dict[str, Any] | None = None, want_json: bool = True) -> Any:
        """One API call with retries; BackendError (one line) when it finally fails."""
        url = self._url(endpoint)
        attempts = self.max_retries + 1
        for k in range(attempts):
            try:
                return self._attempt(method, url, body, want_json)
            except _HTTPFailure as f:
                if f.status in (400, 422) and body and self._extras_on and any(x in body for x in VLLM_EXTRAS):
                    raise  # the caller retries without the extensions
                if not f.retryable or k == attempts - 1:
                    tries = f" after {k + 1} attempts" if k else ""
                    raise BackendError(f"openai: {method} {url} failed{tries}: {_one_line(f.desc, 300)}") from None
                delay = min(self.max_backoff, self.backoff * (2 ** k))
                if f.retry_after is not None:
                    delay = min(self.max_backoff, max(delay, f.retry_after))
                time.sleep(delay * (0.75 + 0.5 * random.random()))
        raise AssertionError("unreachable")  # pragma: no cover

    def _first_model(self) -> str:
        data = self._request("GET", "models")
        models = data.get("data") if isinstance(data, dict) else None
        if not models or not isinstance(models[0], dict) or not models[0].get("id"):
            raise BackendError(f"openai: GET {self._url('models')} listed no model; pass model=...")
        return str(models[0]["id"])

    # ------------------------------------------------------------------------------------------ requests
    def _body(self, prompt: str, n: int, sampling: SamplingParams, seed: int | None, extras: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "n": n, "max_tokens": int(sampling.max_tokens),
                                "temperature": float(sampling.temperature), "top_p": float(sampling.top_p)}
        if seed is not None:
            body["seed"] = int(seed) % (2**31 - 1)
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
            if self.want_logprobs:
                body["logprobs"] = True
        else:
            body["prompt"] = prompt
            if self.want_logprobs:
                body["logprobs"] = 1
        if extras:
            body["return_token_ids"] = True
            if self.want_logprobs:
                body["return_tokens_as_token_ids"] = True
        body.update(self.extra_body)
        return body

    def _post_choices(self, prompt: str, n: int, sampling: SamplingParams, seed: int | None) -> tuple[list, Any]:
        endpoint = "chat/completions" if self.chat else "completions"
        extras = self._extras_on
        try:
            data = self._request("POST", endpoint, self._body(prompt, n, sampling, seed, extras))
        except _HTTPFailure:  # 400 with the vLLM extensions on: perhaps a strict server; ask again without them
            data = self._request("POST", endpoint, self._body(prompt, n, sampling, seed, False))
            with self._lock:  # that worked: the extensions were the problem, leave them off from now on
                self._extras_on = False
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise BackendError(f"openai: POST {self._url(endpoint)}: response has no choices list")
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        return [c for c in choices if isinstance(c, dict)], data

    def _prompt_group(self, prompt: str, n: int, sampling: SamplingParams, seed: int | None,
                      version: int) -> list[Completion]:
        out: list[Completion] = []
        rounds = 0
        while len(out) < n:
            ask = min(n - len(out), self.max_n_per_request)
            s = None if seed is None else seed + 7919 * rounds
            choices, data = self._post_choices(prompt, ask, sampling, s)
            if not choices:
                raise BackendError(f"openai: {self._url('chat/completions' if self.chat else 'completions')} "
                                   f"returned no choices for n={ask}")
            out.extend(self._completion(c, data, version) for c in choices[:ask])
            rounds += 1
        return out

    def _completion(self, choice: dict[str, Any], data: dict[str, Any], version: int) -> Completion:
        if self.chat:
            msg = choice.get("message") or {}
            text = msg.get("content") or ""
            content = (choice.get("logprobs") or {}).get("content") or []
            lps = [e.get("logprob") for e in content if isinstance(e, dict)]
            toks = [e.get("token") for e in content if isinstance(e, dict)]
            prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
        else:
            text = choice.get("text") or ""
            lp = choice.get("logprobs") or {}
            lps = list(lp.get("token_logprobs") or [])
            toks = list(lp.get("tokens") or [])
            prompt_ids = choice.get("prompt_token_ids") or data.get("prompt_token_ids")
        logprobs: list[float] | None = None
        if self.want_logprobs and lps and all(isinstance(x, (int, float)) for x in lps):
            logprobs = [float(x) for x in lps]
        ids = choice.get("token_ids")
        if not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            parsed = [_TOKEN_ID.match(t) if isinstance(t, str) else None for t in toks]
            ids = [int(m.group(1)) for m in parsed] if toks and all(parsed) else None
        meta: dict[str, Any] = {"backend": "openai", "model": data.get("model", self.model),
                                "server_finish_reason": choice.get("finish_reason")}
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            meta["token_ids_mismatch"] = (len(ids), len(logprobs))
            ids = None
        if not (isinstance(prompt_ids, list) and all(isinstance(t, int) for t in prompt_ids)):
            prompt_ids = None
        return Completion(text=text, policy_version=version, token_ids=ids, logprobs=logprobs,
                          prompt_token_ids=prompt_ids,
                          finish_reason="length" if choice.get("finish_reason") == "length" else "stop", meta=meta)

    # ------------------------------------------------------------------------------------------ protocol
    def set_policy_version(self, v: int) -> None:
        self.policy_version = int(v)

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        """For each prompt, n completions (one group), prompts in parallel (at most ``concurrency`` at once)."""
        if n < 0:
            raise ValueError(f"{self.name}: n must be >= 0, got {n}")
        if n == 0 or not prompts:
            return [[] for _ in prompts]
        with self._lock:
            calls = self._calls
            self._calls += 1
        base = sampling.seed if sampling.seed is not None else (
            None if self.seed is None else int(self.seed) * 1_000_003 + calls)
        version = self.policy_version
        seeds = [None if base is None else base + i for i in range(len(prompts))]
        if len(prompts) == 1 or self.concurrency == 1:
            return [self._prompt_group(p, n, sampling, s, version) for p, s in zip(prompts, seeds)]
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts)), thread_name_prefix="openai")
        try:
            futures = [pool.submit(self._prompt_group, p, n, sampling, s, version) for p, s in zip(prompts, seeds)]
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------------------------------- adapters
    def load_adapter(self, path: str | os.PathLike[str], version: int | None = None) -> None:
        """Hot-load a LoRA adapter into a ``vllm serve --enable-lora`` server and sample from it from now on."""
        path = os.fspath(path)
        tag = version if version is not None else next(self._adapter_seq)
        name = f"vevo-policy-{tag}"
        if name == self.adapter_name:
            name = f"{name}-{next(self._adapter_seq)}"
        self._request("POST", "load_lora_adapter", {"lora_name": name, "lora_path": path}, want_json=False)
        old = self.adapter_name
        self.adapter_name, self.adapter_path, self.model = name, path, name
        if old is not None:
            self._unload(old)
        if version is not None:
            self.set_policy_version(version)

    def unload_adapter(self, version: int | None = None) -> None:
        """Back to the base model (the server's adapter is unloaded, best effort)."""
        if self.adapter_name is not None:
            self._unload(self.adapter_name)
        self.adapter_name = self.adapter_path = None
        self.model = self.base_model
        if version is not None:
            self.set_policy_version(version)

    def _unload(self, name: str) -> None:
        try:
            self._attempt("POST", self._url("unload_lora_adapter"), {"lora_name": name}, want_json=False)
        except _HTTPFailure:
            pass  # an adapter left loaded costs server memory only

    # ------------------------------------------------------------------------------------------- bookkeeping
    def close(self) -> None:
        """Nothing held open: every request uses its own connection."""


def _server_message(text: str) -> str:
    """The error message inside an OpenAI-style error body, else the body itself, on one short line."""
    if not text:
        return ""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return _one_line(text, 160)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and err.get("message"):
            return _one_line(err["message"], 160)
        if isinstance(err, str):
            return _one_line(err, 160)
        if obj.get("message"):
            return _one_line(obj["message"], 160)
    return _one_line(text, 160)
