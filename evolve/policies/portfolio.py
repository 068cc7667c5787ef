"""Proposer portfolios: which member proposes iteration t, as a registered pure function of the committed history.

A campaign's ``proposers:`` are arms. Before iteration t is prepared, the policy named by ``portfolio.policy``
(``CHOICES``) picks one from a `History`: the arms chosen and the rewards observed for the iterations committed
through t-D-1 (D = ``pipeline_depth``; the same rule that fixes t's parent), and an RNG seeded by (seed, t). So
the choice is a pure function of the seed and the committed history: a kill -9 + resume rebuilds the history from
the archive's ``portfolio`` table and chooses again exactly what the uninterrupted run chose.

Reward of a batch (`batch_reward`): the best improvement any of its new programs brings over its parent,

    r(child) = max( max(0, s_child - max(s_parent, s_baseline)),  n_new / d )

with s the scalar score, s_baseline the problem's seed program, and n_new the number of the d tests on which
the child scores higher than the parent (per-test aware: a child that solves tests its parent fails counts even
when its mean is not higher). Failed candidates (format errors, crashes, timeouts) and duplicates score 0; so
does a batch with no new program. r is in [0, 1] for pass/fail tests.

Scale: ucb and thompson divide every reward by the largest reward seen so far (all arms), so their constants do
not depend on the problem's units (a batch that passes 2 more tests of 200 earns 0.01 before that).

Decay: the bandits weigh the observation of iteration s by ``decay ** (c - s)``, c = t-D-1 the newest iteration
the choice may see, so an arm's estimate follows a policy that training changes (``decay: 1`` is the plain
mean). Costs: each member has a ``cost`` per call (config, default 1, e.g. an API price); ``cost_weight`` λ
subtracts λ · cost / max cost from the UCB score and from Thompson's draw.

To add a policy: ``fn(history, rng, params) -> arm index`` and ``register_choice(name, fn)`` (or an entry in
``CHOICES``); ``params`` is the config's ``portfolio`` section.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np

RNG_KEY = 0x50F7  # keeps the portfolio's stream apart from every other (seed, t) stream of a run


@dataclass(frozen=True)
class Member:
    """One member of the portfolio as the choice sees it (its backend lives in the campaign)."""
    name: str
    spec: str = ""
    train: bool = False
    weight: float = 1.0
    cost: float = 1.0
    temperature: float | None = None  # None: the run's sampling.temperature
    answers: int | None = None        # None: the run's answers (m)


@dataclass
class History:
    """What a choice policy may read for iteration ``t``: the arms, and for each iteration committed through
    ``cutoff`` (= t-D-1) the arm that proposed it and the reward it brought, in iteration order."""
    t: int
    cutoff: int
    arms: Sequence[Member]
    iterations: np.ndarray  # int, increasing
    chosen: np.ndarray      # int, arm index per iteration
    rewards: np.ndarray     # float, per iteration
    seed: int = 0
    sums: "Sums | None" = None  # the same decayed sums kept up to date by `Portfolio` (equal to computing them)

    def decayed(self, decay: float) -> tuple[np.ndarray, np.ndarray]:
        """Per arm: (decayed number of pulls, decayed sum of rewards ÷ the largest reward seen so far), weights
        decay ** (cutoff - s). Dividing by the largest reward makes the bandits scale-free: one more passed test
        of 200 and a solved problem are both "the best seen" when nothing better was seen."""
        if self.sums is not None and self.sums.decay == decay and self.sums.n_seen == self.chosen.size:
            n, s = self.sums.at(self.cutoff)
            return np.array(n), np.array(s)
        return self._decayed(decay)

    def decayed_lists(self, decay: float) -> tuple[list[float], list[float]]:
        """`decayed` as plain lists (quicker for the handful of arms a policy loops over)."""
        if self.sums is not None and self.sums.decay == decay and self.sums.n_seen == self.chosen.size:
            return self.sums.at(self.cutoff)
        n, s = self._decayed(decay)
        return n.tolist(), s.tolist()

    def _decayed(self, decay: float) -> tuple[np.ndarray, np.ndarray]:
        k = len(self.arms)
        if not self.chosen.size:
            return np.zeros(k), np.zeros(k)
        w = np.power(float(decay), (self.cutoff - self.iterations).astype(float)) if decay != 1 else \
            np.ones(self.chosen.size)
        top = float(self.rewards.max())
        r = self.rewards / top if top > 0 else self.rewards
        return np.bincount(self.chosen, weights=w, minlength=k), np.bincount(self.chosen, weights=w * r, minlength=k)

    def pulls(self) -> np.ndarray:
        if self.sums is not None and self.sums.n_seen == self.chosen.size:
            return np.array(self.sums.pulls)
        return np.bincount(self.chosen, minlength=len(self.arms)) if self.chosen.size else np.zeros(len(self.arms), int)


Choice = Callable[[History, np.random.Generator, Any], int]


def fixed(h: History, rng: np.random.Generator, params: Any) -> int:
    """Each iteration an arm drawn with probability proportional to its ``weight``."""
    w = np.array([a.weight for a in h.arms], dtype=float)
    return int(rng.choice(len(w), p=w / w.sum()))


@lru_cache(maxsize=64)
def _round_order(seed: int, r: int, k: int) -> tuple[int, ...]:
    return tuple(int(x) for x in np.random.default_rng([seed, r, RNG_KEY, 1]).permutation(k))


def round_robin(h: History, rng: np.random.Generator, params: Any) -> int:
    """Arms in turn, in shuffled rounds: round r = (t-1) // k gives each of the k arms one iteration, in an order
    drawn from (seed, r). Each arm gets an equal share whatever the rewards; the shuffle keeps the turns from
    locking onto the campaign's own cycle over problems × islands (with a plain (t-1) mod k and an even number of
    islands, one member would propose on every island 0 and the other on every island 1)."""
    k = len(h.arms)
    r, pos = divmod(h.t - 1, k)
    return _round_order(h.seed, r, k)[pos]


def _cost_penalty(h: History, params: Any) -> list[float]:
    lam = float(getattr(params, "cost_weight", 0.0) or 0.0)
    top = max(a.cost for a in h.arms)
    return [lam * a.cost / top if lam and top > 0 else 0.0 for a in h.arms]


def _spread(best: int, k: int, eps: float, rng: np.random.Generator) -> int:
    """ε spread: the best arm with probability 1-ε, each other arm with ε/(k-1)."""
    if k == 1 or eps <= 0:
        return best
    u = float(rng.random())
    if u < 1.0 - eps:
        return best
    other = min(int((u - (1.0 - eps)) / eps * (k - 1)), k - 2)  # uniform over the k-1 others
    return other + (other >= best)


def ucb(h: History, rng: np.random.Generator, params: Any) -> int:
    """Asymmetric UCB (ShinkaEvolve's LLM bandit): untried arms first, in member order; then the arm with the
    highest decayed mean reward + c · sqrt(2 ln N / n_a) - λ · cost, spread by ε. The asymmetry is in the
    reward (`batch_reward`): only gains over max(parent, baseline) count, losses are 0."""
    pulls = h.sums.pulls if h.sums is not None and h.sums.n_seen == h.chosen.size else h.pulls().tolist()
    if 0 in pulls:
        return pulls.index(0)
    n, s = h.decayed_lists(params.decay)  # a handful of arms: plain floats are quicker
    log_n = math.log(max(sum(n), 1.0 + 1e-12))
    score = [si / max(ni, 1e-12) + params.ucb_c * math.sqrt(2.0 * log_n / max(ni, 1e-12)) - ci
             for ni, si, ci in zip(n, s, _cost_penalty(h, params))]
    return _spread(score.index(max(score)), len(h.arms), params.epsilon, rng)


def thompson(h: History, rng: np.random.Generator, params: Any) -> int:
    """Thompson sampling on Beta(1 + S_a, 1 + n_a - S_a) with the decayed sums (rewards are in [0, 1], so a
    reward is a fractional success); the highest draw minus λ · cost wins."""
    n, s = h.decayed(params.decay)
    s = np.clip(s, 0.0, n)
    draw = rng.beta(1.0 + s, 1.0 + n - s) - np.asarray(_cost_penalty(h, params))
    return int(np.argmax(draw))


CHOICES: dict[str, Choice] = {"fixed": fixed, "round_robin": round_robin, "ucb": ucb, "thompson": thompson}


def register_choice(name: str, fn: Choice) -> None:
    """Make ``portfolio.policy: NAME`` (and ``--portfolio NAME``) choose with ``fn``."""
    CHOICES[name] = fn


# ---------------------------------------------------------------------------------------------- rewards
def improvement(parent_vec: Sequence[float], parent_scalar: float, baseline: float,
                child_vec: Sequence[float], child_scalar: float) -> float:
    """One child's reward: see the module docstring."""
    return batch_reward(parent_vec, parent_scalar, baseline, [(child_vec, child_scalar, "ok")])


OK_STATUSES = ("ok", "wrong")  # the child ran; every other status is a failure and earns 0


def batch_reward(parent_vec: Sequence[float], parent_scalar: float, baseline: float,
                 children: Sequence[tuple[Sequence[float], float, str]]) -> float:
    """The best `improvement` among a batch's new programs ((vector, scalar, status) each); 0 without one.
    Children whose vector is shorter or longer than the parent's are compared on the tests both have (a plain loop:
    a batch is a few vectors, quicker than building arrays)."""
    ok = [(v, s) for v, s, st in children if st in OK_STATUSES]
    if not ok:
        return 0.0
    floor = max(float(parent_scalar), float(baseline))
    best = max(0.0, max(float(s) for _, s in ok) - floor)
    pv = parent_vec.tolist() if isinstance(parent_vec, np.ndarray) else [float(x) for x in parent_vec]
    if not pv:
        return best
    new = max(sum(c > p for c, p in zip(v, pv)) for v, _ in ok)  # a NaN never counts as passed
    return max(best, new / len(pv))


_MASK = (1 << 64) - 1


def _mix64(z: int) -> int:
    """splitmix64's output function: a bijection of 64-bit integers that scatters nearby inputs."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class _LazyGenerator:
    """A numpy Generator (Philox with this key) built on the first attribute access other than ``random()``.
    ``random()`` with no argument (the one draw ucb makes each iteration) is served without building it: the
    n-th call returns splitmix64 step n from the 128-bit key folded to 64 bits, as a float in [0, 1). Both are
    fixed by the key, so as pure as the rest; building a Philox generator cost more than the rest of a choice."""

    __slots__ = ("_key", "_gen", "_state")

    def __init__(self, key: int):
        self._key, self._gen = key, None
        self._state = (_mix64(key >> 64) ^ key) & _MASK

    def random(self, *args: Any, **kw: Any) -> Any:
        if args or kw:
            return self.__getattr__("random")(*args, **kw)
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK  # splitmix64 (Steele, Lea & Flood 2014)
        return (_mix64(self._state) >> 11) * 2.0 ** -53

    def __getattr__(self, name: str) -> Any:
        if self._gen is None:
            self._gen = np.random.Generator(np.random.Philox(key=self._key))
        return getattr(self._gen, name)


class Sums:
    """Decayed pulls and reward sums per arm, kept up to date one observation at a time (what `History.decayed`
    computes from the whole history, in O(arms) per iteration): weights decay ** (last - s), then rescaled to a
    later cutoff. A resumed run replays the same observations, so it holds the same floats."""

    def __init__(self, k: int, decay: float):
        self.decay, self.k = float(decay), k
        self.n, self.s, self.pulls = [0.0] * k, [0.0] * k, [0] * k  # lists: a handful of arms
        self.last, self.top, self.n_seen = 0, 0.0, 0

    def add(self, t: int, arm: int, reward: float) -> None:
        if self.n_seen and self.decay != 1:
            f = self.decay ** (t - self.last)
            self.n = [x * f for x in self.n]
            self.s = [x * f for x in self.s]
        self.n[arm] += 1.0
        self.s[arm] += reward
        self.pulls[arm] += 1
        self.last, self.top, self.n_seen = t, max(self.top, reward), self.n_seen + 1

    def at(self, cutoff: int) -> tuple[list[float], list[float]]:
        f = self.decay ** (cutoff - self.last) if self.n_seen and self.decay != 1 else 1.0
        g = f / self.top if self.top > 0 else f
        return [x * f for x in self.n], [x * g for x in self.s]


# ---------------------------------------------------------------------------------------------- state
@dataclass
class Portfolio:
    """The arms, the choice policy and the committed history (arm, reward per iteration), in commit order."""
    arms: list[Member]
    params: Any                      # the config's portfolio section (policy, ucb_c, decay, epsilon, cost_weight)
    seed: int
    depth: int                       # pipeline_depth: t is chosen from iterations <= t - depth - 1
    def __post_init__(self) -> None:
        self.index = {a.name: i for i, a in enumerate(self.arms)}
        self.fn = CHOICES[self.params.policy]
        self._reset()

    def _reset(self) -> None:
        self._n = 0
        self._its = np.zeros(256, dtype=np.int64)  # grown by doubling; History gets views, never copies
        self._chosen = np.zeros(256, dtype=np.int64)
        self._rewards = np.zeros(256)
        self._sums = Sums(len(self.arms), getattr(self.params, "decay", 1.0))

    @property
    def single(self) -> bool:
        return len(self.arms) == 1

    def history(self, t: int) -> History:
        cutoff = t - max(self.depth, 0) - 1
        n = self._n
        while n and self._its[n - 1] > cutoff:  # only an iteration committed beyond the rule (a resumed depth)
            n -= 1
        return History(t, cutoff, self.arms, self._its[:n], self._chosen[:n], self._rewards[:n], self.seed,
                       self._sums if n == self._n else None)

    def choose(self, t: int) -> Member:
        if self.single:  # no RNG drawn: a one-member run is the run it was before portfolios
            return self.arms[0]
        i = self.fn(self.history(t), self.rng(t), self.params)
        if not 0 <= int(i) < len(self.arms):
            raise ValueError(f"portfolio policy {self.params.policy!r} chose arm {i} of {len(self.arms)}")
        return self.arms[int(i)]

    def rng(self, t: int) -> np.random.Generator:
        """Iteration t's stream: Philox keyed by (seed, t, RNG_KEY), a counter-based generator, so distinct keys
        are independent streams; made on first use (round_robin never draws)."""
        key = ((self.seed % 2**64) << 64) | ((t % 2**48) << 16) | RNG_KEY
        return _LazyGenerator(key)  # type: ignore[return-value]

    def observe(self, t: int, name: str, reward: float) -> None:
        n = self._n
        if n and t <= self._its[n - 1]:
            raise ValueError(f"portfolio: iteration {t} observed after {self._its[n - 1]}")
        if n == self._its.size:
            self._its, self._chosen, self._rewards = (np.concatenate([a, np.zeros_like(a)]) for a in
                                                      (self._its, self._chosen, self._rewards))
        i = self.index[name]
        self._its[n], self._chosen[n], self._rewards[n] = t, i, reward
        self._n = n + 1
        self._sums.add(int(t), i, float(reward))

    def restore(self, rows: Sequence[tuple[int, str, float]], through: int) -> None:
        """The history from archive rows (iteration, member, reward) committed through ``through``."""
        self._reset()
        for it, name, r in sorted(rows):
            if it <= through and name in self.index:
                self.observe(it, name, r)

    def state(self, t: int) -> dict[str, Any]:
        """The bandit's view after committing t (stored per iteration): per arm decayed pulls and mean reward (as
        the bandits see it: ÷ the largest reward seen)."""
        if self.single:
            return {}
        n, s = self._sums.at(t)
        return {a.name: {"n": round(ni, 6), "mean": round(si / ni, 6) if ni > 0 else None}
                for a, ni, si in zip(self.arms, n, s)}
