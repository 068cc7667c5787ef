"""The tiny proposer's pretraining corpus: mutation prompts in the exact layout the campaign sends, with
multi-answer targets.

One ``multi`` sample (the bulk) is built like this, from a per-sample ``random.Random`` (so sample i of a seed
never depends on how many samples were asked for):

1. a *target*: a composition of the pbe DSL (``problems.suites.pbe.sample_composition``, split ``train``),
   rendered and described with pbe's own ``render`` / ``describe``;
2. a *parent*: the target one or two edits away (a constant changed, a sibling primitive, a step dropped, a step
   added, or the identity), inside EVOLVE-BLOCK markers as the campaign shows it;
3. 6-12 tests from a random input pool; the parent's per-test vector and the failing labels come from running
   the (trusted, generated) functions in-process; 0-2 *inspirations* (more near-misses with their vectors);
4. ``PromptContext(m=...)`` -> ``build_prompt`` (compact style, full-rewrite mode; m is 4 in 60% of the samples,
   1, 2, 3, 5 or 6 otherwise, so the model learns to write exactly the m asked for), and the completion
   ``completion_target(bodies)`` whose m bodies are m *different* programs: the target at a random position
   among m-1 near-misses of it (other constants, a step added / removed / swapped), all different from the
   parent and from each other in behaviour.

``plain`` samples (``plain_frac`` of them) are a description comment followed by the target function, trained
on all tokens: they teach the code itself.

**No held-out leakage.** Every program that appears anywhere in a sample (target, parent, inspirations,
answers) must (a) have a *train* shape under pbe's held-out rule (``shape_split``), which holds for every pbe
seed, and (b) not be equivalent to a held-out target of the guarded pbe seeds (``HeldoutGuard.matches``: same
behaviour fingerprint, or passing every test of a held-out problem). A sample with any such program is
discarded and redrawn. So solving a std held-out problem with the tiny proposer is search, not recall. The
shipped corpus was drawn against the std level only (one of its programs solves ``pbe/hard-reduce-1002``); which
other problems a corpus program solves is ``proposer.tiny.leaks.screen``'s answer.
"""
from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from problems.suites import pbe
from proposer.answers.prompting import PromptContext, build_prompt, completion_target

M_CHOICES = (1, 2, 3, 4, 5, 6)
M_WEIGHTS = (2, 1, 2, 12, 2, 1)  # the campaign default is m = 4; m = 1 is the single-answer baseline
INSPIRATION_WEIGHTS = (3, 3, 4)  # 0, 1, 2 inspirations (campaign default: up to 2)
MAX_OUT = 5000
MAX_PROMPT_CHARS = 2400  # keeps prompt + completion well inside the 1024-token context


@dataclass
class Sample:
    """``prompt`` ("" for plain samples) + ``completion``; training appends EOS after the completion.
    ``programs``: every program source that appears in the sample (for leakage checks)."""

    kind: str
    prompt: str
    completion: str
    m: int = 1
    programs: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.prompt + self.completion


# ------------------------------------------------------------------------------------------------- mutations

def _other(rng: random.Random, cur, choices):
    opts = [c for c in choices if c != cur]
    return rng.choice(opts) if opts else None


def _const(rng: random.Random, step: pbe.Step) -> pbe.Step | None:
    """The step with one constant changed (None when it has none)."""
    op = step.op
    if op is not None:
        if op.name == "cond":
            if op.inner.k is not None and (op.pred.k is None or rng.random() < 0.6):
                k = _other(rng, op.inner.k, pbe.OP_KS[op.inner.name])
                return replace(step, op=replace(op, inner=replace(op.inner, k=k))) if k is not None else None
            if op.pred.k is not None:
                k = _other(rng, op.pred.k, pbe.PRED_KS[op.pred.name])
                return replace(step, op=replace(op, pred=replace(op.pred, k=k))) if k is not None else None
            return None
        if op.k is not None:
            k = _other(rng, op.k, pbe.OP_KS[op.name])
            return replace(step, op=replace(op, k=k)) if k is not None else None
        return None
    if step.pred is not None and step.pred.k is not None:
        k = _other(rng, step.pred.k, pbe.PRED_KS[step.pred.name])
        return replace(step, pred=replace(step.pred, k=k)) if k is not None else None
    if step.k is not None and step.name in pbe.LIST_KS:
        k = _other(rng, step.k, pbe.LIST_KS[step.name])
        return replace(step, k=k) if k is not None else None
    return None


