"""Per-member numbers of a proposer portfolio, from the archive alone (`vevo runs show`, `vevo report`, curves
``--by proposer``, bench/studies/portfolio_ab.py).

* ``iterations``: iterations the member proposed; ``proposals``: answers it was asked for (completions × m);
* ``programs``: programs archived from its iterations (new candidates and format errors);
* ``improvements``: its programs that improve on their parent by the bandit's measure (`portfolio.improvement`
  > 0: a higher score than max(parent, seed), or a test the parent fails now passed);
* ``solved_first``: problems whose first solving program it proposed;
* cost: ``tokens`` generated (completions' token ids, when the backend gives them) and ``gen_seconds``.
"""
from __future__ import annotations

from typing import Any

from ..archive import Archive
from ..policies.portfolio import OK_STATUSES, improvement


def member_by_iteration(archive: Archive) -> dict[int, tuple[str, int]]:
    """iteration -> (member, policy version); an archive without a portfolio table has no rows here."""
    return {r.iteration: (r.member, r.policy_version) for r in archive.portfolio_rows()}


def improving_programs(archive: Archive) -> list[tuple[int, int, bool]]:
    """(program id, iteration, improves its parent) for every program proposed in an iteration (not seeds)."""
    rows = archive.programs()
    by_id = {r.id: r for r in rows}
    baseline = {r.problem: r.scalar for r in rows if r.island == -1}
    out = []
    for r in rows:
        if r.iteration == 0 or r.island == -1:
            continue
        parent = by_id.get(r.parent_ids[0]) if r.parent_ids else None
        good = (parent is not None and r.status in OK_STATUSES and
                improvement(parent.vector, parent.scalar, baseline.get(r.problem, 0.0), r.vector, r.scalar) > 0)
        out.append((r.id, r.iteration, good))
    return out


def member_stats(archive: Archive) -> dict[str, dict[str, Any]]:
    """{member: {iterations, programs, improvements, solved_first, proposals, tokens, gen_seconds,
    improvement_rate (per 100 proposals), reward_sum, versions: {v: {iterations, proposals, improvements}}}}."""
    who = member_by_iteration(archive)
    if not who:
        return {}
    stats: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return stats.setdefault(name, {"iterations": 0, "programs": 0, "improvements": 0, "solved_first": 0,
                                       "proposals": 0, "tokens": 0, "gen_seconds": 0.0, "reward_sum": 0.0,
                                       "versions": {}})

    def version(name: str, v: int) -> dict[str, Any]:
        return entry(name)["versions"].setdefault(str(v), {"iterations": 0, "proposals": 0, "improvements": 0})

    for r in archive.portfolio_rows():
        e = entry(r.member)
        e["iterations"] += 1
        e["reward_sum"] += r.reward
        version(r.member, r.policy_version)["iterations"] += 1
    for g in archive.groups_by_id(archive.group_ids()):
        if g.iteration not in who:
            continue
        name, v = who[g.iteration]
        n = len(g.completions) * g.m
        entry(name)["proposals"] += n
        version(name, v)["proposals"] += n
        entry(name)["tokens"] += sum(len(c.token_ids or []) for c in g.completions)
    for m in archive.metrics_rows():
        if m.iteration in who:
            entry(who[m.iteration][0])["gen_seconds"] += float(m.data.get("gen_seconds", 0.0))
    for _, it, good in improving_programs(archive):
        if it not in who:
            continue
        name, v = who[it]
        entry(name)["programs"] += 1
        if good:
            entry(name)["improvements"] += 1
            version(name, v)["improvements"] += 1
    for _, it in archive.solved_problems().items():
        if it in who:
            entry(who[it][0])["solved_first"] += 1
    for e in stats.values():
        e["improvement_rate"] = round(100.0 * e["improvements"] / e["proposals"], 4) if e["proposals"] else 0.0
        e["gen_seconds"] = round(e["gen_seconds"], 4)
        e["reward_sum"] = round(e["reward_sum"], 6)
    return stats
