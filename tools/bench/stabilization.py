"""Estimator comparison on generated shaky clips (the README's stabilization table).

    python -m tools.bench.stabilization --estimators sift_ransac,orb_ransac,dis \\
        [--checkpoint CKPT  (adds camflow)] --kinds planar,parallax --frames 96 \\
        --size 320x576 --seeds 0 --out results.json [--plot docs/images/stabilization_path.png]

For every clip (``clips.planar_clip`` / ``clips.parallax_clip``) and estimator, the clip is
stabilized in memory with the same :class:`~camflow_jax.stabilization.pipeline.StabilizerConfig`
and measured two ways:

* ground truth: high-frequency residual RMS (pixels, above 0.1 cycles/frame) of points fixed in
  the smooth frame, input vs output (``clips.residual_motion`` / ``clips.highfreq_rms``), and
  their ratio (the reduction factor);
* image-based metrics of the output frames (``metrics.MetricsAccumulator``): stability
  (1 Hz band, and the classic 5-bin variant), cropping, distortion.

Timings are wall-clock on whatever machine runs it: the estimator's median milliseconds per
frame pair, and the whole pipeline (estimation + smoothing + rendering) per frame.

Side by side with ffmpeg's vid.stab (:func:`compare_with_vidstab`, ``python -m tools.bench stab_vs_vidstab``):
each clip (a real video shaken by a seeded known motion, :func:`clips.shake_video`, e.g.
OpenCV's ``vtest.avi``; the moving-object clip :func:`clips.moving_object_clip` and the same
clip without the object) is written losslessly (FFV1), stabilized by vid.stab's two passes
(``vidstabdetect`` then ``vidstabtransform``, ``smoothing=30:optzoom=1``, on yuv444p: vid.stab
refuses packed RGB) and by our pipeline
with each estimator; every output is written as FFV1 and decoded by the same ffmpeg call, then
scored the same way: the library's metrics (stability, ``jitter_px``, cropping,
``border_fraction``, distortion) and the ground-truth residual (:func:`output_residual`: the
input -> output homography of each frame, fitted by SIFT, composed with the exact shake J_t,
high-pass RMS of where points fixed in the smooth view land). Time per frame: vid.stab's two
ffmpeg runs (their FFV1 decoding and encoding included; a plain FFV1 transcode is timed too),
ours from the first frame in memory to the last stabilized frame (encoding excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

from camflow_jax.estimators import registry
from camflow_jax.stabilization import clips as clips_lib
from camflow_jax.stabilization import estimators as stab_estimators
from camflow_jax.stabilization import metrics as metrics_lib
from camflow_jax.stabilization import pipeline
from camflow_jax.stabilization.plots import COLORS, stacked_axes
from tools.bench.timing import load_average, time_command

__all__ = ["evaluate_clip", "hard_clips", "run_benchmark", "markdown_table", "plot_paths", "main",
           "VTEST_CANDIDATES", "find_vtest", "ffmpeg_has_vidstab", "decode_video",
           "encode_lossless", "vidstab_commands", "run_vidstab", "output_residual", "score_output",
           "compare_with_vidstab", "comparison_table"]

#: Where Debian's opencv-doc package puts OpenCV's sample video of walking people.
VTEST_CANDIDATES = ("/usr/share/doc/opencv-doc/examples/data/vtest.avi",
                    "/usr/share/opencv4/samples/data/vtest.avi")


def evaluate_clip(clip: clips_lib.ShakyClip, estimator, config: pipeline.StabilizerConfig,
                  with_metrics: bool = True) -> dict:
    """Stabilizes one clip with one estimator; returns the measurements (module doc)."""
    frames = list(clip.frames)
    n = len(frames)
    h, w = frames[0].shape[:2]
    t0 = time.perf_counter()
    motion = pipeline.estimate_motion(frames, estimator, config, clip.fps)
    t1 = time.perf_counter()
    plan = pipeline.plan_stabilization(motion, config)
    t2 = time.perf_counter()
    out = [o for _, o, _ in pipeline.render(frames, plan)]
    t3 = time.perf_counter()
    d_in, d_out = clips_lib.residual_motion(clip.jitter, plan.updates, h, w, plan.zoom)
    hf_in, hf_out = clips_lib.highfreq_rms(d_in), clips_lib.highfreq_rms(d_out)
    stats = motion.stats
    row = {
        "clip": clip.kind, "seed": clip.info.get("seed"), "estimator": motion.estimator,
        "frames": n, "size": f"{w}x{h}", "zoom": plan.zoom,
        "hf_residual_in_px": hf_in, "hf_residual_out_px": hf_out,
        "hf_reduction": hf_in / max(hf_out, 1e-9),
        "failures": stats.get("failures", 0),
        "estimator_ms_per_pair": stats.get("ms_per_pair_median", float("nan")),
        "pipeline_ms_per_frame": 1000 * (t3 - t0) / n,
        "smooth_ms_per_frame": 1000 * (t2 - t1) / n,
        "render_ms_per_frame": 1000 * (t3 - t2) / n,
    }
    if with_metrics:
        acc = metrics_lib.MetricsAccumulator(clip.fps)
        for a, b in zip(frames, out):
            acc.update(a, b)
        m = acc.finalize()
        stab = ("stability", "stability_translation", "stability_rotation", "jitter_px",
                "stability_classic", "border_fraction")
        row["input"] = {k: m["input"][k] for k in stab}
        row.update({k: m["output"][k] for k in stab + ("cropping", "cropping_min",
                                                       "cropping_scale", "distortion")})
        row["metric_failures"] = m["failures"]
        row["path_input"] = {k: v.tolist() for k, v in m["path_input"].items()}
        row["path_output"] = {k: v.tolist() for k, v in m["path_output"].items()}
    return row


def run_benchmark(estimators: dict, kinds=("planar", "parallax"), num_frames: int = 96,
                  height: int = 320, width: int = 576, seeds=(0,),
                  config: pipeline.StabilizerConfig | None = None, with_metrics: bool = True,
                  log=print) -> list[dict]:
    """``estimators``: name -> zero-argument factory (a fresh estimator per clip)."""
    config = config or pipeline.StabilizerConfig()
    rows = []
    for kind in kinds:
        make = {"planar": clips_lib.planar_clip, "parallax": clips_lib.parallax_clip}[kind]
        for seed in seeds:
            clip = make(num_frames, height, width, seed=seed)
            for name, factory in estimators.items():
                row = evaluate_clip(clip, factory(), config, with_metrics)
                rows.append(row)
                if log:
                    log(f"{kind} seed {seed} {name}: hf {row['hf_residual_in_px']:.3f} -> "
                        f"{row['hf_residual_out_px']:.3f} px (x{row['hf_reduction']:.1f}), "
                        f"stability {row.get('stability', float('nan')):.3f}, "
                        f"cropping {row.get('cropping', float('nan')):.3f}, "
                        f"distortion {row.get('distortion', float('nan')):.3f}, "
                        f"{row['estimator_ms_per_pair']:.1f} ms/pair")
    return rows


def markdown_table(rows: list[dict]) -> str:
    """Mean over seeds per (clip, estimator), plus an 'input' row per clip kind."""
    lines = ["| clip | estimator | stability (1 Hz) | translation / rotation | jitter px "
             "| stability (5-bin, published) | cropping | border | distortion "
             "| HF residual px (reduction) | estimator ms/pair | pipeline ms/frame |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def stab(rs, sub=None):
        return (f"{mean(rs, 'stability', sub):.3f} | {mean(rs, 'stability_translation', sub):.3f}"
                f" / {mean(rs, 'stability_rotation', sub):.3f} | "
                f"{mean(rs, 'jitter_px', sub):.2f} | {mean(rs, 'stability_classic', sub):.3f}")

    def mean(rs, key, sub=None):
        vals = [(r[sub][key] if sub else r.get(key)) for r in rs]
        vals = [v for v in vals if v is not None and np.isfinite(v)]
        return float(np.mean(vals)) if vals else float("nan")

    for kind in dict.fromkeys(r["clip"] for r in rows):
        rs = [r for r in rows if r["clip"] == kind]
        if "input" in rs[0]:
            lines.append(f"| {kind} | (input) | {stab(rs, 'input')} | 1 | "
                         f"{mean(rs, 'border_fraction', 'input'):.3f} | 1 | "
                         f"{mean(rs, 'hf_residual_in_px'):.2f} | | |")
        for name in dict.fromkeys(r["estimator"] for r in rs):
            e = [r for r in rs if r["estimator"] == name]
            lines.append(
                f"| {kind} | {name} | {stab(e)} | {mean(e, 'cropping'):.3f} | "
                f"{mean(e, 'border_fraction'):.3f} | {mean(e, 'distortion'):.3f} | {mean(e, 'hf_residual_out_px'):.2f} "
                f"(x{mean(e, 'hf_reduction'):.1f}) | {mean(e, 'estimator_ms_per_pair'):.1f} | "
                f"{mean(e, 'pipeline_ms_per_frame'):.1f} |")
    return "\n".join(lines)


def plot_paths(rows: list[dict], filename: str, fps: float = 30.0, title: str = "") -> None:
    """Camera path (x, y, rotation) of the input (dashed) and of each estimator's output."""

    fig, axes = stacked_axes(3, width=6.4, height_per_row=1.45)
    ref = rows[0]["path_input"]
    t = np.arange(len(ref["tx"])) / fps
    for ax, key, label, scale in zip(axes, ("tx", "ty", "theta"),
                                     ("x (px)", "y (px)", "rot (deg)"),
                                     (1.0, 1.0, 180 / np.pi)):
        ax.plot(t, np.asarray(ref[key]) * scale, "--", color="0.4", lw=1.0, label="input")
        for k, r in enumerate(rows):
            ax.plot(t, np.asarray(r["path_output"][key]) * scale, "-",
                    color=COLORS[k % len(COLORS)], lw=1.3, label=r["estimator"])
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=len(rows) + 1, loc="best")
    axes[-1].set_xlabel("time (s)")
    if title:
        axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(filename, dpi=80)


