"""Estimators, synthetic shaky clips and the end-to-end pipeline (camflow_jax.stabilization).

Oracles: the clips' exact ground-truth homographies checked with cv2.warpPerspective, known
homographies for the feature estimators, hand-made flows for the CamFlow adapter, and the
known smooth camera path for the end-to-end jitter reduction.
"""

import cv2
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax.stabilization import clips, estimators, pipeline


@pytest.fixture(scope="module")
def planar():
    return clips.planar_clip(45, 96, 160, seed=0, with_smooth=True)


def test_planar_clip_ground_truth(planar):
    f = planar.frames
    assert f.shape == (45, 96, 160, 3) and f.dtype == np.uint8
    # frame t+1 pulled back by the exact pair homography reproduces frame t (interior).
    t = 10
    back = cv2.warpPerspective(f[t + 1], planar.pair_homographies[t], (160, 96),
                               flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
    inner = (slice(12, -12), slice(12, -12))
    err = np.abs(back[inner].astype(float) - f[t][inner]).mean()
    assert err < 6.0 < np.abs(f[t + 1][inner].astype(float) - f[t][inner]).mean()
    # J_t maps the smooth frame onto the shaky one.
    shaky = cv2.warpPerspective(planar.smooth_frames[t], planar.jitter[t], (160, 96))
    assert np.abs(shaky[inner].astype(float) - f[t][inner]).mean() < 6.0
    # Same arguments, same clip; another seed, another clip.
    a, b = clips.planar_clip(3, 48, 80, seed=3), clips.planar_clip(3, 48, 80, seed=3)
    np.testing.assert_array_equal(a.frames, b.frames)
    assert np.any(clips.planar_clip(3, 48, 80, seed=4).frames != a.frames)


def test_parallax_clip_jitter_is_exact_rotation_homography():
    clip = clips.parallax_clip(4, 48, 80, seed=1, with_smooth=True, move_objects=False)
    assert clip.frames.shape == (4, 48, 80, 3)
    inner = (slice(8, -8), slice(8, -8))
    for t in range(4):
        shaky = cv2.warpPerspective(clip.smooth_frames[t], clip.jitter[t], (80, 48))
        assert np.abs(shaky[inner].astype(float) - clip.frames[t][inner]).mean() < 8.0


def test_homography_estimator_recovers_known_motion(planar):
    est = estimators.make_estimator("sift_ransac")
    assert est.name == "sift_ransac" and est.motion_estimator.robust == "ransac"
    flow = est(planar.frames[5], planar.frames[6])
    H = planar.pair_homographies[5]
    ys, xs = np.mgrid[0:96, 0:160].astype(np.float64)
    p = np.stack([xs, ys, np.ones_like(xs)], -1) @ H.T
    want = p[..., :2] / p[..., 2:] - np.stack([xs, ys], -1)
    assert np.abs(flow - want)[10:-10, 10:-10].mean() < 0.3
    blank = np.zeros((96, 160, 3), np.uint8)
    zero = est(blank, blank + 1)  # no features: identity fallback, counted
    assert np.all(zero == 0) and est.stats()["failures"] == 1 and est.stats()["calls"] == 2
    assert est.last_homography is None and est.last_note.startswith("identity fallback")
    again = est.fresh()  # the same estimator, counters at zero
    assert again.stats()["calls"] == 0 and est.stats()["calls"] == 2


def test_pairs_measured_by_several_threads_give_what_one_at_a_time_gives(planar):
    """The default estimator with worker threads: the same flows, counters, failed pairs and
    fallbacks as one call per pair in order, with a featureless frame in the middle (its pairs
    fail, the fallbacks find nothing either); through the pipeline, the same motion."""
    frames = [np.asarray(f) for f in planar.frames[:12]]
    frames[5] = np.zeros_like(frames[5])
    pairs = list(zip(frames[:-1], frames[1:]))
    one = estimators.make_estimator(estimators.DEFAULT, workers=1)
    many = estimators.make_estimator(estimators.DEFAULT, workers=3)
    assert one.batch_size == 1 and many.batch_size == 3 * many.PAIRS_PER_WORKER
    want = [one(a, b) for a, b in pairs]
    got = many.many(pairs)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)
    assert many.failed_pairs == one.failed_pairs == [4, 5]
    drop = ("ms_per_pair", "ms_per_pair_median")
    assert {k: v for k, v in many.stats().items() if k not in drop} == \
        {k: v for k, v in one.stats().items() if k not in drop}
    cfg = pipeline.StabilizerConfig()
    m1 = pipeline.estimate_motion(frames, one.fresh(), cfg)
    m3 = pipeline.estimate_motion(frames, many.fresh(), cfg)
    np.testing.assert_array_equal(m1.flows, m3.flows)
    np.testing.assert_array_equal(m1.masked_fraction, m3.masked_fraction)
    with pytest.raises(ValueError, match="workers"):
        estimators.make_estimator(estimators.DEFAULT, workers=0)


