"""geometry against OpenCV and numpy closed forms."""

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax.geometry import device as G


def _rand_h(rng, h, w, jitter):
    src = np.float32([[0, 0], [w - 1, 0], [0, h - 1], [w - 1, h - 1]])
    dst = src + rng.uniform(-jitter, jitter, (4, 2)).astype(np.float32)
    return cv2.getPerspectiveTransform(src, dst)


def _grid_points(h, w):
    xs, ys = np.meshgrid(np.arange(w), np.arange(h))
    return np.stack([xs, ys], -1).astype(np.float64)


def test_homography_to_flow_matches_perspective_transform():
    rng = np.random.default_rng(0)
    h, w = 48, 80
    Hs = np.stack([_rand_h(rng, h, w, 12) for _ in range(3)])
    flows = np.asarray(G.homography_to_flow(jnp.asarray(Hs), h, w))
    pts = _grid_points(h, w)
    for H, flow in zip(Hs, flows):
        ref = cv2.perspectiveTransform(pts.reshape(-1, 1, 2), H).reshape(h, w, 2) - pts
        np.testing.assert_allclose(flow, ref, atol=2e-4)
    single = np.asarray(G.homography_to_flow(Hs[0], h, w))
    np.testing.assert_allclose(single, flows[0], atol=1e-5)


def test_warp_matches_remap_inside_and_is_zero_outside():
    rng = np.random.default_rng(1)
    h, w = 40, 64
    img = rng.uniform(0, 1, (h, w, 3)).astype(np.float32)
    flow = rng.uniform(-6, 6, (h, w, 2)).astype(np.float32)
    out = np.asarray(G.warp(jnp.asarray(img), jnp.asarray(flow)))
    maps = (_grid_points(h, w) + flow).astype(np.float32)
    ref = _remap_per_channel(img, maps[..., 0], maps[..., 1], cv2.BORDER_CONSTANT)
    inside = (maps[..., 0] >= 0) & (maps[..., 0] < w - 1) & (maps[..., 1] >= 0) & (maps[..., 1] < h - 1)
    assert inside.mean() > 0.5 and (~inside).sum() > 50
    np.testing.assert_allclose(out[inside], ref[inside], atol=1e-5)
    assert np.all(out[~inside] == 0)
    np.testing.assert_array_equal(np.asarray(G.warp_validity(jnp.asarray(flow)))[..., 0], inside.astype(np.float32))


def test_warp_zero_flow_keeps_image_and_zeroes_last_row_and_column():
    img = np.arange(5 * 7 * 2, dtype=np.float32).reshape(5, 7, 2) + 1
    out = np.asarray(G.warp(jnp.asarray(img), jnp.zeros((5, 7, 2))))
    np.testing.assert_array_equal(out[:-1, :-1], img[:-1, :-1])
    assert np.all(out[-1] == 0) and np.all(out[:, -1] == 0)


def test_warp_batched_and_jitted():
    rng = np.random.default_rng(2)
    img = rng.uniform(size=(2, 16, 24, 1)).astype(np.float32)
    flow = rng.uniform(-2, 2, (2, 16, 24, 2)).astype(np.float32)
    batched = np.asarray(jax.jit(G.warp)(img, flow))
    for b in range(2):
        np.testing.assert_allclose(batched[b], np.asarray(G.warp(img[b], flow[b])), atol=1e-6)
    with pytest.raises(ValueError, match="flow"):
        G.warp(img[0], flow[0, ..., :1])


