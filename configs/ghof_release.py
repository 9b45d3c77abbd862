from camflow_jax.configs.ghof_release import get_config  # noqa: F401  (the one copy: camflow_jax/configs/ghof_release.py)
