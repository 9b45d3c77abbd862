from camflow_jax.configs.cahomo import get_config  # noqa: F401  (the one copy: camflow_jax/configs/cahomo.py)
