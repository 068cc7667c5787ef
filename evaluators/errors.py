"""Errors of the evaluation layer that reach the user as one line."""
from __future__ import annotations

from problems.errors import VevoError


class ExecutorError(VevoError):
    """An executor that cannot be started or has lost every place to run (one line for the CLI)."""
