"""An overlapped training step in a process of its own (``train.learner: process``): the campaign's learner thread
hands the step to a child forked from the campaign's process and waits for it, so the step and the loop's sampling
no longer share one interpreter lock.

Why: two threads of one interpreter slow each other down. `python bench/perf/learner_contention.py` put the lean step
at ~1.5x its time alone beside a sampler on a thread, and the sampler at 0.5-0.75x its speed; beside a process,
both ran at ~1.0x. In campaigns it is the loop's generation that gains: 12 iterations of `pbe-hard-heldout` cost
1.42x the untrained run against 1.53x with the step on the thread (bench/perf/learner_speed.py, docs/TRAINING.md).
Why fork and not spawn: the child starts in milliseconds with the model already in memory, shared copy-on-write
(the base weights are only read). A spawned learner paid ~3 s of imports and moved the model to shared memory, and
it was not kept (docs/TRAINING.md).

Exactness: the child runs the same ``PolicyTrainer.step`` on the same state. Each request carries the samples,
and also the trainer's state (trainable weights, optimizer state, update counter) whenever the campaign's copy
moved since the child last had it (a step redone in the loop at resume). Each reply carries the new state, which
is loaded into the campaign's trainer. So after every step the campaign's trainer is bit for bit what a step on
the thread would have left, and its snapshots, resume and probes do not change. Only plain values cross the pipe
(tensors as numpy arrays, samples, completions): nothing is shared through file descriptors.

The probes sample there too (`ChildSampler`): the child's copy of the backend, forked before any pin, samples
the policy its trainer holds, with the probes' seed, so a probe there draws what it would draw on the campaign's
live model, and its sampling does not share the loop's lock either. A probe can also be left to the child's idle
time (`start_probe`): the child pins a snapshot of the policy it holds and samples it on a thread of its own at
the scheduler's idle class (``SCHED_IDLE``), which runs only where no other thread wants the core, so the steps
after it are not slowed and the loop does not wait for it; its completions come back on a pipe of their own
(`probe_results`), the same draws as a probe taken at once (the same snapshot, seed and operations).

The child dies with the thread that forked it (``PR_SET_PDEATHSIG``, Linux) and ignores Ctrl-C, which the
campaign handles. Fork only where nothing else runs torch meanwhile: the campaign forks before its baseline probe
thread and its pipeline start (`CampaignTrainer.begin`).
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from typing import Any, Sequence

import torch

from proposer.backends import heap
from proposer.errors import TrainingError


def available(trainer: Any) -> bool:
    """Whether a learner process can be forked for ``trainer``: on Linux (fork, and a parent-death signal for
    the child), with the model on the CPU (a child cannot use its parent's CUDA context) and torch on one thread
    (the campaign default; a child forked from a process whose OpenMP pool ran several threads hangs in it),
    and no Ray driver here (the threads of its connection do not survive a fork: such a run keeps the thread)."""
    on_cpu = all(p.device.type == "cpu" for p in trainer.params)
    ray = sys.modules.get("ray")
    ray_driver = ray is not None and getattr(ray, "is_initialized", lambda: False)()
    return (on_cpu and torch.get_num_threads() == 1 and not ray_driver and sys.platform.startswith("linux")
            and "fork" in mp.get_all_start_methods())


def _numpy(obj: Any) -> Any:
    """``obj`` with every tensor as a (marker, numpy array) pair, for the pipe's pickle. Not ``torch.save``: on the
    tiny model's adapter and Adam state (3 MB) it took 11.6 ms to write and 25 ms to read with ``weights_only``,
    where this takes ~2 ms each way, on every step."""
    if isinstance(obj, torch.Tensor):
        return ("__tensor__", obj.detach().cpu().numpy().copy())
    if isinstance(obj, dict):
        return {k: _numpy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_numpy(v) for v in obj)
    return obj


def _tensors(obj: Any) -> Any:
    """The inverse of ``_numpy``."""
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and obj[0] == "__tensor__":
        return torch.from_numpy(obj[1])
    if isinstance(obj, dict):
        return {k: _tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tensors(v) for v in obj)
    return obj


def trainer_state(trainer: Any) -> dict[str, Any]:
    """What a step reads and changes: the trainable tensors (in ``trainer.params`` order), the optimizer's state
    and the update counter."""
    return _numpy({"params": [p.detach() for p in trainer.params], **trainer.state_dict()})


def load_trainer_state(trainer: Any, state: dict[str, Any]) -> None:
    """Put ``trainer_state``'s output into ``trainer`` (in place: the model's tensors stay the same objects)."""
    s = _tensors(state)
    if len(s["params"]) != len(trainer.params):
        raise TrainingError(f"learner process: {len(s['params'])} trainable tensors came back for "
                            f"{len(trainer.params)}")
    with torch.no_grad():
        for p, q in zip(trainer.params, s["params"]):
            p.copy_(q)
    trainer.load_state_dict(s)


def _lowest_priority() -> None:
    """This thread at the scheduler's idle class: it runs only on a core no other thread wants (Linux; an
    unprivileged thread may lower itself). Else at nice 19, where that is refused."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass


