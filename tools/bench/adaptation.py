"""Test-time adaptation and self-training measured against exact motion (docs/adaptation.md).

    python -m tools.bench adaptation --clip vtest --minutes 4.5 --out results.json
    python -m tools.bench adaptation --clip tree --minutes 2 --bench 100 --aloe --out results.json
    python -m tools.bench adaptation --clip vtest --rounds 2 --out results.json   # self-training

A clip: a still-camera video of Debian's opencv-doc (``vtest``, ``tree``, ``megamind``; the first
``--frames`` frames at 640x480) shaken by a seeded known motion
(:func:`camflow_jax.stabilization.clips.shake_video`: exact pair homographies where the source
camera was still), ``planar`` (the synthetic planar clip, exact everywhere) or ``object`` (the
planar clip with a large object sliding across it, :func:`~camflow_jax.stabilization.clips.moving_object_clip`:
exact background motion; ``object_late``: the object only in the last third, the pairs scored), or one of the
stabilizer's hard clips (``low_res``, ``dark_noisy``, ``low_texture``, ``large_foreground``:
:func:`tools.bench.stabilization.hard_clips` as ``stab_vs_vidstab --hard`` builds them, 120 frames
of vtest at 288x384 or 90 synthetic frames at 192x320, whatever ``--frames``). The model adapts
on the first two thirds (:func:`camflow_jax.adaptation.run.adapt_clips`, its budget ``--minutes``
labels included) and is scored on every ``--eval-every``-th pair of the last third, which it never
saw: the network alone and refined, before and after, against the exact motion (mean end-point
error over the pixels that stay in the frame), the refinement's time (refined call minus the
network-alone call, medians) and its iterations. ``--bench N``: the network alone on the first N
pairs of the synthetic benchmark, before and after (forgetting). ``--aloe``: the Aloe stereo pair
with its ground-truth disparity, before and after. ``--rounds R``: self-training rounds
(:func:`camflow_jax.adaptation.run.self_train`), each scored the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

import cv2
import numpy as np

from camflow_jax.adaptation import run
from camflow_jax.adaptation.config import DEFAULT_MINUTES, SCHEDULES, TRAINABLE, AdaptConfig
from camflow_jax.adaptation.footage import Clip
from camflow_jax.adaptation.teacher import TeacherSettings
from camflow_jax.geometry import host
from camflow_jax.predictor import Predictor
from camflow_jax.stabilization import clips as clips_lib
from tools.bench import opencv_doc, timing

VIDEOS = {"vtest": "vtest.avi", "tree": "tree.avi", "megamind": "Megamind.avi"}
HARD = ("low_res", "dark_noisy", "low_texture", "large_foreground")


def shaken_clip(name: str, frames: int, seed: int):
    """(ShakyClip with exact pair homographies, fps): 640x480, or a hard clip at its own size."""
    if name == "planar":
        return clips_lib.planar_clip(frames, 480, 640, seed=seed), 30.0
    if name == "object":
        return clips_lib.moving_object_clip(frames, 480, 640, seed=seed), 30.0
    if name == "object_late":  # the object only in the last third (the pairs scored), like tree.avi's hand
        plain = clips_lib.moving_object_clip(frames, 480, 640, seed=seed, with_object=False)
        full = clips_lib.moving_object_clip(frames, 480, 640, seed=seed)
        k = (2 * frames) // 3
        return dataclasses.replace(full, frames=np.concatenate([plain.frames[:k], full.frames[k:]])), 30.0
    if name in HARD:  # stab_vs_vidstab --hard's clips, with its defaults (vtest at 10 fps)
        from tools.bench import stabilization

        video = stabilization.find_vtest()
        if video is None:
            raise FileNotFoundError(f"vtest.avi: {opencv_doc.MISSING_DATA}")
        fps = 10.0 if name != "large_foreground" else 30.0
        return stabilization.hard_clips(video, 120, (288, 384), seed, 10.0, (192, 320), 90)[name], fps
    path = os.path.join(opencv_doc.OPENCV_DOC, VIDEOS[name])
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: {opencv_doc.MISSING_DATA}")
    fr = np.stack([cv2.resize(f, (640, 480), interpolation=cv2.INTER_AREA)
                   for f in opencv_doc.read_frames(path, frames)])
    fps = opencv_doc.video_fps(path)
    return clips_lib.shake_video(fr, seed=seed, fps=fps), fps


def epe(flow, truth) -> float:
    valid = host.warp_validity(truth) > 0
    return float(np.hypot(*(flow - truth).transpose(2, 0, 1))[valid].mean())


def score_pairs(pred: Predictor, clip, pairs) -> dict:
    """The network alone and refined against the exact motion on ``pairs`` (frame indices t:
    t -> t + 1), with the refinement's time and iterations."""
    h, w = clip.frames.shape[1:3]
    pred(clip.frames[0], clip.frames[1])
    pred(clip.frames[0], clip.frames[1], refine=False)  # compiled before timing
    rows = []
    for t in pairs:
        truth = host.homography_flow(clip.pair_homographies[t], h, w)
        s = time.perf_counter()
        o = pred(clip.frames[t], clip.frames[t + 1])
        t_ref = time.perf_counter() - s
        s = time.perf_counter()
        pred(clip.frames[t], clip.frames[t + 1], refine=False)
        t_net = time.perf_counter() - s
        rows.append({"t": int(t), "net": epe(o["net_flow_f"], truth), "refined": epe(o["flow_f"], truth),
                     "t_refined": t_ref, "t_net": t_net, "iterations": int(np.sum(o["refine_info"]["iterations"]))})
    med = lambda k: float(np.median([r[k] for r in rows]))  # noqa: E731
    return {"net": float(np.mean([r["net"] for r in rows])), "refined": float(np.mean([r["refined"] for r in rows])),
            "refine_seconds": med("t_refined") - med("t_net"), "net_seconds": med("t_net"),
            "iterations": float(np.mean([r["iterations"] for r in rows])), "pairs": rows}


