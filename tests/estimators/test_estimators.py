"""The estimator registry (camflow_jax.estimators.registry): names, options, and every estimator against
closed-form truth (image pairs related by a known homography, made with cv2.warpPerspective)."""

import numpy as np
import pytest

import fixtures_benchmarks as fx
from camflow_jax.estimators import registry
from camflow_jax.geometry import classical


def _epe(flow, truth, margin=8):
    d = (np.asarray(flow) - truth)[margin:-margin, margin:-margin]
    return float(np.hypot(d[..., 0], d[..., 1]).mean())


@pytest.fixture(scope="module")
def pair():
    img1, img2, H = fx.make_pair(np.random.default_rng(3), 96, 128, jitter=4.0)
    return img1, img2, H


# ----------------------------------------------------------------------------- names
def test_names_are_defined_once_and_unknown_names_fail_in_one_line():
    assert registry.NAMES == ("identity", "sift_ransac", "sift_magsac", "orb_ransac", "orb_magsac",
                                "klt_ransac", "klt_magsac", "ecc", "dis", "camflow", "camflow_net")
    assert "camflow" not in registry.CLASSICAL and "ecc" in registry.CLASSICAL
    with pytest.raises(ValueError) as e:
        registry.get("raft")
    msg = str(e.value)
    assert "\n" not in msg and "unknown estimator 'raft'" in msg
    assert all(n in msg for n in registry.NAMES) and "camflow:PATH" in msg
    with pytest.raises(ValueError, match="evaluation-only"):
        registry.get("gt_homography")
    with pytest.raises(ValueError, match="unknown estimator"):
        registry.get("camflow:")  # a checkpoint path is required after the colon
    text = registry.describe()
    assert all(f"{n}:" in text for n in registry.NAMES) and "sift = sift_ransac" in text


def test_old_names_map_to_ransac_with_a_note(pair):
    img1, img2, _ = pair
    assert registry.resolve("sift") == ("sift_ransac", registry.resolve("sift")[1])
    name, note = registry.resolve("orb")
    assert name == "orb_ransac" and "orb_ransac" in note and "\n" not in note
    assert registry.resolve("sift_magsac") == ("sift_magsac", "")
    with pytest.warns(FutureWarning, match="sift_ransac"):
        est = registry.get("sift")
    assert est.name == "sift_ransac" and est.robust == "ransac"
    np.testing.assert_array_equal(est(img1, img2).flow_f, registry.get("sift_ransac")(img1, img2).flow_f)


def test_options_are_checked_and_paths_parsed():
    with pytest.raises(ValueError, match="takes no option ratio"):
        registry.get("dis", ratio=0.5)
    est = registry.get("camflow_net:/some/ckpt")
    assert est.name == "camflow_net:/some/ckpt" and est.checkpoint == "/some/ckpt" and not est.refine
    with pytest.raises(ValueError, match="checkpoint"):
        registry.get("camflow:/a", checkpoint="/b")
    assert registry.without_refinement("camflow") == "camflow_net"
    assert registry.without_refinement("camflow:/a:b") == "camflow_net:/a:b"
    assert registry.without_refinement("sift_magsac") == "sift_magsac"
    assert registry.is_camflow("camflow_net:/x") and not registry.is_camflow("ecc")
    assert registry.takes_option("sift", "threshold") and registry.takes_option("klt_magsac", "round_trip")
    assert not registry.takes_option("ecc", "threshold") and not registry.takes_option("dis", "stretch")
    with pytest.raises(ValueError, match="same shape"):
        registry.get("identity")(np.zeros((8, 8, 3)), np.zeros((8, 9, 3)))


# ----------------------------------------------------------------------------- classical
def test_identity():
    m = registry.get("identity")(np.zeros((6, 7, 3)), np.ones((6, 7, 3)))
    assert m.flow_f.shape == (6, 7, 2) and not m.flow_f.any() and not m.flow_b.any()
    np.testing.assert_array_equal(m.homography, np.eye(3))
    assert m.note == "" and not m.fallback and m.weights is None


@pytest.mark.parametrize("name,tol", [("sift_ransac", 0.3), ("sift_magsac", 0.3), ("orb_ransac", 1.0),
                                      ("orb_magsac", 1.0), ("klt_ransac", 0.3), ("klt_magsac", 0.3),
                                      ("ecc", 0.1)])
def test_homography_estimators_recover_a_known_homography(pair, name, tol):
    img1, img2, H = pair
    h, w = img1.shape[:2]
    m = registry.get(name)(img1, img2)
    assert not m.fallback and m.flow_f.dtype == np.float32 and m.homography.dtype == np.float64
    assert _epe(m.flow_f, fx.homography_flow(H, h, w)) < tol
    assert _epe(m.flow_b, fx.homography_flow(np.linalg.inv(H), h, w)) < tol
    assert m.homography[2, 2] == pytest.approx(1.0)
    assert registry.get(name, forward_only=True)(img1, img2).flow_b is None


