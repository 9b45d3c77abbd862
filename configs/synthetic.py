"""Embedded default: CamFlow+ on procedural parallax scenes, sized for a 2-core CPU (≤ 15 min).

    python -m camflow_jax.train --config=configs/synthetic.py --workdir=workdirs/synthetic
"""

from configs import default


def get_config():
    c = default.get_config()
    c.model.height, c.model.width = 128, 256
    c.batch_size = 8
    c.num_steps = 600
    c.data.name = "synthetic"
    c.data.num_eval = 50
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 0.0, 0.0
    c.optim.learning_rate = 3e-4
    c.optim.steps_per_epoch = 200
    c.log_every = 25
    c.eval_every = 300
    c.checkpoint_every = 300
    return c
