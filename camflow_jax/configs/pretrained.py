"""The shipped pretrained CamFlow+ (36 bases, the released network width) at 320x576, trained on
the embedded synthetic parallax scenes on one GPU.

Not the paper's recipe (the paper pretrains on CAHomo and refines on GHOF, datasets we cannot
ship): from scratch on synthetic pairs with exact geometric flow labels, so the motion loss
alone (1 : 0 : 0) supervises every pixel, camera motions scaled x1.5 so their ~30 px mean flow
matches real handheld and stereo pairs at 576 wide, Adam (0.9, 0.99) x0.8 per epoch over 5
epochs as in the paper, at a from-scratch learning rate. ``docs/model_card.md`` records the run.

The training scenes are rendered on the accelerator (``data.render = "device"``:
``camflow_jax.data.synthetic.device``, each device its own rows of the batch); the held-out
pairs are rendered on the host. ``--config.data.render=host`` renders the training scenes on the
CPU instead, by grain worker processes: ``data.num_workers = -1`` takes one per usable core of
the machine less 2 for the trainer's own process, at most 16
(``camflow_jax.data.pipeline.resolve_num_workers``: 14 on a 16-core GPU machine, 0 on 2 cores);
the trainer prints the number it chose. ``--config.data.num_workers=N`` sets it by hand.

    python -m camflow_jax.train --config=configs/pretrained.py --workdir=workdirs/pretrained
"""

from camflow_jax.configs import common, default


def get_config():
    c = common.synthetic_motion_only(default.get_config())
    c.model.height, c.model.width = 320, 576
    c.batch_size = 16
    c.num_epochs = 5
    c.data.num_train = 64000      # 4,000 steps per epoch at batch 16; 20,000 steps in all
    c.data.num_eval = 100
    c.data.motion_scale = 1.5
    c.data.render = "device"      # training scenes rendered on the accelerator (docstring)
    c.data.num_workers = -1       # with render=host: auto, one worker per usable core, less 2, at most 16 (docstring)
    c.data.prefetch = 4
    c.model.precision = "default"  # float32 with the backend's matmul precision: TF32 on NVIDIA GPUs (docstring)
    c.optim.learning_rate = 2e-4
    c.log_every = 200
    c.eval_every = 0
    c.checkpoint_every = 1000
    c.keep_checkpoints = 2
    c.eval_baselines = ("identity", "sift_magsac")
    return c