def aloe(pred: Predictor) -> dict:
    """Aloe's EPE (px) for the network alone and refined, without and with depth."""
    from camflow_jax.estimators import registry
    from tools.bench import real

    methods = ["camflow_net", "camflow"]
    ests = {m: registry.get(m, predictor=pred) for m in methods}
    out = real.stereo_experiment(opencv_doc.OPENCV_DOC, 576, methods, ests, log=lambda m: None)
    return {r["method"]: r["epe"] for r in out["rows"]} if isinstance(out, dict) and "rows" in out else out


def bench(variables_dir: str | None, num: int) -> dict:
    """The network alone on the first ``num`` pairs of the synthetic benchmark (with depth): the
    benchmark's AVG row (``epe``: the headline EPE, ``epe_valid``, ...)."""
    from camflow_jax.evaluation.benchmark import evaluate

    kw = {} if variables_dir is None else {"checkpoints": f"m={variables_dir}"}
    name = "camflow_net" if variables_dir is None else "camflow_net:m"
    r = evaluate("synthetic", [name], num=num, progress=False, verbose=False, **kw)
    return {k: float(v) for k, v in r["results"][name]["AVG"].items()}


def _round_scores(out: dict) -> dict:
    """A self-training round's scores: the clip's, and Aloe's (``aloe``) when measured."""
    return out["clip"] | ({"aloe": out["aloe"]} if "aloe" in out else {})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clip", default="vtest", choices=sorted(VIDEOS) + ["planar", "object", "object_late", *HARD])
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--minutes", type=float, default=DEFAULT_MINUTES)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--lr", type=float, default=AdaptConfig().learning_rate)
    p.add_argument("--trainable", default=AdaptConfig().trainable, choices=sorted(TRAINABLE))
    p.add_argument("--synthetic", type=int, default=AdaptConfig().synthetic_batch)
    p.add_argument("--average", type=float, default=AdaptConfig().average,
                   help="decay of the weights' running average (0: the last step's weights)")
    p.add_argument("--occluders", type=float, default=AdaptConfig().occluders,
                   help="share of footage pairs given a pasted moving occluder")
    p.add_argument("--schedule", default=AdaptConfig().schedule, choices=SCHEDULES,
                   help="the learning rate over the run (constant, or a half cosine down to 0)")
    p.add_argument("--directions", type=int, default=AdaptConfig().directions, choices=(1, 2),
                   help="directions learned a step: 2 both of each pair, 1 one drawn at random (half the work)")
    p.add_argument("--batch", type=int, default=AdaptConfig().batch_size, help="footage pairs a step")
    p.add_argument("--no-two-motions", action="store_true",
                   help="the teacher labels every pair by the refined flow (adapt --no-two-motions)")
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--rounds", type=int, default=0, help="self-training rounds instead of one adaptation")
    p.add_argument("--bench", type=int, default=0, help="synthetic benchmark pairs for the forgetting check")
    p.add_argument("--aloe", action="store_true")
    p.add_argument("--save", default=None, help="also keep the adapted model in this checkpoint folder")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    clip, fps = shaken_clip(a.clip, a.frames, a.seed)
    n_train = (2 * len(clip.frames)) // 3
    test = list(range(n_train, len(clip.frames) - 1, a.eval_every))
    loaded = run.load_model()
    model, variables, static, model_config, pred0 = loaded
    cfg = AdaptConfig(learning_rate=a.lr, trainable=a.trainable, max_steps=a.steps, synthetic_batch=a.synthetic,
                          average=a.average, occluders=a.occluders, schedule=a.schedule,
                          directions=a.directions, batch_size=a.batch)
    teacher = TeacherSettings(two_motions=not a.no_two_motions)
    train = [Clip(a.clip, clip.frames[:n_train], fps)]
    res = {"args": vars(a), "machine": timing.host_info(), "load_before": timing.load_average()}
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731

    def evaluate(mdl, v, tag):
        pr = pred0 if v is variables else Predictor(mdl, v, static, model_config)
        out = {"clip": score_pairs(pr, clip, test)}
        if a.aloe:
            out["aloe"] = aloe(pr)
        if a.bench:
            if v is variables:
                out["bench_net"] = bench(None, a.bench)
            else:
                with tempfile.TemporaryDirectory() as d:
                    run.save(d, v, model_config, static, {"clips": [], "heldout_error_before_px": None,
                                                          "heldout_error_after_px": None, "steps": 0,
                                                          "checkpoint": tag})
                    out["bench_net"] = bench(d, a.bench)
        log(f"{tag}: clip net {out['clip']['net']:.3f} refined {out['clip']['refined']:.3f} px"
            + (f", bench net {out['bench_net']['epe']:.3f}" if "bench_net" in out else "")
            + (f", aloe {out['aloe']}" if "aloe" in out else ""))
        return out

    res["before"] = evaluate(model, variables, "before")
    if a.rounds:
        t0 = time.time()
        with tempfile.TemporaryDirectory() as d:
            reports = run.self_train(train, d, rounds=a.rounds, minutes=a.minutes, config=cfg, cache_dir=None,
                                     teacher=teacher,
                                     progress=False, log=log, split_by_time=True, holdout=0.25,
                                     evaluate=lambda mdl, v: _round_scores(evaluate(mdl, v, "round")))
        res["rounds"] = [{k: r.get(k) for k in ("round", "teacher_kept", "heldout_error_before_px",
                                                  "heldout_error_after_px", "steps", "total_seconds", "evaluation")}
                         for r in reports]
        res["seconds"] = time.time() - t0
    else:
        t0 = time.time()
        new, _, rep = run.adapt_clips(train, minutes=a.minutes, config=cfg, model=loaded, cache_dir=None,
                                      progress=False, log=log, teacher=teacher)
        res["adapt"] = {k: v for k, v in rep.items() if k != "log"}
        res["steps_log"] = [{k: e[k] for k in ("step", "time", "lr", "loss") if k in e} for e in rep["log"]]
        res["adapt_seconds"] = time.time() - t0
        if a.save:
            run.save(a.save, new, model_config, static, rep, overwrite=True)
        res["after"] = evaluate(model, new, "after")
        b, f = res["before"]["clip"], res["after"]["clip"]
        res["summary"] = {"net_before": b["net"], "net_after": f["net"], "net_ratio": f["net"] / b["net"],
                          "net_ratio_median_pair": float(np.median([q["net"] / p["net"]
                                                                    for p, q in zip(b["pairs"], f["pairs"])])),
                          "teacher": b["refined"], "net_after_over_teacher": f["net"] / b["refined"],
                          "refined_before": b["refined"], "refined_after": f["refined"],
                          "refine_time_ratio": f["refine_seconds"] / b["refine_seconds"],
                          "iterations_before": b["iterations"], "iterations_after": f["iterations"]}
        if a.bench:
            res["summary"]["bench_before"], res["summary"]["bench_after"] = \
                res["before"]["bench_net"], res["after"]["bench_net"]
        print(json.dumps(res["summary"], indent=1))
    timing.write_result(a.out, res)
    return 0


#: ``python -m tools.bench adaptation``: :func:`main` as the package's commands run (huge pages: a budget buys
#: the steps it buys a user; without them a fine-tuning step took about 1.3 s here instead of 1.0 s).
command = timing.as_users_run(main)


if __name__ == "__main__":
    sys.exit(command())
