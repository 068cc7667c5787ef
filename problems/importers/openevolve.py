"""OpenEvolve example folders (``initial_program.*`` + ``evaluator.py`` [+ ``config.yaml``]) found under a path,
each loaded and validated as a problem. They are not converted: the CLI copies each folder as it is, since the
evaluator is the author's code and runs as written."""
from __future__ import annotations

from pathlib import Path

from problems.errors import ProblemError
from problems.model import Problem
from problems.openevolve import is_openevolve_folder, load_openevolve
from problems.registry import find_problem_folders


def import_openevolve(path: str | Path) -> list[Problem]:
    path = Path(path)
    folders = [f for f in find_problem_folders(path) if is_openevolve_folder(f)]
    if not folders:
        raise ProblemError(path, "", "no OpenEvolve folders (initial_program.py + evaluator.py) found")
    return [load_openevolve(f) for f in folders]  # each raises a one-line ProblemError when malformed
