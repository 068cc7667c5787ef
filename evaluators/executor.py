"""Where candidates are evaluated: the ``Evaluator`` protocol the campaign calls, and the ``EXECUTORS`` registry.

The campaign only ever calls ``evaluate_many`` (results in input order) and ``close``; an executor decides where
the sandboxes run. ``local`` is one warm ``SandboxPool`` in this process; ``ray`` is one ``SandboxPool`` per node
of a Ray cluster (``evaluators/ray_executor.py``). Each sandbox is the same, so for a given input an executor
changes where an evaluation happens, never its result. With ``pipeline_depth`` D > 1 the campaign calls
``evaluate_many`` from D threads at once (one batch each): an executor must take concurrent calls. An executor
is built from an ``ExecutorSpec`` (evolve/ makes one from the run config's ``executor`` section).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from problems.model import Problem

from .errors import ExecutorError
from .types import Evaluation

__all__ = ["EXECUTORS", "Evaluator", "ExecutorError", "ExecutorSpec", "make_executor"]


@dataclass(frozen=True)
class ExecutorSpec:
    """What an executor is built from: the registry name, sandbox workers (per node for ``ray``), the Ray cluster
    to join (None: start or find a local one), and the opt-in to run candidates without any sandbox layer."""

    kind: str = "local"
    workers: int = 2
    ray_address: str | None = None
    unsafe_no_sandbox: bool = False


class Evaluator(Protocol):
    def evaluate_many(self, items: list[tuple[Problem, str]], time_limit: float | None = None) -> list[Evaluation]: ...

    def close(self) -> None: ...


def _local(spec: ExecutorSpec, hide: Iterable[str]) -> Evaluator:
    from .pool import SandboxPool

    return SandboxPool(workers=spec.workers, hide=hide, unsafe_no_sandbox=spec.unsafe_no_sandbox)


def _ray(spec: ExecutorSpec, hide: Iterable[str]) -> Evaluator:
    from .ray_executor import RayExecutor

    return RayExecutor(address=spec.ray_address, workers=spec.workers, hide=hide)


# name -> factory(spec, paths hidden from candidates) -> Evaluator
EXECUTORS: dict[str, Callable[[ExecutorSpec, Iterable[str]], Evaluator]] = {"local": _local, "ray": _ray}


def make_executor(spec: ExecutorSpec, hide: Iterable[str] = ()) -> Evaluator:
    if spec.kind not in EXECUTORS:
        raise ExecutorError(f"unknown executor {spec.kind!r}; known: {', '.join(EXECUTORS)}")
    return EXECUTORS[spec.kind](spec, list(hide))
