"""Rendering by inverse warping and the border-hiding zoom (camflow_jax.stabilization.render).

Oracles: integer shifts by array slicing, the closed-form inverse of an affine update,
cv2.warpAffine for a centred zoom, and the hand-derived zoom for a translation.
"""

import cv2
import numpy as np
import pytest

from camflow_jax.stabilization import render as rd


def _image(h=64, w=96, seed=0):
    rng = np.random.default_rng(seed)
    img = cv2.resize(rng.integers(0, 256, (h // 4, w // 4, 3), dtype=np.uint8), (w, h),
                     interpolation=cv2.INTER_CUBIC)
    return img


@pytest.mark.parametrize("scale", [1, 4])
def test_constant_update_shifts_the_frame(scale):
    img = _image()
    h, w = img.shape[:2]
    # Output y shows input x with x + B = y: out[y] = img[y - B]. B = (3, -2) full pixels.
    update = np.zeros((h // scale, w // scale, 2), np.float32)
    update[..., 0], update[..., 1] = 3.0 / scale, -2.0 / scale
    out = rd.render_frame(img, update)
    want = np.zeros_like(img)
    want[:h - 2, 3:] = img[2:, :w - 3]
    np.testing.assert_array_equal(out[:h - 2, 3:], want[:h - 2, 3:])
    assert np.all(out[:, :3] == 0) and np.all(out[h - 2:] == 0)  # black borders


def test_fixed_point_solves_affine_update_exactly():
    h, w = 40, 60
    A = np.array([[0.04, -0.03], [0.02, 0.05]])
    b = np.array([1.5, -2.0])
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    grid = np.stack([xs, ys], -1)
    update = (grid @ A.T + b).astype(np.float32)  # B(x) = A x + b
    y = np.array([[10.3, 20.7], [45.0, 5.5], [30.0, 30.0]])
    x = rd.solve_inverse(update, y, iterations=8)
    want = np.linalg.solve(np.eye(2) + A, (y - b).T).T  # x + A x + b = y
    np.testing.assert_allclose(x, want, atol=1e-4)


def test_zoom_matches_cv2_warp_affine():
    img = _image(96, 128)
    h, w = img.shape[:2]
    z = 1.25
    c = ((w - 1) / 2, (h - 1) / 2)
    out = rd.render_frame(img, np.zeros((h // 4, w // 4, 2), np.float32), zoom=z)
    M = np.array([[z, 0, c[0] * (1 - z)], [0, z, c[1] * (1 - z)]])
    want = cv2.warpAffine(img, M, (w, h), flags=cv2.INTER_LINEAR)
    diff = np.abs(out.astype(int) - want.astype(int))[4:-4, 4:-4]
    assert diff.max() <= 2


def test_required_zoom_for_a_translation_is_hand_derived():
    h, w = 60, 100
    t = 6.0  # full pixels to the right
    update = np.zeros((h // 4, w // 4, 2), np.float32)
    update[..., 0] = t / 4
    # Output column q samples x = c + (q - c) / z - t; x(0) >= 0  <=>  1/z <= 1 - t / c.
    c = (w - 1) / 2
    want = 1.0 / (1.0 - t / c)
    assert rd.required_zoom(update, h, w) == pytest.approx(want, abs=1e-4)  # 14 halvings
    assert rd.required_zoom(np.zeros_like(update), h, w) == 1.0
    assert rd.required_zoom(update * 20, h, w, max_zoom=1.2) == 1.2  # capped


def test_auto_zoom_hides_every_border_and_no_less_zoom_does():
    h, w = 72, 120
    ys, xs = np.mgrid[0:h // 4, 0:w // 4].astype(np.float32)
    updates = []
    for k, ang in enumerate(np.deg2rad([0.8, -1.2, 0.3])):  # small rotations + shifts
        cx, cy = (w // 4 - 1) / 2, (h // 4 - 1) / 2
        u = (np.cos(ang) - 1) * (xs - cx) - np.sin(ang) * (ys - cy) + 0.3 * k
        v = np.sin(ang) * (xs - cx) + (np.cos(ang) - 1) * (ys - cy) - 0.2 * k
        updates.append(np.stack([u, v], -1))
    updates = np.stack(updates)
    zoom, per_frame = rd.auto_zoom(updates, h, w, max_zoom=1.5)
    assert zoom == per_frame.max() and 1.0 < zoom < 1.5
    worst = max(rd.border_fraction(*rd.source_map(u, h, w, zoom)) for u in updates)
    assert worst == 0.0
    less = max(rd.border_fraction(*rd.source_map(u, h, w, zoom * 0.99)) for u in updates)
    assert less > 0.0
    # fits (one zoom, no search) agrees with the rendered maps' borders frame by frame
    for z in (per_frame.min() * 0.99, float(np.median(per_frame)), zoom):
        rendered = [rd.border_fraction(*rd.source_map(u, h, w, z)) == 0.0 for u in updates]
        assert rd.fits(updates, h, w, z).tolist() == rendered, z


def test_forward_points_and_rendering_agree():
    # Forward map q = c + z (x + B(x) - c) vs the renderer's inverse map read at q: two
    # different computations (direct evaluation vs fixed point + upsampling) of inverse maps.
    h, w = 60, 100
    rng = np.random.default_rng(3)
    low = cv2.resize(rng.normal(0, 0.4, (3, 4, 2)).astype(np.float32), (25, 15),
                     interpolation=cv2.INTER_CUBIC)  # smooth, Lipschitz << 1 like camera motion
    pts = np.array([[30.0, 20.0], [70.0, 40.0], [50.0, 30.0], [8.0, 52.0]])  # land inside
    q = rd.forward_points(pts, low, h, w, zoom=1.1)
    mx, my = rd.source_map(low, h, w, zoom=1.1, iterations=8)
    src = rd.sample_field(np.stack([mx, my], -1), q[:, 0], q[:, 1])
    np.testing.assert_allclose(src, pts, atol=0.1)  # cv2.remap: 1/32 px weights


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="update field"):
        rd.render_frame(_image(), np.zeros((4, 4, 3)))
    bad = np.zeros((4, 4, 2))
    bad[0, 0, 0] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        rd.render_frame(_image(), bad)
    with pytest.raises(ValueError, match="border"):
        rd.render_frame(_image(), np.zeros((4, 4, 2)), border="wrap")
