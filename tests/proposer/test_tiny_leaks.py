"""The recall screen: which problems a corpus program solves. The bundled corpus was drawn against the std
held-out targets only; these tests pin the hard-level hole it left (corpus sample 9812 solves every test of
``pbe/hard-reduce-1002``) and that the screen, and a hard-level guard, catch it."""
from __future__ import annotations

from dataclasses import replace

import pytest

from problems.model import CallCase

from problems.suites import SUITES, pbe
from proposer.tiny import corpus as C
from proposer.tiny import leaks

LEAKY_SAMPLE = 9812  # corpus seed 0: a prefix-sums|pairwise(min)|min program, == hard-reduce-1002 on its tests


@pytest.fixture(scope="module")
def leaky_programs():
    return [leaks._strip(p) for p in C.sample(0, LEAKY_SAMPLE, C.LeakGuard()).programs]


def test_screen_catches_the_hard_leak_the_std_guard_let_through(leaky_programs):
    hard = SUITES["pbe-hard-heldout"]()
    found = leaks.screen(hard, leaky_programs)
    assert {x.problem for x in found} == {"pbe/hard-reduce-1002"}
    assert all(x.why == "tests" and x.program in leaky_programs for x in found)
    # the std-level guard the corpus was drawn with passes the program; a hard-level guard blocks it
    prog = found[0].program
    assert not C.LeakGuard()._blocked_src(prog)
    assert C.LeakGuard(levels=pbe.LEVELS)._blocked_src(prog)


def test_screen_is_pure_and_catches_an_injected_leak():
    probs = SUITES["pbe-heldout"]()[:3]
    seeds = [p.seed_code for p in probs]
    assert leaks.screen(probs, seeds) == []                          # a seed never solves its problem
    injected = seeds + [probs[1].reference_code]
    got = leaks.screen(probs, injected)
    assert [(x.problem, x.why) for x in got] == [(probs[1].id, "tests")]
    assert leaks.screen(probs, injected) == got                      # same input, same answer
    assert leaks.screen(probs, ["not python (", "x = 1\n"]) == []    # solves nothing, raises nothing


def test_fingerprint_match_counts_even_when_tests_differ():
    p = SUITES["pbe-heldout"]()[0]
    q = replace(p, tests=[CallCase(p.tests[0].args, "nope")])  # no program passes, the reference's behaviour stays
    got = leaks.screen([q], [p.reference_code])
    assert [(x.problem, x.why) for x in got] == [(p.id, "fingerprint")]


def test_seed_solves_and_study_rule():
    probs = SUITES["pbe-heldout"]()[:4]
    assert leaks.seed_solves(probs) == []
    solved = replace(probs[0], seed_code=pbe.wrap_block(probs[0].reference_code))
    assert leaks.seed_solves([solved] + probs[1:]) == [probs[0].id]
    res = leaks.study_screen([solved] + probs[1:], [probs[2].reference_code], per_family=1)
    assert set(res["dropped"]) == {probs[0].id, probs[2].id}
    assert res["dropped"][probs[0].id] == "seed solves" and res["dropped"][probs[2].id].startswith("tests: ")
    assert res["kept"] == [probs[1].id, probs[3].id]  # one per family, stream order (list, then int)


def test_screen_refuses_a_problem_it_cannot_judge():
    sr = SUITES["sr"]()[0]
    with pytest.raises(ValueError, match="not a one-argument call problem"):
        leaks.screen([sr], ["def f(x):\n    return x\n"])


def test_leak_guard_rejects_an_unknown_level():
    with pytest.raises(ValueError, match="unknown level 'medium'"):
        C.LeakGuard(levels=("medium",))


@pytest.mark.slow
def test_what_the_readme_says_about_the_demo_suite():
    """2-3 min (slow): the README's fractions for `make demo`'s suite `pbe`, on the regenerated corpus."""
    r = leaks.recipe()
    demo = SUITES["pbe"]()
    found = {x.problem for x in leaks.screen(demo, leaks.corpus_programs(r["seed"], r["n"], r["plain_frac"], r["val"]))}
    targets = leaks.corpus_targets(r["seed"], r["n"], r["plain_frac"])
    verbatim = {p.id for p in demo if p.reference_code in targets}
    assert (len(demo), len(verbatim), len(found)) == (24, 14, 15)
    assert verbatim <= found and not found & {p.id for p in demo if p.split == "heldout"}
