"""OpenEvolve example folders (``initial_program.*`` + ``evaluator.py`` [+ ``config.yaml``]) found under a path,
each loaded and validated as a problem. They are not converted: the CLI copies each folder as it is, since the
evaluator is the author's code and runs as written. Ids are the folders' paths below ``path``
(``hexagon_packing/11``), so nested examples stay distinct; a folder that cannot be a problem (a non-Python
program) is skipped, and when none is left the error says why."""
from __future__ import annotations

from pathlib import Path

from problems.errors import ProblemError
from problems.model import Problem
from problems.openevolve import is_openevolve_folder, load_openevolve
from problems.registry import find_problem_folders, folder_id


def import_openevolve(path: str | Path) -> list[Problem]:
    path = Path(path)
    skipped: list[tuple[Path, str]] = []
    folders = [f for f in find_problem_folders(path, skipped=skipped) if is_openevolve_folder(f)]
    if not folders:
        if skipped:
            raise ProblemError(skipped[0][0], "", f"cannot be imported: {skipped[0][1]}")
        raise ProblemError(path, "", "no OpenEvolve folders (initial_program.py + evaluator.py) found")
    return [load_openevolve(f, folder_id(f, path)) for f in folders]  # each raises a one-line ProblemError


def skipped_folders(path: str | Path) -> list[tuple[Path, str]]:
    """(folder, why) for each folder under path that looks like an OpenEvolve problem but cannot be one."""
    skipped: list[tuple[Path, str]] = []
    find_problem_folders(Path(path), skipped=skipped)
    return skipped
