"""A run folder written before the config had its proposer / search / executor sections: `vevo resume`, `runs
show`, curves, the ui's status and `report` read it through the one converter (evolve/config/legacy.py). The
folder is a real run (replay proposer, real sandbox, real SQLite) whose config.yaml and archive metadata are put
back into the shape the earlier version wrote."""
from __future__ import annotations

import json

import yaml

from evolve.archive import Archive
from evolve.config.schema import CampaignConfig, load_config
from evolve.config.legacy import legacy_keys, upgrade
from evolve.launch.runner import resume, start
from problems.suites import SUITES
from tests.campaign_helpers import pbe_replay, vevo

PROBS = SUITES["pbe"]()[:2]


def _old_shape(new: dict) -> dict:
    """A config mapping as the earlier version wrote it (the flat top level, selection with capacity and
    migration, sandbox, train.covrl_*), from today's."""
    s, p, t, ex = new["search"], new["proposer"], dict(new["train"]), new["executor"]
    covrl = t.pop("covrl")
    sel = dict(s["selection"], island_capacity=s["island_capacity"], migration_every=s["migration"]["every"],
               migration_count=s["migration"]["count"])
    return {"problems": new["problems"], "suite": new["suite"], "problems_dir": new["problems_dir"],
            "proposer": p["spec"], "proposers": [], "proposer_threads": p["threads"], "proposer_dtype": p["dtype"],
            "vllm_gpu_memory_utilization": None, "vllm_sleep": False, "vllm_tensor_parallel_size": 1,
            "vllm_replicas": 1, "vllm_restarts": 1, "iterations": s["iterations"], "islands": s["islands"],
            "answers": s["answers"], "group": s["group"], "seed": new["seed"], "out": new["out"],
            "retire_solved": s["retire_solved"], "pipeline_depth": s["pipeline_depth"],
            "archive_sync": new["archive_sync"], "selection": sel, "sampling": new["sampling"],
            "train": {**t, **{f"covrl_{k}": v for k, v in covrl.items()}},
            "sandbox": {k: ex[k] for k in ("workers", "eval_timeout", "unsafe_no_sandbox")},
            "executor": {"kind": ex["kind"], "ray_address": ex["ray_address"]}, "portfolio": new["portfolio"]}


def test_the_old_shape_round_trips_through_the_converter():
    cfg = load_config(None, {"search.migration.every": 3, "search.island_capacity": 7, "train.covrl.alpha": 0.2,
                             "executor.workers": 3, "proposer.threads": 2})
    old = _old_shape(cfg.model_dump(mode="json"))
    assert ("selection.migration_every", "search.migration.every") in legacy_keys(old)
    # keys the earlier version did not have (search.strategy, search.top_k) come back as their defaults
    assert CampaignConfig.model_validate(upgrade(old)).model_dump(mode="json") == cfg.model_dump(mode="json")
    assert upgrade(cfg.model_dump(mode="json")) == cfg.model_dump(mode="json")  # today's shape: unchanged
    assert legacy_keys(cfg.model_dump(mode="json")) == []


def test_an_old_run_folder_resumes_and_is_read_by_the_tools(tmp_path):
    run = tmp_path / "run"
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    cfg = load_config(None, {"problems": [p.id for p in PROBS], "proposer.spec": f"replay:{replay}",
                             "search.iterations": 2, "search.islands": 1, "search.answers": 2, "search.group": 2,
                             "search.retire_solved": False, "executor.workers": 1, "out": str(run)})
    start(cfg, progress=False)
    old = _old_shape(cfg.model_dump(mode="json"))
    (run / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    with Archive(run / "archive.db") as a:
        a.set_meta("config", json.dumps(old))

    # read as they are: the budget is the old top-level iterations
    from evolve.analysis.arms import run_metrics
    from evolve.ui.store import RunStore

    assert run_metrics(run)["solved"] >= 0
    store = RunStore("old", run)
    assert store.meta()["config"]["search"]["iterations"] == 2
    assert store.overview()["status"] == "finished"
    show = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert show["iterations"] == 2
    report = tmp_path / "report"
    vevo("report", f"old={run}", "--out", str(report))
    assert (report / "index.html").is_file()

    # a user handing the old file to `vevo run` is told where each key went
    r = vevo("run", str(run / "config.yaml"), "--out", str(tmp_path / "again"), check=False)
    assert r.returncode == 2 and "'iterations' is now 'search.iterations'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    # resume continues it under today's config, the folder's own file untouched
    summary = resume(run, progress=False, iterations=4)
    assert summary["iterations"] == 4
    assert yaml.safe_load((run / "config.yaml").read_text()) == old
    with Archive(run / "archive.db", readonly=True) as a:
        assert json.loads(a.get_meta("config"))["search"]["iterations"] == 4
        assert a.last_iteration() == 4
