import csv
import io
import json

import numpy as np
import pytest

from evaluators.types import Evaluation
from evolve.archive import Archive, ProgramRecord
from evolve.analysis.curves import CSV_COLUMNS, best_at, curve_table, pass_at, plot, write_csv


def prog(problem, scalar, solved=False, code=None):
    return ProgramRecord(problem=problem, island=0, code=code or f"{problem} {scalar}",
                         evaluation=Evaluation(vector=[scalar], scalar=scalar, solved=solved,
                                               status="ok" if solved else "wrong"))


@pytest.fixture
def run_a(tmp_path):
    """p, q, r listed; r has no program until iteration 3; iteration 2 produced nothing new."""
    path = tmp_path / "a.db"
    with Archive(path) as a:
        a.set_meta("problems", json.dumps(["p", "q", "r"]))
        a.record_iteration(0, [], [prog("p", 0.2), prog("q", 0.0)], {}, None)
        a.record_iteration(1, [], [prog("p", 0.5), prog("q", 1.0, solved=True)], {}, None)
        a.record_iteration(2, [], [], {}, None)
        a.record_iteration(3, [], [prog("p", 1.0, solved=True), prog("r", 0.3)], {}, None)
    return path


@pytest.fixture
def run_b(tmp_path):
    path = tmp_path / "b.db"
    with Archive(path) as a:
        a.set_meta("problems", json.dumps(["p", "q", "r"]))
        a.record_iteration(0, [], [prog("p", 0.4)], {}, None)
        a.record_iteration(1, [], [prog("p", 1.0, solved=True)], {}, None)
    return path


def test_pass_and_best_by_iteration(run_a):
    xs, ys = pass_at(run_a, "iterations")
    assert xs.tolist() == [0, 1, 2, 3]
    assert ys.tolist() == [0, 1, 1, 2]
    xs, ys = best_at(run_a, "iterations")
    assert xs.tolist() == [0, 1, 2, 3]
    assert np.allclose(ys, [0.2 / 3, 1.5 / 3, 1.5 / 3, 2.3 / 3])


def test_pass_and_best_by_evaluation(run_a):
    xs, ys = pass_at(run_a, "evaluations")
    assert xs.tolist() == [1, 2, 3, 4, 5, 6]
    assert ys.tolist() == [0, 0, 0, 1, 2, 2]
    _, best = best_at(run_a, "evaluations")
    assert np.allclose(best, [0.2 / 3, 0.2 / 3, 0.5 / 3, 1.5 / 3, 2.0 / 3, 2.3 / 3])


def test_problems_without_meta_and_negative_scores(tmp_path):
    path = tmp_path / "n.db"
    with Archive(path) as a:
        a.record_iteration(0, [], [prog("p", -1.0), prog("q", 0.5)], {}, None)
        a.record_iteration(1, [], [prog("p", -0.5), prog("q", 0.25)], {}, None)
    xs, best = best_at(path, "iterations")
    assert np.allclose(best, [(-1.0 + 0.5) / 2, (-0.5 + 0.5) / 2])  # best so far, not last


def test_empty_archive(tmp_path):
    path = tmp_path / "e.db"
    with Archive(path) as a:
        a.set_meta("problems", json.dumps(["p"]))
    assert [v.tolist() for v in pass_at(path, "iterations")] == [[], []]
    assert [v.tolist() for v in best_at(path, "evaluations")] == [[], []]
    with pytest.raises(ValueError):
        pass_at(path, "seconds")


def test_curve_table_aligns_and_averages(run_a, run_b):
    rows = curve_table({"A": [run_a], "AB": [run_a, run_b]}, "iterations")
    a = [r for r in rows if r["label"] == "A"]
    ab = {r["x"]: r for r in rows if r["label"] == "AB"}
    assert [r["x"] for r in a] == [0, 1, 2, 3] and all(r["runs"] == 1 for r in a)
    assert [r["solved_mean"] for r in a] == [0, 1, 1, 2]
    assert ab[0]["runs"] == 2 and ab[0]["solved_mean"] == 0
    assert ab[0]["best_mean"] == pytest.approx((0.2 / 3 + 0.4 / 3) / 2)
    assert (ab[0]["best_min"], ab[0]["best_max"]) == (pytest.approx(0.2 / 3), pytest.approx(0.4 / 3))
    assert ab[1]["solved_mean"] == 1 and ab[1]["solved_std"] == 0
    assert ab[1]["best_mean"] == pytest.approx((1.5 / 3 + 1.0 / 3) / 2)
    assert ab[1]["best_std"] == pytest.approx(0.25 / 3)
    # run b stopped at iteration 1: later rows average run a alone
    assert (ab[2]["runs"], ab[3]["runs"]) == (1, 1)
    assert ab[3]["solved_mean"] == 2 and ab[3]["best_mean"] == pytest.approx(2.3 / 3)