def test_ahead_keeps_the_order_raises_in_place_and_stops_its_thread():
    import threading

    assert list(pipeline.ahead(iter(range(50)), 3)) == list(range(50))

    def failing():
        yield 1
        yield 2
        raise ValueError("frame 2 is damaged")

    got = []
    with pytest.raises(ValueError, match="frame 2 is damaged"):
        for item in pipeline.ahead(failing()):
            got.append(item)
    assert got == [1, 2]  # everything before the error, then the error

    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    it = pipeline.ahead(endless(), 2)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()  # the consumer stops early (an error while writing): the producer is closed
    assert closed.is_set() and not any(t.name == "ahead" for t in threading.enumerate())
    with pytest.raises(ValueError, match="depth"):
        next(pipeline.ahead([], 0))


def test_old_names_keep_their_meaning():
    """The stabilizer's ``sift`` / ``orb`` were RANSAC: same method under the registry name."""
    with pytest.warns(FutureWarning, match="sift_ransac"):
        est = estimators.make_estimator("sift")
    assert est.name == "sift_ransac" and est.motion_estimator.robust == "ransac"
    with pytest.warns(FutureWarning, match="orb_ransac"):
        assert estimators.make_estimator("orb").name == "orb_ransac"
    assert estimators.make_estimator("ecc").name == "ecc"


def test_camflow_adapter_with_fake_predictor():
    def predictor(img1, img2, **kw):  # network-size output [1, h, w, 2] as a jax array
        f = np.zeros((1, 24, 40, 2), np.float32)
        f[..., 0], f[..., 1] = 2.0, -1.0
        return {"flow_f": jnp.asarray(f)}

    # a textured pair whose true motion is the fake's (4, -2): img1(x, y) = img2(x + 4, y - 2)
    tex = cv2.GaussianBlur(np.random.default_rng(0).integers(0, 255, (60, 90, 3)).astype(np.uint8), (0, 0), 2)
    img1, img2 = tex[0:48, 4:84], tex[2:50, 0:80]
    est = estimators.CamFlowEstimator(predictor)
    flow = est(img1, img2)
    assert flow.shape == (48, 80, 2)
    np.testing.assert_allclose(flow[..., 0], 4.0, atol=1e-5)  # u scaled by 80 / 40
    np.testing.assert_allclose(flow[..., 1], -2.0, atol=1e-5)  # v scaled by 48 / 24
    assert est.name == "camflow" and estimators.CamFlowEstimator(predictor, refine=False).name == "camflow_net"
    nan = estimators.CamFlowEstimator(lambda a, b, **kw: {"flow_f": np.full((48, 80, 2), np.nan)})
    # the model fails (non-finite): the fallback estimators' best answer measures the true (4, -2)
    got = nan(img1, img2)
    assert nan.failures == 0 and sum(nan.stats()["recovered"].values()) == 1 and nan.failed_pairs == []
    np.testing.assert_allclose(got[8:-8, 8:-8].mean(axis=(0, 1)), [4.0, -2.0], atol=0.05)
    nan.fallbacks = ()  # without fallbacks: a failure, listed, zeros as the placeholder
    assert np.all(nan(img1, img2) == 0) and nan.failures == 1 and nan.failed_pairs == [1]
    bad = estimators.CamFlowEstimator(lambda a, b, **kw: {"flow": 0})
    with pytest.raises(ValueError, match="flow_f"):
        bad(img1, img2)
    # no coefficients from this predictor; the failed pair is recorded as one
    assert est.coefficients == [None] and nan.coefficients == [None, None]
    shipped = estimators.make_estimator("camflow")  # no checkpoint: the model in the package
    assert "shipped model" in shipped.predictor.description
    with pytest.raises(ValueError, match="unknown estimator"):
        estimators.make_estimator("raft")


