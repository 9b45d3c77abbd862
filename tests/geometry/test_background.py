"""Rigid motions among point tracks (camflow_jax.geometry.background) and the stabilizer's
two-motion check: oracles are the known homographies the points and images were made with
(numpy closed forms, OpenCV warps, the clip's exact pair homographies)."""

import cv2
import numpy as np
import pytest

from camflow_jax.geometry import background, host
from camflow_jax.stabilization import clips, estimators


def _similarity(angle, scale, tx, ty):
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    return np.array([[c, -s, tx], [s, c, ty], [0, 0, 1.0]])


H_BG = _similarity(0.004, 1.002, 1.3, -0.7)
H_OBJ = _similarity(0.0, 1.0, 3.5, -0.7)  # the background's motion plus ~2.2 px along x


def _tracks(rng, n_bg, n_obj, h=192, w=320, noise=0.05):
    """Background points all over the frame minus a central rectangle (the object's, 45 % of
    the frame), moved by H_BG; object points inside it, moved by H_OBJ."""
    oh, ow = int(h * 0.67), int(w * 0.67)
    y0, x0 = (h - oh) // 2, (w - ow) // 2
    bg = rng.uniform([0, 0], [w, h], (4 * n_bg, 2))
    inside = (bg[:, 0] > x0) & (bg[:, 0] < x0 + ow) & (bg[:, 1] > y0) & (bg[:, 1] < y0 + oh)
    bg = bg[~inside][:n_bg]
    obj = rng.uniform([x0, y0], [x0 + ow, y0 + oh], (n_obj, 2))
    p1 = np.concatenate([bg, obj])
    p2 = np.concatenate([clips.apply_homography_np(H_BG, bg), clips.apply_homography_np(H_OBJ, obj)])
    return p1, p2 + rng.normal(0, noise, p2.shape)


def _max_error(H, H_ref, h=192, w=320):
    ys, xs = np.mgrid[0:h:8, 0:w:8]
    p = np.stack([xs.ravel(), ys.ravel()], -1).astype(float)
    return np.abs(clips.apply_homography_np(H, p) - clips.apply_homography_np(H_ref, p)).max()


def test_two_motions_are_listed_largest_consensus_first():
    """RANSAC's largest consensus is the object's (600 tracks against 400): it comes first, the
    background's second; which is the camera's is left to the pixels (refine.dominant_homography)."""
    p1, p2 = _tracks(np.random.default_rng(0), 400, 600)
    motions = background.track_motions(p1, p2)
    assert len(motions) == 2
    obj = p1[400:]  # the object's motion is only defined on it
    err = np.linalg.norm(clips.apply_homography_np(motions[0], obj) - clips.apply_homography_np(H_OBJ, obj), axis=1)
    assert np.median(err) < 0.1 and err.max() < 0.5
    assert _max_error(motions[1], H_BG) < 0.2


def test_one_motion_is_listed_alone():
    rng = np.random.default_rng(1)
    p1 = rng.uniform([0, 0], [320, 192], (500, 2))
    p2 = clips.apply_homography_np(H_BG, p1) + rng.normal(0, 0.05, p1.shape)
    motions = background.track_motions(p1, p2)
    assert len(motions) == 1 and _max_error(motions[0], H_BG) < 0.1
    # a small second motion (10 % of the tracks, under the 15 % share) is not a second motion
    motions = background.track_motions(*_tracks(rng, 450, 50))
    assert len(motions) == 1 and _max_error(motions[0], H_BG) < 0.2


def test_the_refit_takes_the_background_motion_from_noisy_tracks():
    """Tracks of the large-foreground clip (the hard set's 45 % object, a development seed),
    started 0.3 px off the background's exact motion: the tracked motion nearest the exact one
    is within 0.06 px of it on every sampled pair, where a single RANSAC fit at 0.5 px is up to
    0.14 px off; the refit's RANSAC and least squares return to the motion of most of its
    tracks and average their noise."""
    clip = clips.moving_object_clip(90, 192, 320, seed=7, object_fraction=0.45)
    ys, xs = np.mgrid[0:192:4, 0:320:4]
    grid = np.stack([xs.ravel(), ys.ravel()], -1).astype(float)

    def rms(H, H_ref):
        return float(np.sqrt(((clips.apply_homography_np(H, grid) - clips.apply_homography_np(H_ref, grid)) ** 2)
                             .sum(-1).mean()))

    best = []
    for t in range(0, 89, 8):
        H_bg = clip.pair_homographies[t]
        flow = host.homography_flow(H_bg, 192, 320).astype(np.float32) + 0.3
        motions = background.track_motions(*background.seeded_tracks(clip.frames[t], clip.frames[t + 1], flow))
        assert len(motions) == 2  # the background's and the object's
        best.append(min(rms(m, H_bg) for m in motions))
    assert max(best) < 0.06 and np.mean(best) < 0.03, best


