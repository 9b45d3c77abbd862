"""Checkout shortcut: `--config=configs/ghof_release.py` loads the packaged `camflow_jax/configs/ghof_release.py`."""

from camflow_jax.configs.ghof_release import get_config  # noqa: F401