def test_camflow_with_a_reference_averages_agreeing_motions_and_else_keeps_the_better_fit(monkeypatch):
    """``stabilize --adapt``'s guard: the adapted model and the one it started from each estimate
    the pair. Oracle: a textured frame and its OpenCV warp by a known homography; fake models
    return the exact flow or the same shifted by a constant, each with its own coefficients.
    Two motions within ``AGREE_PX`` are averaged: 0.3 px either side of the exact motion
    average to it (through the inlier fit's homographies, and with the fit off as flows), with
    the mean coefficients, counted in ``averaged_pairs``. Two motions further apart: the one
    with the lower photometric cost is kept (the exact one, whichever model gives it), the
    reference's pairs counted, the kept model's coefficients recorded; the reference's must win
    on both measures: a lower cost with a smaller inlier share (what a compromise with a large
    object can have) keeps the adapted model's. A failed estimate of either leaves the other's."""
    rng = np.random.default_rng(4)
    h, w = 120, 200
    img1 = cv2.GaussianBlur(rng.integers(0, 256, (h, w, 3)).astype(np.uint8), (0, 0), 1.5)
    Hm = np.array([[1.004, -0.006, 2.2], [0.005, 1.003, -1.4], [0, 0, 1.0]])
    img2 = cv2.warpPerspective(img1, Hm, (w, h), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    grid = np.stack([xs, ys], -1)
    exact = (clips.apply_homography_np(Hm, grid) - grid).astype(np.float32)
    ones = np.ones((h, w), np.float32)

    def model(offset, coeff):
        return lambda a, b, **kw: {"flow_f": exact + np.float32(offset), "weights_f": ones,
                                   "coeffs_f": np.full(3, coeff, np.float32)}

    def error(flow):
        return float(np.abs(flow - exact)[8:-8, 8:-8].max())

    assert estimators.AGREE_PX < 2.0
    left, right = model([-0.3, 0.2], 1.0), model([0.3, -0.2], 2.0)
    for fit in (True, False):
        est = estimators.CamFlowEstimator(left, reference=right, two_motion_check=False, inlier_fit=fit)
        assert error(est(img1, img2)) < 1e-3 and est.stats()["averaged_pairs"] == 1
        assert est.reference_pairs == 0
        np.testing.assert_allclose(est.coefficients[-1], 1.5)
    good, off = model(0.0, 1.0), model([2.0, 0.0], 2.0)
    est = estimators.CamFlowEstimator(off, reference=good, two_motion_check=False)
    assert error(est(img1, img2)) < 0.02 and est.stats()["reference_pairs"] == 1
    assert est.averaged_pairs == 0
    np.testing.assert_array_equal(est.coefficients[-1], 1.0)  # the reference's, kept
    est = estimators.CamFlowEstimator(good, reference=off, two_motion_check=False)
    assert error(est(img1, img2)) < 0.02 and est.stats()["reference_pairs"] == 0
    np.testing.assert_array_equal(est.coefficients[-1], 1.0)
    failed = lambda a, b, **kw: {"flow_f": np.full((h, w, 2), np.nan, np.float32)}  # noqa: E731
    for mine, theirs, kept in ((failed, good, 1), (good, failed, 0)):
        est = estimators.CamFlowEstimator(mine, reference=theirs, two_motion_check=False)
        assert error(est(img1, img2)) < 0.02 and est.reference_pairs == kept and est.averaged_pairs == 0
        assert est.stats()["recovered"] == {} and est.failures == 0  # no fallback was needed
    pairs = [(img1, img2)] * 3  # the batched path (what the pipeline calls) keeps the same way
    est = estimators.CamFlowEstimator(off, reference=good, two_motion_check=False)
    assert all(error(f) < 0.02 for f in est.many(pairs)) and est.reference_pairs == 3
    est = estimators.CamFlowEstimator(left, reference=right, two_motion_check=False)
    assert all(error(f) < 1e-3 for f in est.many(pairs)) and est.averaged_pairs == 3
    assert "reference_pairs" not in estimators.CamFlowEstimator(good).stats()
    from camflow_jax import refine
    for shares, kept in (((0.5, 0.4), 0), ((0.5, 0.5), 1)):  # the reference's cost lower in both
        monkeypatch.setattr(refine, "judge_flows", lambda a, b, f, s=shares: (np.array([1.0, 0.9]), np.array(s)))
        est = estimators.CamFlowEstimator(good, reference=off, two_motion_check=False)
        est(img1, img2)
        assert est.reference_pairs == kept
    with pytest.raises(ValueError, match="reference"):
        estimators.CamFlowEstimator(good, reference="model")


def test_discontinuity_completion():
    ys, xs = np.mgrid[0:40, 0:60].astype(np.float32)
    smooth = np.stack([0.02 * xs + 1.0, -0.01 * ys], -1)
    out, mask = pipeline.complete_discontinuities(smooth, 0.5, 3.0)
    np.testing.assert_array_equal(out, smooth)  # smooth fields pass unchanged
    assert not mask.any()
    broken = smooth.copy()
    broken[15:25, 20:30] += np.array([6.0, -4.0])  # an object moving on its own
    out, mask = pipeline.complete_discontinuities(broken, 0.5, 3.0)
    assert mask[14:26, 19:31][[0, -1]].all()  # its edges are masked
    assert not mask[:8].any() and not mask[18:22, 24:26].any()  # far from them nothing is
    # The 6 px jump is replaced by a ramp of normalized-convolution values between both sides.
    jump = max(np.abs(np.diff(out, axis=0)).max(), np.abs(np.diff(out, axis=1)).max())
    assert jump < 0.5 * 6.0
    assert out[..., 0].min() >= broken[..., 0].min() - 1e-5
    assert out[..., 0].max() <= broken[..., 0].max() + 1e-5


def test_discontinuity_mask_matches_a_pixel_by_pixel_reading_of_the_rule():
    """The mask against loops over the rule as the module doc states it: a pixel is a jump when
    either flow component differs from a 4-neighbour's by more than the threshold, or when it is
    not finite; the mask is that grown by one pixel (3x3). Jumps in u alone, in v alone, a NaN."""
    rng = np.random.default_rng(3)
    h, w, thr = 12, 16, 0.5
    flow = rng.normal(0.0, 0.08, (h, w, 2)).astype(np.float32)
    flow[2:5, 3:6, 0] += 2.0   # u jumps only
    flow[7:10, 9:13, 1] -= 1.5  # v jumps only
    flow[10, 2] = np.nan
    finite = np.isfinite(flow).all(-1)
    f0 = np.where(finite[..., None], flow, 0.0)  # a non-finite vector is compared as zero motion
    jump = ~finite
    for y in range(h):
        for x in range(w):
            for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
                yy, xx = y + dy, x + dx
                if 0 <= yy < h and 0 <= xx < w and np.abs(f0[y, x] - f0[yy, xx]).max() > thr:
                    jump[y, x] = True
    grown = np.zeros_like(jump)
    for y in range(h):
        for x in range(w):
            grown[y, x] = jump[max(0, y - 1):y + 2, max(0, x - 1):x + 2].any()
    _, mask = pipeline.complete_discontinuities(flow, thr, 3.0)
    np.testing.assert_array_equal(mask, grown)
    assert mask[2:5, 3:6].any() and mask[7:10, 9:13].any() and mask[10, 2]


def test_pipeline_reduces_high_frequency_jitter_5x(planar):
    cfg = pipeline.StabilizerConfig()
    frames = list(planar.frames)
    out, plan, motion = pipeline.stabilize(frames, estimators.make_estimator("sift_ransac"), cfg)
    assert len(out) == len(frames) and out[0].shape == frames[0].shape
    assert motion.stats["failures"] == 0
    d_in, d_out = clips.residual_motion(planar.jitter, plan.updates, 96, 160, plan.zoom)
    hf_in, hf_out = clips.highfreq_rms(d_in), clips.highfreq_rms(d_out)
    assert hf_in > 1.0  # the clip really shakes (px)
    assert hf_in / hf_out >= 5.0, (hf_in, hf_out)
    assert 1.0 < plan.zoom <= cfg.max_zoom
    # Control: the identity estimator leaves the jitter in.
    _, plan0, _ = pipeline.stabilize(frames, estimators.make_estimator("identity"), cfg)
    assert plan0.zoom == 1.0 and np.all(plan0.updates == 0)


def test_highfreq_rms_hand_computed():
    t = np.arange(64)
    x = 3.0 * np.cos(2 * np.pi * 16 * t / 64) + 0.5 * t + 4 * np.cos(2 * np.pi * t / 64)
    # The 0.25 cycle/frame cosine (RMS 3 / sqrt 2) is the only part above 0.1 (the line is
    # removed; the slow cosine is below the cutoff but leaks slightly through detrending).
    assert clips.highfreq_rms(x[:, None]) == pytest.approx(3 / np.sqrt(2), rel=0.03)


def test_motion_file_roundtrip(tmp_path):
    m = pipeline.ClipMotion(np.random.default_rng(0).normal(size=(4, 5, 6, 2)).astype(np.float32),
                        (20, 24), 25.0, "sift", {"failures": 1})
    m.save(tmp_path / "m.npz")
    back = pipeline.ClipMotion.load(str(tmp_path / "m.npz"))
    np.testing.assert_array_equal(back.flows, m.flows)
    assert back.frame_size == (20, 24) and back.fps == 25.0 and back.estimator == "sift"
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable motion file"):
        pipeline.ClipMotion.load(str(tmp_path / "bad.npz"))
    with pytest.raises(FileNotFoundError):
        pipeline.ClipMotion.load(str(tmp_path / "missing.npz"))


def test_config_validation():
    with pytest.raises(ValueError, match="crop"):
        pipeline.StabilizerConfig(crop="1.5")
    with pytest.raises(ValueError, match="crop"):
        pipeline.StabilizerConfig(crop="half")
    assert pipeline.zoom_from_crop("0.8") == pytest.approx(1.25)
    assert pipeline.zoom_from_crop("none") == 1.0 and pipeline.zoom_from_crop("auto") is None
    with pytest.raises(ValueError, match="at least 2 frames"):
        pipeline.estimate_motion([np.zeros((32, 32, 3), np.uint8)],
                                 estimators.make_estimator("identity"),
                                 pipeline.StabilizerConfig())


def test_segmented_planning_equals_whole_clip(tmp_path):
    # Long-clip path (temporal segments + memmaps) vs the plain composition of the steps:
    # accumulate -> adaptive radii -> smooth over the whole clip at once.
    from camflow_jax.stabilization import profiles

    rng = np.random.default_rng(5)
    t_len = 130
    flows = (rng.normal(0, 1.0, (t_len - 1, 1, 1, 2)) + np.array([0.8, 0.0])
             + 0.1 * rng.normal(size=(t_len - 1, 6, 8, 2))).astype(np.float32)
    flows[60:75] *= 8  # a fast pan: short windows there
    params = profiles.SmoothingParams(max_radius=6, min_radius=2, motion_threshold=0.1,
                                      strength=4.0, iterations=4)
    c = profiles.accumulate_profiles(flows)
    radii = profiles.adaptive_radii(c, 6, 2, 5.0)
    want = profiles.smooth_profiles(c, radii, 4.0, 4, max_radius=6) - c
    mm = np.lib.format.open_memmap(str(tmp_path / "b.npy"), "w+", np.float32, c.shape)
    got, got_radii = pipeline.update_fields(flows, params, 5.0, out=mm, time_chunk=17,
                                            column_chunk=40)
    assert radii.min() < 6 == radii.max()  # the adaptive rule did something
    np.testing.assert_array_equal(got_radii, radii)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4)


