"""Refined and network-only EPE of the shipped model on central crops of 4 synthetic RE pairs
(seed 7, 576 wide, with depth) at 2:1, 4:1, 6:1 and 8:1; the numbers behind predictor.MAX_SQUASH
(docs/estimation.md). Usage: python -m tools.bench.studies.plausibility.aspect_ratio (2-core CPU: ~3 min)."""
import warnings

import numpy as np

from camflow_jax import predictor
from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.predictor import Predictor


def main():
    warnings.filterwarnings("ignore")
    predictor.MAX_SQUASH = 100  # measure beyond the limit
    pred = Predictor.from_pretrained()  # the shipped model
    ds = SyntheticScenes(seed=7, num_samples=6, height=320, width=576, categories=("RE",))
    for rows in (288, 144, 96, 72):
        res = []
        for i in range(4):
            s = ds[i]
            y0 = (320 - rows)//2
            sl = slice(y0, y0+rows)
            cam = dict(depth1=s["depth1"][sl], depth2=s["depth2"][sl], intrinsics=s["K"] - np.array([0,0,0,y0]))
            v, gt = s["valid_f"][sl] > 0, s["flow_f"][sl]
            for r in (False, True):
                o = pred(s["img1"][sl], s["img2"][sl], **cam, refine=r)
                res.append(np.linalg.norm(o["flow_f"] - gt, axis=-1)[v].mean())
        res = np.array(res).reshape(4, 2)
        print(f"{576/rows:.1f}:1 net {res[:,0].round(2)} refined {res[:,1].round(2)}", flush=True)


if __name__ == "__main__":
    main()