def _kk(rng: random.Random, table: dict, name: str, k):
    if name not in table:
        return None
    return k if k in table[name] else rng.choice(table[name])


def _swap_pred(rng: random.Random, p: pbe.Pred) -> pbe.Pred:
    q = pbe.PRED_SWAP[p.name]
    return pbe.Pred(q, _kk(rng, pbe.PRED_KS, q, p.k))


def _swap_op(rng: random.Random, op: pbe.Op) -> pbe.Op:
    if op.name == "cond":
        if rng.random() < 0.5:
            return replace(op, pred=_swap_pred(rng, op.pred))
        inner = _swap_op(rng, op.inner)
        return replace(op, inner=inner) if inner.name in pbe.COND_INNER else op
    q = pbe.OP_SWAP[op.name]
    return pbe.Op(q, _kk(rng, pbe.OP_KS, q, op.k))


def _swap(rng: random.Random, step: pbe.Step) -> pbe.Step | None:
    """A sibling primitive of the same type (odd for even, min for max, take for drop, ...)."""
    if step.kind in ("int", "map"):
        return replace(step, op=_swap_op(rng, step.op))
    if step.kind == "filter":
        return replace(step, pred=_swap_pred(rng, step.pred))
    if step.kind == "reduce":
        if step.name == "count":
            return replace(step, pred=_swap_pred(rng, step.pred))
        return pbe.Step("reduce", pbe.RED_SWAP[step.name])
    if step.name == "pairwise":
        return replace(step, sub=pbe.PAIR_SWAP[step.sub])
    if step.name == "enum":
        return replace(step, sub="mul" if step.sub == "add" else "add")
    q = pbe.LIST_SWAP.get(step.name)
    if q is None:
        return None
    if q == "pairwise":
        return pbe.Step("list", "pairwise", sub=rng.choice(pbe.PAIR_OPS))
    return pbe.Step("list", q, k=_kk(rng, pbe.LIST_KS, q, step.k))


def _random_step(rng: random.Random, family: str, before_reduce: bool) -> pbe.Step | None:
    """One random step that fits the family: an int op for ``int`` (or after a reducer), a list step otherwise."""
    sub_family = "int" if family == "int" or (family == "reduce" and not before_reduce) else "list"
    for _ in range(20):
        steps = pbe.sample_composition(rng, sub_family, "train")
        if steps:
            step = steps[0]
            if sub_family == "int" and family == "reduce" and step.op is not None and step.op.name not in (
                    "add", "mul", "floordiv", "mod", "abs", "square"):
                continue
            return step
    return None


def mutate(rng: random.Random, family: str, steps: list[pbe.Step], how: str) -> list[pbe.Step] | None:
    """One edit of a composition: ``const``, ``swap``, ``drop``, ``add`` or ``replace``; None if impossible."""
    steps = list(steps)
    red = next((i for i, s in enumerate(steps) if s.kind == "reduce"), None)
    if how in ("const", "swap"):
        idx = list(range(len(steps)))
        rng.shuffle(idx)
        for i in idx:
            new = (_const if how == "const" else _swap)(rng, steps[i])
            if new is not None and new != steps[i]:
                steps[i] = new
                return steps
        return None
    if how == "drop":
        idx = [i for i, s in enumerate(steps) if s.kind != "reduce"]
        if not idx:
            return None
        del steps[rng.choice(idx)]
        return steps
    if how == "add":
        if len(steps) >= 4:
            return None
        hi = len(steps) if red is None else red  # list steps go before the reducer
        at = rng.randint(0, hi)
        if family == "reduce" and rng.random() < 0.2 and red == len(steps) - 1:
            at = len(steps)  # an int op on the reduced value
        new = _random_step(rng, family, before_reduce=(red is None or at <= red))
        if new is None:
            return None
        steps.insert(at, new)
        return steps
    if how == "replace":
        idx = [i for i, s in enumerate(steps) if s.kind != "reduce"]
        if not idx:
            return None
        i = rng.choice(idx)
        new = _random_step(rng, family, before_reduce=(red is None or i < red))
        if new is None:
            return None
        steps[i] = new
        return steps
    raise ValueError(f"unknown mutation {how!r}")


