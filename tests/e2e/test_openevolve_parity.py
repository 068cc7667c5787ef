"""OpenEvolve folders score in vevo exactly as OpenEvolve's own Evaluator scores them.

- Probes (tests/data/oe_probes/, our own OpenEvolve-format folders): one per sandbox limit that used to break
  ordinary evaluators (memory, /dev/shm, threads, open files, temp-file size, stdout size, ``python`` on PATH, a
  data file over 16 MB) and the per-stage timeout. Each gives OpenEvolve's result, written in the test and checked
  against OpenEvolve 0.4.x's own Evaluator by the slow tests (``-m slow``, needs openevolve).
- OpenEvolve's own examples (read from $VEVO_OPENEVOLVE_EXAMPLES or a fetched mirror; slow): metrics equal on the
  seed and on a better program, and a default campaign on each runs its whole iteration budget.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from evaluators.pool import SandboxPool
from problems.registry import load_folder
from tests.openevolve_helpers import PROBE_EXPECTED, PROBES, comparable, examples_dir, openevolve_metrics

TIMES = re.compile(r".*time.*")  # wall-clock metrics differ run to run; everything else must be equal
SEEDED = "import random as _r, numpy as _np\n_r.seed(0)\n_np.random.seed(0)\n"


def _same(vevo: dict, oe: dict) -> bool:
    """Equal metrics, wall-clock ones aside; floats to 1e-9 relative (an optimiser's last digits move with the
    BLAS thread count: one in the sandbox, all cores in OpenEvolve's process)."""
    a = {k: v for k, v in vevo.items() if not TIMES.fullmatch(k)}
    b = {k: v for k, v in comparable(oe).items() if not TIMES.fullmatch(k)}
    return a.keys() == b.keys() and all(type(a[k]) is type(b[k]) and a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12)
                                        for k in a)


def _probe(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(PROBES / name, dst)
    tmp_path.chmod(0o755)
    return dst


@pytest.mark.parametrize("name", sorted(PROBE_EXPECTED))
def test_probe_gives_openevolves_result(name, tmp_path):
    folder = _probe(name, tmp_path)
    prob = load_folder(folder)
    code = (folder / "initial_program.py").read_text()
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(prob, code)
    assert ev.status == "ok", (ev.status, ev.artifacts)
    assert ev.artifacts["metrics"] == PROBE_EXPECTED[name], ev.artifacts
    assert "unpickled" not in ev.artifacts.get("unverified", ""), ev.artifacts  # what they unpickle is allowed


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PROBE_EXPECTED))
def test_probe_expected_is_what_openevolve_reports(name, tmp_path):
    """The expected results above are OpenEvolve 0.4.x's Evaluator's, on the same folders (needs openevolve)."""
    folder = _probe(name, tmp_path)
    oe = openevolve_metrics(folder, (folder / "initial_program.py").read_text())
    assert comparable(oe["metrics"]) == PROBE_EXPECTED[name], oe


def test_large_data_file_next_to_the_evaluator_is_readable_not_writable(tmp_path):
    folder = _probe("data_file", tmp_path)
    with open(folder / "table.bin", "wb") as f:  # 17 MB, over the copy threshold: bound read-only instead
        f.write(b"\x01" * (17 << 20))
    prob = load_folder(folder)
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(prob, (folder / "initial_program.py").read_text())
    assert ev.status == "ok" and ev.artifacts["metrics"] == {"combined_score": 1.0, "megabytes": 17.0,
                                                             "writable": False}, ev.artifacts
    assert (folder / "table.bin").stat().st_size == 17 << 20


def test_stage_over_its_timeout_is_openevolves_timeout_result(tmp_path):
    """One stage longer than evaluator.timeout: stage1's metrics plus stage2_passed 0 and timeout, as OpenEvolve."""
    folder = _probe("stage_timeout", tmp_path)
    prob = load_folder(folder)
    slow = (folder / "initial_program.py").read_text().replace("PAUSE = 1.2", "PAUSE = 1.2\nSTAGE2_PAUSE = 4.0")
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(prob, slow)
    want = {"combined_score": 0.6, "stage1": 0.6, "stage2_passed": 0.0, "timeout": True}
    assert ev.status == "timeout" and ev.artifacts["metrics"] == want, ev.artifacts
    assert ev.artifacts["failure_stage"] == "stage2"


