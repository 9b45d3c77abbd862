"""The numbers behind plausibility.MIN_CORRELATION, the "no motion fits" check (docs/estimation.md,
"Plausibility checks"): how well each estimator's own answer (``est.raw``, no checks) explains
a pair, measured by plausibility.aligned_correlation, on

* development pairs (never the benchmark): SyntheticScenes(seed=2718, 60 pairs, 320x576) as
  rendered ("correct") and three negatives made from each: image 2 of another pair
  ("unrelated"), image 2 turned 180 degrees ("rot180"), image 2 mirrored left-right ("mirror");
  real pairs from Debian's opencv-doc (the Aloe stereo pair at 576 wide, five two-frame pairs,
  three frame pairs of each of vtest.avi, tree.avi and Megamind.avi) and real negatives (14
  photos, each against another one, turned 180 degrees and mirrored, at 640x480).
  Estimators: the shipped CamFlow model refined and the network alone (synthetic: with and
  without depth), sift_magsac, dis, ecc. The threshold is chosen on these pairs alone.
* the synthetic benchmark, SyntheticScenes(seed=1000, 100 pairs, 320x576) (docs/evaluation.md),
  with the shipped model refined (and the network alone), with and without depth: how often
  the check fires there.

Usage: python -m tools.bench.studies.plausibility.span_fit [--part dev|benchmark|all] [--dev-pairs 60] [--json OUT]
(2-core CPU shared with other jobs, all: 19 min;
--report JSON prints a saved run again). Needs opencv-doc for the real pairs (skipped without it).
"""
import argparse
import json
import os
import time
import warnings

import cv2
import numpy as np

warnings.filterwarnings("ignore")
from camflow_jax.data.synthetic.scenes import SyntheticScenes  # noqa: E402
from camflow_jax.estimators import registry as R  # noqa: E402
from camflow_jax.geometry import plausibility as P  # noqa: E402
from camflow_jax.predictor import Predictor  # noqa: E402

DEV_SEED, BENCH_SEED, SIZE = 2718, 1000, (320, 576)
DATA = "/usr/share/doc/opencv-doc/examples/data"
VARIANTS = [(P.FIT_SIZE, P.FIT_SIGMA), (256, 1.0), (256, 2.0), (64, 1.0)]  # (longer side, blur)
REAL_PAIRS = [("aloe", "aloeL.jpg", "aloeR.jpg"), ("rubberwhale", "rubberwhale1.png", "rubberwhale2.png"),
              ("basketball", "basketball1.png", "basketball2.png"),
              ("suzanne", "Blender_Suzanne1.jpg", "Blender_Suzanne2.jpg"), ("leuven", "leuvenA.jpg", "leuvenB.jpg"),
              ("chessboard", "left01.jpg", "right01.jpg")]
#: pairs related by a large viewpoint change (a homography far from the identity: SIFT finds it)
FAR_PAIRS = [("graffiti 1-3", "graf1.png", "graf3.png"), ("aerial 1-3", "aero1.jpg", "aero3.jpg")]
VIDEOS = ["vtest.avi", "tree.avi", "Megamind.avi"]
PHOTOS = ["baboon.jpg", "building.jpg", "fruits.jpg", "home.jpg", "messi5.jpg", "starry_night.jpg", "board.jpg",
          "stuff.jpg", "squirrel_cls.jpg", "smarties.png", "box_in_scene.png", "aloeL.jpg", "graf1.png",
          "basketball1.png"]


def turned(x):
    return np.ascontiguousarray(x[::-1, ::-1])


def mirrored(x):
    return np.ascontiguousarray(x[:, ::-1])


