"""Dataset importers: each ``import_<source>(path) -> list[Problem]`` reads a benchmark file (or its folder)
and converts it to native problems; nothing is written (``vevo problems import`` writes them with
``write_native``). Malformed input raises a one-line ProblemError naming the file and the line/field.

    source      path (file or folder)                                   ids
    mbpp        mbpp.jsonl | sanitized-mbpp.json                          mbpp/<task_id>
    humaneval   HumanEval.jsonl[.gz]                                      humaneval/<n>
    evalplus    HumanEvalPlus*.jsonl.gz | MbppPlus*.jsonl.gz | folder     humanevalplus/<n>, mbppplus/<n>
    apps        selected150.jsonl (MapCoder) or APPS rows                 apps/<id>

EvalPlus stores no expected outputs: its importer runs each canonical solution in the sandbox to get
them (options ``pool``, ``max_plus``, ``workers``, ``report``). The others only read.
OpenEvolve folders are copied by the CLI, not converted here.
"""
from __future__ import annotations

from pathlib import Path

from problems.model import Problem, ProblemError

from .apps import import_apps
from .evalplus import import_evalplus
from .humaneval import import_humaneval
from .mbpp import import_mbpp

SOURCES = ("mbpp", "humaneval", "evalplus", "apps")

__all__ = ["SOURCES", "import_problems", "import_mbpp", "import_humaneval", "import_evalplus", "import_apps"]


def import_problems(source: str, path: str | Path, **options) -> list[Problem]:
    """Dispatch to ``import_<source>``; options go to the EvalPlus importer (others take none)."""
    path = Path(path)
    if not path.exists():
        raise ProblemError(path, "", "no such file or folder")
    if source == "mbpp":
        fn = import_mbpp
    elif source == "humaneval":
        fn = import_humaneval
    elif source == "evalplus":
        return import_evalplus(path, **options)
    elif source == "apps":
        fn = import_apps
    else:
        raise ValueError(f"unknown source {source!r} (known: {', '.join(SOURCES)})")
    if options:
        raise TypeError(f"import_{source} takes no options (got {', '.join(sorted(options))})")
    return fn(path)
