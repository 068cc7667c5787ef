"""HTML pieces shared by `vevo report` (static) and `vevo ui` (live): escaping, the style sheet, per-test strips,
heatmaps, code diffs and the page frame.

Everything that came from a program, a problem, a model or an evaluator is untrusted and goes through `e()`,
which HTML-escapes it and also makes invisible controls visible: bidi overrides and isolates (which can make
code read differently from what runs) and terminal escapes (ANSI colour codes in error output) are shown as
``\\u202e`` / ``\\x1b`` text instead of acting on the page.
"""
from __future__ import annotations

import html
import re
from typing import Any, Iterable, Sequence

from . import budget, diffs

# C0/C1 controls other than tab and newline, DEL, and the Unicode bidi/format controls
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064"
                        "\u2066-\u2069\ufeff\ud800-\udfff]")


def _visible(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def e(s: Any) -> str:
    """Untrusted text as HTML text or attribute value: escaped, controls made visible. Every call checks the
    render's deadline (``budget.check``), so a page that escapes without end stops at it."""
    budget.check()
    return html.escape(_INVISIBLE.sub(_visible, str(s)), quote=True)


def field(s: Any, limit: int | None = None) -> str:
    """A shown field of untrusted text (code, an error, evaluator output) as e() makes it, cut at ``limit``
    characters (``budget.MAX_FIELD_CHARS``) with a note saying how many more there were."""
    text, more = budget.clip(str(s), budget.MAX_FIELD_CHARS if limit is None else limit)
    note = f"<span class='clipped note'>… ({more} more characters)</span>" if more else ""
    return e(text) + note


def fmt(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.3g}" if v not in (0.0, 1.0) else str(int(v))


def by(seed: bool, version: int) -> str:
    """Who proposed a program: the problem's seed, or the policy version of the completion."""
    return "seed program" if seed else f"policy v{version}"


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
table{border-collapse:collapse}th,td{border:1px solid #ddd;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f3f3f3}td.solved{background:#dcefdc}td.unsolved{color:#777}
.pid{font-family:monospace}.title{color:#555;font-size:12px;max-width:280px}
.t{display:inline-block;min-width:18px;margin:1px;padding:0 2px;font:11px monospace;text-align:center;
border-radius:2px}.t-pass{background:#8fcf8f}.t-part{background:#f0d878}.t-fail{background:#eaa8a8}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;max-width:760px;font-size:12px}
.grid{display:flex;flex-wrap:wrap;gap:8px}.grid img{width:360px;border:1px solid #eee}
#curves{max-width:100%}
.note{color:#666}summary{cursor:pointer;color:#245}
nav{margin-bottom:12px;font-size:13px}nav a{margin-right:12px}
.status-running{color:#1a7f37;font-weight:600}.status-crashed{color:#b42318;font-weight:600}
.status-finished{color:#555}.status-stopped{color:#9a6700}
.diff{max-width:1000px}.diff span{display:block;white-space:pre}.diff .add{background:#e6ffec}.diff .del{background:#ffebe9}
.diff .hunk{color:#6639ba}
.heat td.h{padding:0;width:14px;height:14px;border:1px solid #fff}.heat th{font-size:11px;padding:1px 3px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #eee;background:#fff}
.fate-evaluated{color:#1a7f37}.fate-malformed{color:#b42318}.fate-duplicate,.fate-empty{color:#777}
.live{font-size:12px;color:#777}.pager a{margin:0 4px}
"""


def test_strip(vector: Sequence[float], labels: Sequence[str]) -> str:
    """One coloured cell per test (pass / partial / fail), labelled on hover."""
    cells = []
    for i, v in enumerate(vector):
        cls = "t-pass" if v >= 1.0 - 1e-9 else "t-part" if v > 0 else "t-fail"
        label = labels[i] if i < len(labels) else f"test {i}"
        cells.append(f"<span class='t {cls}' title='{e(label)}'>{e(fmt(v))}</span>")
    return "".join(cells)


def test_table(vector: Sequence[float], labels: Sequence[str]) -> str:
    rows = "".join(f"<tr><td>{i}</td><td class='pid'>{e(labels[i] if i < len(labels) else '')}</td>"
                   f"<td>{e(fmt(v))}</td></tr>" for i, v in enumerate(vector))
    return f"<table class='tests'><tr><th>test</th><th>case</th><th>score</th></tr>{rows}</table>"


def heat_colour(v: float) -> str:
    """0 → red, 0.5 → yellow, 1 → green (scores outside [0, 1] are clipped)."""
    v = min(max(float(v), 0.0), 1.0)
    if v < 0.5:
        r, g = 234, int(120 + 216 * v)
    else:
        r, g = int(234 - 200 * (v - 0.5)), 228
    return f"#{r:02x}{g:02x}78"


def heatmap(rows: Iterable[tuple[str, str, Sequence[float]]], labels: Sequence[str], max_cols: int = 200) -> str:
    """Programs × tests: rows of (link href, row label, vector); hover a cell for its test and score."""
    rows = list(rows)
    d = max((len(v) for _, _, v in rows), default=0)
    cols = min(d, max_cols)
    head = "".join(f"<th title='{e(labels[j] if j < len(labels) else f'test {j}')}'>{j}</th>" for j in range(cols))
    body = []
    for href, label, vec in rows:
        cells = "".join(
            f"<td class='h' style='background:{heat_colour(vec[j])}' "
            f"title='{e(labels[j] if j < len(labels) else f'test {j}')}: {e(fmt(vec[j]))}'></td>"
            if j < len(vec) else "<td class='h'></td>" for j in range(cols))
        body.append(f"<tr><th><a href='{e(href)}'>{e(label)}</a></th>{cells}</tr>")
    more = f"<p class='note'>first {cols} of {d} tests</p>" if d > cols else ""
    return f"<table class='heat'><tr><th>program</th>{head}</tr>{''.join(body)}</table>{more}"


LINE_CHARS = 5000  # characters shown of one diff line


def diff_html(old: str, new: str, old_name: str, new_name: str, limit: int = 4000) -> str:
    """Unified diff of two programs, each line escaped and coloured by kind; bounded in time (``diffs``), in
    lines (``limit``) and in characters per line (``LINE_CHARS``), and it says when it was truncated."""
    lines, note = diffs.unified(old, new, old_name, new_name)
    if not lines:
        return "<p class='note'>identical to its parent</p>"
    out = []
    for line in lines[:limit]:
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")
        out.append(f"<span class='{cls}'>{field(line, LINE_CHARS) or ' '}</span>")
    more = f"<span>… diff truncated: {len(lines) - limit} more lines</span>" if len(lines) > limit else ""
    head = f"<p class='note' id='diff-note'>{e(note)}</p>" if note else ""
    return f"{head}<pre class='diff' id='diff'><code>{''.join(out)}{more}</code></pre>"


def script_tag(src: str) -> str:
    return f"<script src='{e(src)}' defer></script>"


def frame(title: str, body: str, nav: str = "", script: str = "") -> str:
    """A whole page: the shared style sheet, a nav bar, the body inside <main id='live'> (what the UI's live
    script swaps), and an optional same-origin script (the static report has none)."""
    tag = script_tag(script) if script else ""
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>"
            f"<style>{CSS}</style>{tag}</head>\n<body>{nav}<main id='live'>\n{body}\n</main></body></html>\n")
