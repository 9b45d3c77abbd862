"""Checkout shortcut: `--config=configs/pretrained.py` loads the packaged `camflow_jax/configs/pretrained.py`."""

from camflow_jax.configs.pretrained import get_config  # noqa: F401
