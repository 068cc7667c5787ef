"""``make_backend(spec)``: the one place a proposer spec string becomes a Backend.

Specs::

    tiny            the bundled tiny proposer (proposer/tiny/checkpoint) through HFBackend
    hf:PATH         a local transformers model folder (HFBackend; PEFT adapters via load_adapter)
    vllm:PATH       a local model through the vLLM offline engine (proposer.backends.vllm.VLLMBackend(PATH, **kw))
    openai:URL      any OpenAI-compatible server (proposer.backends.openai.OpenAIBackend(URL, **kw))
    openai:U1,U2    replicas of one model, requests spread, failover (proposer.backends.replicas.ReplicatedBackend)
    vllm-ray:PATH   vLLM engines of a local model started as Ray actors, behind the same ReplicatedBackend
                    (proposer.backends.ray_replicas.RayVLLMBackend(PATH, replicas=N, tensor_parallel_size=..., ...))
    replay:FILE     recorded completions, JSONL (proposer.backends.replay.ReplayBackend)

Each backend declares its own options model (``OPTIONS``, proposer/backends/options.py): the run config's
``proposer.options`` are validated against it (`check_options`) and turned into constructor keyword arguments by it
(`backend_kwargs`). Keyword arguments go to the backend's constructor (``seed``, which the campaign passes to every
backend, is dropped for replay). Heavy modules (torch, transformers, vllm, an HTTP client) are imported only for the
spec that needs them. Every failure to build a backend is a one-line ``BackendError``.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from proposer.backends.base import Backend
from proposer.backends.options import (BackendOptions, BackendRun, HFOptions, OpenAIOptions, VLLMOptions,
                                       VLLMRayOptions)
from proposer.errors import BackendError

TINY_CHECKPOINT = Path(__file__).resolve().parent.parent / "tiny" / "checkpoint"
TINY_ENTRY_NAME = "f"  # the only function name in the tiny model's pretraining corpus (proposer/answers/naming.py)
PRETRAIN_RECORD = "pretrain.json"  # written by `vevo pretrain`: a model that learnt the tiny corpus


def _optional(module: str, name: str, spec: str, arg: str, kw: dict[str, Any]) -> Backend:
    """Import ``module`` lazily and call its ``name`` with (arg, **kw)."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module or (exc.name and module.startswith(exc.name + ".")):
            raise BackendError(f"proposer {spec!r}: backend module {module} is not available") from None
        raise BackendError(f"proposer {spec!r}: {module} needs {exc.name!r}, which is not installed") from None
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise BackendError(f"proposer {spec!r}: {module} does not define {name}")
    return factory(arg, **kw)


def _tiny(arg: str, spec: str, kw: dict[str, Any]) -> Backend:
    if not (TINY_CHECKPOINT / "config.json").is_file():
        raise BackendError(f"proposer 'tiny': no checkpoint at {TINY_CHECKPOINT} (rebuild it with "
                           f"python -m proposer.tiny.pretrain --out {TINY_CHECKPOINT})")
    from proposer.backends.hf import HFBackend

    kw.setdefault("name", "tiny")
    backend = HFBackend(TINY_CHECKPOINT, **kw)
    backend.entry_name = TINY_ENTRY_NAME  # type: ignore[attr-defined]
    return backend


def _hf(arg: str, spec: str, kw: dict[str, Any]) -> Backend:
    if not Path(arg).expanduser().is_dir():
        raise BackendError(f"proposer {spec!r}: model folder {arg} not found")
    from proposer.backends.hf import HFBackend

    backend = HFBackend(Path(arg).expanduser(), **kw)
    if (Path(arg).expanduser() / PRETRAIN_RECORD).is_file():  # `vevo pretrain` output, or `vevo train` of it
        backend.entry_name = TINY_ENTRY_NAME  # type: ignore[attr-defined]
    return backend


def _replay(arg: str, spec: str, kw: dict[str, Any]) -> Backend:
    path = Path(arg).expanduser()
    if not path.is_file():
        raise BackendError(f"proposer {spec!r}: replay file {arg} not found")
    from proposer.backends.replay import ReplayBackend

    kw.pop("seed", None)  # replay is deterministic by construction
    try:
        return ReplayBackend(path, **kw)
    except ValueError as exc:
        raise BackendError(str(exc)) from None


def _vllm(arg: str, spec: str, kw: dict[str, Any]) -> Backend:
    if not Path(arg).expanduser().exists():
        raise BackendError(f"proposer {spec!r}: model path {arg} not found")
    return _optional("proposer.backends.vllm", "VLLMBackend", spec, str(Path(arg).expanduser()), kw)


def _vllm_ray(arg: str, spec: str, kw: dict[str, Any]) -> Backend:
    if not Path(arg).expanduser().exists():
        raise BackendError(f"proposer {spec!r}: model path {arg} not found")
    return _optional("proposer.backends.ray_replicas", "RayVLLMBackend", spec, str(Path(arg).expanduser()), kw)