@pytest.mark.parametrize("call, message", [
    (lambda: G.warp(np.ones((16, 20, 3)), np.zeros((16, 16, 2))),
     "warp: image has shape (16, 20, 3) but flow has shape (16, 16, 2); expected image (16, 16, C) or (16, 16): "
     "image and flow sizes must match"),
    (lambda: G.warp(np.ones((2, 16, 16, 3)), np.zeros((3, 16, 16, 2))),
     "warp: image has shape (2, 16, 16, 3) but flow has shape (3, 16, 16, 2); expected image (3, 16, 16, C) or "
     "(3, 16, 16)"),
    (lambda: G.warp(np.ones((1, 2, 16, 16, 3)), np.zeros((1, 2, 16, 16, 2))),
     "warp: flow has shape (1, 2, 16, 16, 2); expected [H, W, 2] or [B, H, W, 2] ((u, v) per pixel)"),
    (lambda: G.warp(np.ones((16, 16, 3)), np.zeros((16, 16, 3))), "warp: flow has shape (16, 16, 3); expected"),
    (lambda: G.warp([[1.0, 2.0], [3.0]], np.zeros((2, 2, 2))),
     "warp: image must be an array of numbers (nested lists of different lengths?)"),
    (lambda: G.warp(np.full((4, 4, 1), "a"), np.zeros((4, 4, 2))), "warp: image must hold real numbers, got dtype <U1"),
    (lambda: G.warp_validity(np.zeros((16, 16))),
     "warp_validity: flow has shape (16, 16); expected [..., H, W, 2] ((u, v) per pixel)"),
    (lambda: G.compose_flows(np.zeros((8, 8, 2)), np.zeros((8, 9, 2))),
     "compose_flows: f12 has shape (8, 8, 2) but f23 has shape (8, 9, 2); expected one shape"),
])
def test_warp_refuses_shapes_that_do_not_fit_in_one_line(call, message):
    """POOR (issue 63): a batch of 2 images with 3 flows ended in vmap's three-line "inconsistent
    sizes", a rank-5 flow in "Incompatible shapes for broadcasting", a list in an AttributeError,
    warp_validity of a flow without its channel axis in "not enough values to unpack". One line
    naming the argument, its shape and the expected one."""
    with pytest.raises(ValueError) as e:
        call()
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_warp_shape_checks_run_at_trace_time_and_lists_and_grey_images_work():
    """The checks read static shapes: under jit they fire when tracing; a grey ``[H, W]`` image
    (``[B, H, W]`` batched) and Python lists are warped like their ``[..., 1]`` arrays."""
    rng = np.random.default_rng(4)
    img = rng.uniform(size=(2, 8, 12)).astype(np.float32)
    flow = rng.uniform(-2, 2, (2, 8, 12, 2)).astype(np.float32)
    ref = np.asarray(G.warp(img[..., None], flow))[..., 0]
    np.testing.assert_array_equal(np.asarray(jax.jit(G.warp)(img, flow)), ref)
    np.testing.assert_array_equal(np.asarray(G.warp(img[0], flow[0])), ref[0])
    np.testing.assert_array_equal(np.asarray(G.warp(img[0].tolist(), flow[0].tolist())), ref[0])
    with pytest.raises(ValueError, match=r"^warp: image has shape \(2, 8, 11\)"):
        jax.jit(G.warp)(img[..., :11], flow)


def test_fit_homography_recovers_h_with_mask_and_nan():
    rng = np.random.default_rng(3)
    h, w = 60, 96
    H = _rand_h(rng, h, w, 10)
    flow = np.asarray(G.homography_to_flow(H, h, w)).copy()
    flow[:10, :20] += 25.0  # an outlier region the mask removes
    flow[30, 40] = np.nan   # non-finite flow is always ignored
    mask = np.ones((h, w), np.float32)
    mask[:10, :20] = 0
    H_fit = np.asarray(G.fit_homography(jnp.asarray(flow), jnp.asarray(mask)))
    ref = np.asarray(G.homography_to_flow(H, h, w))
    fit_flow = np.asarray(G.homography_to_flow(H_fit, h, w))
    assert np.abs(fit_flow - ref).max() < 1e-2
    np.testing.assert_allclose(H_fit / H_fit[2, 2], H / H[2, 2], atol=1e-3, rtol=1e-3)
    # batched
    Hb = np.asarray(G.fit_homography(jnp.stack([jnp.asarray(ref)] * 2)))
    assert Hb.shape == (2, 3, 3)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_strided_homography_fit_is_exact_for_a_homography_flow(stride):
    """The predictor fits its homography at a stride (issue 41: the fit at every pixel of a
    480x640 flow took 65 of the forward's 161 ms on 2 cores). Oracle: the flow of a known
    homography in numpy closed form, on a size the stride does not divide."""
    rng = np.random.default_rng(stride)
    h, w = 61, 97
    H = _rand_h(rng, h, w, 8)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    q = np.stack([xs, ys, np.ones_like(xs)], -1) @ H.T
    flow = (q[..., :2] / q[..., 2:] - np.stack([xs, ys], -1)).astype(np.float32)
    H_fit = np.asarray(jax.jit(G.fit_homography_strided, static_argnums=1)(jnp.asarray(flow), stride), np.float64)
    q_fit = np.stack([xs, ys, np.ones_like(xs)], -1) @ H_fit.T
    assert np.abs(q_fit[..., :2] / q_fit[..., 2:] - q[..., :2] / q[..., 2:]).max() < 1e-2
    with pytest.raises(ValueError, match="stride"):
        G.fit_homography_strided(jnp.asarray(flow), 0)
    assert np.all(np.isnan(np.asarray(G.fit_homography_strided(jnp.full((8, 8, 2), jnp.nan), 2))))


