"""Smoke test of bench/perf/loop_overhead.py's vevo half: correctness only (archive contents, iteration order), never
timings. ~300 programs with the instant backend and the trivial evaluator, both pipeline depths."""
from __future__ import annotations

import pytest

from bench.perf import archive_scale, instant, loop_overhead, windows


@pytest.mark.parametrize("depth", [0, 1])
def test_vevo_half_grows_archive_exactly(tmp_path, depth):
    r = loop_overhead.run_vevo(tmp_path / "run", 300, depth)
    m_g = r["per_iteration"]
    assert m_g == 8
    n_iter = r["iterations"]
    assert n_iter == 38  # ceil((300 - 1) / 8): the seed is program 1
    # exactly the seed plus m*G new programs per iteration: every candidate was fresh and got archived
    assert r["count"] == 1 + n_iter * m_g == 305
    assert r["ids"] == list(range(1, r["count"] + 1))
    # iterations reported one by one, in order, and each one recorded once
    assert r["seen"] == list(range(1, n_iter + 1))
    assert [row.iteration for row in r["metrics"]] == list(range(0, n_iter + 1))
    for row in r["metrics"][1:]:
        d = row.data
        assert (d["completions"], d["candidates"], d["duplicates"], d["format_errors"]) == (2, m_g, 0, 0)
    assert r["summary"]["evaluations"] == r["count"]
    assert r["summary"]["status_counts"] == {"wrong": r["count"]}
    assert r["summary"]["iterations"] == n_iter
    # one timing sample and one archive size per iteration (values are not checked)
    assert len(r["ms"]) == len(r["sizes"]) == n_iter
    assert r["sizes"] == [1 + m_g * t for t in range(1, n_iter + 1)]


def test_many_problems_campaign_visits_every_island_once_per_round(tmp_path):
    r = loop_overhead.run_vevo(tmp_path / "many", 5 + 8 * 12, 1, n_problems=5)
    assert r["iterations"] == 12 and r["count"] == 5 + 8 * 12 and r["n_problems"] == 5
    visits = [(row.data["problem"], row.data["island"]) for row in r["metrics"][1:]]
    assert len(set(visits[:10])) == 10 and visits[10:] == visits[:2]  # 5 problems x 2 islands, round robin


def test_fresh_backend_never_repeats():
    from proposer.backends.base import SamplingParams
    from proposer.answers.parsing import parse_answers

    b = instant.FreshBackend(m=4)
    bodies = []
    for _ in range(3):
        (group,) = b.generate(["p"], 2, SamplingParams())
        for c in group:
            bodies += [a.body for a in parse_answers(c.text, 4) if a.kind == "code"]
    assert len(bodies) == 24 and len(set(bodies)) == 24
    st = b.state()
    b2 = instant.FreshBackend(m=4)
    b2.load_state(st)
    assert b2.generate(["p"], 1, SamplingParams())[0][0].text == b.generate(["p"], 1, SamplingParams())[0][0].text


def test_window_helpers():
    assert windows.rolling([1.0, 3.0, 5.0, 7.0, 9.0], 2) == [None, 2.0, 4.0, 6.0, 8.0]
    sizes = [50, 100, 150, 151, 1000]
    vals = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert windows.window_samples(sizes, vals, 100) == [2.0, 3.0]      # 66.7 .. 150
    assert windows.window_samples(sizes, vals, 1000) == [5.0]          # 666.7 .. min(1500, 1000)
    assert windows.window_samples(sizes, vals, 10_000) == []           # never reached
    assert windows.window_samples(sizes, [None, 2.0, None, 4.0, 5.0], 100) == [2.0]


def test_synthetic_archive_looks_like_a_campaigns_and_resumes(tmp_path):
    """--archive-sizes: the bulk-written archive holds what a campaign of the same shape writes (rows, metrics
    keys, hashes, a checkpoint per island), and a campaign resumed on it continues it: new ids after the last,
    every proposal fresh, restore and per-iteration timings and RSS reported."""
    from evolve.archive import Archive
    from proposer.answers.mutate import normalized_hash

    run = tmp_path / "synth"
    info = archive_scale.build_archive(run, 300, n_problems=3, chunk=7)
    per, iters = 8, -(-(300 - 3) // 8)
    assert info["programs"] == 3 + per * iters and info["iterations"] == iters
    real = loop_overhead.run_vevo(tmp_path / "real", 60, 1, n_problems=3)
    with Archive(run / "archive.db", readonly=True) as a:
        rows = a.programs()
        assert [r.id for r in rows] == list(range(1, info["programs"] + 1))
        assert all(r.ast_hash == normalized_hash(r.code) for r in rows)
        assert len({r.ast_hash for r in rows}) == len(rows)
        metrics = a.metrics_rows()
        assert [m.iteration for m in metrics] == list(range(iters + 1))
        assert set(metrics[1].data) == set(real["metrics"][1].data)
        assert set(metrics[0].data) == set(real["metrics"][0].data)
        groups = a.recent_groups(iters)
        assert len(groups) == iters and all(len(g.completions) == 2 for g in groups)
        for g in groups[:5]:
            kids = [r for r in rows if r.iteration == g.iteration]
            assert [c.answer_vectors for c in g.completions] == [[r.vector for r in kids[:4]], [r.vector for r in kids[4:]]]
            assert all(r.parent_ids[0] == g.parent_id for r in kids)
        it, state = a.checkpoint()
        assert it == iters and state["loop"]["backend"]["counter"] == per * iters
        for p in archive_scale.scale_problems(3):
            for k in range(2):
                members = state[f"island/{k}/{p.id}"]["members"]
                assert 0 < len(members) <= 40 and all(rows[m - 1].problem == p.id for m in members)
        assert len(a.portfolio_rows()) == iters
    r = archive_scale.run_resumed(run, 20, 1, 3)
    assert r["iterations"] == 20 and len(r["ms"]) == len(r["cpu_ms"]) == 20
    # the peak (VmHWM) never falls; the RSS itself may, as the process frees memory the tests before it used
    assert r["restore_s"] > 0 and r["rss_peak"] >= r["rss_base"] > 0 and r["rss_end"] > 0
    with Archive(run / "archive.db", readonly=True) as a:
        assert a.count_programs() == info["programs"] + 20 * per  # every proposal was new
        assert a.last_iteration() == iters + 20
