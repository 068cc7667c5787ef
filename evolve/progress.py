"""What a long command tells a person and a log while it runs: phases, progress over iterations (steps,
problems), and one-off events such as a training step.

One `Reporter` per command, three outputs chosen once:

* on a terminal (stderr is a tty): a rich bar with a spinner whose description is the current phase
  ("loading proposer tiny", "training step 3"), so a slow phase never looks frozen;
* off a terminal (nohup, ``2> log``, a cluster job): a plain line per phase and event, and a status line
  every ``every`` seconds (the first and the last always), flushed at once so ``tail -f`` shows it;
* ``--log-json FILE``: every record (phase, update, event) as one JSON object per line, whatever the above.

``quiet`` silences the first two, never the JSON log. Progress goes to stderr: stdout stays the command's result
(`vevo train` prints one JSON object per step there).
"""
from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

DEFAULT_EVERY = 10.0  # seconds between status lines off a terminal
PHASE_DELAY = 1.0     # off a terminal a phase gets its line once it has lasted this long: quick ones (and a
                      # command that fails at once, whose error must stay one line) print nothing
RATE_WINDOW = 30.0    # seconds of history behind an "x/s" rate


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)


def _clean(text: object) -> str:
    """One line, without control characters (phases can carry problem ids or error text)."""
    return "".join(c if c.isprintable() else " " for c in str(text).replace("\n", " "))


