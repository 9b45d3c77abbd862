"""Checkout shortcut: `--config=configs/synthetic.py` loads the packaged `camflow_jax/configs/synthetic.py`."""

from camflow_jax.configs.synthetic import get_config  # noqa: F401
