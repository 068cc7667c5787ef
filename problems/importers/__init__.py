"""Dataset importers: each importer ``(path, **options) -> list[Problem]`` reads a benchmark file or folder and
converts it to problems; nothing is written (``vevo problems import`` writes them: native folders, or a copy of
the original folder for OpenEvolve problems). Malformed input raises a one-line ProblemError naming the file and
the line/field.

    source      path (file or folder)                                   ids
    mbpp        mbpp.jsonl | sanitized-mbpp.json                          mbpp/<task_id>
    humaneval   HumanEval.jsonl[.gz]                                      humaneval/<n>
    evalplus    HumanEvalPlus*.jsonl.gz | MbppPlus*.jsonl.gz | folder     humanevalplus/<n>, mbppplus/<n>
    apps        selected150.jsonl (MapCoder) or APPS rows                 apps/<id>
    openevolve  a folder of OpenEvolve examples (initial_program + evaluator)  the folder name

EvalPlus stores no expected outputs: its importer runs each canonical solution in a sandbox the caller passes
(``pool``; options ``max_plus``, ``report``). The others take no options.

To add an importer: write ``import_<source>(path) -> list[Problem]`` in a module here and register it in
``IMPORTERS`` (or call ``register_importer`` from a plugin); the CLI's choices come from this table.
"""
from __future__ import annotations

from pathlib import Path

from typing import Callable

from problems.errors import ProblemError
from problems.model import Problem

from .apps import import_apps
from .evalplus import import_evalplus
from .humaneval import import_humaneval
from .mbpp import import_mbpp
from .openevolve import import_openevolve

Importer = Callable[..., list[Problem]]
IMPORTERS: dict[str, Importer] = {"mbpp": import_mbpp, "humaneval": import_humaneval, "evalplus": import_evalplus,
                                  "apps": import_apps, "openevolve": import_openevolve}
NEEDS_SANDBOX = {"evalplus"}  # importers that take ``pool``: the CLI builds one for them


def register_importer(source: str, fn: Importer, needs_sandbox: bool = False) -> None:
    IMPORTERS[source] = fn
    if needs_sandbox:
        NEEDS_SANDBOX.add(source)


def sources() -> tuple[str, ...]:
    return tuple(IMPORTERS)


__all__ = ["IMPORTERS", "register_importer", "sources", "import_problems", "import_mbpp", "import_humaneval",
           "import_evalplus", "import_apps", "import_openevolve"]


def import_problems(source: str, path: str | Path, **options) -> list[Problem]:
    """Dispatch to the registered importer; options go to it (only those that take options accept any)."""
    path = Path(path)
    if not path.exists():
        raise ProblemError(path, "", "no such file or folder")
    if source not in IMPORTERS:
        raise ProblemError(path, "", f"unknown source {source!r} (known: {', '.join(IMPORTERS)})")
    return IMPORTERS[source](path, **options)
