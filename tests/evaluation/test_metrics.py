"""Metrics against hand-computed numbers and independent numpy loops."""

import math

import numpy as np
import pytest

from camflow_jax.evaluation import metrics


def test_epe_hand_numbers():
    gt = np.zeros((2, 2, 2))
    flow = np.zeros((2, 2, 2))
    flow[0, 0] = (3, 4)  # error 5, valid
    flow[0, 1] = (6, 8)  # error 10, masked out
    mask = np.array([[1, 0], [1, 1]])
    # Published form: denominator H*W = 4 -> 5 / 4.
    assert metrics.epe_all_pixels(flow, gt, mask) == pytest.approx(1.25)
    # Valid-pixel form: 5 / 3.
    assert metrics.epe_valid(flow, gt, mask) == pytest.approx(5 / 3)
    assert metrics.epe_all_pixels(flow, gt) == pytest.approx(15 / 4)
    assert math.isnan(metrics.epe_valid(flow, gt, np.zeros((2, 2))))


def test_epe_matches_numpy_loop_on_ghof_cam_like_sample():
    rng = np.random.default_rng(0)
    h, w = 12, 16
    flow = rng.normal(size=(h, w, 2)) * 3
    gt = rng.normal(size=(h, w, 2)) * 3
    mask = (rng.random((h, w)) > 0.3).astype(np.float32)
    total, count = 0.0, 0
    for y in range(h):
        for x in range(w):
            du = (flow[y, x, 0] - gt[y, x, 0]) * mask[y, x]
            dv = (flow[y, x, 1] - gt[y, x, 1]) * mask[y, x]
            total += math.sqrt(du * du + dv * dv)
            count += int(mask[y, x] > 0)
    assert metrics.epe_all_pixels(flow, gt, mask) == pytest.approx(total / (h * w), rel=1e-12)
    assert metrics.epe_valid(flow, gt, mask[..., None]) == pytest.approx(total / count, rel=1e-12)


def test_ghof_pme_uses_top_half_rows():
    h, w = 5, 4  # h // 2 = 2 rows
    homo = np.zeros((h, w, 2))
    flow = np.zeros((h, w, 2))
    flow[:2, :, 0] = 1.0  # error 1 in rows 0, 1
    flow[2:, :, 1] = 100.0  # huge error below: must not count
    assert metrics.ghof_pme(flow, homo) == pytest.approx(1.0)


def _cahomo_reference(flow_f, flow_b, pts):
    """Independent re-statement of the reference loop (6 points, int() lookups, min)."""
    errs = []
    for j in range(6):
        (x1, y1), (x2, y2) = pts[j]
        fu, fv = flow_f[int(y1), int(x1)]
        e_f = math.hypot(x1 + fu - x2, y1 + fv - y2)
        bu, bv = flow_b[int(y2), int(x2)]
        e_b = math.hypot(x2 + bu - x1, y2 + bv - y1)
        errs.append(min(e_f, e_b))
    return sum(errs) / 6


def test_cahomo_pme_truncated_lookup_and_min():
    h, w = 20, 30
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    # Column-dependent flow so that int() truncation is visible: u = 0.1 * x.
    flow_f = np.stack([0.1 * xs, np.zeros_like(ys)], -1)
    flow_b = np.stack([np.zeros_like(xs), -0.2 * ys], -1)
    rng = np.random.default_rng(1)
    pts = np.stack([rng.uniform(0, [w - 1, h - 1], (8, 2)), rng.uniform(0, [w - 1, h - 1], (8, 2))], 1)
    expected = _cahomo_reference(flow_f, flow_b, pts)
    assert metrics.cahomo_pme(flow_f, pts, flow_b) == pytest.approx(expected, rel=1e-12)
    # A hand case: point (2.9, 1.0) reads column 2 (u = 0.2), not 2.9.
    pts1 = np.array([[[2.9, 1.0], [3.1, 1.0]]] * 6)
    assert metrics.cahomo_pme(flow_f, pts1) == pytest.approx(0.0)


def test_cahomo_zero_flow_is_point_distance():
    pts = np.array([[[0, 0], [3, 4]], [[5, 5], [5, 6]], [[1, 1], [1, 1]],
                    [[2, 2], [2, 4]], [[9, 9], [9, 9]], [[7, 1], [4, 5]], [[0, 0], [100, 0]]], float)
    z = np.zeros((16, 16, 2))
    # First 6 only: (5 + 1 + 0 + 2 + 0 + 5) / 6.
    assert metrics.cahomo_pme(z, pts, z) == pytest.approx(13 / 6)
    with pytest.raises(ValueError, match="at least 6"):
        metrics.cahomo_pme(z, pts[:5], z)


