"""Camera-motion estimators on real images that Debian's ``opencv-doc`` package ships (no download).

    apt-get install opencv-doc        # /usr/share/doc/opencv-doc/examples/data
    python tools/eval_real.py [--data DIR] [--out out/eval_real] [--checkpoint CKPT]
        [--methods identity,sift_magsac,dis,camflow,camflow_depth,oracle_homography,oracle_h12,oracle_span36]
        [--estimators sift,dis,camflow] [--frames 120] [--parts stereo,video]

Two experiments (docs/real_images.md):

1. **Stereo** (Middlebury 2006 'Aloe': aloeL.jpg, aloeR.jpg, aloeGT.png = the LEFT view's
   disparity, 0 = unknown). image1 = left, image2 = right; ground-truth forward flow on valid
   pixels is (-d, 0) (warp(right, flow) = left). Before anything else the disparity scale is
   checked photometrically (:func:`disparity_scale_scan`; stored in the JSON). Both images are
   resized (``cv2.INTER_AREA``) to ``--width`` (576) px wide, aspect kept (576 x 499); the
   disparity is area-averaged over valid pixels and scaled by the x factor, and a working pixel
   is valid only when every full-resolution pixel under it is (area fraction 1). Rows: dense EPE
   (mean endpoint error over valid pixels) of ``identity``, ``sift_magsac`` and ``dis``
   (:func:`camflow_jax.baselines.estimate_flow`), the CamFlow model without depth
   (``camflow``) and with depth (``camflow_depth``; plus one row per ``--fx-scales`` factor),
   and three oracles that fit the ground truth itself: ``oracle_homography`` (one homography,
   :func:`camflow_jax.geometry.fit_homography` on valid pixels), ``oracle_h12`` (least squares
   in the span of the 12 second-order homography bases, :func:`camflow_jax.bases.homography_bases`)
   and ``oracle_span36`` (the span of the default CamFlow+ set: 12 homography + 12 stochastic +
   12 depth bases built from the ground-truth depth).
   Depth: depth1 = 1 / d (any global scale: the depth bases are scale-free) with holes filled
   along each row by the farther (smaller-disparity) nearest valid neighbour; depth2 = the
   left disparity forward-projected to the right view (x_r = x - d, z-buffer keeps the nearer
   surface; rectified stereo keeps Z), holes filled the same way. K (not given for these files):
   fx = fy = working width (~53 deg horizontal FOV), principal point at the image centre.
2. **Video** (vtest.avi, a static camera with walking people; first ``--frames`` frames).
   ``static``: the stabilizer (:mod:`camflow_jax.stabilization.pipeline`, default config) runs
   on the video as it is; every motion it adds is an error. ``shake``: a seeded synthetic shake
   (per-frame rotation about the centre + translation, :mod:`camflow_jax.stabilization.clips`'
   jitter generator) is applied, frames cropped by ``--margin`` px so no border shows; the
   estimated pair flows are compared with the exact ones (J_{t+1} J_t^-1), and the shake left
   after stabilization is measured against ground truth (``clips.residual_motion`` /
   ``clips.highfreq_rms``) and, with ``--image-metrics``, by the image metrics
   (``metrics.MetricsAccumulator``: stability, cropping, distortion) of the rendered output.

The CamFlow rows use ``--checkpoint`` or, without it, ``Predictor.from_pretrained()`` (the model
shipped in the package); when neither exists they are skipped with a note.

Exit status: 0, or 2 with one line when the data (or an argument) is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_DATA = "/usr/share/doc/opencv-doc/examples/data"
MISSING_DATA = "needs Debian's opencv-doc package: apt-get install opencv-doc"
STEREO_FILES = ("aloeL.jpg", "aloeR.jpg", "aloeGT.png")
VIDEO_FILE = "vtest.avi"
PAIR_METHODS = ("identity", "sift_magsac", "dis", "camflow", "camflow_depth", "oracle_homography",
                "oracle_h12", "oracle_span36")
VIDEO_ESTIMATORS = ("sift", "dis", "camflow")
PARTS = ("stereo", "video")


# ----------------------------------------------------------------------------- stereo data
def load_stereo(data: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(left RGB uint8, right RGB uint8, disparity float32 [H, W], valid bool [H, W])."""
    left = cv2.cvtColor(cv2.imread(str(data / STEREO_FILES[0]), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    right = cv2.cvtColor(cv2.imread(str(data / STEREO_FILES[1]), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    gt = cv2.imread(str(data / STEREO_FILES[2]), cv2.IMREAD_UNCHANGED)
    if gt is None or left is None or right is None:
        raise ValueError(f"cannot read the stereo files in {data}")
    if gt.ndim == 3:
        gt = gt[..., 0]
    disp = gt.astype(np.float32)
    return left, right, disp, disp > 0


def disparity_to_flow(disp, valid=None, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """Forward flow left -> right of a rectified pair: (-(scale d + offset), 0); 0 where invalid.

    Left pixel (x, y) is seen at (x - d, y) in the right image, so ``warp(right, flow) = left``.
    """
    d = np.asarray(disp, np.float32) * scale + offset
    if valid is not None:
        d = np.where(valid, d, 0.0)
    return np.stack([-d, np.zeros_like(d)], axis=-1).astype(np.float32)


def warp_remap(image, flow) -> tuple[np.ndarray, np.ndarray]:
    """(image sampled at p + flow(p) with ``cv2.remap`` (bilinear), in-bounds mask)."""
    h, w = flow.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    mx = (xs + flow[..., 0]).astype(np.float32)
    my = (ys + flow[..., 1]).astype(np.float32)
    out = cv2.remap(np.asarray(image, np.float32), mx, my, cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    inside = (mx >= 0) & (mx <= w - 1) & (my >= 0) & (my <= h - 1)
    return out, inside


def photometric_error(img1, img2, flow, mask) -> float:
    """Mean absolute grey-level error |warp(img2, flow) - img1| (mean over channels) on
    ``mask`` pixels whose sample lies inside image 2."""
    warped, inside = warp_remap(img2, np.nan_to_num(np.asarray(flow, np.float32)))
    err = np.abs(warped - np.asarray(img1, np.float32))
    err = err.mean(-1) if err.ndim == 3 else err
    m = np.asarray(mask, bool) & inside
    return float(err[m].mean()) if m.any() else float("nan")


def disparity_scale_scan(left, right, disp, valid,
                         scales=(1 / 3, 0.5, 1.0, 1.5, 2.0, 3.0),
                         offsets=(-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0),
                         fine_scales=(0.98, 0.99, 0.995, 1.0, 1.005, 1.01, 1.02)) -> dict:
    """Photometric check of the disparity's scale, sign and offset at full resolution.

    Every candidate flow (-(s d + o), 0) (and the sign-flipped (+d, 0)) warps the right image
    onto the left; the rows give the mean and median absolute error on valid pixels. The best
    candidate is the stored disparity's meaning.
    """
    def row(kind, s, o, sign=-1.0):
        d = np.asarray(disp, np.float32) * s + o
        flow = np.stack([sign * d, np.zeros_like(d)], -1) * np.asarray(valid)[..., None]
        warped, inside = warp_remap(right, flow)
        err = np.abs(warped - np.asarray(left, np.float32)).mean(-1)
        m = valid & inside
        return {"kind": kind, "scale": float(s), "offset": float(o), "sign": "-d" if sign < 0 else "+d",
                "mae": float(err[m].mean()), "median_ae": float(np.median(err[m])),
                "pixels": float(m.mean())}

    rows = [row("identity", 0.0, 0.0)]
    rows += [row("scale", s, 0.0) for s in scales]
    rows += [row("sign", 1.0, 0.0, +1.0)]
    rows += [row("offset", 1.0, o) for o in offsets]
    rows += [row("fine_scale", s, 0.0) for s in fine_scales]
    best = min(rows, key=lambda r: r["mae"])
    return {"rows": rows, "best": best}


def resize_pair(left, right, disp, valid, width: int):
    """Images (INTER_AREA) and disparity to ``width`` px wide (aspect kept; never enlarged).

    The disparity is averaged over valid pixels (area weights) and multiplied by the x factor
    s_x = w / W (a flow's u scales with the x axis; positions follow the half-pixel convention
    of ``cv2.resize``). A working pixel is valid only when all the pixels it averages are.
    Returns ``(left, right, disp_w, valid_w, (s_x, s_y))``.
    """
    H, W = disp.shape
    w = min(int(width), W)
    h = max(2, int(round(H * w / W)))
    if (h, w) == (H, W):
        return left, right, np.where(valid, disp, 0).astype(np.float32), valid.copy(), (1.0, 1.0)
    area = lambda a: cv2.resize(np.asarray(a, np.float32), (w, h), interpolation=cv2.INTER_AREA)  # noqa: E731
    frac = area(valid)
    num = area(np.where(valid, disp, 0.0))
    valid_w = frac >= 1.0 - 1e-4
    sx, sy = w / W, h / H
    disp_w = np.where(valid_w, num / np.maximum(frac, 1e-6), 0.0) * sx
    img = lambda a: cv2.resize(a, (w, h), interpolation=cv2.INTER_AREA)  # noqa: E731
    return img(left), img(right), disp_w.astype(np.float32), valid_w, (sx, sy)


def fill_rows(disp, valid) -> np.ndarray:
    """Fills invalid disparities along each row with the smaller (farther) of the nearest valid
    values to the left and right (occlusion holes belong to the background); rows without any
    valid pixel get the median valid disparity."""
    d = np.asarray(disp, np.float32)
    valid = np.asarray(valid, bool)
    h, w = d.shape
    idx = np.arange(w)[None, :].repeat(h, 0)
    left_i = np.maximum.accumulate(np.where(valid, idx, -1), axis=1)
    # nearest valid to the right: the same scan on the mirrored rows, mapped back
    acc = np.maximum.accumulate(np.where(valid[:, ::-1], idx, -1), axis=1)[:, ::-1]
    right_i = np.where(acc >= 0, w - 1 - acc, w)
    rows = np.arange(h)[:, None]
    big = np.float32(np.inf)
    from_left = np.where(left_i >= 0, d[rows, np.clip(left_i, 0, w - 1)], big)
    from_right = np.where(right_i <= w - 1, d[rows, np.clip(right_i, 0, w - 1)], big)
    fill = np.minimum(from_left, from_right)
    med = float(np.median(d[valid])) if valid.any() else 1.0
    fill = np.where(np.isfinite(fill), fill, med)
    return np.where(valid, d, fill).astype(np.float32)


def forward_project_disparity(disp, valid) -> tuple[np.ndarray, np.ndarray]:
    """The left view's disparity seen from the right view: pixel (x, y) lands at
    (round(x - d), y); where several land, the nearer (larger d) wins. Returns
    ``(disp_right, valid_right)`` (0 / False where nothing landed)."""
    d = np.asarray(disp, np.float32)
    h, w = d.shape
    ys, xs = np.nonzero(np.asarray(valid, bool))
    xr = np.rint(xs - d[ys, xs]).astype(np.int64)
    keep = (xr >= 0) & (xr < w)
    out = np.full(h * w, -np.inf, np.float32)
    np.maximum.at(out, ys[keep] * w + xr[keep], d[ys[keep], xs[keep]])
    out = out.reshape(h, w)
    ok = np.isfinite(out)
    return np.where(ok, out, 0.0).astype(np.float32), ok


def default_intrinsics(h: int, w: int, fx_scale: float = 1.0) -> np.ndarray:
    """(fx, fy, cx, cy): fx = fy = fx_scale * w (about 53 deg horizontal FOV at 1), centre."""
    f = float(fx_scale) * w
    return np.array([f, f, (w - 1) / 2.0, (h - 1) / 2.0], np.float32)


# ----------------------------------------------------------------------------- metrics, oracles
def epe(flow, gt, mask) -> float:
    """Mean endpoint error over ``mask`` pixels."""
    e = np.linalg.norm(np.asarray(flow, np.float64) - np.asarray(gt, np.float64), axis=-1)
    m = np.asarray(mask, bool)
    return float(e[m].mean()) if m.any() else float("nan")


def fit_span(gt, mask, basis) -> np.ndarray:
    """Least-squares fit (float64, valid pixels only) of ``gt`` [h, w, 2] in the span of
    ``basis`` [N, h, w, 2]; returns the fitted flow on the whole grid."""
    basis = np.asarray(basis, np.float64)
    m = np.asarray(mask, bool)
    A = basis[:, m, :].reshape(basis.shape[0], -1).T          # [2M, N]
    b = np.asarray(gt, np.float64)[m].reshape(-1)
    coeffs, *_ = np.linalg.lstsq(A, b, rcond=None)
    return np.tensordot(coeffs, basis, axes=1).astype(np.float32)


def homography12_bases(h: int, w: int) -> np.ndarray:
    from camflow_jax import bases

    return np.asarray(bases.homography_bases(h, w))


def camflow_plus_bases(h: int, w: int, depth, K) -> np.ndarray:
    """The default CamFlow+ set (12 homography + 12 stochastic (seed 0) + 12 depth bases,
    depth sigmas for this width)."""
    from camflow_jax import bases

    return np.asarray(bases.hybrid_bases(h, w, np.asarray(depth, np.float32), np.asarray(K, np.float32)))


def fit_single_homography(gt, mask) -> tuple[np.ndarray, np.ndarray]:
    """(flow of the homography fitted to ``gt`` on ``mask`` pixels, H)."""
    from camflow_jax import baselines, geometry

    g = np.where(np.asarray(mask, bool)[..., None], gt, 0.0).astype(np.float32)
    H = np.asarray(geometry.fit_homography(g, np.asarray(mask, np.float32)), np.float64)
    h, w = g.shape[:2]
    return baselines.homography_flow_np(H, h, w), H


# ----------------------------------------------------------------------------- CamFlow model
def load_predictor(checkpoint: str | None):
    """(predictor or None, note): the checkpoint, or the shipped model without one."""
    from camflow_jax.predictor import Predictor

    try:
        pred = Predictor.load(checkpoint)
    except FileNotFoundError as e:
        return None, f"skipped: {e}"
    return pred, pred.description


# ----------------------------------------------------------------------------- stereo experiment
def stereo_experiment(data: Path, width: int, methods, predictor, predictor_note: str,
                      fx_scales=(0.7, 1.4), log=print) -> dict:
    from camflow_jax import baselines

    left_f, right_f, disp_f, valid_f = load_stereo(data)
    t0 = time.perf_counter()
    scan = disparity_scale_scan(left_f, right_f, disp_f, valid_f)
    log(f"disparity scan ({time.perf_counter() - t0:.1f} s): best {scan['best']}")
    left, right, disp, valid, (sx, sy) = resize_pair(left_f, right_f, disp_f, valid_f, width)
    h, w = disp.shape
    gt = disparity_to_flow(disp, valid)
    disp1 = fill_rows(disp, valid)
    d2, ok2 = forward_project_disparity(disp1, np.ones_like(valid))
    disp2 = fill_rows(d2, ok2)
    depth1, depth2 = 1.0 / disp1, 1.0 / disp2
    K = default_intrinsics(h, w)
    info = {
        "full_size": [int(disp_f.shape[1]), int(disp_f.shape[0])], "working_size": [w, h],
        "scale_xy": [sx, sy], "valid_fraction": float(valid.mean()),
        "valid_fraction_full": float(valid_f.mean()),
        "gt_magnitude_mean": float(np.abs(disp[valid]).mean()),
        "gt_magnitude_range": [float(disp[valid].min()), float(disp[valid].max())],
        "intrinsics": K.tolist(), "depth2_from_projection_fraction": float(ok2.mean()),
        "camflow": predictor_note,
    }
    rows = []

    def add(name, flow, note="", seconds=None):
        r = {"method": name, "epe": epe(flow, gt, valid),
             "photometric": photometric_error(left, right, flow, valid), "note": note}
        if seconds is not None:
            r["seconds"] = seconds
        rows.append(r)
        log(f"stereo {name}: EPE {r['epe']:.3f} px, photometric {r['photometric']:.2f} {note}")

    for name in methods:
        t = time.perf_counter()
        if name in baselines.METHODS:
            flow, meta = baselines.estimate_flow(name, left, right)
            add(name, flow, "identity fallback" if meta.get("fallback") else "", time.perf_counter() - t)
        elif name == "oracle_homography":
            flow, _ = fit_single_homography(gt, valid)
            add(name, flow, "one homography, DLT fit of the GT on valid pixels")
        elif name == "oracle_h12":
            add(name, fit_span(gt, valid, homography12_bases(h, w)), "span of the 12 homography bases")
        elif name == "oracle_span36":
            add(name, fit_span(gt, valid, camflow_plus_bases(h, w, depth1, K)),
                "span of 12 H + 12 stochastic + 12 depth bases (GT depth, K above)")
        elif name in ("camflow", "camflow_depth"):
            if predictor is None:
                rows.append({"method": name, "epe": None, "photometric": None, "note": predictor_note})
                log(f"stereo {name}: {predictor_note}")
                continue
            if name == "camflow":
                out = predictor(left, right)
                add(name, out["flow_f"], "no depth (constant depth if the model has depth bases)",
                    time.perf_counter() - t)
                continue
            if not getattr(predictor, "num_depth", 0):
                rows.append({"method": name, "epe": None, "photometric": None,
                             "note": "the model has no depth bases"})
                continue
            for s in (1.0,) + tuple(fx_scales):
                t = time.perf_counter()
                Ks = default_intrinsics(h, w, s)
                out = predictor(left, right, depth1=depth1, depth2=depth2, intrinsics=Ks)
                label = name if s == 1.0 else f"{name}_fx{s:g}"
                add(label, out["flow_f"], f"fx = {s:g} x width", time.perf_counter() - t)
        else:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(PAIR_METHODS)}")
    return {"info": info, "disparity_scan": scan, "rows": rows}


# ----------------------------------------------------------------------------- video experiment
def read_frames(path: Path, count: int) -> list[np.ndarray]:
    from itertools import islice

    from camflow_jax.stabilization.video_io import FrameSource

    frames = list(islice(FrameSource(str(path)), count))
    if len(frames) < 4:
        raise ValueError(f"{path}: read {len(frames)} frames, need at least 4")
    return frames


def shake_frames(frames, seed: int = 0, jitter: float = 0.015, jitter_deg: float = 0.5,
                 margin: int = 48) -> tuple[list[np.ndarray], np.ndarray]:
    """Applies a seeded white shake J_t (rotation about the centre, ``jitter_deg`` std, plus a
    translation, ``jitter`` x width std; ``clips.planar_jitter``) and crops ``margin`` px per
    side. Returns (shaken frames, J_t in the cropped frame's pixels: smooth -> shaky)."""
    from camflow_jax.stabilization import clips

    H, W = frames[0].shape[:2]
    h, w = H - 2 * margin, W - 2 * margin
    if h < 16 or w < 16:
        raise ValueError(f"margin {margin} leaves no frame of {W}x{H}")
    rng = np.random.default_rng([seed, 617])
    J = clips.planar_jitter(rng, len(frames), h, w, jitter, jitter_deg)
    T = np.array([[1.0, 0, margin], [0, 1.0, margin], [0, 0, 1.0]])  # crop -> full pixels
    out = []
    for f, Jt in zip(frames, J):
        # crop pixel q shows the static frame at T J^-1 q: warpPerspective(src, M) samples src at M^-1 q.
        M = np.linalg.inv(T @ np.linalg.inv(Jt))
        out.append(cv2.warpPerspective(f, M, (w, h), flags=cv2.INTER_LINEAR,
                                       borderMode=cv2.BORDER_REFLECT101))
    return out, J


def homography_flow_on_grid(H, full_hw, grid_hw) -> np.ndarray:
    """Flow of ``H`` (full-resolution pixels) sampled on a smaller grid, in FULL pixels
    (half-pixel convention: p_full = (p + 0.5) / s - 0.5)."""
    from camflow_jax.stabilization.clips import apply_homography_np

    (Hf, Wf), (h, w) = full_hw, grid_hw
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    p = np.stack([(xs + 0.5) * Wf / w - 0.5, (ys + 0.5) * Hf / h - 0.5], -1)
    return (apply_homography_np(H, p) - p).astype(np.float32)


def stabilize_rows(frames, estimator, jitter=None, fps: float = 25.0, image_metrics: bool = False,
                   config=None) -> dict:
    """Runs the stabilizer on ``frames``; ``jitter`` [T, 3, 3] = ground-truth shake (None: the
    video is static, the identity is the truth)."""
    from camflow_jax.stabilization import clips, pipeline
    from camflow_jax.stabilization import metrics as metrics_lib

    config = config or pipeline.StabilizerConfig()
    H, W = frames[0].shape[:2]
    n = len(frames)
    if jitter is None:
        jitter = np.repeat(np.eye(3)[None], n, 0)
    t0 = time.perf_counter()
    motion = pipeline.estimate_motion(frames, estimator, config, fps)
    plan = pipeline.plan_stabilization(motion, config)
    t1 = time.perf_counter()
    h, w = motion.flows.shape[1:3]
    to_full = np.array([W / w, H / h], np.float32)
    flows_full = motion.flows * to_full
    gt = np.stack([homography_flow_on_grid(jitter[t + 1] @ np.linalg.inv(jitter[t]), (H, W), (h, w))
                   for t in range(n - 1)])
    flow_err = np.linalg.norm(flows_full - gt, axis=-1).mean(axis=(1, 2))
    d_in, d_out = clips.residual_motion(jitter, plan.updates, H, W, plan.zoom)
    out_mag = np.linalg.norm(d_out, axis=-1)            # [T, points], full pixels
    stats = motion.stats
    row = {
        "estimator": motion.estimator, "frames": n, "size": f"{W}x{H}", "working": f"{w}x{h}",
        "flow_mag_px": float(np.linalg.norm(flows_full, axis=-1).mean()),
        "flow_epe_px": float(flow_err.mean()), "flow_epe_max_px": float(flow_err.max()),
        "residual_mean_px": float(out_mag.mean()), "residual_max_px": float(out_mag.max()),
        "input_mean_px": float(np.linalg.norm(d_in, axis=-1).mean()),
        "hf_in_px": clips.highfreq_rms(d_in), "hf_out_px": clips.highfreq_rms(d_out),
        "update_mean_px": float(np.linalg.norm(np.asarray(plan.updates) * to_full, axis=-1).mean()),
        "zoom": plan.zoom, "failures": stats.get("failures", 0),
        "ms_per_pair": stats.get("ms_per_pair_median", float("nan")),
        "seconds": t1 - t0,
    }
    row["hf_reduction"] = row["hf_in_px"] / max(row["hf_out_px"], 1e-9)
    if image_metrics:
        acc = metrics_lib.MetricsAccumulator(fps)
        for a, (_, b, _) in zip(frames, pipeline.render(frames, plan)):
            acc.update(a, b)
        m = acc.finalize()
        row["stability_in"] = m["input"]["stability"]
        row.update({k: m["output"][k] for k in ("stability", "cropping", "distortion")})
        row["metric_failures"] = m["failures"]
        row["seconds_with_metrics"] = time.perf_counter() - t0
    return row


def video_experiment(data: Path, num_frames: int, estimators, predictor, predictor_note: str,
                     seed: int = 0, margin: int = 48, image_metrics: bool = False, log=print) -> dict:
    from camflow_jax.stabilization import estimators as est_lib

    frames = read_frames(data / VIDEO_FILE, num_frames)
    cap = cv2.VideoCapture(str(data / VIDEO_FILE))
    fps = float(cap.get(cv2.CAP_PROP_FPS) or 0) or 25.0
    cap.release()
    shaken, J = shake_frames(frames, seed, margin=margin)
    rows = []
    for kind, clip, jit in (("static", frames, None), ("shake", shaken, J)):
        for name in estimators:
            if name == "camflow":
                if predictor is None:
                    rows.append({"video": kind, "estimator": name, "note": predictor_note})
                    log(f"video {kind} camflow: {predictor_note}")
                    continue
                est = est_lib.CamFlowEstimator(predictor)
            elif name in est_lib.ESTIMATORS:
                est = est_lib.make_estimator(name)
            else:
                raise ValueError(f"unknown estimator {name!r}; choose from {', '.join(VIDEO_ESTIMATORS)}")
            row = {"video": kind, **stabilize_rows(clip, est, jit, fps, image_metrics)}
            rows.append(row)
            log(f"video {kind} {name}: flow EPE {row['flow_epe_px']:.3f} px, residual "
                f"{row['residual_mean_px']:.3f} px (max {row['residual_max_px']:.2f}), HF "
                f"{row['hf_in_px']:.3f} -> {row['hf_out_px']:.3f}, zoom {row['zoom']:.3f}, "
                f"{row['seconds']:.0f} s")
    info = {"frames": len(frames), "fps": fps, "size": list(frames[0].shape[1::-1]),
            "shake": {"seed": seed, "jitter_width_fraction": 0.015, "jitter_deg": 0.5,
                      "margin_px": margin, "shaken_size": list(shaken[0].shape[1::-1])},
            "camflow": predictor_note}
    return {"info": info, "rows": rows}


# ----------------------------------------------------------------------------- reports
def _f(v, fmt=".3f"):
    return "n/a" if v is None or (isinstance(v, float) and not np.isfinite(v)) else format(v, fmt)


def markdown(results: dict) -> str:
    out = []
    st = results.get("stereo")
    if st:
        i = st["info"]
        out += [f"### Stereo: Aloe (Middlebury 2006), {i['working_size'][0]}x{i['working_size'][1]}",
                "",
                f"Valid GT pixels {100 * i['valid_fraction']:.1f}% (full size "
                f"{100 * i['valid_fraction_full']:.1f}%), mean GT flow {i['gt_magnitude_mean']:.2f} px "
                f"(range {i['gt_magnitude_range'][0]:.1f}..{i['gt_magnitude_range'][1]:.1f}); "
                f"K = ({', '.join(f'{v:.1f}' for v in i['intrinsics'])}); CamFlow: {i['camflow']}.", "",
                "| method | EPE px | photometric error (grey levels) | note |", "|---|---|---|---|"]
        for r in st["rows"]:
            out.append(f"| {r['method']} | {_f(r['epe'])} | {_f(r['photometric'], '.2f')} | {r['note']} |")
        out += ["", "Disparity check (full size, warp(right, (-(s d + o), 0)) vs left, valid pixels):", "",
                "| candidate | scale s | offset o | mean abs error | median |", "|---|---|---|---|---|"]
        for r in st["disparity_scan"]["rows"]:
            out.append(f"| {r['kind']} ({r['sign']}) | {r['scale']:.3f} | {r['offset']:+.2f} | "
                       f"{r['mae']:.2f} | {r['median_ae']:.2f} |")
        out.append("")
    vi = results.get("video")
    if vi:
        i = vi["info"]
        out += [f"### Video: vtest.avi, first {i['frames']} frames ({i['size'][0]}x{i['size'][1]}, "
                f"{i['fps']:g} fps); shake seed {i['shake']['seed']}, cropped to "
                f"{i['shake']['shaken_size'][0]}x{i['shake']['shaken_size'][1]}", "",
                "| video | estimator | pair-flow EPE px (mean/max) | mean flow px | residual px mean (max) "
                "| HF shake px in -> out (reduction) | zoom | stability in -> out | cropping | distortion "
                "| ms/pair |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in vi["rows"]:
            if "flow_epe_px" not in r:
                out.append(f"| {r['video']} | {r['estimator']} | {r['note']} |  |  |  |  |  |  |  |  |")
                continue
            red = f"x{r['hf_reduction']:.1f}" if r["hf_in_px"] > 1e-6 else "static input"
            out.append(
                f"| {r['video']} | {r['estimator']} | {_f(r['flow_epe_px'])} / {_f(r['flow_epe_max_px'], '.2f')} "
                f"| {_f(r['flow_mag_px'])} | {_f(r['residual_mean_px'])} ({_f(r['residual_max_px'], '.2f')}) "
                f"| {_f(r['hf_in_px'])} -> {_f(r['hf_out_px'])} ({red}) "
                f"| {_f(r['zoom'])} | {_f(r.get('stability_in'))} -> {_f(r.get('stability'))} "
                f"| {_f(r.get('cropping'))} | {_f(r.get('distortion'))} | {_f(r['ms_per_pair'], '.1f')} |")
        out.append("")
    return "\n".join(out)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


# ----------------------------------------------------------------------------- CLI
def _list(s: str, allowed, what: str) -> list[str]:
    items = [v.strip() for v in s.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {', '.join(bad)}; choose from {', '.join(allowed)}")
    return items


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help=f"folder with {', '.join(STEREO_FILES + (VIDEO_FILE,))} "
                   f"(default {DEFAULT_DATA})")
    p.add_argument("--out", default="out/eval_real", help="writes results.json and results.md here")
    p.add_argument("--checkpoint", default=None,
                   help="CamFlow checkpoint (default: the model shipped in the package, if any)")
    p.add_argument("--methods", default=",".join(PAIR_METHODS), help="stereo rows")
    p.add_argument("--estimators", default=",".join(VIDEO_ESTIMATORS), help="video stabilizer estimators")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--frames", type=int, default=120, help="video frames (from the start)")
    p.add_argument("--width", type=int, default=576, help="stereo working width (aspect kept)")
    p.add_argument("--fx-scales", default="0.7,1.4", help="extra camflow_depth rows with fx scaled")
    p.add_argument("--seed", type=int, default=0, help="shake seed")
    p.add_argument("--margin", type=int, default=48, help="crop per side of the shaken video (px)")
    p.add_argument("--image-metrics", action="store_true",
                   help="also render the stabilized clips and measure stability/cropping/distortion "
                        "with SIFT (metrics.MetricsAccumulator; ~2 min more per clip and estimator on 2 cores)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        parts = _list(args.parts, PARTS, "part")
        methods = _list(args.methods, PAIR_METHODS, "method")
        estimators = _list(args.estimators, VIDEO_ESTIMATORS, "estimator")
        fx_scales = tuple(float(v) for v in args.fx_scales.split(",") if v.strip())
        if args.frames < 4:
            raise ValueError("--frames must be >= 4")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    data = Path(args.data or DEFAULT_DATA)
    needed = (list(STEREO_FILES) if "stereo" in parts else []) + ([VIDEO_FILE] if "video" in parts else [])
    missing = [f for f in needed if not (data / f).is_file()]
    if missing:
        extra = "" if args.data is None else f" (or a --data folder with {', '.join(missing)}; {data} lacks them)"
        print(MISSING_DATA + extra, file=sys.stderr)
        return 2
    wants_camflow = any(m.startswith("camflow") for m in methods) and "stereo" in parts or \
        ("camflow" in estimators and "video" in parts)
    predictor, note = (None, "not requested")
    if wants_camflow:
        try:
            predictor, note = load_predictor(args.checkpoint)
        except (ValueError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"CamFlow: {note}")
    results = {"command": "python tools/eval_real.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "data": str(data)}
    if "stereo" in parts:
        results["stereo"] = stereo_experiment(data, args.width, methods, predictor, note, fx_scales)
    if "video" in parts:
        results["video"] = video_experiment(data, args.frames, estimators, predictor, note, args.seed,
                                            args.margin, args.image_metrics)
    md = markdown(results)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(_jsonable(results), indent=1))
        (out / "results.md").write_text(md + "\n")
        print(f"wrote {out / 'results.json'} and {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