def find_vtest() -> str | None:
    """Path of OpenCV's ``vtest.avi`` if installed (``apt-get install opencv-doc``), else None."""
    for p in VTEST_CANDIDATES:
        if os.path.isfile(p):
            return p
    return None


def _ffmpeg() -> str:
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise FileNotFoundError("ffmpeg not found (Debian: apt-get install ffmpeg)")
    return exe


def ffmpeg_has_vidstab() -> bool:
    """Whether the installed ffmpeg has the vidstabdetect / vidstabtransform filters."""
    try:
        out = subprocess.run([_ffmpeg(), "-hide_banner", "-filters"], capture_output=True,
                             text=True, check=True).stdout
    except (FileNotFoundError, subprocess.CalledProcessError):
        return False
    return "vidstabdetect" in out and "vidstabtransform" in out


#: The hard set's degradations (:func:`hard_clips`): a dark, noisy video (gain, noise std in grey
#: levels) and a blurred one (sigma as a fraction of the frame width), and the share of the frame
#: the large foreground object covers.
HARD_DARK = (0.2, 3.0)
HARD_BLUR_WIDTHS = 0.012
HARD_FOREGROUND = 0.45
#: The low-resolution clip's size (H, W): at most 200 px wide.
HARD_LOW_RES = (144, 192)