@pytest.mark.slow
def test_stage_over_its_timeout_is_what_openevolve_reports(tmp_path):
    folder = _probe("stage_timeout", tmp_path)
    slow = (folder / "initial_program.py").read_text().replace("PAUSE = 1.2", "PAUSE = 1.2\nSTAGE2_PAUSE = 4.0")
    want = {"combined_score": 0.6, "stage1": 0.6, "stage2_passed": 0.0, "timeout": True}
    assert comparable(openevolve_metrics(folder, slow)["metrics"]) == want


def test_limits_a_problem_asks_for_are_enforced(tmp_path):
    """vevo.toml asks for 256 MB: the 1.5 GB probe is then ``memory``, and 16 threads stop the thread probe."""
    mem = _probe("memory", tmp_path)
    (mem / "vevo.toml").write_text("memory_limit_mb = 256\n")
    thr = _probe("threads", tmp_path)
    (thr / "vevo.toml").write_text("[resources]\nnproc = 16\n")
    with SandboxPool(workers=1) as pool:
        evm = pool.evaluate(load_folder(mem), (mem / "initial_program.py").read_text())
        evt = pool.evaluate(load_folder(thr), (thr / "initial_program.py").read_text())
    assert evm.status in ("memory", "crash") and evm.scalar == 0.0, (evm.status, evm.artifacts)
    assert evt.artifacts["metrics"].get("threads", 0) < 80, evt.artifacts


def test_a_problem_cannot_ask_for_the_host(tmp_path):
    from problems.resources import HOST_MEMORY_SHARE, MAX, Resources, capped, host_memory_mb

    c = capped(Resources(memory_mb=1 << 20, nproc=10**6, disk_mb=1 << 20))
    assert c.memory_mb <= host_memory_mb() * HOST_MEMORY_SHARE and c.nproc == MAX["nproc"]
    folder = _probe("memory", tmp_path)
    (folder / "vevo.toml").write_text("[resources]\nnproc = 100000000\n")
    from problems.model import ProblemError

    with pytest.raises(ProblemError, match=r"vevo.toml: resources.nproc: must be in"):
        load_folder(folder)


# ---------------------------------------------------------------- OpenEvolve's own examples

def _better_programs(root: Path) -> dict[str, tuple[Path, str]]:
    """Example → (folder, a program that scores higher than the seed). Hand-made, small, and checked below."""
    am = root / "alphaevolve_math_problems"
    seed = {n: (root / n / "initial_program.py") for n in ("circle_packing", "function_minimization", "signal_processing")}
    out = {
        "circle_packing": (root / "circle_packing", (root / "circle_packing" / "best_program.py").read_text()),
        "function_minimization": (root / "function_minimization", SEEDED + seed["function_minimization"].read_text()
                                  .replace("iterations=1000", "iterations=20000")),
        "signal_processing": (root / "signal_processing", SEEDED + seed["signal_processing"].read_text()
                              .replace("    output_length = len(x) - window_size + 1\n",
                                       "    window_size = 30\n    output_length = len(x) - window_size + 1\n")),
        "heilbronn_triangle": (am / "heilbronn_triangle", (am / "heilbronn_triangle" / "initial_program.py").read_text()
                               .replace("points = np.zeros((n, 2))",
                                        "t = np.arange(n) * 2 * np.pi / n\n    r = 0.95 * np.sqrt(3) / 6\n"
                                        "    points = np.c_[0.5 + r * np.cos(t), np.sqrt(3) / 6 + r * np.sin(t)]")),
        "heilbronn_convex_13": (am / "heilbronn_convex" / "13", (am / "heilbronn_convex" / "13" / "initial_program.py")
                                .read_text().replace("points = rng.random((n, 2))",
                                                     "t = np.arange(n) * 2 * np.pi / n\n"
                                                     "    points = np.c_[np.cos(t), np.sin(t)]")),
        "hexagon_packing_11": (am / "hexagon_packing" / "11", (am / "hexagon_packing" / "11" / "initial_program.py")
                               .read_text().replace("outer_hex_side_length = 8", "outer_hex_side_length = 7")),
        "kissing_number": (am / "kissing_number", (am / "kissing_number" / "initial_program.py").read_text()
                           .replace("points = np.array([np.ones(d), -1 * np.ones(d)]).astype(np.int64)",
                                    "points = np.concatenate([2 * np.eye(d), -2 * np.eye(d)]).astype(np.int64)")),
        "min_max_dist_2": (am / "minimizing_max_min_dist" / "2", (am / "minimizing_max_min_dist" / "2" /
                                                                  "initial_program.py").read_text()
                           .replace("points = np.random.randn(n, d)",
                                    "points = np.array([[i, j] for i in range(4) for j in range(4)], float)")),
    }
    return {k: (f, code if code.startswith(SEEDED) else SEEDED + code) for k, (f, code) in out.items()}


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    pytest.importorskip("openevolve")
    pytest.importorskip("scipy")
    root = examples_dir(tmp_path_factory.mktemp("oe"))
    if root is None:
        pytest.skip("OpenEvolve's examples are not here (set VEVO_OPENEVOLVE_EXAMPLES or fetch the repository)")
    return _better_programs(root)


