def run():
    try:  # a numpy array where the program's interpreter has numpy (the evaluator converts either)
        import numpy as np
    except ImportError:
        return [0.1] * 10
    return np.full(10, 0.1)
