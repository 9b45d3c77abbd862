"""Static pairs (true motion 0: vtest frames 0-1, 20-22, 40-41 and Aloe left/left from
opencv-doc) with image 2 darkened to 60/50/40 % or gamma 1.8: the Predictor's mean |flow_f| and
plausibility report, with the exposure compensation as shipped. ``--manual`` instead matches the
exposure beforehand with photometric.match_exposure. The "Static pairs" paragraph of
docs/estimation.md.

Usage: python -m tools.bench.studies.plausibility.exposure_static_pairs [--manual]
"""
import argparse
import time

import numpy as np

from camflow_jax.geometry import photometric as P
from camflow_jax.predictor import Predictor
from tools.bench.studies.plausibility._common import darken, read_image, vtest_frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manual", action="store_true", help="match the exposure before the call")
    a = ap.parse_args()
    frames = vtest_frames(45, rgb=True)
    aloe = read_image("aloeL.jpg", rgb=True)
    pairs = {"vtest 0-1": (frames[0], frames[1]), "vtest 20-22": (frames[20], frames[22]),
             "vtest 40-41": (frames[40], frames[41]), "aloeL/aloeL": (aloe, aloe)}
    pred = Predictor.from_pretrained()
    for name, (im1, im2) in pairs.items():
        for k in (None, 0.6, 0.5, 0.4, "g1.8"):
            c = darken(im2, k)
            if a.manual and k is not None:
                c = P.match_exposure(im1, c)
            t = time.perf_counter()
            out = pred(im1, c)
            dt = time.perf_counter() - t
            mf = np.linalg.norm(out["flow_f"], axis=-1).mean()
            pl = out.get("plausibility", {})
            print(f"{name} {k}: mean |flow_f| {mf:.3f} px, net {np.linalg.norm(out['net_flow_f'], axis=-1).mean():.2f}, "
                  f"plausible {pl.get('plausible')} matched {pl.get('exposure_matched')} fb {pl.get('fb_error')} "
                  f"reasons {pl.get('reasons')} notes {pl.get('notes')} ({dt:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