class _IdleProbe:
    """The child's probe in its idle time: one at a time, on the policy pinned when it started; its outcome
    ``(key, ok, completions or a one-line error, the thread's CPU seconds)`` is sent on ``out``."""

    def __init__(self, backend: Any, out: Any) -> None:
        self.backend, self.out, self.thread = backend, out, None

    def start(self, key: Any, payload: tuple) -> None:
        self.join()
        if not self.backend.pin_sampling():
            raise TrainingError("learner process: this backend cannot pin a policy to probe it later")
        self.thread = threading.Thread(target=self._run, args=(key, payload), name="vevo-probe", daemon=True)
        self.thread.start()

    def _run(self, key: Any, payload: tuple) -> None:
        _lowest_priority()
        t = time.thread_time()
        try:
            out = (key, True, self.backend.generate(*payload), time.thread_time() - t)
        except BaseException as e:  # noqa: BLE001 - reported to the campaign, which raises it
            out = (key, False, f"{type(e).__name__}: {e}".splitlines()[0], time.thread_time() - t)
        self.out.send(out)

    def join(self) -> None:
        """Wait for the probe under way, if any (it runs at once while this thread waits), and unpin its policy:
        a request that samples the live policy comes next."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
            self.backend.unpin_sampling()


def _serve(trainer: Any, backend: Any, conn: Any, probes: Any, other_ends: tuple, parent: int) -> None:
    """The child: serve requests until told to stop or the parent is gone. It always leaves by ``os._exit``: no
    exit handler of the campaign's (its archive, its buffered output) may run twice."""
    try:
        _requests(trainer, backend, conn, probes, other_ends, parent)
    finally:
        os._exit(0)


def _requests(trainer: Any, backend: Any, conn: Any, probes: Any, other_ends: tuple, parent: int) -> None:
    for end in other_ends:  # the parent's ends: the child must not keep them open
        end.close()
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the forking thread
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the signal was set
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    heap.keep_freed_memory()  # inherited from the campaign's process where its backend set it
    idle = _IdleProbe(backend, probes)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        kind, version, state, payload = msg
        try:
            if state is not None:
                load_trainer_state(trainer, state)
            if trainer.version != version:
                raise TrainingError(f"learner process holds update {trainer.version}, the campaign {version}")
            if kind == "step":  # beside a probe in the idle time, if one is under way
                movement, samples, refs = payload
                trainer.cfg.movement = movement
                stats = trainer.step(samples, refs=_tensors(refs))
                reply = (True, stats, trainer_state(trainer))
            elif kind == "probe":  # sampled later, in this process's idle time, on the policy it holds now
                key, args = payload
                idle.start(key, args)
                reply = (True, None, None)
            else:  # "generate": the backend's copy here samples the trainer's model, the policy it holds
                idle.join()
                reply = (True, backend.generate(*payload), None)
        except BaseException as e:  # noqa: BLE001 - reported to the campaign, which raises it
            reply = (False, f"{type(e).__name__}: {e}".splitlines()[0], None)
        conn.send(reply)


