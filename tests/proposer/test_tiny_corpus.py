"""The tiny proposer's corpus: deterministic, in the campaign's exact prompt format, multi-answer targets, and no
held-out target (nor anything equivalent to one) anywhere in it."""
from __future__ import annotations

import pytest

from problems.evolve_block import evolve_block
from proposer.answers.mutate import apply_answer, normalized_hash
from problems.suites import pbe
from proposer.answers.parsing import parse_answers
from proposer.tiny import corpus as C

N = 300


@pytest.fixture(scope="module")
def samples():
    return C.generate_corpus(0, N)


def test_deterministic_and_prefix_stable(samples):
    again = C.generate_corpus(0, 40)
    assert [s.text for s in again] == [s.text for s in samples[:40]]
    assert [s.text for s in C.generate_corpus(0, 5, start=20)] == [s.text for s in samples[20:25]]
    other = C.generate_corpus(1, 40)
    assert sum(a.text == b.text for a, b in zip(other, samples)) < 5


def test_mix_of_kinds_and_m(samples):
    kinds = [s.kind for s in samples]
    assert 0.03 * N < kinds.count("plain") < 0.2 * N
    ms = {s.m for s in samples if s.kind == "multi"}
    assert 4 in ms and len(ms) >= 3
    assert sum(s.m == 4 for s in samples if s.kind == "multi") > 0.5 * kinds.count("multi")


def _run(code, x):
    fn = pbe.compile_fn(code)
    try:
        return fn(list(x) if isinstance(x, list) else x)
    except Exception as exc:  # noqa: BLE001
        return ("!err", type(exc).__name__)


def test_multi_sample_format(samples):
    for s in samples:
        if s.kind == "plain":
            assert s.prompt == "" and s.completion.startswith("# Write f(") and "def f(" in s.completion
            continue
        assert s.prompt.endswith("\n<answer_1>") and s.prompt.startswith("### Task: pbe/")
        assert f"### Write {s.m} different improved versions" in s.prompt
        answers = parse_answers("<answer_1>" + s.completion, s.m)
        assert [a.kind for a in answers] == ["code"] * s.m
        assert s.completion.rstrip().endswith(f"</answer_{s.m}>")
        parent = s.meta["parent"]
        assert evolve_block(parent) is not None
        assert evolve_block(parent).rstrip() in s.prompt  # the parent program is shown inside the prompt
        children = [apply_answer(parent, a) for a in answers]
        assert len({normalized_hash(c) for c in children} | {normalized_hash(parent)}) == s.m + 1
        # exactly one answer is correct on the tests (the target); it sits at meta["answer"]
        xs, ys = s.meta["inputs"], s.meta["expected"]
        correct = [i for i, a in enumerate(answers)
                   if all(_run(a.body, x) == y and type(_run(a.body, x)) is type(y) for x, y in zip(xs, ys))]
        assert correct == [s.meta["answer"]]
        # the parent fails at least 2 tests, and the prompt says how many it passes
        passes = sum(_run(evolve_block(parent), x) == y for x, y in zip(xs, ys))
        assert passes == s.meta["parent_passes"] and passes <= len(xs) - 2
        assert f"### Tests: {passes}/{len(xs)} pass\n" in s.prompt


def test_answer_positions_are_shuffled(samples):
    pos = {s.meta["answer"] for s in samples if s.kind == "multi" and s.m == 4}
    assert pos == {0, 1, 2, 3}


def test_no_heldout_leakage(samples):
    """No held-out target, nothing equivalent to one on its tests, no held-out shape anywhere in the corpus."""
    heldout = pbe.generate_pbe(pbe.HELDOUT_POOL, pbe.DEFAULT_SEED, "heldout")
    guard = pbe.heldout_guard(pbe.DEFAULT_SEED)
    ref_sources = {p.reference_code.strip() for p in heldout}  # whole functions, "def f(...):" included
    ref_hashes = {normalized_hash(p.reference_code) for p in heldout}
    seen = set()
    for s in samples:
        assert s.programs
        for prog in s.programs:
            src = evolve_block(prog) or prog
            if src in seen:
                continue
            seen.add(src)
            assert normalized_hash(src) not in ref_hashes
            assert not guard.matches(src), src
            assert not pbe.is_heldout_equivalent(src)
        for ref in ref_sources:
            assert ref not in s.text
    assert len(seen) > 3 * N


def test_leak_guard_blocks_heldout_targets():
    g = C.LeakGuard()
    for p in pbe.generate_pbe(4, pbe.DEFAULT_SEED, "heldout"):
        fam = p.meta["family"]
        # a held-out target is blocked whether judged by shape or by behaviour
        assert g.blocked(fam, [pbe.Step("int", op=pbe.Op("abs"))], p.reference_code)


def test_tokenizer_round_trip_and_prompt_boundary(samples):
    from proposer.tiny.tokenizer import COUNT_PHRASES, TAGS, train_tokenizer

    tok = train_tokenizer([s.text for s in samples], vocab_size=1024)
    assert tok.eos_token == tok.pad_token == "<|endoftext|>"
    for t in TAGS + COUNT_PHRASES:
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1
    for s in samples[:60]:
        ids = tok(s.text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == s.text
        if s.prompt:  # the model continues the prompt's tokens exactly as it saw them in training
            p = tok(s.prompt, add_special_tokens=False)["input_ids"]
            assert ids == p + tok(s.completion, add_special_tokens=False)["input_ids"]
            assert p[-1] == tok.convert_tokens_to_ids("<answer_1>")