def test_homography_stride_keeps_the_networks_number_of_points():
    for size, stride in (((360, 480), 2), ((480, 640), 3), ((1080, 1920), 7), ((128, 256), 1), ((100, 700), 1)):
        assert G.homography_stride(size, (128, 256)) == stride, size
        rows, cols = -(-size[0] // stride), -(-size[1] // stride)  # the subgrid of x[::s, ::s]
        assert rows * cols >= 128 * 256 or stride == 1


def test_compose_flows_equals_product_homography():
    rng = np.random.default_rng(4)
    h, w = 64, 96
    H12, H23 = _rand_h(rng, h, w, 6), _rand_h(rng, h, w, 6)
    f12 = G.homography_to_flow(H12, h, w)
    f23 = G.homography_to_flow(H23, h, w)
    f13 = np.asarray(G.compose_flows(f12, f23))
    ref = np.asarray(G.homography_to_flow(H23 @ H12, h, w))
    inside = np.asarray(G.warp_validity(f12))[..., 0] > 0
    assert inside.mean() > 0.6
    # bilinear interpolation of a smooth field: sub-0.01 px error
    assert np.abs(f13 - ref)[inside].max() < 1e-2


def _remap_per_channel(img, mx, my, border):
    # OpenCV's remap is exact per channel; its 2-channel float path was seen to deviate.
    return np.stack([cv2.remap(img[..., c], mx, my, cv2.INTER_LINEAR, borderMode=border)
                     for c in range(img.shape[-1])], -1)


def _align_corners_resize_np(x, h, w):
    hi, wi = x.shape[:2]
    ys = np.linspace(0, hi - 1, h, dtype=np.float32)
    xs = np.linspace(0, wi - 1, w, dtype=np.float32)
    mx, my = np.meshgrid(xs, ys)
    return _remap_per_channel(x.astype(np.float32), mx, my, cv2.BORDER_REPLICATE)


def test_resize_flow_align_corners_and_scaling():
    rng = np.random.default_rng(5)
    flow = rng.normal(size=(12, 20, 2)).astype(np.float32)
    out = np.asarray(G.resize_flow(jnp.asarray(flow), 30, 50))
    ref = _align_corners_resize_np(flow, 30, 50) * np.array([50 / 20, 30 / 12], np.float32)
    np.testing.assert_allclose(out, ref, atol=1e-4)
    const = np.asarray(G.resize_flow(jnp.full((8, 16, 2), jnp.array([3.0, 2.0])), 16, 64))
    np.testing.assert_allclose(const, np.broadcast_to([12.0, 4.0], (16, 64, 2)), atol=1e-5)


@pytest.mark.parametrize("src,dst", [((30, 40), (60, 80)), ((30, 40), (45, 70)), ((100, 100), (37, 61)),
                                     ((360, 480), (128, 256)), ((1, 5), (3, 9)), ((7, 1), (3, 1)), ((9, 12), (1, 1))])
def test_resize_image_matches_cv2_linear(src, dst):
    # OpenCV's INTER_LINEAR (half-pixel centres, no antialiasing), enlarging and shrinking by
    # non-integer factors, to and from one pixel; within float32 rounding of 0..255 values
    # (jax.image.resize's normalized weight matrices were up to 1.4e-3 off at 100 -> 37x61)
    rng = np.random.default_rng(6)
    img = rng.uniform(0, 255, src + (3,)).astype(np.float32)
    h, w = dst
    out = np.asarray(G.resize_image(jnp.asarray(img), h, w))
    ref = cv2.resize(img, (w, h), interpolation=cv2.INTER_LINEAR).reshape(h, w, 3)
    np.testing.assert_allclose(out, ref, atol=2e-4)
    batched = np.asarray(jax.jit(lambda x: G.resize_image(x, h, w))(jnp.asarray(np.stack([img, img[::-1]]))))
    np.testing.assert_allclose(batched[1], cv2.resize(img[::-1].copy(), (w, h), interpolation=cv2.INTER_LINEAR)
                               .reshape(h, w, 3), atol=2e-4)


def test_channel_mean_is_the_mean_and_the_host_grey():
    from camflow_jax.geometry import host

    rng = np.random.default_rng(9)
    for c in (1, 2, 3, 5):
        x = rng.uniform(-300, 300, (2, 13, 17, c)).astype(np.float32)
        out = np.asarray(jax.jit(G.channel_mean)(jnp.asarray(x)))
        assert out.shape == (2, 13, 17, 1)
        np.testing.assert_allclose(out[..., 0], x.astype(np.float64).mean(-1), rtol=0, atol=1e-4)
    # three channels: the host's grey image (the refinement's host and device halves), to the
    # rounding of XLA's division by a constant (a multiplication by its reciprocal)
    img = rng.uniform(0, 255, (11, 14, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(G.channel_mean(jnp.asarray(img)))[..., 0], host.gray(img),
                               rtol=2e-7, atol=0)


@pytest.mark.parametrize("lib", ["device", "host"])
def test_intrinsics_follow_resize_and_crop(lib):
    # The JAX updates (jitted inference) and their numpy twins (the input pipeline's workers,
    # which must not use JAX) against the same closed forms.
    from camflow_jax.geometry import host

    geo = G if lib == "device" else host
    K = np.array([500.0, 480.0, 300.0, 200.0])
    X = np.array([0.3, -0.2, 2.0])
    u, v = K[0] * X[0] / X[2] + K[2], K[1] * X[1] / X[2] + K[3]
    K2 = np.asarray(geo.resize_intrinsics(K, (400, 600), (200, 300)))
    # same 3D point, half-pixel-centre resize: x' = (x + 0.5) s - 0.5
    np.testing.assert_allclose([K2[0] * X[0] / X[2] + K2[2], K2[1] * X[1] / X[2] + K2[3]],
                               [(u + 0.5) * 0.5 - 0.5, (v + 0.5) * 0.5 - 0.5], atol=1e-4)
    K3 = np.asarray(geo.crop_intrinsics(K, 10, 20))
    np.testing.assert_allclose([K3[0] * X[0] / X[2] + K3[2], K3[1] * X[1] / X[2] + K3[3]], [u - 20, v - 10], atol=1e-4)
    assert K2.dtype == K3.dtype == np.float32
    batch = np.stack([K, K * 2])  # [..., 4]: row by row
    np.testing.assert_allclose(np.asarray(geo.resize_intrinsics(batch, (400, 600), (200, 300)))[0], K2)
    np.testing.assert_allclose(np.asarray(geo.crop_intrinsics(batch, 10, 20))[0], K3)


@pytest.mark.parametrize("hw", [(40, 300), (200, 72), (7, 9)])
@pytest.mark.parametrize("sigma", [1.0, 4.0])
def test_gaussian_blur_matches_opencv_replicate(hw, sigma):
    # Long axes take the shifted-sum path, short ones the matrix product (G.GAUSSIAN_MATRIX_TAPS:
    # at sigma 4, 40 and 72 pixels are short, 200 and 300 long); (7, 9) is shorter than the
    # radius at sigma 4. OpenCV with the same radius is the oracle.
    img = np.random.default_rng(3).uniform(0, 255, hw).astype(np.float32)
    r = int(np.ceil(3 * sigma))
    want = cv2.GaussianBlur(img, (2 * r + 1, 2 * r + 1), sigma, borderType=cv2.BORDER_REPLICATE)
    got = np.asarray(jax.jit(lambda x: G.gaussian_blur(x, sigma))(jnp.asarray(img)))
    np.testing.assert_allclose(got, want, atol=2e-3)
    batched = np.asarray(G.gaussian_blur(jnp.stack([jnp.asarray(img), 2 * jnp.asarray(img)]), sigma))
    np.testing.assert_allclose(batched[1], 2 * got, rtol=1e-5, atol=2e-3)
