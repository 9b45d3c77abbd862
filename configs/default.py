"""Checkout shortcut: `--config=configs/default.py` loads the packaged `camflow_jax/configs/default.py`."""

from camflow_jax.configs.default import get_config  # noqa: F401
