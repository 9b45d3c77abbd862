from camflow_jax.configs.synthetic import get_config  # noqa: F401  (the one copy: camflow_jax/configs/synthetic.py)
