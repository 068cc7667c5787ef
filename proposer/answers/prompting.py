"""The mutation prompt: what a proposer sees about a parent, and what a perfect completion looks like.

Two styles: ``compact`` (default; terse section headers so a ~10M-parameter model with a 1024-token context can
see the whole thing -- it is trained on exactly this layout via ``completion_target``) and ``chat`` (fuller
English for instruct LLMs). Both end with ``\\n<answer_1>`` (with ``reasoning=True``: ``\\n<reasoning>``, a
short reasoning section closed by ``</reasoning>`` comes before the answers; ``proposer/answers/parsing.py`` drops it)
and no trailing newline: byte-level BPE merges a newline with the indentation after it, so a prompt ending in
"\\n" ends on a token the model never saw there.

Length is bounded by ``max_chars`` deterministically: sections are shrunk in a fixed order (inspirations from
the last, stderr, description, parent code, failing-test list) and, as a last resort, the head of the prompt
is cut so the ending always survives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from problems.evolve_block import END, START, evolve_block
from proposer.answers.parsing import fence_code, format_answers

PASS = 1.0 - 1e-9  # a test passes when its score is (numerically) 1
_LABEL_CHARS = 120
_DESC_CHARS = 1500
_STDERR_CHARS = 500
_INSPIRATION_CHARS = 1200
_INSPIRATION_LABELS = 3
_METRICS_CHARS = 800
_FEEDBACK_CHARS = 1500
_CUT = "\n# ... (truncated)"
_CUT_TAIL = "...\n"


@dataclass
class PromptContext:
    """Everything the prompt may say about one parent. ``parent_vector[i]`` is the score of the test described
    by ``test_labels[i]`` (e.g. "f(2, 3) == 5"); inspirations are (code, vector) of other programs."""

    problem_id: str
    description: str
    parent_code: str
    parent_vector: list[float]
    test_labels: list[str]
    parent_stderr: str = ""
    inspirations: list[tuple[str, list[float]]] = field(default_factory=list)
    m: int = 4
    mode: Literal["full", "diff"] = "full"
    # Evaluators that report named metrics (OpenEvolve): the parent's metrics by name (shown instead of a
    # test count), the evaluator's artifacts for it, and the inspirations' scores.
    metrics: dict[str, float | bool] | None = None
    feedback: dict[str, str] = field(default_factory=dict)
    inspiration_scores: list[float] = field(default_factory=list)


@dataclass
class _Part:
    """A prompt section: head + shown(content) + tail; shrinkable down to ``floor`` chars, then maybe dropped."""

    head: str
    content: str
    tail: str = "\n"
    keep: Literal["head", "tail"] = "head"
    floor: int = 0
    droppable: bool = False
    limit: int | None = None
    dropped: bool = False

    def shown(self) -> str:
        c = self.content
        if self.limit is None or len(c) <= self.limit:
            return c
        if self.keep == "tail":  # whole lines where possible: a half line is noise to a small model
            k = max(self.limit - len(_CUT_TAIL), 0)
            piece = c[len(c) - k :] if k else ""
            nl = piece.find("\n")
            return _CUT_TAIL + (piece[nl + 1 :] if 0 <= nl < len(piece) - 1 else piece) if k else ""
        k = max(self.limit - len(_CUT), 0)
        piece = c[:k]
        nl = piece.rfind("\n")
        return (piece[:nl] if nl > 0 else piece) + _CUT if k else ""

    def render(self) -> str:
        return "" if self.dropped else self.head + self.shown() + self.tail


def _editable(code: str) -> tuple[str, bool]:
    block = evolve_block(code)
    return (code, False) if block is None else (block.rstrip("\n"), True)


def _label(labels: list[str], i: int) -> str:
    text = " ".join(labels[i].split()) if i < len(labels) else f"test {i + 1}"
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 3] + "..."


def _failing(vector: list[float]) -> list[int]:
    return [i for i, v in enumerate(vector) if not v >= PASS]  # NaN counts as failing


def _extra_passes(parent: list[float], other: list[float]) -> list[int]:
    return [i for i in range(min(len(parent), len(other))) if other[i] >= PASS and not parent[i] >= PASS]


def _fail_lines(ctx: PromptContext, max_failing: int, bullet: str) -> str:
    fails = _failing(ctx.parent_vector)
    out = []
    for i in fails[: max(max_failing, 0)]:
        v = ctx.parent_vector[i]
        score = f" (score {v:.2f})" if 0.0 < v < PASS else ""
        out.append(f"{bullet}{_label(ctx.test_labels, i)}{score}")
    if len(fails) > max_failing:
        out.append(f"{bullet}... {len(fails) - max(max_failing, 0)} more failing")
    return "".join(line + "\n" for line in out)


_COMPACT_TASK = {"full": "<answer_i>```python code```</answer_i>", "diff": "<answer_i>SEARCH/REPLACE blocks</answer_i>"}

_CHAT_FORMAT = {
    "full": "Each answer contains the complete new code of the {what} in one ```python fenced block.",
    "diff": (
        "Each answer contains one or more SEARCH/REPLACE blocks that edit the {what}:\n"
        "<<<<<<< SEARCH\nexact lines copied from the current program\n=======\nthe new lines\n>>>>>>> REPLACE\n"
        "The SEARCH lines must match the current program exactly."
    ),
}


def _code_part(head: str, code: str, **kw) -> _Part:
    """A fenced code section; the fences live in head/tail so truncating the code never leaves one open."""
    opening = fence_code(code).split("\n", 1)[0]
    fence = opening[: len(opening) - len("python")]
    return _Part(head + opening + "\n", code.rstrip(), tail=f"\n{fence}\n", **kw)


def _metric_value(v) -> str:
    return str(v) if isinstance(v, bool) or not isinstance(v, (int, float)) else f"{v:.6g}"


def _metric_parts(ctx: PromptContext, chat: bool) -> list[_Part]:
    """Named metrics (replacing the test section) and the evaluator's feedback (shrinks like stderr)."""
    assert ctx.metrics is not None
    lines = "\n".join(f"{k}: {_metric_value(v)}" for k, v in ctx.metrics.items())
    head = "\n## Metrics (higher score is better)\n" if chat else "### Metrics:\n"
    parts = [_Part(head, lines, limit=_METRICS_CHARS, floor=60)]
    if ctx.feedback:
        text = "\n".join(f"{k}: {v}" for k, v in ctx.feedback.items())
        head = "\n## Evaluator feedback on this program\n" if chat else "### Evaluator feedback:\n"
        parts.append(_Part(head, text, keep="tail", limit=_FEEDBACK_CHARS, floor=100, droppable=True))
    return parts


