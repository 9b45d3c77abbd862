"""Embedded default: CamFlow+ (36 bases) on procedural parallax scenes, sized for a 2-core CPU
(≤ 15 min including evaluation).

    python -m camflow_jax.train --config=configs/synthetic.py --workdir=workdirs/synthetic
"""

from camflow_jax.configs import default


def get_config():
    c = default.get_config()
    c.model.height, c.model.width = 64, 128
    # The released structure (3 levels, Swin encoders, class-attention token stacks, mask net),
    # narrowed: embed 16 instead of 24 and 2 blocks per encoder stage instead of (2, 4, 6).
    # A narrower step is less than half the cost, and in a fixed CPU budget more steps beat
    # more width (docs/training.md, "The embedded default run").
    c.model.embed_dim = 16
    c.model.depths = (2, 2, 2)
    c.model.num_heads = (2, 4, 8)
    c.batch_size = 8
    c.num_steps = 650
    c.data.name = "synthetic"
    c.data.num_eval = 50
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 0.0, 0.0
    c.optim.learning_rate = 5e-4
    c.optim.steps_per_epoch = 250
    c.log_every = 50
    c.eval_every = 0             # held-out evaluation at the end only (it renders and scores 50 pairs)
    c.checkpoint_every = 325
    return c
