"""The UI's URL grammar, once: a request path and query → a page key, and a page key → its URL. `vevo ui`
(server.py) dispatches on the key, `vevo report` (freeze.py) plans files by it and turns links into file names
with it, so the two cannot disagree about which URL is which page. Adding a page: a function in pages.py, its
key here (``parse`` and ``url``), its dispatch in `App._route` and, if the static report should hold it, a
file name in `freeze.plan`.

Keys (tuples, hashable): ("overview",), ("runs_json",), ("static", file), ("curves", x), ("compare", x),
("run", name), ("training", name), ("problem", name, id), ("lineage", name, problem or None, island, page),
("program", name, id). ``parse`` checks only the grammar (an axis that exists, numbers that are numbers); whether
the run, problem or program exists is the server's question."""
from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from .charts import quote_seg
from .pages import AXES

Key = tuple


def _one(query: dict[str, list[str]], key: str, default: str | None = None) -> str | None:
    vals = query.get(key)
    return vals[0] if vals else default


def _int(query: dict[str, list[str]], key: str, default: int) -> int | None:
    """A small non-negative-or-negative integer parameter; None when it is not one (the page does not exist)."""
    v = _one(query, key)
    if v is None or v == "":
        return default
    if not (v.isascii() and v.lstrip("-").isdigit()) or len(v) > 9:
        return None
    return int(v)


def parse(path: str, query: dict[str, list[str]]) -> Key | None:
    """The page a GET asks for, or None for a URL the UI does not serve."""
    parts = [unquote(p) for p in path.split("/")[1:]]
    if parts in ([""], []):
        return ("overview",)
    if parts == ["api", "runs"]:
        return ("runs_json",)
    if parts in (["curves"], ["compare"]):
        x = _one(query, "x", "iterations")
        return (parts[0], x) if x in AXES else None
    if len(parts) == 2 and parts[0] == "static":
        return ("static", parts[1])
    if len(parts) < 2 or parts[0] != "run":
        return None
    name, rest = parts[1], parts[2:]
    if rest in ([], [""]):
        return ("run", name)
    if rest == ["training"]:
        return ("training", name)
    if rest == ["problem"]:
        pid = _one(query, "id")
        return None if pid is None else ("problem", name, pid)
    if rest == ["lineage"]:
        island, page = _int(query, "island", 0), _int(query, "page", 0)
        return None if island is None or page is None else ("lineage", name, _one(query, "problem"), island, page)
    if len(rest) == 2 and rest[0] == "program" and rest[1].isdigit() and rest[1].isascii():
        return ("program", name, int(rest[1]))
    return None


def parse_url(url: str) -> Key | None:
    """``parse`` of a whole link (path and query string), as the pages write them."""
    u = urlsplit(url)
    return parse(u.path, parse_qs(u.query, keep_blank_values=True))


def url(key: Key) -> str:
    """The URL of a page key (``parse_url(url(k)) == k`` for every key ``parse`` returns)."""
    kind = key[0]
    fixed = {"overview": "/", "runs_json": "/api/runs"}
    if kind in fixed:
        return fixed[kind]
    if kind == "static":
        return f"/static/{quote_seg(key[1])}"
    if kind in ("curves", "compare"):
        return f"/{kind}?x={key[1]}"
    run = f"/run/{quote_seg(key[1])}"
    if kind == "run":
        return run
    if kind == "training":
        return f"{run}/training"
    if kind == "problem":
        return f"{run}/problem?{urlencode({'id': key[2]})}"
    if kind == "lineage":
        q = ({"problem": key[2]} if key[2] is not None else {}) | {"island": key[3], "page": key[4]}
        return f"{run}/lineage?{urlencode(q)}"
    if kind == "program":
        return f"{run}/program/{key[2]}"
    raise ValueError(f"not a page key: {key!r}")
