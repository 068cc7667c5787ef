"""Server-rendered SVG charts: step curves with seed bands, and an island's lineage. Pure functions of their
data (no archive), so the pages stay JavaScript-free to draw and cheap to send: a curve is thinned to a fixed
number of points and a lineage is drawn one page of nodes at a time."""
from __future__ import annotations

import math
from typing import Sequence
from urllib.parse import quote

from .components import e, fmt

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
Point = tuple[float, float]


def thin(points: Sequence[Point], n: int) -> list[Point]:
    """At most ~n points of a step curve, keeping the first, the last and every point where the value changes
    (a step curve's shape), then every k-th of those when still too many."""
    if len(points) <= n:
        return list(points)
    keep = [points[0]] + [p for a, p in zip(points, points[1:]) if p[1] != a[1]] + [points[-1]]
    if len(keep) > n:
        k = math.ceil(len(keep) / n)
        keep = keep[:-1:k] + [keep[-1]]
    return keep


def step_at(points: Sequence[Point], x: float) -> float | None:
    """Value of a step curve at x (None past its last point, 0 before its first)."""
    if not points or x > points[-1][0]:
        return None
    lo, hi = 0, len(points)
    while lo < hi:
        mid = (lo + hi) // 2
        if points[mid][0] <= x:
            lo = mid + 1
        else:
            hi = mid
    return points[lo - 1][1] if lo else 0.0


def band(curves: Sequence[Sequence[Point]]) -> list[tuple[float, float, float, float]]:
    """(x, mean, min, max) over the runs of one label (seeds) on the union of their xs; a run counts up to its
    own last x, as in evolve/curves.curve_table."""
    xs = sorted({p[0] for c in curves for p in c})
    out = []
    for x in xs:
        vals = [v for v in (step_at(c, x) for c in curves) if v is not None]
        if vals:
            out.append((x, sum(vals) / len(vals), min(vals), max(vals)))
    return out


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 5, 10) if s * mag >= raw)
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + 1e-9 * step:
        out.append(round(t, 10))
        t += step
    return out


def line_chart(series: Sequence[tuple[str, Sequence[Point], Sequence[tuple[float, float, float]] | None]],
               title: str, xlabel: str, chart_id: str = "", width: int = 520, height: int = 260,
               step: bool = True, integer_y: bool = False) -> str:
    """An SVG chart: per series (label, points, optional band as (x, lo, hi)), a line in its palette colour
    and a shaded band. `data-points` on each line counts its points (tests read it)."""
    ml, mr, mt, mb = 52, 12, 24, 36
    pw, ph = width - ml - mr, height - mt - mb
    allx = [p[0] for _, pts, _ in series for p in pts]
    ally = [p[1] for _, pts, _ in series for p in pts] + [v for *_, b in series if b for _, lo, hi in b
                                                           for v in (lo, hi)]
    x0, x1 = (min(allx), max(allx)) if allx else (0.0, 1.0)
    y0, y1 = (min(0.0, min(ally)), max(ally)) if ally else (0.0, 1.0)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    y1 += 0.05 * (y1 - y0)  # headroom: the top value stays off the frame

    def sx(x: float) -> float:
        return ml + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return mt + ph - (y - y0) / (y1 - y0) * ph

    def path(pts: Sequence[Point]) -> str:
        out = []
        for i, (x, y) in enumerate(pts):
            if i and step:
                out.append(f"{sx(x):.1f},{sy(pts[i - 1][1]):.1f}")
            out.append(f"{sx(x):.1f},{sy(y):.1f}")
        return " ".join(out)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' role='img'{f' id={chr(39)}{e(chart_id)}{chr(39)}' if chart_id else ''}>",
             f"<text x='{width / 2}' y='15' text-anchor='middle' font-size='12'>{e(title)}</text>"]
    for t in _ticks(y0, y1):
        if integer_y and t != int(t):
            continue
        parts.append(f"<line x1='{ml}' x2='{ml + pw}' y1='{sy(t):.1f}' y2='{sy(t):.1f}' stroke='#eee'/>"
                     f"<text x='{ml - 4}' y='{sy(t) + 4:.1f}' text-anchor='end' font-size='10'>{e(fmt(t))}</text>")
    for t in _ticks(x0, x1):
        parts.append(f"<text x='{sx(t):.1f}' y='{mt + ph + 14}' text-anchor='middle' font-size='10'>"
                     f"{e(f'{t:g}')}</text>")
    parts.append(f"<rect x='{ml}' y='{mt}' width='{pw}' height='{ph}' fill='none' stroke='#999'/>"
                 f"<text x='{ml + pw / 2}' y='{height - 4}' text-anchor='middle' font-size='11'>{e(xlabel)}</text>")
    for i, (label, pts, b) in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        if b and len(b) > 1:
            hi = [(x, h) for x, _, h in b]
            lo = [(x, l) for x, l, _ in b]
            poly = path(hi) + " " + " ".join(reversed(path(lo).split()))
            parts.append(f"<polygon points='{poly}' fill='{colour}' fill-opacity='0.18' stroke='none'/>")
        if pts:
            parts.append(f"<polyline class='series' data-label='{e(label)}' data-points='{len(pts)}' "
                         f"points='{path(pts)}' fill='none' stroke='{colour}' stroke-width='2'/>")
        if len(pts) == 1:  # a line of one point draws nothing: show the point (a run's single probe, say)
            parts.append(f"<circle cx='{sx(pts[0][0]):.1f}' cy='{sy(pts[0][1]):.1f}' r='3' fill='{colour}'/>")
        parts.append(f"<rect x='{ml + 8}' y='{mt + 6 + 14 * i}' width='10' height='3' fill='{colour}'/>"
                     f"<text x='{ml + 22}' y='{mt + 11 + 14 * i}' font-size='10'>{e(label)}</text>")
    parts.append("</svg>")
    return "".join(parts)


