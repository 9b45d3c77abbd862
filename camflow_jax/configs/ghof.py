"""GHOF refinement of CamFlow+ (36 bases), the paper's recipe (§ Implementation Details):
"the same optimization setting" as its CAHomo pretraining -- Adam lr 1e-5, betas (0.9, 0.99),
x0.8 after each epoch, 5 epochs, batch 16, 600x800 frames cropped to 320x576 (resized to
360x640 first, as the release does) -- with loss weights 1 : 10 : 40 (motion : feature :
smoothness). The shallow feature net is frozen while the feature loss is on
(``optim.auto_freeze``). Start from a CamFlow checkpoint: its homography and stochastic
groups are loaded, the depth group starts fresh.

    python -m camflow_jax.train --config=configs/ghof.py --config.data.path=/data/GHOF/train \
        --config.data.depth_pattern=depth{}.npy --config.init_from=ckpts/camflow_released \
        --workdir=workdirs/ghof

Held out (``eval_baselines`` beside the model): GHOF-Cam with
``--config.data.eval_path=GHOF-Cam.npy --config.data.eval_depth_dir=DEPTHS`` (the ``ghof_cam``
benchmark's file and depth maps), else synthetic scenes.

``configs/ghof_release.py`` is the authors' camera-ready variant (lr 1e-4, batch 8).
"""

from camflow_jax.configs import common, default


def get_config():
    c = common.paper_setting(default.get_config())  # num_steps = 5 x (training pairs // 16)
    c.data.name = "ghof"
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 10.0, 40.0
    return c