def _edits(rng: random.Random, family: str, steps: list[pbe.Step], n_edits: int,
           weights=(4, 3, 3, 2, 1)) -> list[pbe.Step] | None:
    cur = list(steps)
    for _ in range(n_edits):
        how = rng.choices(("const", "swap", "drop", "add", "replace"), weights=weights, k=1)[0]
        nxt = mutate(rng, family, cur, how)
        if nxt is None:
            return None
        cur = nxt
    return cur


# ---------------------------------------------------------------------------------------------- execution

def _inputs(rng: random.Random, family: str) -> list:
    if family == "int":
        xs = [0, 1, -1, 2, -3, 5, 10, -12] + [rng.randint(-30, 30) for _ in range(30)] + \
             [rng.randint(-120, 120) for _ in range(6)]
    else:
        xs = [[], [0], [4], [-3, -6, -1], [2, 2, 5, 5], [7, -2, 0, -9]]
        for _ in range(36):
            lo = 9 if rng.random() < 0.7 else 20
            xs.append([rng.randint(-lo, lo) for _ in range(rng.choice((1, 2, 3, 4, 5, 5, 6, 6, 7, 8)))])
    out, seen = [], set()
    for x in xs:
        if repr(x) not in seen:
            seen.add(repr(x))
            out.append(x)
    return out


def _run(src: str, pool: list) -> list:
    fn = pbe.compile_fn(src)
    out = []
    for x in pool:
        try:
            out.append(fn(copy.copy(x) if isinstance(x, list) else x))
        except Exception as exc:  # noqa: BLE001 - generated code; an error is a behaviour
            out.append(("!err", type(exc).__name__))
    return out


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


def _bounded(outs: list) -> bool:
    for o in outs:
        if isinstance(o, tuple):
            return False
        for v in (o if isinstance(o, list) else [o]):
            if type(v) is not int or abs(v) > MAX_OUT:
                return False
    return True


def _label(x, y) -> str:
    def short(s: str, n: int = 60) -> str:  # as problems.model.Problem.test_label
        return s if len(s) <= n else s[: n - 3] + "..."
    return f"f({short(repr(x))}) == {short(repr(y))}"


# ---------------------------------------------------------------------------------------------- the guard

class LeakGuard:
    """True for a program that may not appear in the corpus (held-out shape, or equivalent to a held-out
    target of one of ``heldout_seeds`` at one of ``levels``). Results are cached by source.

    The default stays the std level only: that is the guard the bundled checkpoint's corpus was drawn with, so
    ``generate_corpus`` still regenerates it sample for sample. A future corpus can pass ``levels=pbe.LEVELS``;
    for the weights as shipped, ``proposer.tiny.leaks.screen`` keeps recallable problems out of study suites."""

    def __init__(self, heldout_seeds: tuple[int, ...] = (pbe.DEFAULT_SEED,),
                 levels: tuple[str, ...] = ("std",)) -> None:
        bad = [lv for lv in levels if lv not in pbe.LEVELS]
        if bad:
            raise ValueError(f"unknown level {bad[0]!r} (expected one of {pbe.LEVELS})")
        self.guards = [pbe.heldout_guard(s, lv) for s in heldout_seeds for lv in levels]
        self._cache: dict[str, bool] = {}

    def blocked(self, family: str, steps: list[pbe.Step], src: str) -> bool:
        if src not in self._cache:
            bad = bool(steps) and pbe.shape_split(family, steps) != "train"
            self._cache[src] = bad or self._blocked_src(src)
        return self._cache[src]

    def _blocked_src(self, src: str) -> bool:
        """The behaviour half of ``blocked``: equivalent to a guarded held-out target."""
        fn = pbe.compile_fn(src)
        return any(g.matches_fn(fn) for g in self.guards)


