"""Probe: run the program with `python` from PATH and read its answer (as circle packing's evaluator does)."""
import subprocess


def evaluate(program_path):
    r = subprocess.run(["python", program_path], capture_output=True, text=True, timeout=60)
    return {"combined_score": float(r.stdout.strip())}