def format_fields(fields: dict[str, Any]) -> str:
    """``solved 1/5  best 0.412  evals/s 8.3``: the fields of a record as people read them (None left out)."""
    return "  ".join(f"{k.replace('_per_s', '/s').replace('_', ' ')} {_fmt(v)}" for k, v in fields.items()
                     if v is not None)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Rate:
    """Events per second over the last `window` seconds (since the start while younger than that)."""

    def __init__(self, count: float = 0.0, window: float = RATE_WINDOW, now: float | None = None):
        self.window = window
        self.points: deque[tuple[float, float]] = deque([(time.monotonic() if now is None else now, count)])

    def add(self, count: float, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.points.append((now, count))
        while len(self.points) > 2 and now - self.points[1][0] >= self.window:
            self.points.popleft()
        t0, c0 = self.points[0]
        return (count - c0) / (now - t0) if now > t0 else 0.0


class Reporter:
    """Progress of one command; safe to call from several threads. ``mode``: auto (rich on a terminal, plain
    otherwise), rich, plain or quiet."""

    def __init__(self, *, mode: str = "auto", stream: IO[str] | None = None, every: float = DEFAULT_EVERY,
                 json_path: str | Path | None = None, name: str = "vevo", phase_delay: float = PHASE_DELAY):
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            mode = "rich" if _isatty(self.stream) else "plain"
        if mode not in ("rich", "plain", "quiet"):
            raise ValueError(f"unknown progress mode {mode!r}")
        self.mode, self.every, self.name = mode, max(0.0, float(every)), name
        self.phase_delay = phase_delay
        self._timer: threading.Timer | None = None
        self._phase_no = 0
        self.t0 = time.monotonic()
        self.lock = threading.RLock()
        self.json: IO[str] | None = None
        if json_path is not None:
            Path(json_path).parent.mkdir(parents=True, exist_ok=True)
            self.json = open(json_path, "a", encoding="utf-8")
        self.context: dict[str, Any] = {}  # fields every record carries (the seed of a seeds run)
        self.prefix = ""  # said before every phase and line ("seed 3 (4/5): ")
        self.phase_text = "starting"
        self.total: int | None = None
        self.unit = "iteration"
        self.done = 0
        self.info = ""
        self._unsaid: str | None = None  # the newest status line, when it was not printed
        self._last_line = -math.inf
        self._bar = self._task = None
        if mode == "rich":
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn)

            self._bar = Progress(SpinnerColumn(), TextColumn(f"[bold]{name}[/] {{task.description}}"), BarColumn(bar_width=24),
                                 MofNCompleteColumn(), TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                 console=Console(file=self.stream), transient=False,
                                 # stdout on the same terminal is printed above the bar; stdout elsewhere (a
                                 # file, a pipe: train's JSON lines) is left alone
                                 redirect_stdout=_isatty(sys.stdout), redirect_stderr=True)
            self._bar.start()
            self._task = self._bar.add_task("starting", total=None, info="")

    @classmethod
    def quiet(cls) -> "Reporter":
        return cls(mode="quiet")

    # ------------------------------------------------------------------ records
    def _record(self, event: str, **fields: Any) -> None:
        if self.json is None:
            return
        rec = {"event": event, "t": round(time.monotonic() - self.t0, 3), **self.context, **fields}
        self.json.write(json.dumps(rec, default=str) + "\n")
        self.json.flush()

    def _line(self, text: str) -> None:
        if self.mode == "plain":
            elapsed = time.monotonic() - self.t0
            self.stream.write(f"{self.name} [{elapsed:6.0f}s] {self.prefix}{text}\n")
            self.stream.flush()
        elif self.mode == "rich" and self._bar is not None:
            from rich.markup import escape

            self._bar.console.print(escape(self.prefix + text), highlight=False)

    def _refresh(self) -> None:
        if self._bar is None:
            return
        from rich.markup import escape

        self._bar.update(self._task, description=escape(self.prefix + self.phase_text), total=self.total,
                         completed=self.done, info=escape(self.info))

    # ------------------------------------------------------------------ the API
    def phase(self, text: str, *, announce: bool | None = None, log: bool = True, **fields: Any) -> None:
        """What the command does now (loading, evaluating seed programs, training step k); on a terminal at
        once. Off a terminal a phase gets a line of its own before counting begins, or with ``announce``
        (a long phase inside the loop); the loop's routine phases show in its status lines, and with
        ``log=False`` (one per iteration) they stay out of the JSON log too."""
        with self.lock:
            self.phase_text = _clean(text)
            self._phase_no += 1
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if log:
                self._record("phase", phase=self.phase_text, **fields)
            if self.mode == "rich":
                self._refresh()
            elif self.mode == "plain" and (announce or (announce is None and self.total is None)):
                if self.phase_delay <= 0:
                    self._line(self.phase_text)
                else:
                    self._timer = threading.Timer(self.phase_delay, self._phase_line, (self._phase_no,))
                    self._timer.daemon = True
                    self._timer.start()

    def _phase_line(self, no: int) -> None:
        with self.lock:
            if no == self._phase_no and self.mode == "plain" and self.stream is not None:
                self._line(self.phase_text)

    def begin(self, total: int, done: int = 0, unit: str = "iteration") -> None:
        """Count `unit`s up to `total` from here on."""
        with self.lock:
            self.total, self.done, self.unit = int(total), max(int(done), 0), unit
            self._record("begin", total=self.total, done=self.done, unit=unit)
            self._refresh()

    def update(self, done: int, **fields: Any) -> None:
        """`done` units so far, with the fields people want beside the count (solved, best, evals/s)."""
        with self.lock:
            first = self._last_line == -math.inf
            self.done = int(done)
            self._record("update", unit=self.unit, done=self.done, total=self.total, **fields)
            self.info = format_fields(fields)
            if self.mode == "rich":
                self._refresh()
                return
            now = time.monotonic()
            last = self.total is not None and self.done >= self.total
            count = f"{self.unit} {self.done}" + (f"/{self.total}" if self.total is not None else "")
            self._unsaid = f"{count}  {self.info}".rstrip()
            if first or last or now - self._last_line >= self.every:
                self._last_line = now
                self._line(self._unsaid)
                self._unsaid = None

    def end(self) -> None:
        """Counting is over (the loop may stop before its total): off a terminal the last status is said."""
        with self.lock:
            if self._unsaid is not None:
                self._line(self._unsaid)
            self.phase_text = "done"
            self._refresh()
            self._unsaid, self.total, self._last_line = None, None, -math.inf
            self._record("end", done=self.done)

    def event(self, text: str, kind: str = "event", data: dict[str, Any] | None = None, **fields: Any) -> None:
        """A one-off worth a line of its own (a training step done): always printed with `fields`, and
        recorded with `fields` and `data` (what only the JSON log needs)."""
        with self.lock:
            self._record(kind, **{**(data or {}), **fields})
            self._line(_clean(text) + (f"  {format_fields(fields)}" if fields else ""))

    def summary(self, text: str, **fields: Any) -> None:
        """The end of the command: the JSON log gets the record; the person reads the command's own output."""
        with self.lock:
            self._record("summary", text=_clean(text), **fields)

    def close(self) -> None:
        with self.lock:
            self._phase_no += 1  # a phase line not said yet never will be
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._bar is not None:
                self._refresh()
                self._bar.stop()
                self._bar = None
            if self.json is not None:
                self.json.close()
                self.json = None

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def as_reporter(progress: "bool | Reporter | None") -> Reporter:
    """Callers that predate the reporter pass a bool: True is the automatic mode, False quiet."""
    if isinstance(progress, Reporter):
        return progress
    return Reporter() if progress else Reporter.quiet()


TRAINING_FIELDS = ("mean_set_reward", "loss", "kl", "probe_own", "probe_heldout")  # the JSON log gets every stat


def training_fields(stats: dict[str, Any]) -> dict[str, Any]:
    """The few numbers of a training step people watch (reward, loss, KL), rounded; the JSON log gets all."""
    return {k: round(float(stats[k]), 4) for k in TRAINING_FIELDS
            if isinstance(stats.get(k), (int, float)) and not isinstance(stats.get(k), bool)}
