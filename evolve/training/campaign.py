"""Periodic proposer updates inside a campaign: every ``train.every`` iterations, ``train.batch`` complete groups
of the archive (the most recent, plus a ``train.replay_older`` share of older ones: ``proposer/training/replay_buffer.py``)
→ rewards shaped by ``train.reward`` (``proposer/training/rewards.py``) → advantages (VPO or a baseline) → one
PolicyTrainer step → a new policy version published to the backend (in place for ``hf``; the adapter is saved
under the run dir).

Resume: the adapter, optimizer state and policy version come back from ``RUN/trainer/state.json`` and the
snapshot folder it names; a training step that a kill interrupted is redone, one that finished is not, so a
resumed run trains exactly when the uninterrupted one did. A snapshot is deleted only once a newer one exists
*and* the campaign committed an iteration after it was published: the archive's last checkpoint names the adapter
the engine had when that iteration was committed (the one before the newest step), and resume loads it before
the trainer publishes its own newest one; so the two newest snapshots are always kept.

``train: covrl`` (and ``vpo+covrl``, alternating) takes CoVRL steps instead: verifier-free updates toward
references the archive found (``evolve/training/covrl.py``); the same snapshots, versions and resume apply.

Overlap (``train.overlap``, on by default where it applies: tiny / hf:PATH sampled by the fast sampler, LoRA, one
proposer, no CoVRL): the step due at iteration t runs on a learner thread while the loop generates the next
iteration from a pinned snapshot of the published policy (``HFBackend.pin_sampling``); it is joined and published
at the commit of t+1, so a batch is generated one policy version more stale than in the loop, and the trainer's
importance weights against the recorded behaviour log-probs already correct for that. Which policy made which
batch is fixed by the iteration numbers alone, not by timing, so kill -9 + resume is exact: a step that the
uninterrupted run had joined before the checkpoint is redone in the loop on the archive as of its iteration
(``group_ids(through=t)``), one started at the checkpoint's commit is started again, and the campaign's end joins
the last one (`drain`). ``train.lag`` L > 1 (the learner process only) keeps L steps in flight: the step due at t
is published at the commit of t + L, the learner taking each as soon as the one before it is done, so it works
through the loop's slow iterations instead of waiting for the next commit; each step's state comes into this
process only once the one before it is published and the published policy pinned, and a resume starts again,
in order, the steps the run had in flight (`in_flight_after`). The second core, idle in the loop but for the
sandbox, does the learning: by default (``train.learner: process``) the learner thread hands the update to a
process forked at `begin` (proposer/training/learner_process.py), so that it and the loop's sampling do not share
one interpreter lock; the state it sends back leaves this process's trainer exactly as a step on the thread would.
The probes sample there too, and are scored here: a step's probe in the child's idle time (`_probe_later`), its
values added to the step's row when they come back (`_collect`) and taken again at a resume if a kill came first
(`_probe_again`). When the loop commits an iteration while the child still runs the step it is about to wait for,
it takes the next step's reference log-probs itself (`_reference_ahead`) instead of waiting idle: the same bits,
one forward less for the learner, the slower side of a long trained run.

Every knob is a ``train`` key of the run config (evolve/training/setup.py); zero-advantage samples are trained
on too (their tokens count in the token-mean and their KL term applies, as in veRL). With ``vllm:`` and
``proposer.options.sleep`` (``--vllm-sleep``) the engine sleeps during the step so the learner can use its GPU memory.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from proposer.answers.scoring import score_matrices
from proposer.backends.base import ADAPTERS, TRAINABLE, Backend, has, method, optional
from proposer.errors import TrainingError
from proposer.training.algorithms import step_algorithm
from proposer.training.replay_buffer import choose_groups, staleness

from ..archive import Archive, GroupRow
from ..config.schema import CampaignConfig
from ..progress import training_fields
from ..search.hooks import CampaignView  # the campaign calls the trainer; the trainer reads only this view of it
from .setup import build_trainer, movement_due
from .step import reward_stats, step_inputs


KEEP_SNAPSHOTS = 2  # the newest, and the one the campaign's last checkpoint may still name
BEFORE = "before"  # the key of the baseline probe (policy v0) when the learner process samples it in its idle time
V0 = "step-0-v0"  # policy v0's weights, kept while that probe's values may still have to be taken again


def flatten_groups(groups: list[GroupRow]) -> tuple[list[np.ndarray], list[int], list]:
    """Flatten archive groups into the estimators' inputs: one (m × d) matrix per completion, padded per group by
    the scoring path's `score_matrices` (proposer/answers/scoring.py), with its group id and completion."""
    mats, gids, comps = [], [], []
    for g in groups:
        mats += score_matrices([c.answer_vectors for c in g.completions])
        gids += [g.id] * len(g.completions)
        comps += g.completions
    return mats, gids, comps


