"""GHOF refinement with the authors' camera-ready settings (their released params.json), which
differ from the paper: Adam lr 1e-4 and batch 8; the shallow feature net frozen; loss weights
1 : 10 : 40 with the release's NLL form (the mean over channels, which halves the motion term).
Not the paper's recipe: that is ``configs/ghof.py``.
"""

from camflow_jax.configs import ghof


def get_config():
    c = ghof.get_config()
    c.batch_size = 8
    c.optim.learning_rate = 1e-4
    c.optim.freeze = ("features",)
    c.loss.nll = "release"
    return c