class LearnerProcess:
    """A forked child that takes ``PolicyTrainer.step`` calls for ``trainer``, and samples the policy it holds
    through its copy of ``backend`` (the probes; see the module docstring)."""

    def __init__(self, trainer: Any, backend: Any = None) -> None:
        ctx = mp.get_context("fork")
        for stream in (sys.stdout, sys.stderr):  # nothing buffered here is left for the child to write again
            if stream is not None:
                stream.flush()
        self.conn, child = ctx.Pipe()
        self._probes, probes = ctx.Pipe(duplex=False)  # the outcomes of `start_probe`, in the order started
        self.proc = ctx.Process(target=_serve, args=(trainer, backend, child, probes, (self.conn, self._probes),
                                                     os.getpid()), daemon=True, name="vevo-learner")
        self.proc.start()
        child.close()
        probes.close()
        self._probes_out = 0  # probes started whose outcome has not been read
        self._count_lock = threading.Lock()
        self.version: int | None = trainer.version  # the update counter of the state the child holds (None: unknown)
        self._lock = threading.Lock()  # one request at a time: the learner thread and the baseline probe's share it
        self._busy = 0.0  # seconds from each request's send to its reply, summed: the child's work (one at a time)
        self._counted = (time.monotonic(), 0.0)  # the clock and the busy seconds at the last `usage`

    def _request(self, trainer: Any, kind: str, payload: tuple, gate: threading.Event | None = None) -> Any:
        """Send one request with the trainer's state if the child's is not the same, and take its reply; its new
        state goes into ``trainer`` once ``gate`` is open (the caller may read the old one until then)."""
        with self._lock:
            state = trainer_state(trainer) if trainer.version != self.version else None
            sent = time.monotonic()
            try:
                self.conn.send((kind, trainer.version, state, payload))
                ok, out, new = self.conn.recv()
            except (EOFError, OSError) as e:
                raise self._died(e) from None
            self._busy += time.monotonic() - sent
            if not ok:  # the child's trainer may be half way through an update: the next request sends the state
                self.version = None
                raise TrainingError(f"learner process: {out}")
            if new is not None:
                if gate is not None:
                    gate.wait()
                load_trainer_state(trainer, new)
            self.version = trainer.version
            return out

    def _died(self, e: BaseException) -> TrainingError:
        """The one-line error for a pipe to the child that broke: it died (its exit code, once reaped)."""
        self.proc.join(timeout=5)
        return TrainingError(f"learner process died (exit code {self.proc.exitcode}): {type(e).__name__}")

    def usage(self) -> tuple[float, float]:
        """(seconds since the last call, or since the fork; the child's busy seconds among them): what it did
        between two published steps, and how long it waited for the campaign (evolve/analysis/account.py). The
        probes it samples in its idle time count apart (their CPU seconds come with `probe_results`)."""
        now, busy = time.monotonic(), self._busy  # not under the lock: a request may be waiting on its gate
        (then, before), self._counted = self._counted, (now, busy)
        return now - then, busy - before

    def step(self, trainer: Any, samples: Sequence[Any], refs: Any = None,
             gate: threading.Event | None = None) -> dict[str, float]:
        """``trainer.step(samples, refs)`` taken in the child; ``trainer`` ends in the state the child's step left,
        loaded once ``gate`` (if any) is open: until then this process may still read the state before the step
        (the campaign saves the last step's snapshot while the child runs the next)."""
        return self._request(trainer, "step", (trainer.cfg.movement, list(samples), _numpy(refs)), gate)

    def generate(self, trainer: Any, prompts: list[str], n: int, sampling: Any) -> list:
        """``backend.generate`` in the child, on the policy ``trainer`` holds."""
        return self._request(trainer, "generate", (list(prompts), n, sampling))

    def start_probe(self, trainer: Any, key: Any, prompts: list[str], n: int, sampling: Any) -> None:
        """``backend.generate(prompts, n, sampling)`` in the child's idle time, on the policy ``trainer`` holds
        now (pinned there): the later steps do not wait for it, and `probe_results` returns it, with ``key``."""
        self._request(trainer, "probe", (key, (list(prompts), n, sampling)))
        with self._count_lock:  # started on the learner thread, read on the loop's
            self._probes_out += 1

    def probe_results(self, wait: bool = False) -> list[tuple[Any, list, float]]:
        """The finished probes, oldest first: ``(key, completions, the child's CPU seconds on it)``; ``wait``:
        every one started (the child takes them at once where nothing else runs there). Only one thread reads
        them (the campaign's loop)."""
        out = []
        while self._probes_out and (wait or self._probes.poll()):
            try:
                key, ok, res, cpu = self._probes.recv()
            except (EOFError, OSError) as e:
                raise self._died(e) from None
            with self._count_lock:
                self._probes_out -= 1
            if not ok:
                raise TrainingError(f"learner process: probe: {res}")
            out.append((key, res, cpu))
        return out

    def sampler(self, trainer: Any, backend: Any) -> "ChildSampler":
        """``backend`` with its ``generate`` done in the child, on ``trainer``'s policy (for the probes)."""
        return ChildSampler(self, trainer, backend)

    def close(self) -> None:
        """Stop the child (it is idle between requests) and wait for it."""
        with self._lock:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
            self.proc.join(timeout=10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
            self.conn.close()
            self._probes.close()


class ChildSampler:
    """A backend whose ``generate`` runs in the learner process, on the trainer's current policy, and which is
    ``backend`` for everything else. The child's copy of the backend samples it unpinned (it was forked before
    any pin), so a probe there draws what a probe on the live model here draws, with the same seed."""

    def __init__(self, proc: LearnerProcess, trainer: Any, backend: Any) -> None:
        self._proc, self._trainer, self._backend = proc, trainer, backend

    def generate(self, prompts: list[str], n: int, sampling: Any) -> list:
        return self._proc.generate(self._trainer, prompts, n, sampling)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)