def hard_clips(video: str, frames: int, size: tuple[int, int], seed: int, fps: float,
               synthetic_size: tuple[int, int], synthetic_frames: int) -> dict:
    """The hard set of issue 42, each with its exact shake: ``video`` (a still-camera video)
    scaled to :data:`HARD_LOW_RES` and shaken; shaken at ``size`` and then darkened with
    noise (:data:`HARD_DARK`); shaken and blurred to little texture (:data:`HARD_BLUR_WIDTHS`);
    and the synthetic moving-object clip with a foreground object covering
    :data:`HARD_FOREGROUND` of the frame (the usual one covers 25 %)."""
    from camflow_jax.stabilization import clips

    shaken = clips.shake_video(decode_video(video, frames, size), seed, fps=fps)
    h, w = synthetic_size
    return {
        "low_res": clips.shake_video(decode_video(video, frames, HARD_LOW_RES), seed, fps=fps),
        "dark_noisy": clips.degrade(shaken, gain=HARD_DARK[0], noise_std=HARD_DARK[1], seed=seed),
        "low_texture": clips.degrade(shaken, blur_sigma=HARD_BLUR_WIDTHS * size[1], seed=seed),
        "large_foreground": clips.moving_object_clip(synthetic_frames, h, w, seed=seed,
                                                     object_fraction=HARD_FOREGROUND),
    }


