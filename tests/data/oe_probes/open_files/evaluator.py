"""Probe: 100 files open at once (the old limit was 64)."""
import os
import tempfile


def evaluate(program_path):
    d = tempfile.mkdtemp()
    files = []
    try:
        for i in range(100):
            files.append(open(os.path.join(d, f"f{i}"), "w"))
    except OSError:
        pass
    n = len(files)
    for f in files:
        f.close()
    return {"combined_score": 1.0 if n == 100 else 0.0, "files": float(n)}
