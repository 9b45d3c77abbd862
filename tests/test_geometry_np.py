"""camflow_jax.geometry.host against the JAX geometry and against OpenCV."""

import cv2
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax.geometry import device as geometry
from camflow_jax.geometry import host as geometry_np


def _image_and_flow(seed=0, h=48, w=64, scale=6.0):
    rng = np.random.default_rng(seed)
    img = rng.uniform(0, 255, (h, w, 3)).astype(np.float32)
    flow = rng.normal(0, scale, (h, w, 2)).astype(np.float32)
    flow[:3, :3] = [[0.0, 0.0]]  # some exact integer samples
    flow[-1, -1] = [0.0, 0.0]    # lands on the last row/column: outside by the rule
    return img, flow


def test_warp_matches_the_jax_warp_everywhere():
    img, flow = _image_and_flow()
    ours = geometry_np.warp(img, flow)
    ref = np.asarray(geometry.warp(jnp.asarray(img), jnp.asarray(flow)))
    np.testing.assert_allclose(ours, ref, atol=2e-3)
    valid = geometry_np.warp_validity(flow)
    np.testing.assert_array_equal(valid, np.asarray(geometry.warp_validity(jnp.asarray(flow)))[..., 0])
    assert 0 < valid.mean() < 1 and valid[-1, -1] == 0
    assert np.all(ours[valid == 0] == 0)  # exactly 0 outside


def test_warp_matches_opencv_remap_inside_the_valid_region():
    img, flow = _image_and_flow(seed=1)
    h, w = flow.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    ref = cv2.remap(img, xs + flow[..., 0], ys + flow[..., 1], cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_CONSTANT)
    valid = geometry_np.warp_validity(flow) > 0
    # cv2.remap quantizes the sample position to 1/32 pixel: a bounded difference
    np.testing.assert_allclose(geometry_np.warp(img, flow)[valid], ref[valid], atol=255 / 32)
    gray = geometry_np.warp(img[..., 0], flow)
    assert gray.shape == (h, w) and gray.dtype == np.float32
    np.testing.assert_allclose(gray[valid], ref[..., 0][valid], atol=255 / 32)


def test_warp_of_a_shift_is_exact_and_nan_flow_gives_zero():
    img = np.arange(20 * 30, dtype=np.float32).reshape(20, 30)
    flow = np.zeros((20, 30, 2), np.float32)
    flow[..., 0] = 2.25
    out = geometry_np.warp(img, flow)
    np.testing.assert_allclose(out[:-1, :-4], img[:-1, 2:-2] + 0.25, rtol=1e-6)  # linear ramp
    assert np.all(out[:, -3:] == 0) and np.all(out[-1] == 0)
    flow[0, 0] = np.nan
    assert geometry_np.warp(img, flow)[0, 0] == 0 and geometry_np.warp_validity(flow)[0, 0] == 0
    with pytest.raises(ValueError, match="must match"):
        geometry_np.warp(img[:10], flow)


def test_homography_flow_against_opencv_and_jax():
    H = np.array([[1.02, 0.03, 4.0], [-0.02, 0.98, -3.0], [1e-4, -2e-4, 1.0]])
    h, w = 40, 56
    flow = geometry_np.homography_flow(H, h, w)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    pts = np.stack([xs, ys], -1).reshape(-1, 1, 2)
    ref = cv2.perspectiveTransform(pts, H).reshape(h, w, 2) - np.stack([xs, ys], -1)
    assert flow.shape == (h, w, 2) and flow.dtype == np.float32
    np.testing.assert_allclose(flow, ref, atol=1e-4)
    np.testing.assert_allclose(flow, np.asarray(geometry.homography_to_flow(jnp.asarray(H), h, w)), atol=2e-3)


def test_resize_flow_against_opencv_and_translation():
    flow = np.zeros((40, 60, 2), np.float32)
    flow[..., 0], flow[..., 1] = 3.0, -2.0
    small = geometry_np.resize_flow(flow, 20, 15)
    np.testing.assert_allclose(small[..., 0], 3.0 * 15 / 60, rtol=1e-6)
    np.testing.assert_allclose(small[..., 1], -2.0 * 20 / 40, rtol=1e-6)
    # enlarging a linear field (half-pixel centres): exact away from the clamped borders
    ys, xs = np.mgrid[0:10, 0:12].astype(np.float32)
    f = np.stack([0.5 * xs, 0.25 * ys], -1)
    big = geometry_np.resize_flow(f, 20, 36)
    yb, xb = np.mgrid[0:20, 0:36].astype(np.float32)
    ref = np.stack([0.5 * ((xb + 0.5) / 3 - 0.5) * 3, 0.25 * ((yb + 0.5) / 2 - 0.5) * 2], -1)
    np.testing.assert_allclose(big[1:-1, 2:-2], ref[1:-1, 2:-2], atol=1e-5)
    same = geometry_np.resize_flow(f, 10, 12)
    np.testing.assert_array_equal(same, f)
    assert same is not f


def test_gray_is_the_channel_mean():
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    np.testing.assert_allclose(geometry_np.gray(img), img.astype(np.float64).mean(-1), rtol=1e-6)
    four = rng.uniform(0, 1, (5, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(geometry_np.gray(four), four.mean(-1), rtol=1e-6)
    flat = rng.uniform(0, 1, (5, 4)).astype(np.float32)
    np.testing.assert_array_equal(geometry_np.gray(flat), flat)