def _parts(ctx: PromptContext, max_failing: int, style: str) -> list[_Part]:
    """Sections in prompt order: task, parent, tests (or metrics), [stderr or feedback], inspirations..."""
    code, in_block = _editable(ctx.parent_code)
    n = len(ctx.parent_vector)
    passed = n - len(_failing(ctx.parent_vector))
    chat = style == "chat"
    fails = _fail_lines(ctx, max_failing, "- " if chat else "FAIL ")
    if chat:
        task = f"## Task: {ctx.problem_id}\n"
        program = "\n## Current program\n" + (
            f"Only the region between {START} and {END} is shown; it is the only part you may "
            "change.\n" if in_block else "The whole program is shown.\n")
        tests = f"\n## Test results\nIt passes {passed} of {n} tests." + (" Failing tests:\n" if fails else "\n")
        stderr = "\n## Error output (last lines)\n"
    else:
        task = f"### Task: {ctx.problem_id}\n"
        program = f"### Program ({'EVOLVE-BLOCK only, the rest is fixed' if in_block else 'whole file'}):\n"
        tests = f"### Tests: {passed}/{n} pass\n"
        stderr = "### stderr (tail):\n"
    parts = [
        _Part(task, ctx.description.strip(), limit=_DESC_CHARS, floor=100),
        _code_part(program, code),
    ]
    if ctx.metrics is not None:
        parts += _metric_parts(ctx, chat)
        for j, icode in enumerate(c for c, _ in ctx.inspirations):
            sc = ctx.inspiration_scores[j] if j < len(ctx.inspiration_scores) else None
            tag = f" (score {sc:.6g})" if sc is not None else ""
            head = f"\n## Inspiration {j + 1}{tag}\n" if chat else f"### Inspiration {j + 1}{tag}:\n"
            parts.append(_code_part(head, _editable(icode)[0], limit=_INSPIRATION_CHARS, floor=200, droppable=True))
        return parts
    parts.append(_Part(tests, fails.rstrip("\n"), tail="\n" if fails else ""))
    if ctx.parent_stderr.strip():
        parts.append(_Part(stderr, ctx.parent_stderr.strip(), keep="tail", limit=_STDERR_CHARS, floor=100,
                           droppable=True))
    for j, (icode, ivec) in enumerate(ctx.inspirations, 1):
        extra = _extra_passes(ctx.parent_vector, ivec)
        names = ", ".join(_label(ctx.test_labels, i) for i in extra[:_INSPIRATION_LABELS])
        if len(extra) > _INSPIRATION_LABELS:
            names += f", +{len(extra) - _INSPIRATION_LABELS} more"
        if chat:
            head = (f"\n## Inspiration {j}\nThis program passes tests the current program fails: {names}\n"
                    if extra else f"\n## Inspiration {j}\nAnother program (passes no extra tests).\n")
        else:
            head = f"### Inspiration {j}, passes: {names}\n" if extra else f"### Inspiration {j}:\n"
        parts.append(_code_part(head, _editable(icode)[0], limit=_INSPIRATION_CHARS, floor=200, droppable=True))
    return parts


