"""The shipped pretrained CamFlow+ as trained without an accelerator: 36 bases, the released
structure narrowed (embed 16, 2 blocks per encoder stage), 128x256 input, on the embedded
synthetic parallax scenes with camera motions x1.5 (a ~30 px mean flow at 576 wide, like real
handheld and stereo pairs), motion loss on exact geometric flow, Adam (0.9, 0.99) x0.8 per
epoch (8 epochs of 1,280 scenes) at a from-scratch learning rate. Sized for a 2-core CPU in the background
(``stop_after_seconds`` slices, resumable). ``configs/pretrained.py`` is the same recipe at
the paper's 320x576 and full width for one GPU. docs/model_card.md records the run.

    python -m camflow_jax.train --config=configs/pretrained_cpu.py --workdir=workdirs/pretrained_cpu
"""

from camflow_jax.configs import common, pretrained


def get_config():
    c = pretrained.get_config()
    c.model.height, c.model.width = 128, 256
    common.narrow_network(c, embed_dim=16)
    c.batch_size = 4
    c.num_epochs = 8
    c.data.num_train = 1280        # 320 steps per epoch at batch 4: 2,560 steps in all
    c.data.render = "host"         # as the shipped model was trained (its workdirs resume with it)
    c.data.num_workers = 0         # two cores: render in the training process
    c.data.prefetch = 2
    c.optim.learning_rate = 3e-4
    c.log_every = 25
    c.checkpoint_every = 50
    return c
