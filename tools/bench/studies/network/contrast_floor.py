"""How the network alone does on dark pairs with the contrast floor at its input, per floor
(docs/network.md, "Dark and flat pairs"): development data only.

    python -m tools.bench.studies.network.contrast_floor --out contrast_floor.json

Rows: a floor (``ModelConfig.contrast_floor``; 0 = off) and how the stretched pair's mean is
placed: ``pulled`` (the library's rule, :func:`camflow_jax.models.camflow.apply_contrast_floor`:
the mean divided by the gain) or ``kept`` (the mean left where it was; the alternative it was
chosen against). Data: ``--pairs`` pairs of ``SyntheticScenes(seed=7)`` at 320x576 with depth
(EPE against the rendered flow over all pixels, per category) and vtest.avi's first 40 frames
at 288x384 shaken at seed 7, as it is and darkened to a fifth with 3 grey levels of noise (as
the stabilizer's ``dark_noisy`` clip, at another seed): the mean EPE against the exact motion of
every second pair. The shipped model, network alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# The compiled-program cache is keyed by the model's config, not by a rule swapped in here.
os.environ["CAMFLOW_JAX_NO_CACHE"] = "1"

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from camflow_jax.data.synthetic import SyntheticScenes  # noqa: E402
from camflow_jax.data.synthetic.appearance import CATEGORIES  # noqa: E402
from camflow_jax.geometry import host  # noqa: E402
from camflow_jax.models import camflow as camflow_model  # noqa: E402
from camflow_jax.predictor import Predictor  # noqa: E402
from camflow_jax.stabilization import clips  # noqa: E402
from tools.bench import stabilization, timing  # noqa: E402

ROWS = ((0.0, "pulled"), (0.5, "kept"), (0.7, "kept"), (0.4, "pulled"), (0.5, "pulled"), (0.6, "pulled"),
        (0.7, "pulled"))


def _kept_mean(gray1, gray2, floor):
    """The alternative: stretched about the pair's mean, the mean left where it was."""
    both = jnp.concatenate([gray1, gray2], axis=-1)
    m = jnp.mean(both, axis=(1, 2, 3), keepdims=True)
    s = jnp.sqrt(jnp.mean(jnp.square(both - m), axis=(1, 2, 3), keepdims=True))
    g = jnp.clip(floor / jnp.maximum(s, 1e-6), 1.0, camflow_model.MAX_CONTRAST_GAIN)
    return (gray1 - m) * g + m, (gray2 - m) * g + m


def _epe(flow, truth) -> float:
    return float(np.hypot(*(flow - truth).transpose(2, 0, 1)).mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=50)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    res = {"machine": timing.host_info(), "load_before": timing.load_average(), "rows": []}
    scenes = SyntheticScenes(seed=7, num_samples=a.pairs, height=320, width=576)
    rows = [scenes[i] for i in range(a.pairs)]
    frames = stabilization.decode_video(stabilization.find_vtest(), 40, (288, 384))
    plain = clips.shake_video(frames, 7, fps=10.0)
    dark = clips.degrade(plain, gain=0.2, noise_std=3.0, seed=7)
    shipped = Predictor.from_pretrained()
    rule = camflow_model.apply_contrast_floor
    for floor, mean in ROWS:
        camflow_model.apply_contrast_floor = rule if mean == "pulled" else _kept_mean
        try:
            pred = Predictor(shipped.model, shipped.variables, shipped.static_bases, shipped.model_config,
                             contrast_floor=floor)
            per = {c: [] for c in CATEGORIES}
            for r in rows:
                o = pred(r["img1"], r["img2"], r["depth1"], r["depth2"], r["K"], refine=False)
                per[r["category"]].append(_epe(o["flow_f"], r["flow_f"]))
            out = {"floor": floor, "mean": mean, **{f"synthetic_{c}": float(np.mean(v)) for c, v in per.items() if v},
                   "synthetic_avg": float(np.mean([e for v in per.values() for e in v]))}
            h, w = frames.shape[1:3]
            for name, clip in (("vtest", plain), ("vtest_dark", dark)):
                out[name] = float(np.mean([_epe(pred(clip.frames[t], clip.frames[t + 1], refine=False)["flow_f"],
                                                host.homography_flow(clip.pair_homographies[t], h, w))
                                           for t in range(0, len(clip.frames) - 1, 2)]))
        finally:
            camflow_model.apply_contrast_floor = rule
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}), file=sys.stderr,
              flush=True)
        res["rows"].append(out)
    timing.write_result(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
