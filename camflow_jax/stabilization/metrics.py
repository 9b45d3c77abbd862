"""Stabilization metrics: cropping ratio, distortion value, stability score (docs/design.md, "Stabilization").

All three follow the Bundled-Camera-Paths lineage, with the bugs of the commonly copied script
fixed:

* **Homographies.** SIFT, Lowe ratio 0.7, more than 10 matches, RANSAC
  (:func:`frame_homography`; computed on frames shrunk to at most ``max_side`` pixels and mapped
  back to full-resolution pixels). A failed match is *counted and skipped* (cropping/distortion)
  or replaced by the identity (path composition) — never by the previous frame's homography.
* **Cropping** per output frame t: min(scale-based, 1 - added border), averaged (``cropping``)
  and worst (``cropping_min``). Scale-based (``cropping_scale``) from M_t (input frame t ->
  output frame t): s_t = sqrt|det A_t|, A_t = M_t[:2, :2] (area scale, unaffected by
  rotation), min(1, 1/s_t); a 1.25x zoom gives 0.8. Added border = the output's border
  fraction minus the input's (:func:`border_mask`: pixels whose brightest channel is <= 24,
  reached from a frame edge along a row or column through such pixels; 5 % black bands give
  0.95). Scored without an input (an output video on its own), cropping = 1 - border.
* **Distortion value**: per frame the anisotropy s2/s1 of A_t's singular values (real and
  rotation-invariant, unlike the eigenvalues the script uses); worst (min) over frames. An
  anisotropic (1.1, 0.9) warp gives 0.9/1.1 = 0.818.
* **Stability** from the homographies H_t between consecutive OUTPUT frames (frame t-1 ->
  t), composed by LEFT multiplication into the camera path P_0 = I, P_t = H_t P_{t-1} (frame 0
  -> frame t). Each P_t is expressed about the image centre (so a rotation about the centre
  does not leak into the translation), giving signals tx, ty (pixels) and the angle
  theta = atan2(P10, P00), turned into pixels as r theta with r the half diagonal (how far a
  rotation moves the corners). For signals of length N: subtract the mean (DC) and the
  least-squares line (a pan is not shake), Hann-window, take the power spectrum over
  k = 1 .. floor(N/2), and score = energy at <= ``low_hz`` (1 Hz) / total energy, pooled over
  the signals. The band is in Hz, so the score does not depend on the clip length. It needs
  two bins in the band, N >= 2 fps / low_hz frames (2 s at 1 Hz), else NaN: with one, the
  Hann window spreads a smooth sway's bin into the next one and a smooth 0.3-0.5 Hz sway
  scores 0.75-0.88 (0.994-1.0 from 2 s on; 7 phases each). Reported: ``stability`` (tx, ty and r theta pooled:
  each signal weighs by its effect in pixels), ``stability_translation`` (tx, ty),
  ``stability_rotation`` (r theta), and ``jitter_px`` (the high-band RMS displacement of the
  frame corners, sqrt of the summed high-band mean squares; also per part).
  **Noise floor**: each signal's ratio gets ``floor_px`` (:data:`NOISE_FLOOR_PX`, 0.3 px RMS)
  of energy added to numerator and denominator, so motion below the measuring estimator's
  noise cannot decide the score. SIFT's own noise on the high band of the path, measured on
  known-path clips (``python -m tools.bench stab_metrics_noise``), is <= 0.024 px per signal lossless and
  <= 0.066 px through mp4v at 96x160; the floor is 4.5x the worst, so a path that is pure
  estimator noise scores >= 0.95. Rotation's floor is 0.3 px / r (3.2 mrad at 96x160,
  0.27 mrad at 1920x1080).
  The published variant is reported for comparison only: ``stability_classic`` = min of the
  translation and rotation (radians) ratios over the lowest 5 non-DC bins, without detrending,
  floors 0.1 px and 1e-4 rad; its band depends on the clip length and its rotation part is
  estimation noise on most clips (a smooth 20 px sway: 0.86 lossless, 0.66 after mp4v).
  The clip length (frames and seconds) is always reported with it.

Score what the user gets: :func:`video_metrics` decodes a written video again (an encoded
output can score differently from the frames before encoding).
"""

from __future__ import annotations

import cv2
import numpy as np

from camflow_jax.geometry import classical
from camflow_jax.io.video import FrameSource

