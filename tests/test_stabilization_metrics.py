"""Cropping / distortion / stability (camflow_jax.stabilization.metrics).

Oracles: homographies built in closed form (zoom, rotation, anisotropic scale, absolute camera
poses), hand-computed spectra, and the sanity values of docs/design.md, "Stabilization"
(identity, a 1.25x zoom, an anisotropic warp) on real frames matched by SIFT.
"""

import cv2
import numpy as np
import pytest

from camflow_jax.stabilization import metrics as M


def _about_centre(A, h, w, t=(0.0, 0.0)):
    """Homography applying the 2x2 map A about the image centre, then translating by t."""
    c = np.array([(w - 1) / 2, (h - 1) / 2])
    H = np.eye(3)
    H[:2, :2] = A
    H[:2, 2] = c - A @ c + np.asarray(t)
    return H


def _rot(deg):
    a = np.deg2rad(deg)
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])


def test_cropping_and_distortion_closed_form():
    h, w = 100, 160
    zoom = _about_centre(1.25 * np.eye(2), h, w)
    r = M.cropping_distortion(np.stack([zoom, zoom]))
    assert r["cropping"] == pytest.approx(0.8) and r["distortion"] == pytest.approx(1.0)
    # Rotation does not change the cropping (area scale), nor the distortion.
    rz = _about_centre(1.25 * _rot(10), h, w)
    assert M.cropping_distortion(rz[None])["cropping"] == pytest.approx(0.8)
    # Anisotropic (1.1, 0.9) in a rotated frame: singular values 1.1, 0.9 -> 0.818.
    an = _about_centre(_rot(30) @ np.diag([1.1, 0.9]) @ _rot(-30), h, w)
    r = M.cropping_distortion(np.stack([np.eye(3), an]))
    assert r["distortion"] == pytest.approx(0.9 / 1.1)
    # Zooming out (scale < 1) cannot crop more than nothing: capped at 1.
    assert M.cropping_distortion(_about_centre(0.9 * np.eye(2), h, w)[None])["cropping"] == 1.0
    assert r["cropping_min"] == pytest.approx(min(1.0, 1 / np.sqrt(0.99)))


def test_path_is_composed_by_left_multiplication():
    h, w = 90, 120
    rng = np.random.default_rng(0)
    # Absolute camera motions A_t (frame 0 -> frame t): non-commuting rotations + translations.
    A = [np.eye(3)] + [_about_centre(_rot(rng.normal(0, 3)), h, w, rng.normal(0, 5, 2))
                       for _ in range(6)]
    pairs = np.stack([A[t] @ np.linalg.inv(A[t - 1]) for t in range(1, 7)])  # t-1 -> t
    path = M.compose_path(pairs)
    np.testing.assert_allclose(path, np.stack(A), atol=1e-9)


def test_path_signals_read_rotation_and_centre_translation():
    h, w = 90, 120
    angles = np.array([0.0, 2.0, -3.5, 10.0])
    shifts = np.array([[0, 0], [4, -1], [-2, 3], [7, 7.5]])
    path = np.stack([_about_centre(_rot(a), h, w, s) for a, s in zip(angles, shifts)])
    sig = M.path_signals(path, h, w)
    np.testing.assert_allclose(np.rad2deg(sig["theta"]), angles, atol=1e-9)
    np.testing.assert_allclose(sig["tx"], shifts[:, 0], atol=1e-9)
    np.testing.assert_allclose(sig["ty"], shifts[:, 1], atol=1e-9)


def test_low_band_ratio_hand_computed():
    n = np.arange(60)
    # Equal-amplitude cosines in bin 1 and bin 10: the 5 lowest bins hold exactly half.
    x = np.cos(2 * np.pi * n / 60) + np.cos(2 * np.pi * 10 * n / 60)
    assert M.low_band_ratio(x, classic_bins=5) == pytest.approx(0.5, abs=1e-12)
    # Hz variant (Hann-windowed, so each cosine spreads over its bin +-1): 120 frames at 30 fps,
    # bins of 0.25 Hz; bin 2 (0.5 Hz) stays inside the 1 Hz band, bin 20 (5 Hz) outside.
    n = np.arange(120)
    x = np.cos(2 * np.pi * 2 * n / 120) + np.cos(2 * np.pi * 20 * n / 120)
    assert M.low_band_ratio(x, fps=30, low_hz=1.0) == pytest.approx(0.5, abs=5e-3)
    # Too short for any bin below 1 Hz: undefined rather than silently 0.
    assert np.isnan(M.low_band_ratio(x[:20], fps=30, low_hz=1.0))


def test_stability_hz_variant_does_not_depend_on_clip_length():
    rng = np.random.default_rng(1)
    hz, classic = {}, {}
    for n in (300, 600, 1200):
        vals_hz, vals_c = [], []
        for _ in range(8):
            t = np.arange(n) / 30.0
            x = 20 * np.sin(2 * np.pi * 0.3 * t + rng.uniform(0, 6)) + rng.normal(0, 2, n)
            vals_hz.append(M.low_band_ratio(x, 30, 1.0))
            vals_c.append(M.low_band_ratio(x, classic_bins=5))
        hz[n], classic[n] = np.mean(vals_hz), np.mean(vals_c)
    assert max(hz.values()) - min(hz.values()) < 0.02
    # The 5-bin band is 5 fps / N Hz: at 600 frames (0.25 Hz) it misses the 0.3 Hz motion.
    assert classic[300] > 0.9 and classic[600] < 0.1


