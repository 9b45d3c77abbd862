"""CamFlow / CamFlow+ network in Flax linen (DESIGN §6).

``build_model(config)`` -> :class:`CamFlow`; ``preprocess(images, h, w)`` -> network input;
``official.load_released(path)`` converts the released PyTorch CamFlow weights.
"""

from camflow_jax.models.camflow import (
    DEFAULT_CONFIG,
    CamFlow,
    build_model,
    count_params,
    init_variables,
    preprocess,
    resolve_config,
)

__all__ = [
    "DEFAULT_CONFIG",
    "CamFlow",
    "build_model",
    "count_params",
    "init_variables",
    "preprocess",
    "resolve_config",
]
