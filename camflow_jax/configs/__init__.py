"""Training configs (``get_config()`` each): the only copy, shipped with the package.

From a checkout: ``--config=configs/NAME.py`` (one-line files that load these; a test checks
that the two folders name the same configs). From an installed package:
``--config=$(python -m camflow_jax.configs NAME)`` prints this folder's file path.

- ``default``: every key, with the paper's optimizer (Adam 1e-5, betas (0.9, 0.99), x0.8 per epoch).
- ``cahomo``: CamFlow (24 bases) pretraining on CAHomo, the paper's recipe.
- ``ghof``: CamFlow+ (36 bases) refinement on GHOF, the paper's recipe.
- ``ghof_release``: the same with the authors' camera-ready settings (lr 1e-4, batch 8).
- ``synthetic``: the embedded default run, sized for a 2-core CPU.
- ``pretrained``: the shipped model's recipe at 320x576, full width, for one GPU.
- ``pretrained_cpu``: the same recipe narrowed to 128x256 for a CPU: the model shipped now.
- ``smoke``: seconds-long installation check.

``common`` holds what they share (helpers, not a config).
"""

import importlib
import importlib.util
import pkgutil
from pathlib import Path

#: Modules of this package that are not configs.
HELPERS = ("common",)


def names() -> tuple[str, ...]:
    """The packaged configs, found in this folder (every module but ``common`` and private ones)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.name.startswith("_") and m.name not in HELPERS))


def path(name: str) -> Path:
    """File of the packaged config ``name`` (for ``--config=``)."""
    if name not in names():
        raise ValueError(f"no packaged config {name!r} (packaged configs: {', '.join(names())})")
    return Path(__file__).with_name(f"{name}.py")


def load(path_or_name: str):
    """``get_config()`` of a packaged config (``"ghof"``) or of a config file (``"my/cfg.py"``)."""
    if path_or_name in names():
        return importlib.import_module(f"{__name__}.{path_or_name}").get_config()
    file = Path(path_or_name)
    if not file.is_file():
        raise FileNotFoundError(f"no config file {file} (packaged configs: {', '.join(names())})")
    spec = importlib.util.spec_from_file_location(f"_camflow_config_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()
