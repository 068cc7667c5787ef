"""Run health: notice a campaign that is going nowhere and say why, once per cause.

Fed one `Observation` per committed iteration (the campaign's commit path, and on resume the archive's
iterations again, so a resumed run warns exactly as the uninterrupted one), `Health.observe` returns the new
warnings, one line each:

* **same failure**: of the last ``window`` evaluated candidates (at least ``min_candidates``), a share
  >= ``failure_share`` failed with the same cause (`failure_cause`: the exception type and its message with the
  failing test case cut off and numbers blurred, so one exception counts once across test cases and problems),
  or else raised the same exception type with varying messages; the line names the cause, the share and one
  full error. Once per cause.
* **duplicates**: of the last ``answer_window`` answers (at least ``min_answers``), a share >= ``share`` repeated
  a program already evaluated (the proposer has stopped exploring).
* **unusable**: the same share of answers were empty, unparseable or could not be applied to their parent; the
  line names the most common reason.
* **stall**: no problem's best score rose for ``stall`` iterations in a row; with ``stall_hint`` (the campaign's
  `proposer.tiny.reach` note) the line names that likely cause.

Pure: no I/O, no clock; the same observations give the same warnings.
"""
from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass, field

from evaluators.types import error_text  # noqa: F401 - the one definition of a program's error line

PREFIX = "warning: "
_MSG_CHARS = 200


@dataclass(frozen=True)
class ProgramOutcome:
    """One program an iteration committed: its problem, status, score and `error_text`."""
    problem: str
    status: str
    scalar: float
    error: str = ""


@dataclass(frozen=True)
class Observation:
    iteration: int
    answers: int             # answer slots asked for (completions x m)
    duplicates: int          # answers that repeated a program already evaluated (or one of the same batch)
    programs: tuple[ProgramOutcome, ...] = ()  # evaluated candidates and format errors (status "format_error")


def observation(iteration: int, metrics: dict, m: int, programs: list[ProgramOutcome]) -> Observation:
    """An iteration's observation from its metrics row (as the campaign records it) and its programs."""
    return Observation(iteration=iteration, answers=int(metrics.get("completions", 0)) * max(int(m), 1),
                       duplicates=int(metrics.get("duplicates", 0)), programs=tuple(programs))


# an exception's name where an error line names one: "f(25) == 226: ValueError: broken" -> ValueError, broken
_EXCEPTION = re.compile(r"(?:^|: )((?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)|"
                        r"StopIteration|StopAsyncIteration))(?:: (.*))?$")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def failure_cause(status: str, error: str) -> tuple[str, str]:
    """Pure: (kind, message) of a failed candidate: kind is the exception type its error names, message that
    exception's message with numbers blurred to N, so `f(25) == 226: ValueError: bad 25` and
    `g([1]) == 3: ValueError: bad 1` are one cause; an error naming no exception (a timeout, a wrong value) is
    (status, the whole error)."""
    m = _EXCEPTION.search(error)
    if m:
        return m.group(1), _NUMBER.sub("N", m.group(2) or "")
    return status, error


def _short(text: str) -> str:
    return text if len(text) <= _MSG_CHARS else text[: _MSG_CHARS - 3] + "..."


