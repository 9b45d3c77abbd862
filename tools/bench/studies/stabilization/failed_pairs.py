"""Where the stabilizer's estimator fails on a frame pair: what measures the pair again, and
what fills it when nothing does. docs/stabilization.md, "When an estimator fails".

Part 1, fallback estimators: dark, noisy, low-resolution versions of the planar shaky clip
(camflow_jax.stabilization.clips.planar_clip: exact camera motion), where SIFT finds too few
matches. For each pair SIFT fails on: which of ECC, DIS and the looser 3 px RANSAC measures
it, and that motion's error against the exact one (mean endpoint error, px).

Part 2, filling what no estimator measured: the planar and parallax clips (96 frames, 96x160,
seeds 0-1) stabilized with sift_ransac, with forced failures (fallbacks off) on about 10 % or
25 % of the pairs, isolated or in runs of 3, 10 and 30. The score is the ground-truth residual
high-frequency shake (clips.residual_motion + clips.highfreq_rms, px) with the failed pairs left
at the identity, or filled with the mean of 1, 4 or 8 good pairs on each side.

    python -m tools.bench.studies.stabilization.failed_pairs [--part 1|2] [--seeds 0,1] [--kinds planar,fast_pan,parallax]
"""

import argparse

import numpy as np

from camflow_jax.estimators import registry
from camflow_jax.stabilization import clips, estimators, pipeline


def part1():
    print("| clip (HxW, noise, brightness) | SIFT failed | ECC: measured, error px | DIS | RANSAC 3 px | "
          "the stabilizer (best-aligned of ECC and DIS) |")
    print("|---|---:|---:|---:|---:|---:|")
    for h, w, noise, dark in [(60, 100, 20, 0.3), (96, 160, 25, 0.25), (72, 120, 30, 0.3), (120, 200, 30, 0.2)]:
        clip = clips.planar_clip(48, h, w, seed=0, noise_std=noise)
        frames = [np.clip(f.astype(np.float32) * dark, 0, 255).astype(np.uint8) for f in clip.frames]
        sift = estimators.make_estimator("sift_ransac")
        sift.fallbacks = ()
        for k in range(len(frames) - 1):
            sift(frames[k], frames[k + 1])
        cells = []
        for name, opts in (("ecc", {}), ("dis", {}), ("sift_ransac", {"threshold": 3.0})):
            est = registry.get(name, forward_only=True, **opts)
            errs = []
            for k in sift.failed_pairs:
                m = est(frames[k], frames[k + 1])
                if not m.fallback:
                    want = clips.homography_flow_np(clip.pair_homographies[k], h, w)
                    errs.append(float(np.linalg.norm(m.flow_f - want, axis=-1).mean()))
            cells.append(f"{len(errs)}, {np.median(errs):.2f}" if errs else "0")
        chosen = estimators.make_estimator("sift_ransac")
        errs = []
        for k in sift.failed_pairs:
            flow = chosen(frames[k], frames[k + 1])
            want = clips.homography_flow_np(clip.pair_homographies[k], h, w)
            errs.append(float(np.linalg.norm(flow - want, axis=-1).mean()))
        cells.append(f"{len(errs) - chosen.failures}, {np.median(errs):.2f} ({chosen.stats()['recovered']})")
        print(f"| {h}x{w}, {noise}, {dark} | {len(sift.failed_pairs)} of {len(frames) - 1} | " + " | ".join(cells) + " |",
              flush=True)


class FailOn(estimators.VideoEstimator):
    """``inner``'s motion, except on the pairs in ``fail``: a failure, with no fallback."""

    fallbacks = ()

    def __init__(self, inner, fail):
        super().__init__()
        self.inner, self.fail, self.name = inner, set(fail), inner.name

    def _estimate(self, a, b):
        flow = self.inner(a, b)
        return None if (self.calls in self.fail) else flow


def failures(n_pairs: int, rate: float, run: int, rng) -> set[int]:
    out: set[int] = set()
    while len(out) < rate * n_pairs:
        start = int(rng.integers(0, n_pairs - run + 1))
        out.update(range(start, start + run))
    return out


def part2(seeds=(0, 1), kinds_run=("planar", "fast_pan", "parallax")):
    kinds = []
    variants = (("identity", 0, 4), ("mean of 1", 30, 1), ("mean of 4", 30, 4), ("mean of 8", 30, 8))
    rows = []
    makers = {"planar": lambda seed: clips.planar_clip(96, 96, 160, seed=seed),
              "fast_pan": lambda seed: clips.planar_clip(96, 96, 160, seed=seed, pan=(0.03, 0.01)),
              "parallax": lambda seed: clips.parallax_clip(96, 96, 160, seed=seed)}
    for kind in kinds_run:
        make = makers[kind]
        for seed in seeds:
            clip = make(seed)
            frames = list(clip.frames)
            base = estimators.make_estimator("sift_ransac")
            _, plan, _ = pipeline.stabilize(frames, base, pipeline.StabilizerConfig())
            d_in, d_ok = clips.residual_motion(clip.jitter, plan.updates, 96, 160, plan.zoom)
            row0 = [clips.highfreq_rms(d_in), clips.highfreq_rms(d_ok)]
            for rate in (0.10, 0.25):
                for run in (1, 3, 10, 30):
                    fail = failures(95, rate, run, np.random.default_rng(100 * seed + run))
                    got = []
                    for _, gap, nb in variants:
                        est = FailOn(base.fresh(), fail)
                        motion = pipeline.estimate_motion(frames, est, pipeline.StabilizerConfig(max_fill_gap=0))
                        flows = np.array(motion.flows)
                        bad = sorted(est.failed_pairs)
                        if gap:
                            pipeline.fill_failed_pairs(flows, bad, gap, nb)
                        motion.flows = flows
                        plan = pipeline.plan_stabilization(motion, pipeline.StabilizerConfig())
                        _, d_out = clips.residual_motion(clip.jitter, plan.updates, 96, 160, plan.zoom)
                        got.append(clips.highfreq_rms(d_out))
                    rows.append([rate, run, *row0, *got])
                    kinds.append(kind)
                    print(f"{kind:16s} seed {seed} rate {rate:.2f} run {run:2d}: input {row0[0]:.3f} "
                          f"no failure {row0[1]:.3f} | " + " | ".join(f"{v[0]} {g:.3f}" for v, g in zip(variants, got)),
                          flush=True)
    arr = np.array(rows, float)
    print("\nmedian over the clips (px of residual high-frequency shake):")
    table(arr, variants)
    print("\nthe fast-pan clips alone:")
    table(np.array([r for r, k in zip(rows, kinds) if k == "fast_pan"], float), variants)


def table(arr, variants):
    print("| failed pairs | run | input | no failure | " + " | ".join(v[0] for v in variants) + " |")
    print("|---:|---:|---:|---:|" + "---:|" * len(variants))
    for rate in (0.10, 0.25):
        for run in (1, 3, 10, 30):
            med = np.median(arr[(arr[:, 0] == rate) & (arr[:, 1] == run)][:, 2:], axis=0)
            print(f"| {rate:.0%} | {run} | " + " | ".join(f"{v:.3f}" for v in med) + " |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", type=int, choices=(1, 2), default=None, help="one part only")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--kinds", default="planar,fast_pan,parallax")
    args = ap.parse_args()
    if args.part in (None, 1):
        part1()
    if args.part in (None, 2):
        part2(tuple(int(v) for v in args.seeds.split(",")), tuple(args.kinds.split(",")))
