"""camflow_jax.geometry.host against the JAX geometry and against OpenCV."""

import cv2
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax.geometry import device, host


def _image_and_flow(seed=0, h=48, w=64, scale=6.0):
    rng = np.random.default_rng(seed)
    img = rng.uniform(0, 255, (h, w, 3)).astype(np.float32)
    flow = rng.normal(0, scale, (h, w, 2)).astype(np.float32)
    flow[:3, :3] = [[0.0, 0.0]]  # some exact integer samples
    flow[-1, -1] = [0.0, 0.0]    # lands on the last row/column: outside by the rule
    return img, flow


def test_warp_matches_the_jax_warp_everywhere():
    img, flow = _image_and_flow()
    ours = host.warp(img, flow)
    ref = np.asarray(device.warp(jnp.asarray(img), jnp.asarray(flow)))
    np.testing.assert_allclose(ours, ref, atol=2e-3)
    valid = host.warp_validity(flow)
    np.testing.assert_array_equal(valid, np.asarray(device.warp_validity(jnp.asarray(flow)))[..., 0])
    assert 0 < valid.mean() < 1 and valid[-1, -1] == 0
    assert np.all(ours[valid == 0] == 0)  # exactly 0 outside


def test_warp_matches_opencv_remap_inside_the_valid_region():
    img, flow = _image_and_flow(seed=1)
    h, w = flow.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    ref = cv2.remap(img, xs + flow[..., 0], ys + flow[..., 1], cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_CONSTANT)
    valid = host.warp_validity(flow) > 0
    # cv2.remap quantizes the sample position to 1/32 pixel: a bounded difference
    np.testing.assert_allclose(host.warp(img, flow)[valid], ref[valid], atol=255 / 32)
    gray = host.warp(img[..., 0], flow)
    assert gray.shape == (h, w) and gray.dtype == np.float32
    np.testing.assert_allclose(gray[valid], ref[..., 0][valid], atol=255 / 32)


def test_the_fast_warp_is_the_exact_one_up_to_opencvs_weight_rounding():
    """exact=False: the same validity rule (exactly 0 outside, NaN flow outside) and values
    within 1/64 of the largest difference between a sample's four neighbours of the exact
    warp's (cv2.remap rounds the weights to 1/32 pixel); any channel count."""
    img, flow = _image_and_flow(seed=2)
    flow[5, 7] = np.nan
    h, w = flow.shape[:2]
    for image in (img, img[..., 0], np.concatenate([img, img[..., :2]], -1)):  # 3, 1 (2-D), 5 channels
        exact = host.warp(image, flow)
        fast = host.warp(image, flow, exact=False)
        assert fast.shape == exact.shape and fast.dtype == np.float32
        valid = host.warp_validity(flow) > 0
        assert np.all(fast[~valid] == 0) and fast[5, 7].max() == 0
        x = np.arange(w)[None] + flow[..., 0]
        y = np.arange(h)[:, None] + flow[..., 1]
        x0 = np.clip(np.floor(np.nan_to_num(x)), 0, w - 2).astype(int)
        y0 = np.clip(np.floor(np.nan_to_num(y)), 0, h - 2).astype(int)
        im = image.reshape(h, w, -1)
        nb = np.stack([im[y0, x0], im[y0, x0 + 1], im[y0 + 1, x0], im[y0 + 1, x0 + 1]])
        spread = (nb.max(0) - nb.min(0)).reshape(exact.shape)
        assert np.all(np.abs(fast - exact)[valid] <= spread[valid] / 64 + 1e-3)


def test_warp_of_a_shift_is_exact_and_nan_flow_gives_zero():
    img = np.arange(20 * 30, dtype=np.float32).reshape(20, 30)
    flow = np.zeros((20, 30, 2), np.float32)
    flow[..., 0] = 2.25
    out = host.warp(img, flow)
    np.testing.assert_allclose(out[:-1, :-4], img[:-1, 2:-2] + 0.25, rtol=1e-6)  # linear ramp
    assert np.all(out[:, -3:] == 0) and np.all(out[-1] == 0)
    flow[0, 0] = np.nan
    assert host.warp(img, flow)[0, 0] == 0 and host.warp_validity(flow)[0, 0] == 0
    with pytest.raises(ValueError, match="must match"):
        host.warp(img[:10], flow)


