"""Splits the refined call's added time into the jitted refinement (``PairRefiner._refine_pair``:
its jitted functions for both directions, timed by a wrapper on the instance) and the
host-side rest (grey images and depth at the working and detail sizes, transfers, resizing the
results back).
Usage: python -m tools.bench.studies.refinement.cost_breakdown
"""
import os
import statistics
import time

import jax

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.predictor import Predictor


def main():
    s = SyntheticScenes(seed=1000, num_samples=2, height=320, width=576)[0]
    cam = dict(depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"])
    pred = Predictor.from_pretrained()
    orig = pred.refiner._refine_pair
    T = []

    def timed(*a, **k):
        t0 = time.perf_counter()
        r = jax.block_until_ready(orig(*a, **k))
        T.append(time.perf_counter() - t0)
        return r

    pred.refiner._refine_pair = timed
    for _ in range(3):
        pred(s["img1"], s["img2"], **cam)
    T.clear()
    tot, net = [], []
    for _ in range(12):
        t0 = time.perf_counter()
        pred(s["img1"], s["img2"], **cam, refine=False)
        net.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pred(s["img1"], s["img2"], **cam)
        tot.append(time.perf_counter() - t0)
    n, r, j = statistics.median(net), statistics.median(tot), statistics.median(T)
    print(f"load {os.getloadavg()} network {n:.4f} s, refined {r:.4f} s, jitted refinement {j:.4f} s, "
          f"host rest {r - n - j:.4f} s")


if __name__ == "__main__":
    main()
