"""CamFlow / CamFlow+ network in Flax linen (docs/design.md, "Network").

``build_model(config)`` -> :class:`CamFlow`; ``preprocess(images, h, w)`` -> network input;
``official.load_released(path)`` converts the released PyTorch CamFlow weights.
"""

from camflow_jax.models.camflow import (
    DEFAULT_CONFIG,
    DEPTH_GROUP,
    GROUP_NAMES,
    HOMOGRAPHY_GROUP,
    STOCHASTIC_GROUP,
    CamFlow,
    build_model,
    count_params,
    group_layout,
    init_variables,
    preprocess,
    resolve_config,
)

__all__ = [
    "DEFAULT_CONFIG",
    "DEPTH_GROUP",
    "GROUP_NAMES",
    "HOMOGRAPHY_GROUP",
    "STOCHASTIC_GROUP",
    "CamFlow",
    "build_model",
    "count_params",
    "group_layout",
    "init_variables",
    "preprocess",
    "resolve_config",
]
