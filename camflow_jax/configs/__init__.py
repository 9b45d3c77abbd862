"""Training configs (``get_config()`` each), shipped with the package.

From a checkout: ``--config=configs/NAME.py`` (thin files that load these). From an installed
package: ``--config=$(python -m camflow_jax.configs NAME)`` prints this folder's file path.

- ``default``: every key, with the paper's optimizer (Adam 1e-5, betas (0.9, 0.99), x0.8 per epoch).
- ``cahomo``: CamFlow (24 bases) pretraining on CAHomo, the paper's recipe.
- ``ghof``: CamFlow+ (36 bases) refinement on GHOF, the paper's recipe.
- ``ghof_release``: the same with the authors' camera-ready settings (lr 1e-4, batch 8).
- ``synthetic``: the embedded default run, sized for a 2-core CPU.
- ``pretrained``: the shipped model's recipe at 320x576, full width, for one GPU.
- ``pretrained_cpu``: the same recipe narrowed to 128x256 for a CPU: the model shipped now.
- ``smoke``: seconds-long installation check.
"""

NAMES = ("default", "cahomo", "ghof", "ghof_release", "synthetic", "pretrained", "pretrained_cpu", "smoke")


def load(path_or_name: str):
    """``get_config()`` of a packaged config (``"ghof"``) or of a config file (``"my/cfg.py"``)."""
    import importlib
    import importlib.util
    from pathlib import Path

    if path_or_name in NAMES:
        return importlib.import_module(f"camflow_jax.configs.{path_or_name}").get_config()
    path = Path(path_or_name)
    if not path.is_file():
        raise FileNotFoundError(f"no config file {path} (packaged configs: {', '.join(NAMES)})")
    spec = importlib.util.spec_from_file_location(f"_camflow_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()