__all__ = ["frame_homography", "cropping_distortion", "compose_path", "path_signals",
           "low_band_ratio", "half_diagonal", "stability_scores", "border_mask",
           "border_fraction", "MetricsAccumulator", "frames_metrics", "video_metrics",
           "NOISE_FLOOR_PX", "BORDER_THRESHOLD"]

#: Noise floor of the stability scores, pixels RMS per path signal (module doc, "Noise floor").
NOISE_FLOOR_PX = 0.3
#: Brightest-channel level at or below which an edge-connected pixel counts as border fill.
BORDER_THRESHOLD = 24
#: Floors of the published (classic) variant, kept as they were for comparison.
CLASSIC_FLOOR_PX, CLASSIC_FLOOR_RAD = 0.1, 1e-4


def frame_homography(img_a, img_b, max_side: int = 640,
                     cache: classical.FeatureCache | None = None) -> np.ndarray | None:
    """Homography a -> b (full-resolution pixels) from SIFT, ratio 0.7, > 10 matches, RANSAC.

    Returns None when matching fails. ``cache``: reuses the features of frames seen before
    (:class:`camflow_jax.geometry.classical.FeatureCache`; the same result, detected once).
    """
    a, b = np.asarray(img_a), np.asarray(img_b)
    h, w = a.shape[:2]
    s = min(1.0, float(max_side) / max(h, w))
    if s < 1.0:
        size = (max(1, round(w * s)), max(1, round(h * s)))
        a = cv2.resize(a, size, interpolation=cv2.INTER_AREA)
        b = cv2.resize(b, size, interpolation=cv2.INTER_AREA)
    H = classical.feature_homography(a, b, "sift", "ransac", ratio=0.7, min_matches=11,
                                     cache=cache)
    if H is None:
        return None
    if s < 1.0:
        # Half-pixel convention: small = (full + 0.5) * k - 0.5 with per-axis k.
        kx, ky = a.shape[1] / w, a.shape[0] / h
        S = np.array([[kx, 0, 0.5 * kx - 0.5], [0, ky, 0.5 * ky - 0.5], [0, 0, 1.0]])
        H = np.linalg.inv(S) @ H @ S
        H = H / H[2, 2]
    return H


def _linear_parts(Ms) -> np.ndarray:
    Ms = np.asarray(Ms, np.float64)
    if Ms.ndim != 3 or Ms.shape[1:] != (3, 3):
        raise ValueError(f"expected homographies [T, 3, 3], got shape {Ms.shape}")
    return Ms[:, :2, :2] / Ms[:, 2:3, 2:3]


def cropping_distortion(Ms) -> dict:
    """Cropping (mean, min) and distortion (min) from homographies M_t ``[T, 3, 3]``
    (input frame -> output frame).

    Frames whose homography is missing must simply be left out by the caller.
    """
    A = _linear_parts(Ms)
    if A.shape[0] == 0:
        nan = float("nan")
        return {"cropping": nan, "cropping_min": nan, "distortion": nan, "frames_measured": 0}
    scale = np.sqrt(np.abs(np.linalg.det(A)))
    crop = np.minimum(1.0, 1.0 / np.maximum(scale, 1e-12))
    sv = np.linalg.svd(A, compute_uv=False)  # descending
    aniso = sv[:, 1] / np.maximum(sv[:, 0], 1e-12)
    return {"cropping": float(crop.mean()), "cropping_min": float(crop.min()),
            "distortion": float(aniso.min()), "frames_measured": int(A.shape[0])}


def compose_path(Hs) -> np.ndarray:
    """Camera path ``[T, 3, 3]`` from consecutive homographies ``[T-1, 3, 3]`` (t-1 -> t):
    P_0 = I, P_t = H_t P_{t-1} (left multiplication: P_t maps frame 0 to frame t)."""
    Hs = np.asarray(Hs, np.float64)
    if Hs.ndim != 3 or Hs.shape[1:] != (3, 3):
        raise ValueError(f"expected homographies [T-1, 3, 3], got shape {Hs.shape}")
    path = [np.eye(3)]
    for H in Hs:
        P = H @ path[-1]
        path.append(P / P[2, 2])
    return np.stack(path)


def path_signals(path, height: int, width: int) -> dict:
    """Translation (pixels) and rotation (radians) signals of a path, about the image centre.

    With T_c the translation to the centre c, Q_t = T_c^-1 P_t T_c; tx, ty = Q[0, 2], Q[1, 2]
    (displacement of the centre); theta = atan2(Q10, Q00).
    """
    path = np.asarray(path, np.float64)
    c = np.array([[1.0, 0, (width - 1) / 2.0], [0, 1.0, (height - 1) / 2.0], [0, 0, 1.0]])
    Q = np.linalg.inv(c) @ path @ c
    Q = Q / Q[:, 2:3, 2:3]
    return {"tx": Q[:, 0, 2], "ty": Q[:, 1, 2], "theta": np.arctan2(Q[:, 1, 0], Q[:, 0, 0])}