def test_camflow_coefficients_reach_the_motion_file(tmp_path):
    """The camflow estimator's per-pair coefficients travel to the exported motion (zeros where
    the model failed: that pair's motion is the fallback estimators' best, which measures the
    1-px shift), and read back unchanged."""
    from camflow_jax.stabilization import motion_file

    calls = []

    def predictor(img1, img2, **kw):
        calls.append(1)
        if len(calls) == 2:  # the second pair fails: non-finite flow
            return {"flow_f": np.full((24, 40, 2), np.nan, np.float32), "coeffs_f": np.full(5, np.nan)}
        f = np.zeros((24, 40, 2), np.float32)
        f[..., 0] = 1.0
        return {"flow_f": f, "coeffs_f": np.arange(5.0) + len(calls)}

    tex = cv2.GaussianBlur(np.random.default_rng(1).integers(0, 255, (60, 90, 3)).astype(np.uint8), (0, 0), 2)
    frames = [np.ascontiguousarray(tex[0:48, k:k + 80]) for k in range(4)]
    est = estimators.CamFlowEstimator(predictor, inlier_fit=False)
    cfg = pipeline.StabilizerConfig()
    motion = pipeline.estimate_motion(frames, est, cfg)
    expected = np.stack([np.arange(5.0) + 1, np.zeros(5), np.arange(5.0) + 3])
    np.testing.assert_array_equal(motion.coefficients, expected)
    assert sum(motion.stats["recovered"].values()) == 1 and motion.stats["failures"] == 0
    w = motion.flows.shape[2]  # the view moves 1 px right per pair: flow -1 px in x (working grid)
    np.testing.assert_allclose(np.asarray(motion.flows[1])[2:-2, 2:-2].mean(axis=(0, 1)), [-w / 80, 0.0], atol=0.02)
    plan = pipeline.plan_stabilization(motion, cfg)
    for ext in ("json", "csv", "npz"):
        path = str(tmp_path / f"m.{ext}")
        motion_file.write(path, motion_file.record_from_plan(motion, plan))
        np.testing.assert_allclose(motion_file.read(path).coefficients, expected)


