"""The estimator registry: every camera-motion estimator of the package, by name, behind one call.

    from camflow_jax.estimators import registry
    est = registry.get("sift_magsac")                   # or "ecc", "camflow", "camflow:CKPT", ...
    m = est(img1, img2)                                 # -> Motion
    m.flow_f, m.flow_b, m.homography, m.weights, m.note

Every estimator is called the same way, ``est(img1, img2, *, depth1=None, depth2=None,
intrinsics=None) -> Motion``, on two images ``[H, W, 3]`` (RGB) or ``[H, W]`` of the same size
(uint8 or float in 0..255). Only the CamFlow estimators use depth and intrinsics; the others
ignore them. Conventions as in docs/design.md, "Conventions": ``warp(img2, flow_f) ≈ img1``,
the homography maps image-1 pixels to image-2 pixels.

The names (:data:`NAMES`; :func:`describe` gives one help line each) are ``identity``,
``sift_ransac``, ``sift_magsac``, ``orb_ransac``, ``orb_magsac``, ``ecc``, ``dis``, ``camflow``
(the CamFlow model with test-time refinement), ``camflow_net`` (the network alone), and
``camflow:PATH`` / ``camflow_net:PATH`` (a checkpoint); docs/estimation.md describes each.

Old names: ``sift`` and ``orb`` mean ``sift_ransac`` and ``orb_ransac`` (what the stabilizer
called them); :func:`resolve` maps them and says so in a one-line note.

Homography estimators give ``flow_b`` as the flow of the inverse homography; on failure (too few
feature matches, no convergence) they return the identity motion with ``fallback=True`` and a
note (a stale motion is never reused). :data:`ORACLES` names the evaluation-only references,
which need a dataset sample's labels and are not estimators of an image pair.

The modules: :mod:`.base` (:class:`Motion`, the :class:`Estimator` base class, :func:`check_pair`;
re-exported here), :mod:`.classical` (the estimators without a model) and :mod:`.camflow` (the
CamFlow estimators); this module names them.

Adding an estimator: a subclass of :class:`Estimator` with ``_estimate`` (in :mod:`.classical`, or
a module of its own), a :func:`register` line in this module's list of names, plus its test.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from typing import Any, Callable

from camflow_jax.estimators import camflow, classical
from camflow_jax.estimators.base import Estimator, Motion, check_pair
from camflow_jax.estimators.camflow import preferred_batch_size

__all__ = ["Motion", "Estimator", "register", "get", "resolve", "describe", "takes_option", "without_refinement",
           "is_camflow", "check_pair", "preferred_batch_size", "NAMES", "CLASSICAL", "ALIASES", "ORACLES"]

#: Evaluation-only references (``python -m camflow_jax.evaluate``): they read a dataset sample's
#: labels, so they cannot run on a plain image pair and :func:`get` refuses them.
ORACLES = {
    "gt_homography": "the sample's ground-truth / pseudo-label homography (evaluation only)",
    "gyro": "GHOF's gyroscope field (evaluation only)",
}

#: Old names still accepted (with a note): the stabilizer's ``sift`` / ``orb`` used RANSAC.
ALIASES = {"sift": "sift_ransac", "orb": "orb_ransac"}

_CAMFLOW = ("camflow", "camflow_net")  # names that also take ":PATH"


@dataclasses.dataclass(frozen=True)
class _Entry:
    factory: Callable[..., Estimator]
    summary: str


_REGISTRY: dict[str, _Entry] = {}


def register(name: str, summary: str):
    """Class (or factory) decorator adding ``name`` to the registry; ``summary`` is its help line."""
    def deco(factory):
        if name in _REGISTRY or name in ALIASES or name in ORACLES:
            raise ValueError(f"estimator {name!r} is already defined")
        _REGISTRY[name] = _Entry(factory, summary)
        return factory

    return deco

# ----------------------------------------------------------------------------- the names
register("identity", "zero motion (a control)")(classical.Identity)
for _det, _det_text in (("sift", "SIFT"), ("orb", "ORB")):
    for _rob, _rob_text in (("ransac", "RANSAC"), ("magsac", "MAGSAC++")):
        register(f"{_det}_{_rob}", f"{_det_text} matches (ratio test) + {_rob_text} homography")(
            functools.partial(classical.Feature, _det, _rob))
del _det, _det_text, _rob, _rob_text
for _rob, _rob_text in (("ransac", "RANSAC"), ("magsac", "MAGSAC++")):
    register(f"klt_{_rob}", f"Shi-Tomasi corners tracked by pyramidal Lucas-Kanade (round trip checked) "
                            f"+ {_rob_text} homography")(functools.partial(classical.KLT, _rob))
del _rob, _rob_text
register("ecc", "OpenCV ECC (enhanced correlation coefficient) homography, coarse to fine")(classical.ECC)
register("dis", "OpenCV DIS dense optical flow (both directions); homography fitted to it")(classical.DIS)
register("camflow", "the CamFlow model (shipped, or checkpoint=) with test-time refinement")(camflow.CamFlow)
register("camflow_net", "the CamFlow network alone (no test-time refinement)")(camflow.CamFlowNet)

# ----------------------------------------------------------------------------- lookup
#: Every registered name (``camflow`` and ``camflow_net`` also take ``:PATH``).
NAMES = tuple(_REGISTRY)
#: The names that need no model (OpenCV and the identity).
CLASSICAL = tuple(n for n in NAMES if n not in _CAMFLOW)


def _valid_names() -> str:
    return ", ".join(NAMES + tuple(f"{n}:PATH" for n in _CAMFLOW))


def resolve(name: str) -> tuple[str, str]:
    """``(canonical name, note)``: old names map to their registry name with a one-line note
    ("" otherwise). ValueError (one line, listing the valid names) for an unknown name or an
    evaluation-only oracle."""
    name = str(name).strip()
    if name in ALIASES:
        new = ALIASES[name]
        return new, f"estimator {name!r} is now called {new!r} (same method); use {new!r}"
    base, sep, path = name.partition(":")
    if name in _REGISTRY or (sep and base in _CAMFLOW and path):
        return name, ""
    if name in ORACLES:
        raise ValueError(f"{name!r} is an evaluation-only oracle (it needs the dataset's labels; "
                         f"python -m camflow_jax.evaluate runs it); estimators: {_valid_names()}")
    raise ValueError(f"unknown estimator {name!r}; choose from {_valid_names()}")


def get(name: str, **options: Any) -> Estimator:
    """A ready-to-call estimator by name (module doc). ``options`` are the estimator's own:

    sift_* / orb_*: ``ratio`` (0.7), ``threshold`` (3.0 px), ``min_matches``, ``max_features``,
    ``stretch`` (contrast-stretch the grey images first); klt_*: ``max_corners``, ``quality``,
    ``min_distance``, ``window``, ``levels``, ``round_trip``, ``threshold`` (3.0 px),
    ``min_tracks``, ``stretch``; dis: ``preset`` ('medium'); ecc: ``min_side``, ``gauss_size``, ``iterations``, ``eps``;
    camflow*: ``checkpoint`` (default: the shipped model; ``camflow:PATH`` sets it),
    ``channel_order``, ``predictor`` (an already loaded model), ``confidence`` (also return
    the confidence maps), ``refine_size`` (camflow: refine at up to this longer side instead of
    288 px, :meth:`camflow_jax.refine.RefineConfig.at_size`: slower, more precise on finely
    textured images; a smaller pair refines at its own size, with a note). All take
    ``forward_only`` (True: flow_f only where skipping flow_b saves work; the stabilizer's
    setting).

    An old name (:data:`ALIASES`) works and warns once per call; CLIs :func:`resolve` it first
    and print the note. Unknown names and options: ValueError.
    """
    canonical, note = resolve(name)
    if note:
        warnings.warn(note, FutureWarning, stacklevel=2)
    base, _, path = canonical.partition(":")
    if path:
        if options.get("checkpoint") not in (None, path):
            raise ValueError(f"{canonical!r} names a checkpoint; do not also give checkpoint=")
        options["checkpoint"] = path
    entry = _REGISTRY[base]
    params = inspect.signature(entry.factory).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        takes = ", ".join(p for p in params if params[p].kind == inspect.Parameter.KEYWORD_ONLY
                          or params[p].default is not inspect.Parameter.empty)
        raise ValueError(f"estimator {base!r} takes no option {', '.join(unknown)}; it takes: {takes}")
    est = entry.factory(**options)
    est.name = canonical
    return est


def takes_option(name: str, option: str) -> bool:
    """Whether the estimator ``name`` (any name :func:`resolve` accepts) takes ``option``."""
    base = resolve(name)[0].partition(":")[0]
    return option in inspect.signature(_REGISTRY[base].factory).parameters


def without_refinement(name: str) -> str:
    """The network-only twin of a CamFlow name (``camflow`` -> ``camflow_net``, ``camflow:P`` ->
    ``camflow_net:P``); other names unchanged (``--no-refine`` of the CLIs)."""
    base, sep, path = name.partition(":")
    return f"camflow_net{sep}{path}" if base == "camflow" else name


def is_refined(name: str) -> bool:
    """Whether ``name`` is the refined CamFlow (``camflow``, with or without ``:PATH``): the
    estimator a refinement setting such as ``refine_size`` applies to."""
    return name.partition(":")[0] == "camflow"


def require_refined_method(refine_size: int | None, names) -> None:
    """A refinement size (``--refine-size``) applies to the refined CamFlow only: ValueError
    unless ``refine_size`` is None or one of ``names`` :func:`is_refined`."""
    if refine_size is not None and not any(is_refined(n) for n in names):
        raise ValueError("a refinement size needs a refined camflow method (camflow or camflow:PATH, "
                         "not camflow_net)")


def is_camflow(name: str) -> bool:
    """Whether ``name`` runs the CamFlow model (``camflow``, ``camflow_net``, with or without ``:PATH``)."""
    return name.partition(":")[0] in _CAMFLOW


def describe() -> str:
    """Help text: one line per name, the old names and the evaluation-only oracles."""
    lines = [f"{n}: {e.summary}" for n, e in _REGISTRY.items()]
    lines.append("camflow:PATH, camflow_net:PATH: the same with the checkpoint at PATH")
    lines.append("old names: " + ", ".join(f"{a} = {n}" for a, n in ALIASES.items()))
    return "\n".join(lines)
