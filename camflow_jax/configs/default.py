"""Defaults shared by every config (Flax-examples style: other configs start from this one).

Every key exists here so that ``--config.a.b=value`` overrides are checked against a locked
config: an unknown key is an error, not a silent new field.
"""

import ml_collections

from camflow_jax.models import precision
from camflow_jax.models.config import NETWORK_FIELDS, ModelConfig

#: Keys whose value must be one of a few names (``configs.check`` refuses any other, like a
#: value of the wrong type).
CHOICES = {"model.precision": precision.POLICIES}


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.num_steps = 1000          # total optimizer steps of the run (resume continues up to it)
    c.num_epochs = 0            # > 0: num_steps = num_epochs * steps per epoch (optim.steps_per_epoch,
                                # or training-set size // batch_size), as the paper states its recipe
    c.batch_size = 8            # global batch, split over devices and processes

    # The network's input size and its ModelConfig fields (camflow_jax/models/config.py) but the
    # basis groups, which follow from c.bases. Defaults: the released CamFlow (embed 24,
    # depths (2, 4, 6), heads (3, 12, 24)), and precision 'exact' (the precision policy:
    # 'exact' = float32 with dots and convolutions at HIGHEST, 'default' = float32 at the
    # backend's default, TF32 on recent NVIDIA GPUs, 'bfloat16' = bfloat16 compute;
    # camflow_jax/models/precision.py). model.json records it: the Predictor's default.
    released = ModelConfig()
    c.model = ml_collections.ConfigDict(dict(height=320, width=576, **{
        k: getattr(released, k) for k in NETWORK_FIELDS}))

    # Motion bases: [homography | stochastic | depth]. Group sizes follow from these.
    c.bases = ml_collections.ConfigDict(dict(
        num_homography=12,      # 12 (second order), 8 (first order) or 0
        num_stochastic=12,
        seed=0,                 # stochastic bases are regenerated from it anywhere
        orthogonal_to_homography=True,
        use_depth=True,         # CamFlow+: 12 depth-translational bases from depth and K
        depth_sigmas=(),        # () = camflow_jax.bases.default_depth_sigmas(width)
    ))

    c.data = ml_collections.ConfigDict(dict(
        name="synthetic",       # synthetic | ghof | cahomo | frames
        render="host",          # synthetic training pairs rendered on the 'host' (grain pipeline) or the
                                # 'device' (JAX, each device its rows of the batch; name synthetic,
                                # label flow); the held-out pairs are always the host's
        path="",                # dataset folder (not used by synthetic)
        train_seed=0,           # synthetic: scenes of the training split
        eval_seed=1000,         # synthetic: held-out scenes (a different seed)
        num_train=100000,       # synthetic: size of the training split
        num_eval=50,            # held-out pairs evaluated periodically and at the end (0 = none): the
                                # synthetic scenes of eval_seed, or num_eval GHOF-Cam pairs spread over
                                # the file when eval_path is set (all when num_eval >= its 254)
        eval_path="",           # GHOF-Cam.npy: the held-out set (camflow_jax/training/heldout.py);
                                # "" = synthetic scenes, whatever the training data
        eval_depth_dir="",      # eval_path's depth maps (the ghof_cam benchmark's depth_dir; needed
                                # with bases.use_depth); "" = none
        render_height=0,        # synthetic render size; 0 = network size + 1/8 margin for crops
        render_width=0,
        resize_height=0,        # resize before the random crop (paper: 360x640); 0 = none
        resize_width=0,
        motion_scale=1.0,       # synthetic: camera-motion magnitude (1: ~20 px mean flow at 576 wide)
        label="flow",           # synthetic: 'flow' (geometric truth on valid pixels) | 'homography'
        frame_gap=1,            # frames: pairs (t, t + gap)
        depth_pattern="",       # ghof: per-sample depth files, "{}" = 1 or 2 (e.g. "depth{}.npy"); "" = none
        num_workers=0,          # grain worker processes (0 = in the main process; -1 = auto: one
                                # per usable core less 2, at most 16; other negatives are an error)
        prefetch=2,             # batches prepared ahead (per worker, and by the read threads)
        read_threads=1,         # threads preparing batches in each process (grain's default 16
                                # competes with the step for the cores)
        read_nice=19,           # nice value of those threads and of worker processes (Linux; 0 = as
                                # the trainer): the step's threads get the cores first
    ))

    c.loss = ml_collections.ConfigDict(dict(
        motion=1.0, feature=0.0, smooth=0.0, alpha=10.0, balance_feature=False,
        nll="paper",            # 'paper': NLL summed over channels (Eq. nll); 'release': the authors'
    ))                          # code, the mean over channels (halves the 2-channel motion term)

    c.optim = ml_collections.ConfigDict(dict(
        learning_rate=1e-5, b1=0.9, b2=0.99,   # the paper's Adam
        decay_rate=0.8,         # x0.8 per epoch (paper)
        steps_per_epoch=0,      # 0 = training-set size // batch_size
        grad_clip=0.0,          # global-norm clipping; 0 = off
        freeze=(),              # parameter-path prefixes kept fixed, e.g. ('features',) (the shallow
                                # feature net), ('met/head_depth',); an unknown prefix is an error
        auto_freeze=True,       # also freeze 'features' whenever loss.feature > 0 (trainable shallow
                                # features can collapse to a constant under that loss)
    ))

    c.identity_init = True      # coefficient heads start at zero: the initial motion is identity
                                # (False = the release's Kaiming init, whose flows start at 30-70 px)
    c.init_from = ""            # checkpoint (inference dir or workdir) to start from
    c.stop_after_seconds = 0.0  # stop (checkpointed, resumable) after this much training time;
                                # 0 = no limit. For time-limited jobs: rerun to continue.
    c.log_every = 50
    c.eval_every = 500
    c.checkpoint_every = 500
    c.keep_checkpoints = 3
    c.eval_baselines = ("identity", "sift_magsac")  # held-out rows: camflow_jax.estimators.registry names

    # Self-training (configs/selftrain.py; docs/adaptation.md): rounds > 0 turns the run into
    # rounds of label (the refined model of init_from, or the shipped one) -> fine-tune -> relabel
    # on the footage, instead of training on c.data.
    c.selftrain = ml_collections.ConfigDict(dict(
        rounds=0,               # 0: ordinary training
        footage="",             # a video, a folder of frames, or a folder of videos / frame folders
        max_frames=300,         # frames read from each input
        # Each round's budget (labels included) and the fine-tuning's settings: None takes
        # adapt's (camflow_jax.adaptation.config: DEFAULT_MINUTES, AdaptConfig), the one copy.
        minutes=ml_collections.FieldReference(None, field_type=float),
        learning_rate=ml_collections.FieldReference(None, field_type=float),
        trainable=ml_collections.FieldReference(None, field_type=str),  # adaptation.config.TRAINABLE
        synthetic_batch=ml_collections.FieldReference(None, field_type=int),  # synthetic pairs per step (0: none)
        occluders=ml_collections.FieldReference(None, field_type=float),  # share of pairs given a moving occluder
        holdout=0.25,           # the last share of each clip: scored, never learned from
    ))
    return c
