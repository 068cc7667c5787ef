"""Where candidates are evaluated: the ``Evaluator`` protocol the campaign calls, and the ``EXECUTORS`` registry.

The campaign only ever calls ``evaluate_many`` (results in input order) and ``close``; an executor decides where
the sandboxes run. ``local`` is one warm ``SandboxPool`` in this process; ``ray`` is one ``SandboxPool`` per node
of a Ray cluster (``evaluators/ray_executor.py``). Each sandbox is the same, so for a given input an executor
changes where an evaluation happens, never its result. With ``pipeline_depth`` D > 1 the campaign calls
``evaluate_many`` from D threads at once (one batch each): an executor must take concurrent calls.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol

from problems.model import Problem

from .errors import ExecutorError
from .types import Evaluation

__all__ = ["EXECUTORS", "Evaluator", "ExecutorError", "make_executor"]


class Evaluator(Protocol):
    def evaluate_many(self, items: list[tuple[Problem, str]], time_limit: float | None = None) -> list[Evaluation]: ...

    def close(self) -> None: ...


def _local(cfg: Any, hide: Iterable[str]) -> Evaluator:
    from .pool import SandboxPool

    return SandboxPool(workers=cfg.sandbox.workers, hide=hide,
                       unsafe_no_sandbox=bool(getattr(cfg.sandbox, "unsafe_no_sandbox", False)))


def _ray(cfg: Any, hide: Iterable[str]) -> Evaluator:
    from .ray_executor import RayExecutor

    return RayExecutor(address=cfg.executor.ray_address, workers=cfg.sandbox.workers, hide=hide)


# name -> factory(run config: cfg.executor, cfg.sandbox; paths hidden from candidates) -> Evaluator
EXECUTORS: dict[str, Callable[[Any, Iterable[str]], Evaluator]] = {"local": _local, "ray": _ray}


def make_executor(cfg: Any, hide: Iterable[str] = ()) -> Evaluator:
    name = cfg.executor.kind
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
    return EXECUTORS[name](cfg, list(hide))
