"""OpenAIBackend against real HTTP servers on 127.0.0.1 (no mocks of the client).

The model server (tests/openai_helpers.py) is a small OpenAI-compatible server (``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, ``/v1/load_lora_adapter``) that samples from a random tiny Llama with transformers, so
the backend sees real text, real token ids and real log-probs, which are checked against
``proposer.backends.logprobs.completion_logprobs`` on the same model. It speaks vLLM's extensions (``return_token_ids``,
``return_tokens_as_token_ids``) unless ``strict`` (then, like OpenAI, unknown fields are a 400). Failure servers
(500s, slow answers, dead ports) exercise retries and errors.
"""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from proposer.backends import BackendError, make_backend  # noqa: E402
from proposer.backends.base import SamplingParams  # noqa: E402
from proposer.backends.openai import OpenAIBackend, normalize_base_url  # noqa: E402
from tests.openai_helpers import MODEL_NAME, Server, TinyLM, build_tiny_llama, make_lora_adapter  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="module")
def lm(model_dir) -> TinyLM:
    torch.set_num_threads(1)
    return TinyLM(model_dir)


@pytest.fixture
def serve(lm):
    servers = []

    def start(**kw) -> Server:
        s = Server(kw.pop("lm", lm), **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_against_hf(model, groups, atol=1e-4):
    from proposer.backends.logprobs import batch_sequence_logprobs

    flat = [c for g in groups for c in g]
    assert all(c.token_ids and c.prompt_token_ids and c.logprobs for c in flat)
    ref = batch_sequence_logprobs(model, [c.prompt_token_ids for c in flat], [c.token_ids for c in flat])
    for c, r in zip(flat, ref):
        assert len(c.logprobs) == len(r) == len(c.token_ids)
        assert max(abs(a - b) for a, b in zip(c.logprobs, r)) < atol


# ------------------------------------------------------------------------------------------------ the tests
def test_base_url_normalization():
    assert normalize_base_url("127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert normalize_base_url("http://h:1/") == "http://h:1/v1"
    assert normalize_base_url("https://api.example.com/v1/") == "https://api.example.com/v1"
    with pytest.raises(BackendError):
        normalize_base_url("ftp://h/v1")


def test_completions_n_per_prompt_with_logprobs_and_token_ids(serve, lm):
    srv = serve()
    be = OpenAIBackend(srv.url)  # no model given: the first of GET /v1/models
    assert be.model == MODEL_NAME
    prompts = ["def f1(x, y):", "Task: add 3 to every element", "<answer_1>"]
    groups = be.generate(prompts, 4, SamplingParams(temperature=1.0, max_tokens=6, seed=0))
    assert [len(g) for g in groups] == [4, 4, 4]
    for p, g in zip(prompts, groups):
        for c in g:
            assert c.prompt_token_ids == lm.tok(p, add_special_tokens=False)["input_ids"]
            assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0 for lp in c.logprobs)
            body = c.token_ids[:-1] if c.finish_reason == "stop" else c.token_ids
            assert c.text == lm.tok.decode(body, clean_up_tokenization_spaces=False)
            assert c.policy_version == 0 and c.meta["backend"] == "openai"
    texts = [c.text for c in groups[0]]
    assert len(set(texts)) > 1  # n samples, not one sample repeated
    _check_against_hf(lm.base, groups)
    assert all(r["body"]["n"] == 4 and r["body"]["logprobs"] == 1 for r in srv.requests if r["body"])


def test_finish_reason_length_with_small_max_tokens(serve, lm):
    srv = serve()
    be = OpenAIBackend(srv.url, model=MODEL_NAME)
    groups = be.generate(["def f2(x, y):"] * 2, 5, SamplingParams(max_tokens=3, seed=3))
    flat = [c for g in groups for c in g]
    assert any(c.finish_reason == "length" for c in flat)
    for c in flat:
        ends_eos = c.token_ids[-1] == lm.eos
        assert c.finish_reason == ("stop" if ends_eos else "length")
        if c.finish_reason == "length":
            assert len(c.token_ids) == 3 and c.meta["server_finish_reason"] == "length"


def test_chat_api_logprobs(serve, lm):
    srv = serve()
    be = OpenAIBackend(srv.url, model=MODEL_NAME, chat=True)
    groups = be.generate(["write a function", "add two numbers"], 3, SamplingParams(max_tokens=5, seed=1))
    assert [len(g) for g in groups] == [3, 3]
    _check_against_hf(lm.base, groups)
    bodies = [r["body"] for r in srv.requests if r["body"]]
    assert all(b["logprobs"] is True and b["messages"][0]["role"] == "user" for b in bodies)
    assert srv.requests[0]["path"] == "/v1/chat/completions"


def test_strict_server_drops_vllm_extensions(serve):
    srv = serve(strict=True)
    be = OpenAIBackend(srv.url, model=MODEL_NAME, concurrency=1)
    groups = be.generate(["def f3(x, y):", "<answer_1>"], 2, SamplingParams(max_tokens=4, seed=0))
    for c in (c for g in groups for c in g):
        assert c.logprobs and c.token_ids is None and c.prompt_token_ids is None
    # 1 rejected request, then every request without the extensions
    assert [("return_token_ids" in r["body"]) for r in srv.requests] == [True, False, False]


def test_no_logprobs_requested(serve):
    srv = serve()
    be = OpenAIBackend(srv.url, model=MODEL_NAME, logprobs=False)
    (group,) = be.generate(["def f4(x, y):"], 2, SamplingParams(max_tokens=4, seed=0))
    assert all(c.logprobs is None and c.token_ids for c in group)
    assert "logprobs" not in srv.requests[0]["body"]


def test_seeds_reproducible_and_distinct_per_prompt(serve):
    srv = serve()
    be = OpenAIBackend(srv.url, model=MODEL_NAME)
    sp = SamplingParams(max_tokens=6, seed=42)
    a = be.generate(["def f5(x, y):", "def f5(x, y):"], 2, sp)
    b = be.generate(["def f5(x, y):", "def f5(x, y):"], 2, sp)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    assert sorted(r["body"]["seed"] for r in srv.requests) == [42, 42, 43, 43]
    assert [c.token_ids for c in a[0]] != [c.token_ids for c in a[1]]
    # backend seed without a per-call seed: calls differ but a fresh backend repeats them
    mk = lambda: OpenAIBackend(srv.url, model=MODEL_NAME, seed=7)  # noqa: E731
    b1, b2 = mk(), mk()
    sp = SamplingParams(max_tokens=6)
    x1, y1 = b1.generate(["<answer_1>"], 3, sp), b1.generate(["<answer_1>"], 3, sp)
    x2 = b2.generate(["<answer_1>"], 3, sp)
    assert [c.token_ids for c in x1[0]] == [c.token_ids for c in x2[0]]
    assert [c.token_ids for c in x1[0]] != [c.token_ids for c in y1[0]]


def test_n_split_and_short_servers(serve):
    srv = serve(cap_n=2)  # a server that returns at most 2 choices whatever n is
    be = OpenAIBackend(srv.url, model=MODEL_NAME, max_n_per_request=3)
    (group,) = be.generate(["def f6(x, y):"], 5, SamplingParams(max_tokens=3, seed=0))
    assert len(group) == 5
    assert [r["body"]["n"] for r in srv.requests] == [3, 3, 1]


def test_concurrency_is_bounded_and_order_kept(serve, lm):
    srv = serve(delay=0.15)
    be = OpenAIBackend(srv.url, model=MODEL_NAME, concurrency=3)
    prompts = [f"def f{i}(x, y):" for i in range(8)]
    t0 = time.monotonic()
    groups = be.generate(prompts, 1, SamplingParams(max_tokens=2, seed=0))
    assert time.monotonic() - t0 < 8 * 0.15  # really concurrent
    assert 2 <= srv.max_inflight <= 3  # bounded by concurrency=3, and really parallel
    for p, g in zip(prompts, groups):
        assert g[0].prompt_token_ids == lm.tok(p, add_special_tokens=False)["input_ids"]


def test_retries_then_succeeds(serve):
    srv = serve(fail_first=2, fail_status=500)
    be = OpenAIBackend(srv.url, model=MODEL_NAME, backoff=0.01, max_retries=4)
    (group,) = be.generate(["def f7(x, y):"], 2, SamplingParams(max_tokens=3, seed=0))
    assert len(group) == 2 and all(c.logprobs for c in group)
    assert srv.count == 3


def test_retries_on_429(serve):
    srv = serve(fail_first=1, fail_status=429)
    be = OpenAIBackend(srv.url, model=MODEL_NAME, backoff=0.01)
    assert len(be.generate(["x"], 1, SamplingParams(max_tokens=2, seed=0))[0]) == 1
    assert srv.count == 2


def test_always_500_is_one_line_backend_error_in_bounded_time(serve):
    srv = serve(always_status=500)
    be = OpenAIBackend(srv.url, model=MODEL_NAME, backoff=0.05, max_backoff=0.1, max_retries=3)
    t0 = time.monotonic()
    with pytest.raises(BackendError) as ei:
        be.generate(["a", "b"], 2, SamplingParams(max_tokens=2))
    assert time.monotonic() - t0 < 5
    msg = str(ei.value)
    assert "\n" not in msg and "500" in msg and f"{srv.url}/completions" in msg and "4 attempts" in msg
    assert "scripted failure" in msg  # the server's reason


def test_client_error_is_not_retried(serve):
    srv = serve()
    be = OpenAIBackend(srv.url, model="no-such-model", backoff=0.01)
    with pytest.raises(BackendError, match="HTTP 404.*does not exist"):
        be.generate(["a"], 1, SamplingParams(max_tokens=2))
    assert srv.count == 1


def test_dead_port_is_backend_error():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    t0 = time.monotonic()
    with pytest.raises(BackendError) as ei:
        OpenAIBackend(url, backoff=0.01, max_retries=2)  # model lookup needs the server
    msg = str(ei.value)
    assert "\n" not in msg and url in msg and "connection" in msg.lower() and "3 attempts" in msg
    be = OpenAIBackend(url, model="m", backoff=0.01, max_retries=1)
    with pytest.raises(BackendError, match="refused"):
        be.generate(["a"], 1, SamplingParams(max_tokens=2))
    assert time.monotonic() - t0 < 5


def test_timeout_is_retried_then_backend_error(serve):
    srv = serve(delay=1.0)
    be = OpenAIBackend(srv.url, model=MODEL_NAME, timeout=0.2, max_retries=1, backoff=0.01)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="timed out") as ei:
        be.generate(["a"], 1, SamplingParams(max_tokens=2))
    assert time.monotonic() - t0 < 1.5 and "\n" not in str(ei.value)
    assert srv.count == 2


