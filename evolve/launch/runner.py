"""Wires a config into a running campaign: problems from the registry, a proposer backend, a sandbox pool,
the optional trainer. `start` makes a new run directory; `resume` continues one from its own config."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from evaluators.executor import ExecutorSpec
from problems.errors import VevoError
from problems.registry import discover

from .. import liveness
from ..archive import archive_path, check_archive_file
from ..config.schema import CampaignConfig, config_to_yaml, load_run_config, stored_config
from ..progress import Reporter, as_reporter
from ..search.campaign import Campaign

CONFIG_NAME = "config.yaml"


class RunError(VevoError):
    """One-line user-facing error about a run directory."""


def resolve_problems(cfg: CampaignConfig, skipped: list[str] | None = None):
    """The campaign's problems: the suite and ids given; with neither, every problem in `problems_dir` (then
    ``skipped``, when given, gets one line per folder there that could not be loaded)."""
    reg = discover(cfg.problems_dir)
    if cfg.suite or cfg.problems:
        probs = reg.select(suite=cfg.suite, ids=cfg.problems)
    else:
        probs = [reg.problems[pid] for pid in reg.from_dirs]
        if skipped is not None:
            roots = [Path(d).resolve() for d in cfg.problems_dir]
            skipped += [str(e) for e in reg.errors if _under(getattr(e, "where", ""), roots)]
            skipped += [f"{folder}: {why}" for folder, why in reg.skipped if _under(folder, roots)]
        if not probs:
            why = "; ".join(str(e) for e in reg.errors[:3])
            raise RunError(f"no problems found in {', '.join(cfg.problems_dir)}" + (f" ({why})" if why else ""))
    if not probs:
        raise RunError("no problems selected")
    return probs


def _under(path: object, roots: list[Path]) -> bool:
    try:
        p = Path(str(path)).resolve()
    except (OSError, ValueError):
        return False
    return any(p == r or r in p.parents for r in roots)


def backend_kwargs(cfg: CampaignConfig, spec: str | None = None, options: dict | None = None) -> dict:
    """The keyword arguments of a proposer backend: its options (``proposer.options``, or a portfolio member's)
    and the run's shared settings, turned into arguments by the backend's own options model
    (proposer/backends/options.py); ``spec``: a portfolio member's (default: the run's proposer)."""
    from proposer.backends import backend_kwargs as from_options

    if spec is None:
        spec, options = cfg.proposer.spec, cfg.proposer.options
    return from_options(spec, options, cfg.backend_run())


def executor_spec(cfg: CampaignConfig) -> ExecutorSpec:
    """The run config's ``executor`` section as what evaluators/ builds an executor from."""
    ex = cfg.executor
    return ExecutorSpec(kind=ex.kind, workers=ex.workers, ray_address=ex.ray_address,
                        unsafe_no_sandbox=ex.unsafe_no_sandbox)


def open_campaign(cfg: CampaignConfig, run_dir: Path, progress: bool | Reporter, backend=None, evaluator=None):
    from evaluators.executor import make_executor

    rep = as_reporter(progress)
    rep.phase("loading problems")
    skipped: list[str] = []
    probs = resolve_problems(cfg, skipped)
    for line in skipped:  # a broken problem folder is named, never silently dropped
        print(f"warning: skipped problem {line}", file=sys.stderr, flush=True)
    own_pool = evaluator is None
    if own_pool:  # first: a cluster that cannot be reached fails before a model is loaded
        rep.phase(f"starting the sandbox ({cfg.executor.kind} executor, {cfg.executor.workers} workers)")
        hide = [str(run_dir.resolve())] + [str(p.source) for p in probs if p.source is not None and p.openevolve is None]
        evaluator = make_executor(executor_spec(cfg), hide)
    members = None
    if backend is None:
        from proposer.backends import make_backend

        rep.phase("loading proposer" + (f"s {', '.join(m.name for m in cfg.proposers)}" if cfg.proposers
                                        else f" {cfg.proposer.spec}"))
        try:
            if cfg.proposers:
                from .members import build_members

                backend, members = build_members(
                    cfg, lambda spec, options: make_backend(spec, **backend_kwargs(cfg, spec, options)))
            else:
                backend = make_backend(cfg.proposer.spec, **backend_kwargs(cfg))
        except BaseException:
            if own_pool:
                evaluator.close()
            raise
    trainer = None
    if cfg.train.algo != "none":
        from ..training.campaign import CampaignTrainer

        trained = next((m.name for m in cfg.proposers if m.train), None)
        rep.phase(f"preparing the trainer ({cfg.train.algo}, {'LoRA' if cfg.train.lora else 'full'})")
        trainer = CampaignTrainer(cfg, run_dir, backend, member=trained)
    camp = Campaign(cfg, run_dir, probs, backend, evaluator, progress=rep, trainer=trainer, members=members)
    camp.archive.set_meta("skipped_problems", json.dumps(skipped))
    if camp.reach:  # the tiny proposer on strings or floats: said before the first iteration, not after a stall
        print(f"warning: {camp.reach}", file=sys.stderr, flush=True)
    camp._own_pool = own_pool  # type: ignore[attr-defined]
    record_isolation(camp, rep)
    return camp


