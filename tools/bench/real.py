"""Camera-motion estimators on real images that Debian's ``opencv-doc`` package ships (no
download): the experiments behind ``python tools/eval_real.py`` (docs/real_images.md).

1. **Stereo** (:func:`stereo_experiment`; Middlebury 2006 'Aloe': aloeL.jpg, aloeR.jpg,
   aloeGT.png = the LEFT view's disparity, 0 = unknown). image1 = left, image2 = right; the
   ground-truth forward flow on valid pixels is (-d, 0) (warp(right, flow) = left). Before
   anything else the disparity scale is checked photometrically (:func:`disparity_scale_scan`).
   Both images are resized (``cv2.INTER_AREA``) to ``width`` px wide, aspect kept; the
   disparity is area-averaged over valid pixels and scaled by the x factor, and a working pixel
   is valid only when every full-resolution pixel under it is (:func:`resize_pair`). Rows: the
   dense EPE (mean endpoint error over valid pixels, :func:`camflow_jax.evaluation.metrics.epe_valid`) and
   the photometric error of every estimator asked for (registry names,
   :mod:`camflow_jax.estimators.registry`); CamFlow estimators give a row without depth and, for a
   depth model, one with depth (``NAME (depth)``, plus ``--fx-scales`` rows for ``camflow_net``).
   Evaluation-only oracles fit the ground truth itself (:data:`ORACLES`).
   Depth: depth1 = 1 / d (any global scale: the depth bases are scale-free), holes filled along
   each row by the farther nearest valid neighbour (:func:`fill_rows`); depth2 = the left
   disparity forward-projected to the right view (:func:`forward_project_disparity`). K (not
   given for these files): fx = fy = working width, principal point at the centre.
2. **Video** (:func:`video_experiment`; vtest.avi, a static camera with walking people).
   ``static``: the stabilizer (:mod:`camflow_jax.stabilization.pipeline`, default config) runs on
   the video as it is; every motion it adds is an error. ``shake``: a seeded synthetic shake
   (:func:`shake_frames`) is applied and the frames cropped so no border shows; the estimated
   pair flows are compared with the exact ones (J_{t+1} J_t^-1), and the shake left after
   stabilization is measured against ground truth (``clips.residual_motion`` /
   ``clips.highfreq_rms``) and, with ``image_metrics``, by the image metrics of the rendered
   output (``stabilization.metrics.MetricsAccumulator``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from camflow_jax import bases
from camflow_jax.estimators import registry
from camflow_jax.evaluation import metrics
from camflow_jax.geometry import device, host
from camflow_jax.predictor import Predictor
from camflow_jax.stabilization import clips, pipeline
from camflow_jax.stabilization import estimators as stab_estimators
from camflow_jax.stabilization import metrics as metrics_lib
from camflow_jax.stabilization.clips import apply_homography_np
from tools.bench import opencv_doc

__all__ = ["ORACLES", "PAIR_METHODS", "VIDEO_ESTIMATORS", "DEPTH_ROW", "check_pair_methods",
           "check_video_estimators", "load_model", "pair_estimators", "video_estimators",
           "disparity_to_flow", "photometric_error", "disparity_scale_scan", "resize_pair", "fill_rows",
           "forward_project_disparity", "default_intrinsics", "fit_span", "homography12_bases",
           "camflow_plus_bases", "fit_single_homography", "stereo_experiment", "shake_frames",
           "homography_flow_on_grid", "stabilize_rows", "video_experiment"]

#: Evaluation-only oracles: they fit the ground truth itself (not estimators: no registry name).
ORACLES = ("oracle_homography", "oracle_h12", "oracle_span36")
#: Default stereo rows: registry estimators, then the oracles.
PAIR_METHODS = ("identity", "sift_magsac", "dis", "camflow", "camflow_net") + ORACLES
#: Default video estimators (registry names; ``camflow_net`` may be added).
VIDEO_ESTIMATORS = ("sift_ransac", "dis", "camflow")
#: Row labels of a CamFlow estimator NAME without / with depth (``fx`` rows add the scale).
DEPTH_ROW = {False: "{name} (no depth)", True: "{name} (depth)"}
#: Stereo method names of earlier versions that are rows of other names now.
_RENAMED = {"camflow_depth": "method 'camflow_depth' is now the '(depth)' rows of camflow (refined) "
                             "and camflow_net (network alone): pass camflow or camflow_net"}


# ----------------------------------------------------------------------------- names and models
def check_pair_methods(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(registry names and oracles, notes): old registry names map to the new ones with a
    note; unknown names raise ValueError naming the valid ones."""
    return _resolve(names, ORACLES)


