"""Teacher labels: the refined CamFlow+ labels pairs of a user's footage (docs/adaptation.md,
"Teacher labels").

The refinement (:mod:`camflow_jax.refine`) is precise where the network starts it in the right
basin, and it needs no ground truth, so it can teach the network on footage nobody labelled.
A label is what the refinement returns, kept in the form the network predicts:

* ``coeffs_f``, ``coeffs_b`` ``[n, N]``: the refined coefficients of both directions. The label
  flow is ``sum_k c_k b_k`` over the network's own basis set at its size (the refinement moves the
  same coefficients over the same bases, resampled to its working size), so the label lies in the
  span the network can reach;
* ``weight_f``, ``weight_b`` ``[n, h, w]`` (uint8, 255 = 1) at the network size: what the
  refinement trusts, the product of its robust (IRLS) weights, the forward-backward agreement
  ``1 / (1 + (e / FB_SCALE)^2)`` with ``e = |F_f(x) + F_b(x + F_f(x))|`` (network pixels), and
  the pixels that stay in the frame. A direction whose refinement could not lower the cost of
  the network's start teaches nothing: its weight is 0;
* ``keep`` ``[n]``: False for pairs the teacher does not trust (``reason`` says why): a
  refinement that improved neither direction, a Predictor result flagged implausible (its
  ``plausibility`` report), non-finite values, or less than :data:`MIN_TRUSTED` of the pixels
  trusted;
* ``two_motion`` ``[n]``: True for pairs labelled by the camera's motion instead of the refined
  flow. A large object moving by itself bends the refined flow towards its own motion (one
  robust cost over smooth global bases pulls towards both). Where points tracked from the
  refined flow hold two rigid motions and one of them explains more of the frame than the
  homography fitted to the refined flow's inliers (the stabilizer's test,
  :func:`camflow_jax.geometry.background.motion_candidates` and
  :func:`camflow_jax.refine.dominant_homography`), that motion is the label: its flow in both
  directions projected on the bases (least squares), weighted by its own robust weights
  (:func:`camflow_jax.refine.homography_weights`, low on the object) and the forward-backward
  agreement. ``TeacherSettings.two_motions=False`` turns this off.

Footage has no depth: the labels use the constant depth of the Predictor (the model then works
as CamFlow, its depth bases in the homography span).

Labels are computed in batches (:meth:`camflow_jax.predictor.Predictor.predict_batch`) and cached
on disk in chunks of :data:`CHUNK` pairs, each keyed by the SHA-256 of its frames, the model's
weights and the teacher's settings, with the file's own SHA-256 beside it: epochs, a second run
with another budget, or a run resumed after an interruption read them back instead of refining
again; a damaged file is labelled again (with a warning).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
import warnings
from pathlib import Path

import cv2
import numpy as np

from camflow_jax.adaptation.footage import Clip
from camflow_jax.geometry import background, host
from camflow_jax.io.atomic import atomic_file
from camflow_jax.refine import RefineConfig

__all__ = ["Labels", "TeacherSettings", "label_pairs", "label_flows", "spread", "model_fingerprint", "fb_weight",
           "default_cache_dir", "CHUNK", "FB_SCALE", "MIN_TRUSTED", "CACHE_VERSION", "MAX_PROJECTION_ERROR",
           "AMBIGUOUS_SHARE"]

#: Pairs per cached chunk of labels.
CHUNK = 32
#: The forward-backward disagreement (network pixels) at which a pixel's weight halves.
FB_SCALE = 0.5
#: A pair with less than this share of trusted weight (mean weight over both directions) is dropped.
MIN_TRUSTED = 0.2
#: Bump when the label format or its computation changes: older cached chunks are not read.
CACHE_VERSION = 3
#: Two tracked motions whose inlier shares are closer than this cannot be told apart: which one
#: is the camera's is a guess, and the pair is dropped. (On the development clips the camera's
#: motion led the object's by 0.13-0.26; a pair that picked the object led by 0.05.)
AMBIGUOUS_SHARE = 0.1
#: A camera-motion label (``two_motion``) is used only where its projection on the bases is
#: within this mean end-point error (network pixels) of the motion's flow.
MAX_PROJECTION_ERROR = 0.25


@dataclasses.dataclass(frozen=True)
class TeacherSettings:
    """How the teacher labels: the refinement's settings and the trust thresholds."""
    refine: RefineConfig = RefineConfig()
    fb_scale: float = FB_SCALE
    min_trusted: float = MIN_TRUSTED
    two_motions: bool = True  # label pairs with a second moving motion by the camera's (module doc)
    ambiguous_share: float = AMBIGUOUS_SHARE
    batch_size: int | None = None  # pairs per predict_batch call (None: the predictor's preferred)

    def key(self) -> str:
        return repr((CACHE_VERSION, self.refine, float(self.fb_scale), float(self.min_trusted),
                     bool(self.two_motions), float(self.ambiguous_share), background.REFIT_PX))