@pytest.mark.parametrize("call, message", [
    (lambda: host.warp(np.ones((2, 16, 16, 3)), np.zeros((16, 16, 2))),
     "warp: image has shape (2, 16, 16, 3) but flow has shape (16, 16, 2); expected image (16, 16) or (16, 16, C)"),
    (lambda: host.warp(np.ones((16, 16, 3)), np.zeros((16, 16, 3)), exact=False),
     "warp: flow has shape (16, 16, 3); expected [H, W, 2] (one flow, (u, v) per pixel)"),
    (lambda: host.warp(np.ones((2, 16, 16, 3)), np.zeros((2, 16, 16, 2))), "warp: flow has shape (2, 16, 16, 2)"),
    (lambda: host.warp([[1.0, 2.0], [3.0]], np.zeros((2, 2, 2))), "warp: image must be an array of numbers"),
    (lambda: host.warp_validity(np.zeros((16, 16))), "warp_validity: flow has shape (16, 16); expected [H, W, 2]"),
])
def test_host_warp_refuses_shapes_that_do_not_fit_in_one_line(call, message):
    """POOR (issue 63): a batched image was blamed as "image is (2, 16) but flow is (16, 16)", and
    with ``exact=False`` a 3-channel flow was warped without a word. One line naming the
    argument, its shape and the expected one."""
    with pytest.raises(ValueError) as e:
        call()
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_homography_flow_against_opencv_and_jax():
    H = np.array([[1.02, 0.03, 4.0], [-0.02, 0.98, -3.0], [1e-4, -2e-4, 1.0]])
    h, w = 40, 56
    flow = host.homography_flow(H, h, w)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    pts = np.stack([xs, ys], -1).reshape(-1, 1, 2)
    ref = cv2.perspectiveTransform(pts, H).reshape(h, w, 2) - np.stack([xs, ys], -1)
    assert flow.shape == (h, w, 2) and flow.dtype == np.float32
    np.testing.assert_allclose(flow, ref, atol=1e-4)
    np.testing.assert_allclose(flow, np.asarray(device.homography_to_flow(jnp.asarray(H), h, w)), atol=2e-3)


def test_mean_homography_against_opencv():
    """Oracle: OpenCV's four-point transform through the mean of the corners' images under each
    homography (OpenCV's perspectiveTransform); one homography is its own mean, two translations
    average to the mean translation, and the mean of two near estimates lies between their flows."""
    h, w = 48, 64
    Hs = np.array([[[1.02, 0.03, 4.0], [-0.02, 0.98, -3.0], [1e-4, -2e-4, 1.0]],
                   [[1.01, 0.01, 3.0], [-0.01, 0.99, -2.0], [5e-5, -1e-4, 1.0]],
                   [[0.99, 0.0, 3.5], [0.0, 1.0, -2.5], [0.0, 0.0, 1.0]]])
    corners = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64)
    moved = np.mean([cv2.perspectiveTransform(corners[None], H)[0] for H in Hs], 0)
    ref = cv2.getPerspectiveTransform(corners.astype(np.float32), moved.astype(np.float32))
    got = host.mean_homography(Hs, h, w)
    assert got[2, 2] == 1.0
    np.testing.assert_allclose(cv2.perspectiveTransform(corners[None], got)[0], moved, atol=1e-9)
    np.testing.assert_allclose(host.homography_flow(got, h, w), host.homography_flow(ref / ref[2, 2], h, w),
                               atol=2e-3)
    np.testing.assert_allclose(host.mean_homography(Hs[:1], h, w), Hs[0] / Hs[0][2, 2], atol=1e-9)
    t1, t2 = np.eye(3), np.eye(3)
    t1[:2, 2], t2[:2, 2] = (1.0, -2.0), (3.0, 4.0)
    np.testing.assert_allclose(host.mean_homography([t1, t2], h, w)[:2, 2], [2.0, 1.0], atol=1e-9)
    f1, f2 = (host.homography_flow(H, h, w) for H in Hs[1:])
    mean = host.homography_flow(host.mean_homography(Hs[1:], h, w), h, w)
    np.testing.assert_allclose(mean, (f1 + f2) / 2, atol=0.02)
    for bad in (np.eye(3), np.full((1, 3, 3), np.nan), np.zeros((0, 3, 3))):
        with pytest.raises(ValueError, match="homographies"):
            host.mean_homography(bad, h, w)


def test_resize_flow_against_opencv_and_translation():
    flow = np.zeros((40, 60, 2), np.float32)
    flow[..., 0], flow[..., 1] = 3.0, -2.0
    small = host.resize_flow(flow, 20, 15)
    np.testing.assert_allclose(small[..., 0], 3.0 * 15 / 60, rtol=1e-6)
    np.testing.assert_allclose(small[..., 1], -2.0 * 20 / 40, rtol=1e-6)
    # enlarging a linear field (half-pixel centres): exact away from the clamped borders
    ys, xs = np.mgrid[0:10, 0:12].astype(np.float32)
    f = np.stack([0.5 * xs, 0.25 * ys], -1)
    big = host.resize_flow(f, 20, 36)
    yb, xb = np.mgrid[0:20, 0:36].astype(np.float32)
    ref = np.stack([0.5 * ((xb + 0.5) / 3 - 0.5) * 3, 0.25 * ((yb + 0.5) / 2 - 0.5) * 2], -1)
    np.testing.assert_allclose(big[1:-1, 2:-2], ref[1:-1, 2:-2], atol=1e-5)
    # a strided view (a channel slice of a wider array) resizes as its copy does
    wide = np.concatenate([f, f[..., :1]], -1)[..., :2]
    np.testing.assert_array_equal(host.resize_flow(wide, 20, 36), big)
    same = host.resize_flow(f, 10, 12)
    np.testing.assert_array_equal(same, f)
    assert same is not f


