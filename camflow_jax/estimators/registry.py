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

Adding an estimator: a class with ``_estimate`` decorated with :func:`register` in this module,
plus its test.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from typing import Any, Callable

import numpy as np

from camflow_jax.geometry import classical, host, photometric
from camflow_jax.geometry import plausibility as plausibility_lib

__all__ = ["Motion", "Estimator", "register", "get", "resolve", "describe", "takes_option", "without_refinement",
           "is_camflow", "check_pair", "NAMES", "CLASSICAL", "ALIASES", "ORACLES"]

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
class Motion:
    """One estimator's answer for an image pair.

    flow_f: ``[H, W, 2]`` float32 on image 1's grid. flow_b: ``[H, W, 2]`` on image 2's grid,
    or None (not computed). homography: ``[3, 3]`` float64 image-1 -> image-2 pixels with
    H[2, 2] = 1, or None. weights: ``[H, W]`` float32 per-pixel inlier weight in [0, 1], or
    None. note: "" or one line (e.g. "identity fallback: too few feature matches").
    fallback: True when the estimator failed and the identity motion was returned.
    extras: free-form (e.g. the network's full output dict).
    """

    flow_f: np.ndarray
    flow_b: np.ndarray | None = None
    homography: np.ndarray | None = None
    weights: np.ndarray | None = None
    note: str = ""
    fallback: bool = False
    extras: dict = dataclasses.field(default_factory=dict)


def _identity_motion(h: int, w: int, note: str = "", fallback: bool = False) -> Motion:
    zero = np.zeros((h, w, 2), np.float32)
    return Motion(zero, zero.copy(), np.eye(3), note=note, fallback=fallback)


def check_pair(img1, img2) -> tuple[np.ndarray, np.ndarray]:
    """The two images as arrays; ValueError unless they are [H, W, 3] or [H, W] of one shape."""
    a, b = np.asarray(img1), np.asarray(img2)
    if a.ndim not in (2, 3) or a.shape != b.shape:
        raise ValueError(f"expected two images of the same shape [H, W, 3] or [H, W], got "
                         f"{a.shape} and {b.shape}")
    return a, b


class Estimator:
    """Base class: ``est(img1, img2, *, depth1=None, depth2=None, intrinsics=None) -> Motion``.

    Subclasses implement ``_estimate(a, b, depth1, depth2, intrinsics)``; ``name`` is the
    registry name the estimator was made with.
    """

    name = "estimator"
    checked = True  # the plausibility checks apply (camflow_jax.geometry.plausibility)

    def __call__(self, img1, img2, *, depth1=None, depth2=None, intrinsics=None) -> Motion:
        """The motion of the pair, checked by :mod:`camflow_jax.geometry.plausibility`: identical images
        give zero motion; a featureless image, an answer that aligns the pair worse than no
        motion, or one that leaves the pair unexplained (no motion the estimator found fits it),
        gives the identity with ``fallback`` set and a note saying why (the dropped answer is
        kept as ``extras["dropped"]``). :meth:`raw` skips the checks (as does the
        ``identity`` estimator, a reference whose answer is zero anyway)."""
        if not self.checked:
            return self.raw(img1, img2, depth1=depth1, depth2=depth2, intrinsics=intrinsics)
        a, b = check_pair(img1, img2)
        return self._screen(a, b) or self._vet(a, b, self._estimate(a, b, depth1, depth2, intrinsics))

    #: pairs per :meth:`estimate_many` call worth gathering (camflow: its predictor's choice)
    batch_size = 1

    def estimate_many(self, pairs, *, checked: bool = True) -> list[Motion]:
        """The motions of several pairs, each as the call gives it (``checked=False``: as
        :meth:`raw` gives it): ``pairs`` holds ``(img1, img2)`` or ``(img1, img2, depth1,
        depth2, intrinsics)`` tuples. Estimators that gain from batches (camflow:
        :meth:`camflow_jax.predictor.Predictor.predict_batch`) override it."""
        call = self if checked else self.raw
        return [call(p[0], p[1], **dict(zip(("depth1", "depth2", "intrinsics"), p[2:]))) for p in pairs]

    def _screen(self, a, b) -> Motion | None:
        """The answer for a pair that needs no estimate (identical or featureless images), or
        None."""
        h, w = a.shape[:2]
        if np.array_equal(a, b):
            return _identity_motion(h, w, "identical images: zero motion")
        reason = plausibility_lib.featureless(a, b)
        if reason:
            return _identity_motion(h, w, f"identity fallback: {reason}", fallback=True)
        return None

    def _vet(self, a, b, m: Motion) -> Motion:
        """The estimate ``m`` of the pair, or the identity with a note where it aligns the pair
        worse than no motion or leaves it unexplained (the call's doc): the reasons of
        :func:`camflow_jax.geometry.plausibility.report`, taken from the answer where it carries
        one (the Predictor's, ``extras["plausibility"]``), else measured here on the pair with image 2
        exposure-matched (:func:`camflow_jax.geometry.photometric.compensate`). The report's
        notes (an exposure matched, one image much blurrier) and its forward-backward reason (the
        directions contradict each other: a note here, not a fallback) join the answer's note."""
        h, w = a.shape[:2]
        if m.fallback or np.shape(m.flow_f) != (h, w, 2) or not np.all(np.isfinite(m.flow_f)):
            # a non-finite flow is the caller's to refuse (a damaged model, not a bad pair); a
            # flow at another size (a predictor's network-size output) the caller's to resize
            return m
        rep = m.extras.get("plausibility") if isinstance(m.extras, dict) else None
        if not isinstance(rep, dict) or "reasons" not in rep:
            # the forward flow alone (an estimator's flow_b may be its own second estimate: no consistency test)
            matched, exposure = photometric.compensate(a, b)
            rep = plausibility_lib.report(a, matched, {"flow_f": m.flow_f}, exposure)
        refuse = [r for r in rep["reasons"] if r != rep.get("inconsistent")]
        if refuse:
            return dataclasses.replace(
                _identity_motion(h, w, f"identity fallback: the {self.name} estimate was dropped: {refuse[0]}",
                                 fallback=True), extras={"dropped": m})
        notes = [*rep["notes"], *([f"the {self.name} estimate's {rep['inconsistent']}"] if rep.get("inconsistent") else [])]
        return dataclasses.replace(m, note="; ".join(n for n in (m.note, *notes) if n)) if notes else m

    def raw(self, img1, img2, *, depth1=None, depth2=None, intrinsics=None) -> Motion:
        """The estimator's own answer, without the plausibility checks (what the evaluation
        tables measure)."""
        a, b = check_pair(img1, img2)
        return self._estimate(a, b, depth1, depth2, intrinsics)

    def _estimate(self, a, b, depth1, depth2, intrinsics) -> Motion:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<estimator {self.name}>"


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


