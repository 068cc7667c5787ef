import numpy as np


def run():
    return np.full(10, 0.1)