def test_too_few_tracks_and_mismatched_points():
    p = np.zeros((10, 2))
    assert background.track_motions(p, p) == []
    with pytest.raises(ValueError, match="as many points"):
        background.track_motions(np.zeros((20, 2)), np.zeros((19, 2)))


def test_seeded_tracks_find_the_true_positions_from_a_wrong_start():
    """Frame 2 is frame 1 warped by a known homography (OpenCV); tracks started 1.5 px off the
    true motion (a uniform flow error, as a refined flow between two motions has) land on it."""
    rng = np.random.default_rng(2)
    tex = cv2.GaussianBlur(rng.integers(0, 256, (192, 320)).astype(np.float32), (0, 0), 1.5)
    img1 = np.clip((tex - tex.mean()) * 4 + 128, 0, 255).astype(np.uint8)
    # warpPerspective samples src at H^-1 p: frame-1 content at p appears at H p in frame 2
    img2 = cv2.warpPerspective(img1, H_BG, (320, 192), flags=cv2.INTER_CUBIC)
    ys, xs = np.mgrid[0:192, 0:320]
    grid = np.stack([xs, ys], -1).astype(float)
    exact = clips.apply_homography_np(H_BG, grid) - grid
    p1, p2 = background.seeded_tracks(img1, img2, (exact + [1.5, -0.4]).astype(np.float32))
    inner = (p1[:, 0] > 12) & (p1[:, 0] < 308) & (p1[:, 1] > 12) & (p1[:, 1] < 180)
    assert inner.sum() > 500
    err = np.linalg.norm(p2[inner] - clips.apply_homography_np(H_BG, p1[inner]), axis=1)
    assert np.median(err) < 0.05 and np.percentile(err, 95) < 0.2
    with pytest.raises(ValueError, match="one size"):
        background.seeded_tracks(img1, img2, np.zeros((10, 10, 2), np.float32))
    flat = np.full_like(img1, 90)
    p1, p2 = background.seeded_tracks(flat, flat, np.zeros((192, 320, 2), np.float32))
    assert len(p1) == len(p2) == 0  # no texture: no tracks


def _textured_pair(H, h=192, w=320, seed=2):
    rng = np.random.default_rng(seed)
    tex = cv2.GaussianBlur(rng.integers(0, 256, (h, w)).astype(np.float32), (0, 0), 1.5)
    img1 = np.clip((tex - tex.mean()) * 4 + 128, 0, 255).astype(np.uint8)
    return img1, cv2.warpPerspective(img1, H, (w, h), flags=cv2.INTER_CUBIC)


def test_lk_track_keeps_every_point_in_place_and_flags_the_lost():
    """classical.lk_track (what seeded_tracks and the report's PointTracker share): one row per
    input point, True where the track is right (OpenCV warp of a known homography), False for
    a point whose content leaves the frame; lk_round_trip keeps the True rows."""
    from camflow_jax.geometry import classical

    shift = _similarity(0.0, 1.0, 14.0, 0.0)
    img1, img2 = _textured_pair(shift)
    pts = np.array([[100.0, 90.0], [315.0, 90.0], [160.0, 40.0]], np.float32)  # the middle one leaves
    p2, kept = classical.lk_track(img1, img2, pts)
    assert p2.shape == (3, 2) and kept.tolist() == [True, False, True]
    np.testing.assert_allclose(p2[kept], pts[kept] + [14.0, 0.0], atol=0.05)
    q1, q2 = classical.lk_round_trip(img1, img2, pts)
    np.testing.assert_array_equal(q1, pts[kept])
    np.testing.assert_array_equal(q2, p2[kept])
    e2, ek = classical.lk_track(img1, img2, np.zeros((0, 2)))
    assert e2.shape == (0, 2) and ek.shape == (0,)


def test_robust_fit_returns_the_inliers_of_a_known_homography():
    """classical.robust_fit: the homography the points were made with (numpy closed form) and
    exactly the points moved by it as inliers, the rest (moved 3 px more) as outliers."""
    from camflow_jax.geometry import classical

    rng = np.random.default_rng(5)
    p1 = rng.uniform([0, 0], [320, 192], (200, 2))
    p2 = clips.apply_homography_np(H_BG, p1)
    p2[150:] += [3.0, 0.0]
    H, inliers = classical.robust_fit(p1, p2, "ransac", 0.5)
    assert _max_error(H, H_BG) < 1e-3
    assert inliers.tolist() == [True] * 150 + [False] * 50
    with pytest.raises(ValueError, match="'ransac' or 'magsac'"):
        classical.robust_fit(p1, p2, "lmeds", 0.5)


