"""Probe: multiprocessing.Pool and ProcessPoolExecutor need a writable /dev/shm (semaphores)."""
import concurrent.futures
import multiprocessing


def _square(x):
    return x * x


def evaluate(program_path):
    with multiprocessing.Pool(2) as pool:
        ok_pool = pool.map(_square, range(8)) == [x * x for x in range(8)]
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        ok_ex = list(ex.map(_square, range(8))) == [x * x for x in range(8)]
    return {"combined_score": 1.0, "pool": float(ok_pool), "executor": float(ok_ex)}
