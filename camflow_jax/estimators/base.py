"""The estimators' common types: :class:`Motion` (one estimator's answer for an image pair), the
:class:`Estimator` base class (the call, its plausibility checks, :meth:`Estimator.raw`,
:meth:`Estimator.estimate_many`), :func:`check_pair` and :func:`identity_motion`.

The estimators themselves live in :mod:`.classical` and :mod:`.camflow`; :mod:`.registry` names
them (``registry.get(name)``) and re-exports these types.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from camflow_jax.geometry import photometric
from camflow_jax.geometry import plausibility as plausibility_lib

__all__ = ["Motion", "Estimator", "check_pair", "identity_motion"]

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


def identity_motion(h: int, w: int, note: str = "", fallback: bool = False) -> Motion:
    """The zero motion of an ``h`` x ``w`` pair (flows zero, homography the identity)."""
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
            return identity_motion(h, w, "identical images: zero motion")
        reason = plausibility_lib.featureless(a, b)
        if reason:
            return identity_motion(h, w, f"identity fallback: {reason}", fallback=True)
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
                identity_motion(h, w, f"identity fallback: the {self.name} estimate was dropped: {refuse[0]}",
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
