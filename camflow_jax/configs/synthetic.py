"""Embedded default: CamFlow+ (36 bases) on procedural parallax scenes, sized for a 2-core CPU
(≤ 15 min including evaluation).

    python -m camflow_jax.train --config=configs/synthetic.py --workdir=workdirs/synthetic
"""

from camflow_jax.configs import common, default


def get_config():
    c = common.synthetic_motion_only(default.get_config())
    c.model.height, c.model.width = 64, 128
    # A narrower step is less than half the cost (embed 16, 2 blocks per encoder stage).
    common.narrow_network(c, embed_dim=16)
    c.batch_size = 8
    c.num_steps = 650
    c.data.num_eval = 50
    c.optim.learning_rate = 5e-4
    c.optim.steps_per_epoch = 250
    c.log_every = 50
    c.eval_every = 0             # held-out evaluation at the end only (it renders and scores 50 pairs)
    c.checkpoint_every = 325
    return c
