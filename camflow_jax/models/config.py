"""The network's architecture: one frozen dataclass, the single source of its fields.

The network (:class:`camflow_jax.models.CamFlow` and its transformer), the training configs
(``configs/default.py`` copies :data:`NETWORK_FIELDS` into ``config.model``), the trainer,
``model.json`` files (:mod:`camflow_jax.models.checkpoint`) and :mod:`tools.bench.benchmarking` all read the
fields from here. A ``model.json``'s ``model_config`` is :meth:`ModelConfig.to_dict` plus the
input size (``height``, ``width``) and a ``bases`` section; :meth:`ModelConfig.from_dict`
reads one back (keys that are not architecture fields are left to the caller).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from camflow_jax.models import precision as precision_lib

# The basis groups, in basis order. These names are part of the parameter paths
# (``met/tokens_<name>``, ``met/head_<name>``, ...), so every module that builds a model config
# or maps parameters takes them from here; :class:`ModelConfig` refuses any other name.
HOMOGRAPHY_GROUP, STOCHASTIC_GROUP, DEPTH_GROUP = "homography", "stochastic", "depth"
GROUP_NAMES = (HOMOGRAPHY_GROUP, STOCHASTIC_GROUP, DEPTH_GROUP)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """CamFlow / CamFlow+ architecture. Defaults: the released CamFlow (24 bases), with our
    contrast floor for dark pairs; CamFlow+ adds a depth group (``group_sizes=(12, 12, 12)``).

    Attributes:
      group_sizes: bases per group, in the order of :data:`GROUP_NAMES`.
      group_names: the groups' names (default: the first ``len(group_sizes)`` of
        :data:`GROUP_NAMES`).
      precision: the precision policy (:mod:`camflow_jax.models.precision`): 'exact' (float32,
        dots and convolutions at HIGHEST; the default), 'default' (float32 at the backend's
        default precision: TF32 on recent NVIDIA GPUs) or 'bfloat16' (bfloat16 compute). The
        compute dtype follows from it (:attr:`dtype`); an older mapping's ``dtype`` key is read
        as a policy (:meth:`from_dict`).
      embed_dim: channels of the finest encoder level (x2 per level).
      depths, layer_depth, num_heads: per level, Swin blocks per stage, encoder stages
        (``layer_depth[i]`` must be ``levels - i``) and attention heads.
      window_size: Swin window (input sides must be multiples of 2^levels x window).
      mlp_ratio: MLP hidden width / token width.
      contrast_floor: the least grey-level spread (standard deviation, in the normalised units of
        :func:`camflow_jax.models.preprocess`) a pair reaches the network with; a darker or
        flatter pair is stretched to it (:func:`camflow_jax.models.camflow.apply_contrast_floor`).
        0 turns it off (the release has no such step). Not a weight: any checkpoint runs with
        either value.
    """

    group_sizes: tuple[int, ...] = (12, 12)
    group_names: tuple[str, ...] | None = None
    precision: str = precision_lib.DEFAULT_POLICY
    embed_dim: int = 24
    depths: tuple[int, ...] = (2, 4, 6)
    layer_depth: tuple[int, ...] = (3, 2, 1)
    num_heads: tuple[int, ...] = (3, 12, 24)
    window_size: int = 8
    mlp_ratio: float = 3.0
    contrast_floor: float = 0.5

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen: normalize once)
        sizes = tuple(int(n) for n in self.group_sizes)
        if not sizes or any(n <= 0 for n in sizes):
            raise ValueError(f"model_config.group_sizes must be positive ints, got {list(self.group_sizes)}")
        names = self.group_names
        if names is None:
            if len(sizes) > len(GROUP_NAMES):
                raise ValueError(f"{len(sizes)} groups need explicit 'group_names'")
            names = GROUP_NAMES[:len(sizes)]
        names = tuple(str(n) for n in names)
        if len(names) != len(sizes) or len(set(names)) != len(names):
            raise ValueError(f"group_names {list(names)} must be distinct and match group_sizes {list(sizes)}")
        if [n for n in GROUP_NAMES if n in names] != list(names):
            raise ValueError(f"group_names {list(names)}: each must be one of {list(GROUP_NAMES)}, in that order")
        if str(self.precision) not in precision_lib.POLICIES:
            raise ValueError(f"model_config.precision must be one of {list(precision_lib.POLICIES)}, "
                             f"got {self.precision!r}")
        depths, layer_depth, heads = (tuple(int(d) for d in v) for v in (self.depths, self.layer_depth, self.num_heads))
        levels, embed = len(depths), int(self.embed_dim)
        if not (len(layer_depth) == len(heads) == levels):
            raise ValueError("depths, layer_depth and num_heads must have the same length")
        for i in range(levels):
            # Every level's encoder must end at the common coarsest grid with embed * 2^(L-1) channels.
            if layer_depth[i] != levels - i:
                raise ValueError(f"layer_depth[{i}] must be {levels - i} (got {list(layer_depth)}) so that every "
                                 "level's encoder ends at the coarsest grid")
            for s in range(layer_depth[i]):
                if (embed * 2 ** (i + s)) % heads[i]:
                    raise ValueError(f"num_heads[{i}]={heads[i]} does not divide dim {embed * 2 ** (i + s)}")
        if embed % 2:
            raise ValueError(f"embed_dim must be even, got {embed}")
        try:
            floor = float(self.contrast_floor)
        except (TypeError, ValueError):
            floor = float("nan")
        if not (math.isfinite(floor) and floor >= 0):
            raise ValueError(f"model_config.contrast_floor must be a finite number >= 0 (0: off), got {self.contrast_floor!r}")
        for k, v in dict(group_sizes=sizes, group_names=names, precision=str(self.precision), embed_dim=embed,
                         depths=depths, layer_depth=layer_depth, num_heads=heads,
                         window_size=int(self.window_size), mlp_ratio=float(self.mlp_ratio),
                         contrast_floor=floor).items():
            set_(k, v)

    @property
    def policy(self) -> precision_lib.Policy:
        """The precision policy: compute dtype and dot/convolution precision."""
        return precision_lib.policy(self.precision)

    @property
    def dtype(self) -> str:
        """The compute dtype's name ('float32' or 'bfloat16'), from :attr:`precision`."""
        return self.policy.dtype

    @property
    def jnp_dtype(self):
        return self.policy.jnp_dtype

    @property
    def dot_precision(self):
        """``precision=`` of the network's dots and convolutions (HIGHEST or None)."""
        return self.policy.dot_precision

    @property
    def num_bases(self) -> int:
        return sum(self.group_sizes)

    @property
    def size_multiple(self) -> int:
        """Input sides must be multiples of this (2^levels x window)."""
        return 2 ** len(self.depths) * self.window_size

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly (lists for tuples), as stored in ``model.json``."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any] | Any) -> "ModelConfig":
        """From a mapping (``model.json``'s ``model_config``, a ``ConfigDict``); keys that are not
        fields (``height``, ``width``, ``bases``) are ignored, missing or None fields default.

        ``dtype`` (what files and configs written before the precision policy hold) is read as
        a policy (:func:`camflow_jax.models.precision.from_legacy_dtype`: 'float32' -> the
        default 'exact', 'bfloat16' -> 'bfloat16'); next to ``precision`` it must agree with it."""
        if hasattr(mapping, "to_dict"):  # ml_collections.ConfigDict
            mapping = mapping.to_dict()
        if not isinstance(mapping, Mapping):
            raise ValueError(f"model_config must be a mapping, got {type(mapping).__name__}")
        if "group_sizes" not in mapping:
            raise ValueError("model_config needs 'group_sizes', e.g. [12, 12] (CamFlow) or [12, 12, 12] (CamFlow+)")
        values = {k: mapping[k] for k in FIELDS if mapping.get(k) is not None}
        dtype = mapping.get("dtype")
        if dtype is not None:
            policy = precision_lib.from_legacy_dtype(str(dtype), values.get("precision"))
            if values.setdefault("precision", policy) != policy:
                raise ValueError(f"model_config: dtype {dtype!r} contradicts precision {values['precision']!r}")
        return cls(**values)


#: Every architecture field, in declaration order.
FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))
#: The fields a training config sets in ``config.model`` (the groups follow from ``config.bases``).
NETWORK_FIELDS = tuple(k for k in FIELDS if k not in ("group_sizes", "group_names"))