def _half_power(signal: np.ndarray, detrend: bool) -> np.ndarray:
    """Power over k = 1 .. floor(N/2) of ``signal`` ``[G, N]`` (DC removed). ``detrend``: also
    remove the least-squares line and apply a Hann window (normalized to unit mean square)."""
    s = np.asarray(signal, np.float64)
    n = s.shape[-1]
    s = s - s.mean(-1, keepdims=True)
    if detrend and n >= 2:
        t = np.arange(n) - (n - 1) / 2.0
        s = s - np.outer(s @ t / (t @ t), t)
        win = np.hanning(n)
        s = s * win / np.sqrt(np.mean(win ** 2))
        s = s - s.mean(-1, keepdims=True)
    return np.abs(np.fft.rfft(s, axis=-1)[..., 1:n // 2 + 1]) ** 2


def low_band_ratio(signals, fps: float = 30.0, low_hz: float | None = 1.0,
                   classic_bins: int | None = None, floor: float = 0.0) -> float:
    """Low-band energy over total energy of one signal ``[N]`` or a group ``[G, N]`` (pooled).

    ``classic_bins`` set: the lowest that many non-DC bins, no detrending (published variant).
    Otherwise bins with frequency <= ``low_hz`` (after detrending; NaN with fewer than 2). ``floor`` is an RMS noise
    level added as energy N^2 floor^2 / 2 per signal to numerator and denominator.
    """
    s = np.atleast_2d(np.asarray(signals, np.float64))
    n = s.shape[-1]
    if not np.all(np.isfinite(s)):
        raise ValueError("stability: path signal is not finite")
    if n < 3:
        return float("nan")
    p = _half_power(s, detrend=classic_bins is None).sum(axis=0)
    if classic_bins is not None:
        low = p[:classic_bins].sum()
    else:
        freqs = np.arange(1, p.shape[0] + 1) * fps / n
        band = freqs <= low_hz + 1e-9
        if band.sum() < 2:  # the window spreads one bin over its neighbours (module doc)
            return float("nan")
        low = p[band].sum()
    fl = s.shape[0] * n * n * floor ** 2 / 2.0
    return float((low + fl) / (p.sum() + fl)) if p.sum() + fl > 0 else 1.0


def half_diagonal(height: int, width: int) -> float:
    """Lever arm that turns a rotation angle (radians) into pixels: half the frame diagonal
    (a rotation by theta about the centre moves the corners by about theta * this)."""
    return 0.5 * float(np.hypot(height, width))


def highband_rms(signals, fps: float, low_hz: float) -> float:
    """Root of the summed mean squares of the parts of ``signals`` ``[G, N]`` above ``low_hz``
    (after the same detrending and window as :func:`low_band_ratio`; Parseval on the half
    spectrum). For (tx, ty, lever * theta) it is the RMS high-band displacement of the frame
    corners (translation and the rotation's displacement are perpendicular on average)."""
    s = np.atleast_2d(np.asarray(signals, np.float64))
    n = s.shape[-1]
    if n < 3:
        return float("nan")
    p = _half_power(s, detrend=True)
    freqs = np.arange(1, p.shape[-1] + 1) * fps / n
    high = p[:, freqs > low_hz + 1e-9].sum()
    return float(np.sqrt(2.0 * high / (n * n)))


def stability_scores(Hs, height: int, width: int, fps: float = 30.0, low_hz: float = 1.0,
                     floor_px: float | None = None) -> dict:
    """Stability scores of the path composed from consecutive homographies ``[T-1, 3, 3]``.

    ``floor_px`` (default :data:`NOISE_FLOOR_PX`) is the noise floor in pixels (RMS per
    signal); rotation is measured in pixels at the half diagonal, so its floor in radians is
    ``floor_px / half_diagonal``. See the module doc for the definitions.
    """
    floor_px = NOISE_FLOOR_PX if floor_px is None else float(floor_px)
    path = compose_path(Hs)
    sig = path_signals(path, height, width)
    lever = half_diagonal(height, width)
    trans = np.stack([sig["tx"], sig["ty"]])
    rot_px = lever * sig["theta"][None]
    both = np.concatenate([trans, rot_px])
    out = {
        "stability": low_band_ratio(both, fps, low_hz, floor=floor_px),
        "stability_translation": low_band_ratio(trans, fps, low_hz, floor=floor_px),
        "stability_rotation": low_band_ratio(rot_px, fps, low_hz, floor=floor_px),
        "jitter_px": highband_rms(both, fps, low_hz),
        "jitter_translation_px": highband_rms(trans, fps, low_hz),
        "jitter_rotation_px": highband_rms(rot_px, fps, low_hz),
        # Published variant (5 lowest bins, min of translation and rotation, the script's tiny
        # floors): depends on the clip length and is dominated by rotation noise; comparison only.
        "stability_classic_translation": low_band_ratio(trans, classic_bins=5,
                                                        floor=CLASSIC_FLOOR_PX),
        "stability_classic_rotation": low_band_ratio(sig["theta"][None], classic_bins=5,
                                                     floor=CLASSIC_FLOOR_RAD),
    }
    # np.minimum propagates NaN (too-short clips); Python's min() would depend on the order.
    out["stability_classic"] = float(np.minimum(out["stability_classic_translation"],
                                                out["stability_classic_rotation"]))
    out.update({"low_hz": low_hz, "fps": fps, "frames": int(path.shape[0]),
                "seconds": path.shape[0] / fps, "noise_floor_px": floor_px,
                "rotation_lever_px": lever})
    return out


def border_mask(frame, threshold: int = BORDER_THRESHOLD) -> np.ndarray:
    """Boolean ``[H, W]`` mask of border fill: pixels whose brightest channel is <= ``threshold``
    that are reached from a frame edge along their row or column through such pixels only.

    The fill a warp leaves is the complement of a convex quadrilateral, so along every row and
    column it is a run from the edge; a dark object inside the picture is not reached unless
    it touches the edge. A 3x3 closing of the dark mask first bridges the isolated brighter
    pixels that codec ringing leaves inside a black band.
    """
    img = np.asarray(frame)
    gray = img.max(axis=2) if img.ndim == 3 else img
    dark = (gray <= threshold).astype(np.uint8)
    if not dark.any():
        return np.zeros(dark.shape, bool)
    dark = cv2.morphologyEx(dark, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8),
                            borderType=cv2.BORDER_REPLICATE).astype(bool)

    def runs(d):  # True where the row is dark from column 0 up to and including the pixel
        return np.cumprod(d, axis=1).astype(bool)

    m = runs(dark) | runs(dark[:, ::-1])[:, ::-1]
    m |= runs(dark.T).T | runs(dark.T[:, ::-1])[:, ::-1].T
    return m


def border_fraction(frame, threshold: int = BORDER_THRESHOLD) -> float:
    """Fraction of the frame that is border fill (:func:`border_mask`)."""
    return float(border_mask(frame, threshold).mean())


class MetricsAccumulator:
    """Streams output frames (and optionally the matching input frames) and computes all
    metrics at the end.

    Keeps only the previous frames and the 3x3 homographies, so it is memory-bounded.
    ``update(frame_in, frame_out)``; ``frame_in`` may be None (an output video scored on its
    own: stability and border only; the input-relative cropping and distortion are then NaN).
    ``finalize()`` returns ``{"input": {...}, "output": {...}}`` plus the camera paths.
    Feed it what the user gets: the frames read back from the written video, not the frames
    before encoding (docs/stabilization_metrics.md, "Encoded output").
    """

    def __init__(self, fps: float = 30.0, low_hz: float = 1.0, max_side: int = 640,
                 floor_px: float | None = None):
        self.fps, self.low_hz, self.max_side = fps, low_hz, max_side
        self.floor_px = floor_px
        self.size = None
        self._prev_in = self._prev_out = None
        self.h_in, self.h_out, self.m, self.scale_crop = [], [], [], []
        self.border_in, self.border_out = [], []
        self.failed = {"input_pairs": 0, "output_pairs": 0, "input_output": 0}
        # each frame takes part in up to three matches (with its predecessor, its successor
        # and its input / output twin): its features are detected once
        self._features = classical.FeatureCache(4)

    def _pair(self, a, b, key, store):
        H = frame_homography(a, b, self.max_side, self._features)
        if H is None:
            self.failed[key] += 1
            H = np.eye(3)  # documented fallback; never the previous (stale) homography
        store.append(H)

    def update(self, frame_in, frame_out) -> None:
        frame_out = np.asarray(frame_out)
        frame_in = None if frame_in is None else np.asarray(frame_in)
        if self.size is None:
            self.size = frame_out.shape[:2]
            self.with_input = frame_in is not None
        if (frame_in is not None) != self.with_input:
            raise ValueError("give an input frame with every output frame or with none")
        b_out = border_fraction(frame_out)
        self.border_out.append(b_out)
        if frame_in is not None:
            b_in = border_fraction(frame_in)
            self.border_in.append(b_in)
        if self._prev_out is not None:
            if frame_in is not None:
                self._pair(self._prev_in, frame_in, "input_pairs", self.h_in)
            self._pair(self._prev_out, frame_out, "output_pairs", self.h_out)
        if frame_in is not None:
            M = frame_homography(frame_in, frame_out, self.max_side, self._features)
            if M is None:
                self.failed["input_output"] += 1
                self.scale_crop.append(np.nan)
            else:
                self.m.append(M)
                self.scale_crop.append(cropping_distortion(M[None])["cropping"])
        self._prev_in, self._prev_out = frame_in, frame_out

    def _border_stats(self, fractions, excess) -> dict:
        b, e = np.asarray(fractions, float), np.asarray(excess, float)
        return {"border_fraction": float(b.mean()), "border_fraction_max": float(b.max()),
                "cropping_border": float(1.0 - e.mean()),
                "cropping_border_min": float(1.0 - e.max())}

    def finalize(self) -> dict:
        if self.size is None or not self.h_out:
            raise ValueError("metrics need at least two frames")
        h, w = self.size
        args = (h, w, self.fps, self.low_hz, self.floor_px)
        res = {"output": stability_scores(np.stack(self.h_out), *args)}
        b_out = np.asarray(self.border_out)
        if self.with_input:
            b_in = np.asarray(self.border_in)
            res["input"] = stability_scores(np.stack(self.h_in), *args)
            res["input"].update({"cropping": 1.0, "cropping_min": 1.0, "distortion": 1.0})
            res["input"].update(self._border_stats(b_in, np.zeros_like(b_in)))
            excess = np.maximum(0.0, b_out - b_in)
            res["output"].update(self._border_stats(b_out, excess))
            cd = cropping_distortion(np.stack(self.m) if self.m else np.zeros((0, 3, 3)))
            # Per frame: the scale-based cropping and 1 - the border the stabilizer added,
            # whichever loses more; a frame whose input->output match failed has only the latter.
            scale = np.asarray(self.scale_crop, float)
            crop = np.minimum(np.where(np.isnan(scale), 1.0, scale), 1.0 - excess)
            res["output"].update({"cropping_scale": cd["cropping"],
                                  "cropping_scale_min": cd["cropping_min"],
                                  "distortion": cd["distortion"],
                                  "frames_measured": cd["frames_measured"],
                                  "cropping": float(crop.mean()),
                                  "cropping_min": float(crop.min())})
            res["path_input"] = path_signals(compose_path(np.stack(self.h_in)), h, w)
        else:
            res["output"].update(self._border_stats(b_out, b_out))
            res["output"].update({"cropping": 1.0 - float(b_out.mean()),
                                  "cropping_min": 1.0 - float(b_out.max()),
                                  "cropping_scale": float("nan"), "distortion": float("nan")})
        res["failures"] = dict(self.failed)
        res["path_output"] = path_signals(compose_path(np.stack(self.h_out)), h, w)
        return res


def frames_metrics(frames_out, fps: float = 30.0, frames_in=None, **kwargs) -> dict:
    """:class:`MetricsAccumulator` over whole frame sequences (``frames_in`` optional)."""
    acc = MetricsAccumulator(fps, **kwargs)
    if frames_in is None:
        for f in frames_out:
            acc.update(None, f)
    else:
        for a, b in zip(frames_in, frames_out, strict=True):
            acc.update(a, b)
    return acc.finalize()


def video_metrics(output_path: str, input_path: str | None = None, fps: float | None = None,
                  **kwargs) -> dict:
    """Metrics of a written video (or frame folder) as the user gets it, decoded again;
    with ``input_path`` also the input-relative cropping and distortion (same frame count
    needed)."""

    out = FrameSource(output_path)
    rate = float(fps) if fps else out.fps
    if input_path is None:
        return frames_metrics(iter(out), rate, **kwargs)
    return frames_metrics(iter(out), rate, iter(FrameSource(input_path)), **kwargs)