def test_fill_failed_pairs_hand_computed():
    """Runs of failed pairs get the mean of up to `neighbours` good pairs on each side (one side
    at the clip's ends); a run longer than max_gap, or a clip with no good pair, is left."""
    v = np.arange(12, dtype=float)
    filled, left = pipeline.fill_failed_pairs(v, [0, 4, 5, 9, 10, 11], max_gap=2, neighbours=2)
    assert filled == [0, 4, 5] and left == [9, 10, 11]  # the last run (3 pairs) is too long
    np.testing.assert_array_equal(v[[0, 4, 5]], [1.5, 4.5, 4.5])  # mean(1, 2); mean(2, 3, 6, 7)
    np.testing.assert_array_equal(v[9:], [9, 10, 11])
    flows = np.zeros((3, 2, 2, 2))
    flows[2] = 1.0
    assert pipeline.fill_failed_pairs(flows, [1], max_gap=5)[0] == [1]
    np.testing.assert_array_equal(flows[1], 0.5)  # fields too: the mean of pairs 0 and 2
    none = np.zeros(3)
    assert pipeline.fill_failed_pairs(none, [0, 1, 2], max_gap=5) == ([], [0, 1, 2])


def test_dark_noisy_low_resolution_clip_is_measured_by_the_fallbacks():
    """SIFT without the contrast stretch finds too few matches on every pair of a dark, noisy
    60x100 clip (it used to refuse the clip); ECC and DIS measure each pair again, and the
    output's shake falls, measured against the clip's exact camera path. The stabilizer's
    SIFT (grey levels stretched) measures the pairs itself, and the shake falls too."""
    clip = clips.planar_clip(40, 60, 100, seed=0, noise_std=20)
    frames = [np.clip(f.astype(np.float32) * 0.3, 0, 255).astype(np.uint8) for f in clip.frames]
    est = estimators.make_estimator("sift_ransac", stretch=False)
    _, plan, motion = pipeline.stabilize(frames, est, pipeline.StabilizerConfig())
    stats = motion.stats
    assert stats["failures"] == 0 and sum(stats["recovered"].values()) == stats["calls"] == 39
    d_in, d_out = clips.residual_motion(clip.jitter, plan.updates, 60, 100, plan.zoom)
    assert clips.highfreq_rms(d_in) / clips.highfreq_rms(d_out) >= 3.0
    _, plan_s, motion_s = pipeline.stabilize(frames, estimators.make_estimator("sift_ransac"),
                                             pipeline.StabilizerConfig())
    assert motion_s.stats["failures"] == 0 and not motion_s.stats["recovered"]
    d_out_s = clips.residual_motion(clip.jitter, plan_s.updates, 60, 100, plan_s.zoom)[1]
    assert clips.highfreq_rms(d_in) / clips.highfreq_rms(d_out_s) >= 3.0
    without = est.fresh()
    without.fallbacks = ()
    motion0 = pipeline.estimate_motion(frames, without, pipeline.StabilizerConfig())
    assert motion0.stats["failures"] == 39 and "interpolated" not in motion0.stats  # none good to fill from


