"""Which bases a model has: the one owner of that rule.

A model's motion bases are its static ones (homography | stochastic, fixed at the network's
size, described by the ``bases`` section of its ``model.json``) and, for CamFlow+, a depth group
built per image from that image's depth and intrinsics (3 bases per depth-pyramid blur). The
trainer, the checkpoint loader, the Predictor and the benchmarks all go through this module:

* :func:`spec_from_training_config`: the ``bases`` section a training config describes;
* :func:`depth_sigmas`: the depth pyramid's blurs (given, or the width's default);
* :func:`num_depth_bases`: the size of the depth group;
* :func:`static_bases`: the static bases a model config describes (numpy; computed once per
  machine and kept in the package's cache folder, :mod:`camflow_jax.compilation.store`);
* :func:`with_depth_bases`: one image's full basis set, static then depth (JAX, vmap-friendly).
"""

from __future__ import annotations

import io
from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from camflow_jax import bases as bases_lib
from camflow_jax.compilation import store

__all__ = ["DEFAULT_BASES", "spec_from_training_config", "depth_sigmas", "num_depth_bases", "static_bases",
           "with_depth_bases"]

#: The static bases of a model config without a ``bases`` section (the released structure).
DEFAULT_BASES = {"num_homography": 12, "num_stochastic": 12, "seed": 0, "orthogonal_to_homography": True}


def depth_sigmas(sigmas: Sequence[float] | None, width: int) -> tuple[float, ...]:
    """The depth pyramid's blurs: ``sigmas`` when given (non-empty), else the default for an
    image ``width`` px wide (:func:`camflow_jax.bases.default_depth_sigmas`). Given ones must be
    finite numbers >= 0 (:func:`camflow_jax.bases.check_depth_sigmas`: a ValueError naming
    ``bases.depth_sigmas`` otherwise, e.g. from a model.json)."""
    if sigmas is None or (isinstance(sigmas, (list, tuple)) and not sigmas):
        return tuple(bases_lib.default_depth_sigmas(int(width)))
    return bases_lib.check_depth_sigmas(sigmas, "bases.depth_sigmas")


def num_depth_bases(sigmas: Sequence[float]) -> int:
    """Bases in the depth group: three per blur (the x, y and radial translational bases)."""
    return 3 * len(sigmas)


def spec_from_training_config(config) -> dict:
    """The ``bases`` section of ``model.json`` that a training config (``config.bases``,
    ``config.model.width``) describes, depth blurs resolved."""
    b = config.bases
    return {"num_homography": int(b.num_homography), "num_stochastic": int(b.num_stochastic),
            "seed": int(b.seed), "orthogonal_to_homography": bool(b.orthogonal_to_homography),
            "use_depth": bool(b.use_depth),
            "depth_sigmas": list(depth_sigmas(b.depth_sigmas, config.model.width))}


def static_bases(model_config: Mapping[str, Any]) -> np.ndarray:
    """``[N_static, height, width, 2]``: the static (homography | stochastic) bases a model
    config (``height``, ``width`` and its ``bases`` section) describes.

    Computing them takes seconds (the stochastic bases' SVD of 240 random homography flows:
    4-8 s of CPU at 128x256 on the 2-core test machine), so they are computed once per machine
    and read back afterwards (``<cache_root>/bases/``, keyed by these settings, the versions
    and the package's source; bit-identical: docs/performance.md, "Compile once")."""
    spec = {**DEFAULT_BASES, **dict(model_config.get("bases") or {})}
    h, w = int(model_config["height"]), int(model_config["width"])
    args = (int(spec["num_homography"]), int(spec["num_stochastic"]), int(spec["seed"]),
            bool(spec["orthogonal_to_homography"]))
    parts = ["static_bases", h, w, *args]
    shape = (args[0] + args[1], h, w, 2)
    data = store.read("bases", parts)
    if data is not None:
        try:
            kept = np.load(io.BytesIO(data), allow_pickle=False)
            if kept.shape == shape and kept.dtype == np.float32 and np.all(np.isfinite(kept)):
                return kept
        except (ValueError, EOFError, OSError):
            pass  # damaged: compute them again
    out = np.asarray(bases_lib.static_bases(h, w, *args[:3], orthogonal_to_homography=args[3]), np.float32)
    buf = io.BytesIO()
    np.save(buf, out, allow_pickle=False)
    store.write("bases", parts, buf.getvalue())
    return out


def with_depth_bases(static, depth, K, sigmas: Sequence[float]):
    """One image's basis set ``[N_static + 3 S, h, w, 2]``: the static bases, then the depth
    group built from ``depth`` ``[h, w]`` and ``K`` (fx, fy, cx, cy) at the same size."""
    dep = bases_lib.depth_translational_bases(depth, K, tuple(sigmas))
    return jnp.concatenate([static, dep], axis=0)
