"""`vllm-ray:PATH` pieces that run without vllm: the config keys and their errors, what the runner hands the
backend, the GPU placement rule and its one-line error, adapter files as bytes, and the one-line error when vllm
is not installed (before any Ray is started). The engines themselves: tests/proposer/test_vllm_ray.py (vllm venv)."""
from __future__ import annotations

import importlib.util

import pytest

ray = pytest.importorskip("ray")

from evolve.config.schema import ConfigError, load_config  # noqa: E402
from evolve.launch.runner import backend_kwargs  # noqa: E402
from proposer.backends import TINY_CHECKPOINT, expected_specs, make_backend, spec_kind  # noqa: E402
from proposer.backends.base import ADAPTERS, STATE, VERSIONED  # noqa: E402
from proposer.errors import BackendError  # noqa: E402
from proposer.backends.ray_replicas import (RayVLLMBackend, actor_gpus, pack_adapter, placement_error,  # noqa: E402
                                   unpack_adapter)

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_config_keys_and_their_one_line_errors():
    cfg = load_config(None, {"proposer.spec": "vllm-ray:/m", "proposer.options.replicas": 3,
                             "proposer.options.tensor_parallel_size": 2, "proposer.options.restarts": 0,
                             "executor.ray_address": "10.0.0.1:6379"})
    assert cfg.proposer.options == {"replicas": 3, "tensor_parallel_size": 2, "restarts": 0}
    assert backend_kwargs(load_config(None, {"proposer.spec": "vllm-ray:/m"}))["replicas"] == 1
    assert backend_kwargs(load_config(None, {"proposer.spec": "vllm-ray:/m"}))["restarts"] == 1
    opt = "proposer.options."
    for over, msg in (({opt + "replicas": 0}, "'proposer.options.replicas' of backend 'vllm-ray': Input should be "
                       "greater than or equal to 1"),
                      ({opt + "tensor_parallel_size": 0}, "'proposer.options.tensor_parallel_size' of backend "
                       "'vllm-ray': Input should be greater"),
                      ({opt + "restarts": -1}, "'proposer.options.restarts' of backend 'vllm-ray': Input should be "
                       "greater than or equal to 0"),
                      ({opt + "replicas": 2, "proposer.spec": "vllm:/m"}, "'proposer.options.replicas' is not an "
                       "option of backend 'vllm'"),
                      ({opt + "replicas": "two"}, "'proposer.options.replicas' of backend 'vllm-ray': Input should "
                       "be a valid integer")):
        with pytest.raises(ConfigError) as ei:
            load_config(None, {"proposer.spec": "vllm-ray:/m", **over})
        assert msg in str(ei.value) and "\n" not in str(ei.value)


def test_runner_hands_the_backend_replicas_tp_share_and_the_one_ray_address():
    cfg = load_config(None, {"proposer.spec": "vllm-ray:/m", "proposer.options.replicas": 2,
                             "proposer.options.tensor_parallel_size": 2, "executor.ray_address": "127.0.0.1:6379",
                             "train.algo": "vpo"})
    kw = backend_kwargs(cfg)
    assert kw["replicas"] == 2 and kw["tensor_parallel_size"] == 2 and kw["restarts"] == 1
    assert kw["ray_address"] == "127.0.0.1:6379"  # executor.ray_address: one cluster serves both
    assert kw["gpu_memory_utilization"] == 0.85  # the trainer is on the driver, not in the engines' GPUs
    assert kw["max_lora_rank"] >= 64
    local = backend_kwargs(load_config(None, {"proposer.spec": "vllm:/m", "train.algo": "vpo",
                                              "proposer.options.tensor_parallel_size": 4}))
    assert local["gpu_memory_utilization"] == 0.5 and local["tensor_parallel_size"] == 4 and "replicas" not in local
    assert "vllm-ray:PATH" in expected_specs() and spec_kind("vllm-ray:/m") == "vllm-ray"


def test_gpus_per_actor_rule():
    assert actor_gpus(1, 0.45, cluster_gpus=8) == 0.45   # TP 1: the engine's share, so replicas can pack a GPU
    assert actor_gpus(1, 1.0, cluster_gpus=8) == 1.0
    assert actor_gpus(4, 0.9, cluster_gpus=8) == 4.0     # TP > 1: whole GPUs, one per rank
    assert actor_gpus(2, 0.9, cluster_gpus=0) == 0.0     # no GPU in the cluster: vLLM's CPU backend


def test_placement_check_counts_per_node():
    assert placement_error([1.0, 1.0], 2, 0.85) is None
    assert placement_error([1.0], 2, 0.45) is None              # two shares of one GPU
    assert placement_error([0.0, 0.0], 5, 0.0) is None          # CPU actors: nothing to check
    assert placement_error([4.0, 4.0], 2, 4.0) is None
    err = placement_error([2.0, 2.0], 1, 4.0)                   # 4 GPUs in all, but no node has 4
    assert err and "do not fit the cluster" in err and "0 fit" in err and "\n" not in err
    err = placement_error([1.0], 3, 0.4)
    assert err and "3 replicas of 0.4 GPU each" in err and "2 fit" in err
    assert "1 fit" in placement_error([1.0], 2, 0.85)


def test_adapter_files_travel_as_bytes(tmp_path):
    src = tmp_path / "adapter"
    (src / "sub").mkdir(parents=True)
    (src / "adapter_config.json").write_text('{"r": 8}')
    (src / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 4)
    (src / "sub" / "x.txt").write_text("x")
    files = pack_adapter(src)
    assert set(files) == {"adapter_config.json", "adapter_model.safetensors", "sub/x.txt"}
    out = unpack_adapter(files, tmp_path / "copy")
    assert all((out / k).read_bytes() == (src / k).read_bytes() for k in files)
    with pytest.raises(BackendError, match="leaves the adapter folder"):
        unpack_adapter({"../evil": b"x"}, tmp_path / "copy2")
    with pytest.raises(BackendError, match="no PEFT adapter"):
        pack_adapter(tmp_path)


def test_capabilities_are_those_of_the_openai_replicas():
    assert {STATE, VERSIONED, ADAPTERS} <= RayVLLMBackend.capabilities


def test_bad_arguments_are_one_line_before_ray_starts(tmp_path):
    for kw, msg in (({"replicas": 0}, "replicas must be >= 1"),
                    ({"tensor_parallel_size": 0}, "tensor_parallel_size must be >= 1"),
                    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in"),
                    ({"enable_sleep_mode": True}, r"sleep mode \(proposer.options.sleep\) is for a vllm: engine")):
        with pytest.raises(BackendError, match=msg):
            make_backend(f"vllm-ray:{TINY_CHECKPOINT}", **kw)
    with pytest.raises(BackendError, match="model path .* not found"):
        make_backend(f"vllm-ray:{tmp_path / 'nope'}")
    with pytest.raises(BackendError, match="no model at"):
        make_backend(f"vllm-ray:{tmp_path}")
    assert not ray.is_initialized()


def test_missing_vllm_is_one_line_and_starts_no_ray():
    if HAVE_VLLM:
        pytest.skip("vllm is installed")
    was = ray.is_initialized()
    with pytest.raises(BackendError) as ei:
        make_backend(f"vllm-ray:{TINY_CHECKPOINT}", replicas=2)
    assert str(ei.value).startswith("vllm-ray: cannot import vllm") and "\n" not in str(ei.value)
    assert ray.is_initialized() == was