MARKERS = ("circle", "square", "triangle", "diamond")


def _marker(kind: str, x: float, y: float, r: float, fill: str, extra: str) -> str:
    if kind == "circle":
        return f"<circle cx='{x:.1f}' cy='{y:.1f}' r='{r}' fill='{fill}'{extra}/>"
    if kind == "square":
        return f"<rect x='{x - r:.1f}' y='{y - r:.1f}' width='{2 * r}' height='{2 * r}' fill='{fill}'{extra}/>"
    if kind == "triangle":
        pts = f"{x:.1f},{y - r - 1:.1f} {x - r - 1:.1f},{y + r:.1f} {x + r + 1:.1f},{y + r:.1f}"
    else:
        pts = f"{x:.1f},{y - r - 1:.1f} {x + r + 1:.1f},{y:.1f} {x:.1f},{y + r + 1:.1f} {x - r - 1:.1f},{y:.1f}"
    return f"<polygon points='{pts}' fill='{fill}'{extra}/>"


def score_colour(v: float, lo: float, hi: float) -> str:
    """Low scores dark blue, high yellow (a viridis-like ramp of three stops)."""
    t = 0.5 if hi <= lo else min(max((v - lo) / (hi - lo), 0.0), 1.0)
    stops = ((68, 1, 84), (33, 145, 140), (253, 231, 37))
    a, b, u = (stops[0], stops[1], t * 2) if t < 0.5 else (stops[1], stops[2], t * 2 - 1)
    return "#" + "".join(f"{int(a[k] + (b[k] - a[k]) * u):02x}" for k in range(3))