def test_point_tracker_follows_a_known_shift_and_drops_lost_points():
    """The report's PointTracker through four frames shifted by 12 px each (OpenCV warps): the
    tracks follow the shift; a point whose content leaves the frame is NaN from then on."""
    from camflow_jax.stabilization.plots import PointTracker

    img0, _ = _textured_pair(np.eye(3))
    frames = [cv2.warpAffine(img0, np.float32([[1, 0, 12 * k], [0, 1, 0]]), (320, 192), flags=cv2.INTER_CUBIC)
              for k in (0, 1, 2, 1)]
    tracker = PointTracker(start=[[100.0, 90.0], [300.0, 60.0]])
    for f in frames:
        tracker.update(np.repeat(f[..., None], 3, axis=-1))
    tr = tracker.tracks
    assert tr.shape == (4, 2, 2)
    np.testing.assert_allclose(tr[:, 0], [[100, 90], [112, 90], [124, 90], [112, 90]], atol=0.1)
    assert np.all(np.isnan(tr[2:, 1]))  # at 324 px its content is out of the 320 px frame, and stays lost


def test_camflow_estimator_takes_the_background_from_a_compromise_flow():
    """The stabilizer's camflow estimator on a pair of the large-foreground clip, with a model
    whose flow lies between the background's exact motion and the object's (as the refined
    flow does there): the two-motion check (on by default) returns the background's motion,
    the one that explains the most of the frame; without it (``stabilize --no-two-motions``)
    the compromise stays."""
    # the hard set's large-foreground clip: its object slides 0.6 widths over 90 frames (2.2 px
    # a frame) and bobs once
    clip = clips.moving_object_clip(90, 192, 320, seed=3, object_fraction=0.45)
    t = 40
    a, b = clip.frames[t], clip.frames[t + 1]
    H_bg = clip.pair_homographies[t]
    ys, xs = np.mgrid[0:192, 0:320]
    grid = np.stack([xs, ys], -1).astype(float)
    exact = clips.apply_homography_np(H_bg, grid) - grid
    compromise = (exact + [1.2, 0.0]).astype(np.float32)

    def predictor(img1, img2, **kw):
        return {"flow_f": compromise, "weights_f": np.ones((192, 320), np.float32)}

    def error(flow):
        return float(np.sqrt(((flow - exact) ** 2).sum(-1).mean()))

    checked = estimators.CamFlowEstimator(predictor)  # the default: on
    unchecked = estimators.CamFlowEstimator(predictor, two_motion_check=False)
    assert error(unchecked(a, b)) > 1.0
    assert error(checked(a, b)) < 0.1
    assert checked.stats()["two_motion_pairs"] == 1 and "two_motion_pairs" not in unchecked.stats()


def test_the_check_keeps_a_good_fit_on_a_still_pair():
    """One motion (the clip without its object) and a model flow that is already exact: the
    check keeps the fit (no tracked motion replaces it, or one that is as exact)."""
    clip = clips.moving_object_clip(90, 192, 320, seed=3, with_object=False)
    t = 40
    ys, xs = np.mgrid[0:192, 0:320]
    grid = np.stack([xs, ys], -1).astype(float)
    exact = (clips.apply_homography_np(clip.pair_homographies[t], grid) - grid).astype(np.float32)
    est = estimators.CamFlowEstimator(lambda img1, img2, **kw: {"flow_f": exact,
                                                               "weights_f": np.ones((192, 320), np.float32)})
    flow = est(clip.frames[t], clip.frames[t + 1])
    assert float(np.sqrt(((flow - exact) ** 2).sum(-1).mean())) < 0.05


def test_make_estimator_passes_the_check_on():
    """``make_estimator`` (what ``stabilize`` calls) hands the option to the camflow estimator;
    on unless turned off (``--no-two-motions``)."""
    assert estimators.make_estimator("camflow").two_motion_check
    assert not estimators.make_estimator("camflow", two_motion_check=False).two_motion_check


def test_motion_candidates_list_the_fit_and_both_tracked_motions():
    """The candidates the stabilizer and the adaptation's teacher choose from: on a pair of the
    large-foreground clip with a flow 1.2 px off the background's motion, the fit to that flow
    (about 1.2 px off) and two tracked motions, one of them the background's exact motion; on
    the same pair without the object, the fit and one tracked motion."""
    ys, xs = np.mgrid[0:192, 0:320]
    grid = np.stack([xs, ys], -1).astype(float)
    for with_object, count in ((True, 3), (False, 2)):
        clip = clips.moving_object_clip(90, 192, 320, seed=3, object_fraction=0.45, with_object=with_object)
        t = 40
        H_bg = clip.pair_homographies[t]
        flow = (clips.apply_homography_np(H_bg, grid) - grid + [1.2, 0.0]).astype(np.float32)
        cands = background.motion_candidates(clip.frames[t], clip.frames[t + 1], flow)
        assert len(cands) == count, with_object
        mean_error = [float(np.linalg.norm(clips.apply_homography_np(H, grid) - clips.apply_homography_np(H_bg, grid),
                                           axis=-1).mean()) for H in cands]
        assert 1.0 < mean_error[0] < 1.4 and min(mean_error[1:]) < 0.1, mean_error
    assert background.motion_candidates(clip.frames[t], clip.frames[t + 1], np.full((192, 320, 2), np.nan,
                                                                                     np.float32)) == []
