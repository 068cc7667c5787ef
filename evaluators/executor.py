"""Where candidates are evaluated: the ``Evaluator`` protocol the campaign calls, and the ``EXECUTORS`` registry.

The campaign only ever calls ``evaluate_many`` (results in input order) and ``close``; an executor decides where
the sandboxes run. ``local`` is one warm ``SandboxPool`` in this process; ``ray`` is one ``SandboxPool`` per node
of a Ray cluster (``evaluators/ray_executor.py``). Each sandbox is the same, so for a given input an executor
changes where an evaluation happens, never its result.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol

from problems.model import Problem

from .types import Evaluation


class ExecutorError(Exception):
    """An executor that cannot be started or has lost every place to run (one line for the CLI)."""


class Evaluator(Protocol):
    def evaluate_many(self, items: list[tuple[Problem, str]], time_limit: float | None = None) -> list[Evaluation]: ...

    def close(self) -> None: ...


def _local(cfg: Any, hide: Iterable[str]) -> Evaluator:
    from .pool import SandboxPool

    return SandboxPool(workers=cfg.workers, hide=hide)


def _ray(cfg: Any, hide: Iterable[str]) -> Evaluator:
    from .ray_executor import RayExecutor

    return RayExecutor(address=getattr(cfg, "ray_address", None), workers=cfg.workers, hide=hide)


# name -> factory(run config, paths hidden from candidates) -> Evaluator
EXECUTORS: dict[str, Callable[[Any, Iterable[str]], Evaluator]] = {"local": _local, "ray": _ray}


def make_executor(cfg: Any, hide: Iterable[str] = ()) -> Evaluator:
    name = getattr(cfg, "executor", "local")
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
    return EXECUTORS[name](cfg, list(hide))
