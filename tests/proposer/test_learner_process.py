"""The learner process (proposer/training/learner_process.py): a real forked child taking real PolicyTrainer steps
on a tiny Llama with a LoRA; what it leaves in the campaign's trainer must be what a step on the thread leaves."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from proposer.errors import TrainingError
from proposer.training import learner_process
from proposer.training.trainer import PolicyTrainer
from tests.proposer.trainer_helpers import campaign_group as _group
from tests.proposer.trainer_helpers import lora_trainer as _trainer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the learner process forks (Linux)")


@pytest.fixture(autouse=True)
def one_thread():
    """The campaign's torch threads (`available` forks only from one)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _state(tr: PolicyTrainer) -> list[torch.Tensor]:
    """Every tensor a step changes: the trainable weights, then Adam's moments and step counters."""
    opt = tr.opt.state_dict()["state"]
    return [p.detach().clone() for p in tr.params] + [v.clone() for k in sorted(opt) for v in opt[k].values()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_steps_in_the_process_leave_the_trainer_bit_for_bit_as_steps_on_the_thread():
    """Four steps each way, the third taken by the campaign itself (so the fourth request must carry the moved
    state), the last with its reference log-probs taken here (they cross the pipe): the same statistics and the
    same weights and optimizer state, bit for bit."""
    a, b = _trainer(), _trainer()
    assert learner_process.available(b)
    torch.set_num_threads(2)
    assert not learner_process.available(b)  # forked from an OpenMP pool of two, the child would hang
    torch.set_num_threads(1)
    steps = [_group(seed=s, model=a.model) for s in (1, 2, 3, 4)]
    proc = learner_process.LearnerProcess(b)
    try:
        for i, samples in enumerate(steps):
            a.cfg.movement = b.cfg.movement = i % 2 == 0  # the movement flag travels with each request
            sa = a.step(samples)
            if i == 2:  # a step the campaign takes in its own process (a resume's redone step)
                sb = b.step(samples)
            else:
                sb = proc.step(b, samples, refs=b.reference(samples) if i == 3 else None)
            assert sa == sb, i
            assert _same(_state(a), _state(b)), i
            assert a.version == b.version == i + 1
        assert proc.proc.is_alive()
    finally:
        proc.close()
    assert not proc.proc.is_alive() and proc.proc.exitcode == 0
    assert max(float((p.detach() - q.detach()).abs().max()) for p, q in zip(a.params, _trainer().params)) > 0


def test_an_error_in_the_child_is_one_line_and_the_process_serves_on():
    tr = _trainer()
    proc = learner_process.LearnerProcess(tr)
    try:
        bad = _group(model=tr.model)
        bad[0].advantage = float("nan")
        with pytest.raises(TrainingError, match=r"^learner process: ValueError: sample 0: advantage is nan$"):
            proc.step(tr, bad)
        assert tr.version == 0 and proc.version is None  # the next request carries the state again
        proc.step(tr, _group(model=tr.model))  # and is served
        assert tr.version == 1
    finally:
        proc.close()


def test_usage_counts_the_childs_work_and_its_waiting_between_calls():
    """`usage`: the seconds since the last call (or the fork) and the child's busy seconds among them (each request
    from its send to its reply): a step is busy time, a pause between requests is not."""
    tr = _trainer()
    proc = learner_process.LearnerProcess(tr)
    try:
        t = time.monotonic()
        proc.step(tr, _group(model=tr.model))
        step = time.monotonic() - t
        time.sleep(0.3)  # the child waits for the next request
        elapsed, busy = proc.usage()
        assert 0.0 < busy <= step and elapsed >= busy + 0.3
        elapsed, busy = proc.usage()  # nothing since the last call
        assert busy == 0.0 and elapsed < 0.1
    finally:
        proc.close()


def test_a_dead_child_is_a_training_error_not_a_hang():
    tr = _trainer()
    proc = learner_process.LearnerProcess(tr)
    os.kill(proc.proc.pid, signal.SIGKILL)
    proc.proc.join(timeout=10)
    with pytest.raises(TrainingError, match=r"learner process died \(exit code -9\)"):
        proc.step(tr, _group(model=tr.model))
    proc.close()


_PARENT = """
import sys, time
import torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
from tests.proposer.trainer_helpers import lora_trainer
from proposer.training.learner_process import LearnerProcess
proc = LearnerProcess(lora_trainer())
print(proc.proc.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running, not gone and not a zombie waiting for whoever inherited it to reap it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def test_the_child_dies_with_a_parent_killed_by_sigkill():
    """kill -9 of the campaign leaves no learner behind (PR_SET_PDEATHSIG), though the child is idle in recv."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.Popen([sys.executable, "-c", _PARENT.format(root=root)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())
        os.kill(child, 0)  # alive
        p.kill()
        p.wait()
        end = time.time() + 10
        while time.time() < end and _alive(child):
            time.sleep(0.05)
        if _alive(child):
            os.kill(child, signal.SIGKILL)
            pytest.fail("the learner process outlived its parent")
    finally:
        p.kill()


def test_the_child_samples_what_the_campaign_would_sample_before_and_after_a_step():
    """The probes' path: ``sampler(...).generate`` in the child gives the tokens and log-probs that the campaign's
    own backend gives with the same seed, on policy v0 and on the policy a step in the child made."""
    from proposer.backends import TINY_CHECKPOINT, make_backend
    from proposer.backends.base import SamplingParams
    from proposer.training.lora import wrap_lora
    from proposer.training.trainer import TrainConfig, TrainSample

    if not (TINY_CHECKPOINT / "config.json").is_file():
        pytest.skip("no bundled tiny checkpoint")
    be = make_backend("tiny", device="cpu", threads=1)
    torch.manual_seed(0)
    be.model = wrap_lora(be.model, rank=4)
    tr = PolicyTrainer(be.model, TrainConfig(lr=5e-2))
    prompt = "def f(x):\n    return"
    sp = SamplingParams(temperature=1.0, max_tokens=24, seed=7)
    proc = learner_process.LearnerProcess(tr, be)
    try:
        def both() -> tuple[list, list]:
            here = be.generate([prompt, "x ="], 3, sp)
            there = proc.sampler(tr, be).generate([prompt, "x ="], 3, sp)
            return ([(c.token_ids, c.logprobs) for g in here for c in g],
                    [(c.token_ids, c.logprobs) for g in there for c in g])
        here, there = both()
        assert here == there
        group = be.generate([prompt], 4, SamplingParams(temperature=1.0, max_tokens=24, seed=1))[0]
        proc.step(tr, [TrainSample.from_completion(c, a) for c, a in zip(group, [1.0, -1.0, 0.5, -0.5])])
        assert tr.version == 1
        here2, there2 = both()
        assert here2 == there2
        assert here2 != here  # the step moved the policy both sample
        assert proc.sampler(tr, be).name == be.name  # everything but generate is the backend's
    finally:
        proc.close()


def test_a_probe_left_to_the_childs_idle_time_samples_the_policy_it_was_started_on():
    """`start_probe` after a step, then two more steps sent at once (they run beside it, its thread at the idle
    class): its completions are those `generate` gives on the policy of the step before it, with the same seed; the
    steps beside it leave the trainer bit for bit as steps with no probe; an error in it is one line."""
    from proposer.backends import TINY_CHECKPOINT, make_backend
    from proposer.backends.base import SamplingParams
    from proposer.training.lora import wrap_lora
    from proposer.training.trainer import TrainConfig, TrainSample

    if not (TINY_CHECKPOINT / "config.json").is_file():
        pytest.skip("no bundled tiny checkpoint")

    def setup() -> tuple:
        be = make_backend("tiny", device="cpu", threads=1)
        torch.manual_seed(0)
        be.model = wrap_lora(be.model, rank=4)
        return be, PolicyTrainer(be.model, TrainConfig(lr=5e-2))

    be, tr = setup()
    ref_be, ref = setup()
    prompts, sp = ["def f(x):\n    return", "x ="], SamplingParams(temperature=1.0, max_tokens=160, seed=7)
    groups = [be.generate(["def g(y):"], 4, SamplingParams(temperature=1.0, max_tokens=24, seed=s))[0]
              for s in (1, 2, 3)]
    steps = [[TrainSample.from_completion(c, a) for c, a in zip(g, [1.0, -1.0, 0.5, -0.5])] for g in groups]
    proc = learner_process.LearnerProcess(tr, be)
    try:
        proc.step(tr, steps[0])
        ref.step(steps[0])
        want = [(c.token_ids, c.logprobs) for g in ref_be.generate(prompts, 3, sp) for c in g]  # policy v1, at once
        proc.start_probe(tr, "v1", prompts, 3, sp)
        for samples in steps[1:]:  # the policy moves on in the child while the probe samples v1 there
            assert proc.step(tr, samples) == ref.step(samples)
            assert _same(_state(tr), _state(ref))
        (key, got, cpu), = proc.probe_results(wait=True)
        assert key == "v1" and cpu > 0 and proc.probe_results() == []
        assert [(c.token_ids, c.logprobs) for g in got for c in g] == want
        assert [c.token_ids for g in got for c in g] != \
            [c.token_ids for g in ref_be.generate(prompts, 3, sp) for c in g]  # v3 samples something else
        proc.start_probe(tr, "bad", prompts, 3, SamplingParams(temperature=1.0, max_tokens=8, seed=1, top_p=2.0))
        with pytest.raises(TrainingError, match=r"^learner process: probe: ValueError: .*top_p") as e:
            proc.probe_results(wait=True)
        assert "\n" not in str(e.value)
        assert proc.step(tr, steps[0]) == ref.step(steps[0])  # and it serves on
    finally:
        proc.close()
