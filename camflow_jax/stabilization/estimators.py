"""Camera-motion estimators for stabilization: the registry's estimators
(:mod:`camflow_jax.estimators.registry`, where every name lives) with the stabilizer's bookkeeping.

A stabilization estimator is a callable ``estimator(frame_t, frame_t1) -> flow [H, W, 2]``
(float32 numpy) taking two RGB frames ``[H, W, 3]`` and returning the forward flow F_t on frame
t's grid that maps frame t to frame t+1 (docs/design.md, "Conventions": pixel p of frame t
matches p + F_t(p) in frame t+1, so ``warp(frame_t1, F_t) ≈ frame_t``). Homography methods are
sampled as per-pixel displacement fields, so the smoothing and rendering stages see the same
representation for every method (paper §"Video Stabilization"). Only ``flow_f`` is used, so the
registry estimators run with ``forward_only=True``.

Every estimator counts its calls and failures (``stats()``). When its estimate fails (the
registry's identity fallback: too few feature matches, an estimate that aligns the pair worse
than no motion or leaves it unexplained (no motion fits), a featureless pair; or a non-finite
network output), the pair is measured
again by the fallback estimators (:data:`FALLBACKS`: ECC and DIS; each answer goes through the
same plausibility checks), and the answer that aligns the pair best is kept, counted per name
in ``stats()["recovered"]``. A pair that none
of them measures is a failure: listed in ``failed_pairs``, returned as zeros (a placeholder),
and filled by the pipeline from its neighbours where it can
(:func:`camflow_jax.stabilization.pipeline.fill_failed_pairs`). A stale motion is never reused
silently. docs/stabilization.md, "When an estimator fails", has the measurements behind the
order.

Moving objects (camflow): the refined flow is a combination of global motion bases, fitted by
a robust (Cauchy) photometric cost; a large moving object (a passing car, a hand) bends it
towards its own motion. The stabilizer keeps only the camera's motion, in two steps. First
(``inlier_fit=True``) :func:`camflow_jax.geometry.background.inlier_homography` fits a
homography, with RANSAC, to the refined flow at the pixels the refinement's IRLS weights (the
Predictor's ``weights_f``, an inlier map) call inliers; a large object still leaves that fit
between its motion and the camera's. Then
(``two_motion_check=True``, the default; ``stabilize --no-two-motions`` turns it off) a grid of
textured points is tracked from that homography's prediction
(:func:`camflow_jax.geometry.background.seeded_tracks`) and the tracks' rigid motions are
fitted (:func:`camflow_jax.geometry.background.track_motions`: the largest consensus, and a
second motion where one holds 15 % of the tracks). Of the fit and those motions, the one that
explains the most of the frame photometrically, in the refinement's own terms, is the
camera's (:func:`camflow_jax.refine.dominant_homography`; the pairs where a tracked motion
replaced the fit are counted in ``stats()["two_motion_pairs"]``). The estimator returns that
homography's flow. Feature estimators (``sift_ransac`` ...) are robust by their own RANSAC /
MAGSAC fit, which the stabilizer runs with a tighter inlier threshold than the registry's 3 px
(:data:`FEATURE_THRESHOLD_PX`): with 3 px, an object moving less than 6 px per frame relative
to the background lets RANSAC pick a compromise homography that half follows it (measured in
docs/stabilization.md, "Moving objects").

With a ``reference`` model (``stabilize --adapt``: the model the adapted one started from),
camflow measures each pair with both models, each estimate through the steps above. Where the
two motions agree within :data:`AGREE_PX` they are two estimates of one motion, and their mean
(:func:`camflow_jax.geometry.host.mean_homography`) is kept: on the development clips it was
nearer the exact motion than either model's, and choosing one of two such estimates moves the
stabilized shake by several per cent either way. Where they differ more, the reference's
motion is kept where it fits the pair better by both of the refinement's measures
(:func:`camflow_jax.refine.judge_flows`): a lower robust cost, and an inlier share at least as
large, which keeps a compromise with a large object from winning on cost alone
(docs/log/2026-12-06-two-motion-check.md); else the adapted model's. docs/adaptation.md,
"Stabilizing with --adapt".
"""

from __future__ import annotations

import copy
import time

import numpy as np