# ----------------------------------------------------------------------------- classical
@register("identity", "zero motion (a control)")
class _Identity(Estimator):
    checked = False

    def __init__(self, forward_only: bool = False):
        pass

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        return _identity_motion(*a.shape[:2])


class _HomographyEstimator(Estimator):
    """Shared tail of the homography methods: flows of H and H^-1, identity on failure."""

    def __init__(self, forward_only: bool = False):
        self.forward_only = forward_only

    def _motion(self, H, h: int, w: int, failure: str, note: str = "") -> Motion:
        if H is None:
            return _identity_motion(h, w, f"identity fallback: {failure}", fallback=True)
        flow_b = None if self.forward_only else host.homography_flow(np.linalg.inv(H), h, w)
        return Motion(host.homography_flow(H, h, w), flow_b, np.asarray(H, np.float64), note=note)


class _Feature(_HomographyEstimator):
    def __init__(self, detector: str, robust: str, *, ratio: float = 0.7, threshold: float = 3.0,
                 min_matches: int = 10, max_features: int = 4000, stretch: bool = False,
                 forward_only: bool = False):
        super().__init__(forward_only)
        self.detector, self.robust = detector, robust
        self.options = {"ratio": ratio, "threshold": threshold, "min_matches": min_matches,
                        "max_features": max_features, "stretch": bool(stretch)}
        # consecutive video pairs share a frame: its features are detected once (exact reuse)
        self.cache = classical.FeatureCache(8)

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        H = classical.feature_homography(a, b, self.detector, self.robust, cache=self.cache,
                                         **self.options)
        return self._motion(H, *a.shape[:2], "too few feature matches")


for _det, _det_text in (("sift", "SIFT"), ("orb", "ORB")):
    for _rob, _rob_text in (("ransac", "RANSAC"), ("magsac", "MAGSAC++")):
        register(f"{_det}_{_rob}", f"{_det_text} matches (ratio test) + {_rob_text} homography")(
            functools.partial(_Feature, _det, _rob))
del _det, _det_text, _rob, _rob_text


class _KLT(_HomographyEstimator):
    def __init__(self, robust: str, *, max_corners: int = 1000, quality: float = 0.01,
                 min_distance: int = 8, window: int = 21, levels: int = 3, round_trip: float = 0.5,
                 threshold: float = 3.0, min_tracks: int = 10, stretch: bool = False,
                 forward_only: bool = False):
        super().__init__(forward_only)
        self.robust = robust
        self.options = {"max_corners": max_corners, "quality": quality, "min_distance": min_distance,
                        "window": window, "levels": levels, "round_trip": round_trip,
                        "threshold": threshold, "min_tracks": min_tracks, "stretch": bool(stretch)}

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        H = classical.klt_homography(a, b, self.robust, **self.options)
        return self._motion(H, *a.shape[:2], "too few corner tracks")


