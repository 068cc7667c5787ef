"""OpenEvolve problem folders, used unchanged: ``initial_program.py`` + ``evaluator.py`` (+ optional
``config.yaml``, of which the evaluator settings, the feature dimensions, the early-stopping target and the system
message are read), and optionally a ``vevo.toml`` beside them for what OpenEvolve's config cannot say.

    config.yaml  evaluator.timeout          per-stage timeout (OpenEvolve's default, 300 s)
                 evaluator.cascade_*        cascade on/off and thresholds
                 evaluator.memory_limit_mb  the memory limit (else resources.OPENEVOLVE's)
                 database.feature_dimensions  left out of the fitness
                 early_stopping_patience < 0 with convergence_threshold on combined_score: the target
    vevo.toml    solved = "scalar >= X" | "none",  time_limit,  memory_limit_mb,  [resources] (no memory_mb: one
                 key per limit),  [metrics] name = higher|lower|ignore

Without a target the problem is open-ended (``solved = "none"``): OpenEvolve problems have no "solved", and a
campaign on them runs its whole budget keeping the best so far.
"""
from __future__ import annotations

import ast
import tomllib
from dataclasses import replace
from pathlib import Path

import yaml

from .metrics import check_directions
from .model import _SOLVED_RE, MAX_TIME_LIMIT, OpenEvolveSpec, Problem, ProblemError
from .resources import MAX, MIN, OPENEVOLVE, resources_from_dict

DEFAULT_TIMEOUT = 300.0  # OpenEvolve's EvaluatorConfig.timeout
VEVO_KEYS = {"solved", "time_limit", "memory_limit_mb", "resources", "metrics", "description"}


def is_openevolve_folder(folder: Path) -> bool:
    return (folder / "initial_program.py").is_file() and (folder / "evaluator.py").is_file()


def folder_issue(folder: Path) -> str | None:
    """Why a folder that looks like an OpenEvolve problem (it has an evaluator.py or an initial_program.*)
    cannot be one; None when it can, or when it does not look like one at all."""
    programs = sorted(p.name for p in folder.glob("initial_program.*") if p.is_file())
    has_ev = (folder / "evaluator.py").is_file()
    if not programs and not has_ev:
        return None
    if "initial_program.py" not in programs:
        if programs:
            return (f"{programs[0]}: only Python programs can be evolved here (vevo's sandbox runs Python "
                    "candidates); the folder needs initial_program.py")
        return "has evaluator.py but no initial_program.py"
    if not has_ev:
        other = sorted(p.name for p in folder.glob("evaluator.*") if p.is_file())
        return f"{other[0]}: the evaluator must be evaluator.py" if other else "has initial_program.py but no evaluator.py"
    return None