from camflow_jax.data import depth as depth_lib
from camflow_jax.estimators import registry
from camflow_jax.geometry import background, checks, host, plausibility
from camflow_jax.io.cpus import usable_cpus

__all__ = ["DEFAULT", "VideoEstimator", "RegistryEstimator", "CamFlowEstimator", "make_estimator"]

#: The stabilizer's default estimator: Shi-Tomasi corners tracked by Lucas-Kanade. On the hard
#: set's development seeds it beat SIFT matching on every clip, dark and blurred ones by 3-8x,
#: at a third of the time per pair (docs/stabilization.md, "Choosing the default estimator").
DEFAULT = "klt_ransac"

#: RANSAC / MAGSAC inlier threshold (pixels of the estimation size) of the stabilizer's feature
#: estimators (module doc); the registry's default is 3 px.
FEATURE_THRESHOLD_PX = 0.5

#: Per feature family (the name's first part): whether the stabilizer stretches each frame's
#: grey levels (1st..99th percentile to 0..255) before detection
#: (:func:`camflow_jax.geometry.classical.stretch_contrast`). On dark, noisy and blurred
#: development clips it cut SIFT's per-pair error 2-9x; it made KLT's worse on blurred clips (a
#: frame's stretch differs from its neighbour's, and Lucas-Kanade assumes one brightness in
#: both); docs/stabilization.md, "Dark and low-contrast frames".
FEATURE_STRETCH = {"sift": True, "orb": True, "klt": False}

#: Estimators that measure a pair again where the chosen one failed (module doc): ECC (a direct,
#: coarse-to-fine homography: it needs no features) and DIS dense flow; the one whose answer
#: aligns the pair best is kept.
FALLBACKS = ("ecc", "dis")

#: With a reference model (module doc): two motions of a pair whose largest distance over the
#: frame the estimator sees (pixels; at most ``StabilizerConfig.estimate_max_side`` on the longer
#: side) is at most this are averaged. On the hard set's development clips (seed 7) the adapted
#: and the unadapted model's motions differed by at most 0.63 px on every pair (dark, noisy
#: frames) and mostly by hundredths; averaging them lowered the per-pair error where they differ
#: (docs/adaptation.md, "Stabilizing with --adapt").
AGREE_PX = 1.0

#: Transitional (tools/eval_real.py checks names against it): the registry's names and old names.
ESTIMATORS = registry.NAMES + tuple(registry.ALIASES)