def test_curve_table_by_evaluations_uses_common_grid(run_a, run_b):
    rows = curve_table({"A": [run_a], "B": [run_b]}, "evaluations")
    b = {r["x"]: r for r in rows if r["label"] == "B"}
    assert sorted(b) == [1, 2]  # b has 2 evaluations; no rows past its end
    assert b[2]["solved_mean"] == 1
    assert [r["x"] for r in rows if r["label"] == "A"] == [1, 2, 3, 4, 5, 6]


def test_write_csv(run_a, run_b, tmp_path, capsys):
    rows = curve_table({"A": [run_a], "AB": [run_a, run_b]}, "iterations")
    out = tmp_path / "c.csv"
    write_csv(rows, out)
    back = list(csv.DictReader(out.open()))
    assert tuple(back[0]) == CSV_COLUMNS and len(back) == len(rows)
    assert float(back[3]["solved_mean"]) == 2.0
    buf = io.StringIO()
    write_csv(rows, buf)
    assert buf.getvalue() == out.read_text()
    write_csv(rows, "-")
    assert capsys.readouterr().out == out.read_text()


def test_plot_png_and_svg(run_a, run_b, tmp_path):
    runs = {"A": [run_a], "AB": [run_a, run_b]}
    png = plot(runs, "iterations", tmp_path / "plots" / "c.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    svg = plot(runs, "evaluations", tmp_path / "c.svg").read_text()
    assert "<svg" in svg and "AB" in svg
    with pytest.raises(ValueError):
        plot(runs, "iterations", tmp_path / "c.txt")


def test_ci95_matches_the_t_formula():
    from evolve.analysis.curves import ci95

    m, h = ci95([3, 5, 4, 6, 2])
    assert m == 4.0 and abs(h - 2.776 * np.std([3, 5, 4, 6, 2], ddof=1) / np.sqrt(5)) < 1e-12
    assert ci95([7]) == (7.0, 0.0) and ci95([]) == (0.0, 0.0)
    assert abs(ci95(list(range(100)))[1] - 1.9842 * np.std(range(100), ddof=1) / 10) < 1e-3  # t_{0.975, 99}


def test_the_ui_store_folds_the_curve_vevo_curves_writes(tmp_path):
    """One fold (`CurveFold`): the UI store, reading a live archive in two looks, gives the pass@t and best@t
    `vevo curves --csv` writes for the finished one."""
    from evolve.cli import main
    from evolve.ui.store import RunStore

    run = tmp_path / "run"
    run.mkdir()
    with Archive(run / "archive.db") as a:
        a.set_meta("problems", json.dumps(["p", "q", "r"]))
        a.record_iteration(0, [], [prog("p", 0.2), prog("q", 0.0)], {}, None)
        a.record_iteration(1, [], [prog("p", 0.5), prog("q", 1.0, solved=True)], {}, None)
        store = RunStore("run", run)
        assert [p[3] for p in store.curve_points()] == [0, 1]  # a first look while the run is live
        a.record_iteration(2, [], [], {}, None)
        a.record_iteration(3, [], [prog("p", 1.0, solved=True), prog("r", 0.3), prog("p", 0.1)], {}, None)
        a.record_iteration(4, [], [prog("r", -0.5)], {}, None)
    ui = [(p[0], p[3], p[4]) for p in store.curve_points()]
    store.close()
    assert main(["curves", str(run), "--csv", "--out", str(tmp_path / "c.png")]) == 0
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    cli = [(int(r["x"]), float(r["solved_mean"]), float(r["best_mean"])) for r in rows]
    assert [u[:2] for u in ui] == [c[:2] for c in cli] == [(0, 0), (1, 1), (2, 1), (3, 2), (4, 2)]
    assert np.allclose([u[2] for u in ui], [c[2] for c in cli])
    assert ui[-1][2] == pytest.approx(2.3 / 3)


def test_on_clock_puts_an_iteration_curve_on_the_run_clock():
    from evolve.analysis.curves import on_clock

    secs, ys = on_clock([0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4], [1, 3], [5.0, 9.5])
    assert secs.tolist() == [0.0, 5.0, 9.5] and ys.tolist() == [0.1, 0.2, 0.4]  # iteration 2 has no clock
