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
  trusted.

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
from camflow_jax.geometry import host
from camflow_jax.io.atomic import atomic_file
from camflow_jax.refine import RefineConfig

__all__ = ["Labels", "TeacherSettings", "label_pairs", "label_flows", "spread", "model_fingerprint", "fb_weight",
           "default_cache_dir", "CHUNK", "FB_SCALE", "MIN_TRUSTED", "CACHE_VERSION"]

#: Pairs per cached chunk of labels.
CHUNK = 32
#: The forward-backward disagreement (network pixels) at which a pixel's weight halves.
FB_SCALE = 0.5
#: A pair with less than this share of trusted weight (mean weight over both directions) is dropped.
MIN_TRUSTED = 0.2
#: Bump when the label format or its computation changes: older cached chunks are not read.
CACHE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TeacherSettings:
    """How the teacher labels: the refinement's settings and the trust thresholds."""
    refine: RefineConfig = RefineConfig()
    fb_scale: float = FB_SCALE
    min_trusted: float = MIN_TRUSTED
    batch_size: int | None = None  # pairs per predict_batch call (None: the predictor's preferred)

    def key(self) -> str:
        return repr((CACHE_VERSION, self.refine, float(self.fb_scale), float(self.min_trusted)))


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


_FIELDS = ("coeffs_f", "coeffs_b", "weight_f", "weight_b", "keep")


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


def _trusted(out: dict, bases: np.ndarray, net_hw, settings: TeacherSettings) -> dict:
    """One pair's label from a refined Predictor result at the input size."""
    h, w = net_hw
    cf, cb = np.asarray(out["coeffs_f"], np.float32), np.asarray(out["coeffs_b"], np.float32)
    info = out.get("refine_info") or {}
    improved = list(info.get("improved", [True, True]))
    plaus = out.get("plausibility") or {}
    ff, fbk = label_flows(cf, bases), label_flows(cb, bases)
    reason = ""
    if not (np.all(np.isfinite(cf)) and np.all(np.isfinite(cb))):
        reason = "non-finite refinement"
    elif plaus.get("plausible", True) is False:
        reason = "implausible: " + "; ".join(plaus.get("reasons") or ["(no reason given)"])
    elif not any(improved):
        reason = "the refinement improved neither direction"
    if reason:
        zero = np.zeros((h, w), np.uint8)
        return dict(coeffs_f=cf, coeffs_b=cb, weight_f=zero, weight_b=zero, keep=False, reason=reason)
    weights = []
    for d, (fa, fo, ok) in enumerate(((ff, fbk, improved[0]), (fbk, ff, improved[-1]))):
        rw = np.asarray(out["weights_" + "fb"[d]], np.float32).reshape(np.shape(out["flow_f"])[:2])
        rw = cv2.resize(rw, (w, h), interpolation=cv2.INTER_AREA)
        wgt = np.clip(rw, 0, 1) * fb_weight(fa, fo, settings.fb_scale) * float(ok)
        weights.append(np.round(255 * wgt).astype(np.uint8))
    share = float(np.mean([x.mean() for x in weights])) / 255.0
    keep, reason = True, ""
    if share < settings.min_trusted:
        keep, reason = False, f"only {100 * share:.0f}% of the pixels trusted (< {100 * settings.min_trusted:.0f}%)"
    return dict(coeffs_f=cf, coeffs_b=cb, weight_f=weights[0], weight_b=weights[1], keep=keep, reason=reason)


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
    bases_of = {}  # input size -> the constant-depth basis set at the network size (numpy)
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
                    for (c, _, _), out in zip(sub, outs):
                        hw = clips[c].size_hw
                        if hw not in bases_of:
                            bases_of[hw] = np.asarray(predictor.constant_depth_bases(hw), np.float32)
                        rows.append(_trusted(out, bases_of[hw], net_hw, settings))
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
    return Labels(list(pairs[:done]), *(np.concatenate([p[k] for p in parts]) for k in _FIELDS[:4]),
                  np.concatenate([p["keep"] for p in parts]).astype(bool),
                  [r for p in parts for r in p["reason"]], seconds)


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

