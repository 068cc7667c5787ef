"""Periodic VPO updates inside real campaigns with the bundled tiny proposer (real model, real gradients)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from evolve.archive import Archive
from proposer.backends import TINY_CHECKPOINT
from tests.campaign_helpers import ROOT, vevo

pytestmark = pytest.mark.skipif(not (TINY_CHECKPOINT / "config.json").is_file(), reason="no bundled tiny checkpoint")

CFG = """
suite: pbe-train
proposer: {spec: tiny}
search: {iterations: 8, islands: 1, answers: 2, group: 2, retire_solved: false}
sampling: {max_tokens: 160}
executor: {workers: 2}
seed: 5
train:
  algo: vpo
  every: 2
  batch: 2
  lr: 0.001
  movement_every: 1
"""  # train last: a test's extra keys (indented) continue its section


def _cfg(tmp_path: Path, extra: str = "", group: int = 2) -> Path:
    """CFG with the trained proposer's group pinned (default 2: these tests check mechanics, not learning, and the
    shipped train.group 8 would make each of them ~4x slower)."""
    p = tmp_path / "cfg.yaml"
    p.write_text(CFG + f"  group: {group}\n" + extra)
    return p


@pytest.mark.parametrize("overlap, train_lag", [(True, 1), (False, 1), (True, 2)])
def test_campaign_trains_and_records_policy_versions(tmp_path, overlap, train_lag):
    run = tmp_path / "run"
    vevo("run", str(_cfg(tmp_path, f"  overlap: {str(overlap).lower()}\n  lag: {train_lag}\n")), "--out", str(run),
         "--quiet", timeout=900)
    with Archive(run / "archive.db", readonly=True) as a:
        rows = a.training_rows()
        groups = a.recent_groups(100)
    trained = [r for r in rows if "loss" in r.data]
    assert [r.step for r in rows] == [2, 4, 6, 8]
    assert trained, "no training step had a non-zero advantage"
    for r in rows:
        assert {"mean_set_reward", "mean_best_answer", "reward_diversity", "groups", "staleness_mean"} <= set(r.data)
        assert ("train_wait_seconds" in r.data) == (overlap and bool(r.data["samples"]))
    for r in trained:
        assert {"loss", "kl", "clip_frac", "grad_norm", "policy_kl", "mean_abs_dlogp", "greedy_changed"} <= set(r.data)
        assert r.data["policy_kl"] >= 0
    # which policy made a batch follows from the iteration numbers alone: at pipeline depth 1 the update at
    # iteration d is published after d + 1 was generated; overlapped, it runs while d + 2 is generated and is
    # published at the commit of d + 1 (train.lag 2: of d + 2, while d + 3 is generated)
    lag = 2 + train_lag if overlap else 2
    for g in groups:
        expect = max((r.policy_version for r in rows if r.step + lag <= g.iteration), default=0)
        assert {c.policy_version for c in g.completions} == {expect}, (g.iteration, lag)
    st = json.loads((run / "trainer" / "state.json").read_text())
    assert st["version"] == rows[-1].policy_version
    assert (run / "trainer" / st["snapshot"] / "adapter" / "adapter_config.json").is_file()
    # the newest snapshot and the one before it (the last checkpoint may name its adapter) are kept
    snaps = sorted(p.name for p in (run / "trainer").glob("step-*"))
    assert snaps == [f"step-6-v{rows[-2].policy_version}", st["snapshot"]]
    assert all(r.data["samples"] == r.data["completions"] for r in rows)  # zero advantages are not dropped


def _default_schedule_cfg(tmp_path: Path) -> tuple[Path, int]:
    """CFG with the shipped training schedule (no train.every / train.batch / train.lr, no G: a step after every
    iteration on its group of search.group's 8), long enough for two updates; and the iteration of the first update."""
    from evolve.config.schema import CampaignConfig

    every = CampaignConfig().train.every
    text = "".join(line + "\n" for line in CFG.strip().splitlines()
                   if not line.startswith(("  every", "  batch", "  lr")))
    p = tmp_path / "cfg.yaml"
    p.write_text(text.replace("iterations: 8", f"iterations: {2 * every + 2}").replace(" group: 2,", ""))
    return p, every


@pytest.mark.parametrize("schedule", ["replay+novel", "shipped default"])
def test_killed_training_campaign_resumes_same_policy_and_optimizer(tmp_path, schedule):
    ref, run = tmp_path / "ref", tmp_path / "killed"
    if schedule == "shipped default":  # the schedule `--train vpo` runs with, unchanged
        cfg, kill_after = _default_schedule_cfg(tmp_path)
    else:  # replay-buffer training: older groups drawn by a seeded RNG, novelty-shaped rewards, both resume exactly
        cfg, kill_after = _cfg(tmp_path, "  replay_older: 0.5\n  reward: novel\n"), 2
    vevo("run", str(cfg), "--out", str(ref), "--quiet", timeout=900)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", str(cfg), "--out", str(run), "--quiet"],
                         cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    state = run / "trainer" / "state.json"
    end = time.time() + 600
    while time.time() < end and p.poll() is None:
        if state.is_file() and json.loads(state.read_text())["iteration"] >= kill_after:
            break
        time.sleep(0.05)
    assert p.poll() is None, p.stderr.read().decode()[-2000:]
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    at_kill = json.loads(state.read_text())
    opt_at_kill = torch.load(run / "trainer" / at_kill["snapshot"] / "optimizer.pt", weights_only=False)
    vevo("resume", str(run), "--quiet", timeout=900)
    with Archive(ref / "archive.db", readonly=True) as a, Archive(run / "archive.db", readonly=True) as b:
        ra, rb = a.training_rows(), b.training_rows()
        assert [(r.step, r.policy_version) for r in ra] == [(r.step, r.policy_version) for r in rb]
        assert [r.data.get("staleness_mean") for r in ra] == [r.data.get("staleness_mean") for r in rb]
        assert [r.data.get("mean_set_reward") for r in ra] == [r.data.get("mean_set_reward") for r in rb]
        va = [c.policy_version for g in a.recent_groups(100) for c in g.completions]
        vb = [c.policy_version for g in b.recent_groups(100) for c in g.completions]
        assert va == vb
        if schedule == "shipped default":  # the new schedule: a step per iteration, each on that iteration's 8
            assert {len(g.completions) for g in a.recent_groups(100)} == {8}
            assert [r.step for r in ra] == [1, 2, 3, 4] and all(r.data["groups"] == 1 for r in ra)
    def final_opt(r: Path) -> dict:
        return torch.load(r / "trainer" / json.loads((r / "trainer" / "state.json").read_text())["snapshot"] /
                          "optimizer.pt", weights_only=False)
    oa, ob = final_opt(ref), final_opt(run)
    assert oa["version"] == ob["version"]  # optimizer updates counted across the kill
    sa, sb = oa["optimizer"]["state"], ob["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for k in sa:  # Adam's step counter continued from the state saved before the kill
        assert torch.equal(sa[k]["step"], sb[k]["step"])
    # the resumed run started from exactly the optimizer state that was saved before the kill
    steps_at_kill = int(opt_at_kill["optimizer"]["state"][0]["step"])
    assert 1 <= steps_at_kill < int(sb[0]["step"])
    assert_same_policy(ref, run)


def assert_same_policy(ref: Path, run: Path, every_snapshot: bool = False) -> None:
    """The final trained weights of two runs are bit for bit the same (``every_snapshot``: and every snapshot
    both runs kept, by name)."""
    def weights(r: Path, snap: str) -> dict:
        return torch.load(r / "trainer" / snap / "weights.pt", weights_only=True)
    snaps = [json.loads((ref / "trainer" / "state.json").read_text())["snapshot"]]
    if every_snapshot:
        snaps = sorted(p.name for p in (ref / "trainer").glob("step-*") if not p.name.endswith(".tmp"))
        assert snaps == sorted(p.name for p in (run / "trainer").glob("step-*") if not p.name.endswith(".tmp"))
        assert len(snaps) == 2
    for snap in snaps:
        wa, wb = weights(ref, snap), weights(run, snap)
        assert wa.keys() == wb.keys() and wa
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


_KILL_BEFORE_PUBLISHED = """
import os, sys
from evolve.training import campaign as ct
wait, settle = ct.CampaignTrainer._wait, ct.CampaignTrainer._settle
def killing_wait(self, through=None):
    f = self._flights[0] if self._flights else None
    if {where!r} == "wait" and f is not None and f.iteration == {at} and (through is None or f.iteration <= through):
        os._exit(9)  # the archive has committed iteration {at} + lag; the step started at {at} never published
    return wait(self, through)
def killing_settle(self, camp, f):
    if {where!r} == "settle" and f.iteration == {at}:
        os._exit(9)  # the step at {at} is done and the next one sent to the learner process, but not published
    return settle(self, camp, f)
ct.CampaignTrainer._wait, ct.CampaignTrainer._settle = killing_wait, killing_settle
from evolve.cli import main
sys.exit(main(["run", {cfg!r}, "--out", {out!r}, "--quiet"]))
"""


@pytest.mark.parametrize("where, train_lag", [("wait", 1), ("settle", 1), ("wait", 2), ("settle", 2)])
def test_overlapped_step_killed_before_it_is_published_resumes_exactly(tmp_path, where, train_lag):
    """The kills the learner thread adds: after iteration d + lag is committed, before the step started at d is
    waited for ("wait"), or once it is done and the next step sent to the learner process, before it is published
    ("settle"). Resume redoes that step on the archive as of d (not d + lag), starts again the steps the run had
    in flight (train.lag 2: the one started at d + 1, then d + 2), then goes on as the uninterrupted run."""
    cfg = _cfg(tmp_path, f"  every: 1\n  batch: 1\n  probe_every: 2\n  probe_problems: 2\n  lag: {train_lag}\n")
    ref, run = tmp_path / "ref", tmp_path / "killed"
    vevo("run", str(cfg), "--out", str(ref), "--quiet", timeout=900)
    code = _KILL_BEFORE_PUBLISHED.format(at=4, cfg=str(cfg), out=str(run), where=where)
    p = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 9, p.stderr[-2000:]
    with Archive(run / "archive.db", readonly=True) as b:
        assert max(r.step for r in b.training_rows()) == 3  # the step at 4 never published
        assert b.checkpoint()[0] == 4 + train_lag
    vevo("resume", str(run), "--quiet", timeout=900)
    with Archive(ref / "archive.db", readonly=True) as a, Archive(run / "archive.db", readonly=True) as b:
        ra, rb = a.training_rows(), b.training_rows()
        def key(r):
            return (r.step, r.policy_version, r.data.get("mean_set_reward"), r.data.get("loss"),
                    r.data.get("probe_own"), r.data.get("probe_heldout"), r.data.get("probe_own_before"))
        assert [key(r) for r in ra] == [key(r) for r in rb]
        # probes ran on the learner thread, of the policy each step made (versions 2, 4, ...), and were redone
        assert [r.policy_version for r in ra if "probe_own" in r.data] == [2, 4, 6, 8]
        assert [c.policy_version for g in a.recent_groups(100) for c in g.completions] == \
               [c.policy_version for g in b.recent_groups(100) for c in g.completions]
        assert [c.token_ids for g in a.recent_groups(100) for c in g.completions] == \
               [c.token_ids for g in b.recent_groups(100) for c in g.completions]
        # the run's clock goes on across the kill: the step redone at the resume is stamped after the last commit
        # before the kill, and every later row after it (a clock restarted at 0 would stamp it below step 3's)
        walls = [r.data["wall_seconds"] for r in rb]
        before_kill = max(m.data["wall_seconds"] for m in b.metrics_rows() if m.iteration <= 4 + train_lag)
        assert walls == sorted(walls) and walls[3] >= before_kill > walls[2]
    assert_same_policy(ref, run)
    for r in (ref, run):  # and the same export, program for program
        vevo("export", str(r), "--format", "csv", "--out", str(r / "export.csv"))
    assert (ref / "export.csv").read_text() == (run / "export.csv").read_text()


_KILL_WITH_PROBES_UNDER_WAY = """
import os, sys
from evolve.training import campaign as ct
settle = ct.CampaignTrainer._settle
def held(self, camp, wait=False):  # the probes come back but are never added to their rows: as if killed first
    if self._process is not None:
        self._process.probe_results(wait)
def killing_settle(self, camp, f):
    if f.iteration == {at}:
        os._exit(9)
    return settle(self, camp, f)
ct.CampaignTrainer._collect, ct.CampaignTrainer._settle = held, killing_settle
from evolve.cli import main
sys.exit(main(["run", {cfg!r}, "--out", {out!r}, "--quiet"]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="probes in the idle time need the learner process")
def test_probes_under_way_in_the_learners_idle_time_at_a_kill_are_taken_again_at_resume(tmp_path):
    """With the learner process the probe of a step's policy, and the baseline probe of policy v0, are sampled in
    the child's idle time and their values added to the rows later. Killed with four such probes never added (v0,
    and versions 2, 4, 6): their snapshots are kept past the two newest (v0's written for it), and the resume takes
    them again on those policies, the same values as the uninterrupted run's; the run goes on exactly as that one."""
    cfg = _cfg(tmp_path, "  every: 1\n  batch: 1\n  probe_every: 2\n  probe_problems: 2\n")
    ref, run = tmp_path / "ref", tmp_path / "killed"
    vevo("run", str(cfg), "--out", str(ref), "--quiet", timeout=900)
    code = _KILL_WITH_PROBES_UNDER_WAY.format(at=7, cfg=str(cfg), out=str(run))
    p = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 9, p.stderr[-2000:]
    with Archive(run / "archive.db", readonly=True) as b:
        rows = b.training_rows()
    assert [r.step for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r.step for r in rows if r.data.get("probe_deferred")] == [2, 4, 6]
    assert [r.step for r in rows if r.data.get("probe_deferred_before")] == [1]
    assert not any("probe_own" in r.data or "probe_own_before" in r.data for r in rows)
    kept = sorted(p.name for p in (run / "trainer").glob("step-*"))
    assert kept == ["step-0-v0", "step-2-v2", "step-4-v4", "step-5-v5", "step-6-v6"]  # the two newest, the probes'
    vevo("resume", str(run), "--quiet", timeout=900)
    with Archive(ref / "archive.db", readonly=True) as a, Archive(run / "archive.db", readonly=True) as b:
        def key(r):
            return (r.step, r.policy_version, r.data.get("loss"), r.data.get("probe_own"),
                    r.data.get("probe_heldout"), r.data.get("probe_own_before"))
        assert [key(r) for r in a.training_rows()] == [key(r) for r in b.training_rows()]
        assert [r.policy_version for r in b.training_rows() if "probe_own" in r.data] == [2, 4, 6, 8]
        assert [c.token_ids for g in a.recent_groups(100) for c in g.completions] == \
               [c.token_ids for g in b.recent_groups(100) for c in g.completions]
    assert_same_policy(ref, run, every_snapshot=True)  # and the probes' snapshots are gone again


_COUNT_PROCESS_STEPS = """
import json, sys, time
from proposer.training import learner_process as lp
calls = []
step = lp.LearnerProcess.step
from evolve.training import campaign as ct
settle = ct.CampaignTrainer._settle
def recorded(self, camp, f):  # published: whether the next step was launched before this one was published
    launched = bool(self._flights) and self._flights[-1].iteration > f.iteration
    calls.append(("published", f.iteration, launched))
    if launched:  # a slow publication: the next step's reply comes meanwhile, and must wait for it (the gate)
        time.sleep({delay})
    return settle(self, camp, f)
ct.CampaignTrainer._settle = recorded
def counted(self, trainer, samples, refs=None, gate=None):
    calls.append((self.proc.pid, refs is not None))
    out = step(self, trainer, samples, refs=refs, gate=gate)
    time.sleep({delay})  # a learner slower than the loop: the loop's next commit finds the step still running
    return out
lp.LearnerProcess.step = counted
from evolve.cli import main
rc = main(["run", {cfg!r}, "--out", {out!r}, "--quiet"])
open({count!r}, "w").write(json.dumps(calls))
sys.exit(rc)
"""


def test_the_learner_process_trains_as_the_learner_thread(tmp_path):
    """train.learner process (the default) and thread: the same steps, statistics, samples, final weights and
    export, bit for bit; and the process run really stepped in its forked child, one child for the run, the loop
    taking the reference log-probs of most steps ahead (its learner held back so that the loop finds it busy), and
    publishing each step after it sent the next (its publication held back, so that the next step's reply comes
    first and must wait for it: the snapshot written meanwhile holds the step's own weights)."""
    runs = {}
    for learner in ("process", "thread"):
        cfg = _cfg(tmp_path, f"  every: 1\n  batch: 1\n  probe_every: 4\n  probe_problems: 2\n  learner: {learner}\n")
        cfg = cfg.rename(tmp_path / f"{learner}.yaml")
        runs[learner] = run = tmp_path / learner
        count = tmp_path / f"{learner}.json"
        code = _COUNT_PROCESS_STEPS.format(cfg=str(cfg), out=str(run), count=str(count), delay=1.0)
        p = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-2000:]
        calls = json.loads(count.read_text())
        settled = [c[1:] for c in calls if c[0] == "published"]
        calls = [c for c in calls if c[0] != "published"]
        if learner == "process":
            assert len(calls) == 8 and len({pid for pid, _ in calls}) == 1  # every step, in one child
            assert not calls[0][1] and sum(ahead for _, ahead in calls) >= 5, calls  # the first has no step before
            # each step but the last published after the next one was sent to the child (the last at the end)
            assert settled == [[it, it < 8] for it in range(1, 9)], settled
        else:
            assert calls == [] and settled == [[it, False] for it in range(1, 9)], settled
    ref, run = runs["thread"], runs["process"]
    with Archive(ref / "archive.db", readonly=True) as a, Archive(run / "archive.db", readonly=True) as b:
        def key(r):
            return (r.step, r.policy_version, r.data.get("loss"), r.data.get("grad_norm"), r.data.get("policy_kl"),
                    r.data.get("probe_own"), r.data.get("probe_own_before"))
        assert [key(r) for r in a.training_rows()] == [key(r) for r in b.training_rows()]
        assert [c.token_ids for g in a.recent_groups(100) for c in g.completions] == \
               [c.token_ids for g in b.recent_groups(100) for c in g.completions]
    assert_same_policy(ref, run, every_snapshot=True)  # the one before the last was written as the last ran
    for r in (ref, run):
        vevo("export", str(r), "--format", "csv", "--out", str(r / "export.csv"))
    assert (ref / "export.csv").read_text() == (run / "export.csv").read_text()


_CHECK_LAG_ORDER = """
import json, sys, time
from evolve.training import campaign as ct
from proposer.backends.hf import HFBackend
seen, trainers = [], []
init, call, save, pin = ct.CampaignTrainer.__init__, ct.CampaignTrainer.__call__, ct.CampaignTrainer._save, \\
    HFBackend.pin_sampling
def kept(self, *a, **kw):
    init(self, *a, **kw)
    trainers.append(self)
def slow_hook(self, camp, iteration):  # a loop slower than the learner: each reply comes before the next commit
    time.sleep(0.5)
    return call(self, camp, iteration)
def checked_save(self, iteration, stats):  # the weights published: the updates through this step, none after
    seen.append(["save", iteration, self.version, self.trainer.version])
    return save(self, iteration, stats)
def checked_pin(self):  # the weights pinned for sampling: the published policy's
    t = trainers[0]
    seen.append(["pin", t.last_iteration, t.version, t.trainer.version])
    return pin(self)
ct.CampaignTrainer.__init__, ct.CampaignTrainer.__call__, ct.CampaignTrainer._save = kept, slow_hook, checked_save
HFBackend.pin_sampling = checked_pin
from evolve.cli import main
rc = main(["run", {cfg!r}, "--out", {out!r}, "--quiet"])
open({seen!r}, "w").write(json.dumps(seen))
sys.exit(rc)
"""


def test_with_two_steps_in_flight_each_state_comes_in_only_once_the_one_before_is_published(tmp_path):
    """train.lag 2, the learner faster than the loop (each hook held back): the child's reply to a step comes
    while the step before it is still unpublished, and its state must wait (its gate). So every snapshot holds
    the updates through its own step and no later one, and every pin for sampling holds the published policy."""
    cfg = _cfg(tmp_path, "  every: 1\n  batch: 1\n  probe_every: 0\n  lag: 2\n")
    seen = tmp_path / "seen.json"
    code = _CHECK_LAG_ORDER.format(cfg=str(cfg), out=str(tmp_path / "run"), seen=str(seen))
    p = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    seen = json.loads(seen.read_text())
    saves = [s for s in seen if s[0] == "save"]
    assert [s[1] for s in saves] == list(range(1, 9))  # every step published, in order
    assert all(published == updates for _, _, published, updates in seen), seen  # one update a step


def test_every_training_knob_reaches_the_trainer():
    from evolve.config.schema import ConfigError, load_config
    from evolve.launch.runner import backend_kwargs
    from evolve.training.setup import training_config

    cfg = load_config(None, {"train.algo": "vpo", "train.clip_eps": 0.1, "train.kl_beta": 0.0, "train.micro_batch": 2,
                             "train.minibatch": 4, "train.max_seq_len": 512, "train.grad_checkpointing": True,
                             "train.epochs": 2, "sampling.temperature": 0.7, "sampling.top_p": 0.95,
                             "train.is_cap": 3.0, "proposer.spec": "vllm:/m", "sampling.chat": True,
                             "train.lora_rank": 128})
    tc = training_config(cfg)
    assert (tc.clip_eps, tc.kl_beta, tc.micro_batch, tc.minibatch, tc.max_seq_len, tc.gradient_checkpointing,
            tc.epochs, tc.temperature, tc.top_p, tc.is_cap) == (0.1, 0.0, 2, 4, 512, True, 2, 0.7, 0.95, 3.0)
    assert training_config(load_config(None, {"train.algo": "vpo", "train.batch": 3, "train.group": 2})).minibatch == 6
    assert training_config(load_config(None, {"train.algo": "vpo"})).minibatch == 8  # the shipped step: one group of 8
    from proposer.backends.fast_logprobs import frozen_bf16_pays

    bf16 = {v: training_config(load_config(None, {"train.algo": "vpo", "train.frozen_dtype": v})).frozen_bf16
            for v in ("bf16", "fp32", "auto")}
    assert bf16 == {"bf16": True, "fp32": False, "auto": frozen_bf16_pays()}
    assert training_config(load_config(None, {"train.algo": "vpo"})).frozen_bf16 == frozen_bf16_pays()
    with pytest.raises(ConfigError, match="frozen_dtype"):
        load_config(None, {"train.algo": "vpo", "train.frozen_dtype": "fp16"})
    kw = backend_kwargs(cfg)
    assert kw["chat"] is True and kw["gpu_memory_utilization"] == 0.5 and kw["max_lora_rank"] == 128
    assert backend_kwargs(load_config(None, {"proposer.spec": "tiny"}))["chat"] == "auto"
    for bad, key in (({"train.lora_rnak": 4}, "did you mean 'train.lora_rank'"),
                     ({"train.algo": "vpo", "proposer.dtype": "float16"}, "loss scaling"),
                     ({"train.algo": "vpo", "sampling.temperature": 0}, "greedy"),
                     ({"sampling.chat": "maybe"}, "sampling.chat")):
        with pytest.raises(ConfigError, match=key):
            load_config(None, bad)


def test_train_group_sets_the_trained_proposers_group_and_each_step_learns_from_it(tmp_path):
    """train.group: the trained proposer samples that many completions per prompt (the search's `group` is for
    untrained runs), and a step every iteration on one group trains on exactly those completions."""
    run = tmp_path / "run"
    cfg = _cfg(tmp_path, "  probe_every: 0\n", group=3)
    vevo("run", str(cfg), "--iterations", "3", "--train-every", "1", "--train-batch", "1", "--out", str(run),
         "--quiet", timeout=900)
    with Archive(run / "archive.db", readonly=True) as a:
        rows, groups = a.training_rows(), a.recent_groups(100)
    assert [len(g.completions) for g in groups] == [3, 3, 3]
    assert [r.step for r in rows] == [1, 2, 3]
    assert all(r.data["completions"] == 3 and r.data["groups"] == 1 for r in rows)


def test_trained_and_untrained_runs_sample_the_same_completions_per_iteration_at_default_flags(tmp_path):
    """One G for every arm: `vevo run --train vpo` and `--train none` with no G flag sample the same number of
    completions per iteration (they used to differ 4x: train.group 8 against search.group 2), so arms compared
    by iteration are compared at equal evaluations. Only cost flags beside the arm (tokens, probes) are given."""
    per_iteration = {}
    for arm in ("vpo", "none"):
        run = tmp_path / arm
        vevo("run", "--problem", "pbe/hard-list-7", "--proposer", "tiny", "--iterations", "2", "--train", arm,
             "--train-probe-every", "0", "--set", "sampling.max_tokens=48", "--out", str(run), "--quiet", timeout=900)
        with Archive(run / "archive.db", readonly=True) as a:
            per_iteration[arm] = {g.iteration: len(g.completions) for g in a.recent_groups(100)}
            if arm == "vpo":
                assert [r.data["completions"] for r in a.training_rows() if r.data.get("samples")] == [8, 8]
    from evolve.config.schema import CampaignConfig

    assert per_iteration["vpo"] == per_iteration["none"] == {1: CampaignConfig().search.group, 2: 8}


def test_baseline_probe_started_at_the_run_start_measures_what_the_first_step_would(tmp_path):
    """Overlapped, the baseline probe of policy v0 starts when the run starts (`CampaignTrainer.begin`), beside
    the first iteration's generation, not in front of the first step: its numbers are those of the same probe
    taken in the loop before that step (train.overlap false), and the runs train on the same samples."""
    rows = {}
    for overlap in ("true", "false"):
        run = tmp_path / overlap
        cfg = _cfg(tmp_path, f"  every: 1\n  batch: 1\n  probe_problems: 2\n  overlap: {overlap}\n")
        vevo("run", str(cfg), "--iterations", "2", "--out", str(run), "--quiet", timeout=900)
        with Archive(run / "archive.db", readonly=True) as a:
            rows[overlap] = a.training_rows()
    first = {k: next(r for r in v if r.data.get("samples")) for k, v in rows.items()}
    keys = ("probe_own_before", "probe_heldout_before", "mean_set_reward")
    assert all(isinstance(first["true"].data.get(k), float) for k in keys)
    assert [first["true"].data[k] for k in keys] == [first["false"].data[k] for k in keys]
    assert "train_wait_seconds" in first["true"].data and "train_wait_seconds" not in first["false"].data


@pytest.mark.parametrize("iterations, started", [(3, False), (4, True)])
def test_no_baseline_probe_starts_when_no_step_falls_due_in_the_run(tmp_path, iterations, started):
    """`begin` starts the baseline probe only if the run reaches an iteration where a step is due (every 4 here):
    else nothing would read it, and it would only compete with the run's generation."""
    from types import SimpleNamespace

    from evolve.config.schema import load_config
    from evolve.training.campaign import CampaignTrainer
    from proposer.backends import make_backend

    cfg = load_config(overrides={"train.algo": "vpo", "train.every": 4, "search.iterations": iterations,
                                 "proposer.spec": "tiny"})
    trainer = CampaignTrainer(cfg, tmp_path, make_backend("tiny", threads=1))
    view = SimpleNamespace(iteration=0, members={"tiny": None})  # what begin reads before it starts the probe
    assert trainer._overlaps(view)
    trainer.begin(view)
    assert (trainer._early is not None) == started
    trainer.drain(view)  # waits for a probe no step took (here it fails on the bare view) and drops it
    assert trainer._early is None


def test_steps_in_flight_follow_from_the_iteration_numbers():
    """What a resume starts again: the steps started after t - lag, on the run's schedule (every)."""
    from evolve.training.campaign import in_flight_after

    assert in_flight_after(6, 1, 1) == [6] and in_flight_after(7, 2, 1) == []
    assert in_flight_after(6, 1, 2) == [5, 6] and in_flight_after(6, 1, 3) == [4, 5, 6]
    assert in_flight_after(5, 2, 2) == [4] and in_flight_after(6, 2, 2) == [6] and in_flight_after(1, 1, 2) == [1]


def test_a_lag_above_one_without_the_learner_process_is_one_line(tmp_path):
    """train.lag 2 with the step on the learner thread: a step would change the live weights while the one before
    it is published from them, so the run stops before its first iteration, with one line."""
    cfg = _cfg(tmp_path, "  lag: 2\n  learner: thread\n")
    p = vevo("run", str(cfg), "--out", str(tmp_path / "run"), "--quiet", check=False)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "train.lag 2 needs the overlapped learner" in p.stderr