def test_feature_cache_detects_each_video_frame_once_and_changes_no_result(monkeypatch):
    """Consecutive pairs share a frame: with the cache each frame is detected once, and every
    pair's homography is the one detection from scratch gives, close to the clip's exact motion."""
    from camflow_jax.stabilization import clips

    clip = clips.moving_object_clip(5, 96, 160, seed=2, with_object=False)
    frames = list(clip.frames)
    calls = []
    real = classical.detect_features
    monkeypatch.setattr(classical, "detect_features", lambda *a, **k: calls.append(1) or real(*a, **k))
    est = registry.get("sift_ransac", forward_only=True)
    cached = [est(a, b).homography for a, b in zip(frames[:-1], frames[1:])]
    assert len(calls) == len(frames) and est.cache.hits == len(frames) - 2
    ys, xs = np.mgrid[8:96:16, 8:160:16].astype(np.float64)
    p = np.stack([xs.ravel(), ys.ravel(), np.ones(xs.size)])
    for t, (a, b) in enumerate(zip(frames[:-1], frames[1:])):
        fresh = classical.feature_homography(a, b, "sift", "ransac", threshold=3.0)
        np.testing.assert_array_equal(cached[t], fresh)
        q, g = cached[t] @ p, clip.pair_homographies[t] @ p
        assert np.abs(q[:2] / q[2] - g[:2] / g[2]).max() < 0.5  # the known motion, in pixels
    # a cache never returns another image's features
    cache = classical.FeatureCache(2)
    g1 = classical.to_gray_u8(frames[0])
    g2 = g1.copy()
    g2[0, 0] ^= 1
    assert cache.features(g1, "sift", 4000)[0] is not cache.features(g2, "sift", 4000)[0]
    assert cache.hits == 0 and cache.features(g1, "sift", 4000) is not None and cache.hits == 1


def test_stretch_contrast_maps_the_percentiles_to_the_full_range():
    # levels 10..109, one percent of the pixels each: the 1st percentile is 10, the 99th 108
    g = np.repeat(np.arange(10, 110, dtype=np.uint8), 50).reshape(100, 50)
    out = classical.stretch_contrast(g)
    want = np.clip(np.round((np.arange(10, 110) - 10) * 255.0 / 98.0), 0, 255)
    np.testing.assert_array_equal(out[:, 0], want.astype(np.uint8))
    assert out.dtype == np.uint8 and out[0, 0] == 0 and out[-1, 0] == 255
    flat = np.full((8, 8), 37, np.uint8)
    np.testing.assert_array_equal(classical.stretch_contrast(flat), flat)  # nothing to stretch
    with pytest.raises(ValueError, match="uint8"):
        classical.stretch_contrast(g.astype(np.float32))


def test_a_stretched_contrast_lets_sift_measure_a_dark_pair(pair):
    # The pair at a fifth of its grey levels: SIFT's contrast threshold is relative to the full
    # range, so too few features survive and there is no answer; with the grey levels
    # stretched, the known homography is recovered. On the pair as it is, it is recovered too.
    a, b, H = pair
    h, w = np.shape(a)[:2]
    truth = fx.homography_flow(H, h, w)
    dark = [np.round(0.2 * np.asarray(x, np.float64)).astype(np.uint8) for x in (a, b)]
    assert classical.feature_homography(*dark, "sift", "ransac", threshold=1.0) is None
    for imgs in (dark, (a, b)):
        Hs = classical.feature_homography(*imgs, "sift", "ransac", threshold=1.0, stretch=True)
        assert Hs is not None and _epe(fx.homography_flow(Hs, h, w), truth) < 0.3


def test_klt_keeps_only_tracks_that_return_and_fits_the_known_motion():
    """Corners tracked there and back: on a pair related by a known homography every kept
    track agrees with it; a pair with too few corners is a failure (None), never a guess."""
    img1, img2, H = fx.make_pair(np.random.default_rng(5), 192, 256, jitter=6.0)
    got = classical.klt_homography(img1, img2, threshold=0.5)
    ys, xs = np.mgrid[16:192:32, 16:256:32].astype(np.float64)
    p = np.stack([xs.ravel(), ys.ravel(), np.ones(xs.size)])
    q, g = got @ p, H @ p
    assert np.abs(q[:2] / q[2] - g[:2] / g[2]).max() < 0.2
    # a single corner: too few tracks
    dot = np.zeros((64, 64), np.uint8)
    dot[30:34, 30:34] = 255
    assert classical.klt_homography(dot, np.roll(dot, 1, axis=1)) is None
    with pytest.raises(ValueError, match="method"):
        classical.klt_homography(img1, img2, "lmeds")


def test_ecc_coarse_to_fine_recovers_a_larger_motion():
    img1, img2, H = fx.make_pair(np.random.default_rng(11), 192, 256, jitter=12.0)
    m = registry.get("ecc", min_side=40)(img1, img2)  # 192 -> 96 -> 48: three levels
    assert not m.fallback and m.note == ""
    assert _epe(m.flow_f, fx.homography_flow(H, 192, 256)) < 0.1


