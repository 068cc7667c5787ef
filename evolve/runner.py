"""Wires a config into a running campaign: problems from the registry, a proposer backend, a sandbox pool,
the optional trainer. `start` makes a new run directory; `resume` continues one from its own config."""
from __future__ import annotations

import time
from pathlib import Path

from problems.errors import VevoError
from problems.registry import discover

from .archive import check_archive_file
from .campaign import Campaign
from .config import CampaignConfig, config_to_yaml, load_config

CONFIG_NAME = "config.yaml"


class RunError(VevoError):
    """One-line user-facing error about a run directory."""


def resolve_problems(cfg: CampaignConfig):
    """The campaign's problems: the suite and ids given; with neither, every problem in `problems_dir`."""
    reg = discover(cfg.problems_dir)
    if cfg.suite or cfg.problems:
        probs = reg.select(suite=cfg.suite, ids=cfg.problems)
    else:
        probs = [reg.problems[pid] for pid in reg.from_dirs]
        if not probs:
            why = "; ".join(str(e) for e in reg.errors[:3])
            raise RunError(f"no problems found in {', '.join(cfg.problems_dir)}" + (f" ({why})" if why else ""))
    if not probs:
        raise RunError("no problems selected")
    return probs


def backend_kwargs(cfg: CampaignConfig, spec: str | None = None) -> dict:
    """The config keys each proposer kind takes (chat, dtype, threads, vLLM's share of the GPU, vllm-ray's
    replicas and Ray cluster); ``spec``: a portfolio member's (default: the run's proposer)."""
    spec = cfg.proposer if spec is None else spec
    kind = "hf" if spec == "tiny" else spec.partition(":")[0]
    kw: dict = {}
    if kind in ("hf", "vllm", "vllm-ray", "openai") and (kind != "openai" or cfg.sampling.chat != "auto"):
        kw["chat"] = cfg.sampling.chat  # openai: no tokenizer here to decide "auto", the backend's default stays
    if kind == "hf":
        if cfg.proposer_threads:
            kw["threads"] = cfg.proposer_threads
        if cfg.proposer_dtype != "auto":
            kw["dtype"] = cfg.proposer_dtype
    if kind in ("vllm", "vllm-ray"):
        kw["dtype"] = cfg.proposer_dtype
        share = cfg.vllm_gpu_memory_utilization
        if share is None:  # vllm-ray: the trainer is on the driver, not in the engines' actors
            share = 0.5 if cfg.train.algo != "none" and not cfg.vllm_sleep and kind == "vllm" else 0.85
        kw.update(gpu_memory_utilization=share, enable_sleep_mode=cfg.vllm_sleep,
                  tensor_parallel_size=cfg.vllm_tensor_parallel_size)
        if cfg.train.algo != "none":
            kw["max_lora_rank"] = max(64, cfg.train.lora_rank)
    if kind == "vllm-ray":
        kw.update(replicas=cfg.vllm_replicas, restarts=cfg.vllm_restarts, ray_address=cfg.executor.ray_address)
    return kw


def open_campaign(cfg: CampaignConfig, run_dir: Path, progress: bool, backend=None, evaluator=None):
    from evaluators.executor import make_executor

    probs = resolve_problems(cfg)
    own_pool = evaluator is None
    if own_pool:  # first: a cluster that cannot be reached fails before a model is loaded
        hide = [str(run_dir.resolve())] + [str(p.source) for p in probs if p.source is not None and p.openevolve is None]
        evaluator = make_executor(cfg, hide)
    members = None
    if backend is None:
        from proposer.backends import make_backend

        try:
            if cfg.proposers:
                from .members import build_members

                backend, members = build_members(cfg, lambda spec: make_backend(spec, **backend_kwargs(cfg, spec)))
            else:
                backend = make_backend(cfg.proposer, **backend_kwargs(cfg))
        except BaseException:
            if own_pool:
                evaluator.close()
            raise
    on_iteration = None
    if cfg.train.algo != "none":
        from .campaign_training import CampaignTrainer

        trained = next((m.name for m in cfg.proposers if m.train), None)
        on_iteration = CampaignTrainer(cfg, run_dir, backend, member=trained)
    camp = Campaign(cfg, run_dir, probs, backend, evaluator, progress=progress, on_iteration=on_iteration,
                    members=members)
    camp._own_pool = own_pool  # type: ignore[attr-defined]
    return camp


def _finish(camp: Campaign) -> dict:
    try:
        return camp.run()
    finally:
        camp.close()
        if hasattr(camp.backend, "close"):  # before the evaluator: a ray executor's close ends the Ray cluster
            camp.backend.close()              # that vllm-ray engines may share, and they shut down cleanly first
        from .members import close_members

        close_members(camp.backend, [m for m in camp.members.values()])
        if getattr(camp, "_own_pool", False):
            camp.evaluator.close()  # type: ignore[attr-defined]


def start(cfg: CampaignConfig, progress: bool = True, **kw) -> tuple[Path, dict]:
    cfg.require_problems()
    run_dir = Path(cfg.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}")
    if (run_dir / "archive.db").exists():
        raise RunError(f"{run_dir}: already holds a run (continue it with `vevo resume {run_dir}`)")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_NAME).write_text(config_to_yaml(cfg), encoding="utf-8")
    return run_dir, _finish(open_campaign(cfg, run_dir, progress, **kw))


def resume(run_dir: str | Path, progress: bool = True, iterations: int | None = None, **kw) -> dict:
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_NAME).is_file():
        raise RunError(f"{run_dir}: not a run directory (no {CONFIG_NAME})")
    cfg = load_config(run_dir / CONFIG_NAME, {"iterations": iterations})
    if (run_dir / "archive.db").exists():  # absent: killed before the archive was created, so start it
        check_archive_file(run_dir / "archive.db")  # before the proposer and sandbox start: fail fast
    return _finish(open_campaign(cfg, run_dir, progress, **kw))
