"""The teacher's labels with and without its two-motion test, against the exact motion
(docs/adaptation.md, "The teacher's labels"): development clips only.

    python -m tools.bench.studies.adaptation.two_motion_labels --out two_motion_labels.json

Clips as ``python -m tools.bench adaptation`` builds them (:func:`tools.bench.adaptation.shaken_clip`,
``--seed`` 7 by default: the scored clips use seed 1); every ``--every``-th pair of each clip's
first two thirds (the pairs adaptation learns from) is labelled by the shipped model refined
(:func:`camflow_jax.adaptation.teacher.label_pairs`) with ``two_motions`` off and on. Per clip
and setting: the pairs kept, labelled by the camera's motion and dropped (with why), the mean
and median end-point error of the kept forward labels against the exact (background) motion in
network pixels, over the pairs both settings keep and over the pairs the test relabelled, and
the labelling time (the first clip's includes compilation).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from camflow_jax.adaptation import run, teacher
from camflow_jax.adaptation.footage import Clip
from camflow_jax.geometry import host
from tools.bench import timing
from tools.bench.adaptation import HARD, VIDEOS, shaken_clip

CLIPS = ("large_foreground", "object", "vtest", "dark_noisy", "tree")


def _epe(flow, truth) -> float:
    return float(np.hypot(*(flow - truth).transpose(2, 0, 1)).mean())


def _stats(errors: list) -> dict:
    return {"pairs": len(errors), "mean": float(np.mean(errors)) if errors else None,
            "median": float(np.median(errors)) if errors else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clips", default=",".join(CLIPS),
                   help=f"comma-separated, of {', '.join(sorted(VIDEOS) + ['planar', 'object', *HARD])}")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--every", type=int, default=3)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    names = [c for c in a.clips.split(",") if c]
    known = set(VIDEOS) | {"planar", "object", "object_late", *HARD}
    if not names or any(c not in known for c in names):
        print(f"error: --clips takes names of {sorted(known)}, got {a.clips!r}", file=sys.stderr)
        return 2
    pred = run.load_model()[4]
    res = {"args": vars(a), "machine": timing.host_info(), "load_before": timing.load_average(), "clips": {}}
    for name in names:
        clip, fps = shaken_clip(name, a.frames, a.seed)
        h, w = clip.frames.shape[1:3]
        n_train = (2 * len(clip.frames)) // 3
        pairs = [(0, t, t + 1) for t in range(0, n_train - 1, a.every)]
        clips = [Clip(name, clip.frames[:n_train], fps)]
        bases = np.asarray(pred.constant_depth_bases((h, w)), np.float32)
        truth = [host.resize_flow(host.homography_flow(clip.pair_homographies[t], h, w), pred.height, pred.width)
                 for _, t, _ in pairs]
        got, out = {}, {}
        for on in (False, True):
            t0 = time.perf_counter()
            lab = teacher.label_pairs(pred, clips, pairs, teacher.TeacherSettings(two_motions=on), progress=False)
            got[on] = lab
            dropped = {}
            for r, k in zip(lab.reason, lab.keep):
                if not k:
                    key = r.split(":")[0]
                    dropped[key] = dropped.get(key, 0) + 1
            out["on" if on else "off"] = {"kept": int(lab.keep.sum()), "two_motion": int(lab.two_motion.sum()),
                                          "dropped": dropped, "seconds": time.perf_counter() - t0}
        both = [i for i in range(len(pairs)) if got[False].keep[i] and got[True].keep[i]]
        moved = [i for i in both if got[True].two_motion[i]]
        for on in (False, True):
            err = [_epe(teacher.label_flows(got[on].coeffs_f[i], bases), truth[i]) for i in range(len(pairs))]
            row = out["on" if on else "off"]
            row["epe_kept_by_both"] = _stats([err[i] for i in both])
            row["epe_relabelled"] = _stats([err[i] for i in moved])
            row["epe_all_kept"] = _stats([err[i] for i in range(len(pairs)) if got[on].keep[i]])
        out.update(pairs=len(pairs), size_hw=[h, w])
        res["clips"][name] = out
        print(name, json.dumps(out), file=sys.stderr, flush=True)
    timing.write_result(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
