"""Start-to-end wall time of ``python -m camflow_jax.stabilize`` against ffmpeg's vid.stab.

    python -m tools.bench stab_wall_time --runs 2 --out wall.json
    python -m tools.bench stab_wall_time --runs 2 -- --estimator camflow

Both sides run as command lines on the same H.264 input (OpenCV's vtest.avi shaken: 300 frames
at 640x480 and 120 at 150x200; ``apt-get install opencv-doc ffmpeg``). Arguments after ``--``
go to ``stabilize``. The work is :func:`tools.bench.stabilization_time.compare_wall_time`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from camflow_jax.cli import harness
from camflow_jax.io import atomic


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--video", help="a still-camera video to shake (default: OpenCV's vtest.avi)")
    p.add_argument("--runs", type=harness.int_at_least(1), default=2, help="runs of each side, in turn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=harness.path_arg, help="JSON file for the rows")
    p.add_argument("stabilize_args", nargs="*", help="after --: extra arguments for stabilize")
    args = p.parse_args(argv)

    def body() -> int:
        from tools.bench import stabilization, stabilization_time

        video = args.video or stabilization.find_vtest()
        if video is None:
            raise FileNotFoundError("vtest.avi not found (apt-get install opencv-doc) and no --video given")
        if not os.path.isfile(video):
            raise FileNotFoundError(f"video not found: {video}")
        if not stabilization.ffmpeg_has_vidstab():
            raise FileNotFoundError("this ffmpeg has no vid.stab filters (vidstabdetect)")
        with tempfile.TemporaryDirectory(prefix="stab_wall_time_") as work:
            rows = stabilization_time.compare_wall_time(video, work, runs=args.runs, seed=args.seed,
                                                        extra=tuple(args.stabilize_args))
        for r in rows:
            print(f"{r['clip']}: ours {', '.join(f'{t:.1f}' for t in r['ours_s'])} s; vid.stab "
                  f"{', '.join(f'{t:.1f}' for t in r['vidstab_s'])} s; last run x{r['ratio']:.2f} "
                  f"(load {r['load_before']} -> {r['load_after']})")
        if args.out:
            atomic.write_text_atomic(args.out, json.dumps({"rows": rows, "video": video}, indent=1))
        return 0

    return harness.run_cli(body)


if __name__ == "__main__":
    harness.exit_process(main())
