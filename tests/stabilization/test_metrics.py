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
    # Too short for two bins below 1 Hz: undefined rather than silently 0 or a leaky ratio.
    assert np.isnan(M.low_band_ratio(x[:20], fps=30, low_hz=1.0))
    assert np.isnan(M.low_band_ratio(x[:59], fps=30, low_hz=1.0))
    assert np.isfinite(M.low_band_ratio(x[:60], fps=30, low_hz=1.0))


def test_short_clip_threshold_keeps_smooth_sways_near_one():
    # From 2 s on (two bins at <= 1 Hz) a smooth 0.3-0.5 Hz sway scores ~1 whatever its phase.
    for n in (60, 75, 90):
        t = np.arange(n) / 30.0
        for hz in (0.3, 0.5):
            for ph in np.linspace(0, np.pi, 5):
                xy = np.stack([20 * np.sin(2 * np.pi * hz * t + ph),
                               10 * np.cos(2 * np.pi * hz * t + ph)])
                assert M.low_band_ratio(xy, 30, 1.0, floor=0.3) > 0.99


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
    # White jitter (3 px, 0.5 deg) puts ~14/15 of its energy above 1 Hz, but the ratio is
    # relative: the 10 px sway (and 2 deg = 3.3 px rotation sway) keep it near 0.75.
    assert j["stability"] < 0.8 and j["stability_translation"] < 0.8
    assert j["jitter_px"] > 3.0  # sqrt(3^2 + 3^2 + (0.5 deg * 93 px)^2) * sqrt(14/15) = 4.4
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
    for _ in range(10):  # identity video (its stability: test_static_clip_scores_one...)
        acc.update(img, img)
    r = acc.finalize()
    assert r["output"]["cropping"] == pytest.approx(1.0, abs=1e-3)
    assert r["output"]["distortion"] == pytest.approx(1.0, abs=1e-3)
    assert np.isnan(r["output"]["stability"])  # 10 frames: shorter than 2 s
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
    assert r["output"]["frames_measured"] == 0 and np.isnan(r["output"]["cropping_scale"])


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


# --- Noise floor, pixel-weighted rotation, border fill (docs/stabilization_metrics.md) --------
# Synthetic clips of tools.bench.metric_clips: a textured scene moved by a known
# camera path (96x160, 90 frames at 30 fps), scored losslessly and after cv2's mp4v writer.

from tools.bench import metric_clips as C  # noqa: E402

H_, W_, N_, FPS = 96, 160, 90, 30.0
NI = 60  # frames of the image-based clips (2 s: the 1 Hz band holds 2 of 30 bins)
ZERO = np.zeros(NI)


def _scores(frames):
    return M.frames_metrics(frames, FPS)["output"]


def test_rotation_noise_cannot_outweigh_a_smooth_path_closed_form():
    # Exact homographies: a 20 px sway plus white rotation noise of 1 mrad per frame (what the
    # SIFT estimator gives on small encoded frames): 0.09 px at the corners of 96x160.
    rng = np.random.default_rng(5)
    tx, ty, _ = C.sway_path(N_, FPS, 20.0)
    theta = rng.normal(0, 1e-3, N_)
    path = [_about_centre(_rot(np.rad2deg(a)), H_, W_, (x, y)) for x, y, a in zip(tx, ty, theta)]
    pairs = np.stack([path[k] @ np.linalg.inv(path[k - 1]) for k in range(1, N_)])
    s = M.stability_scores(pairs, H_, W_, FPS)
    assert s["stability"] > 0.99 and s["stability_translation"] > 0.99
    # The same noise read in radians with the published floor (1e-4 rad) decides the min.
    assert s["stability_classic"] < 0.5
    # jitter_px: the high band of white noise of std 1e-3 rad at the 93.3 px lever arm is
    # about sqrt(1 - 1/15) of it (the 1 Hz band holds 3 of 45 bins).
    assert s["rotation_lever_px"] == pytest.approx(0.5 * np.hypot(96, 160))
    expected = 1e-3 * s["rotation_lever_px"] * np.sqrt(14 / 15)
    assert s["jitter_rotation_px"] == pytest.approx(expected, rel=0.25)
    # The sway leaks into the high band through the window: 0.12 px of a 20 px sway.
    assert s["jitter_translation_px"] < 0.2


def test_jitter_px_of_a_sinusoid_closed_form():
    # 5 Hz sinusoid of amplitude 2 px on tx only (well above the 1 Hz band): RMS 2 / sqrt(2).
    t = np.arange(N_) / FPS
    tx = 2.0 * np.sin(2 * np.pi * 5.0 * t)
    path = [_about_centre(np.eye(2), H_, W_, (x, 0.0)) for x in tx]
    pairs = np.stack([path[k] @ np.linalg.inv(path[k - 1]) for k in range(1, N_)])
    s = M.stability_scores(pairs, H_, W_, FPS)
    assert s["jitter_px"] == pytest.approx(np.sqrt(2.0), rel=0.03)
    # Score: the floor f = 0.3 px counts as low-band energy f^2 on each of the 3 signals,
    # against the sinusoid's mean square 2: 3 f^2 / (2 + 3 f^2) = 0.119.
    assert s["noise_floor_px"] == 0.3
    assert s["stability"] == pytest.approx(0.27 / 2.27, rel=0.03)
    assert M.stability_scores(pairs, H_, W_, FPS, floor_px=0.0)["stability"] < 0.01