class VideoEstimator:
    """Base class of the stabilizer's estimators, which measure a video's consecutive frame pairs
    (the registry's :class:`camflow_jax.estimators.base.Estimator` measures one pair; these wrap
    it): subclasses implement ``_estimate`` and may return None for failure."""

    name = "estimator"

    #: the fallback estimators' names (module doc); ``()``: none
    fallbacks: tuple[str, ...] = FALLBACKS

    def __init__(self):
        self.calls = 0
        self.failures = 0
        self.seconds = 0.0
        self.times: list[float] = []  # seconds per call (the first may include compilation)
        self.failed_pairs: list[int] = []  # pairs (call indices) that no estimator measured
        self.recovered: dict[str, int] = {}  # pairs each fallback measured

    #: pairs per :meth:`many` call that the pipeline gathers (1: one pair at a time)
    batch_size = 1

    def __call__(self, frame_t, frame_t1) -> np.ndarray:
        a, b = registry.check_pair(frame_t, frame_t1)
        t0 = time.perf_counter()
        return self._account(a, b, self._estimate(a, b), t0)

    def many(self, frame_pairs) -> list[np.ndarray]:
        """The flows of consecutive pairs ``[(frame_t, frame_t1), ...]``, as that many calls give
        them (estimators with a batched path override it)."""
        return [self(a, b) for a, b in frame_pairs]

    def _account(self, a, b, flow, t0: float, shared_s: float = 0.0) -> np.ndarray:
        """One call's bookkeeping: the fallbacks where ``flow`` failed, the time since ``t0``
        (plus ``shared_s``, the pair's share of a batch's time), the counters; returns the
        flow, or zeros for a pair no estimator measured (the pipeline fills it)."""
        h, w = a.shape[:2]
        flow = _finite(flow)
        if flow is None and self.fallbacks:
            flow = self._measure_again(a, b)
        self.times.append(time.perf_counter() - t0 + shared_s)
        self.seconds += self.times[-1]
        self.calls += 1
        if flow is None:
            self.failures += 1
            self.failed_pairs.append(self.calls - 1)
            return np.zeros((h, w, 2), np.float32)  # a placeholder: the pipeline fills the pair
        if flow.shape != (h, w, 2):
            raise ValueError(f"{self.name}: flow has shape {flow.shape}, expected {(h, w, 2)}")
        return flow

    def _measure_again(self, a, b) -> np.ndarray | None:
        """The flow of the fallback estimator that aligns the pair best (the smallest mean
        |image 1 - warped image 2|), counted in ``recovered``; None when none measures it."""
        best = None
        for name in self.fallbacks:
            if name == self.name:
                continue
            m = self._fallback(name)(a, b)
            flow = None if m.fallback else _finite(m.flow_f)
            if flow is None:
                continue
            err = plausibility.alignment_errors(a, b, flow)[0]
            if np.isfinite(err) and (best is None or err < best[0]):
                best = (err, name, flow)
        if best is None:
            return None
        self.recovered[best[1]] = self.recovered.get(best[1], 0) + 1
        return best[2]

    def _fallback(self, name: str):
        """The registry's estimator ``name``, made on first use and kept."""
        cache = self.__dict__.setdefault("_fallback_estimators", {})
        if name not in cache:
            cache[name] = registry.get(name, forward_only=True)
        return cache[name]

    def _estimate(self, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        raise NotImplementedError

    def fresh(self) -> "VideoEstimator":
        """A copy with zeroed counters sharing everything loaded (e.g. one model for many clips)."""
        new = copy.copy(self)
        VideoEstimator.__init__(new)
        return new

    def stats(self) -> dict:
        """Calls, failures (pairs no estimator measured), pairs each fallback measured, mean and
        median milliseconds per call (fallbacks included)."""
        ms = 1000.0 * self.seconds / self.calls if self.calls else 0.0
        med = 1000.0 * float(np.median(self.times)) if self.times else 0.0
        return {"estimator": self.name, "calls": self.calls, "failures": self.failures,
                "recovered": dict(self.recovered), "ms_per_pair": ms, "ms_per_pair_median": med}


def _finite(flow) -> np.ndarray | None:
    """``flow`` as float32, or None when there is none or it is not finite."""
    if flow is None:
        return None
    flow = np.asarray(flow, np.float32)
    return flow if np.all(np.isfinite(flow)) else None


def default_workers() -> int:
    """Threads that measure frame pairs at once (:class:`RegistryEstimator`): the CPUs this
    process may use, at most :data:`MAX_WORKERS`."""
    return max(1, min(MAX_WORKERS, usable_cpus()))


#: The most threads :func:`default_workers` picks (OpenCV and numpy release the GIL in the
#: work that counts, so the pairs of a batch run in parallel).
MAX_WORKERS = 4


class RegistryEstimator(VideoEstimator):
    """A registry estimator by name (``registry.get(name, forward_only=True, **options)``);
    feature estimators get ``threshold=FEATURE_THRESHOLD_PX`` and their family's
    :data:`FEATURE_STRETCH` unless ``options`` set them.

    ``workers``: threads that measure the pairs of a :meth:`many` call at once (default
    :func:`default_workers`; 1: one after another). The answers, the fallbacks and the counters
    are exactly those of one call per pair in order; ``times`` then holds each pair's own
    time, not the stage's wall time.

    ``last_homography`` holds the latest fitted H (None after a failure or for dense methods),
    ``last_note`` the estimator's latest note.
    """

    #: pairs per worker in a :meth:`many` call
    PAIRS_PER_WORKER = 4

    def __init__(self, name: str, workers: int | None = None, **options):
        super().__init__()
        self.workers = default_workers() if workers is None else int(workers)
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._pool = None
        if registry.takes_option(name, "threshold"):
            # a feature estimator: the stabilizer's tighter inlier threshold and its family's
            # contrast stretch (module doc), unless the caller chose them
            family = registry.resolve(name)[0].partition("_")[0]
            options = {"threshold": FEATURE_THRESHOLD_PX, "stretch": FEATURE_STRETCH.get(family, False),
                       **options}
        self.motion_estimator = registry.get(name, forward_only=True, **options)
        self.name = self.motion_estimator.name
        self.last_homography = None
        self.last_note = ""

    @property
    def batch_size(self) -> int:
        return 1 if self.workers == 1 else self.workers * self.PAIRS_PER_WORKER

    def _estimate(self, a, b):
        return self._keep(self.motion_estimator(a, b))

    def _keep(self, m):
        """The flow of the registry's answer ``m`` (None for a failure); notes it as the latest."""
        self.last_homography = None if m.fallback else m.homography
        self.last_note = m.note
        return None if m.fallback else m.flow_f

    def many(self, frame_pairs) -> list[np.ndarray]:
        """The pairs measured by ``workers`` threads at once (class doc)."""
        if self.workers == 1 or len(frame_pairs) < 2:
            return super().many(frame_pairs)
        pairs = [registry.check_pair(a, b) for a, b in frame_pairs]

        def timed(pair):
            t0 = time.perf_counter()
            m = self.motion_estimator(*pair)
            return m, time.perf_counter() - t0

        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="estimate")
        out = []
        for (a, b), (m, seconds) in zip(pairs, self._pool.map(timed, pairs)):
            out.append(self._account(a, b, self._keep(m), time.perf_counter(), shared_s=seconds))
        return out

    def __getstate__(self):
        """Copies (:meth:`fresh`, ``copy``, pickling) get threads of their own."""
        state = dict(self.__dict__)
        state["_pool"] = None
        return state