def decode_video(path: str, max_frames: int | None = None,
                 size: tuple[int, int] | None = None) -> np.ndarray:
    """Frames ``[T, H, W, 3]`` uint8 RGB decoded by ffmpeg (the one decoder every output goes
    through); ``size`` (H, W) resizes (area filter), ``max_frames`` keeps the first frames."""
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                            "stream=width,height", "-of", "csv=p=0", path],
                           capture_output=True, text=True)
    if probe.returncode != 0 or not probe.stdout.strip():
        raise ValueError(f"cannot read video {path}")
    w0, h0 = (int(v) for v in probe.stdout.strip().split(",")[:2])
    h, w = size if size else (h0, w0)
    cmd = [_ffmpeg(), "-v", "error", "-i", path]
    if max_frames:
        cmd += ["-frames:v", str(int(max_frames))]
    if (h, w) != (h0, w0):
        cmd += ["-vf", f"scale={w}:{h}:flags=area"]
    cmd += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    res = subprocess.run(cmd, capture_output=True)
    if res.returncode != 0:
        raise ValueError(f"ffmpeg could not decode {path}: {res.stderr.decode(errors='replace').strip()[-200:]}")
    n = len(res.stdout) // (h * w * 3)
    return np.frombuffer(res.stdout[:n * h * w * 3], np.uint8).reshape(n, h, w, 3).copy()


def encode_lossless(frames, path: str, fps: float) -> float:
    """Writes RGB frames ``[T, H, W, 3]`` to ``path`` as FFV1 (lossless, ``.mkv``); seconds."""
    frames = np.ascontiguousarray(np.asarray(frames, np.uint8))
    t_len, h, w = frames.shape[:3]
    cmd = [_ffmpeg(), "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
           f"{w}x{h}", "-r", f"{fps:g}", "-i", "-", "-c:v", "ffv1", "-pix_fmt", "bgr0", path]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, input=frames.tobytes(), capture_output=True)
    if res.returncode != 0:
        raise OSError(f"ffmpeg could not write {path}: {res.stderr.decode(errors='replace')[-200:]}")
    return time.perf_counter() - t0


def vidstab_commands(src: str, dst: str, trf: str, smoothing: int = 30, shakiness: int = 5,
                     accuracy: int = 15, lossless: bool = True) -> list[list[str]]:
    """vid.stab's two ffmpeg passes on ``src`` -> ``dst``: ``vidstabdetect`` (shakiness,
    accuracy; transforms to the ``trf`` file), then ``vidstabtransform`` (``smoothing`` frames
    each side, ``optzoom=1``: the static zoom that hides borders, ``interpol=bicubic``).
    ``lossless``: through 4:4:4 to FFV1 (for scoring); else to H.264 as a user would (libx264,
    CRF 18, 4:2:0)."""
    ff = [_ffmpeg(), "-v", "error", "-y", "-i", src]
    pre = "format=yuv444p," if lossless else ""
    out = ["-c:v", "ffv1", "-pix_fmt", "bgr0"] if lossless else ["-c:v", "libx264", "-crf", "18",
                                                                 "-pix_fmt", "yuv420p"]
    return [ff + ["-vf", f"{pre}vidstabdetect=shakiness={shakiness}:accuracy={accuracy}:result={trf}",
                  "-f", "null", "-"],
            ff + ["-vf", f"{pre}vidstabtransform=input={trf}:smoothing={smoothing}:optzoom=1:interpol=bicubic",
                  *out, dst]]


def run_vidstab(src: str, dst: str, smoothing: int = 30, shakiness: int = 5,
                accuracy: int = 15, workdir: str | None = None) -> dict:
    """:func:`vidstab_commands` (lossless) on ``src`` -> ``dst``, timed; also times a plain
    FFV1 transcode of ``src`` (the share of decoding and encoding). Returns seconds."""
    workdir = workdir or os.path.dirname(os.path.abspath(dst))
    detect, transform = vidstab_commands(src, dst, os.path.join(workdir, "vidstab.trf"), smoothing,
                                         shakiness, accuracy)
    t_detect, t_transform = time_command(detect), time_command(transform)
    t_copy = time_command([_ffmpeg(), "-v", "error", "-y", "-i", src, "-c:v", "ffv1", "-pix_fmt", "bgr0",
                           os.path.join(workdir, "copy.mkv")])
    return {"detect_s": t_detect, "transform_s": t_transform, "transcode_s": t_copy}


