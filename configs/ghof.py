"""Checkout shortcut: `--config=configs/ghof.py` loads the packaged `camflow_jax/configs/ghof.py`."""

from camflow_jax.configs.ghof import get_config  # noqa: F401
