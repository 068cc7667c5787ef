"""Named metrics (problems/metrics.py) and per-problem resources (problems/resources.py) on hand-worked numbers."""
from __future__ import annotations

import pytest

from problems import metrics
from problems.model import ProblemError
from problems.resources import NATIVE, OPENEVOLVE, Resources, capped, resources_from_dict


def test_fitness_is_openevolves():
    assert metrics.fitness({"score": 0.4, "valid": True}) == pytest.approx(0.4)  # a flag is not a score (not 0.7)
    assert metrics.fitness({"combined_score": 0.25, "x": 9.0}) == 0.25
    assert metrics.fitness({"a": 1.0, "complexity": 7.0}, ("complexity", "diversity")) == 1.0
    assert metrics.fitness({"a": 1.0, "b": 2.0, "eval_time": 3.0}) == pytest.approx(2.0)  # as OpenEvolve: times count
    assert metrics.fitness({"timeout": True, "error": 0.0}) == 0.0
    assert metrics.fitness({"complexity": 4.0}, ("complexity",)) == 4.0  # only features: OpenEvolve falls back
    assert metrics.fitness({}) == 0.0


def test_directions_known_names_and_overrides():
    d = metrics.direction
    assert d("combined_score") == d("accuracy") == d("sum_radii") == "higher"
    assert d("eval_time") == d("ms_per_frame") == d("execution_time") == "ignore"
    assert d("num_points") == d("error_count") == "ignore"
    assert d("mse") == d("avg_error") == d("error") == d("penalty") == "lower"
    assert d("eval_time", {"eval_time": "lower"}) == "lower"
    assert d("ipc", feature_dims=("ipc",)) == "ignore"


def test_score_columns_by_name_with_directions():
    names, vals = metrics.score_columns({"value": 2.0, "mse": 0.5, "eval_time": 1.0, "ok": True, "note": "x",
                                         "combined_score": 1.5})
    assert names == ["mse", "value"] and vals == [-0.5, 2.0]  # combined_score only when nothing else is a column
    assert metrics.score_columns({"combined_score": 1.5, "eval_time": 2.0}) == (["combined_score"], [1.5])
    assert metrics.score_columns({"value": 1.0}, {"value": "lower"}) == (["value"], [-1.0])


def test_stack_named_fills_the_worst_value():
    cols, rows = metrics.stack_named([(["a", "b"], [1.0, -2.0]), (["a"], [3.0]), ([], [])])
    assert cols == ["a", "b"] and rows == [[1.0, -2.0], [3.0, -2.0], [1.0, -2.0]]
    assert metrics.align(["b"], [5.0], ["a", "b"]) == [0.0, 5.0]


def test_resources_parse_cap_and_refuse():
    r = resources_from_dict({"nproc": 200, "memory_mb": 2048}, NATIVE, "p.toml", table=False)
    assert (r.nproc, r.memory_mb, r.nofile) == (200, 2048, NATIVE.nofile)
    with pytest.raises(ProblemError, match=r"p.toml: resources.memory_mb: the memory limit's key is memory_limit_mb"):
        resources_from_dict({"nproc": 200, "memory_mb": 2048}, NATIVE, "p.toml")
    with pytest.raises(ProblemError, match=r"p.toml: resources.gpus: unknown key"):
        resources_from_dict({"gpus": 1}, NATIVE, "p.toml")
    with pytest.raises(ProblemError, match=r"resources.nofile: expected an integer"):
        resources_from_dict({"nofile": "many"}, NATIVE, "p.toml")
    job = OPENEVOLVE.to_job()
    assert job["as_mb"] == 0 and job["nproc"] == 1024 and job["output_mb"] == 64
    c = capped(Resources(memory_mb=10**6, disk_mb=10**6, nofile=10**7))
    assert c.nofile == 65536 and c.memory_mb == c.disk_mb and c.memory_mb < 10**6


def test_native_folder_round_trips_resources_directions_and_strict_bool(tmp_path):
    import dataclasses

    from problems.model import CallCase, Problem, load_native, write_native

    p = Problem(id="x", seed_code="def f(a):\n    return a\n", tests=[CallCase(args=(1,), expected=True)],
                entry_point="f", solved_rule="none", strict_bool=True, metric_directions={"loss": "lower"},
                resources=dataclasses.replace(NATIVE, nproc=128, output_mb=4))
    q = load_native(write_native(p, tmp_path / "x"))
    assert (q.resources, q.metric_directions, q.strict_bool, q.open_ended) == (p.resources, p.metric_directions,
                                                                              True, True)
