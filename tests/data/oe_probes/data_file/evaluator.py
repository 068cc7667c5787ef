"""Probe: a data file over 16 MB next to the evaluator (the test writes table.bin; it used to be left behind)."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def evaluate(program_path):
    path = os.path.join(HERE, "table.bin")
    with open(path, "rb") as f:
        n = sum(len(c) for c in iter(lambda: f.read(1 << 20), b""))
    try:
        with open(path, "ab"):
            writable = True
    except OSError:
        writable = False
    return {"combined_score": 1.0, "megabytes": n / (1 << 20), "writable": writable}