def test_ecc_keeps_the_coarser_estimate_when_a_finer_level_fails(monkeypatch):
    img1, img2, H = fx.make_pair(np.random.default_rng(12), 192, 256, jitter=6.0)
    real = classical.cv2.findTransformECC

    def fails_at_full_size(template, *args):
        if template.shape == (192, 256):
            raise classical.cv2.error("did not converge")
        return real(template, *args)

    monkeypatch.setattr(classical.cv2, "findTransformECC", fails_at_full_size)
    m = registry.get("ecc", min_side=40)(img1, img2)
    assert not m.fallback and "1/1 scale" in m.note and "coarser" in m.note
    # the half-size estimate, rescaled S H S^-1, still describes the full-size motion
    assert _epe(m.flow_f, fx.homography_flow(H, 192, 256)) < 0.3


@pytest.mark.parametrize("name", ["sift_magsac", "orb_ransac", "klt_ransac", "ecc"])
def test_failure_is_an_identity_fallback_with_a_note(name):
    flat = np.full((64, 80, 3), 120, np.uint8)
    m = registry.get(name).raw(flat, flat)  # the estimator's own failure path (no plausibility checks)
    assert m.fallback and m.note.startswith("identity fallback:")
    assert not m.flow_f.any() and not m.flow_b.any()
    np.testing.assert_array_equal(m.homography, np.eye(3))


def test_dis_gives_both_flows_and_a_fitted_homography(pair):
    img1, img2, H = pair
    h, w = img1.shape[:2]
    m = registry.get("dis")(img1, img2)
    assert _epe(m.flow_f, fx.homography_flow(H, h, w), 16) < 0.5
    assert _epe(m.flow_b, fx.homography_flow(np.linalg.inv(H), h, w), 16) < 0.5
    assert _epe(fx.homography_flow(m.homography, h, w), fx.homography_flow(H, h, w)) < 0.5
    fwd = registry.get("dis", forward_only=True)(img1, img2)
    assert fwd.flow_b is None and fwd.homography is None


# ----------------------------------------------------------------------------- camflow
class _FakePredictor:
    """Stands in for Predictor: records the call, answers with the documented dict."""

    def __init__(self, refined_note=""):
        self.calls = []
        self.refined_note = refined_note

    def __call__(self, img1, img2, depth1=None, depth2=None, intrinsics=None, refine=None):
        self.calls.append({"refine": refine, "depth1": depth1, "intrinsics": intrinsics})
        h, w = img1.shape[:2]
        flow = np.full((h, w, 2), 1.5, np.float32)
        out = {"flow_f": flow, "flow_b": -flow, "homography": np.array([[1, 0, 1.5], [0, 1, 1.5], [0, 0, 1.0]]),
               "refined": bool(refine)}
        if refine:
            out["weights_f"] = np.full((h, w), 0.5, np.float32)
            out["refine_info"] = {"note": self.refined_note}
        return out


def test_camflow_estimators_wrap_the_predictor():
    fake = _FakePredictor("stopped early")
    img = np.zeros((10, 12, 3), np.uint8)
    depth = np.ones((10, 12), np.float32)
    # raw: the wrapping itself (the plausibility checks are tests/geometry/test_plausibility.py's)
    m = registry.get("camflow", predictor=fake).raw(img, img, depth1=depth, depth2=depth,
                                                      intrinsics=(10, 10, 5.5, 4.5))
    assert fake.calls[-1]["refine"] is True and fake.calls[-1]["depth1"] is depth
    assert m.weights is not None and m.weights.shape == (10, 12) and m.note == "stopped early"
    assert m.extras["refined"] and m.flow_b[0, 0, 0] == -1.5 and m.homography[0, 2] == 1.5
    m = registry.get("camflow_net", predictor=fake).raw(img, img)
    assert fake.calls[-1]["refine"] is False and m.weights is None and m.note == ""
    with pytest.raises(ValueError, match="not both"):
        registry.get("camflow:/x", predictor=fake)
    # refine_size: the predictor is asked for RefineConfig.at_size(N); only the refined camflow
    from camflow_jax.refine import RefineConfig

    big = np.zeros((400, 600, 3), np.uint8)
    registry.get("camflow", predictor=fake, refine_size=576).raw(big, big)
    assert fake.calls[-1]["refine"] == RefineConfig.at_size(576)
    assert (fake.calls[-1]["refine"].levels, fake.calls[-1]["refine"].max_size) == (4, 576)  # the docstring's
    # A pair smaller than N refines at its own size (the default's levels below 288 px), with a note.
    huge = registry.get("camflow", predictor=fake, refine_size=4608)
    m = huge.raw(img, img)
    assert fake.calls[-1]["refine"] == RefineConfig() and fake.calls[-1]["refine"].levels == 3
    assert m.note.startswith("refine size 4608 is larger than the pair (12 px on its longer side): refined at 288 px")
    m = huge.raw(big, big)
    assert (fake.calls[-1]["refine"].max_size, fake.calls[-1]["refine"].levels) == (600, 4)  # round(log2(600/288)) = 1
    assert "refined at 600 px" in m.note
    with pytest.raises(ValueError, match="refine_size needs the refined camflow"):
        registry.get("camflow_net", predictor=fake, refine_size=576)
    with pytest.raises(ValueError, match="max_size >= 288"):
        registry.get("camflow", predictor=fake, refine_size=100)
