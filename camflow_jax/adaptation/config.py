"""The adaptation's settings (docs/adaptation.md, "What is trained, and how" and "Why this
recipe"): :class:`AdaptConfig`, the parameter groups :data:`TRAINABLE` and the job's default
budget. Plain Python: the command line's parser and the training configs read them without
importing JAX.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["AdaptConfig", "TRAINABLE", "SCHEDULES", "DEFAULT_MINUTES", "selftrain_settings"]

#: The default budget of the whole job (labels, fine-tuning, checks), minutes: 300 frames of
#: 640x480 fit 5 minutes on 2 CPU cores (docs/adaptation.md, "Cost").
DEFAULT_MINUTES = 4.5

#: What may be trained: parameter-path prefixes per choice (docs/adaptation.md says which was
#: measured best). The shallow feature net and the mask net are never trained here.
TRAINABLE = {
    "all": ("met",),
    "late": ("met/head_", "met/norm_", "met/tokens_", "met/ca_", "met/encoder_level_2"),
    "heads": ("met/head_", "met/norm_", "met/tokens_"),
}

#: The learning rate over a run: constant, or a half cosine from ``learning_rate`` down to 0 over
#: the run's steps or, under a time budget, over its seconds after the first step's compilation.
SCHEDULES = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class AdaptConfig:
    """Fine-tuning settings (docs/adaptation.md, "Choices", says how each was chosen)."""
    seconds: float = 180.0  # training time budget (the first step's compilation included)
    max_steps: int | None = None  # None: as many as the budget allows
    learning_rate: float = 3e-4
    batch_size: int = 4  # footage pairs per step
    synthetic_batch: int = 2  # synthetic pairs per step (0: none)
    synthetic_share: float = 0.3  # weight of the synthetic loss in the step's loss
    synthetic_pool: int = 48  # synthetic pairs rendered once and cycled through
    trainable: str = "all"
    average: float = 0.95  # decay of the running average of the weights returned at the end (0: the last step's)
    schedule: str = "constant"  # the learning rate over the run: SCHEDULES
    directions: int = 1  # 1: one direction of each pair a step, drawn at random (half the network's work); 2: both
    occluders: float = 0.0  # share of footage pairs given a pasted moving occluder (camflow_jax.adaptation.occluders)
    seed: int = 0

    def __post_init__(self):
        if self.trainable not in TRAINABLE:
            raise ValueError(f"trainable must be one of {sorted(TRAINABLE)}, got {self.trainable!r}")
        if not (self.seconds > 0 or self.max_steps):
            raise ValueError(f"the budget must be > 0 seconds or a step count, got {self.seconds}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a finite number > 0, got {self.learning_rate}")
        for name, least in (("batch_size", 1), ("synthetic_batch", 0), ("synthetic_pool", 1)):
            if int(getattr(self, name)) < least:
                raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)!r}")
        if not 0 <= self.synthetic_share < 1:
            raise ValueError(f"synthetic_share must be in [0, 1), got {self.synthetic_share}")
        if not 0 <= self.average < 1:
            raise ValueError(f"average must be in [0, 1) (0: no running average), got {self.average}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if self.directions not in (1, 2):
            raise ValueError(f"directions must be 1 or 2, got {self.directions!r}")
        if not 0 <= self.occluders <= 1:
            raise ValueError(f"occluders must be a share in [0, 1], got {self.occluders}")


def selftrain_settings(st) -> tuple[float, dict]:
    """``(minutes per round, AdaptConfig keywords)`` of a training config's ``selftrain``
    (configs/default.py): its ``minutes``, ``learning_rate``, ``trainable``, ``synthetic_batch``
    and ``occluders``, each None taking adapt's default (this module: the one copy)."""
    d = AdaptConfig()
    keys = ("learning_rate", "trainable", "synthetic_batch", "occluders")
    minutes = DEFAULT_MINUTES if st["minutes"] is None else st["minutes"]
    return minutes, {k: getattr(d, k) if st[k] is None else st[k] for k in keys}