def _ending(ctx: PromptContext, in_block: bool, style: str) -> str:
    m = max(int(ctx.m), 1)
    what = "EVOLVE-BLOCK region" if in_block else "program"
    if style == "compact":
        return f"### Write {m} different improved versions, each as {_COMPACT_TASK[ctx.mode]}\n<answer_1>"
    return (
        f"\n## Instructions\nWrite {m} DIFFERENT improved versions of the {what} that pass more tests. "
        "Make them genuinely different (different algorithms or different fixes), so that together they cover "
        f"as many tests as possible. Put answer i between <answer_i> and </answer_i>, for i = 1..{m}. "
        + _CHAT_FORMAT[ctx.mode].format(what=what)
        + "\n<answer_1>"
    )


def build_prompt(ctx: PromptContext, max_failing: int = 4, max_chars: int = 6000,
                 style: Literal["compact", "chat"] = "compact", reasoning: bool = False) -> str:
    """The mutation prompt for ``ctx``: at most ``max_chars`` characters, ending in ``\\n<answer_1>``
    (``\\n<reasoning>`` with ``reasoning``: the proposer reasons briefly before its answers)."""
    if style not in ("compact", "chat"):
        raise ValueError(f"build_prompt: style must be 'compact' or 'chat', got {style!r}")
    if ctx.mode not in ("full", "diff"):
        raise ValueError(f"build_prompt: mode must be 'full' or 'diff', got {ctx.mode!r}")
    parts = _parts(ctx, max_failing, style)
    ending = _ending(ctx, _editable(ctx.parent_code)[1], style)
    if reasoning:
        ask = "" if style == "compact" else "First reason briefly between <reasoning> and </reasoning>.\n"
        ending = ending[: len(ending) - len("<answer_1>")] + ask + "<reasoning>"

    def total() -> int:
        return sum(len(p.render()) for p in parts) + len(ending)

    stderr = [p for p in parts[3:] if p.keep == "tail"]
    inspirations = [p for p in parts[3:] if p.keep == "head"]
    task, parent, tests = parts[0], parts[1], parts[2]  # tests: the metrics section for named metrics
    order = inspirations[::-1] + stderr + [task, parent, tests]
    for part in order:
        over = total() - max_chars
        if over <= 0:
            break
        want = len(part.shown()) - over
        if want >= part.floor:
            part.limit = want
        elif part.droppable:
            part.dropped = True
        else:
            part.limit = part.floor
    if total() > max_chars:  # floors still too big: description then everything but the ending goes
        task.limit = 0
    text = "".join(p.render() for p in parts) + ending
    return text[len(text) - max_chars :] if len(text) > max_chars else text


def completion_target(bodies: list[str], kind: Literal["code", "diff"] = "code") -> str:
    """What a perfect completion contains after the prompt (which ends in ``<answer_1>``):
    ``parse_answers("<answer_1>" + completion_target(bodies), len(bodies))`` gives the bodies back."""
    if not bodies:
        raise ValueError("completion_target: need at least one body")
    return format_answers(bodies, kind)[len("<answer_1>") :]