def synthetic_pairs(seed, n, negatives, first=None):
    """(set, kind, label, img1, img2, camera or None, gt flow, gt valid) of the first ``first``
    (all) of ``n`` scenes."""
    ds = SyntheticScenes(seed=seed, num_samples=n, height=SIZE[0], width=SIZE[1])
    for i in range(n if first is None else min(first, n)):
        s = ds[i]
        cam = dict(depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"])
        yield "synthetic", "correct", f"{i}:{s['category']}", s["img1"], s["img2"], cam, s["flow_f"], s["valid_f"]
        if not negatives:
            continue
        o = ds[(i + n // 2) % n]
        yield ("synthetic", "unrelated", f"{i}", s["img1"], o["img2"],
               dict(cam, depth2=o["depth2"]), None, None)
        yield ("synthetic", "rot180", f"{i}", s["img1"], turned(s["img2"]),
               dict(cam, depth2=turned(s["depth2"])), None, None)
        yield ("synthetic", "mirror", f"{i}", s["img1"], mirrored(s["img2"]),
               dict(cam, depth2=mirrored(s["depth2"])), None, None)


def read(name, size=None):
    img = cv2.cvtColor(cv2.imread(os.path.join(DATA, name), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return img if size is None else cv2.resize(img, size, interpolation=cv2.INTER_AREA)


def real_pairs():
    if not os.path.isdir(DATA):
        print(f"(no {DATA}: real pairs skipped; apt-get install opencv-doc)")
        return
    for key, f1, f2 in REAL_PAIRS:
        size = (576, 499) if key == "aloe" else None  # Aloe at the working size of docs/real_images.md
        yield "real", "correct", key, read(f1, size), read(f2, size), None, None, None
    for video in VIDEOS:
        cap = cv2.VideoCapture(os.path.join(DATA, video))
        frames = []
        while len(frames) < 61:
            ok, frame = cap.read()
            if not ok:
                break
            frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
        for t, step in ((0, 1), (30, 1), (50, 10)):
            if t + step < len(frames):
                yield "real", "correct", f"{video}:{t}+{step}", frames[t], frames[t + step], None, None, None
    for key, f1, f2 in FAR_PAIRS:
        yield "real", "far", key, read(f1), read(f2), None, None, None
    photos = [read(f, (640, 480)) for f in PHOTOS]
    for i, img in enumerate(photos):
        yield "real", "unrelated", PHOTOS[i], img, photos[(i + 5) % len(photos)], None, None, None
        yield "real", "rot180", PHOTOS[i], img, turned(img), None, None, None
        yield "real", "mirror", PHOTOS[i], img, mirrored(img), None, None, None


def measure(estimators, pairs):
    """One record per (pair, estimator): the estimator's own answer measured."""
    rows = []
    for set_, kind, label, a, b, cam, gt, valid in pairs:
        for name, est in estimators.items():
            depth = name.endswith("+depth")
            if depth and cam is None:
                continue
            t0 = time.perf_counter()
            m = est.raw(a, b, **(cam if depth else {}))
            row = {"set": set_, "kind": kind, "label": label, "est": name, "own_fallback": bool(m.fallback),
                   "seconds": time.perf_counter() - t0}
            if not m.fallback:
                f = np.asarray(m.flow_f, np.float32)
                row["corr"] = [P.aligned_correlation(a, b, f, size=z, sigma=g) for z, g in VARIANTS]
                row["worse"] = P.worse_than_identity(a, b, f) is not None
                row["mean_flow"] = float(np.hypot(f[..., 0], f[..., 1]).mean())
                if gt is not None:
                    v = np.asarray(valid).reshape(f.shape[:2]) > 0
                    row["epe"] = float(np.hypot(*np.moveaxis(f - gt, -1, 0))[v].mean())
            rows.append(row)
    return rows


def q(x, p):
    return float(np.percentile(x, p)) if len(x) else float("nan")


def report_dev(rows, t):
    ests = list(dict.fromkeys(r["est"] for r in rows))
    print(f"\n== development pairs: aligned correlation (longer side {P.FIT_SIZE}, blur {P.FIT_SIGMA}) "
          f"of each estimator's own answer; threshold {t} ==")
    print("correct pairs (answers not worse than no motion):")
    print("                set        estimator       n  own-fb   min    p1    p5  median  below")
    for set_ in ("synthetic", "real"):
        for e in ests:
            sel = [r for r in rows if r["set"] == set_ and r["kind"] == "correct" and r["est"] == e]
            c = np.array([r["corr"][0] for r in sel if "corr" in r and not r["worse"]])
            c = c[np.isfinite(c)]  # NaN: a featureless pair (black video frames), caught before
            if not sel:
                continue
            print(f"{'':16}{set_:10} {e:14} {len(sel):3} {sum(r['own_fallback'] for r in sel):6} "
                  f"{c.min():6.3f} {q(c, 1):5.3f} {q(c, 5):5.3f} {np.median(c):7.3f} {(c < t).sum():6}")
    low = sorted((r["corr"][0], r["set"], r["label"], r["est"]) for r in rows
                 if r["kind"] == "correct" and "corr" in r and not r["worse"] and np.isfinite(r["corr"][0]))[:8]
    print("lowest correct answers:", "; ".join(f"{s}/{lab} {e} {c:.3f}" for c, s, lab, e in low))
    print("negatives:      set        kind       estimator       n  own-fb  worse  max    median  caught (no fit "
          "or worse or own fallback)")
    for set_ in ("synthetic", "real"):
        for kind in ("unrelated", "rot180", "mirror"):
            for e in ests:
                sel = [r for r in rows if r["set"] == set_ and r["kind"] == kind and r["est"] == e]
                if not sel:
                    continue
                c = np.array([r["corr"][0] for r in sel if "corr" in r])
                caught = sum(r["own_fallback"] or r["worse"] or r["corr"][0] < t for r in sel)
                print(f"{'':16}{set_:10} {kind:10} {e:14} {len(sel):3} {sum(r['own_fallback'] for r in sel):6} "
                      f"{sum(r.get('worse', False) for r in sel):6} {c.max() if len(c) else np.nan:6.3f} "
                      f"{np.median(c) if len(c) else np.nan:7.3f}  {caught}/{len(sel)}")
    far = [r for r in rows if r["kind"] == "far"]
    if far:
        print("far pairs (a large viewpoint change):", "; ".join(
            f"{r['label']} {r['est']} " + ("own fallback" if r["own_fallback"] else
                                           f"{r['corr'][0]:.3f}{' worse' if r['worse'] else ''}") for r in far))
    high = sorted(((r["corr"][0], r["set"], r["kind"], r["label"], r["est"]) for r in rows
                   if r["kind"] not in ("correct", "far") and "corr" in r and not r["worse"]), reverse=True)[:8]
    print("highest negatives not caught otherwise:",
          "; ".join(f"{s}/{k}/{lab} {e} {c:.3f}" for c, s, k, lab, e in high))
    print("\nscales (refined camflow answers, synthetic and real): longer side, blur: lowest correct | "
          "highest negative (answers not worse than no motion)")
    for j, (z, g) in enumerate(VARIANTS):
        cam = [r for r in rows if r["est"] in ("camflow", "camflow+depth") and "corr" in r]
        pos = [r["corr"][j] for r in cam if r["kind"] == "correct" and not r["worse"]]
        neg = [r["corr"][j] for r in cam if r["kind"] not in ("correct", "far") and not r["worse"]]
        print(f"  {z:4} px, {g:.0f} px: {min(pos):.3f} | {max(neg):.3f}")


def report_benchmark(rows, t):
    print(f"\n== benchmark SyntheticScenes(seed={BENCH_SEED}, 100, {SIZE[0]}x{SIZE[1]}), shipped model ==")
    for e in dict.fromkeys(r["est"] for r in rows):
        sel = [r for r in rows if r["est"] == e]
        c = np.array([r["corr"][0] for r in sel])
        fired = [r for r in sel if r["corr"][0] < t]
        epe = np.array([r["epe"] for r in sel])
        print(f"{e:14} pairs {len(sel)}  no-fit fires {len(fired)} ({100 * len(fired) / len(sel):.0f} %)  "
              f"worse-than-identity fires {sum(r['worse'] for r in sel)}  correlation min {c.min():.3f} "
              f"p1 {q(c, 1):.3f} median {np.median(c):.3f}  EPE median {np.median(epe):.2f} px")
        low = sorted(sel, key=lambda r: r["corr"][0])[:3]
        print("   lowest:", "; ".join(f"{r['label']} {r['corr'][0]:.3f} (EPE {r['epe']:.2f} px)" for r in low))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-pairs", type=int, default=100, help="the benchmark's first N pairs (100: all)")
    ap.add_argument("--part", default="all", choices=("dev", "benchmark", "all"))
    ap.add_argument("--dev-pairs", type=int, default=60)
    ap.add_argument("--no-real", action="store_true", help="skip the opencv-doc pairs")
    ap.add_argument("--json", default=None, help="also write every measured answer to this file")
    ap.add_argument("--report", default=None, help="print the tables of a --json file again (nothing measured)")
    args = ap.parse_args()
    t = P.MIN_CORRELATION
    if args.report:
        with open(args.report) as fh:
            saved = json.load(fh)
        if "dev" in saved:
            report_dev(saved["dev"], t)
        if "benchmark" in saved:
            report_benchmark(saved["benchmark"], t)
        return
    t0 = time.time()
    dumped = {}
    pred = Predictor.from_pretrained()
    camflow, net = R.get("camflow", predictor=pred), R.get("camflow_net", predictor=pred)
    if args.part in ("dev", "all"):
        ests = {"camflow": camflow, "camflow+depth": camflow, "camflow_net": net, "camflow_net+depth": net,
                "sift_magsac": R.get("sift_magsac"),
                "dis": R.get("dis"), "ecc": R.get("ecc")}
        rows = measure(ests, synthetic_pairs(DEV_SEED, args.dev_pairs, True))
        if not args.no_real:
            rows += measure(ests, real_pairs())
        report_dev(rows, t)
        dumped["dev"] = rows
    if args.part in ("benchmark", "all"):
        bench = synthetic_pairs(BENCH_SEED, 100, False, args.bench_pairs)
        rows = measure({"camflow": camflow, "camflow+depth": camflow, "camflow_net": net, "camflow_net+depth": net},
                       bench)
        report_benchmark(rows, t)
        dumped["benchmark"] = rows
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dumped, fh)
    print(f"\n{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
