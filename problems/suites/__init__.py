"""Built-in suites, generated (deterministically, offline) rather than stored.

* ``pbe``         programming by example: ``N_TRAIN`` train + ``N_HELDOUT`` held-out problems (``pbe.DEFAULT_SEED``)
* ``pbe-train``   the train part only
* ``pbe-heldout`` the held-out part only (shapes never used in train; see problems/suites/pbe.py)
* ``pbe-hard``    harder programming by example (3-4 step compositions, 14-18 tests, seeds two edits away):
                  ``N_HARD_TRAIN`` train + ``N_HARD_HELDOUT`` held-out; ``pbe-hard-train``, ``pbe-hard-heldout``
* ``pbe-study``   the decisive study's suite (issue #33): 12 hard held-out problems of ``pbe.STUDY_SEED``, never
                  used to choose a default, none solved by a program of the tiny proposer's corpus
                  (``proposer/tiny/leaks.py``; the screen: docs/results/decisive_study_plan.md)
* ``sr``          symbolic regression on the embedded classic formulas (Nguyen-1..12, Koza-1..3, Keijzer)
* ``sr-classic``  the full shared DSO table (268 rows) when ``shared/data/sr_classic`` exists, else ``sr``
"""
from __future__ import annotations

import logging
from typing import Callable

from ..model import Problem
from .pbe import (DEFAULT_SEED, N_HARD_HELDOUT, N_HARD_TRAIN, N_HELDOUT, N_TRAIN, fingerprint, generate_pbe,
                  heldout_signatures, is_heldout_equivalent, pbe_hard_suite, pbe_study_suite, pbe_suite,
                  pbe_targets)
from .sr import find_shared, generate_sr, sr_from_shared

log = logging.getLogger(__name__)


def _sr_classic() -> list[Problem]:
    if find_shared() is None:
        log.warning("sr-classic: shared/data/sr_classic not found; using the embedded formulas (suite sr)")
        return generate_sr()
    return sr_from_shared()


SUITES: dict[str, Callable[[], list[Problem]]] = {
    "pbe": lambda: pbe_suite(),
    "pbe-train": lambda: generate_pbe(N_TRAIN, DEFAULT_SEED, "train"),
    "pbe-heldout": lambda: generate_pbe(N_HELDOUT, DEFAULT_SEED, "heldout"),
    "pbe-hard": lambda: pbe_hard_suite(),
    "pbe-hard-train": lambda: generate_pbe(N_HARD_TRAIN, DEFAULT_SEED, "train", "hard"),
    "pbe-hard-heldout": lambda: generate_pbe(N_HARD_HELDOUT, DEFAULT_SEED, "heldout", "hard"),
    "pbe-study": lambda: pbe_study_suite(),
    "sr": lambda: generate_sr(),
    "sr-classic": _sr_classic,
}


def builtin_problems() -> list[Problem]:
    """The problems every registry starts with: pbe (train + held-out) and sr."""
    return SUITES["pbe"]() + SUITES["sr"]()


__all__ = ["SUITES", "builtin_problems", "generate_pbe", "generate_sr", "sr_from_shared", "pbe_targets",
           "heldout_signatures", "is_heldout_equivalent", "fingerprint", "pbe_suite", "pbe_hard_suite"]
