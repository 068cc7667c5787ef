"""Built-in suites: pbe (train / held-out) and sr (embedded + shared sr_classic)."""
import itertools
import time

import pytest

from evaluators.pool import SandboxPool
from problems import values
from problems.model import CallCase, PointsCase, load_native, write_native
from problems.suites import SUITES, builtin_problems, generate_pbe, generate_sr, pbe_targets, sr_from_shared
from problems.suites import pbe, sr

MARK_S, MARK_E = "# EVOLVE-BLOCK-START", "# EVOLVE-BLOCK-END"


def _clear_caches():
    pbe._stream.cache_clear()
    pbe._guard.cache_clear()


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2) as p:
        yield p


@pytest.fixture(scope="module")
def builtin():
    return builtin_problems()


# ------------------------------------------------------------------------------------------------ generation

def test_generation_is_deterministic_and_fast():
    _clear_caches()
    t0 = time.perf_counter()
    a = builtin_problems()
    dt = time.perf_counter() - t0
    _clear_caches()
    b = builtin_problems()
    assert a == b
    assert dt < 1.0, f"built-in suites took {dt:.2f}s"
    assert generate_pbe(6, 123, "train") == generate_pbe(6, 123, "train")
    assert [p.reference_code for p in generate_pbe(6, 123, "train")] != pbe_targets("train", pbe.DEFAULT_SEED, 6)
    assert generate_sr(seed=1) == generate_sr(seed=1) and generate_sr(seed=1) != generate_sr(seed=2)


def test_prefix_stable_and_returns_copies():
    assert generate_pbe(4, 5, "train") == generate_pbe(9, 5, "train")[:4]
    assert generate_pbe(3, 5, "heldout") == generate_pbe(8, 5, "heldout")[:3]
    p = generate_pbe(1, 5, "train")[0]
    p.tests.clear()
    assert generate_pbe(1, 5, "train")[0].tests


def test_suite_sizes_and_ids(builtin):
    sizes = {k: len(f()) for k, f in SUITES.items()}
    assert sizes["pbe"] == 24 and sizes["pbe-train"] == 16 and sizes["pbe-heldout"] == 8
    assert sizes["sr"] == len(sr.FORMULAS) >= 20
    ids = [p.id for p in builtin]
    assert len(ids) == len(set(ids)) == 24 + len(sr.FORMULAS)
    assert all(p.id.startswith("pbe/") for p in SUITES["pbe"]()) and all(p.id.startswith("sr/") for p in SUITES["sr"]())
    assert {p.split for p in SUITES["pbe-heldout"]()} == {"heldout"}
    assert {p.split for p in SUITES["pbe-train"]()} == {"train"}


# ------------------------------------------------------------------------------------------------ pbe

def _steps(ref: str) -> list[int]:
    lines = ref.splitlines()
    return [i for i, ln in enumerate(lines) if ln.startswith("    ") and not ln.strip().startswith("return")]


def _passes_all(code: str, problem) -> bool:
    fn = pbe.compile_fn(code)
    for t in problem.tests:
        got = pbe._call(fn, list(t.args[0]) if isinstance(t.args[0], list) else t.args[0])
        if not values.values_equal(got, t.expected) or isinstance(got, tuple):
            return False
    return True


def test_pbe_problem_sanity():
    for p in SUITES["pbe"]():
        assert p.entry_point == "f" and 8 <= len(p.tests) <= 12 and all(isinstance(t, CallCase) for t in p.tests)
        assert p.seed_code.count(MARK_S) == 1 and p.seed_code.count(MARK_E) == 1
        assert p.reference_code.startswith("def f(")
        assert _passes_all(p.reference_code, p), p.id
        body = p.seed_code.split(MARK_S)[1].split(MARK_E)[0]
        assert not _passes_all(body, p), p.id
        # description: words, then two examples that are tests
        desc, _, ex = p.description.partition("\nExamples:\n")
        assert desc.startswith("Write f(") and len(ex.splitlines()) == 2
        labels = {f"f({t.args[0]!r}) == {t.expected!r}" for t in p.tests}
        assert set(ex.splitlines()) <= labels
        # edge cases present
        args = [t.args[0] for t in p.tests]
        assert ([] in args) if isinstance(args[0], list) else (0 in args and any(a < 0 for a in args))
        # every proper sub-composition (drop any subset of steps) fails some test
        lines, steps = p.reference_code.splitlines(), _steps(p.reference_code)
        for r in range(1, len(steps) + 1):
            for drop in itertools.combinations(steps, r):
                sub = "\n".join(ln for i, ln in enumerate(lines) if i not in drop) + "\n"
                assert not _passes_all(sub, p), (p.id, drop)
    kinds = [p.meta["seed_kind"] for p in SUITES["pbe"]()]
    assert {"drop", "identity"} <= set(kinds) and len(set(kinds)) >= 4
    assert sum(p.meta["difficulty"] == "hard" for p in SUITES["pbe-heldout"]()) == 2