# -------------------------------------------------------------------------------------------- the samples

def _target(rng: random.Random, guard: LeakGuard):
    for _ in range(200):
        family = rng.choice(pbe.FAMILIES)
        steps = pbe.sample_composition(rng, family, "train")
        shapes = [s.shape() for s in steps]
        if any(a == b for a, b in zip(shapes, shapes[1:])):
            continue
        src = pbe.render(family, steps)
        pool = _inputs(rng, family)
        outs = _run(src, pool)
        if not _bounded(outs) or len({repr(o) for o in outs}) < 4:
            continue
        if family == "list" and sum(1 for o in outs if o) < 0.5 * len(outs):
            continue
        if guard.blocked(family, steps, src):
            continue
        return family, steps, src, pool, outs
    raise RuntimeError("corpus: could not draw a target")  # pragma: no cover


def _variant(rng: random.Random, family: str, steps: list, pool: list, target_outs: list, guard: LeakGuard,
             taken: set[str], n_edits: int, weights=(4, 3, 3, 2, 1)):
    """A program a few edits from the target that differs from it on the pool and from every taken behaviour."""
    for _ in range(30):
        new = _edits(rng, family, steps, n_edits, weights)
        if new is None:
            continue
        shapes = [s.shape() for s in new]
        if any(a == b for a, b in zip(shapes, shapes[1:])):
            continue
        src = pbe.render(family, new)
        outs = _run(src, pool)
        if all(_same(a, b) for a, b in zip(outs, target_outs)):
            continue
        key = repr(outs)
        if key in taken or guard.blocked(family, new, src):
            continue
        taken.add(key)
        return new, src, outs
    return None