def test_intrinsics_updates_follow_opencv_resize_and_crop():
    # Oracle: an image whose pixel (x, y) holds (x, y). Resized with cv2.resize (as the pipeline
    # resizes the images) or cropped, it must hold at a 3D point's projection under the updated
    # K the point's projection under the original K (bilinear samples of a linear image are
    # exact away from the clamped borders).
    K = np.array([90.0, 70.0, 41.3, 29.6], np.float32)
    h0, w0 = 60, 80
    ys, xs = np.mgrid[0:h0, 0:w0].astype(np.float32)
    coords = np.stack([xs, ys], -1)
    rng = np.random.default_rng(4)
    X = np.stack([rng.uniform(-0.25, 0.25, 50), rng.uniform(-0.25, 0.25, 50), np.ones(50)], -1)

    def project(k):
        return np.stack([k[0] * X[:, 0] / X[:, 2] + k[2], k[1] * X[:, 1] / X[:, 2] + k[3]], -1)

    def sample(img, p):  # bilinear, p inside [1, W-2] x [1, H-2]
        x0, y0 = np.floor(p[:, 0]).astype(int), np.floor(p[:, 1]).astype(int)
        fx, fy = (p[:, 0] - x0)[:, None], (p[:, 1] - y0)[:, None]
        return ((img[y0, x0] * (1 - fx) + img[y0, x0 + 1] * fx) * (1 - fy)
                + (img[y0 + 1, x0] * (1 - fx) + img[y0 + 1, x0 + 1] * fx) * fy)

    def check(img, k):
        p = project(k)
        h, w = img.shape[:2]
        inside = (p[:, 0] >= 1) & (p[:, 0] <= w - 3) & (p[:, 1] >= 1) & (p[:, 1] <= h - 3)
        assert inside.sum() >= 20
        np.testing.assert_allclose(sample(img, p[inside]), project(K)[inside], atol=1e-3)

    for h, w in [(150, 200), (30, 40), (45, 120)]:
        k2 = host.resize_intrinsics(K, (h0, w0), (h, w))
        check(cv2.resize(coords, (w, h), interpolation=cv2.INTER_LINEAR), k2)
        np.testing.assert_allclose(  # the JAX update (inference) gives the same K
            k2, np.asarray(device.resize_intrinsics(jnp.asarray(K), (h0, w0), (h, w))), rtol=1e-6)
    top, left = 7, 11
    k3 = host.crop_intrinsics(K, top, left)
    check(coords[top:, left:], k3)
    np.testing.assert_allclose(k3, np.asarray(device.crop_intrinsics(jnp.asarray(K), top, left)), rtol=1e-6)


def test_gray_is_the_channel_mean():
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    np.testing.assert_allclose(host.gray(img), img.astype(np.float64).mean(-1), rtol=1e-6)
    # 8-bit images take an integer sum: the same bits as float32's channel sum (the JAX gray's)
    full = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    full[0, 0], full[0, 1] = 255, 0
    f32 = full.astype(np.float32)
    np.testing.assert_array_equal(host.gray(full), (f32[..., 0] + f32[..., 1] + f32[..., 2]) / np.float32(3))
    assert host.gray(full).dtype == np.float32
    four = rng.uniform(0, 1, (5, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(host.gray(four), four.mean(-1), rtol=1e-6)
    flat = rng.uniform(0, 1, (5, 4)).astype(np.float32)
    np.testing.assert_array_equal(host.gray(flat), flat)


def test_constant_value_is_the_one_finite_value_of_every_array():
    constant_value = host.constant_value
    ones = np.ones((4, 5), np.float32)
    assert constant_value(ones, ones) == 1.0 and constant_value(np.full((3, 3), 2.5)) == 2.5
    relief = ones.copy()
    relief[3, 4] = 1.0001
    assert constant_value(ones, relief) is None and constant_value(relief) is None
    assert constant_value(ones, 2 * ones) is None  # each constant, not the same value
    for bad in (np.nan, np.inf):
        assert constant_value(np.full((2, 2), bad, np.float32)) is None