def _read_yaml(path: Path) -> dict:
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ProblemError(path, "", f"invalid YAML: {str(e).splitlines()[0]}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(path, "", f"cannot read: {e}") from None
    if not isinstance(cfg, dict):
        raise ProblemError(path, "", "top level must be a mapping")
    return cfg


def _number(cfg_path: Path, where: str, v, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < float(v) <= hi:
        raise ProblemError(cfg_path, where, f"must be a number in ({lo:g}, {hi:g}], got {v!r}")
    return float(v)


def load_openevolve(folder: str | Path, problem_id: str | None = None) -> Problem:
    folder = Path(folder)
    if not is_openevolve_folder(folder):
        why = folder_issue(folder) or "needs initial_program.py and evaluator.py"
        raise ProblemError(folder, "", f"not an OpenEvolve folder: {why}")
    seed = (folder / "initial_program.py").read_text(encoding="utf-8")
    ev = folder / "evaluator.py"
    try:
        tree = ast.parse(ev.read_text(encoding="utf-8"))
    except SyntaxError as e:
        raise ProblemError(ev, f"line {e.lineno}", f"syntax error: {e.msg}") from None
    fns = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "evaluate" not in fns and "evaluate_stage1" not in fns:
        raise ProblemError(ev, "evaluate", "evaluator.py must define evaluate(program_path)")
    cascade, thresholds, timeout, description = True, (0.5, 0.75, 0.9), DEFAULT_TIMEOUT, ""
    resources, solved, feature_dims = OPENEVOLVE, "none", ("complexity", "diversity")
    cfg_path = folder / "config.yaml"
    if cfg_path.is_file():
        cfg = _read_yaml(cfg_path)
        evc = cfg.get("evaluator") or {}
        if not isinstance(evc, dict):
            raise ProblemError(cfg_path, "evaluator", "must be a mapping")
        cascade = bool(evc.get("cascade_evaluation", True))
        th = evc.get("cascade_thresholds", list(thresholds))
        if not isinstance(th, list) or not all(isinstance(x, (int, float)) for x in th):
            raise ProblemError(cfg_path, "evaluator.cascade_thresholds", "must be a list of numbers")
        thresholds = tuple(float(x) for x in th)
        if "timeout" in evc:
            timeout = _number(cfg_path, "evaluator.timeout", evc["timeout"], 0, MAX_TIME_LIMIT)
        if evc.get("memory_limit_mb") is not None:
            resources = resources_from_dict({"memory_mb": evc["memory_limit_mb"]}, resources, cfg_path, "evaluator",
                                            table=False)
        db = cfg.get("database") or {}
        if isinstance(db, dict) and isinstance(db.get("feature_dimensions"), list):
            feature_dims = tuple(str(x) for x in db["feature_dimensions"])
        patience = cfg.get("early_stopping_patience")
        if isinstance(patience, int) and patience < 0 and \
                cfg.get("early_stopping_metric", "combined_score") == "combined_score":
            target = _number(cfg_path, "convergence_threshold", cfg.get("convergence_threshold", 0.001), -1e300, 1e300)
            solved = f"scalar >= {target!r}"
        prompt = cfg.get("prompt") or {}
        if isinstance(prompt, dict) and isinstance(prompt.get("system_message"), str):
            description = prompt["system_message"]
    directions: dict[str, str] = {}
    vt = folder / "vevo.toml"
    if vt.is_file():
        try:
            data = tomllib.loads(vt.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ProblemError(vt, "", f"invalid TOML: {e}") from None
        unknown = sorted(set(data) - VEVO_KEYS)
        if unknown:
            raise ProblemError(vt, unknown[0], f"unknown key (known: {', '.join(sorted(VEVO_KEYS))})")
        if "solved" in data:
            if not isinstance(data["solved"], str) or not _SOLVED_RE.match(data["solved"]):
                raise ProblemError(vt, "solved", f"{data['solved']!r}: expected 'none' or 'scalar >= X'")
            if data["solved"].strip() == "all":
                raise ProblemError(vt, "solved", "'all' needs test cases; use 'scalar >= X' or 'none'")
            solved = data["solved"]
        if "time_limit" in data:
            timeout = _number(vt, "time_limit", data["time_limit"], 0, MAX_TIME_LIMIT)
        if "resources" in data:
            resources = resources_from_dict(data["resources"], resources, vt)
        if "memory_limit_mb" in data:
            mem = data["memory_limit_mb"]
            if not isinstance(mem, int) or isinstance(mem, bool) or not MIN["memory_mb"] <= mem <= MAX["memory_mb"]:
                raise ProblemError(vt, "memory_limit_mb", f"expected an integer in [{MIN['memory_mb']}, "
                                   f"{MAX['memory_mb']}], got {mem!r}")
            resources = replace(resources, memory_mb=mem)
        directions = check_directions(data.get("metrics", {}), vt)
        if isinstance(data.get("description"), str):
            description = data["description"]
    if not description:
        try:
            description = ast.get_docstring(ast.parse(seed)) or ""
        except SyntaxError:
            description = ""
    return Problem(id=problem_id or folder.name, seed_code=seed, tests=[], title=problem_id or folder.name,
                   description=description, entry_point=None, time_limit=timeout, solved_rule=solved,
                   memory_limit_mb=resources.memory_mb, suite="openevolve", source=folder,
                   resources=replace(resources), metric_directions=directions,
                   openevolve=OpenEvolveSpec(evaluator=ev.resolve(), cascade=cascade, thresholds=thresholds,
                                             feature_dims=feature_dims))