class CamFlowEstimator(VideoEstimator):
    """The registry's ``camflow`` (``refine=False``: ``camflow_net``) around a loaded predictor,
    with per-frame depth for CamFlow+.

    ``predictor(img1, img2, depth1=, depth2=, intrinsics=, refine=)`` must return a dict whose
    ``flow_f`` is the forward flow ``[H', W', 2]`` or ``[1, H', W', 2]`` (numpy or jax); if its
    size differs from the frames' it is resized with :func:`camflow_jax.geometry.host.resize_flow`.
    ``camflow_jax.predictor.Predictor`` satisfies this; :meth:`from_checkpoint` loads one.
    """

    def __init__(self, predictor, depth_files=None, intrinsics=None, fov_deg: float | None = None,
                 frame_size: tuple[int, int] | None = None, refine: bool = True,
                 inlier_fit: bool = True, refine_size: int | None = None, two_motion_check: bool = True,
                 reference=None):
        """``inlier_fit``: return the flow of
        :func:`~camflow_jax.geometry.background.inlier_homography` of the model's flow at the
        refinement's inlier pixels (module doc; the network alone has no weights, so the
        RANSAC fit alone then rejects outliers); False: the model's flow as it is.
        ``two_motion_check`` (with ``inlier_fit``; on by default, ``stabilize --no-two-motions``
        turns it off): the rigid motions of points tracked from that homography's prediction
        compete with it, and the one that explains the most of the frame is returned (module
        doc).
        ``depth_files``: one depth map per video frame (any resolution of the frame's aspect,
        any global scale), for CamFlow+'s depth bases; ``intrinsics`` (fx, fy, cx, cy) in pixels
        of the original ``frame_size`` (H, W), or ``fov_deg`` (horizontal field of view) with
        the principal point at the centre. The pipeline asks for pairs (t, t+1) in order, so the
        t-th call uses depth maps t and t+1. ``refine_size``: refine at this longer side
        (:meth:`camflow_jax.refine.RefineConfig.at_size`) instead of the default 288 px.
        ``reference``: None, or a second predictor, the model ``predictor``'s was adapted from
        (``stabilize --adapt``): every pair is measured with both, each estimate goes through the
        steps above; two motions within :data:`AGREE_PX` are averaged, else the reference's
        motion is kept where it fits the pair better by both the refinement's robust cost and
        the inlier share (module doc), else the model's; where one model's estimate fails, the
        other's. The pairs averaged and those where the reference's was kept are counted in
        ``stats()["averaged_pairs"]`` and ``stats()["reference_pairs"]`` (docs/adaptation.md,
        "Stabilizing with --adapt")."""
        super().__init__()
        if not callable(predictor):
            raise ValueError("CamFlowEstimator needs a callable predictor(img1, img2) -> dict")
        if intrinsics is not None and fov_deg is not None:
            raise ValueError("give intrinsics or a field of view, not both")
        if fov_deg is not None and not (np.isfinite(fov_deg) and 1.0 <= fov_deg <= 170.0):
            raise ValueError(f"field of view must be between 1 and 170 degrees, got {fov_deg}")
        if intrinsics is not None and frame_size is None:
            raise ValueError("intrinsics need the frame size they are given in")
        self.predictor = predictor
        # the forward flow is all the stabilizer reads: the Predictor's forward-only path
        options = {"forward_only": True, **({} if refine_size is None else {"refine_size": refine_size})}
        self.motion_estimator = registry.get("camflow" if refine else "camflow_net", predictor=predictor, **options)
        self.name = self.motion_estimator.name
        if reference is not None and not callable(reference):
            raise ValueError("the reference must be a callable predictor(img1, img2) -> dict, like the predictor")
        self.reference_estimator = None if reference is None else registry.get(
            "camflow" if refine else "camflow_net", predictor=reference, **options)
        self.reference_pairs = 0  # pairs where the reference model's motion was kept
        self.averaged_pairs = 0  # pairs where the two models' motions agreed and were averaged
        self.depth_files = list(depth_files) if depth_files is not None else None
        self.intrinsics = None if intrinsics is None else np.asarray(intrinsics, np.float64).reshape(4)
        self.fov_deg = fov_deg
        self.frame_size = frame_size
        self.inlier_fit = bool(inlier_fit)
        self.two_motion_check = bool(two_motion_check)
        self.two_motion_pairs = 0  # pairs where the tracks showed a second motion
        self.last_homography = None
        self._batch_size = None  # batch_size: by the predictor's device
        self.inlier_fractions: list[float] = []  # per pair: share of pixels with weight >= 0.5
        #: per pair: the model's forward basis coefficients (refined when refining), or None
        #: where the estimate failed (exported as zeros: the identity motion used there)
        self.coefficients: list = []

    @classmethod
    def from_checkpoint(cls, path: str | None, **kwargs) -> "CamFlowEstimator":
        """The model at ``path``, or the shipped one when ``path`` is None (loaded now)."""
        return cls(registry.get("camflow", checkpoint=path).predictor, **kwargs)

    def _camera(self, t: int, h: int, w: int):
        """(depth_t, depth_t+1, K) at the estimation size h x w, or Nones without depth."""
        if self.depth_files is None:
            return None, None, None
        if t + 1 >= len(self.depth_files):
            raise ValueError(f"the depth folder has {len(self.depth_files)} files, but the video has "
                             f"at least {t + 2} frames")
        maps = []
        for f in self.depth_files[t:t + 2]:
            d = checks.check_depth(depth_lib.read_depth(f), f"depth file {f}")  # the file named, not the Predictor's argument
            depth_lib.check_depth_aspect(d.shape, (h, w), f)
            maps.append(depth_lib.resize_depth(d, h, w))  # the predictor checks and fills it
        if self.intrinsics is not None:
            K = host.resize_intrinsics(self.intrinsics, self.frame_size, (h, w))
        else:
            fov = 60.0 if self.fov_deg is None else self.fov_deg
            fx = 0.5 * w / np.tan(np.deg2rad(fov) / 2)
            K = np.array([fx, fx, (w - 1) / 2, (h - 1) / 2], np.float32)
        return maps[0], maps[1], K

    @property
    def batch_size(self) -> int:
        """Pairs per :meth:`many` call: the predictor's ``preferred_batch_size()`` (8 where it
        refines batches as one program, on an accelerator; else 1), or what was set."""
        if self._batch_size is not None:
            return self._batch_size
        return registry.preferred_batch_size(self.predictor)

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        if value is not None and int(value) < 1:
            raise ValueError(f"batch_size must be at least 1, got {value}")
        self._batch_size = None if value is None else int(value)

    def many(self, frame_pairs) -> list[np.ndarray]:
        """The flows of consecutive pairs, the model's part in batches
        (:meth:`camflow_jax.estimators.registry.Estimator.estimate_many`)."""
        if len(frame_pairs) < 2:
            return super().many(frame_pairs)
        t0 = time.perf_counter()
        items = []
        for j, (x, y) in enumerate(frame_pairs):
            a, b = registry.check_pair(x, y)
            items.append((a, b, *self._camera(self.calls + j, a.shape[0], a.shape[1])))
        motions = self.motion_estimator.estimate_many(items)
        refs = ([None] * len(items) if self.reference_estimator is None
                else self.reference_estimator.estimate_many(items))
        share = (time.perf_counter() - t0) / len(items)
        flows = []
        for (a, b, *_), m, r in zip(items, motions, refs):
            t1 = time.perf_counter()
            flows.append(self._account(a, b, self._flow_of(m, a, b, r), t1, share))
        return flows

    def _estimate(self, a, b):
        d1, d2, K = self._camera(self.calls, a.shape[0], a.shape[1])
        m = self.motion_estimator(a, b, depth1=d1, depth2=d2, intrinsics=K)
        r = None if self.reference_estimator is None else self.reference_estimator(
            a, b, depth1=d1, depth2=d2, intrinsics=K)
        return self._flow_of(m, a, b, r)

    def _flow_of(self, m, a, b, reference=None):
        """The pair ``(a, b)``'s flow from the model's Motion ``m`` (None on failure), the mean of
        it and the reference model's Motion ``reference`` where the two agree, or the reference's
        where that fits the pair better (:meth:`__init__`); records the kept estimate's
        coefficients, inlier fraction and homography."""
        mine = self._motion_of(m, a, b)
        if reference is not None:
            theirs = self._motion_of(reference, a, b)
            both = theirs["flow"] is not None and mine["flow"] is not None
            if both and _largest_gap(mine["flow"], theirs["flow"]) <= AGREE_PX:
                mine = _mean_motion(mine, theirs)
                self.averaged_pairs += 1
            elif theirs["flow"] is not None and (not both or self._fits_better(a, b, theirs, mine)):
                mine = theirs
                self.reference_pairs += 1
        self.coefficients.append(mine["coeffs"] if mine["flow"] is not None else None)
        if mine["inliers"] is not None:
            self.inlier_fractions.append(mine["inliers"])
        self.two_motion_pairs += int(mine["two_motion"])
        self.last_homography = mine["homography"]
        return mine["flow"]

    @staticmethod
    def _fits_better(a, b, theirs, mine) -> bool:
        """Whether ``theirs`` explains the pair better than ``mine``: a lower robust cost and an
        inlier share at least as large (module doc; ties: mine)."""
        from camflow_jax.refine import judge_flows  # JAX: only camflow needs it

        costs, shares = judge_flows(a, b, np.stack([mine["flow"], theirs["flow"]]))
        return bool(costs[1] < costs[0] and shares[1] >= shares[0])

    def _motion_of(self, m, a, b) -> dict:
        """One model's estimate of the pair ``(a, b)`` from its Motion ``m``, without bookkeeping:
        ``flow`` (None on failure), ``coeffs``, ``inliers`` (the share of pixels the refinement
        weighs at least 1/2, or None), ``two_motion`` (a tracked motion replaced the fit),
        ``homography`` (or None)."""
        res = {"flow": None, "coeffs": None, "inliers": None, "two_motion": False, "homography": None}
        if m.fallback:  # featureless, worse than no motion, no motion fits (geometry.plausibility)
            return res
        flow = np.asarray(m.flow_f, np.float32)
        if flow.ndim == 4 and flow.shape[0] == 1:
            flow = flow[0]
        if flow.ndim != 3 or flow.shape[-1] != 2:
            raise ValueError(f"camflow predictor returned flow_f of shape {flow.shape}; "
                             "expected [H, W, 2] or [1, H, W, 2]")
        if not np.all(np.isfinite(flow)):
            return res
        flow = host.resize_flow(flow, a.shape[0], a.shape[1])
        coeffs = (m.extras or {}).get("coeffs_f")
        if coeffs is not None and np.all(np.isfinite(coeffs)):
            res["coeffs"] = np.asarray(coeffs, np.float64).reshape(-1)
        if not self.inlier_fit:
            res["flow"] = flow
            return res
        weights = None
        if m.weights is not None and np.size(m.weights) == flow.shape[0] * flow.shape[1]:
            weights = np.asarray(m.weights, np.float32).reshape(flow.shape[:2])
            res["inliers"] = float((weights >= 0.5).mean())
        if self.two_motion_check:
            candidates = self._candidates(a, b, flow, weights)
        else:
            candidates = [H] if (H := background.inlier_homography(flow, weights)) is not None else []
        if not candidates:  # too few inliers: counted as a failure (identity), never a stale motion
            return res
        k = 0
        if len(candidates) > 1:
            from camflow_jax.refine import dominant_homography  # JAX: only camflow needs it

            k = dominant_homography(a, b, candidates)[0]
        res.update(homography=candidates[k], two_motion=k > 0, flow=host.homography_flow(candidates[k], *flow.shape[:2]))
        return res

    def _candidates(self, a, b, flow, weights) -> list[np.ndarray]:
        """The two-motion check's candidates (:func:`camflow_jax.geometry.background.motion_candidates`)."""
        return background.motion_candidates(a, b, flow, weights)

    def fresh(self) -> "CamFlowEstimator":
        new = super().fresh()
        new.inlier_fractions, new.last_homography, new.coefficients = [], None, []
        new.two_motion_pairs = new.reference_pairs = new.averaged_pairs = 0
        return new

    def stats(self) -> dict:
        out = super().stats()
        out["inlier_fit"] = self.inlier_fit
        if self.inlier_fit and self.two_motion_check:
            out["two_motion_pairs"] = self.two_motion_pairs
        if self.inlier_fractions:
            out["mean_inlier_fraction"] = float(np.mean(self.inlier_fractions))
        if self.reference_estimator is not None:
            out["reference_pairs"] = self.reference_pairs
            out["averaged_pairs"] = self.averaged_pairs
        return out


