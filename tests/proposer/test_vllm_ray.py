"""`--proposer vllm-ray:PATH`: vLLM CPU engines of a tiny model started by vevo as Ray actors on a real local Ray
cluster (127.0.0.1) serve one campaign; an actor killed mid-run loses no iteration; a LoRA adapter reaches every
actor as bytes (each loads it from its own temp dir) and a restarted actor gets it back. Runs in the vllm venv
(scripts/vllm_ci.sh); skipped elsewhere."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")
ray = pytest.importorskip("ray")

from evolve.archive import Archive  # noqa: E402
from proposer.backends import TINY_CHECKPOINT, make_backend  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.errors import BackendError  # noqa: E402
from proposer.backends.ray_replicas import NAMESPACE, RayVLLMBackend  # noqa: E402
from tests.campaign_helpers import vevo  # noqa: E402


def _cluster(**head):
    from ray.cluster_utils import Cluster

    from proposer.backends.vllm import _cpu_defaults

    _cpu_defaults()  # the raylet's workers (the engines' actors) inherit this process's environment
    c = Cluster(initialize_head=True, head_node_args={"include_dashboard": False,
                                                      "object_store_memory": 80 * 2**20, **head})
    assert c.address.startswith("127.0.0.1:")
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    return c


def _stop(c) -> None:
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def _our_actors() -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == NAMESPACE and a["name"].startswith("vllm-ray-"))


def _no_actors_left(timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while _our_actors() and time.monotonic() < end:
        time.sleep(0.5)
    return _our_actors() == []


def test_more_gpus_than_the_cluster_has_is_one_line_and_starts_nothing():
    c = _cluster(num_cpus=1, num_gpus=1)  # Ray counts the declared GPU; no engine is started
    try:
        for kw, fit in (({"replicas": 2}, 1), ({"replicas": 1, "tensor_parallel_size": 2}, 0),
                        ({"replicas": 3, "gpu_memory_utilization": 0.4}, 2)):
            with pytest.raises(BackendError, match=f"do not fit the cluster .*{fit} fit") as ei:
                make_backend(f"vllm-ray:{TINY_CHECKPOINT}", ray_address=c.address, **kw)
            assert "\n" not in str(ei.value)
        assert _our_actors() == []
        with pytest.raises(BackendError, match="tensor_parallel_size must be >= 1"):
            make_backend(f"vllm-ray:{TINY_CHECKPOINT}", tensor_parallel_size=0)
    finally:
        _stop(c)


def test_an_engine_that_cannot_start_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    c = _cluster(num_cpus=1)
    try:
        with pytest.raises(BackendError) as ei:
            make_backend(f"vllm-ray:{tmp_path}", replicas=1, ray_address=c.address)
        assert "\n" not in str(ei.value) and "#0: start-up:" in str(ei.value), str(ei.value)
        assert _no_actors_left()
    finally:
        _stop(c)


@pytest.fixture(scope="module")
def cluster():
    c = _cluster(num_cpus=2)  # no GPU: the actors get num_gpus=0 and vLLM's CPU backend
    yield c
    _stop(c)


def test_training_campaign_on_two_ray_replicas_one_killed_mid_run(cluster, tmp_path):
    """One Ray cluster serves the sandboxes (executor ray) and the engines; --train vpo as with vllm:PATH."""
    run, cfg = tmp_path / "run", tmp_path / "c.yaml"
    # a transformers learner in the driver, each adapter published to the actors
    cfg.write_text("sampling: {max_tokens: 96}\nsearch: {retire_solved: false}\n"
                   "train: {algo: vpo, every: 2, batch: 2, group: 2, lr: 0.001}\nseed: 5\n")
    seen: dict = {}

    def kill_one_after_both_served():
        end = time.time() + 600
        while time.time() < end:
            names = _our_actors()
            try:
                if len(names) == 2:
                    infos = [ray.get(ray.get_actor(n, namespace=NAMESPACE).info.remote(), timeout=60) for n in names]
                    with Archive(run / "archive.db", readonly=True) as a:
                        done = a.last_iteration() or 0
                    if all(i["served"] >= 1 for i in infos) and done >= 3:
                        seen.update(names=names, served=[i["served"] for i in infos], iteration=done)
                        ray.kill(ray.get_actor(names[0], namespace=NAMESPACE), no_restart=True)
                        return
            except Exception:  # noqa: BLE001 - the archive or the actors are not there yet
                pass
            time.sleep(0.2)

    killer = threading.Thread(target=kill_one_after_both_served, daemon=True)
    killer.start()
    vevo("run", str(cfg), "--suite", "pbe-heldout", "--proposer", f"vllm-ray:{TINY_CHECKPOINT}", "--vllm-replicas",
         "2", "--vllm-restarts", "0", "--executor", "ray", "--workers", "1", "--ray-address", cluster.address,
         "--iterations", "8", "--islands", "1",
         "--answers", "4", "--group", "2", "--out", str(run), "--quiet", timeout=900)
    killer.join(60)
    assert seen.get("served") and min(seen["served"]) >= 1 and seen["iteration"] < 8, seen  # both served, then one died
    show = json.loads(vevo("runs", "show", str(run), "--json").stdout)
    assert show["iterations"] == 8
    with Archive(run / "archive.db", readonly=True) as a:
        its = [r.iteration for r in a.metrics_rows()]
        groups = a.recent_groups(100)
        rows = a.training_rows()
    assert its == list(range(9)) and len(groups) == 8 and all(len(g.completions) == 2 for g in groups)
    assert [r.step for r in rows] == [2, 4, 6, 8] and rows[0].policy_version >= 1
    late = [c.policy_version for g in groups if g.iteration >= 4 for c in g.completions]
    assert late and all(v >= rows[0].policy_version for v in late)  # the published policy generated them
    assert _no_actors_left()  # the run's close stopped its actors


def test_lora_published_to_every_actor_and_to_a_restarted_one(cluster, tmp_path):
    from tests.openai_helpers import build_tiny_llama, make_lora_adapter
    from tests.vllm_helpers import ATOL, max_logprob_error

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = build_tiny_llama(tmp_path / "model")
    adapter = make_lora_adapter(model, tmp_path / "a1", seed=1)
    load = lambda: AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).eval()  # noqa: E731
    hf_base, hf_a1 = load(), PeftModel.from_pretrained(load(), str(adapter)).eval()
    rb = RayVLLMBackend(model, replicas=2, restarts=1, dtype="float32", seed=0, max_model_len=512, max_lora_rank=8)
    try:
        sp = SamplingParams(max_tokens=8, seed=5)
        prompts = ["def f4(x, y):", "<answer_1>"]
        base = [r.generate(prompts, 2, sp) for r in rb.replicas]
        assert max_logprob_error(hf_base, base[0] + base[1]) < ATOL
        rb.load_adapter(adapter, version=1)
        infos = [r.info() for r in rb.replicas]
        assert [i["policy_version"] for i in infos] == [1, 1] and len({i["pid"] for i in infos}) == 2
        # each actor loaded its own copy of the shipped bytes, not the driver's folder
        assert all(i["adapter"] and Path(i["adapter"]).name.startswith("v1-") and
                   Path(i["adapter"]).parent != adapter.parent for i in infos)
        tuned = [r.generate(prompts, 2, sp) for r in rb.replicas]
        flat = tuned[0] + tuned[1]
        assert all(c.policy_version == 1 and c.meta["lora"].startswith("policy-1") for g in flat for c in g)
        assert max_logprob_error(hf_a1, flat) < ATOL and max_logprob_error(hf_base, flat) > 0.05  # the adapter is in use on both
        assert [c.token_ids for g in tuned[0] for c in g] == [c.token_ids for g in tuned[1] for c in g]
        split = rb.generate(prompts, 2, sp)  # one prompt per actor samples what one engine gave for the call
        assert [c.token_ids for g in split for c in g] == [c.token_ids for g in tuned[0] for c in g]
        assert rb.state() == {"policy_version": 1, "adapter": str(adapter)}

        ray.kill(rb.replicas[0].handle, no_restart=True)  # lost: the next calls fail over, a new actor starts
        groups = rb.generate(prompts * 2, 2, sp)
        assert len(groups) == 4 and all(c.policy_version == 1 for g in groups for c in g)
        assert rb.failovers >= 1 and rb.restarted == 1
        end = time.monotonic() + 300
        while True:
            try:
                rb.replicas[0].wait_ready(timeout=5)
                break
            except BackendError:
                assert time.monotonic() < end, "the restarted engine did not come up"
        info = rb.replicas[0].info()
        assert info["pid"] != infos[0]["pid"] and info["policy_version"] == 1 and info["adapter"]
        again = rb.replicas[0].generate(prompts, 2, sp)  # the new actor serves the adapter it was re-sent
        assert [c.token_ids for g in again for c in g] == [c.token_ids for g in tuned[1] for c in g]
    finally:
        rb.close()
    assert _no_actors_left()
