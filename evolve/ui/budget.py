"""What one `vevo ui` request may cost: a size budget per response and per shown field, a time budget per render.

A run's archive holds untrusted text (a candidate's code, error output, stdout) and can be large, so no page may
grow or take without bound. Sizes: each shown field is cut at ``MAX_FIELD_CHARS`` with a "… (N more characters)"
note, and a page over ``MAX_PAGE_BYTES`` is cut at a row or tag boundary, its open tags closed, with a visible
"truncated" note. Time: a render runs on its own thread under a deadline (``RENDER_SECONDS``) that the work checks
cooperatively (every escaped string, every few thousand SQLite VM steps through a progress handler, so a long
query is interrupted); if the render is not back by the deadline (say a reader stuck on a lock), the request is
answered with a "took too long" page anyway, and the abandoned render stops at its next check. Work that fills a
cache is exempt (``unbounded``): it finishes in the background, so a second look is cheap.
"""
from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

MAX_PAGE_BYTES = 8 << 20    # one response's body
MAX_FIELD_CHARS = 100_000   # one shown field (code, error, evaluator output, completion text)
RENDER_SECONDS = 5.0        # one page's render
GRACE_SECONDS = 0.25        # how long past the deadline the handler waits for a render to notice it
PROGRESS_STEPS = 10_000     # SQLite VM steps between deadline checks

T = TypeVar("T")
_local = threading.local()


class TooSlow(Exception):
    """The render ran past its deadline."""


def expired() -> bool:
    end = getattr(_local, "deadline", None)
    return end is not None and time.monotonic() > end


def check() -> None:
    """Raise TooSlow when this thread's render is past its deadline (no deadline: never)."""
    if expired():
        raise TooSlow


def watch(archive: Any) -> None:
    """Interrupt the archive's queries made by a render past its deadline ("interrupted")."""
    archive.interrupt_when(expired, PROGRESS_STEPS)


@contextmanager
def unbounded() -> Iterator[None]:
    """Work whose result is cached (a run's curve fold, its proposers' numbers, the problem titles) runs to its
    end even past the deadline: the request is answered at the deadline anyway, and the next look finds the
    cache warm instead of starting over (an interrupted fold would never finish on a large archive)."""
    saved = getattr(_local, "deadline", None)
    _local.deadline = None
    try:
        yield
    finally:
        _local.deadline = saved


def within(fn: Callable[[], T], seconds: float = RENDER_SECONDS) -> T:
    """fn() on a thread of its own under a deadline of ``seconds``; TooSlow when it runs past it, whether it
    noticed (any error it raised after the deadline: an interrupted query) or is still not back."""
    end = time.monotonic() + seconds
    box: dict[str, object] = {}

    def work() -> None:
        _local.deadline = end
        try:
            box["out"] = fn()
        except BaseException as e:  # handed to the waiting request
            box["err"] = e

    t = threading.Thread(target=work, name="vevo-ui-render", daemon=True)
    t.start()
    t.join(max(0.0, end - time.monotonic()) + GRACE_SECONDS)
    if t.is_alive():
        raise TooSlow
    err = box.get("err")
    if err is not None:
        if isinstance(err, TooSlow) or time.monotonic() > end:
            raise TooSlow from err
        raise err  # type: ignore[misc]
    return box["out"]  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- sizes

def clip(text: str, limit: int = MAX_FIELD_CHARS) -> tuple[str, int]:
    """(the first ``limit`` characters, how many more there were)."""
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def mb(n: int) -> str:
    return f"{n / (1 << 20):.3g} MB"


_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)[^>]*?(/?)>")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_KEEP = ("html", "body", "main")  # closed after the note, so it lands inside the page's <main>


def cap_html(body: str, limit: int = MAX_PAGE_BYTES) -> str:
    """The page, or its first part (under ``limit`` bytes with the note) cut after the last table row or tag
    that fits, its open elements closed, and a note saying how much was left out."""
    raw = body.encode("utf-8")
    if len(raw) <= limit:
        return body
    head = raw[:max(0, limit - 4096)].decode("utf-8", "ignore")  # room for the closing tags and the note
    row = head.rfind("</tr>")
    cut = row + 5 if row > len(head) - 65536 and row >= 0 else head.rfind(">") + 1  # a row near the end, else a tag
    head = head[:cut]
    stack: list[str] = []
    for m in _TAG.finditer(head):
        closing, name, selfclose = m.group(1), m.group(2).lower(), m.group(3)
        if name in _VOID or selfclose:
            continue
        if not closing:
            stack.append(name)
        elif name in stack:
            while stack and stack.pop() != name:
                pass
    inner = [t for t in stack if t not in _KEEP]
    outer = [t for t in stack if t in _KEEP]
    shown = len(head.encode("utf-8"))
    note = (f"<p class='note' id='truncated'><b>truncated: this page is over {mb(limit)}; showing the first "
            f"{mb(shown)} of {mb(len(raw))}</b>. Try a narrower view: one run (<code>?run=NAME</code>), one problem "
            f"or a later page.</p>")
    return head + "".join(f"</{t}>" for t in reversed(inner)) + note + "".join(f"</{t}>" for t in reversed(outer))