EXAMPLES = ["circle_packing", "function_minimization", "signal_processing", "heilbronn_triangle",
            "heilbronn_convex_13", "hexagon_packing_11", "kissing_number", "min_max_dist_2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_metrics_equal_openevolves_on_seed_and_better_program(name, examples):
    folder, better = examples[name]
    seed = SEEDED + (folder / "initial_program.py").read_text()
    prob = load_folder(folder)
    assert prob.open_ended and prob.solved_rule == "none"
    with SandboxPool(workers=1) as pool:
        evs = pool.evaluate_many([(prob, seed), (prob, better)])
    for ev, code in zip(evs, (seed, better)):
        oe = openevolve_metrics(folder, code)
        assert ev.status == "ok", ev.artifacts
        assert _same(ev.artifacts["metrics"], oe["metrics"]), (ev.artifacts["metrics"], oe["metrics"])
    # signal_processing reports no combined_score, so OpenEvolve's fitness is the mean of every metric (slope
    # changes and reversal counts included); its own overall_score is the one that says "better"
    key = "overall_score" if name == "signal_processing" else "combined_score"
    assert evs[1].artifacts["metrics"][key] > evs[0].artifacts["metrics"][key], (evs[0].artifacts, evs[1].artifacts)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_default_campaign_on_example_runs_its_full_budget(name, examples, tmp_path):
    """Open-ended: nothing retires the problem, even a seed scoring >= 1.0, so every iteration runs."""
    from evolve.config.schema import CampaignConfig
    from evolve.launch.runner import start

    folder, _ = examples[name]
    cfg = CampaignConfig(problems_dir=[str(folder)], problems=[folder.name], seed=0, out=str(tmp_path / "run"),
                         search={"iterations": 3, "islands": 1, "answers": 2, "group": 1}, executor={"workers": 1})
    _, summary = start(cfg, progress=False)
    assert summary["iterations"] == 3 and summary["solved"] == 0, summary
    assert summary["best"][folder.name]["scalar"] >= 0.0


JAX_EXAMPLES = ["first_autocorr_ineq", "uncertainty_ineq"]


@pytest.mark.slow
@pytest.mark.parametrize("name", JAX_EXAMPLES)
def test_jax_example_seed_metrics_equal_openevolves(name, examples):
    """JAX examples (skipped without jax): they need far more address space than they touch, which the old
    1 GB limit refused with std::bad_alloc."""
    pytest.importorskip("jax")
    folder = examples["circle_packing"][0].parent / "alphaevolve_math_problems" / name
    seed = SEEDED + (folder / "initial_program.py").read_text()
    with SandboxPool(workers=1) as pool:
        ev = pool.evaluate(load_folder(folder), seed)
    assert ev.status == "ok", ev.artifacts
    assert _same(ev.artifacts["metrics"], openevolve_metrics(folder, seed)["metrics"])