def _openai(arg: str, spec: str, kw: dict[str, Any]) -> Backend:
    if "," in arg:  # replicas of one model: openai:URL1,URL2,... (proposer/backends/replicas.py)
        from proposer.backends.replicas import ReplicatedBackend

        kw.setdefault("max_retries", 2)  # a dead replica is left sooner: another one takes the request
        return ReplicatedBackend([_optional("proposer.backends.openai", "OpenAIBackend", spec, url.strip(), dict(kw))
                                  for url in arg.split(",") if url.strip()])
    return _optional("proposer.backends.openai", "OpenAIBackend", spec, arg, kw)


# spec prefix -> factory(arg, spec, kwargs). To add a backend: write a class with generate/close and a
# ``capabilities`` set (proposer/backends/base.py), a factory like those above, and register it here (with its
# options model in OPTIONS) or with ``register_backend``. "tiny" is the one spec without an argument.
BACKENDS: dict[str, Callable[[str, str, dict[str, Any]], Backend]] = {
    "tiny": _tiny, "hf": _hf, "vllm": _vllm, "vllm-ray": _vllm_ray, "openai": _openai, "replay": _replay,
}
ARGUMENT = {"hf": "PATH", "vllm": "PATH", "vllm-ray": "PATH", "openai": "URL", "replay": "FILE"}  # what follows the colon
NO_ARGUMENT = {"tiny"}
# spec prefix -> the backend's options model (``proposer.options`` in the run config); absent: no options
OPTIONS: dict[str, type[BackendOptions]] = {
    "tiny": HFOptions, "hf": HFOptions, "vllm": VLLMOptions, "vllm-ray": VLLMRayOptions, "openai": OpenAIOptions,
}


def register_backend(prefix: str, factory: Callable[[str, str, dict[str, Any]], Backend],
                     argument: str | None = "ARG", options: type[BackendOptions] = BackendOptions) -> None:
    """Make ``prefix:ARGUMENT`` (or bare ``prefix`` when ``argument`` is None) a proposer spec whose
    ``proposer.options`` are ``options`` (a `BackendOptions` model; the default takes none)."""
    BACKENDS[prefix] = factory
    OPTIONS[prefix] = options
    if argument is None:
        NO_ARGUMENT.add(prefix)
    else:
        ARGUMENT[prefix] = argument


def spec_kind(spec: str) -> str:
    """The registry key of a spec: 'tiny' -> 'tiny', 'hf:/m' -> 'hf'."""
    return spec.strip() if spec.strip() in NO_ARGUMENT else spec.strip().partition(":")[0]


def options_model(spec: str) -> type[BackendOptions]:
    """The options model of the backend a spec names (`BackendOptions`, no options, for an unknown one)."""
    return OPTIONS.get(spec_kind(spec), BackendOptions)


def check_options(spec: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` validated by the options model of ``spec``'s backend: the keys given, with their validated
    values. ValueError naming the option (``'options.KEY'``) and the backend."""
    from pydantic import ValidationError

    model = options_model(spec)
    kind = spec_kind(spec) or spec
    takes = ", ".join(model.model_fields) or "none"
    for key in options:
        if key not in model.model_fields:
            raise ValueError(f"'options.{key}' is not an option of backend {kind!r} (its options: {takes})")
    try:
        opts = model.model_validate(options)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"'options.{where}' of backend {kind!r}: {err['msg']}") from None
    return opts.model_dump(exclude_unset=True)


def backend_kwargs(spec: str, options: dict[str, Any] | BackendOptions | None, run: BackendRun) -> dict[str, Any]:
    """The constructor keyword arguments for ``spec`` from its options and the run's shared settings."""
    model = options_model(spec)
    opts = options if isinstance(options, model) else model.model_validate(dict(options or {}))
    return opts.kwargs(run)


def expected_specs() -> str:
    names = [k if k in NO_ARGUMENT else f"{k}:{ARGUMENT.get(k, 'ARG')}" for k in BACKENDS]
    return "expected " + ", ".join(names[:-1]) + " or " + names[-1]


def make_backend(spec: str, **kw: Any) -> Backend:
    """Build the backend named by ``spec`` (see module docstring) through the BACKENDS registry."""
    if not isinstance(spec, str) or not spec.strip():
        raise BackendError(f"unknown proposer spec {spec!r}; {expected_specs()}")
    spec = spec.strip()
    if spec in NO_ARGUMENT:
        return BACKENDS[spec]("", spec, kw)
    kind, sep, arg = spec.partition(":")
    if not sep or not arg or kind not in BACKENDS or kind in NO_ARGUMENT:
        raise BackendError(f"unknown proposer spec {spec!r}; {expected_specs()}")
    return BACKENDS[kind](arg, spec, kw)