for _rob, _rob_text in (("ransac", "RANSAC"), ("magsac", "MAGSAC++")):
    register(f"klt_{_rob}", f"Shi-Tomasi corners tracked by pyramidal Lucas-Kanade (round trip checked) "
                            f"+ {_rob_text} homography")(functools.partial(_KLT, _rob))
del _rob, _rob_text


@register("ecc", "OpenCV ECC (enhanced correlation coefficient) homography, coarse to fine")
class _ECC(_HomographyEstimator):
    def __init__(self, *, min_side: int = 64, gauss_size: int = 5, iterations: int = 100,
                 eps: float = 1e-6, forward_only: bool = False):
        super().__init__(forward_only)
        self.options = {"min_side": min_side, "gauss_size": gauss_size, "iterations": iterations,
                        "eps": eps}

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        H, note = classical.ecc_homography(a, b, **self.options)
        return self._motion(H, *a.shape[:2], note, note)


def _fitted_homography(flow: np.ndarray) -> np.ndarray | None:
    """Least-squares homography of a dense flow (:func:`camflow_jax.geometry.device.fit_homography`),
    or None when none can be fitted."""
    from camflow_jax.geometry import device
    H, valid = device.fit_homography(flow, return_valid=True)
    if not bool(valid):
        return None
    H = np.asarray(H, np.float64)
    return H / H[2, 2]


@register("dis", "OpenCV DIS dense optical flow (both directions); homography fitted to it")
class _DIS(Estimator):
    def __init__(self, *, preset: str = "medium", forward_only: bool = False):
        self.preset, self.forward_only = preset, forward_only

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        flow_f = classical.dis_flow(a, b, self.preset)
        if self.forward_only:
            return Motion(flow_f)
        H = _fitted_homography(flow_f)
        note = "" if H is not None else "no homography can be fitted to the flow"
        return Motion(flow_f, classical.dis_flow(b, a, self.preset), H, note=note)