def test_api_key_from_env(serve, monkeypatch):
    monkeypatch.setenv("VEVO_TEST_KEY", "sk-test-123")
    srv = serve()
    be = OpenAIBackend(srv.url, model=MODEL_NAME, api_key_env="VEVO_TEST_KEY")
    be.generate(["a"], 1, SamplingParams(max_tokens=1))
    assert srv.requests[-1]["auth"] == "Bearer sk-test-123"
    monkeypatch.delenv("VEVO_TEST_KEY")
    be2 = OpenAIBackend(srv.url, model=MODEL_NAME, api_key_env="VEVO_TEST_KEY")
    be2.generate(["a"], 1, SamplingParams(max_tokens=1))
    assert srv.requests[-1]["auth"] is None


def test_lora_adapter_hot_swap(serve, lm, model_dir, tmp_path):
    adapter = make_lora_adapter(model_dir, tmp_path / "adapter")
    srv = serve(lm=TinyLM(model_dir))
    be = OpenAIBackend(srv.url, model=MODEL_NAME)
    sp = SamplingParams(max_tokens=5, seed=0)
    before = be.generate(["def f8(x, y):"], 2, sp)
    be.load_adapter(adapter, version=3)
    assert be.policy_version == 3 and be.model == "vevo-policy-3"
    after = be.generate(["def f8(x, y):"], 2, sp)
    assert all(c.policy_version == 3 and c.meta["model"] == "vevo-policy-3" for c in after[0])
    assert all(c.policy_version == 0 for c in before[0])
    _check_against_hf(srv.lm.models["vevo-policy-3"], after)
    with pytest.raises(AssertionError):  # the adapter really changed the policy
        _check_against_hf(lm.base, after)
    be.load_adapter(adapter, version=4)
    assert "vevo-policy-3" not in srv.lm.models and be.model == "vevo-policy-4"
    be.unload_adapter(version=5)
    assert be.model == MODEL_NAME and be.state()["adapter"] is None


def test_make_backend_spec(serve):
    srv = serve()
    be = make_backend(f"openai:{srv.url}", seed=3, chat=False)
    assert isinstance(be, OpenAIBackend) and be.model == MODEL_NAME and be.seed == 3
    assert len(be.generate(["a"], 2, SamplingParams(max_tokens=2))[0]) == 2
