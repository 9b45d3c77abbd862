from camflow_jax.configs.selftrain import get_config  # noqa: F401  (the one copy: camflow_jax/configs/selftrain.py)
