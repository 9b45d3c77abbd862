"""Checkout shortcut: `--config=configs/cahomo.py` loads the packaged `camflow_jax/configs/cahomo.py`."""

from camflow_jax.configs.cahomo import get_config  # noqa: F401
