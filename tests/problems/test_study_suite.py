"""``pbe-study``: hard held-out problems of a seed nothing else draws from, screened so that no program of the
tiny proposer's corpus solves one (a solve is search, not recall)."""
from __future__ import annotations

from collections import Counter

import pytest

from problems.suites import SUITES, pbe
from proposer.tiny import corpus as C
from proposer.tiny import leaks

DROPPED_SAMPLE = 7451  # corpus seed 0: filter(even)|sorted|sum|* -2, which solves candidate pbe/hard-reduce-1020


@pytest.fixture(scope="module")
def study():
    return SUITES["pbe-study"]()


def test_suite_is_hard_heldout_of_the_study_seed_with_fresh_ids(study):
    assert len(study) == 12 and Counter(p.meta["family"] for p in study) == {"int": 4, "list": 4, "reduce": 4}
    assert all(p.suite == "pbe-study" and p.split == "heldout" and p.meta["level"] == "hard" for p in study)
    assert {p.meta["pbe_seed"] for p in study} == {pbe.STUDY_SEED}
    others = [p for name, make in SUITES.items() if name.startswith("pbe") and name != "pbe-study" for p in make()]
    assert pbe.STUDY_SEED not in {p.meta["pbe_seed"] for p in others}      # no other suite draws from it
    assert not {p.id for p in study} & {p.id for p in others}               # and no id is shared
    assert [p.id for p in SUITES["pbe-study"]()] == [p.id for p in study]   # deterministic
    gen = {p.id: p for p in pbe.study_candidates()}
    for p in study:
        src = gen[p.meta["generated_id"]]
        assert (p.tests, p.seed_code, p.reference_code) == (src.tests, src.seed_code, src.reference_code)


def test_no_seed_solves_and_no_other_suite_reference_solves(study):
    assert leaks.seed_solves(study) == []
    assert {x.problem for x in leaks.screen(study, [p.reference_code for p in study])} == {p.id for p in study}
    refs = [p.reference_code for name in ("pbe", "pbe-hard") for p in SUITES[name]()]
    assert leaks.screen(study, refs) == []


def test_the_candidate_a_corpus_program_solves_is_not_in_the_suite(study):
    progs = [leaks._strip(p) for p in C.sample(0, DROPPED_SAMPLE, C.LeakGuard()).programs]
    assert {x.problem for x in leaks.screen(pbe.study_candidates(), progs)} == {"pbe/hard-reduce-1020"}
    assert "pbe/hard-reduce-1020" not in {p.meta["generated_id"] for p in study}
    assert leaks.screen(study, progs) == []


@pytest.mark.slow
def test_rerunning_the_screen_on_the_regenerated_corpus_keeps_exactly_the_suite(study):
    """1-2 min (slow): regenerates the bundled checkpoint's 20,256-sample corpus (pretrain.json) and screens."""
    res = leaks.study_screen(pbe.study_candidates(), leaks.study_programs(), pbe.STUDY_PER_FAMILY)
    assert res["kept"] == [p.meta["generated_id"] for p in study]
    assert set(res["dropped"]) == {"pbe/hard-reduce-1020"}