def record_isolation(camp: Campaign, rep: Reporter) -> None:
    """The sandbox this run's candidates get: one line on stderr at the start (not with --quiet), and the run's
    metadata (`runs show`; a resumed run records the sandbox of its latest start)."""
    try:
        iso = getattr(camp.evaluator, "isolation", None)
    except Exception:  # an executor that cannot say (a remote cluster gone) must not stop the run here
        iso = None
    if not isinstance(iso, dict) or not iso:
        return
    camp.archive.set_meta("isolation", json.dumps(iso))
    if rep.mode != "quiet":
        print(f"vevo: sandbox: {iso.get('summary') or iso.get('filesystem')}", file=sys.stderr)


def _finish(camp: Campaign, progress: bool | Reporter) -> dict:
    try:
        with liveness.running(camp.run_dir):  # `vevo ui` tells running from killed by it
            return camp.run()
    finally:
        if camp.reporter is not progress:  # made here from a bool: ours to close
            camp.reporter.close()
        camp.close()
        if hasattr(camp.backend, "close"):  # before the evaluator: a ray executor's close ends the Ray cluster
            camp.backend.close()              # that vllm-ray engines may share, and they shut down cleanly first
        from .members import close_members

        close_members(camp.backend, [m for m in camp.members.values()])
        if getattr(camp, "_own_pool", False):
            camp.evaluator.close()  # type: ignore[attr-defined]


def start(cfg: CampaignConfig, progress: bool | Reporter = True, **kw) -> tuple[Path, dict]:
    cfg.require_problems()
    run_dir = Path(cfg.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    if archive_path(run_dir).exists():
        raise RunError(f"{run_dir}: already holds a run (continue it with `vevo resume {run_dir}`)")
    made = [d for d in (run_dir, *run_dir.parents) if not d.exists()]  # folders this start creates
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_NAME).write_text(config_to_yaml(cfg), encoding="utf-8")
    try:
        camp = open_campaign(cfg, run_dir, progress, **kw)
    except BaseException:  # nothing ran (bad proposer, no problems, ...): leave no half-made run folder behind
        if not archive_path(run_dir).exists():
            (run_dir / CONFIG_NAME).unlink(missing_ok=True)
            for d in made:  # innermost first; one holding anything else stays
                if any(d.iterdir()):
                    break
                d.rmdir()
        raise
    return run_dir, _finish(camp, progress)


