"""Measure the stabilization metrics on synthetic clips with a known camera path.

For each clip (tools.bench.metric_clips: a still camera with sensor noise, a
smooth sway, white jitter) and each way of storing it (lossless, or through cv2.VideoWriter
mp4v and back), prints the stability scores (combined, translation, rotation, the published
5-bin variant), the high-band path RMS in pixels (jitter_px), and the measuring estimator's
noise: the high-band RMS of (measured path - true path), per signal, in pixels (translation
per axis; rotation times the half diagonal).

    python -m tools.bench stab_metrics_noise --size 96x160 --frames 90
"""

import argparse
import time

import numpy as np

from camflow_jax.stabilization import metrics as M
from tools.bench import metric_clips as C


def clips(n, fps, seed):
    z = np.zeros(n)
    return {
        "still+noise": ((z, z, z), 2.0),
        "sway 20px": (C.sway_path(n, fps, 20.0), 0.0),
        "sway 20px+2deg": (C.sway_path(n, fps, 20.0, amp_rad=np.deg2rad(2.0)), 0.0),
        "jitter 1px": (C.jitter_path(n, seed, 1.0), 0.0),
        "jitter 3px": (C.jitter_path(n, seed, 3.0), 0.0),
        "jitter 0.3deg": (C.jitter_path(n, seed, 0.0, np.deg2rad(0.3)), 0.0),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="96x160", help="HxW")
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--seeds", default="0")
    p.add_argument("--floor-px", type=float, default=None)
    p.add_argument("--only", default=None, help="comma-separated clip names")
    args = p.parse_args(argv)
    h, w = (int(v) for v in args.size.split("x"))
    print(f"{args.frames} frames of {h}x{w} at {args.fps:g} fps, noise floor "
          f"{M.NOISE_FLOOR_PX if args.floor_px is None else args.floor_px} px")
    print("| clip | storage | stability | translation | rotation | classic (5-bin, min) | "
          "jitter px | noise px (x, y, rot) | border |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seed in (int(s) for s in args.seeds.split(",")):
        for name, (path, noise) in clips(args.frames, args.fps, seed).items():
            if args.only and name not in args.only.split(","):
                continue
            frames = C.clip(path, h, w, seed, noise_std=noise)
            for storage in ("lossless", "mp4v"):
                t0 = time.perf_counter()
                f = frames if storage == "lossless" else C.mp4v_roundtrip(frames, args.fps)
                r = M.frames_metrics(f, args.fps, floor_px=args.floor_px)
                o = r["output"]
                true = M.path_signals(C.path_homographies(*path, h, w), h, w)
                lever = M.half_diagonal(h, w)
                noise = [M.highband_rms(r["path_output"][k] - true[k], args.fps, 1.0)
                         * (lever if k == "theta" else 1.0) for k in ("tx", "ty", "theta")]
                print(f"| {name} (seed {seed}) | {storage} | {o['stability']:.3f} | "
                      f"{o['stability_translation']:.3f} | {o['stability_rotation']:.3f} | "
                      f"{o['stability_classic']:.3f} | {o['jitter_px']:.3f} | "
                      f"{noise[0]:.3f}, {noise[1]:.3f}, {noise[2]:.3f} | "
                      f"{o['border_fraction']:.4f} |  <!-- {time.perf_counter() - t0:.1f} s -->",
                      flush=True)


if __name__ == "__main__":
    main()