def test_failure_note_says_what_was_used():
    from camflow_jax.stabilization import runner

    stats = {"calls": 50, "failures": 6, "interpolated": 4, "identity": 2}
    note = runner.failure_note("sift_ransac", stats, 30)
    assert note == ("the sift_ransac estimator failed on 6 of 50 frame pairs: 4 filled from the neighbouring "
                    "pairs' motion, 2 left at the identity motion (runs of more than 30 failed pairs)")
    old = runner.failure_note("sift_ransac", {"calls": 50, "failures": 6}, 30)  # an older motion file
    assert old.endswith("; the identity motion was used there")


def test_stabilize_video_takes_its_settings_as_options_or_keywords(tmp_path):
    """Issue 61: the run's settings are two groups, OutputOptions (what it writes) and
    MotionOptions (where the motion comes from); their fields as keywords still work and replace
    the options' fields; an unknown keyword is a TypeError naming it, before any work."""
    from camflow_jax.stabilization import runner

    folder = tmp_path / "in"
    folder.mkdir()
    for i, f in enumerate(clips.planar_clip(8, 32, 48, seed=3).frames):
        cv2.imwrite(str(folder / f"{i:03d}.png"), f[..., ::-1])
    still = lambda a, b: np.zeros(a.shape[:2] + (2,), np.float32)  # noqa: E731
    cfg = pipeline.StabilizerConfig(crop="none")
    opts = runner.OutputOptions(report=str(tmp_path / "r1"), export_motion=str(tmp_path / "m1.json"))
    by_options = runner.stabilize_video(str(folder), str(tmp_path / "o1"), still, cfg, opts, progress=False)
    by_keywords = runner.stabilize_video(str(folder), str(tmp_path / "o2"), still, cfg, progress=False,
                                         report=str(tmp_path / "r2"), export_motion=str(tmp_path / "m2.json"))
    replaced = runner.stabilize_video(str(folder), str(tmp_path / "o3"), still, cfg, opts, progress=False,
                                      report=str(tmp_path / "r3"), export_motion=None)
    for k in (1, 2):
        assert (tmp_path / f"r{k}.json").is_file() and (tmp_path / f"m{k}.json").is_file()
    assert (tmp_path / "r3.json").is_file() and not (tmp_path / "m3.json").exists() and "motion_file" not in replaced
    assert by_options["zoom"] == by_keywords["zoom"] == replaced["zoom"]
    loaded = runner.stabilize_video(str(folder), str(tmp_path / "o4"), None, cfg,
                                    motion_options=runner.MotionOptions(motion_path=str(tmp_path / "m1.json")),
                                    progress=False)
    assert loaded["motion_source"] == f"loaded from {tmp_path / 'm1.json'}"
    with pytest.raises(TypeError, match="with_metric"):
        runner.stabilize_video(str(folder), str(tmp_path / "o5"), still, cfg, with_metric=True)
    assert not (tmp_path / "o5").exists()