@dataclasses.dataclass
class Labels:
    """Teacher labels of ``n`` pairs (module doc). ``pairs``: ``(clip, t1, t2)`` of each."""
    pairs: list
    coeffs_f: np.ndarray
    coeffs_b: np.ndarray
    weight_f: np.ndarray
    weight_b: np.ndarray
    keep: np.ndarray
    reason: list
    seconds: float = 0.0  # time spent refining (0 for labels read from the cache)
    two_motion: np.ndarray | None = None  # [n] bool (None: all False)

    def __post_init__(self):
        if self.two_motion is None:
            self.two_motion = np.zeros(len(self.pairs), bool)

    def __len__(self) -> int:
        return len(self.pairs)

    def weights(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Pair ``i``'s weights as float32 in 0..1."""
        return self.weight_f[i].astype(np.float32) / 255.0, self.weight_b[i].astype(np.float32) / 255.0


def default_cache_dir() -> Path | None:
    """``<the package's per-user cache>/teacher`` (:func:`camflow_jax.compilation.cache.cache_root`),
    or None where the user turned the cache off."""
    from camflow_jax.compilation import cache

    root = cache.cache_root()
    return None if root is None else root / "teacher"


def model_fingerprint(variables) -> str:
    """SHA-256 of a model's variables (every array's name, shape, dtype and bytes)."""
    import jax

    h = hashlib.sha256()
    for path, x in jax.tree_util.tree_leaves_with_path(jax.device_get(variables)):
        a = np.ascontiguousarray(np.asarray(x))
        h.update(f"{jax.tree_util.keystr(path)}{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def label_flows(coeffs: np.ndarray, bases: np.ndarray) -> np.ndarray:
    """``sum_k coeffs[..., k] bases[k]``: ``[..., N]`` x ``[N, h, w, 2]`` -> ``[..., h, w, 2]``."""
    return np.tensordot(np.asarray(coeffs, np.float32), np.asarray(bases, np.float32), axes=(-1, 0))


def fb_weight(flow_f: np.ndarray, flow_b: np.ndarray, scale: float = FB_SCALE) -> np.ndarray:
    """``1 / (1 + (e / scale)^2)`` with ``e = |F_f(x) + F_b(x + F_f(x))|`` (bilinear), 0 where
    ``x + F_f(x)`` leaves the frame (:func:`camflow_jax.geometry.host.warp_validity`)."""
    back = host.warp(np.asarray(flow_b, np.float32), np.asarray(flow_f, np.float32), exact=False)
    e = np.hypot(*(flow_f + back).transpose(2, 0, 1))
    w = 1.0 / (1.0 + (e / scale) ** 2)
    return (w * (host.warp_validity(flow_f) > 0)).astype(np.float32)


def _frame_digest(frame: np.ndarray) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(frame).tobytes() + str(frame.shape).encode()).digest()


def _chunk_key(clips, pairs, fingerprint: str, settings: TeacherSettings, net_hw) -> str:
    h = hashlib.sha256(f"{fingerprint}|{settings.key()}|{tuple(net_hw)}".encode())
    for c, a, b in pairs:
        h.update(_frame_digest(clips[c].frames[a]))
        h.update(_frame_digest(clips[c].frames[b]))
    return h.hexdigest()


_FIELDS = ("coeffs_f", "coeffs_b", "weight_f", "weight_b", "keep", "two_motion")


def _read_chunk(path: Path) -> dict | None:
    """A cached chunk (numpy arrays and reasons), or None when absent or damaged (warned)."""
    npz, meta = path.with_suffix(".npz"), path.with_suffix(".json")
    if not npz.is_file() or not meta.is_file():
        return None
    try:
        info = json.loads(meta.read_text())
        data = npz.read_bytes()
        if hashlib.sha256(data).hexdigest() != info["sha256"]:
            raise ValueError("checksum mismatch")
        with np.load(npz, allow_pickle=False) as z:
            out = {k: z[k] for k in _FIELDS}
        out["reason"] = list(info["reason"])
        return out
    except Exception as e:  # a damaged or foreign file: label again
        warnings.warn(f"teacher cache {npz} is damaged ({type(e).__name__}: {e}); labelling again", stacklevel=3)
        return None


def _write_chunk(path: Path, chunk: dict) -> None:
    """Writes a chunk atomically (its .npz, then the .json holding the .npz's checksum: a chunk
    counts only once both are in place). A cache that cannot be written is skipped with a warning."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        npz = path.with_suffix(".npz")
        with atomic_file(npz, record=False) as tmp:
            np.savez(tmp, **{k: chunk[k] for k in _FIELDS})
        info = {"sha256": hashlib.sha256(npz.read_bytes()).hexdigest(), "reason": chunk["reason"]}
        with atomic_file(path.with_suffix(".json"), record=False) as tmp:
            Path(tmp).write_text(json.dumps(info))
    except OSError as e:
        warnings.warn(f"could not write the teacher cache {path.parent} ({e}); labels are kept in memory only",
                      stacklevel=3)


def _camera_motion(img1, img2, out: dict, settings: TeacherSettings) -> tuple[np.ndarray | None, str]:
    """``(H, reason)``: the camera's homography (image 1 -> image 2, input pixels) where a second
    motion competes with it and the refined flow bends towards both (module doc, ``two_motion``),
    else None (the refined flow is the label); ``reason`` is not empty where the two tracked
    motions explain the pair within ``settings.ambiguous_share`` of each other (the pair is then
    dropped)."""
    from camflow_jax.refine import dominant_homography

    flow = np.asarray(out["flow_f"], np.float32)
    weights = np.asarray(out["weights_f"], np.float32).reshape(flow.shape[:2])
    candidates = background.motion_candidates(img1, img2, flow, weights)
    if len(candidates) < 3:  # no second tracked motion: the refined flow is the label
        return None, ""
    k, shares = dominant_homography(img1, img2, candidates, settings.refine)
    if not k:
        return None, ""
    if abs(float(shares[1]) - float(shares[2])) < settings.ambiguous_share:
        return None, "two motions explain the pair about equally: which is the camera's is unclear"
    return candidates[k], ""


def _projector(bases: np.ndarray) -> np.ndarray:
    """``[N, h * w * 2]``: the least-squares map from a flow at the network size to coefficients,
    the minimum-norm one (with constant depth the depth bases lie in the homography span, so the
    set is rank-deficient: singular values below 1e-6 of the largest are cut)."""
    return np.linalg.pinv(bases.reshape(len(bases), -1).T.astype(np.float64), rcond=1e-6)


def _weighted(cf, cb, bases, robust, improved, net_hw, settings: TeacherSettings) -> dict:
    """A kept label: coefficients, and weights from the robust weights ``robust`` (two maps of
    any size) times the forward-backward agreement of the label's flows; a direction not
    ``improved`` gets 0."""
    h, w = net_hw
    ff, fbk = label_flows(cf, bases), label_flows(cb, bases)
    weights = []
    for rw, (fa, fo), ok in zip(robust, ((ff, fbk), (fbk, ff)), improved):
        rw = cv2.resize(np.asarray(rw, np.float32), (w, h), interpolation=cv2.INTER_AREA)
        wgt = np.clip(rw, 0, 1) * fb_weight(fa, fo, settings.fb_scale) * float(ok)
        weights.append(np.round(255 * wgt).astype(np.uint8))
    share = float(np.mean([x.mean() for x in weights])) / 255.0
    keep, reason = True, ""
    if share < settings.min_trusted:
        keep, reason = False, f"only {100 * share:.0f}% of the pixels trusted (< {100 * settings.min_trusted:.0f}%)"
    return dict(coeffs_f=cf, coeffs_b=cb, weight_f=weights[0], weight_b=weights[1], keep=keep, reason=reason,
                two_motion=False)


def _trusted(out: dict, img1, img2, bases: np.ndarray, projector: np.ndarray, net_hw,
             settings: TeacherSettings) -> dict:
    """One pair's label from a refined Predictor result at the input size (module doc)."""
    h, w = net_hw
    cf, cb = np.asarray(out["coeffs_f"], np.float32), np.asarray(out["coeffs_b"], np.float32)
    info = out.get("refine_info") or {}
    improved = list(info.get("improved", [True, True]))
    plaus = out.get("plausibility") or {}
    H, reason = None, ""
    if not (np.all(np.isfinite(cf)) and np.all(np.isfinite(cb))):
        reason = "non-finite refinement"
    elif plaus.get("plausible", True) is False:
        reason = "implausible: " + "; ".join(plaus.get("reasons") or ["(no reason given)"])
    elif not any(improved):
        reason = "the refinement improved neither direction"
    elif settings.two_motions:
        H, reason = _camera_motion(img1, img2, out, settings)
    if reason:
        zero = np.zeros((h, w), np.uint8)
        return dict(coeffs_f=cf, coeffs_b=cb, weight_f=zero, weight_b=zero, keep=False, reason=reason,
                    two_motion=False)
    if H is not None:
        from camflow_jax.refine import homography_weights

        hi, wi = np.shape(out["flow_f"])[:2]
        motions = (H, np.linalg.inv(H))
        flows = [host.resize_flow(host.homography_flow(M, hi, wi), h, w) for M in motions]
        coeffs = [(projector @ f.reshape(-1).astype(np.float64)).astype(np.float32) for f in flows]
        err = max(float(np.hypot(*(label_flows(c, bases) - f).transpose(2, 0, 1)).mean())
                  for c, f in zip(coeffs, flows))
        if err <= MAX_PROJECTION_ERROR:
            robust = (homography_weights(img1, img2, motions[0], settings.refine),
                      homography_weights(img2, img1, motions[1], settings.refine))
            return _weighted(*coeffs, bases, robust, (True, True), net_hw, settings) | {"two_motion": True}
    shape = np.shape(out["flow_f"])[:2]
    robust = [np.asarray(out["weights_" + d], np.float32).reshape(shape) for d in "fb"]
    return _weighted(cf, cb, bases, robust, (improved[0], improved[-1]), net_hw, settings)


def label_pairs(predictor, clips: list[Clip], pairs: list, settings: TeacherSettings = TeacherSettings(), *,
                cache_dir=None, progress: bool = True, stop=None, deadline: float | None = None,
                minimum: int = 0) -> Labels:
    """Teacher labels of ``pairs`` (``(clip, t1, t2)`` into ``clips``) by ``predictor`` refined
    (module doc). ``cache_dir``: where chunks are kept (None: no cache; see
    :func:`default_cache_dir`). ``progress``: a bar on stderr with the labelling rate.
    ``stop``: a callable polled between batches that raises to stop (a signal).
    ``deadline``: a ``time.perf_counter()`` value after which no new chunk is started once
    ``minimum`` pairs are labelled: the labels then cover a prefix of ``pairs`` (order them
    so that a prefix is useful, :func:`spread`)."""
    net_hw = (predictor.height, predictor.width)
    # the weights and the settings that change the network's answers without a weight (the
    # contrast floor, the precision policy): ModelConfig's repr holds them all
    fingerprint = f"{model_fingerprint(predictor.variables)}|{getattr(predictor.model, 'config', None)!r}"
    cache = None if cache_dir is None else Path(cache_dir)
    bs = settings.batch_size or max(1, predictor.preferred_batch_size())
    bases_of = {}  # input size -> (the constant-depth basis set at the network size, its projector)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pairs), desc="teacher labels", unit="pair", file=sys.stderr, dynamic_ncols=True)
    parts, seconds = [], 0.0
    try:
        for lo in range(0, len(pairs), CHUNK):
            if deadline is not None and lo >= minimum and time.perf_counter() > deadline:
                break
            chunk_pairs = pairs[lo:lo + CHUNK]
            path = None if cache is None else cache / _chunk_key(clips, chunk_pairs, fingerprint, settings, net_hw)
            got = None if path is None else _read_chunk(path)
            if got is None:
                t0 = time.perf_counter()
                rows = []
                for s in range(0, len(chunk_pairs), bs):
                    if stop is not None:
                        stop()
                    sub = chunk_pairs[s:s + bs]
                    outs = predictor.predict_batch([clips[c].frames[a] for c, a, _ in sub],
                                                   [clips[c].frames[b] for c, _, b in sub],
                                                   refine=settings.refine, batch_size=bs)
                    for (c, a, b), out in zip(sub, outs):
                        hw = clips[c].size_hw
                        if hw not in bases_of:
                            bases = np.asarray(predictor.constant_depth_bases(hw), np.float32)
                            bases_of[hw] = (bases, _projector(bases))
                        rows.append(_trusted(out, clips[c].frames[a], clips[c].frames[b], *bases_of[hw],
                                             net_hw, settings))
                    if bar is not None:
                        bar.update(len(sub))
                got = {k: np.stack([r[k] for r in rows]) for k in _FIELDS}
                got["reason"] = [r["reason"] for r in rows]
                seconds += time.perf_counter() - t0
                if path is not None:
                    _write_chunk(path, got)
            elif bar is not None:
                bar.update(len(chunk_pairs))
            parts.append(got)
    finally:
        if bar is not None:
            bar.close()
    done = sum(len(p["keep"]) for p in parts)
    cat = {k: np.concatenate([p[k] for p in parts]) for k in _FIELDS}
    return Labels(list(pairs[:done]), *(cat[k] for k in _FIELDS[:4]), cat["keep"].astype(bool),
                  [r for p in parts for r in p["reason"]], seconds, cat["two_motion"].astype(bool))


def spread(indices: list) -> list:
    """``indices`` reordered coarse to fine (every 16th, then the 8ths between, ... then the rest),
    so that any prefix covers the whole footage evenly."""
    seen, out = set(), []
    for step in (16, 8, 4, 2, 1):
        for j in range(0, len(indices), step):
            if j not in seen:
                seen.add(j)
                out.append(indices[j])
    return out


def cache_size(cache_dir) -> int:
    """Bytes the teacher cache holds (0 when absent)."""
    p = Path(cache_dir)
    return sum(f.stat().st_size for f in p.glob("*") if f.is_file()) if p.is_dir() else 0

