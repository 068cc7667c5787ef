"""The user-facing error types of the lowest layer, and `VevoError`, the base of every user-facing error in vevo.

It lives here, in the layer every other one may import, so that an error raised anywhere (a malformed problem,
a bad config, a proposer that cannot start) reaches the CLI as one type: the CLI prints a `VevoError` as one
line and lets anything else show its traceback, because anything else is a bug.
"""
from __future__ import annotations

# no imports: the sandbox worker loads this module (through problems.values) and starts with nothing


class VevoError(Exception):
    """An error the user can act on; str() is one line that names what is wrong and where."""


class ProblemError(VevoError):
    """A malformed problem: str() is one line naming the file and the field."""

    def __init__(self, where: object, field_: str, msg: str):
        self.where, self.field, self.msg = str(where), field_, msg
        super().__init__(f"{where}: {field_}: {msg}" if field_ else f"{where}: {msg}")


class UnknownProblem(ProblemError, KeyError):
    """An id, suite or folder that names no problem (a KeyError too, for `registry.select` callers)."""

    def __init__(self, msg: str):
        self.where, self.field, self.msg = "", "", msg
        Exception.__init__(self, msg)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.msg
