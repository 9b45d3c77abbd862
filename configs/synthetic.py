"""Embedded default: CamFlow+ on procedural parallax scenes, sized for a 2-core CPU (≤ 15 min).

    python -m camflow_jax.train --config=configs/synthetic.py --workdir=workdirs/synthetic
"""

from configs import default


def get_config():
    c = default.get_config()
    # The full released architecture at a small input: ~2 s per step of 8 pairs on 2 CPU cores.
    c.model.height, c.model.width = 64, 128
    c.batch_size = 8
    c.num_steps = 300
    c.data.name = "synthetic"
    c.data.num_eval = 50
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 0.0, 0.0
    c.optim.learning_rate = 3e-4
    c.optim.steps_per_epoch = 100
    c.log_every = 25
    c.eval_every = 150
    c.checkpoint_every = 150
    return c
