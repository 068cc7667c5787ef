"""``make_backend(spec)``: the one place a proposer spec string becomes a Backend.

Specs::

    tiny            the bundled tiny proposer (proposer/tiny/checkpoint) through HFBackend
    hf:PATH         a local transformers model folder (HFBackend; PEFT adapters via load_adapter)
    vllm:PATH       a local model through the vLLM offline engine (proposer.vllm_backend.VLLMBackend(PATH, **kw))
    openai:URL      any OpenAI-compatible server (proposer.openai_backend.OpenAIBackend(URL, **kw))
    openai:U1,U2    replicas of one model, requests spread, failover (proposer.replicas.ReplicatedBackend)
    replay:FILE     recorded completions, JSONL (proposer.replay.ReplayBackend)

Keyword arguments go to the backend's constructor (``seed``, which the campaign passes to every backend, is
dropped for replay). Heavy modules (torch, transformers, vllm, an HTTP client) are
imported only for the spec that needs them. Every failure to build a backend is a one-line ``BackendError``.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from proposer.base import Backend

TINY_CHECKPOINT = Path(__file__).resolve().parent / "tiny" / "checkpoint"
_EXPECTED = "expected tiny, hf:PATH, vllm:PATH, openai:URL or replay:FILE"


class BackendError(Exception):
    """A proposer backend cannot be built or used; str() is one line meant for the user."""

    def __init__(self, msg: str) -> None:
        super().__init__(" ".join(str(msg).split()))


def _optional(module: str, names: tuple[str, ...], spec: str, arg: str, kw: dict[str, Any]) -> Backend:
    """Import ``module`` lazily and call the first of ``names`` it defines with (arg, **kw)."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module or (exc.name and module.startswith(exc.name + ".")):
            raise BackendError(f"proposer {spec!r}: backend module {module} is not available") from None
        raise BackendError(f"proposer {spec!r}: {module} needs {exc.name!r}, which is not installed") from None
    factory = next((getattr(mod, n) for n in names if callable(getattr(mod, n, None))), None)
    if factory is None:
        raise BackendError(f"proposer {spec!r}: {module} defines none of {', '.join(names)}")
    return factory(arg, **kw)


def make_backend(spec: str, **kw: Any) -> Backend:
    """Build the backend named by ``spec`` (see module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise BackendError(f"unknown proposer spec {spec!r}; {_EXPECTED}")
    spec = spec.strip()
    kind, sep, arg = spec.partition(":")
    if spec == "tiny":
        if not (TINY_CHECKPOINT / "config.json").is_file():
            raise BackendError(f"proposer 'tiny': no checkpoint at {TINY_CHECKPOINT} (rebuild it with "
                               f"python -m proposer.tiny.pretrain --out {TINY_CHECKPOINT})")
        from proposer.hf import HFBackend

        kw.setdefault("name", "tiny")
        return HFBackend(TINY_CHECKPOINT, **kw)
    if not sep or not arg:
        raise BackendError(f"unknown proposer spec {spec!r}; {_EXPECTED}")
    if kind == "hf":
        if not Path(arg).expanduser().is_dir():
            raise BackendError(f"proposer {spec!r}: model folder {arg} not found")
        from proposer.hf import HFBackend

        return HFBackend(Path(arg).expanduser(), **kw)
    if kind == "replay":
        path = Path(arg).expanduser()
        if not path.is_file():
            raise BackendError(f"proposer {spec!r}: replay file {arg} not found")
        from proposer.replay import ReplayBackend

        kw.pop("seed", None)  # replay is deterministic by construction
        try:
            return ReplayBackend(path, **kw)
        except ValueError as exc:
            raise BackendError(str(exc)) from None
    if kind == "vllm":
        if not Path(arg).expanduser().exists():
            raise BackendError(f"proposer {spec!r}: model path {arg} not found")
        return _optional("proposer.vllm_backend", ("VLLMBackend", "VllmBackend"), spec,
                         str(Path(arg).expanduser()), kw)
    if kind == "openai" and "," in arg:  # replicas of one model: openai:URL1,URL2,... (proposer/replicas.py)
        from proposer.replicas import ReplicatedBackend

        kw.setdefault("max_retries", 2)  # a dead replica is left sooner: another one takes the request
        return ReplicatedBackend([_optional("proposer.openai_backend", ("OpenAIBackend",), spec, url.strip(), dict(kw))
                                  for url in arg.split(",") if url.strip()])
    if kind == "openai":
        return _optional("proposer.openai_backend", ("OpenAIBackend", "OpenAICompatibleBackend"), spec, arg, kw)
    raise BackendError(f"unknown proposer spec {spec!r}; {_EXPECTED}")
