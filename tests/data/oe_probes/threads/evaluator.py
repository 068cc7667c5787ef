"""Probe: 80 threads alive at once (the old limit was 64 processes + threads)."""
import threading


def evaluate(program_path):
    stop = threading.Event()
    threads = []
    try:
        for _ in range(80):
            t = threading.Thread(target=stop.wait)
            t.start()
            threads.append(t)
    except RuntimeError:
        pass
    n = len(threads)
    stop.set()
    for t in threads:
        t.join()
    return {"combined_score": 1.0 if n == 80 else 0.0, "threads": float(n)}