def resume(run_dir: str | Path, progress: bool | Reporter = True, iterations: int | None = None,
           budget: dict | None = None, **kw) -> dict:
    """Continue a run from its own config; ``iterations`` / ``budget`` ({kind: limit}, search.budget) move its
    stop rules for this start (as `vevo resume --iterations` / ``--budget-*``)."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_NAME).is_file():
        raise RunError(f"{run_dir}: not a run directory (no {CONFIG_NAME})")
    cfg = load_run_config(run_dir / CONFIG_NAME, {"search.iterations": iterations,
                                                  **{f"search.budget.{k}": v for k, v in (budget or {}).items()}})
    if archive_path(run_dir).exists():  # absent: killed before the archive was created, so start it
        check_archive_file(archive_path(run_dir))  # before the proposer and sandbox start: fail fast
    return _finish(open_campaign(cfg, run_dir, progress, **kw), progress)


SEEDS_NAME = "seeds.yaml"  # in a seeds folder: the seeds asked for and the config they share


def start_seeds(cfg: CampaignConfig, seeds: list[int], progress: bool | Reporter = True):
    """One campaign per seed into ``cfg.out/seed-N/``, one after another (each already keeps the cores busy:
    sandbox workers plus the proposer), so every seed's run equals ``vevo run --seed N`` alone. Yields
    (seed, run folder, summary) as each ends; `resume_seeds` continues an interrupted folder."""
    import yaml

    from ..analysis.arms import seed_dir

    cfg.require_problems()
    if not cfg.out:
        raise RunError("--seeds needs --out D (each seed's run goes to D/seed-N)")
    out = Path(cfg.out)
    for s in seeds:
        if archive_path(seed_dir(out, s)).exists():
            raise RunError(f"{seed_dir(out, s)}: already holds a run (continue the folder with `vevo resume {out}`)")
    out.mkdir(parents=True, exist_ok=True)
    (out / SEEDS_NAME).write_text(yaml.safe_dump({"seeds": list(seeds), "config": cfg.model_dump(mode="json")},
                                                 sort_keys=False), encoding="utf-8")
    yield from _seed_loop(cfg, seeds, out, progress, resuming=False)


def resume_seeds(folder: str | Path, progress: bool | Reporter = True, iterations: int | None = None,
                 budget: dict | None = None):
    """Continue every seed of a seeds folder: resume those started, start those never reached."""
    import yaml

    folder = Path(folder)
    try:
        spec = yaml.safe_load((folder / SEEDS_NAME).read_text(encoding="utf-8"))
        seeds = [int(s) for s in spec["seeds"]]
        cfg = stored_config(spec["config"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, VevoError) as e:
        raise RunError(f"{folder / SEEDS_NAME}: cannot read the seeds folder's plan ({e})") from None
    if iterations is not None:
        cfg.search.iterations = iterations
    for k, v in (budget or {}).items():
        if v is not None:
            setattr(cfg.search.budget, k, v)
    cfg.out = str(folder)
    yield from _seed_loop(cfg, seeds, folder, progress, resuming=True, iterations=iterations, budget=budget)


SEED_RESULT = "result.json"  # in each seed's run folder of a seeds folder: `seed_result`, written as it ends


def seed_result(seed: int, summary: dict) -> dict:
    """One seed's outcome as kept in its folder's result.json: the totals, what stopped it (evolve/search/budget.py)
    and, per problem, the iteration of its first solve (None: never) and its best scalar, so per-problem
    statistics need no archive."""
    best = summary.get("best") or {}
    first = summary.get("solved_problems") or {}
    probs = sorted(set(best) | set(first))
    return {"seed": seed, **{k: summary.get(k) for k in ("iterations", "evaluations", "solved", "problems",
                                                          "stopped_by", "spent", "budgets")},
            "per_problem": {p: {"first_solve": first.get(p), "best": (best.get(p) or {}).get("scalar")}
                            for p in probs}}


def _seed_loop(cfg: CampaignConfig, seeds: list[int], out: Path, progress, resuming: bool, iterations=None,
               budget=None):
    from ..analysis.arms import seed_dir

    rep = as_reporter(progress)
    try:
        for i, s in enumerate(seeds):
            rep.context = {"seed": s}
            rep.prefix = f"seed {s} ({i + 1}/{len(seeds)}): "
            run_dir = seed_dir(out, s)
            if resuming and (run_dir / CONFIG_NAME).is_file():
                summary = resume(run_dir, rep, iterations=iterations, budget=budget)
            else:
                one = cfg.model_copy(deep=True)
                one.seed, one.out = s, str(run_dir)
                run_dir, summary = start(one, rep)
            (run_dir / SEED_RESULT).write_text(json.dumps(seed_result(s, summary)) + "\n", encoding="utf-8")
            yield s, run_dir, summary
    finally:
        rep.context, rep.prefix = {}, ""
        if rep is not progress:
            rep.close()


def is_seeds_folder(path: str | Path) -> bool:
    return (Path(path) / SEEDS_NAME).is_file() and not (Path(path) / CONFIG_NAME).is_file()
