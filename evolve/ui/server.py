"""`vevo ui`: the HTTP server. Standard library only (`http.server.ThreadingHTTPServer`, server-sent events):
the app is a handful of GET routes over read-only SQLite, so a framework would add a dependency and a server
process model without removing any code, and every vevo machine already has what this needs.

Security: binds 127.0.0.1 unless told otherwise; on any other address a token is required on every request
(header ``X-Vevo-Token`` or ``Authorization: Bearer``, ``?token=``, or the cookie set after a good ``?token=``),
compared in constant time. Only GET/HEAD; run names and static files are looked up in fixed tables, so no
request names a path on disk. Pages send a Content-Security-Policy that allows only same-origin scripts.
"""
from __future__ import annotations

import hmac
import json
import secrets
import signal
import threading
import time
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from evaluators.netaddr import is_loopback_host

from . import budget, pages, routes
from .info import ProblemInfo, problem_info
from .store import RunStore, UIError

POLL_SECONDS = 0.5  # how often an events stream looks for new commits (two index lookups per run)
HEARTBEAT_SECONDS = 15.0
STATIC = {"live.js": "application/javascript; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
COOKIE = "vevo_token"


class NotFound(Exception):
    pass


class _Store(RunStore):
    """A run as the server reads it: what RunStore caches is computed to the end even past a render's deadline
    (`budget.unbounded`), so a large archive's first fold completes in the background and the next look is
    warm; its queries are interrupted once a render is past its deadline (`budget.watch`)."""

    def __init__(self, name: str, run_dir: str | Path):
        super().__init__(name, run_dir)
        budget.watch(self.archive)

    def curve_points(self) -> list[tuple[int, int, float, int, float, float]]:
        with budget.unbounded():
            return super().curve_points()

    def wall_clock(self) -> bool:
        with budget.unbounded():
            return super().wall_clock()

    def members(self) -> dict[str, dict[str, Any]]:
        with budget.unbounded():
            return super().members()


class App:
    """The runs being served and what is shared between requests (problem titles, computed once)."""

    def __init__(self, runs: dict[str, list[str | Path]], token: str | None = None,
                 max_bytes: int = budget.MAX_PAGE_BYTES, render_seconds: float = budget.RENDER_SECONDS):
        self.stores: dict[str, RunStore] = {}
        self.groups: dict[str, list[RunStore]] = {}
        for label, dirs in runs.items():
            for i, d in enumerate(dirs):
                name = label if len(dirs) == 1 else f"{label} #{i + 1}"
                if name in self.stores:
                    raise UIError(f"two runs are named {name!r}; name them apart with NAME=RUN")
                s = _Store(name, d)
                self.stores[name] = s
                self.groups.setdefault(label, []).append(s)
        if not self.stores:
            raise UIError("no runs given")
        self.token = token
        self.max_bytes = max_bytes
        self.render_seconds = render_seconds
        self._info: dict[str, ProblemInfo] | None = None
        self._info_lock = threading.Lock()
        self.stopping = threading.Event()
        # titles and test labels come from the problem registry (building a suite takes a moment): start now
        self._warm = threading.Thread(target=self.info, args=("",), daemon=True)
        self._warm.start()

    def info(self, pid: str) -> ProblemInfo:
        """Titles and test labels from the registry the runs were configured with, read once."""
        with self._info_lock, budget.unbounded():
            if self._info is None:
                self._info = problem_info([s.meta()["config"] for s in self.stores.values()])
        return self._info.get(pid, ProblemInfo())

    def versions(self) -> dict[str, str]:
        return {name: s.version() for name, s in self.stores.items()}

    def close(self) -> None:
        self._warm.join()  # it reads the runs' metadata: closing them under it crashed the interpreter
        for s in self.stores.values():
            s.close()

    # ---------------------------------------------------------------- routing
    def route(self, path: str, query: dict[str, list[str]]) -> tuple[str, str | bytes]:
        """(content type, body) for a GET, within the size budget (`budget.cap`: a page over it cut and said so);
        NotFound for anything not served."""
        ctype, body = self._route(path, query)
        return ctype, cap(ctype, body, self.max_bytes)

    def _route(self, path: str, query: dict[str, list[str]]) -> tuple[str, str | bytes]:
        key = routes.parse(path, query)
        if key is None:
            raise NotFound
        kind, stores = key[0], list(self.stores.values())
        if kind == "overview":
            return "text/html", pages.overview(stores, [s.overview() for s in stores])
        if kind == "runs_json":
            return "application/json", json.dumps([s.overview() for s in stores])
        if kind in ("curves", "compare"):
            names = query.get("run") or list(self.stores)
            groups = {label: [s for s in rs if s.name in names] for label, rs in self.groups.items()}
            groups = {k: v for k, v in groups.items() if v}
            if kind == "curves":
                return "text/html", pages.curves(stores, groups, key[1])
            return "text/html", pages.compare(stores, groups, key[1], self.info)
        if kind == "static":
            if key[1] not in STATIC:
                raise NotFound
            return STATIC[key[1]], resources.files(__package__).joinpath("static", key[1]).read_bytes()
        s = self.stores.get(key[1])
        if s is None:
            raise NotFound
        if kind == "run":
            return "text/html", pages.run_problems(stores, s, self.info)
        if kind == "training":
            return "text/html", pages.training(stores, s)
        if kind == "problem":
            if not s.has_problem(key[2]):
                raise NotFound
            return "text/html", pages.problem(stores, s, key[2], self.info)
        if kind == "lineage":
            if key[2] is not None and not s.has_problem(key[2]):
                raise NotFound
            return "text/html", pages.lineage(stores, s, key[2], key[3], key[4])
        if kind == "program":
            out = pages.program(stores, s, key[2], self.info)
            if out is None:
                raise NotFound
            return "text/html", out
        raise NotFound


def cap(ctype: str, body: str | bytes, limit: int) -> str | bytes:
    """A body within ``limit`` bytes: HTML cut at a safe boundary with its note (`budget.cap_html`); any other
    kind over it (the runs' JSON) is replaced by one line saying so, since half a JSON document is not one."""
    if ctype == "text/html" and isinstance(body, str):
        return budget.cap_html(body, limit)
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8"))
    if size <= limit:
        return body
    if ctype == "application/json":
        return json.dumps({"error": f"truncated: this response is over {budget.mb(limit)} ({budget.mb(size)})"})
    return f"truncated: this response is over {budget.mb(limit)} ({budget.mb(size)})\n"


def too_slow(path: str, seconds: float) -> str:
    """The page a render past its deadline is answered with: what happened and what to try."""
    body = (f"<h1>This page took too long</h1><p id='too-slow'>Rendering <code>{pages.e(path)}</code> ran past "
            f"its time budget of {seconds:g} s and was stopped, so the UI stays responsive for other pages.</p>"
            "<p>Try a narrower view: one run (<code>/curves?run=NAME</code>), one problem, a later lineage page; or "
            "reload in a moment (a run's curves are folded incrementally, so the next look reads less; a run whose "
            "archive another process holds locked is readable once it lets go).</p>")
    return pages.page("vevo ui: too slow", body, [])


def _host_name(host: str) -> str:
    """The name of a Host header without its port ('[::1]:80' -> '::1')."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def make_handler(app: App) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "vevo-ui"
        sys_version = ""
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the terminal shows the URL only
            pass

        def _authorised(self, query: dict[str, list[str]]) -> tuple[bool, bool]:
            """(allowed, came as ?token= so set the cookie)."""
            if app.token is None:
                return True, False
            want = app.token.encode()
            given = []
            h = self.headers.get("X-Vevo-Token")
            if h:
                given.append((h, False))
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Bearer "):
                given.append((auth[7:], False))
            if query.get("token"):
                given.append((query["token"][0], True))
            cookie = SimpleCookie()
            try:
                cookie.load(self.headers.get("Cookie", ""))
            except Exception:  # a malformed cookie header is just no cookie
                pass
            if COOKIE in cookie:
                given.append((cookie[COOKIE].value, False))
            for value, from_query in given:
                if hmac.compare_digest(value.encode("utf-8", "replace"), want):
                    return True, from_query
            return False, False

        def _send(self, status: int, ctype: str, body: bytes, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype if "charset" in ctype else f"{ctype}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Content-Security-Policy", CSP)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query, keep_blank_values=True)
            if app.token is None and not is_loopback_host(_host_name(self.headers.get("Host", ""))):
                # served without a token only to this machine: a page elsewhere that rebinds its DNS name to
                # 127.0.0.1 still sends its own name as Host, and is refused
                self._send(403, "text/plain", b"403: Host must be a loopback name without a token\n")
                return
            ok, set_cookie = self._authorised(query)
            if not ok:
                self._send(401, "text/plain", b"401: this vevo ui needs its token (?token=... or X-Vevo-Token)\n",
                           {"WWW-Authenticate": "Bearer"})
                return
            extra = {"Set-Cookie": f"{COOKIE}={app.token}; HttpOnly; SameSite=Strict; Path=/"} if set_cookie else {}
            if url.path == "/api/events":
                self._events(extra)
                return
            try:
                ctype, body = budget.within(lambda: app.route(url.path, query), app.render_seconds)
            except budget.TooSlow:
                self._send(503, "text/html", too_slow(url.path, app.render_seconds).encode(), extra)
                return
            except NotFound:
                self._send(404, "text/plain", b"404: not found\n", extra)
                return
            except UIError as e:
                self._send(503, "text/plain", f"503: {e}\n".encode(), extra)
                return
            self._send(200, ctype, body if isinstance(body, bytes) else body.encode("utf-8"), extra)

        def _events(self, extra: dict[str, str]) -> None:
            """Server-sent events: `version` (JSON of each run's version) now and whenever it changes."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            last, beat = None, time.monotonic()
            try:
                while not app.stopping.is_set():
                    now = json.dumps(app.versions(), sort_keys=True)
                    if now != last:
                        self.wfile.write(f"event: version\ndata: {now}\n\n".encode())
                        self.wfile.flush()
                        last, beat = now, time.monotonic()
                    elif time.monotonic() - beat > HEARTBEAT_SECONDS:
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                        beat = time.monotonic()
                    app.stopping.wait(POLL_SECONDS)
            except (BrokenPipeError, ConnectionResetError, UIError):
                pass
            self.close_connection = True

        def _refuse(self) -> None:
            self._send(405, "text/plain", b"405: read-only\n", {"Allow": "GET, HEAD"})

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # type: ignore[assignment]

    return Handler


class Server:
    """A running UI: `url` carries the token when there is one; `serve_forever` until `shutdown`."""

    def __init__(self, runs: dict[str, list[str | Path]], host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, max_bytes: int = budget.MAX_PAGE_BYTES,
                 render_seconds: float = budget.RENDER_SECONDS):
        if token is None and not is_loopback_host(host):
            token = secrets.token_urlsafe(24)
        try:  # the port first: a refused one opens no run (and starts no thread reading them)
            self.httpd = ThreadingHTTPServer((host, port), BaseHTTPRequestHandler)
        except OSError as e:
            raise UIError(f"cannot listen on {host}:{port}: {e.strerror}") from None
        try:
            self.app = App(runs, token, max_bytes, render_seconds)
        except BaseException:
            self.httpd.server_close()
            raise
        self.httpd.RequestHandlerClass = make_handler(self.app)
        self.httpd.daemon_threads = True
        h, p = self.httpd.server_address[:2]
        shown = f"[{h}]" if ":" in str(h) else h
        self.url = f"http://{shown}:{p}/" + (f"?token={token}" if token else "")

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        self.app.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.app.close()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def serve(runs: dict[str, list[str | Path]], host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          announce: Callable[[str], None] = print, max_bytes: int = budget.MAX_PAGE_BYTES,
          render_seconds: float = budget.RENDER_SECONDS) -> None:
    """Serve until interrupted; the URL (with its token) is announced first."""
    server = Server(runs, host, port, token, max_bytes, render_seconds)
    announce(server.url)
    if threading.current_thread() is threading.main_thread():  # `kill` stops it as cleanly as Ctrl-C
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
