"""Where problems come from: built-in suites, folders (--problems-dir, VEVO_PROBLEMS_PATH), and Python
entry points in group ``vevo.problems`` (a callable returning problems, or a folder path)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable

from .errors import ProblemError, UnknownProblem
from .model import Problem, load_native
from .openevolve import folder_issue, is_openevolve_folder, load_openevolve

ENTRY_POINT_GROUP = "vevo.problems"
MAX_DEPTH = 3


def load_folder(folder: str | Path, problem_id: str | None = None) -> Problem:
    """One problem folder of either format. problem_id names an OpenEvolve folder (a native one has its own)."""
    folder = Path(folder)
    if (folder / "problem.toml").is_file():
        return load_native(folder)
    if is_openevolve_folder(folder):
        return load_openevolve(folder, problem_id)
    why = folder_issue(folder) or "no problem.toml, no initial_program.py + evaluator.py"
    raise ProblemError(folder, "", f"not a problem folder: {why}")


def folder_id(folder: Path, root: Path) -> str:
    """An OpenEvolve folder's id: its path below the root it was found from (``hexagon_packing/11``), so nested
    examples get distinct ids; the folder's own name when it is the root."""
    try:
        rel = folder.resolve().relative_to(root.resolve())
    except ValueError:
        rel = Path(folder.name)
    return rel.as_posix() if rel.parts else folder.resolve().name


def is_problem_folder(folder: Path) -> bool:
    return (folder / "problem.toml").is_file() or is_openevolve_folder(folder)


