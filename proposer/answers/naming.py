"""Showing a problem to a proposer under the function name it was trained on, and mapping its answers back.

The bundled tiny proposer was pretrained on prompts whose function is always ``f`` (``proposer/tiny/corpus.py``):
shown ``def solve(xs)`` it still writes ``def f(xs)``, and every candidate fails with "entry point 'solve' is not
defined". Retraining on varied names would cost a re-pretraining and still leave the model guessing names it
never saw; renaming is exact. So a backend that declares ``entry_name`` (the tiny one: ``"f"``) sees the parent,
inspirations, description, test labels and stderr with the entry point renamed to that name, and each answer,
applied to the renamed parent, is renamed back before it is hashed and evaluated.

Renaming is per identifier token (``tokenize``): strings, comments, attributes (``obj.solve``) and keyword
arguments (``g(solve=1)``) are left alone. It is only done when it is a bijection on the parent: the model's name
must not already occur in the parent (else `Renaming.make` returns None and the problem is shown as it is).
"""
from __future__ import annotations

import io
import keyword
import re
import tokenize
from dataclasses import dataclass, replace

from proposer.answers.prompting import PromptContext


def _sites(code: str, name: str) -> list[tuple[int, int]] | None:
    """(line index, column) of every identifier token ``name`` that is a variable (not an attribute or a
    keyword argument); None when the code does not tokenize."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError, ValueError):
        return None
    out = []
    sig = [t for t in toks if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                                             tokenize.DEDENT)]
    depth = 0
    for k, t in enumerate(sig):
        if t.type == tokenize.OP:
            depth += (t.string in "([{") - (t.string in ")]}")
        if t.type != tokenize.NAME or t.string != name:
            continue
        prev = sig[k - 1].string if k else ""
        nxt = sig[k + 1].string if k + 1 < len(sig) else ""
        if prev == ".":
            continue
        if depth > 0 and nxt == "=" and prev in ("(", ","):  # g(name=1): a keyword argument
            continue
        out.append((t.start[0] - 1, t.start[1]))
    return out


def rename_code(code: str, old: str, new: str) -> str:
    """``code`` with the identifier ``old`` renamed to ``new``; code that does not tokenize is renamed by a
    word-boundary match (it will fail to run anyway, and the model should see its own name in its error)."""
    sites = _sites(code, old)
    if sites is None:
        return rename_text(code, old, new)
    lines = code.splitlines(keepends=True)
    for row, col in sorted(sites, reverse=True):
        line = lines[row]
        lines[row] = line[:col] + new + line[col + len(old):]
    return "".join(lines)


def rename_text(text: str, old: str, new: str) -> str:
    """Prose and test labels (``solve([1, 2]) == 3``): whole-word matches not preceded by a dot."""
    return re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, text)


def mentions(code: str, name: str) -> bool:
    sites = _sites(code, name)
    return bool(sites) if sites is not None else re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", code) is not None


@dataclass(frozen=True)
class Renaming:
    """The problem's ``entry`` shown as the model's ``alias``."""

    entry: str
    alias: str

    @classmethod
    def make(cls, entry: str | None, alias: str | None, parent_code: str = "") -> "Renaming | None":
        """The renaming for a problem, or None when there is nothing to do or it would not be exact."""
        if not entry or not alias or entry == alias or not entry.isidentifier() or keyword.iskeyword(entry):
            return None
        if not alias.isidentifier() or mentions(parent_code, alias):
            return None
        return cls(entry, alias)

    def to_model(self, code: str) -> str:
        return rename_code(code, self.entry, self.alias)

    def to_model_text(self, text: str) -> str:
        return rename_text(text, self.entry, self.alias)

    def from_model(self, code: str) -> str:
        """An answer (applied to the renamed parent) in the problem's names. An answer that also uses the
        problem's own name is left as written (renaming would merge two names)."""
        if mentions(code, self.entry):
            return code
        return rename_code(code, self.alias, self.entry)


def present(ctx: PromptContext, ren: "Renaming | None") -> PromptContext:
    """The prompt context in the model's names (unchanged without a renaming)."""
    if ren is None:
        return ctx
    return replace(ctx, description=ren.to_model_text(ctx.description), parent_code=ren.to_model(ctx.parent_code),
                   test_labels=[ren.to_model_text(x) for x in ctx.test_labels],
                   parent_stderr=ren.to_model_text(ctx.parent_stderr),
                   inspirations=[(ren.to_model(c), v) for c, v in ctx.inspirations])


def entry_name(backend: object) -> str | None:
    """The function name a backend's model was trained to write (``Backend.entry_name``), or None."""
    name = getattr(backend, "entry_name", None)
    return name if isinstance(name, str) and name.isidentifier() else None