def _largest_gap(f1: np.ndarray, f2: np.ndarray) -> float:
    """The largest distance (pixels) between two flows ``[H, W, 2]`` over the frame."""
    return float(np.sqrt(np.max(np.sum(np.square(f1 - f2, dtype=np.float64), -1))))


def _mean_motion(mine: dict, theirs: dict) -> dict:
    """The mean of two models' estimates of one pair (:meth:`CamFlowEstimator._motion_of`'s
    dicts, both with a flow): the homography through the mean of their corners where both
    have one (:func:`camflow_jax.geometry.host.mean_homography`), else the mean flow; the mean
    coefficients and inlier share where both have them."""
    h, w = mine["flow"].shape[:2]
    out = dict(mine, two_motion=mine["two_motion"] or theirs["two_motion"])
    if mine["homography"] is not None and theirs["homography"] is not None:
        out["homography"] = host.mean_homography([mine["homography"], theirs["homography"]], h, w)
        out["flow"] = host.homography_flow(out["homography"], h, w)
    else:
        out["homography"] = None
        out["flow"] = ((mine["flow"].astype(np.float64) + theirs["flow"]) / 2).astype(np.float32)
    if mine["coeffs"] is not None and theirs["coeffs"] is not None:
        out["coeffs"] = (mine["coeffs"] + theirs["coeffs"]) / 2
    if mine["inliers"] is not None and theirs["inliers"] is not None:
        out["inliers"] = (mine["inliers"] + theirs["inliers"]) / 2
    return out


