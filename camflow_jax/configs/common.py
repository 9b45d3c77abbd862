"""What the training configs share: the paper's data and optimizer setting, the narrowed
network of the CPU-sized runs, the motion-only loss of the synthetic runs. Each helper changes
a config in place (and returns it); the configs call them after ``default.get_config()``."""


def paper_setting(c):
    """The paper's optimization setting (§ Implementation Details) for CAHomo and GHOF: 5 epochs
    of batch 16, 600x800 frames resized to 360x640 (as the release does) and cropped to 320x576,
    Adam lr 1e-5 (the betas and x0.8 per epoch are ``default``'s). Reading and labelling the
    frames is CPU work for worker processes, as many as the machine has cores to spare
    (``data.num_workers = -1``: one per usable core less 2, at most 16)."""
    c.model.height, c.model.width = 320, 576
    c.batch_size = 16
    c.num_epochs = 5
    c.data.resize_height, c.data.resize_width = 360, 640
    c.data.num_workers = -1
    c.optim.learning_rate = 1e-5
    c.eval_baselines = ("identity",)
    return c


def narrow_network(c, embed_dim: int = 16):
    """The released structure (3 levels, Swin encoders, class-attention token stacks, mask net)
    narrowed for a CPU: ``embed_dim`` channels instead of 24 and 2 blocks per encoder stage
    instead of (2, 4, 6). In a fixed CPU budget more steps beat more width (docs/training.md,
    "The embedded default run")."""
    c.model.embed_dim = embed_dim
    c.model.depths = (2, 2, 2)
    c.model.num_heads = (2, 4, 8)
    return c


def synthetic_motion_only(c):
    """The embedded synthetic scenes, supervised by their exact geometric flow labels with the
    motion loss alone (1 : 0 : 0)."""
    c.data.name = "synthetic"
    c.loss.motion, c.loss.feature, c.loss.smooth = 1.0, 0.0, 0.0
    return c
