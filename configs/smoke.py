from camflow_jax.configs.smoke import get_config  # noqa: F401  (the one copy: camflow_jax/configs/smoke.py)
