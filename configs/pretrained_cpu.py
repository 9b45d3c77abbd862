"""Checkout shortcut: `--config=configs/pretrained_cpu.py` loads the packaged `camflow_jax/configs/pretrained_cpu.py`."""

from camflow_jax.configs.pretrained_cpu import get_config  # noqa: F401
