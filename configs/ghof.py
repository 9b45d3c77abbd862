"""GHOF refinement (paper §4.2): CamFlow+ (36 bases), losses 1 : 10 : 40, 600x800 frames
resized to 360x640 and cropped to 320x576, batch 8, Adam 1e-4 (0.9, 0.99), x0.8 per epoch.

    python -m camflow_jax.train --config=configs/ghof.py --config.data.path=/data/GHOF/train \
        --config.data.depth_pattern=depth{}.npy --config.init_from=ckpts/camflow_released \
        --workdir=workdirs/ghof
"""

from configs import default


def get_config():
    c = default.get_config()
    c.model.height, c.model.width = 320, 576
    c.batch_size = 8
    c.num_steps = 6200          # 5 epochs of 9,900 pairs at batch 8
    c.data.name = "ghof"
    c.data.resize_height, c.data.resize_width = 360, 640
    c.data.num_workers = 4
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 10.0, 40.0
    c.optim.learning_rate = 1e-4
    c.eval_baselines = ("identity",)
    return c