def test_static_clip_scores_one_losslessly_and_encoded():
    frames = C.clip((ZERO, ZERO, ZERO), H_, W_, seed=0, noise_std=2.0)  # sensor noise
    for f in (frames, C.mp4v_roundtrip(frames, FPS)):
        o = _scores(f)
        assert o["stability"] > 0.98
        assert o["stability_translation"] > 0.98 and o["stability_rotation"] > 0.98
        assert o["border_fraction"] == 0.0


def test_smooth_sway_scores_near_one_and_codec_moves_it_little():
    frames = C.clip(C.sway_path(NI, FPS, 20.0), H_, W_, seed=1)
    lossless, encoded = _scores(frames), _scores(C.mp4v_roundtrip(frames, FPS))
    for o in (lossless, encoded):
        assert o["stability"] >= 0.95
        assert o["stability_translation"] >= 0.95 and o["stability_rotation"] >= 0.95
        assert o["jitter_px"] < 0.3  # estimator noise only: the path has no high band
    for k in ("stability", "stability_translation", "stability_rotation"):
        assert abs(lossless[k] - encoded[k]) <= 0.05


def test_seeded_jitter_scores_low_losslessly_and_encoded():
    tx, ty, _ = C.jitter_path(NI, seed=3, px=1.5)
    frames = C.clip((tx, ty, np.zeros(NI)), H_, W_, seed=2)
    # The true path's high band (closed-form homographies; the spectral measure itself is
    # checked on a sinusoid above): about 1.5 sqrt(2) = 2.1 px, this draw 2.6 px.
    path = [_about_centre(np.eye(2), H_, W_, (x, y)) for x, y in zip(tx, ty)]
    truth = M.stability_scores(np.stack([path[k] @ np.linalg.inv(path[k - 1])
                                         for k in range(1, NI)]), H_, W_, FPS)
    lossless, encoded = _scores(frames), _scores(C.mp4v_roundtrip(frames, FPS))
    for o in (lossless, encoded):
        assert o["stability"] < 0.5 and o["stability_translation"] < 0.5
        assert o["jitter_translation_px"] == pytest.approx(truth["jitter_translation_px"],
                                                           rel=0.05)
    assert abs(lossless["stability"] - encoded["stability"]) <= 0.05


def test_rotation_jitter_is_reported_as_rotation():
    # 0.3 deg white rotation jitter, no translation: 0.49 px at the corners of 96x160.
    frames = C.clip(C.jitter_path(NI, seed=4, px=0.0, rad=np.deg2rad(0.3)), H_, W_, seed=3)
    o = _scores(frames)
    assert o["stability_rotation"] < 0.5
    assert o["stability_translation"] > 0.9
    assert o["stability"] < 0.8


def test_black_border_is_counted_in_cropping():
    n = 8
    frames = C.clip(C.sway_path(n, FPS, 20.0), H_, W_, seed=5, noise_std=2.0)
    bordered = C.with_black_border(frames, left=4, right=4)  # 8 of 160 columns: 5 %
    for f in (bordered, C.mp4v_roundtrip(bordered, FPS)):
        assert all(abs(M.border_fraction(x) - 0.05) <= 0.01 for x in f)
        r = M.frames_metrics(f, FPS)["output"]  # output video scored on its own
        assert r["border_fraction"] == pytest.approx(0.05, abs=0.01)
        assert r["cropping"] <= 0.95 + 0.01 and r["cropping"] == pytest.approx(0.95, abs=0.01)
    # Against its (border-free) input: the scale says 1, the border says 0.95.
    r = M.frames_metrics(bordered, FPS, frames_in=frames)["output"]
    assert r["cropping_scale"] == pytest.approx(1.0, abs=0.01)
    assert r["cropping"] <= 0.95 and r["cropping_border"] == pytest.approx(0.95, abs=1e-9)
    # No border, no border fraction (dark texture inside the picture is not fill).
    assert max(M.border_fraction(x) for x in frames) == 0.0


def test_border_of_a_rotated_frame_matches_the_warped_valid_mask():
    img = C.scene(H_, W_, seed=6)[:H_, :W_]
    c = ((W_ - 1) / 2, (H_ - 1) / 2)
    for deg in (2.0, 5.0):
        A = cv2.getRotationMatrix2D(c, deg, 1.0)
        out = cv2.warpAffine(img, A, (W_, H_), borderValue=0)
        valid = cv2.warpAffine(np.full((H_, W_), 255, np.uint8), A, (W_, H_), borderValue=0)
        truth = float((valid < 128).mean())  # 0.019 and 0.046
        assert M.border_fraction(out) == pytest.approx(truth, abs=0.01)


def test_video_metrics_reads_the_written_video(tmp_path):
    frames = C.with_black_border(C.clip(C.sway_path(NI, FPS, 20.0), H_, W_, seed=7), top=5)
    path = str(tmp_path / "out.avi")
    wr = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), FPS, (W_, H_))
    for f in frames:
        wr.write(f)
    wr.release()
    o = M.video_metrics(path)["output"]
    assert o["frames"] == NI and o["fps"] == pytest.approx(FPS)
    assert o["border_fraction"] == pytest.approx(5 / 96, abs=0.01)
    assert o["stability"] >= 0.95