def check_video_estimators(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(registry names, notes) for the video part, as :func:`check_pair_methods`."""
    return _resolve(names, ())


def _resolve(names, oracles) -> tuple[list[str], list[str]]:
    out, notes = [], []
    for name in names:
        if name in oracles:
            out.append(name)
            continue
        if name in _RENAMED:
            raise ValueError(_RENAMED[name])
        try:
            canonical, note = registry.resolve(name)
        except ValueError as e:
            raise ValueError(f"{e}" + (f"; or an evaluation-only oracle: {', '.join(oracles)}" if oracles else "")) \
                from None
        out.append(canonical)
        notes += [note] if note else []
    return out, notes


def load_model(checkpoint: str | None):
    """(predictor or None, note): ``checkpoint``, or the shipped model without one; None with
    the reason when there is none."""

    try:
        pred = Predictor.load(checkpoint)
    except FileNotFoundError as e:
        return None, f"skipped: {e}"
    return pred, pred.description


def pair_estimators(methods: Sequence[str], model, note: str, refine_size: int | None = None) -> dict:
    """name -> registry estimator for the non-oracle stereo ``methods`` (the argument
    :func:`stereo_experiment` takes). ``camflow`` / ``camflow_net`` share ``model`` (from
    :func:`load_model`; None: the rows are skipped with ``note``); ``camflow:PATH`` loads its own.
    ``refine_size``: the refined camflow rows refine at this longer side
    (:meth:`camflow_jax.refine.RefineConfig.at_size`); the others ignore it."""
    out = {}
    for name in methods:
        if name in ORACLES:
            continue
        size = {"refine_size": refine_size} if refine_size is not None and registry.is_refined(name) else {}
        if registry.is_camflow(name) and ":" not in name:
            out[name] = note if model is None else registry.get(name, predictor=model, **size)
        elif registry.is_camflow(name):
            out[name] = registry.get(name, **size)
            out[name].predictor  # noqa: B018  (loaded now: a missing checkpoint is said up front)
        else:
            out[name] = registry.get(name, forward_only=True)
    return out


def video_estimators(names: Sequence[str], model, note: str, refine_size: int | None = None) -> dict:
    """name -> factory of a fresh stabilizer estimator (the argument :func:`video_experiment`
    takes; :mod:`camflow_jax.stabilization.estimators`, built once here). ``camflow`` /
    ``camflow_net`` run ``model`` (None: skipped with ``note``); ``camflow:PATH`` loads its own.
    ``refine_size``: as :func:`pair_estimators` (refined camflow only)."""

    out = {}
    for name in names:
        size = refine_size if registry.is_refined(name) else None
        if registry.is_camflow(name) and ":" not in name:
            if model is None:
                out[name] = note
                continue
            est = stab_estimators.CamFlowEstimator(model, refine=name == "camflow", refine_size=size)
        else:
            est = stab_estimators.make_estimator(name, refine_size=size)
        out[name] = est.fresh
    return out


# ----------------------------------------------------------------------------- stereo pieces
def disparity_to_flow(disp, valid=None, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """Forward flow left -> right of a rectified pair: (-(scale d + offset), 0); 0 where invalid.

    Left pixel (x, y) is seen at (x - d, y) in the right image, so ``warp(right, flow) = left``.
    """
    d = np.asarray(disp, np.float32) * scale + offset
    if valid is not None:
        d = np.where(valid, d, 0.0)
    return np.stack([-d, np.zeros_like(d)], axis=-1).astype(np.float32)


def _abs_error(img1, img2, flow) -> tuple[np.ndarray, np.ndarray]:
    """(|warp(img2, flow) - img1| averaged over channels, where the warp is defined)."""
    flow = np.asarray(flow, np.float32)
    err = np.abs(host.warp(img2, flow) - np.asarray(img1, np.float32))
    err = err.mean(-1) if err.ndim == 3 else err
    return err, host.warp_validity(flow) > 0


def photometric_error(img1, img2, flow, mask) -> float:
    """Mean absolute grey-level error |warp(img2, flow) - img1| (mean over channels) on
    ``mask`` pixels whose sample lies inside image 2."""
    err, inside = _abs_error(img1, img2, np.nan_to_num(np.asarray(flow, np.float32)))
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
        err, inside = _abs_error(left, right, flow)
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


# ----------------------------------------------------------------------------- oracles (evaluation only)
def fit_span(gt, mask, basis) -> np.ndarray:
    """Oracle: least-squares fit (float64, valid pixels only) of ``gt`` [h, w, 2] in the span of
    ``basis`` [N, h, w, 2]; returns the fitted flow on the whole grid."""
    basis = np.asarray(basis, np.float64)
    m = np.asarray(mask, bool)
    A = basis[:, m, :].reshape(basis.shape[0], -1).T          # [2M, N]
    b = np.asarray(gt, np.float64)[m].reshape(-1)
    coeffs, *_ = np.linalg.lstsq(A, b, rcond=None)
    return np.tensordot(coeffs, basis, axes=1).astype(np.float32)


def homography12_bases(h: int, w: int) -> np.ndarray:

    return np.asarray(bases.homography_bases(h, w))


def camflow_plus_bases(h: int, w: int, depth, K) -> np.ndarray:
    """The default CamFlow+ set (12 homography + 12 stochastic (seed 0) + 12 depth bases,
    depth sigmas for this width)."""

    return np.asarray(bases.hybrid_bases(h, w, np.asarray(depth, np.float32), np.asarray(K, np.float32)))


def fit_single_homography(gt, mask) -> tuple[np.ndarray, np.ndarray]:
    """Oracle: (flow of the homography fitted to ``gt`` on ``mask`` pixels (DLT), H)."""
    g = np.where(np.asarray(mask, bool)[..., None], gt, 0.0).astype(np.float32)
    H = np.asarray(device.fit_homography(g, np.asarray(mask, np.float32)), np.float64)
    h, w = g.shape[:2]
    return host.homography_flow(H, h, w), H


# ----------------------------------------------------------------------------- stereo experiment
def stereo_experiment(data, width: int, methods: Sequence[str], ests: Mapping[str, object],
                      fx_scales=(0.7, 1.4), camflow_note: str = "", log=print) -> dict:
    """The Aloe rows (module doc). ``ests``: every non-oracle name of ``methods`` ->
    an estimator ``est(img1, img2, *, depth1=None, depth2=None, intrinsics=None)`` returning a
    :class:`camflow_jax.estimators.registry.Motion` (:func:`pair_estimators`), or a string: the reason
    it is skipped. A CamFlow estimator gets depth rows when its model has depth bases
    (``est.predictor.num_depth`` > 0)."""
    left_f, right_f, disp_f, valid_f = opencv_doc.load_stereo(data)
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
        "camflow": camflow_note,
    }
    rows = []

    def add(name, flow, note="", seconds=None):
        r = {"method": name, "epe": metrics.epe_valid(flow, gt, valid),
             "photometric": photometric_error(left, right, flow, valid), "note": note}
        if seconds is not None:
            r["seconds"] = seconds
        rows.append(r)
        log(f"stereo {name}: EPE {r['epe']:.3f} px, photometric {r['photometric']:.2f} {note}")

    def skip(name, note):
        rows.append({"method": name, "epe": None, "photometric": None, "note": note})
        log(f"stereo {name}: {note}")

    for name in methods:
        t = time.perf_counter()
        if name == "oracle_homography":
            flow, _ = fit_single_homography(gt, valid)
            add(name, flow, "one homography, DLT fit of the GT on valid pixels")
            continue
        if name == "oracle_h12":
            add(name, fit_span(gt, valid, homography12_bases(h, w)), "span of the 12 homography bases")
            continue
        if name == "oracle_span36":
            add(name, fit_span(gt, valid, camflow_plus_bases(h, w, depth1, K)),
                "span of 12 H + 12 stochastic + 12 depth bases (GT depth, K above)")
            continue
        est = ests[name]
        est = est if isinstance(est, str) else getattr(est, "raw", est)  # no plausibility checks
        if not registry.is_camflow(name):
            if isinstance(est, str):
                skip(name, est)
                continue
            motion = est(left, right)
            add(name, motion.flow_f, "identity fallback" if motion.fallback else "", time.perf_counter() - t)
            continue
        plain, with_depth = DEPTH_ROW[False].format(name=name), DEPTH_ROW[True].format(name=name)
        if isinstance(est, str):
            skip(plain, est)
            continue
        add(plain, est(left, right).flow_f, "constant depth if the model has depth bases",
            time.perf_counter() - t)
        if not getattr(getattr(ests[name], "predictor", None), "num_depth", 0):
            skip(with_depth, "the model has no depth bases")
            continue
        scales = (1.0,) + (tuple(fx_scales) if name.split(":", 1)[0] == "camflow_net" else ())
        for s in scales:
            t = time.perf_counter()
            motion = est(left, right, depth1=depth1, depth2=depth2, intrinsics=default_intrinsics(h, w, s))
            label = with_depth if s == 1.0 else f"{name} (depth, fx x{s:g})"
            add(label, motion.flow_f, f"fx = {s:g} x width", time.perf_counter() - t)
    return {"info": info, "disparity_scan": scan, "rows": rows}


# ----------------------------------------------------------------------------- video experiment
def shake_frames(frames, seed: int = 0, jitter: float = 0.015, jitter_deg: float = 0.5,
                 margin: int = 48) -> tuple[list[np.ndarray], np.ndarray]:
    """Applies a seeded white shake J_t (rotation about the centre, ``jitter_deg`` std, plus a
    translation, ``jitter`` x width std; ``clips.planar_jitter``) and crops ``margin`` px per
    side. Returns (shaken frames, J_t in the cropped frame's pixels: smooth -> shaky)."""

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

    (Hf, Wf), (h, w) = full_hw, grid_hw
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    p = np.stack([(xs + 0.5) * Wf / w - 0.5, (ys + 0.5) * Hf / h - 0.5], -1)
    return (apply_homography_np(H, p) - p).astype(np.float32)


def stabilize_rows(frames, estimator, jitter=None, fps: float = 25.0, image_metrics: bool = False,
                   config=None) -> dict:
    """Runs the stabilizer on ``frames``; ``jitter`` [T, 3, 3] = ground-truth shake (None: the
    video is static, the identity is the truth)."""

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


def video_experiment(data, num_frames: int, factories: Mapping[str, Callable | str], seed: int = 0,
                     margin: int = 48, image_metrics: bool = False, camflow_note: str = "",
                     log=print) -> dict:
    """The vtest.avi rows (module doc). ``factories``: name -> a factory returning a fresh
    stabilization estimator (``est(frame_t, frame_t1) -> flow``, see
    :mod:`camflow_jax.stabilization.estimators`), or a string: the reason it is skipped."""
    path = Path(data) / opencv_doc.VIDEO_FILE
    frames = opencv_doc.read_frames(path, num_frames)
    fps = opencv_doc.video_fps(path)
    shaken, J = shake_frames(frames, seed, margin=margin)
    rows = []
    for kind, clip, jit in (("static", frames, None), ("shake", shaken, J)):
        for name, make in factories.items():
            if isinstance(make, str):
                rows.append({"video": kind, "estimator": name, "note": make})
                log(f"video {kind} {name}: {make}")
                continue
            row = {"video": kind, **stabilize_rows(clip, make(), jit, fps, image_metrics)}
            row["estimator"] = name
            rows.append(row)
            log(f"video {kind} {name}: flow EPE {row['flow_epe_px']:.3f} px, residual "
                f"{row['residual_mean_px']:.3f} px (max {row['residual_max_px']:.2f}), HF "
                f"{row['hf_in_px']:.3f} -> {row['hf_out_px']:.3f}, zoom {row['zoom']:.3f}, "
                f"{row['seconds']:.0f} s")
    info = {"frames": len(frames), "fps": fps, "size": list(frames[0].shape[1::-1]),
            "shake": {"seed": seed, "jitter_width_fraction": 0.015, "jitter_deg": 0.5,
                      "margin_px": margin, "shaken_size": list(shaken[0].shape[1::-1])},
            "camflow": camflow_note}
    return {"info": info, "rows": rows}
