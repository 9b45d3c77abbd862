from camflow_jax.configs.pretrained import get_config  # noqa: F401  (the one copy: camflow_jax/configs/pretrained.py)