def output_residual(frames_in, frames_out, jitter, grid: int = 5, margin: float = 0.2,
                    max_side: int = 640, ecc: bool = False) -> dict:
    """Ground-truth shake left in any stabilizer's output (module doc).

    Per frame t the homography W_t input -> output (SIFT, :func:`metrics.frame_homography`);
    points u fixed in the smooth view land at J_t(u) in the input and W_t(J_t(u)) in the
    output; ``hf_out_px`` is :func:`clips.highfreq_rms` (Hann-windowed: a stabilizer may remove
    the clip's slow sway, which must not leak into the band) of W_t J_t u - u (a constant zoom
    and a slow drift are not shake), ``hf_in_px`` that of J_t u - u. Frames whose match fails are
    skipped (counted in ``failures``). ``ecc``: also ``hf_out_ecc_px``, the same residual with
    each W_t refined by ECC at full resolution (:func:`camflow_jax.geometry.classical.ecc_refine`),
    and ``ecc_failures`` (SIFT's failures plus frames where ECC does not converge). On dark,
    noisy or blurred frames that are zoomed and resampled, SIFT's W_t is off by tenths of a
    pixel and ECC's is not (docs/stabilization.md, "The floor depends on the zoom").
    """
    from camflow_jax.geometry import classical

    h, w = np.asarray(frames_in[0]).shape[:2]
    xs = np.linspace(margin * (w - 1), (1 - margin) * (w - 1), grid)
    ys = np.linspace(margin * (h - 1), (1 - margin) * (h - 1), grid)
    u = np.stack(np.meshgrid(xs, ys), -1).reshape(-1, 2)
    d_in, d_out, d_ecc, failures = [], [], [], 0
    for a, b, J in zip(frames_in, frames_out, np.asarray(jitter, np.float64), strict=True):
        M = metrics_lib.frame_homography(a, b, max_side)
        if M is None:
            failures += 1
            continue
        z = clips_lib.apply_homography_np(J, u)
        d_in.append(z - u)
        d_out.append(clips_lib.apply_homography_np(M, z) - u)
        if ecc and (M_ecc := classical.ecc_refine(a, b, M)) is not None:
            d_ecc.append(clips_lib.apply_homography_np(M_ecc, z) - u)
    if len(d_out) < 4 or (ecc and len(d_ecc) < 4):
        raise ValueError("too few frames could be matched between input and output")
    out = {"hf_in_px": clips_lib.highfreq_rms(np.stack(d_in), window=True),
           "hf_out_px": clips_lib.highfreq_rms(np.stack(d_out), window=True),
           "failures": failures}
    if ecc:
        out["hf_out_ecc_px"] = clips_lib.highfreq_rms(np.stack(d_ecc), window=True)
        out["ecc_failures"] = len(frames_out) - len(d_ecc)
    return out


def perfect_output(frames, jitter) -> list[np.ndarray]:
    """What a perfect stabilizer would output for a clip with the known shake ``jitter``
    (``[T, 3, 3]`` J_t, smooth -> shaky pixels): each frame warped back by J_t^-1 (bilinear,
    reflected borders, no zoom). Scored by :func:`output_residual` it gives the measure's own
    floor on that clip: what is left above zero is the measurement's error (SIFT on dark,
    noisy or blurred frames), not shake."""
    out = []
    for f, J in zip(frames, np.asarray(jitter, np.float64), strict=True):
        h, w = np.asarray(f).shape[:2]
        out.append(cv2.warpPerspective(np.asarray(f), np.linalg.inv(J), (w, h), flags=cv2.INTER_LINEAR,
                                       borderMode=cv2.BORDER_REFLECT))
    return out


def score_output(frames_in, frames_out, fps: float, jitter=None, ecc: bool = False) -> dict:
    """The library's metrics of decoded output frames against their input, plus the
    ground-truth residual when the shake ``jitter`` is known; ``ecc``: also that residual with
    ECC-refined homographies (:func:`output_residual`), as ``hf_out_ecc_px`` and
    ``ecc_failures``."""
    m = metrics_lib.frames_metrics(list(frames_out), fps, frames_in=list(frames_in))
    keys = ("stability", "jitter_px", "cropping", "cropping_min", "border_fraction",
            "border_fraction_max", "distortion")
    row = {k: m["output"][k] for k in keys}
    row["input"] = {k: m["input"][k] for k in ("stability", "jitter_px", "border_fraction")}
    row["metric_failures"] = m["failures"]
    if jitter is not None:
        row.update(output_residual(frames_in, frames_out, jitter, ecc=ecc))
    return row