@dataclass
class Health:
    window: int = 50
    min_candidates: int = 20
    answer_window: int = 200
    min_answers: int = 40
    share: float = 0.8          # of answers: duplicates, unusable
    failure_share: float = 0.6  # of candidates: the same (status, message); "most", yet rare in a run that moves
    stall: int = 50
    stall_hint: str = ""        # the likely cause a stall warning names (a proposer out of its problems' reach)
    _failures: deque = field(default_factory=deque)     # failure_cause of recent candidates; None = passed
    _answers: deque = field(default_factory=deque)      # "dup" | "bad" | "new" per recent answer slot
    _bad_reasons: deque = field(default_factory=deque)  # messages of recent unusable answers
    _best: dict = field(default_factory=dict)
    _last_gain: int = 0
    _said: set = field(default_factory=set)
    _example: dict = field(default_factory=dict)        # failure_cause -> (status, the first full error seen)

    def observe(self, obs: Observation) -> list[str]:
        """The warnings this iteration raises for the first time (without the ``warning: `` prefix)."""
        if obs.iteration == 0:  # the seeds: where improvement is measured from, not proposer output
            for p in obs.programs:
                self._best[p.problem] = max(p.scalar, self._best.get(p.problem, p.scalar))
            return []
        gained = False
        n_format = 0
        for p in obs.programs:
            if p.status == "format_error":
                n_format += 1
                self._bad_reasons.append(p.error or "unusable answer")
                continue
            old = self._best.get(p.problem)
            if old is None or p.scalar > old:
                gained |= old is not None
                self._best[p.problem] = p.scalar
            failed = p.status != "ok" and (p.error or p.status != "wrong")  # a plain wrong answer is search
            cause = failure_cause(p.status, p.error) if failed else None
            if cause is not None:
                self._example.setdefault(cause, (p.status, p.error))
            self._failures.append(cause)
        if gained:
            self._last_gain = obs.iteration
        candidates = sum(p.status != "format_error" for p in obs.programs)
        unusable = max(obs.answers - obs.duplicates - candidates, n_format)
        self._answers.extend(["dup"] * obs.duplicates + ["bad"] * unusable + ["new"] * candidates)
        for q, cap in ((self._failures, self.window), (self._answers, self.answer_window),
                       (self._bad_reasons, self.answer_window)):
            while len(q) > cap:
                q.popleft()
        out = self._same_failure()
        out += self._answer_shares()
        if self.stall > 0 and obs.iteration - self._last_gain >= self.stall and "stall" not in self._said:
            self._said.add("stall")
            best = ", ".join(f"{k} {v:.3g}" for k, v in sorted(self._best.items())[:3])
            more = f" (+{len(self._best) - 3} more)" if len(self._best) > 3 else ""
            out.append(f"no improvement for {obs.iteration - self._last_gain} iterations (best so far: {best}{more})"
                       + (f"; likely cause: {self.stall_hint}" if self.stall_hint else ""))
        return out

    def _same_failure(self) -> list[str]:
        n = len(self._failures)
        if n < self.min_candidates:
            return []
        causes = Counter(k for k in self._failures if k is not None)
        top = causes.most_common(1)
        if top and top[0][1] >= self.failure_share * n and ("failure",) + top[0][0] not in self._said and \
                ("raised", top[0][0][0]) not in self._said:
            (kind, message), count = top[0]
            self._said |= {("failure", kind, message), ("raised", kind)}
            status, example = self._example[(kind, message)]
            m = _EXCEPTION.search(example)
            if m is None:  # no exception named: the error line itself is the cause
                why = f"{status}: {_short(example)}" if example else status
            else:
                where = example[:m.start(1)].rstrip(": ")
                why = _short(example[m.start(1):]) + (f" ({status}, e.g. at {_short(where)})" if where else
                                                      f" ({status})")
            return [f"{count / n:.0%} of the last {n} candidates failed the same way: {why}"]
        kinds = Counter()
        for (kind, _message), count in causes.items():
            if _EXCEPTION.fullmatch(kind):
                kinds[kind] += count
        top = kinds.most_common(1)
        if top and top[0][1] >= self.failure_share * n and ("raised", top[0][0]) not in self._said:
            kind, count = top[0]
            self._said.add(("raised", kind))
            messages = Counter({c: k for c, k in causes.items() if c[0] == kind})
            status, example = self._example[messages.most_common(1)[0][0]]
            return [f"{count / n:.0%} of the last {n} candidates raised {kind}, with {len(messages)} different "
                    f"messages (most often, {status}: {_short(example)})"]
        return []

    def _answer_shares(self) -> list[str]:
        n = len(self._answers)
        if n < self.min_answers:
            return []
        counts = Counter(self._answers)
        out = []
        if counts["dup"] >= self.share * n and "duplicates" not in self._said:
            self._said.add("duplicates")
            out.append(f"{counts['dup'] / n:.0%} of the last {n} answers repeat programs already evaluated "
                       "(the proposer has stopped exploring: more temperature, or a different proposer)")
        if counts["bad"] >= self.share * n and "unusable" not in self._said:
            self._said.add("unusable")
            reason = Counter(self._bad_reasons).most_common(1)
            why = f"; most often: {_short(reason[0][0])}" if reason else ""
            out.append(f"{counts['bad'] / n:.0%} of the last {n} answers were empty, unparseable or did not apply "
                       f"to their parent{why}")
        return out