def test_splits_disjoint_by_shape_and_fingerprint():
    held = pbe.generate_pbe(pbe.HELDOUT_POOL, pbe.DEFAULT_SEED, "heldout")
    sigs = pbe.heldout_signatures()
    assert sigs == {pbe.fingerprint(p.reference_code) for p in held}
    assert all(pbe.is_heldout_equivalent(p.reference_code) for p in held)
    held_shapes = {p.meta["shape"] for p in held}
    for seed in (pbe.DEFAULT_SEED, 3):
        train = generate_pbe(60, seed, "train")
        assert not held_shapes & {p.meta["shape"] for p in train}
        assert not sigs & {pbe.fingerprint(p.reference_code) for p in train}
        assert not any(pbe.is_heldout_equivalent(p.reference_code) for p in train)
        assert all(pbe.shape_split(*_parse_shape(p.meta["shape"])) == "train" for p in train)
    # a held-out target written differently is still caught
    p = next(h for h in held if h.meta["family"] == "int")
    disguised = p.reference_code.replace("def f(x):", "def g(n):").replace("x", "n")
    assert pbe.is_heldout_equivalent(disguised) and not pbe.is_heldout_equivalent("def f(x):\n    return x\n")
    assert pbe.fingerprint("def f(xs):\n    return xs[::-1]\n") == \
        pbe.fingerprint("def h(vals):\n    return list(reversed(vals))\n")


def _parse_shape(shape):
    fam, rest = shape.split("/", 1)
    return fam, [_Shape(s) for s in rest.split("|")]


class _Shape:
    def __init__(self, s):
        self.s = s

    def shape(self):
        return self.s


# ------------------------------------------------------------------------------------------------ sr

def test_sr_problem_sanity():
    for p in generate_sr():
        assert len(p.tests) == sr.N_BUCKETS and all(isinstance(t, PointsCase) and len(t.inputs) == 5 for t in p.tests)
        firsts = [x[0] for t in p.tests for x in t.inputs]
        assert firsts == sorted(firsts)
        assert p.solved_rule == "all" and "return 0.0" in p.seed_code and MARK_S in p.seed_code
        assert "Sample points:" in p.description and "math." not in p.description
        assert all(t.rtol == 1e-2 and t.atol == 1e-3 for t in p.tests)
    with pytest.raises(KeyError):
        generate_sr(["Nope-1"])


def test_sr_offline_without_shared_folder(monkeypatch):
    monkeypatch.setattr(sr, "find_shared", lambda: None)
    import problems.suites as suites
    monkeypatch.setattr(suites, "find_shared", lambda: None)
    assert [p.id for p in SUITES["sr-classic"]()] == [p.id for p in generate_sr()]
    assert len(generate_sr(["Nguyen-1", "Koza-3"])) == 2


@pytest.mark.skipif(sr.find_shared() is None, reason="shared sr_classic data not present")
def test_sr_classic_from_shared():
    skipped = []
    ps = sr_from_shared(skipped=skipped)
    assert len(ps) + len(skipped) == 268 and len(ps) >= 260
    assert "Neat-6" in {n for n, _ in skipped}
    builtin = {p.id: p for p in generate_sr()}
    for p in ps:
        if p.id in builtin:  # same formula, same range, same seed: same data
            assert p.tests == builtin[p.id].tests, p.id


# ------------------------------------------------------------------------------------------------ sandbox

def test_references_solve_and_seeds_do_not(pool, builtin):
    items = [(p, p.reference_code) for p in builtin] + [(p, p.seed_code) for p in builtin]
    evs = pool.evaluate_many(items)
    n = len(builtin)
    for p, ev in zip(builtin, evs[:n]):
        assert ev.solved and ev.status == "ok", (p.id, ev.status, ev.artifacts)
    for p, ev in zip(builtin, evs[n:]):
        assert not ev.solved and ev.status == "wrong" and ev.scalar < 1.0, (p.id, ev.status, ev.artifacts)


def test_sr_buckets_give_fractional_scores(pool):
    p = generate_sr(["Nguyen-1"])[0]
    cut = p.tests[2].inputs[2][0]  # inside bucket 3: its first points right, the rest wrong
    near = f"def f(x):\n    return x**3 + x**2 + x if x < {cut!r} else x**3 + x**2\n"
    off = "def f(x):\n    return x**3 + x**2 + x + 0.003\n"  # misses only where |y| is small
    ev, ev2 = pool.evaluate_many([(p, near), (p, off)])
    assert 0.0 < ev.scalar < 1.0 and not ev.solved
    assert ev.vector[:2] == [1.0, 1.0] and 0.0 < ev.vector[2] < 1.0
    assert 0.0 < ev2.scalar < 1.0


def test_native_roundtrip(tmp_path):
    for p in (generate_pbe(1, pbe.DEFAULT_SEED, "heldout")[0], generate_sr(["Nguyen-10"])[0]):
        q = load_native(write_native(p, tmp_path / p.id.replace("/", "_")))
        assert (q.id, q.tests, q.seed_code, q.reference_code, q.split) == (p.id, p.tests, p.seed_code,
                                                                           p.reference_code, p.split)
