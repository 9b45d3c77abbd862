"""CamFlow (24 bases) pretraining on CAHomo with pseudo-homography labels (no depth, no K).

    python -m camflow_jax.train --config=configs/cahomo.py --config.data.path=/data/CAHomo --workdir=workdirs/cahomo
"""

from configs import default


def get_config():
    c = default.get_config()
    c.model.height, c.model.width = 320, 576
    c.batch_size = 16
    c.num_steps = 50000
    c.bases.use_depth = False
    c.data.name = "cahomo"
    c.data.resize_height, c.data.resize_width = 360, 640
    c.data.num_workers = 4
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 0.0, 0.0
    c.optim.learning_rate = 1e-4
    c.eval_baselines = ("identity",)
    return c