class CampaignTrainer:
    """The campaign's `TrainerHook` (evolve/search/hooks.py): `due`, then the call, after each committed iteration."""

    def __init__(self, cfg: CampaignConfig, run_dir: str | Path, backend: Backend, member: str | None = None):
        """``member``: in a proposer portfolio, the trained member's name; it learns from its own groups only."""
        self.cfg, self.backend, self.algo, self.member = cfg, backend, cfg.train.algo, member
        self.dir = Path(run_dir) / "trainer"
        self.dir.mkdir(parents=True, exist_ok=True)
        # hf: the backend's own model is trained in place. vllm: a transformers copy of the same weights is
        # trained and each new LoRA adapter is hot-swapped into the engine (LoRARequest).
        self.learner = backend
        if not has(backend, TRAINABLE):
            if not (has(backend, ADAPTERS) and optional(backend, "path") and cfg.train.lora):
                raise TrainingError(f"--train {cfg.train.algo} needs tiny, hf:PATH, or vllm:PATH or vllm-ray:PATH "
                                    f"with LoRA, not {getattr(backend, 'name', type(backend).__name__)}")
            from proposer.backends.hf import HFBackend

            self.learner = HFBackend(backend.path, threads=cfg.proposer.threads, chat=False,
                                     dtype=None if cfg.proposer.dtype == "auto" else cfg.proposer.dtype)
        self.trainer = build_trainer(self.learner, cfg)  # evolve/training/setup.py, as `vevo train`
        self.covrl = None
        self.step_algo = step_algorithm(self.algo)  # None: a plain advantage estimator
        if self.step_algo is not None:
            from proposer.training.covrl import CoVRLError
            from evolve.training.covrl import covrl_config
            from proposer.training.covrl_step import CoVRLUpdater, check_trainable

            try:
                check_trainable(self.learner)
            except CoVRLError as e:
                raise TrainingError(str(e)) from None
            self.covrl = CoVRLUpdater(self.trainer, covrl_config(cfg))
        self.version = 0
        self.last_iteration = -1
        self.prober = None  # evolve/training/probe.py, built at the first step (it needs the campaign's problems)
        self._before: dict[str, Any] = {}
        self._flights: deque[_Flight] = deque()  # the steps on learner threads, oldest first (overlap; train.lag)
        self._early: _Early | None = None  # the baseline probe started by `begin`, until the first step takes it
        # probes left to the learner process's idle time, by key (a step's iteration, or BEFORE): {key: (the row
        # it goes to, the policy version, the keys' suffix, its snapshot)} of the recorded rows still waiting for
        # theirs, {key: (completions, the child's CPU seconds)} of those that came back
        self._deferred: dict[Any, tuple[int, int, str, str]] = {}
        self._received: dict[Any, tuple[list, float]] = {}
        self._v0_kept = False  # V0 written for a baseline probe started in the idle time, not yet added to a row
        self._process: Any = None  # the learner process (train.learner: process), forked by `_fork`
        self._step_seconds = self._ahead_seconds = 0.0  # the last step's and the last `_reference_ahead`'s lengths
        self._load()

    # --------------------------------------------------------------- persistence
    def _load(self) -> None:
        state_file = self.dir / "state.json"
        if not state_file.is_file():
            return
        import torch

        st = json.loads(state_file.read_text())
        self.version, self.last_iteration = int(st["version"]), int(st["iteration"])
        snap = self.dir / st["snapshot"]
        self._load_weights(snap)
        self.trainer.load_state_dict(torch.load(snap / "optimizer.pt", map_location="cpu", weights_only=False))
        self._publish(snap)

    def _trainable(self) -> dict[str, Any]:
        """The model's trainable tensors by name: what a snapshot's ``weights.pt`` holds."""
        return {n: p for n, p in self.trainer.model.named_parameters() if p.requires_grad}

    def _load_weights(self, snap: Path) -> None:
        """A snapshot's ``weights.pt`` into the trainable tensors, in place."""
        import torch

        sd = torch.load(snap / "weights.pt", map_location="cpu", weights_only=True)
        trainable = self._trainable()
        missing = set(trainable) - set(sd)
        if missing:
            raise TrainingError(f"{snap}: saved weights do not match the model ({len(missing)} trainable tensors "
                                f"missing)")
        self.trainer.model.load_state_dict({k: v for k, v in sd.items() if k in trainable}, strict=False)

    def _save_weights(self, folder: Path) -> None:
        """The trainable tensors into ``folder/weights.pt`` (what `_load_weights` reads)."""
        import torch

        torch.save({n: p.detach().cpu() for n, p in self._trainable().items()}, folder / "weights.pt")

    @contextmanager
    def _folder(self, name: str) -> Iterator[Path]:
        """A snapshot folder written whole: filled as ``name.tmp``, then renamed into place, so a kill leaves the
        old folder or the new one."""
        import shutil

        tmp = self.dir / (name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        yield tmp
        shutil.rmtree(self.dir / name, ignore_errors=True)
        tmp.rename(self.dir / name)

    def _publish(self, snap: Path) -> None:
        """Make the new policy the one that generates: in place for hf, an adapter hot-swap otherwise."""
        if self.learner is self.backend:
            self.backend.set_policy_version(self.version)
        else:
            self.backend.load_adapter(snap / "adapter", self.version)

    def _save(self, iteration: int, stats: dict[str, Any]) -> Path:
        """Everything of one step goes into a fresh snapshot folder; replacing state.json (atomic rename) is
        the commit point, so a kill at any moment leaves the previous complete step or this one."""
        import torch

        snap = _snapshot_name(iteration, self.version)
        with self._folder(snap) as tmp:
            self._save_weights(tmp)
            torch.save(self.trainer.state_dict(), tmp / "optimizer.pt")
            (tmp / "stats.json").write_text(json.dumps(stats))  # the archive row, if a kill comes before it
            if self.cfg.train.lora:
                self.trainer.save_adapter(tmp / "adapter")
        st = self.dir / "state.tmp"
        st.write_text(json.dumps({"version": self.version, "iteration": iteration, "snapshot": snap}))
        st.replace(self.dir / "state.json")
        self._prune(keep=snap)
        return self.dir / snap

    def _prune(self, keep: str) -> None:
        """Delete all but the KEEP_SNAPSHOTS newest complete snapshots (see the module docstring for why two)."""
        import shutil

        def order(p: Path) -> tuple[int, int]:
            it, _, v = p.name[len("step-"):].partition("-v")
            return (int(it), int(v)) if it.isdigit() and v.isdigit() else (-1, -1)

        snaps = sorted((p for p in self.dir.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp")), key=order)
        probing = {d[3] for d in self._deferred.values()} | ({V0} if self._v0_kept else set())  # a resume
        for p in snaps[:-KEEP_SNAPSHOTS] + [p for p in snaps[-KEEP_SNAPSHOTS:] if p.name == V0]:  # probes them again
            if p.name != keep and p.name not in probing:
                shutil.rmtree(p, ignore_errors=True)

    # --------------------------------------------------------------- hooks
    def on_restore(self, camp: CampaignView) -> None:
        """After the campaign restored its checkpoint: the trainer's own version wins (it may be newer), and
        a step due at the checkpoint's iteration that never finished is done now (overlapped: a step the
        uninterrupted run had already joined is redone here, the one due at the checkpoint started again)."""
        if (self.dir / "state.json").is_file():
            snap = self.dir / json.loads((self.dir / "state.json").read_text())["snapshot"]
            self._publish(snap)
            done = {r.step for r in camp.archive.training_rows()}
            if self.last_iteration not in done and (snap / "stats.json").is_file():  # killed before the row
                stats = json.loads((snap / "stats.json").read_text())
                if self._probe_due(stats) and "probe_own" not in stats:  # killed while probing: the same draw
                    stats.update(self._probe(camp))
                camp.archive.record_training(self.last_iteration, self.version, stats)
            self._probe_again(camp)
        t, every = camp.iteration, self.cfg.train.every
        due = [d for d in range((self.last_iteration // every + 1) * every, t + 1, every) if d > 0]  # not yet saved
        if not self._overlaps(camp):
            if t in due:
                self.train(camp, t)
            return
        flying = in_flight_after(t, every, self.cfg.train.lag)  # as the uninterrupted run left its hook at t
        for d in due:
            if d not in flying:  # joined before the kill, never published: redone here on the archive as of d
                self.train(camp, d)
        restart = [d for d in due if d in flying]
        if restart:
            self._fork()  # these steps start before `begin`, which forks otherwise
            self._check_lag(camp)
        for d in restart:  # started again, in order, as at their commits
            self.train(camp, d, background=True)

    def begin(self, camp: CampaignView) -> None:
        """A learner still at policy v0 with probes on (overlapped): the baseline probe starts now on a thread,
        beside the seeds' evaluation and the first iteration's generation, instead of in front of the first step.
        Its numbers do not depend on when it runs: it samples policy v0, which nothing changes before the first
        step (that step waits for it), with the probes' fixed seed. Not once a step is under way (a resume's
        `on_restore` may have started one, which takes its baseline itself), nor when no step falls due before
        the run's last iteration (the probe would be dropped unread)."""
        if self.cfg.train.lag > 1 and not self._overlaps(camp):
            self._check_lag(camp)
        if not (self._step_ahead(camp.iteration) and self._overlaps(camp)):
            return
        self._fork()  # before any other thread of this start runs torch (a forked child keeps no thread)
        self._check_lag(camp)
        if self.version == 0 and self._early is None and not self._flights and self.cfg.train.probe_every:
            # with the learner process it only starts there (the first step need not wait for it)
            self._early = _Early(partial(self._probe, camp, "_before", quiet=True) if self._process is None
                                 else partial(self._baseline_later, camp), self.backend)

    def _fork(self) -> None:
        """The learner process (proposer/training/learner_process.py), once, where ``train.learner`` asks for it
        and this platform can fork one; otherwise overlapped steps run on the learner thread itself. Called only
        where no other thread runs torch (`begin`, `on_restore`)."""
        if self._process is None and self.cfg.train.learner == "process":
            from proposer.training import learner_process

            if learner_process.available(self.trainer):
                self._process = learner_process.LearnerProcess(self.trainer, self.backend)

    def _step_ahead(self, iteration: int) -> bool:
        """Whether a step falls due after ``iteration`` and by the run's last iteration (``search.iterations``;
        a budget may end the run sooner)."""
        every = self.cfg.train.every
        return (iteration // every + 1) * every <= self.cfg.search.iterations

    def _baseline_later(self, camp: CampaignView) -> dict[str, Any]:
        """On `begin`'s thread: the baseline probe started in the learner process's idle time, policy v0's weights
        first written to V0 (a resume takes the probe again from them if a kill comes before its values)."""
        prompts, n, params = self._prober(camp).request(self.backend, camp.evaluator)
        with self._folder(V0) as tmp:
            self._save_weights(tmp)
        self._v0_kept = True
        self._process.start_probe(self.trainer, BEFORE, prompts, n, params)
        return {"probe_deferred_before": True}

    def _baseline(self, camp: CampaignView, quiet: bool = False) -> dict[str, Any]:
        """The probes of policy v0 (kept in the first step's row): the one `begin` started, else taken now."""
        early, self._early = self._early, None
        return early.result() if early is not None else self._probe(camp, "_before", quiet=quiet)

    def due(self, iteration: int) -> bool:
        """Whether committing `iteration` starts a training step (the campaign first lets generations in flight
        finish under the current policy)."""
        return iteration > 0 and iteration % self.cfg.train.every == 0 and iteration > self.last_iteration

    def __call__(self, camp: CampaignView, iteration: int) -> None:
        self._collect(camp)  # the probes the learner process finished in its idle time since the last commit
        ahead = self._reference_ahead(camp, iteration)
        through = self._published_through(iteration)
        self._open_gates(through)  # (where no commit in between pinned the policy and opened them)
        joined = []  # the steps started at ``through`` or before: done, counted, not yet published
        while (f := self._wait(through)) is not None:
            joined.append(f)
        for f in joined[:-1]:  # several only where a resume changed train.lag
            self._settle(camp, f)
        last = joined[-1] if joined else None
        # published now unless the next step goes to the learner process; and where its publication would still
        # probe (through the child, whose lock the next step holds until the publication: never, as its probe ran
        # on the learner thread, but a deadlock if it did)
        if last is not None and not (self._process is not None and self.due(iteration) and self._overlaps(camp)
                                     and ("probe_seconds" in last.stats or last.stats.get("probe_deferred")
                                          or not self._probe_due(last.stats))):
            self._settle(camp, last)  # published before anything else is prepared
            last = None
        if self.due(iteration):
            # with the learner process, `train` sends the next step before it publishes the last one (its
            # snapshot, ~20 ms, and its row): the child needs nothing of them, and this process's copy of the
            # trainer keeps the last step's state until the next reply, which waits for the publication
            self.train(camp, iteration, background=self._overlaps(camp), ahead=ahead, last=last)

    def _reference_ahead(self, camp: CampaignView, iteration: int) -> _Ahead | None:
        """The reference log-probs of the step due now, taken by the loop while the learner process still runs
        the last step (the loop would only wait for it): one forward less for the learner, the slower side of a
        long trained run, and the same bits as the child's (``PolicyTrainer.reference``). Only with the learner
        process: nothing else in this process touches the model meanwhile (the loop samples a pinned snapshot,
        the probes sample in the child), so switching the adapter off here is safe."""
        f = self._flights[0] if self._flights and self._flights[0].iteration <= self._published_through(iteration) \
            else None
        # only where the last step's length says this one will still run for longer than the forward takes (a
        # learner left idle waiting for the loop loses what the forward saves it; the bits do not depend on it)
        if (f is None or self._process is None or not f.thread.is_alive() or not self.due(iteration)
                or time.monotonic() - f.started + self._ahead_seconds > self._step_seconds
                or not self.trainer.uses_kl or (self.step_algo is not None and self.step_algo.covrl_due(
                    iteration, self.cfg.train.every, self.cfg.train.covrl.share))):
            return None
        t = time.monotonic()
        groups = self._groups(camp.archive, iteration)
        if not groups:
            return None
        try:
            samples = self._samples(camp, iteration, groups, *flatten_groups(groups)).samples
            refs = self.trainer.reference(samples) if samples else None
        except Exception:  # noqa: BLE001 - whatever failed here fails again in the step, which reports it
            return None
        self._ahead_seconds = time.monotonic() - t
        return None if refs is None else _Ahead(iteration, _key(samples), refs, self._ahead_seconds)

    def drain(self, camp: CampaignView) -> None:
        """At the campaign's end: the step still on the learner thread is finished and published (a baseline
        probe no step took is waited for and dropped: a later start takes it again)."""
        self.join(camp)
        early, self._early = self._early, None
        if early is not None:
            early.thread.join()
        self._collect(camp, wait=True)
        if self._v0_kept and BEFORE not in self._deferred:  # a baseline no step took: a later start takes it again
            import shutil

            self._received.pop(BEFORE, None)
            self._v0_kept = False
            shutil.rmtree(self.dir / V0, ignore_errors=True)
        proc, self._process = self._process, None
        if proc is not None:
            proc.close()

    def _overlaps(self, camp: CampaignView) -> bool:
        """Whether steps run on the learner thread (see the module docstring for when that applies)."""
        return bool(self.cfg.train.overlap and self.cfg.train.lora and self.learner is self.backend
                    and self.covrl is None and len(camp.members) <= 1
                    and all(method(self.backend, m) is not None for m in ("pinnable", "pin_sampling")))

    def join(self, camp: CampaignView) -> None:
        """Wait for every step on a learner thread, oldest first, and publish each as the loop would have
        (snapshot, probes, row); each step's state is let in once the one before it is published."""
        while self._flights:
            self._flights[0].gate.set()
            self._settle(camp, self._wait())

    def _open_gates(self, through: int) -> None:
        """Let the states of the steps started at ``through`` or before come into this process: each is published
        at the commit ``train.lag`` after its own, and no pin for sampling before that may see it."""
        for f in self._flights:
            if f.iteration <= through:
                f.gate.set()

    def _published_through(self, iteration: int) -> int:
        """The commit of ``iteration`` publishes the steps started at this iteration or before: ``train.lag``
        commits after their own (1 without the learner process, which `_check_lag` makes an error for a lag above
        1)."""
        return iteration - (self.cfg.train.lag if self._process is not None else 1)

    def _check_lag(self, camp: CampaignView) -> None:
        """A lag above 1 needs the learner process: on a thread, a step would change the live weights while the
        one before it is published from them."""
        if self.cfg.train.lag > 1 and not (self._process is not None and self._overlaps(camp)
                                           and self.backend.pinnable()):
            raise TrainingError(f"train.lag {self.cfg.train.lag} needs the overlapped learner in its own process "
                                f"(train.overlap, train.learner: process; Linux, the model on the CPU, one torch "
                                f"thread, no Ray driver): set train.lag 1 here")

    def _wait(self, through: int | None = None) -> _Flight | None:
        """Wait for the oldest step on a learner thread if it started at ``through`` or before (None: whichever),
        and count it (its policy is the current one from now on)."""
        if not self._flights or (through is not None and self._flights[0].iteration > through):
            return None
        f = self._flights.popleft()
        t = time.monotonic()
        f.thread.join()
        self.backend.unpin_sampling()
        if f.error is not None:
            raise f.error
        f.stats.update(f.out)
        f.stats["train_wait_seconds"] = round(time.monotonic() - t, 4)  # what the loop waited for it
        if self._process is not None:  # the learner process's time since the last step, and its share of work
            f.stats["learner_seconds"], f.stats["learner_busy_seconds"] = (round(x, 4) for x in self._process.usage())
        self._step_seconds = f.step_seconds
        self.version += 1
        return f

    def _settle(self, camp: CampaignView, f: _Flight) -> None:
        """Publish a step `_wait` returned (snapshot, probes, row)."""
        self._finish(camp, f.iteration, f.stats, step_seconds=f.seconds, t0=f.t0)

    def _groups(self, archive: Archive, iteration: int) -> list[GroupRow]:
        """The replay buffer's pick (recent groups plus a seeded mix of older ones) from the groups committed
        through ``iteration``, complete groups only."""
        rng = np.random.default_rng([self.cfg.seed, iteration, 1])
        ids = choose_groups(archive.group_ids(self.member, through=iteration), self.cfg.train.batch,
                            self.cfg.train.replay_older, rng)
        return [g for g in archive.groups_by_id(ids) if g.completions and all(c.token_ids for c in g.completions)]

    def _shaping(self, archive: Archive, groups: list[GroupRow], mats: list[np.ndarray], comps: list
                 ) -> tuple[list[np.ndarray] | None, list[np.ndarray | None] | None]:
        """What train_reward needs from the archive, per completion: which answers became new programs (novel)
        and its parent's test vector (improvement); see proposer/training/rewards.py."""
        mode = self.cfg.train.reward
        if mode == "novel":
            novel = archive.new_answers([c.id for c in comps])
            return [np.array([i in novel.get(c.id, ()) for i in range(m.shape[0])], dtype=bool)
                    for m, c in zip(mats, comps)], None
        if mode == "improvement":
            vecs = archive.program_vectors(sorted({g.parent_id for g in groups if g.parent_id is not None}))
            parent_of = {c.id: g.parent_id for g in groups for c in g.completions}
            return None, [vecs.get(parent_of[c.id]) for c in comps]
        return None, None

    def _probe_due(self, stats: dict[str, Any], version: int | None = None) -> bool:
        """Whether the policy ``version`` (default: the current one) that this step made is probed."""
        every = self.cfg.train.probe_every
        v = self.version if version is None else version
        return bool(every and stats.get("samples") and v % every == 0)

    def _probe(self, camp: CampaignView, suffix: str = "", quiet: bool = False) -> dict[str, Any]:
        """The fixed probe sets' rewards under the current policy (evolve/training/probe.py); {} when probes are off.
        ``quiet``: on the learner thread (no progress line; the probes were built by the first step's baseline)."""
        if not self.cfg.train.probe_every:
            return {}
        if not quiet:
            camp.reporter.phase(f"probing policy v{self.version} on fixed problems", announce=True)
        # with a learner process, the probes sample there: beside the loop's generation without sharing its lock
        backend = self.backend if self._process is None else self._process.sampler(self.trainer, self.backend)
        return self._prober(camp).run(backend, camp.evaluator, suffix)

    def _prober(self, camp: CampaignView) -> Any:
        if self.prober is None:
            from .probe import Prober

            self.prober = Prober(list(camp.problems.values()), seed=self.cfg.seed, k=self.cfg.train.probe_problems,
                                 group=self.cfg.train.probe_group, m=self.cfg.search.answers,
                                 temperature=self.cfg.sampling.temperature, max_tokens=self.cfg.sampling.max_tokens,
                                 style=camp.prompt_style)
        return self.prober

    def _probe_later(self, camp: CampaignView, iteration: int) -> dict[str, Any]:
        """On the learner thread, once its step is done: the probe of the policy the step made, sampled in the
        learner process's idle time (`LearnerProcess.start_probe`) instead of now, while the loop would wait for
        it. The step's row is recorded without it (``probe_deferred``); `_collect` adds its values when it comes
        back, the same draws as a probe taken now (the policy pinned in the child, the probes' seed)."""
        prompts, n, params = self._prober(camp).request(self.backend, camp.evaluator)
        self._process.start_probe(self.trainer, iteration, prompts, n, params)
        return {"probe_deferred": True}

    def _collect(self, camp: CampaignView, wait: bool = False) -> None:
        """Score the probes the learner process sampled in its idle time and add them to their steps' rows
        (``wait``: all of them, at the run's end). Their cost: the child's CPU seconds and the scoring here."""
        if self._process is not None:
            for key, groups, cpu in self._process.probe_results(wait):
                self._received[key] = (groups, cpu)
        # a step's row first, then its probe's values
        done = sorted((k for k in self._received if k in self._deferred), key=lambda k: self._deferred[k][:2])
        for key in done:
            (groups, cpu), (row, version, sfx, snap) = self._received.pop(key), self._deferred.pop(key)
            t = time.monotonic()
            values = self._prober(camp).score(groups, self.backend, camp.evaluator, sfx)
            values[f"probe_score_seconds{sfx}"] = round(time.monotonic() - t, 4)  # in the loop: what it waited
            values[f"probe_seconds{sfx}"] = round(cpu + values[f"probe_score_seconds{sfx}"], 4)
            values["probe_wall_seconds"] = camp.wall_seconds()  # the run's wall includes it (a probe at the end)
            camp.archive.add_training_data(row, values)
            self._v0_kept = self._v0_kept and snap != V0
            camp.reporter.event(f"probed policy v{version} (kept in the step at iteration {row}):", kind="training",
                                data={"iteration": row, "step": version, **values}, **training_fields(values))
        if done:  # their snapshots need not be kept any longer
            self._prune(keep=_snapshot_name(self.last_iteration, self.version))

    def _probe_again(self, camp: CampaignView) -> None:
        """At a resume: the probes a kill left under way in the learner process's idle time (rows with
        ``probe_deferred`` or ``probe_deferred_before`` and no values), taken here on the policy of their snapshot
        (kept for them: their step's, or V0 for the baseline), then the trainer's own weights put back. The same
        draws as the child's: its pinned snapshot of that policy, the probes' seed."""
        todo = [(r.step, sfx, self.dir / (V0 if sfx else _snapshot_name(r.step, r.policy_version)))
                for r in camp.archive.training_rows() for sfx in ("_before", "")
                if r.data.get(f"probe_deferred{sfx}") and f"probe_seconds{sfx}" not in r.data]
        if not todo:
            return
        kept = {n: p.detach().clone() for n, p in self._trainable().items()}
        try:
            for row, sfx, snap in todo:
                if not (snap / "weights.pt").is_file():  # removed by hand: the row says so instead of a value
                    camp.archive.add_training_data(row, {f"probe_seconds{sfx}": 0.0,
                                                         f"probe_skipped{sfx}": f"{snap.name} is gone"})
                    continue
                self._load_weights(snap)
                camp.reporter.phase(f"probing the policy of {snap.name} on fixed problems (its probe was under way "
                                    f"at the kill)", announce=True)
                camp.archive.add_training_data(row, self._probe(camp, sfx, quiet=True))
        finally:
            self.trainer.model.load_state_dict(kept, strict=False)

    def _samples(self, camp: CampaignView, iteration: int, groups: list[GroupRow], raw_mats, gids, comps):
        """The step's samples and statistics from its groups (``step_inputs``; ValueError on bad input)."""
        algo = self.step_algo.estimator if self.step_algo is not None else self.algo
        novel, parents = self._shaping(camp.archive, groups, raw_mats, comps)
        return step_inputs(algo, raw_mats, gids, comps, reward=self.cfg.train.reward, novel=novel, parents=parents,
                           rng=np.random.default_rng([self.cfg.seed, iteration]))

    def train(self, camp: CampaignView, iteration: int, background: bool = False,
              ahead: _Ahead | None = None, last: _Flight | None = None) -> dict[str, Any] | None:
        """The step due at ``iteration``; ``background``: its update runs on the learner thread (`join`
        finishes it), where the backend can pin the published policy for sampling meanwhile. ``ahead``: its
        reference log-probs, taken while the last step ran (`_reference_ahead`). ``last``: the step before,
        waited for but not yet published: published once this one is sent to the learner process, else before
        this one records anything."""
        gate = threading.Event()

        def settle() -> None:
            nonlocal last
            f, last = last, None
            if f is not None:
                self._settle(camp, f)

        try:
            return self._train(camp, iteration, background, ahead, gate, settle)
        finally:
            try:
                settle()
            finally:  # the published policy is pinned: the state of the step published at the next commit may come in
                self._open_gates(self._published_through(iteration) + 1)
                if not self._flights or self._flights[-1].gate is not gate:
                    gate.set()  # no step waits on it

    def _train(self, camp: CampaignView, iteration: int, background: bool, ahead: _Ahead | None,
               gate: threading.Event, settle: Any) -> dict[str, Any] | None:
        groups = self._groups(camp.archive, iteration)
        if not groups:
            return None
        self._t0 = time.monotonic()
        camp.reporter.phase(f"training step {self.version + 1} (iteration {iteration}, {len(groups)} groups"
                            f"{', on the learner thread' if background else ''})", announce=True)
        # before the first update: the probes' baseline, kept in that step's row (overlapped: started by `begin`,
        # or else on the learner thread before the update, while the loop samples the same policy pinned)
        self._before = self._baseline(camp) if self.version == 0 and not background else {}
        raw_mats, gids, comps = flatten_groups(groups)
        if self.step_algo is not None and self.step_algo.covrl_due(iteration, self.cfg.train.every,
                                                                   self.cfg.train.covrl.share):
            settle()
            return self._train_covrl(camp, iteration, groups, raw_mats, comps)
        try:
            prepared = self._samples(camp, iteration, groups, raw_mats, gids, comps)
        except ValueError as e:  # bad training input never stops the campaign
            settle()
            camp.archive.record_training(iteration, self.version, {"skipped": str(e)})
            camp.reporter.event(f"training step skipped at iteration {iteration}: {e}", kind="training",
                                data={"iteration": iteration, "skipped": str(e)})
            self.last_iteration = iteration
            return None
        samples = prepared.samples
        stats: dict[str, Any] = {"iteration": iteration, "groups": len(groups), "completions": len(comps),
                                 **prepared.stats}
        from_version = self.version + len(self._flights)  # the version this step starts from (train.lag > 1: newer)
        stats.update(staleness(from_version, [c.policy_version for c in comps]))
        if samples:
            self.trainer.cfg.movement = movement_due(self.cfg, from_version)
            if background and self.backend.pinnable():
                if self._process is None:  # the learner thread changes the live weights from its first update
                    self.backend.pin_sampling()
                before = partial(self._baseline, camp, True) if from_version == 0 else None
                probe = None
                if self._probe_due(stats, from_version + 1):  # the probe of the new policy: after it on the thread,
                    # or with the learner process, in the child's idle time
                    probe = (partial(self._probe, camp, quiet=True) if self._process is None
                             else partial(self._probe_later, camp, iteration))
                prep = time.monotonic() - self._t0
                if self._process is None:
                    step = self.trainer.step
                else:
                    refs = None
                    if ahead is not None and ahead.iteration == iteration and ahead.key == _key(samples):
                        refs, prep = ahead.refs, prep + ahead.seconds
                        stats["reference_ahead_seconds"] = round(ahead.seconds, 4)
                    step = partial(self._process.step, self.trainer, refs=refs, gate=gate)
                self._flights.append(_Flight(iteration, stats, step, samples, prep, before, probe, self.backend,
                                             self._t0, gate, self._flights[-1] if self._flights else None))
                if self._process is not None:  # beside the child's step: the weights here change only at the gate
                    self.backend.pin_sampling()
                return None
        settle()
        if background and self.version == 0:  # the learner thread was not used after all: the baseline here
            self._before = self._baseline(camp)
        if samples:
            with self._engine_asleep():
                stats.update(self.trainer.step(samples))
            self.version += 1
        return self._finish(camp, iteration, stats)

    @contextmanager
    def _engine_asleep(self) -> Iterator[None]:
        """Colocated vLLM with a separate learner: free the engine's GPU memory for the step."""
        sleep, wake = method(self.backend, "sleep"), method(self.backend, "wake_up")
        if self.learner is not self.backend and sleep is not None:
            sleep()
        try:
            yield
        finally:
            if self.learner is not self.backend and wake is not None:
                wake()

    def _train_covrl(self, camp: CampaignView, iteration: int, groups, raw_mats, comps) -> dict[str, Any]:
        """One CoVRL step (evolve/training/covrl.py); logged like every step, plus the references used."""
        from evolve.training.covrl import covrl_step

        stats: dict[str, Any] = {"iteration": iteration, "groups": len(groups), "completions": len(comps),
                                 "algo": "covrl"}
        stats.update(reward_stats(raw_mats))
        stats.update(staleness(self.version, [c.policy_version for c in comps]))
        with self._engine_asleep():
            stats.update(covrl_step(camp.archive, groups, self.learner, self.covrl, self.cfg, iteration))
        stats["samples"] = int(stats.get("n_trajectories", 0))
        if stats["samples"]:
            self.version += 1
        return self._finish(camp, iteration, stats)

    def _finish(self, camp: CampaignView, iteration: int, stats: dict[str, Any], step_seconds: float | None = None,
                t0: float | None = None) -> dict[str, Any]:
        """Probes, snapshot, publish, and the archive row of a step (``step_seconds``: its cost when it ran on
        the learner thread; ``t0``: when its preparation began, default the last `train`'s)."""
        t0 = self._t0 if t0 is None else t0
        stats.update(self._before)
        # the step's own cost (choosing groups, advantages, the update), without probes or snapshot: evolve/analysis/account.py adds them apart
        stats["train_seconds"] = round(step_seconds if step_seconds is not None else
                                       time.monotonic() - t0 - float(self._before.get("probe_seconds_before", 0.0)), 4)
        snap = self._save(iteration, stats)
        self.last_iteration = iteration
        self._publish(snap)
        if self._probe_due(stats) and "probe_seconds" not in stats and not stats.get("probe_deferred"):
            stats.update(self._probe(camp))  # probes sample the published policy
        # the clock when the step was published: the last step is published after the last iteration's record
        # (a step drained at the run's end, or one taken after the last commit), and the run's wall includes it
        stats["wall_seconds"] = camp.wall_seconds()
        camp.archive.record_training(iteration, self.version, stats)
        camp.reporter.event(f"trained step {self.version} at iteration {iteration} in "
                            f"{time.monotonic() - t0:.1f}s:", kind="training",
                            data={"iteration": iteration, "step": self.version, **stats},
                            **training_fields(stats))
        if stats.get("probe_deferred") and "probe_seconds" not in stats:  # its probe's values come later
            self._deferred[iteration] = (iteration, self.version, "", _snapshot_name(iteration, self.version))
        if stats.get("probe_deferred_before") and "probe_seconds_before" not in stats:  # and the baseline's
            self._deferred[BEFORE] = (iteration, 0, "_before", V0)
        if self._deferred:
            self._collect(camp)
        return stats


def _snapshot_name(iteration: int, version: int) -> str:
    return f"step-{iteration}-v{version}"


def in_flight_after(t: int, every: int, lag: int) -> list[int]:
    """The steps an overlapped run has in flight once its hook at iteration t returns: the hook at t publishes
    every step started at t - lag or before, then starts the one due at t (every ``every``-th iteration). Pure, so
    a resumed run restarts the steps the uninterrupted one had in flight at its checkpoint."""
    return [d for d in range(every, t + 1, every) if d > t - lag]


def _key(samples: list) -> list:
    """What a step's reference log-probs depend on."""
    return [(s.prompt_ids, s.completion_ids) for s in samples]


@dataclass(frozen=True)
class _Ahead:
    """Reference log-probs taken ahead of the step due at ``iteration``, for the samples ``key`` names."""
    iteration: int
    key: list
    refs: list
    seconds: float


class _Flight:
    """One update on the learner thread: ``before()`` (the first step's baseline probe), ``step(samples)`` (the
    trainer's step, taken on this thread or handed to the learner process), then ``probe()`` of the policy it
    made, the probes sampling the live model while the loop samples the pinned one; their outcome and the step's
    cost (``seconds``: the preparation in the loop plus the step; probes count apart, as ``probe_seconds``)."""

    def __init__(self, iteration: int, stats: dict[str, Any], step: Any, samples: list, prep: float,
                 before: Any, probe: Any, backend: Any, prep_started: float, gate: threading.Event,
                 after: "_Flight | None") -> None:
        """``gate``: opened once no pin for sampling is left before its publication (learner process: its state
        waits for it); ``after``: the step in flight before it (train.lag > 1), whose update and probe the learner
        takes first."""
        self.iteration, self.stats, self.seconds = iteration, stats, prep
        self.gate, self.after = gate, after
        self.t0 = prep_started  # when the loop began preparing it (the progress line's time)
        self.started, self.step_seconds = time.monotonic(), 0.0  # step_seconds: the step's own, as it ran
        self.out: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(step, samples, before, probe, backend),
                                       name="vevo-learner", daemon=True)
        self.thread.start()

    def _run(self, step: Any, samples: list, before: Any, probe: Any, backend: Any) -> None:
        try:
            if self.after is not None:  # the learner takes the updates in order, each with the probe of its policy
                self.after.thread.join()
            with backend.live_sampling():
                base = before() if before is not None else {}
                t = time.monotonic()
                self.out = step(samples)
                self.step_seconds = time.monotonic() - t
                self.seconds += self.step_seconds
                self.out.update(base)
                if probe is not None:
                    self.out.update(probe())
        except BaseException as e:  # re-raised by join, in the loop's thread
            self.error = e


class _Early:
    """The baseline probe on a thread of its own from the run's start (`CampaignTrainer.begin`), sampling the
    live model (policy v0) even once the loop pins it; ``result()`` waits for it and re-raises its error."""

    def __init__(self, probe: Any, backend: Any) -> None:
        self.out: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(probe, backend), name="vevo-baseline-probe",
                                       daemon=True)
        self.thread.start()

    def _run(self, probe: Any, backend: Any) -> None:
        try:
            with backend.live_sampling():
                self.out = probe()
        except BaseException as e:  # re-raised by result(), in the thread that takes the baseline
            self.error = e

    def result(self) -> dict[str, Any]:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.out
