"""The UI's pages written as static files: what `vevo report` publishes. Each page is rendered by the same
route and page function as in `vevo ui` (`App.route`, evolve/ui/pages.py), then its links are turned into the
names of the files written next to it, as `wget --convert-links` does with a mirrored site. A link to a page that
is not written (a lineage page, a program that is neither a best program nor a first solve) becomes plain text;
the live script and the nav's live marker are left out, so the files work offline, with no server and no script.
"""
from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from . import pages, routes
from .components import script_tag
from .server import App, NotFound

Key = tuple  # a page as ("compare",), ("curves", x), ("run", name), ("problem", name, pid), ...
_LINK = re.compile(r" href='([^']*)'")  # every href is written by the page functions through e(): no raw quote


def page_key(url: str) -> Key | None:
    """The file-plan key of a page a UI link points at (routes.parse_url; the overview and the comparison are
    both index.html, the comparison page); None for anything that is not a page (static files)."""
    key = routes.parse_url(url)
    if key is None or key[0] in ("static", "runs_json"):
        return None
    if key[0] in ("overview", "compare"):
        return ("compare",)
    if key[0] == "lineage":
        return ("lineage", key[1])
    return key


def plan(app: App) -> dict[Key, str]:
    """The pages written and their file names: the comparison (index.html), the curves on every axis, and per
    run its problems, training, each problem's page, and the program pages of each problem's best program and
    first solve and of their parents (so their diffs can be followed one step back). Files are numbered, never named after a run or a problem (untrusted text)."""
    out: dict[Key, str] = {("compare",): "index.html"}
    out.update({("curves", x): f"curves-{x}.html" for x in pages.AXES})
    for i, s in enumerate(app.stores.values()):
        out[("run", s.name)] = f"run-{i}.html"
        out[("training", s.name)] = f"run-{i}-training.html"
        for j, p in enumerate(s.problems()):
            out[("problem", s.name, p["problem"])] = f"run-{i}-problem-{j}.html"
            best = s.best_program(p["problem"])
            for pid in (best.id if best else None, (p["solve"] or {}).get("program_id")):
                prog = s.program(int(pid)) if pid is not None else None
                for k in ([prog.id] + prog.parent_ids[:1]) if prog else []:
                    out[("program", s.name, int(k))] = f"run-{i}-program-{int(k)}.html"
    return out


def convert(text: str, files: dict[Key, str], note: str) -> str:
    """A page rendered for the server made static: links to written pages become their file names, other
    links plain text, and the live script and marker are dropped (`note` takes the marker's place)."""
    def link(m: re.Match) -> str:
        name = files.get(page_key(html.unescape(m.group(1))))  # type: ignore[arg-type]
        return f" href='{html.escape(name, quote=True)}'" if name else ""
    text = text.replace(script_tag(pages.LIVE_SCRIPT), "").replace(pages.LIVE_STATE, note)
    return _LINK.sub(link, text)


def render_key(app: App, key: Key) -> str:
    """One page exactly as `vevo ui` serves it (its URL from routes.url, then `App.route`)."""
    if key[0] == "compare":
        raise NotFound(key)  # index.html: rendered by freeze's `index`
    u = urlsplit(routes.url(key))
    return _route(app, u.path, parse_qs(u.query, keep_blank_values=True))


def _route(app: App, path: str, query: dict[str, list[str]]) -> str:
    body = app.route(path, query)[1]
    return body if isinstance(body, str) else body.decode("utf-8")


def freeze(runs: dict[str, list[str | Path]], out_dir: str | Path, x: str = "iterations",
           index: Callable[[App], str] | None = None, note: str = "static report") -> list[Path]:
    """Write the planned pages of these runs into out_dir; `index(app)` renders index.html (default: the UI's
    compare page). Returns the files written, index.html first."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    app = App(runs)
    try:
        files = plan(app)
        marker = f"<span class='live'>{html.escape(note)}</span>"
        written = []
        for key, name in files.items():
            if key == ("compare",):
                text = index(app) if index is not None else _route(app, "/compare", {"x": [x]})
            else:
                text = render_key(app, key)
            path = out / name
            path.write_text(convert(text, files, marker), encoding="utf-8")
            written.append(path)
        return written
    finally:
        app.close()