def _choose_tests(rng: random.Random, pool: list, target: list, parent: list, misses: list[list],
                  n_tests: int) -> list[int] | None:
    """Indices into pool: >= 2 the parent fails, >= 1 each near miss fails (so exactly one answer is right),
    then random fill with up to half passing for the parent; None when the pool cannot do it."""
    def fails(outs, i):
        return not _same(outs[i], target[i])

    order = list(range(len(pool)))
    rng.shuffle(order)
    pf = [i for i in order if fails(parent, i)]
    if len(pf) < 2:
        return None
    chosen = pf[:2]
    for outs in misses:
        if not any(fails(outs, i) for i in chosen):
            hit = next((i for i in order if fails(outs, i)), None)
            if hit is None:
                return None
            chosen.append(hit)
    rest = [i for i in order if i not in chosen]
    n_ok = rng.randint(0, n_tests // 2)
    for i in rest:
        if len(chosen) >= n_tests:
            break
        if fails(parent, i) or n_ok > 0:
            n_ok -= not fails(parent, i)
            chosen.append(i)
    rng.shuffle(chosen)
    return chosen


def _multi(rng: random.Random, guard: LeakGuard) -> Sample | None:
    family, steps, target_src, pool, target_outs = _target(rng, guard)
    taken = {repr(target_outs)}
    # the parent: 1 edit (easy), 2 edits (hard), or the identity
    r = rng.random()
    if r < 0.1 and family != "reduce":
        parent = ([], pbe.render(family, []), _run(pbe.render(family, []), pool))
        if all(_same(a, b) for a, b in zip(parent[2], target_outs)):
            return None
        taken.add(repr(parent[2]))
    else:
        parent = _variant(rng, family, steps, pool, target_outs, guard, taken, 1 if r < 0.7 else 2)
        if parent is None:
            return None
    if guard.blocked(family, parent[0], parent[1]):
        return None
    # inspirations and answers first (on the whole pool), then tests chosen to tell all of them apart
    insp_v = []
    for _ in range(rng.choices((0, 1, 2), weights=INSPIRATION_WEIGHTS, k=1)[0]):
        v = _variant(rng, family, steps, pool, target_outs, guard, taken, rng.choice((1, 1, 2)))
        if v is not None:
            insp_v.append(v)
    m = rng.choices(M_CHOICES, weights=M_WEIGHTS, k=1)[0]
    misses = []
    for _ in range(m - 1):
        v = _variant(rng, family, steps, pool, target_outs, guard, taken, 1, weights=(5, 3, 2, 2, 1))
        if v is None:
            return None
        misses.append(v)
    idx = _choose_tests(rng, pool, target_outs, parent[2], [v[2] for v in misses], rng.randint(6, 12))
    if idx is None:
        return None
    labels = [_label(pool[i], target_outs[i]) for i in idx]

    def vector(outs):
        return [1.0 if _same(outs[i], target_outs[i]) else 0.0 for i in idx]

    pvec = vector(parent[2])
    # description as pbe writes it: examples are tests the parent fails, short inputs first
    ex = [i for i in idx if not _same(parent[2][i], target_outs[i])]
    ex.sort(key=lambda i: (len(repr(pool[i])) > 22, pool[i] in ([], 0), idx.index(i)))
    desc = pbe.describe(family, steps)
    if rng.random() < 0.9:
        desc += "\nExamples:\n" + "\n".join(f"f({pool[i]!r}) == {target_outs[i]!r}" for i in ex[:2])
    # inspirations: those passing tests the parent fails first (as the campaign orders them)
    insp = [(pbe.wrap_block(v[1]), vector(v[2])) for v in insp_v]
    insp.sort(key=lambda t: -sum(1 for a, b in zip(t[1], pvec) if a > b))
    # the answers: the target at a random position among the m-1 near misses
    bodies = [target_src] + [v[1] for v in misses]
    rng.shuffle(bodies)
    ctx = PromptContext(problem_id=f"pbe/{family}-{rng.randint(0, 1200)}", description=desc,
                        parent_code=pbe.wrap_block(parent[1]), parent_vector=pvec, test_labels=labels,
                        inspirations=insp, m=m, mode="full")
    prompt = build_prompt(ctx, max_chars=MAX_PROMPT_CHARS)
    bodies = [b.rstrip("\n") for b in bodies]
    return Sample("multi", prompt, completion_target(bodies), m=m,
                  programs=[target_src, parent[1]] + [c for c, _ in insp] + bodies,
                  meta={"family": family, "target": target_src, "answer": bodies.index(target_src.rstrip("\n")),
                        "shape": pbe.shape_key(family, steps), "parent": ctx.parent_code,
                        "inputs": [pool[i] for i in idx], "expected": [target_outs[i] for i in idx],
                        "parent_passes": int(sum(pvec))})


def _plain(rng: random.Random, guard: LeakGuard) -> Sample:
    family, steps, src, _, _ = _target(rng, guard)
    text = "# " + pbe.describe(family, steps) + "\n" + src
    return Sample("plain", "", text, programs=[src], meta={"family": family, "target": src})


def sample(seed: int, i: int, guard: LeakGuard, plain_frac: float = 0.1) -> Sample:
    """Sample i of the corpus of ``seed`` (independent of every other index)."""
    rng = random.Random(f"vevo-tiny-corpus:{seed}:{i}")
    if rng.random() < plain_frac:
        return _plain(rng, guard)
    while True:
        s = _multi(rng, guard)
        if s is not None:
            return s


def iter_corpus(seed: int, n: int, *, plain_frac: float = 0.1, start: int = 0,
                guard: LeakGuard | None = None) -> Iterator[Sample]:
    guard = guard or LeakGuard()
    for i in range(start, start + n):
        yield sample(seed, i, guard, plain_frac)


def generate_corpus(seed: int, n: int, *, plain_frac: float = 0.1, start: int = 0,
                    guard: LeakGuard | None = None) -> list[Sample]:
    """Samples start..start+n-1 of the corpus of ``seed`` (deterministic; a prefix is stable)."""
    return list(iter_corpus(seed, n, plain_frac=plain_frac, start=start, guard=guard))
