"""Checkout shortcut: `--config=configs/smoke.py` loads the packaged `camflow_jax/configs/smoke.py`."""

from camflow_jax.configs.smoke import get_config  # noqa: F401
