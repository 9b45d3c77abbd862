"""CamFlow (24 bases: 12 homography + 12 stochastic) pretraining on CAHomo, the paper's recipe:
Adam lr 1e-5, betas (0.9, 0.99), x0.8 after each epoch, 5 epochs, batch 16, 600x800 frames
cropped to 320x576, with the hybrid probabilistic loss (motion + feature consistency; the
paper's Table 6: 0.33 PME against 0.41 motion-only). The paper does not state the feature
weight of this stage; we use its GHOF ratio 1 : 10 (no smoothness term: CAHomo has no depth).
The 8/12-basis ablation variants use motion only (``--config.loss.feature=0``), as the paper
does. CAHomo has no intrinsics, so CamFlow+ is not trained here.

    python -m camflow_jax.train --config=configs/cahomo.py --config.data.path=/data/CAHomo --workdir=workdirs/cahomo
"""

from camflow_jax.configs import common, default


def get_config():
    c = common.paper_setting(default.get_config())
    c.bases.use_depth = False
    c.data.name = "cahomo"
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 10.0, 0.0
    return c
