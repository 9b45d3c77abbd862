"""The Predictor's added host cost per pair at 640x480 (opencv-doc vtest frames resized):
photometric.exposure_shift (every pair), photometric.match_exposure (matched pairs only),
plausibility.report (every pair; with the texture cache cold and warm; flow_f and flow_b of a
real refined answer) and its parts, against a few refined Predictor calls for scale. The "Cost
at 640x480" paragraph of docs/estimation.md.

Usage: python -m tools.bench.studies.plausibility.host_cost
"""
import argparse
import time

import cv2
import numpy as np

from camflow_jax.geometry import photometric as P
from camflow_jax.geometry import plausibility as PL
from camflow_jax.predictor import Predictor
from tools.bench.studies.plausibility._common import vtest_frames


def ms(f, n=20):
    f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e3


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    fr = [cv2.resize(f, (640, 480), interpolation=cv2.INTER_AREA) for f in vtest_frames(12, rgb=True)]
    pred = Predictor.from_pretrained()
    out = pred(fr[0], fr[1])
    dark = (fr[1] * 0.5).astype(np.uint8)
    print(f"exposure_shift {ms(lambda: P.exposure_shift(fr[0], fr[1])):.2f} ms; "
          f"match_exposure {ms(lambda: P.match_exposure(fr[0], dark)):.2f} ms")
    exposure = {"exposure_shift": 0.0, "exposure_matched": False}
    # report with a cold texture cache (a new image 2 each call, as in a video) and warm
    i = iter(range(10**6))
    cold = ms(lambda: PL.report(fr[0], fr[1] + np.uint8(next(i) % 2), out, exposure))
    warm = ms(lambda: PL.report(fr[0], fr[1], out, exposure))
    print(f"report (texture measured anew for image 2) {cold:.2f} ms; warm {warm:.2f} ms")
    print(f"  of which forward_backward_error {ms(lambda: PL.forward_backward_error(out['flow_f'], out['flow_b'])):.2f} ms, "
          f"alignment_errors {ms(lambda: PL.alignment_errors(fr[0], fr[1], out['flow_f'])):.2f} ms, "
          f"aligned_correlation {ms(lambda: PL.aligned_correlation(fr[0], fr[1], out['flow_f'])):.2f} ms")
    for j in range(2, 6):  # a few refined pairs for scale (compiled above)
        t = time.perf_counter()
        pred(fr[j], fr[j + 1])
        print(f"Predictor call (refined, 640x480) {(time.perf_counter() - t) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
