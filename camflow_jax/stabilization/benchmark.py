"""Estimator comparison on generated shaky clips (the README's stabilization table).

    python -m camflow_jax.stabilization.benchmark --estimators sift_ransac,orb_ransac,dis \\
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
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from camflow_jax import estimators as registry
from camflow_jax.stabilization import clips as clips_lib
from camflow_jax.stabilization import estimators as est_lib
from camflow_jax.stabilization import metrics as metrics_lib
from camflow_jax.stabilization import pipeline

__all__ = ["evaluate_clip", "run_benchmark", "markdown_table", "plot_paths", "main"]


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
    from camflow_jax.stabilization.plots import COLORS, _figure

    fig, axes = _figure(3, width=6.4, height_per_row=1.45)
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m camflow_jax.stabilization.benchmark",
                                description="Compare stabilization estimators on generated "
                                            "shaky clips.")
    p.add_argument("--estimators", default="sift_ransac,orb_ransac,dis",
                   help="comma-separated names of the estimator registry (camflow_jax.estimators)")
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
        factories = {n: est_lib.make_estimator(n, args.checkpoint).fresh for n in names}
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