def test_a_degenerate_correction_is_rendered_with_the_zoom_alone(tmp_path):
    """Issue 44: a 1e9 px pair motion (here from a library estimator) with --crop none rendered
    every frame black with exit code 0; the frames whose correction would be mostly black are
    written with the zoom alone, counted in the report and named in a warning."""
    from camflow_jax.stabilization import runner

    frames = clips.planar_clip(8, 32, 48, seed=3).frames
    folder = tmp_path / "in"
    folder.mkdir()
    for i, f in enumerate(frames):
        cv2.imwrite(str(folder / f"{i:03d}.png"), f[..., ::-1])

    def huge(a, b, calls=[]):  # noqa: B006 - counts the pairs
        calls.append(1)
        f = np.zeros(a.shape[:2] + (2,), np.float32)
        f[..., 0] = 1e9 if len(calls) == 4 else 0.0
        return f

    report = runner.stabilize_video(str(folder), str(tmp_path / "out"), huge,
                                    pipeline.StabilizerConfig(crop="none"), with_metrics=False,
                                    with_plots=False, progress=False)
    bad = report["unstabilized_frames"]
    assert bad and report["border_fraction_max"] == 0.0, report
    (note,) = [w for w in report["warnings"] if "mostly black" in w]
    assert note.startswith(f"{len(bad)} of 8 frames would have been mostly black") and "zoom alone" in note
    out = sorted((tmp_path / "out").iterdir())
    for t in bad:  # zoom 1 (--crop none) and no correction: the input frame itself
        np.testing.assert_array_equal(cv2.imread(str(out[t]))[..., ::-1], frames[t])
    assert "mostly black" in (pipeline.fallback_note([(2, 1.0)], 8) or "")
    assert pipeline.fallback_note([], 8) is None
