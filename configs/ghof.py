from camflow_jax.configs.ghof import get_config  # noqa: F401  (the one copy: camflow_jax/configs/ghof.py)
