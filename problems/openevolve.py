"""OpenEvolve problem folders, used unchanged: ``initial_program.py`` + ``evaluator.py`` (+ optional
``config.yaml``, of which only the evaluator's cascade settings and the system message are read)."""
from __future__ import annotations

import ast
from pathlib import Path

import yaml

from .model import OpenEvolveSpec, Problem, ProblemError


def is_openevolve_folder(folder: Path) -> bool:
    return (folder / "initial_program.py").is_file() and (folder / "evaluator.py").is_file()


def load_openevolve(folder: str | Path, problem_id: str | None = None) -> Problem:
    folder = Path(folder)
    if not is_openevolve_folder(folder):
        raise ProblemError(folder, "", "not an OpenEvolve folder (needs initial_program.py and evaluator.py)")
    seed = (folder / "initial_program.py").read_text(encoding="utf-8")
    ev = folder / "evaluator.py"
    try:
        tree = ast.parse(ev.read_text(encoding="utf-8"))
    except SyntaxError as e:
        raise ProblemError(ev, f"line {e.lineno}", f"syntax error: {e.msg}") from None
    fns = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "evaluate" not in fns and "evaluate_stage1" not in fns:
        raise ProblemError(ev, "evaluate", "evaluator.py must define evaluate(program_path)")
    cascade, thresholds, timeout, description = True, (0.5, 0.75, 0.9), 60.0, ""
    cfg_path = folder / "config.yaml"
    if cfg_path.is_file():
        try:
            cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise ProblemError(cfg_path, "", f"invalid YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(cfg, dict):
            raise ProblemError(cfg_path, "", "top level must be a mapping")
        evc = cfg.get("evaluator") or {}
        if not isinstance(evc, dict):
            raise ProblemError(cfg_path, "evaluator", "must be a mapping")
        cascade = bool(evc.get("cascade_evaluation", True))
        th = evc.get("cascade_thresholds", list(thresholds))
        if not isinstance(th, list) or not all(isinstance(x, (int, float)) for x in th):
            raise ProblemError(cfg_path, "evaluator.cascade_thresholds", "must be a list of numbers")
        thresholds = tuple(float(x) for x in th)
        timeout = float(evc.get("timeout", timeout))
        prompt = cfg.get("prompt") or {}
        if isinstance(prompt, dict) and isinstance(prompt.get("system_message"), str):
            description = prompt["system_message"]
    if not description:
        try:
            description = ast.get_docstring(ast.parse(seed)) or ""
        except SyntaxError:
            description = ""
    return Problem(id=problem_id or folder.name, seed_code=seed, tests=[], title=folder.name,
                   description=description, entry_point=None, time_limit=timeout, solved_rule="scalar >= 1.0",
                   suite="openevolve", source=folder,
                   openevolve=OpenEvolveSpec(evaluator=ev.resolve(), cascade=cascade, thresholds=thresholds))
