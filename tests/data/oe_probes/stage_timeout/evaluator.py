"""Probe: two stages of ~1.2 s each under a 2 s evaluator.timeout. OpenEvolve times each stage (0.7 here); one
timeout for the whole cascade made this a timeout. The program sets how long each stage waits."""
import importlib.util
import time


def _load(path):
    spec = importlib.util.spec_from_file_location("prog", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def evaluate_stage1(program_path):
    time.sleep(_load(program_path).PAUSE)
    return {"combined_score": 0.6, "stage1": 0.6}


def evaluate_stage2(program_path):
    m = _load(program_path)
    time.sleep(getattr(m, "STAGE2_PAUSE", m.PAUSE))
    return {"combined_score": 0.7, "stage2": 0.7}


def evaluate(program_path):
    return evaluate_stage1(program_path)
