"""Seconds-long run for checking an installation: tiny network input, logs every step.

    python -m camflow_jax.train --config=configs/smoke.py --workdir=/tmp/smoke --config.num_steps=2
"""

from camflow_jax.configs import common, default


def get_config():
    c = default.get_config()
    c.model.height, c.model.width = 64, 128
    common.narrow_network(c, embed_dim=8)  # compiles in seconds
    c.batch_size = 2
    c.optim.learning_rate = 1e-4
    c.num_steps = 2
    c.data.num_eval = 4
    c.data.num_train = 64
    c.log_every = 1
    c.eval_every = 0            # evaluate at the end only
    c.checkpoint_every = 1
    c.eval_baselines = ("identity",)
    return c