def make_estimator(name: str, checkpoint: str | None = None, refine_size: int | None = None, **kwargs) -> VideoEstimator:
    """A stabilization estimator from a registry name (:mod:`camflow_jax.estimators.registry`; the old
    ``sift`` / ``orb`` work with a FutureWarning: they are ``sift_ransac`` / ``orb_ransac``).

    camflow / camflow_net (``:PATH``): ``checkpoint`` (an inference checkpoint or a training
    workdir; default the shipped model), loaded now, and ``depth_files`` / ``intrinsics`` /
    ``fov_deg`` / ``frame_size`` as :class:`CamFlowEstimator` takes them. Other names: the
    registry's options (e.g. ``ratio``, ``threshold``, ``preset``); ``checkpoint`` is ignored.
    ``refine_size``: camflow's refinement size (:class:`CamFlowEstimator`); ValueError for others.
    """
    if not registry.is_camflow(registry.resolve(name)[0]):
        if refine_size is not None:
            raise ValueError(f"refine_size is for camflow, not {name}")
        return RegistryEstimator(name, **kwargs)
    loaded = registry.get(name, checkpoint=checkpoint)
    est = CamFlowEstimator(loaded.predictor, refine=bool(loaded.refine), refine_size=refine_size, **kwargs)
    est.name = loaded.name
    return est
