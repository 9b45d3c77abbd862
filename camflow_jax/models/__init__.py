"""CamFlow / CamFlow+ network in Flax linen (docs/design.md, "Network").

``build_model(ModelConfig(...))`` -> :class:`CamFlow`; ``preprocess(images, h, w)`` -> network
input; ``official.load_released(path)`` converts the released PyTorch CamFlow weights.
:class:`ModelConfig` (``models/config.py``) is the single source of the architecture fields.
"""

from camflow_jax.models.camflow import (
    CamFlow,
    build_model,
    count_params,
    group_layout,
    init_variables,
    preprocess,
    resolve_config,
)
from camflow_jax.models.config import (
    DEPTH_GROUP,
    FIELDS,
    GROUP_NAMES,
    HOMOGRAPHY_GROUP,
    NETWORK_FIELDS,
    STOCHASTIC_GROUP,
    ModelConfig,
)

__all__ = [
    "DEPTH_GROUP",
    "FIELDS",
    "GROUP_NAMES",
    "HOMOGRAPHY_GROUP",
    "NETWORK_FIELDS",
    "STOCHASTIC_GROUP",
    "CamFlow",
    "ModelConfig",
    "build_model",
    "count_params",
    "group_layout",
    "init_variables",
    "preprocess",
    "resolve_config",
]
