"""Probe: a 20 MB temporary file (the old file-size limit was 16 MB)."""
import os
import tempfile


def evaluate(program_path):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        for _ in range(20):
            f.write(b"\0" * (1 << 20))
        name = f.name
    mb = os.path.getsize(name) / (1 << 20)
    os.unlink(name)
    return {"combined_score": 1.0, "megabytes": mb}