def test_point_error_bilinear_exact_for_linear_flow():
    h, w = 10, 12
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    flow = np.stack([0.5 * xs, -0.25 * ys], -1)  # bilinear interpolation is exact here
    p1 = np.array([[2.3, 4.7], [7.5, 1.25]])
    p2 = p1 + np.stack([0.5 * p1[:, 0], -0.25 * p1[:, 1]], -1) + np.array([[3.0, 4.0], [0.0, 0.0]])
    assert metrics.point_error(flow, p1, p2) == pytest.approx((5.0 + 0.0) / 2)


def test_psnr_closed_form():
    a = np.full((8, 8, 3), 100.0)
    b = a.copy()
    mask = np.zeros((8, 8))
    mask[:4] = 1
    b[:4] = 110.0  # error 10 inside the mask
    b[4:] = 0.0  # garbage outside the mask must not count
    assert metrics.psnr(a, b, mask) == pytest.approx(10 * math.log10(255 ** 2 / 100.0))
    # Released ("zeroed") form: whole frame, outside pixels zeroed in both -> MSE = 100 / 2.
    assert metrics.psnr(a, b, mask, form="zeroed") == pytest.approx(10 * math.log10(255 ** 2 / 50.0))
    assert metrics.psnr(a, a) == float("inf")


def test_ssim_identical_and_constant_images():
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (24, 32, 3)).astype(np.uint8)
    assert metrics.ssim(img, img) == pytest.approx(1.0)
    a, b = 80.0, 120.0
    c1 = (0.01 * 255) ** 2
    # Constant images: no variance, SSIM = luminance term only.
    expected = (2 * a * b + c1) / (a * a + b * b + c1)
    got = metrics.ssim(np.full((20, 20), a), np.full((20, 20), b))
    assert got == pytest.approx(expected, rel=1e-9)


def test_ssim_map_matches_brute_force_window():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 255, (31, 33))
    y = np.clip(x + rng.normal(0, 20, x.shape), 0, 255)
    r, cy, cx = 5, 15, 16
    t = np.arange(-r, r + 1)
    g = np.exp(-(t[:, None] ** 2 + t[None, :] ** 2) / (2 * 1.5 ** 2))
    g /= g.sum()
    px = x[cy - r: cy + r + 1, cx - r: cx + r + 1]
    py = y[cy - r: cy + r + 1, cx - r: cx + r + 1]
    mx, my = (g * px).sum(), (g * py).sum()
    vx = (g * (px - mx) ** 2).sum()
    vy = (g * (py - my) ** 2).sum()
    cxy = (g * (px - mx) * (py - my)).sum()
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    expected = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2))
    assert metrics.ssim_map(x, y)[cy, cx] == pytest.approx(expected, rel=1e-6)


def test_ssim_mask_selects_pixels():
    rng = np.random.default_rng(4)
    a = rng.uniform(0, 255, (40, 40))
    b = a.copy()
    b[:, 20:] = rng.uniform(0, 255, (40, 20))  # right half differs
    mask = np.zeros((40, 40))
    mask[:, :8] = 1  # far from the altered half (window radius 5)
    assert metrics.ssim(a, b, mask) == pytest.approx(1.0, abs=1e-9)
    assert metrics.ssim(a, b) < 0.8


def test_category_table_avg_is_mean_of_category_means():
    recs = [("A", {"epe": 1.0}), ("A", {"epe": 3.0}), ("A", {"epe": 5.0}),
            ("B", {"epe": 10.0}), ("B", {"epe": float("nan")})]
    table, counts = metrics.category_table(recs, ("A", "B", "C"))
    assert table["A"]["epe"] == 3.0 and table["B"]["epe"] == 10.0
    assert "C" not in table  # no samples
    assert table["AVG"]["epe"] == pytest.approx(6.5)  # not the sample mean 4.75
    assert counts["B"]["epe"] == 1 and counts["AVG"]["epe"] == 4
    with pytest.raises(ValueError, match="category"):
        metrics.category_table([("Z", {"epe": 1.0})], ("A",))


def test_bad_inputs_raise_clear_errors():
    f = np.zeros((4, 4, 2))
    with pytest.raises(ValueError, match="shapes differ"):
        metrics.epe_all_pixels(f, np.zeros((4, 5, 2)))
    bad = f.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        metrics.epe_valid(bad, f)
    with pytest.raises(ValueError, match=r"\[H, W, 2\]"):
        metrics.ghof_pme(np.zeros((4, 4)), f)
    with pytest.raises(ValueError, match="mask"):
        metrics.epe_valid(f, f, np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"\[N, 2, 2\]"):
        metrics.cahomo_pme(f, np.zeros((6, 3)))
