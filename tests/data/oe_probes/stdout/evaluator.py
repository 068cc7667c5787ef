"""Probe: an evaluator that prints 2 MB of progress (the old output cap was 1 MB, and the metrics were lost)."""
import sys


def evaluate(program_path):
    line = "x" * 1023 + "\n"
    for _ in range(2048):
        sys.stdout.write(line)
    sys.stdout.flush()
    return {"combined_score": 1.0, "printed_mb": 2048 * 1024 / (1 << 20)}