def test_stability_smooth_vs_jittered_paths():
    h, w, n = 120, 160, 150
    t = np.arange(n) / 30.0
    smooth = [_about_centre(_rot(2 * np.sin(2 * np.pi * 0.2 * k)), h, w,
                            (3 * k, 10 * np.sin(2 * np.pi * 0.3 * k))) for k in t]
    rng = np.random.default_rng(2)
    jitter = [_about_centre(_rot(rng.normal(0, 0.5)), h, w, rng.normal(0, 3, 2)) @ S
              for S in smooth]

    def pairs(path):
        return np.stack([path[k] @ np.linalg.inv(path[k - 1]) for k in range(1, n)])

    s = M.stability_scores(pairs(smooth), h, w, fps=30)
    j = M.stability_scores(pairs(jitter), h, w, fps=30)
    assert s["stability"] > 0.97
    # White jitter (3 px, 0.5 deg) puts ~80 % of its energy above 1 Hz.
    assert j["stability"] < 0.8
    assert s["frames"] == n and s["seconds"] == pytest.approx(5.0)
    # A still camera scores 1 (noise floor), not the ratio of its round-off.
    still = M.stability_scores(np.stack([np.eye(3)] * (n - 1)), h, w, fps=30)
    assert still["stability"] == pytest.approx(1.0)


def _textured(h=120, w=160, seed=0):
    rng = np.random.default_rng(seed)
    img = np.full((h, w, 3), 128, np.uint8)
    for _ in range(250):
        x, y = rng.integers(0, w), rng.integers(0, h)
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            cv2.circle(img, (int(x), int(y)), int(rng.integers(2, 7)), col, -1)
        else:
            cv2.rectangle(img, (int(x), int(y)), (int(x + rng.integers(3, 10)),
                                                  int(y + rng.integers(3, 10))), col, -1)
    return img


def test_design_sanity_values_on_real_frames():
    h, w = 120, 160
    img = _textured(h, w)
    c = np.array([(w - 1) / 2, (h - 1) / 2])

    def warp(A):
        H = _about_centre(A, h, w)
        return cv2.warpPerspective(img, H, (w, h), flags=cv2.INTER_LINEAR)

    acc = M.MetricsAccumulator(fps=30)
    for _ in range(40):  # identity video: 40 equal frames (> 30 so a 1 Hz bin exists)
        acc.update(img, img)
    r = acc.finalize()
    assert r["output"]["cropping"] == pytest.approx(1.0, abs=1e-3)
    assert r["output"]["distortion"] == pytest.approx(1.0, abs=1e-3)
    assert r["output"]["stability"] == pytest.approx(1.0, abs=1e-3)
    assert sum(r["failures"].values()) == 0

    zoomed = M.frame_homography(img, warp(1.25 * np.eye(2)))
    # The matched homography is the zoom about the centre: c stays, p goes to c + 1.25 (p - c).
    for p in (c, np.array([20.0, 15.0]), np.array([140.0, 100.0]), np.array([30.0, 95.0])):
        q = zoomed @ np.r_[p, 1.0]
        np.testing.assert_allclose(q[:2] / q[2], c + 1.25 * (p - c), atol=0.3)
    assert M.cropping_distortion(zoomed[None])["cropping"] == pytest.approx(0.8, abs=0.01)
    aniso = M.frame_homography(img, warp(np.diag([1.1, 0.9])))
    assert M.cropping_distortion(aniso[None])["distortion"] == pytest.approx(0.818, abs=0.01)


def test_failed_matches_are_counted_not_reused():
    blank = np.zeros((64, 96, 3), np.uint8)
    assert M.frame_homography(blank, blank) is None
    acc = M.MetricsAccumulator()
    for _ in range(3):
        acc.update(blank, blank)
    r = acc.finalize()
    assert r["failures"] == {"input_pairs": 2, "output_pairs": 2, "input_output": 3}
    assert r["output"]["frames_measured"] == 0 and np.isnan(r["output"]["cropping"])


def test_frame_homography_rescales_to_full_resolution():
    img = cv2.resize(_textured(240, 320, seed=4), (640, 480))
    H_true = _about_centre(1.05 * _rot(2), 480, 640, (6, -4))
    moved = cv2.warpPerspective(img, H_true, (640, 480))
    H = M.frame_homography(img, moved, max_side=320)  # matched at half resolution
    pts = np.array([[100.0, 100.0], [540.0, 380.0], [320.0, 240.0]])

    def apply(H, p):
        q = np.c_[p, np.ones(len(p))] @ H.T
        return q[:, :2] / q[:, 2:]

    np.testing.assert_allclose(apply(H, pts), apply(H_true, pts), atol=1.0)
