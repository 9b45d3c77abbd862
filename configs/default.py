from camflow_jax.configs.default import get_config  # noqa: F401  (the one copy: camflow_jax/configs/default.py)
