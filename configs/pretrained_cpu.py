from camflow_jax.configs.pretrained_cpu import get_config  # noqa: F401  (the one copy: camflow_jax/configs/pretrained_cpu.py)