def lineage_svg(nodes: Sequence[dict], outside: dict[int, dict], island: int, program_href: str,
                width: int = 1100, height: int = 480) -> str:
    """Parent → child edges of one page of an island's programs, x = iteration, y = score; colour = score,
    marker = policy version (circle v0, square v1, triangle v2, diamond v3, then again), a ring = solved.
    A parent on another island (the child descends from a migrant; island -1 holds the seeds, not a migration) gets a dashed orange edge from a
    labelled stub; a parent on an earlier page a grey one. Every node links to its program page
    (program_href with {id})."""
    if not nodes:
        return "<p class='note'>no programs on this island</p>"
    ml, mr, mt, mb = 52, 20, 16, 36
    pw, ph = width - ml - mr, height - mt - mb
    its = [n["iteration"] for n in nodes] + [p["iteration"] for p in outside.values()]
    scores = [n["scalar"] for n in nodes if math.isfinite(n["scalar"])]
    x0, x1 = min(its), max(its)
    y0, y1 = (min(scores), max(scores)) if scores else (0.0, 1.0)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def sx(x: float) -> float:
        return ml + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        y = y if math.isfinite(y) else y0
        return mt + ph - (y - y0) / (y1 - y0) * ph

    pos = {n["id"]: (sx(n["iteration"]), sy(n["scalar"])) for n in nodes}
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' id='lineage' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' data-nodes='{len(nodes)}'>",
             f"<rect x='{ml}' y='{mt}' width='{pw}' height='{ph}' fill='none' stroke='#ccc'/>",
             f"<text x='{ml + pw / 2}' y='{height - 4}' text-anchor='middle' font-size='11'>iteration</text>",
             f"<text x='12' y='{mt + ph / 2}' font-size='11' transform='rotate(-90 12 {mt + ph / 2})' "
             f"text-anchor='middle'>score</text>"]
    for t in _ticks(x0, x1):
        parts.append(f"<text x='{sx(t):.1f}' y='{mt + ph + 14}' text-anchor='middle' font-size='10'>{t:g}</text>")
    for t in _ticks(y0, y1):
        parts.append(f"<text x='{ml - 4}' y='{sy(t) + 4:.1f}' text-anchor='end' font-size='10'>{e(fmt(t))}</text>")
    for n in nodes:
        p = n["parent"]
        if p is None:
            continue
        x, y = pos[n["id"]]
        if p in pos:
            px, py = pos[p]
            parts.append(f"<line x1='{px:.1f}' y1='{py:.1f}' x2='{x:.1f}' y2='{y:.1f}' stroke='#bbb' "
                         f"stroke-width='0.8'/>")
        elif p in outside:
            o = outside[p]
            px, py = sx(o["iteration"]), sy(o["scalar"])
            migrant = o["island"] != island and o["island"] >= 0  # island -1 holds the problem's seeds
            colour, dash = ("#ff7f0e", " stroke-dasharray='4 3'") if migrant else ("#ddd", "")
            title = f"parent {p} on island {o['island']}" if migrant else f"parent {p} (earlier page)"
            parts.append(f"<line class='{'migration' if migrant else 'offpage'}' x1='{px:.1f}' y1='{py:.1f}' "
                         f"x2='{x:.1f}' y2='{y:.1f}' stroke='{colour}' stroke-width='1'{dash}><title>{e(title)}"
                         f"</title></line>")
    for o in outside.values():  # parents not on this page: hollow, labelled by their island
        href = program_href.replace("{id}", str(int(o["id"])))
        parts.append(f"<a href='{e(href)}' class='parent'><title>program {o['id']} · island {o['island']} · "
                     f"score {e(fmt(o['scalar']))}</title><circle cx='{sx(o['iteration']):.1f}' "
                     f"cy='{sy(o['scalar']):.1f}' r='4' fill='#fff' stroke='#888'/></a>")
    for n in nodes:
        x, y = pos[n["id"]]
        fill = score_colour(n["scalar"], y0, y1)
        ring = " stroke='#d62728' stroke-width='2'" if n["solved"] else " stroke='#333' stroke-width='0.4'"
        marker = _marker(MARKERS[n["version"] % len(MARKERS)], x, y, 4, fill, ring)
        href = program_href.replace("{id}", str(int(n["id"])))
        parts.append(f"<a href='{e(href)}' class='node' data-id='{int(n['id'])}'><title>program {n['id']} · "
                     f"iteration {n['iteration']} · score {e(fmt(n['scalar']))} · {e(n['status'])} · policy "
                     f"v{n['version']}</title>{marker}</a>")
    parts.append("</svg>")
    return "".join(parts)


def quote_seg(s: str) -> str:
    """A run name or problem id as one URL path segment or query value."""
    return quote(str(s), safe="")
