"""Probe: an evaluator that needs 1.5 GB (the sandbox's old 1 GB cap made this `memory`)."""
import numpy as np


def evaluate(program_path):
    a = np.ones(int(1.5 * (1 << 30)) // 8)
    gb = a.nbytes / (1 << 30)
    del a
    return {"combined_score": 1.0, "gigabytes": gb}
