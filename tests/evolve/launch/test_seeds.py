"""Several seeds in one command (`vevo run --seeds`), a seeds folder as one arm of `curves` and `report`, and
the difference between arms with its 95% CI (evolve/analysis/arms.py)."""
from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from evolve.analysis.arms import ArmError, curve_metrics, difference, expand, parse_seeds, t95
from problems.suites import SUITES
from tests.campaign_helpers import pbe_replay, vevo

PBE = SUITES["pbe"]()
PROBS = [p for p in PBE if p.split == "heldout"][:2]
IDS = [a for p in PROBS for a in ("--problem", p.id)]


def test_parse_seeds():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("3,1, 7") == [1, 3, 7]
    assert parse_seeds("0-2,7,2") == [0, 1, 2, 7]
    for bad in ("4-1", "a", "1,,2", "-3", "0-5000"):
        with pytest.raises(ArmError):
            parse_seeds(bad)


def test_paired_difference_by_hand():
    a, b = {0: 1.0, 1: 2.0, 2: 3.0}, {0: 2.0, 1: 2.5, 2: 4.5}
    d = difference(a, b, "solved")
    diffs = np.array([1.0, 0.5, 1.5])  # mean 1, sd 0.5, n 3: half-width t(2) * 0.5 / sqrt(3)
    half = 4.303 * 0.5 / math.sqrt(3)
    assert d.diff == pytest.approx(1.0) and d.lo == pytest.approx(1 - half) and d.hi == pytest.approx(1 + half)
    assert d.method == "paired by seed (3 pairs)" and diffs.std(ddof=1) == pytest.approx(0.5)


def test_welch_difference_when_seeds_differ():
    d = difference({0: 1.0, 1: 3.0}, {5: 2.0, 6: 4.0, 7: 6.0}, "best")
    se = math.sqrt(2.0 / 2 + 4.0 / 3)  # variances 2 and 4
    df = (1 + 4 / 3) ** 2 / (1 / 1 + (4 / 3) ** 2 / 2)  # Welch–Satterthwaite: 2.72, the table at 2 (wider)
    assert d.diff == pytest.approx(2.0) and d.hi - d.diff == pytest.approx(t95(df) * se)
    assert t95(df) == pytest.approx(4.303) and d.method.startswith("Welch")
    one = difference({0: 1.0}, {0: 2.0}, "solved")
    assert one.diff == 1.0 and math.isnan(one.lo) and "one run" in one.line()
    assert abs(t95(60) - 2.000) < 1e-3 and abs(t95(1000) - 1.962) < 1e-3


def test_curve_metrics_by_hand():
    # solved 0 until iteration 2, 1 from 2, 2 from 5; budget 9: mean over t = 0..9 of (0,0,1,1,1,2,2,2,2,2) = 1.3
    m = curve_metrics(np.array([0, 2, 5]), np.array([0, 1, 2]), np.array([0.1, 0.5, 0.9]), 9)
    assert m == {"solved": 2.0, "solved_auc": pytest.approx(1.3), "best": 0.9}


def test_seeds_end_to_end_curves_report_resume(tmp_path):
    replay = pbe_replay(tmp_path / "r.jsonl", PROBS)
    common = [*IDS, "--proposer", f"replay:{replay}", "--answers", "3", "--group", "2", "--quiet"]
    a, b = tmp_path / "a", tmp_path / "b"
    r = vevo("run", *common, "--iterations", "8", "--islands", "2", "--seeds", "0-2", "--out", str(a))
    assert [p.name for p in expand(a)] == ["seed-0", "seed-1", "seed-2"]
    assert "3 seeds in" in r.stdout and "95% CI" in r.stdout
    vevo("run", *common, "--iterations", "8", "--islands", "1", "--seeds", "0,1,2", "--out", str(b))
    # a seeds folder is one arm: three runs averaged, with a band
    png = tmp_path / "c.png"
    vevo("curves", str(a), "--out", str(png), "--csv")
    rows = list(csv.DictReader(open(png.with_suffix(".csv"))))
    assert png.stat().st_size > 0 and {r["label"] for r in rows} == {"a"} and max(int(r["runs"]) for r in rows) == 3
    vevo("curves", f"two={a}", f"one={b}", "--out", str(tmp_path / "c2.png"))
    # report: the difference between the arms with its CI, paired by seed
    r = vevo("report", f"two={a}", f"one={b}", "--out", str(tmp_path / "rep"))
    lines = [x for x in r.stdout.splitlines() if x.startswith(("solved", "best"))]
    assert len(lines) == 3 and all("95% CI [" in x and "paired by seed (3 pairs)" in x for x in lines), r.stdout
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "id='differences'" in page and "paired by seed (3 pairs)" in page and page.count("<tr><td title=") == 3
    # a folder that is neither is one line
    bad = vevo("curves", str(tmp_path), check=False)
    assert bad.returncode == 2 and "nor a seeds folder" in bad.stderr
    # resume per seed, and of the whole folder
    vevo("resume", str(a / "seed-1"), "--iterations", "10", "--quiet")
    r = vevo("resume", str(a), "--iterations", "10", "--quiet")
    assert r.stdout.count("run ") == 3 and "3 seeds in" in r.stdout
    r = vevo("report", str(a))  # one arm, report next to its seeds by default
    assert (a / "report" / "index.html").is_file() and [p.name for p in expand(a)][-1] == "seed-2"
    again = vevo("run", *common, "--iterations", "8", "--seeds", "0-2", "--out", str(a), check=False)
    assert again.returncode == 2 and "vevo resume" in again.stderr
    both = vevo("run", *common, "--seed", "1", "--seeds", "0-2", "--out", str(tmp_path / "x"), check=False)
    assert both.returncode == 2 and "--seed and --seeds" in both.stderr


def test_a_run_that_solved_everything_stays_in_the_average_to_its_budget(tmp_path):
    import json as _json

    from evolve.analysis.curves import curve_table, run_curves
    from proposer.answers.parsing import format_answers
    from tests.campaign_helpers import tail

    p = PROBS[0]
    replay = tmp_path / "ref.jsonl"
    replay.write_text(_json.dumps({"text": tail(format_answers([p.reference_code]))}) + "\n")
    run = tmp_path / "solved"
    vevo("run", "--problem", p.id, "--proposer", f"replay:{replay}", "--iterations", "10", "--answers", "1",
         "--group", "1", "--out", str(run), "--quiet")
    xs, solved, _ = run_curves(run / "archive.db")
    assert xs[-1] == 10 and solved[-1] == 1  # retired at iteration 1, flat to the budget of 10
    rows = curve_table({"a": [run / "archive.db"]})
    assert rows[-1]["x"] == 10 and rows[-1]["runs"] == 1