# ----------------------------------------------------------------------------- CamFlow
@register("camflow", "the CamFlow model (shipped, or checkpoint=) with test-time refinement")
class _CamFlow(Estimator):
    """A :class:`camflow_jax.predictor.Predictor`, loaded once on first use (or given as
    ``predictor``: anything called ``predictor(img1, img2, depth1=, depth2=, intrinsics=,
    refine=)`` returning the Predictor's dict). ``confidence=True`` also asks it for the
    confidence maps (``confidence=True`` in the call; logvar_f, logvar_b in ``extras``); by
    default the network runs its flows-only path. ``forward_only=True``: the Predictor's
    forward-only path (no backward flow; about half the network's and the refinement's work),
    for a predictor whose call takes ``forward_only``."""

    refine = True

    def __init__(self, *, checkpoint: str | None = None, channel_order: str = "rgb", predictor=None,
                 forward_only: bool = False, confidence: bool = False, refine_size: int | None = None):
        if predictor is not None and checkpoint is not None:
            raise ValueError("give a predictor or a checkpoint, not both")
        if refine_size is not None:
            if not self.refine:
                raise ValueError("refine_size needs the refined camflow, not the network alone")
            from camflow_jax.refine import RefineConfig

            self.refine = RefineConfig.at_size(int(refine_size))  # ValueError below the default's size
        self.refine_size = None if refine_size is None else int(refine_size)
        self.checkpoint, self.channel_order = checkpoint, channel_order
        self.confidence = bool(confidence)
        self.forward_only = bool(forward_only)
        self._predictor = predictor
        self._extra = None

    @property
    def predictor(self):
        """The model (loaded here on first access)."""
        if self._predictor is None:
            from camflow_jax.predictor import Predictor

            self._predictor = Predictor.load(self.checkpoint, channel_order=self.channel_order)
        return self._predictor

    def refine_for(self, h: int, w: int):
        """``(refine setting, note)`` for an ``h`` x ``w`` pair. With ``refine_size`` N the
        refinement works at up to N px: a pair whose longer side is below N refines at its own
        size, with :meth:`RefineConfig.at_size` of that size (the default's below 288 px), and a
        note says so (a 192 px pair at ``at_size(4608)`` had 7 pyramid levels, the coarsest 3 px
        wide, and the result fell back to the network's)."""
        if self.refine_size is None or max(h, w) >= self.refine_size:
            return self.refine, ""
        from camflow_jax.refine import RefineConfig

        size = max(RefineConfig().max_size, max(h, w))
        return (RefineConfig.at_size(size),
                f"refine size {self.refine_size} is larger than the pair ({max(h, w)} px on its longer side): "
                f"refined at {size} px")

    def _call_options(self) -> dict:
        """The predictor call's keyword options beyond the pair's (confidence, forward_only),
        only those asked for; forward_only only where the predictor's call takes it."""
        if self._extra is None:
            extra = {"confidence": True} if self.confidence else {}
            if self.forward_only:
                try:
                    params = inspect.signature(self.predictor).parameters
                except (TypeError, ValueError):  # no signature to read: the plain protocol
                    params = {}
                if "forward_only" in params:
                    extra["forward_only"] = True
            self._extra = extra
        return self._extra

    def _estimate(self, a, b, depth1, depth2, intrinsics):
        extra = self._call_options()
        refine, size_note = self.refine_for(*np.shape(a)[:2])
        out = self.predictor(a, b, depth1=depth1, depth2=depth2, intrinsics=intrinsics,
                             refine=refine, **extra)
        return self._motion(out, size_note)

    @property
    def batch_size(self) -> int:
        """:func:`preferred_batch_size` of the predictor (loading it)."""
        return preferred_batch_size(self.predictor)

    def estimate_many(self, pairs, *, checked: bool = True) -> list[Motion]:
        """:meth:`Estimator.estimate_many` with the pairs that need the model in batches of
        :meth:`camflow_jax.predictor.Predictor.predict_batch` (a predictor without it: one
        call per pair); the same checks as the call (``checked=False``: none, as :meth:`raw`)."""
        if not hasattr(self.predictor, "predict_batch"):
            return super().estimate_many(pairs, checked=checked)
        checked = checked and self.checked
        out: list = [None] * len(pairs)
        todo = {}  # the refine setting (per size) -> [(index, a, b, depth1, depth2, K)]
        for i, p in enumerate(pairs):
            a, b = check_pair(p[0], p[1])
            early = self._screen(a, b) if checked else None
            if early is not None:
                out[i] = early
                continue
            refine, note = self.refine_for(*a.shape[:2])
            cam = tuple(p[2:]) + (None,) * (5 - len(p))
            todo.setdefault((repr(refine), note), (refine, note, []))[2].append((i, a, b, *cam))
        extra = self._call_options()
        for refine, note, items in todo.values():
            with_depth = [it for it in items if it[3] is not None]
            for group in (with_depth, [it for it in items if it[3] is None]):
                if not group:
                    continue
                cams = {} if group[0][3] is None else {"depths1": [it[3] for it in group],
                                                       "depths2": [it[4] for it in group]}
                Ks = [it[5] for it in group]
                if all(K is not None for K in Ks):
                    cams["intrinsics"] = np.stack([np.asarray(K, np.float64).reshape(4) for K in Ks])
                elif any(K is not None for K in Ks):  # some with intrinsics, some without: one at a time
                    call = self if checked else self.raw
                    for it in group:
                        out[it[0]] = call(it[1], it[2], depth1=it[3], depth2=it[4], intrinsics=it[5])
                    continue
                results = self.predictor.predict_batch([it[1] for it in group], [it[2] for it in group],
                                                       refine=refine, **cams, **extra)
                for it, res in zip(group, results):
                    m = self._motion(res, note)
                    out[it[0]] = self._vet(it[1], it[2], m) if checked else m
        return out

    @staticmethod
    def _motion(out, size_note: str) -> Motion:
        """The Motion of a predictor's result dict."""
        if not isinstance(out, dict) or "flow_f" not in out:
            raise ValueError("the camflow predictor must return a dict with 'flow_f'")
        info = out.get("refine_info") or {}
        H, weights = out.get("homography"), out.get("weights_f")
        if weights is not None:  # [H, W] (a trailing channel of 1 is dropped)
            weights = np.asarray(weights, np.float32).reshape(np.shape(out["flow_f"])[:2])
        note = "; ".join(n for n in (size_note, str(info.get("note") or "")) if n)
        return Motion(out["flow_f"], out.get("flow_b"), None if H is None else np.asarray(H, np.float64),
                      weights, note, extras=out)


@register("camflow_net", "the CamFlow network alone (no test-time refinement)")
class _CamFlowNet(_CamFlow):
    refine = False


def preferred_batch_size(predictor) -> int:
    """Pairs per batch worth gathering for ``predictor``: its ``preferred_batch_size()`` where it
    has one and :meth:`~camflow_jax.predictor.Predictor.predict_batch`, else 1."""
    pick = getattr(predictor, "preferred_batch_size", None)
    return int(pick()) if callable(pick) and hasattr(predictor, "predict_batch") else 1


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