def find_problem_folders(root: str | Path, depth: int = MAX_DEPTH,
                         skipped: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Problem folders under root. skipped, when given, collects (folder, reason) for each folder that looks
    like a problem but is not one (an OpenEvolve folder with a non-Python program, a missing evaluator)."""
    root = Path(root)
    if is_problem_folder(root):
        return [root]
    if skipped is not None and root.is_dir():
        why = folder_issue(root)
        if why:
            skipped.append((root, why))
    if depth <= 0 or not root.is_dir():
        return []
    out: list[Path] = []
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        out += find_problem_folders(child, depth - 1, skipped)
    return out


def load_tree(root: str | Path, errors: list[ProblemError] | None = None,
              skipped: list[tuple[Path, str]] | None = None) -> list[Problem]:
    """Every problem under root. Malformed folders raise, or are collected into ``errors`` when given; folders
    that look like problems but cannot be one (a non-Python OpenEvolve program) go to ``skipped`` with why."""
    root = Path(root)
    if not root.exists():
        raise ProblemError(root, "", "no such file or directory")
    out = []
    seen: dict[str, Problem] = {}
    skipped = [] if skipped is None else skipped
    for folder in find_problem_folders(root, skipped=skipped):
        try:
            p = load_folder(folder, folder_id(folder, root))
        except ProblemError as e:
            if errors is None:
                raise
            errors.append(e)
            continue
        if p.suite is None:
            p.suite = folder.parent.name if folder != root else root.name
        check_unique(seen, p)
        seen[p.id] = p
        out.append(p)
    if not out and not errors and not find_problem_folders(root):
        if skipped:
            raise ProblemError(skipped[0][0], "", f"skipped: {skipped[0][1]}" +
                               (f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""))
        raise ProblemError(root, "", "no problem folders found")
    return out


class DuplicateProblem(ProblemError):
    """Two problems with one id (two folders, or a folder and a built-in problem): neither may be dropped or
    shadowed silently, so loading stops and names both."""

    def __init__(self, pid: str, first: object, second: object):
        super().__init__(second, "id", f"{pid!r} is also the id of {first}; ids must be unique (rename one)")


def _folder(p: Problem) -> Path | None:
    """The folder a problem was read from (built-in suites have none, or a name string)."""
    return p.source.resolve() if isinstance(p.source, Path) else None


def _origin(p: Problem) -> str:
    """Where a problem came from, for an error naming it: its folder, or the built-in suite it belongs to."""
    from .suites import SUITES

    if _folder(p) is not None:
        return str(p.source)
    kind = "built-in problem" if p.suite in SUITES else "problem"
    return f"{kind} {p.id} (suite {p.suite})" if p.suite else f"{kind} {p.id}"


def builtin_prefixes() -> tuple[str, ...]:
    """The id namespaces of the built-in suites (``pbe/``, ``sr/``): the first part of each suite's name. Only a
    folder id in one of them can clash with a built-in problem that is generated on demand."""
    from .suites import SUITES

    return tuple(sorted({name.split("-")[0] + "/" for name in SUITES}))


def check_unique(seen: dict[str, Problem], p: Problem) -> None:
    """Raise DuplicateProblem when p's id already belongs to a problem from elsewhere: another folder, or a
    built-in problem when p is read from a folder (and the reverse). A built-in suite adding a problem that an
    overlapping suite already added (pbe and pbe-train) is the same problem, not a clash."""
    other = seen.get(p.id)
    if other is None:
        return
    mine, theirs = _folder(p), _folder(other)
    if (mine is None) != (theirs is None) or (mine is not None and mine != theirs):
        raise DuplicateProblem(p.id, _origin(other), _origin(p))


@dataclass
class Registry:
    problems: dict[str, Problem] = field(default_factory=dict)
    errors: list[ProblemError] = field(default_factory=list)
    from_dirs: list[str] = field(default_factory=list)  # ids loaded from the folders given to `discover`
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def add(self, p: Problem) -> None:
        """First source wins (built-ins, then folders, then plugins); two folders with one id, or a folder with a
        built-in problem's id, are an error. A folder id in a built-in namespace (``pbe/...``) generates the
        on-demand suites first, so it cannot shadow one of them unnoticed."""
        if not self.builtins_loaded and _folder(p) is not None and p.id.startswith(builtin_prefixes()):
            self.load_builtins()
        check_unique(self.problems, p)
        self.problems.setdefault(p.id, p)

    builtins_loaded: bool = False  # only the default suites (pbe, sr) are generated up front

    def get(self, pid: str) -> Problem:
        if pid not in self.problems and not self.builtins_loaded:
            self.load_builtins()  # an id of another built-in suite (pbe/hard-list-7, a sr-classic formula)
        if pid in self.problems:
            return self.problems[pid]
        raise UnknownProblem(f"unknown problem {pid!r} (see `vevo problems list`)")

    def load_builtins(self) -> None:
        """Every built-in suite's problems, so any id `vevo problems list` prints resolves; done on demand because
        the suites beyond pbe and sr take seconds to generate and most commands never need them. Problems already
        registered keep their place (first source wins)."""
        from .suites import SUITES

        for make in SUITES.values():
            for p in make():
                self.add(p)
        self.builtins_loaded = True

    def all(self) -> list[Problem]:
        """Every problem this registry can name: all built-in suites, folders and plugins."""
        if not self.builtins_loaded:
            self.load_builtins()
        return list(self.problems.values())

    def suites(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in self.problems.values():
            out.setdefault(p.suite or "", []).append(p.id)
        return out

    def select(self, suite: str | None = None, ids: Iterable[str] = ()) -> list[Problem]:
        """The suite's problems plus the ids given (a union: `--suite pbe --problem pbe/hard-list-7` runs the 24
        pbe problems and that one), in that order, each once."""
        ids = list(ids)
        chosen: list[Problem] = []
        if suite:
            chosen = suite_problems(suite, self)
        for pid in ids:
            p = self.resolve(pid)
            if p.id not in {c.id for c in chosen}:
                chosen.append(p)
        return chosen

    def resolve(self, id_or_path: str) -> Problem:
        """A registered id, or a path to a problem folder."""
        if id_or_path in self.problems:
            return self.problems[id_or_path]
        if Path(id_or_path).exists():
            return load_folder(id_or_path)
        return self.get(id_or_path)


def suite_problems(suite: str, reg: Registry) -> list[Problem]:
    from .suites import SUITES

    if suite in SUITES:
        return list(SUITES[suite]())
    members = [p for p in reg.problems.values() if p.suite == suite]
    if not members:
        raise UnknownProblem(f"unknown suite {suite!r} (known: {', '.join(sorted(set(SUITES) | set(reg.suites())))})")
    return members


def plugin_sources() -> list[tuple[str, Callable]]:
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10 API
        eps = metadata.entry_points().get(ENTRY_POINT_GROUP, [])  # type: ignore[attr-defined]
    return [(ep.name, ep.load) for ep in eps]


def builtin_registry() -> Registry:
    """A registry of the default built-in suites only (the others are generated on demand)."""
    from .suites import builtin_problems

    reg = Registry()
    for p in builtin_problems():
        reg.add(p)
    return reg


def refuse_builtin_ids(problems: Iterable[Problem]) -> None:
    """Raise DuplicateProblem for the first folder problem whose id is a built-in problem's, which a registry
    would refuse: `problems check` says so rather than pass a folder that `run` will not take."""
    reg = builtin_registry()
    for p in problems:
        reg.add(p)


def discover(problems_dirs: Iterable[str | Path] = (), builtin: bool = True, plugins: bool = True) -> Registry:
    problems_dirs = list(problems_dirs)
    reg = builtin_registry() if builtin else Registry(builtins_loaded=True)
    env = os.environ.get("VEVO_PROBLEMS_PATH", "")
    dirs = list(problems_dirs) + [d for d in env.split(os.pathsep) if d]
    for d in dirs:
        for p in load_tree(d, reg.errors, reg.skipped):
            reg.add(p)
            if d in problems_dirs and p.id not in reg.from_dirs:
                reg.from_dirs.append(p.id)
    if plugins:
        for name, loader in plugin_sources():
            try:
                obj = loader()
                got = obj() if callable(obj) else obj
                items = load_tree(got, reg.errors) if isinstance(got, (str, Path)) else list(got)
                for p in items:
                    if not isinstance(p, Problem):
                        raise TypeError(f"returned {type(p).__name__}, expected Problem")
                    p.suite = p.suite or name
                    reg.add(p)
            except Exception as e:  # a broken plugin must not take the registry down
                reg.errors.append(ProblemError(f"entry point {name}", "", f"{type(e).__name__}: {e}"))
                print(f"vevo: warning: problem plugin {name!r} failed: {e}", file=sys.stderr)
    return reg
