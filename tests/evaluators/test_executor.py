"""The executor seam: the registry, the local executor, and the one-line errors of a bad executor config."""
from __future__ import annotations

import socket

import pytest

from evaluators.executor import EXECUTORS, ExecutorError, ExecutorSpec, make_executor
from evaluators.pool import SandboxPool
from evolve.config.schema import ConfigError, load_config
from evolve.launch.runner import executor_spec
from problems.suites import SUITES
from tests.campaign_helpers import vevo


def test_registry_and_local_executor():
    assert set(EXECUTORS) >= {"local", "ray"}
    cfg = load_config(None, {"executor.workers": 1})
    assert executor_spec(cfg) == ExecutorSpec(kind="local", workers=1, ray_address=None, unsafe_no_sandbox=False)
    ex = make_executor(executor_spec(cfg))
    try:
        assert isinstance(ex, SandboxPool)
        p = SUITES["pbe"]()[0]
        (ev,) = ex.evaluate_many([(p, p.reference_code)])
        assert ev.solved
    finally:
        ex.close()


def test_unknown_executor_is_one_line():
    with pytest.raises(ConfigError, match="executor"):
        load_config(None, {"executor.kind": "slurm"})

    with pytest.raises(ExecutorError, match="unknown executor 'slurm'; known: local, ray"):
        make_executor(ExecutorSpec(kind="slurm"))


def test_unreachable_ray_cluster_is_one_line_and_fast(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = vevo("run", "--suite", "pbe", "--proposer", "tiny", "--iterations", "1", "--group", "2", "--executor", "ray",
             "--ray-address", f"127.0.0.1:{port}", "--out", str(tmp_path / "run"), "--quiet", check=False, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == f"vevo: error: ray: cannot reach the cluster at 127.0.0.1:{port}: " \
        "Connection refused"