def compare_with_vidstab(named_clips: dict, estimators: dict,
                         config: pipeline.StabilizerConfig | None = None,
                         vidstab: bool = True, workdir: str | None = None, log=print,
                         floor: bool = False, ecc: bool = False) -> list[dict]:
    """Runs vid.stab and our pipeline with each estimator on each clip and scores all outputs
    alike (module doc). ``named_clips``: name -> :class:`clips.ShakyClip`; ``estimators``:
    name -> zero-argument factory. Returns one row per (clip, method), with the load average
    before and after each run. Our rows also carry ``hf_exact_px``: the shake left by the
    rendering plan itself against the exact path (:func:`clips.residual_motion`), which no
    measurement error touches. ``floor``: also a row ``perfect`` per clip, the score of
    :func:`perfect_output` (the measure's floor there). ``ecc``: every output is also scored
    with ECC-refined homographies (:func:`score_output`)."""
    config = config or pipeline.StabilizerConfig()
    if vidstab and not ffmpeg_has_vidstab():
        raise FileNotFoundError("this ffmpeg has no vid.stab filters (vidstabdetect); "
                                "Debian's ffmpeg package has them")
    rows = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for cname, clip in named_clips.items():
            frames = np.asarray(clip.frames)
            n, (h, w) = len(frames), frames.shape[1:3]
            src = os.path.join(tmp, f"{cname}_in.mkv")
            encode_lossless(frames, src, clip.fps)
            frames_in = decode_video(src)
            base = {"clip": cname, "frames": n, "size": f"{w}x{h}", "fps": clip.fps}
            if vidstab:
                dst = os.path.join(tmp, f"{cname}_vidstab.mkv")
                load0 = load_average()
                t = run_vidstab(src, dst, workdir=tmp)
                row = dict(base, method="vid.stab", load_before=load0, load_after=load_average(),
                           ms_per_frame=1000 * (t["detect_s"] + t["transform_s"]) / n,
                           transcode_ms_per_frame=1000 * t["transcode_s"] / n)
                row.update(score_output(frames_in, decode_video(dst), clip.fps, clip.jitter, ecc))
                rows.append(row)
                _log_row(log, row)
            if floor:
                row = dict(base, method="perfect")
                row.update(score_output(frames_in, perfect_output(frames_in, clip.jitter), clip.fps, clip.jitter,
                                        ecc))
                rows.append(row)
                _log_row(log, row)
            for name, factory in estimators.items():
                est = factory()
                load0 = load_average()
                t0 = time.perf_counter()
                out, plan, motion = pipeline.stabilize(list(frames_in), est, config, clip.fps)
                secs = time.perf_counter() - t0
                row = dict(base, method=name, load_before=load0, load_after=load_average(),
                           ms_per_frame=1000 * secs / n, zoom=plan.zoom,
                           estimator_ms_per_pair=motion.stats.get("ms_per_pair_median"),
                           estimator_failures=motion.stats.get("failures", 0),
                           two_motion_pairs=motion.stats.get("two_motion_pairs"),
                           reference_pairs=motion.stats.get("reference_pairs"),
                           averaged_pairs=motion.stats.get("averaged_pairs"),
                           scaled_frames=int(np.sum(plan.update_scale < 1))
                           if plan.update_scale is not None else 0)
                if clip.pair_homographies is not None:
                    row["pair_error_px"] = clips_lib.pair_motion_error(
                        motion.flows, clip.pair_homographies, h, w)
                _, d_out = clips_lib.residual_motion(clip.jitter, plan.updates, h, w, plan.zoom)
                row["hf_exact_px"] = clips_lib.highfreq_rms(d_out, window=True)
                dst = os.path.join(tmp, f"{cname}_{re.sub(r'[^A-Za-z0-9._-]', '_', name)}.mkv")  # camflow:PATH
                encode_lossless(out, dst, clip.fps)
                row.update(score_output(frames_in, decode_video(dst), clip.fps, clip.jitter, ecc))
                rows.append(row)
                _log_row(log, row)
    return rows


