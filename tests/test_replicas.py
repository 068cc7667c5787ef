"""Several `openai:` replicas serving one campaign: real HTTP servers on 127.0.0.1 sampling the bundled tiny proposer
with transformers (the servers of tests/test_openai_backend.py). Requests spread over the replicas, a replica
killed mid-run loses no iteration and changes no result, LoRA updates reach every replica."""
from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from evolve.archive import Archive  # noqa: E402
from evolve.config import load_config  # noqa: E402
from evolve.runner import start  # noqa: E402
from proposer.backends import TINY_CHECKPOINT, make_backend  # noqa: E402
from proposer.base import SamplingParams  # noqa: E402
from proposer.replicas import ReplicatedBackend  # noqa: E402
from tests.test_openai_backend import MODEL_NAME, Server, TinyLM, build_tiny_llama, make_lora_adapter  # noqa: E402

PROBLEMS = ["pbe/int-0", "pbe/list-1"]


@pytest.fixture(scope="module")
def tiny_lm():
    torch.set_num_threads(1)
    return TinyLM(TINY_CHECKPOINT)


def _cfg(out, **kw):
    base = {"problems": PROBLEMS, "iterations": 6, "islands": 1, "answers": 2, "group": 2, "workers": 1,
            "max_tokens": 24, "seed": 4, "retire_solved": False, "out": str(out)}
    return load_config(None, {**base, **kw})


def _export(run):
    with Archive(run / "archive.db", readonly=True) as a:
        return a.export_rows(), [r.iteration for r in a.metrics_rows()], a.recent_groups(100)


def test_two_replicas_serve_a_campaign_and_one_dies_mid_run(tiny_lm, tmp_path):
    one = Server(tiny_lm)
    try:  # reference: the same campaign on one server
        be = make_backend(f"openai:{one.url}", model=MODEL_NAME, chat=False)
        start(_cfg(tmp_path / "one", proposer=f"openai:{one.url}"), progress=False, backend=be)
    finally:
        one.stop()
    a, b = Server(tiny_lm), Server(tiny_lm)
    rb = make_backend(f"openai:{a.url},{b.url}", model=MODEL_NAME, chat=False, backoff=0.05)
    assert isinstance(rb, ReplicatedBackend) and len(rb.replicas) == 2
    run = tmp_path / "two"
    stopped = threading.Event()

    def kill_b_after_iteration_2():
        end = time.time() + 300
        while time.time() < end:
            try:
                with Archive(run / "archive.db", readonly=True) as arc:
                    if (arc.last_iteration() or 0) >= 2:
                        break
            except Exception:
                pass
            time.sleep(0.02)
        b.stop()
        stopped.set()

    killer = threading.Thread(target=kill_b_after_iteration_2, daemon=True)
    killer.start()
    try:
        start(_cfg(run, proposer=f"openai:{a.url},{b.url}"), progress=False, backend=rb)
    finally:
        killer.join(timeout=60)
        a.stop()
    assert stopped.is_set()
    assert rb.served[0] > 0 and rb.served[1] > 0  # requests were spread
    assert rb.failovers >= 1  # b's request after its death went to a
    rows_one, its_one, _ = _export(tmp_path / "one")
    rows_two, its_two, groups = _export(run)
    assert its_two == list(range(7)) and all(len(g.completions) == 2 for g in groups)  # no iteration lost
    assert rows_two == rows_one  # which replica answered changes nothing


def test_adapter_updates_reach_every_live_replica(tmp_path):
    model = build_tiny_llama(tmp_path / "m")
    adapter = make_lora_adapter(model, tmp_path / "lora")
    servers = [Server(TinyLM(model)), Server(TinyLM(model))]
    try:
        rb = make_backend(",".join(["openai:" + servers[0].url, servers[1].url]), chat=False, backoff=0.01)
        rb.load_adapter(adapter, version=1)
        assert all("vevo-policy-1" in s.lm.models for s in servers) and rb.policy_version == 1
        groups = rb.generate(["def f1(x, y):", "def f2(x, y):"], 2, SamplingParams(max_tokens=4, seed=0))
        assert all(c.policy_version == 1 for g in groups for c in g)
        used = [r["body"]["model"] for s in servers for r in s.requests if r["path"].endswith("/completions")]
        assert used and set(used) == {"vevo-policy-1"} and all(s.requests for s in servers)
        assert rb.state() == {"policy_version": 1, "adapter": str(adapter)}
        servers[1].stop()  # down during the next update: the update still lands on the live one
        rb.load_adapter(adapter, version=2)
        assert "vevo-policy-2" in servers[0].lm.models and rb.policy_version == 2
        groups = rb.generate(["def f3(x, y):"] * 3, 1, SamplingParams(max_tokens=3, seed=1))
        assert all(c.policy_version == 2 for g in groups for c in g)
    finally:
        for s in servers:
            s.stop()
