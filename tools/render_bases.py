"""Renders the hybrid basis set (homography | stochastic | depth) as flow-colour tiles.

    python tools/render_bases.py --out docs/images/bases.png [--height 160 --width 288 --seed 0]

Depth bases are built from the depth map and intrinsics of a synthetic scene (sample 0 of
--seed), shown next to its image. Each tile is colour-coded with its own maximum.
"""

import argparse
from pathlib import Path

import cv2
import numpy as np

from camflow_jax import bases
from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.io import viz


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output PNG")
    p.add_argument("--height", type=int, default=160)
    p.add_argument("--width", type=int, default=288)
    p.add_argument("--seed", type=int, default=0, help="stochastic-basis seed and synthetic scene seed")
    a = p.parse_args(argv)
    sample = SyntheticScenes(seed=a.seed, num_samples=1, height=a.height, width=a.width)[0]
    full = np.asarray(bases.hybrid_bases(a.height, a.width, depth=sample["depth1"], K=sample["K"], seed=a.seed))
    rows = []
    for name, part in (("homography", full[:12]), ("stochastic", full[12:24]), ("depth-translational", full[24:])):
        grid = viz.basis_grid(part, cols=12)
        label = np.full((22, grid.shape[1], 3), 255, np.uint8)
        cv2.putText(label, f"{name} ({len(part)})", (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        rows += [label, grid]
    sheet = np.concatenate(rows, 0)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    small = cv2.resize(sheet, (sheet.shape[1] // 2, sheet.shape[0] // 2), interpolation=cv2.INTER_AREA)
    cv2.imwrite(a.out, cv2.cvtColor(small, cv2.COLOR_RGB2BGR))
    print(f"wrote {a.out} ({small.shape[1]}x{small.shape[0]})")


if __name__ == "__main__":
    main()
