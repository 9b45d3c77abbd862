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
- ``selftrain``: rounds of self-training on a folder of footage, the refined model as teacher.
- ``smoke``: seconds-long installation check.

``common`` holds what they share (helpers, not a config).
"""

import importlib
import importlib.util
import pkgutil
import weakref
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
    """``get_config()`` of a packaged config (``"ghof"``) or of a config file (``"my/cfg.py"``),
    checked with :func:`check`. A file that does not load (missing, a syntax error, no
    ``get_config()``, an exception inside it) is a :class:`ConfigError` with the cause on one line."""
    if path_or_name in names():
        return check(importlib.import_module(f"{__name__}.{path_or_name}").get_config(), path_or_name)
    return check(load_file(path_or_name), path_or_name)


class ConfigError(ValueError):
    """A config file that cannot be used: the message names the file and the cause (one line)."""


def load_file(file) -> object:
    """``get_config()`` of the config file ``file``, unchecked (:func:`load` checks it)."""
    file = Path(file)
    if not file.is_file():
        raise FileNotFoundError(f"no config file {file} (packaged configs: {', '.join(names())})")
    spec = importlib.util.spec_from_file_location(f"_camflow_config_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise ConfigError(f"config file {file}, line {e.lineno}: {e.msg}") from e
    except Exception as e:  # noqa: BLE001 (any error of the user's module is named, not traced)
        raise ConfigError(f"config file {file} failed to load: {_where(e, file)}{_one_line(e)}") from e
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        raise ConfigError(f"config file {file} defines no get_config() function")
    try:
        config = get_config()
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"config file {file}: get_config() failed: {_where(e, file)}{_one_line(e)}") from e
    return config


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _where(e: BaseException, file: Path) -> str:
    """``line N: `` of the innermost frame of ``e`` inside ``file`` (empty if none)."""
    import traceback

    target = file.resolve()
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == target]
    return f"line {lines[-1]}: " if lines else ""


def check(config, source: str = "config"):
    """``config`` if each of its keys exists in ``configs/default.py`` with a value of the default's
    type, else a :class:`ConfigError` naming the first offending key (and the closest known key).

    The same strictness as ``--config.key=value`` overrides, which the locked config refuses:
    a misspelt key set inside a config file would otherwise be a silently ignored new field.
    Types: an int is accepted where a float is expected, a list where a tuple is; a default of
    None accepts any value. A key of ``default.CHOICES`` (``model.precision``) must be one of its
    names.

    A config checked before and unchanged since (the CLI checks the file's config with its
    overrides; ``training.loop.validate_config`` then asks again) is not walked twice.
    """
    import ml_collections

    from camflow_jax.configs import default

    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(f"{source}: get_config() must return an ml_collections.ConfigDict, "
                          f"got {type(config).__name__}")
    fingerprint = repr(config.to_dict())
    if _last_checked[0]() is config and _last_checked[1] == fingerprint:
        return config
    _check_node(config, default.get_config(), "", source)
    for name, allowed in default.CHOICES.items():
        group, _, key = name.rpartition(".")
        node = config.get(group) if group else config
        if node is not None and key in node and node[key] not in allowed:
            raise ConfigError(f"{source}: config key {name} must be one of {list(allowed)}, got {node[key]!r}")
    _last_checked[:] = [weakref.ref(config), fingerprint]
    return config


#: The config :func:`check` passed last (a weak reference) and its contents then.
_last_checked: list = [lambda: None, None]


def _check_node(node, ref, prefix: str, source: str) -> None:
    import difflib

    import ml_collections

    for key in node.keys():
        name, value = f"{prefix}{key}", node[key]
        if key not in ref:
            close = difflib.get_close_matches(key, list(ref.keys()), n=1)
            hint = f"; did you mean {prefix}{close[0]}?" if close else ""
            raise ConfigError(f"{source}: unknown config key {name}{hint} (see configs/default.py for the keys)")
        expected = ref[key]
        if isinstance(expected, ml_collections.ConfigDict):
            if not isinstance(value, ml_collections.ConfigDict):
                raise ConfigError(f"{source}: config key {name} must be a group of keys, got {value!r}")
            _check_node(value, expected, name + ".", source)
        elif not _same_kind(value, expected):
            raise ConfigError(f"{source}: config key {name} must be {_kind(expected)}, got {value!r}")


def _same_kind(value, expected) -> bool:
    if expected is None:
        return True
    if isinstance(expected, bool):
        return isinstance(value, bool)
    if isinstance(expected, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(expected, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(expected, (tuple, list)):
        return isinstance(value, (tuple, list))
    return isinstance(value, type(expected))


def _kind(expected) -> str:
    if isinstance(expected, bool):
        return "True or False"
    if isinstance(expected, (tuple, list)):
        return "a tuple"
    return {int: "an integer", float: "a number", str: "a string"}.get(type(expected), type(expected).__name__)