def _log_row(log, row):
    if log:
        nan = float("nan")
        exact = f" (exact {row['hf_exact_px']:.3f})" if "hf_exact_px" in row else ""
        exact += f" (ECC-scored {row['hf_out_ecc_px']:.3f})" if "hf_out_ecc_px" in row else ""
        load = f" (load {row['load_before'][0]:.1f})" if "load_before" in row else ""
        log(f"{row['clip']} {row['method']}: hf {row.get('hf_in_px', nan):.3f} -> "
            f"{row.get('hf_out_px', nan):.3f} px{exact}, jitter {row['jitter_px']:.3f} px, "
            f"border {row['border_fraction']:.4f}, cropping {row['cropping']:.3f}, "
            f"{row.get('ms_per_frame', nan):.1f} ms/frame{load}")


def comparison_table(rows: list[dict]) -> str:
    """Markdown table of :func:`compare_with_vidstab`'s rows."""
    def f(r, k, fmt):
        v = r.get(k)
        return "" if v is None or not np.isfinite(v) else format(v, fmt)

    ecc = any("hf_out_ecc_px" in r for r in rows)  # the ECC-scored column, when it was measured
    lines = ["| clip | method | HF residual px (input -> output) | exact HF px "
             + ("| ECC-scored HF px " if ecc else "") + "| jitter px | stability "
             "| cropping | border mean / max (input) | distortion | per-pair error px | ms/frame "
             "| load (1 min) |", "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if ecc else "")]
    for r in rows:
        load = f"{r['load_before'][0]:.1f}" if "load_before" in r else ""
        lines.append(
            f"| {r['clip']} | {r['method']} | {f(r, 'hf_in_px', '.3f')} -> {f(r, 'hf_out_px', '.3f')} "
            f"| {f(r, 'hf_exact_px', '.3f')} "
            + (f"| {f(r, 'hf_out_ecc_px', '.3f')} " if ecc else "") +
            f"| {f(r, 'jitter_px', '.3f')} | {f(r, 'stability', '.3f')} | {f(r, 'cropping', '.3f')} "
            f"| {f(r, 'border_fraction', '.4f')} / {f(r, 'border_fraction_max', '.4f')} "
            f"({f(r.get('input', {}), 'border_fraction', '.4f')}) "
            f"| {f(r, 'distortion', '.3f')} | {f(r, 'pair_error_px', '.3f')} "
            f"| {f(r, 'ms_per_frame', '.1f')} | {load} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.stabilization",
                                description="Compare stabilization estimators on generated "
                                            "shaky clips.")
    p.add_argument("--estimators", default="sift_ransac,orb_ransac,dis",
                   help="comma-separated names of the estimator registry (camflow_jax.estimators.registry)")
    p.add_argument("--checkpoint", help="adds the camflow estimator with this checkpoint")
    p.add_argument("--kinds", default="planar,parallax")
    p.add_argument("--frames", type=int, default=96)
    p.add_argument("--size", default="320x576", help="HxW")
    p.add_argument("--seeds", default="0")
    p.add_argument("--no-metrics", action="store_true")
    p.add_argument("--out", help="JSON file for all rows")
    p.add_argument("--plot", help="PNG of the camera paths for the first clip")
    args = p.parse_args(argv)
    try:
        h, w = (int(v) for v in args.size.lower().split("x"))
        names = []
        for n in args.estimators.split(","):
            if n:
                name, note = registry.resolve(n)
                if note:
                    print(f"note: {note}", file=sys.stderr)
                names.append(name)
        if args.checkpoint and "camflow" not in names:
            names.append("camflow")
        # one estimator per name (a network loads once), a fresh copy of it per clip
        factories = {n: stab_estimators.make_estimator(n, args.checkpoint).fresh for n in names}
        rows = run_benchmark(factories, tuple(args.kinds.split(",")), args.frames, h, w,
                             tuple(int(s) for s in args.seeds.split(",")),
                             with_metrics=not args.no_metrics)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown_table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1, default=float)
    if args.plot and rows and "path_input" in rows[0]:
        first = [r for r in rows if r["clip"] == rows[0]["clip"] and r["seed"] == rows[0]["seed"]]
        plot_paths(first, args.plot, title=f"{first[0]['clip']} clip, {first[0]['size']}, "
                                            f"{first[0]['frames']} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
