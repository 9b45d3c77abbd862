"""Synthetic benchmark (SyntheticScenes seed 1000, 100 pairs, 320x576) with CamFlow given NO depth/K.

The evaluation passes each sample's depth1/depth2/K to CamFlow (evaluation/methods.py); this
wrapper removes them, so the Predictor uses its constant-depth fallback. Everything else is
`camflow_jax.evaluation.evaluate` unchanged (rows camflow + camflow_net).
Usage: python -m tools.bench.studies.refinement.synthetic_no_depth OUT_DIR [--checkpoint DIR] [--num N]
(without --checkpoint: the shipped model; --num: the first N pairs, default 100)
"""
from camflow_jax.data import datasets
from camflow_jax.evaluation import benchmark


class NoDepth:
    def __init__(self, src):
        self.src = src
        self.categories = getattr(src, "categories", None)

    def __len__(self):
        return len(self.src)

    def __getitem__(self, i):
        s = dict(self.src[i])
        for k in ("depth1", "depth2", "K"):
            s.pop(k, None)
        return s


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--checkpoint", default=None, help="CamFlow checkpoint dir (default: the shipped model)")
    ap.add_argument("--num", type=int, default=100, help="pairs (the first N of the 100)")
    args = ap.parse_args()
    src = datasets.load_dataset("synthetic", None, num=args.num, seed=1000, size=(320, 576))
    benchmark.evaluate("synthetic", "camflow", num=args.num, seed=1000, size=(320, 576), source=NoDepth(src),
                       out_dir=args.out_dir, checkpoints=args.checkpoint, progress=False)
