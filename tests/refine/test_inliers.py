"""Inlier shares and the dominant motion (camflow_jax.refine.inliers). Oracles: pairs made of two
regions moved by known integer translations (numpy slicing, no interpolation), whose areas are
the shares each motion must explain, and a pair warped by OpenCV with a known homography."""

import cv2
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax import refine

H, W = 192, 320
SPLIT = 192  # columns 0..191 (60 % of the frame) move by T_A; the rest, an "object", by T_B
T_A, T_B = (2, 1), (-2, 0)  # (tx, ty): image-1 content at p appears at p + t in image 2


def _texture(rng, contrast):
    t = cv2.GaussianBlur(rng.integers(0, 256, (H + 8, W + 8)).astype(np.float32), (0, 0), 1.5)
    return np.clip((t - t.mean()) * 4 * contrast + 128, 0, 255)


def _shifted(tex, t):
    """Image 2 of a texture whose image 1 is ``tex[4:4+H, 4:4+W]``, moved by ``t`` (integers)."""
    tx, ty = t
    return tex[4 - ty:4 - ty + H, 4 - tx:4 - tx + W]


def _two_region_pair(seed=0):
    """Image 1: a low-contrast background (60 % of the frame, left) and a high-contrast object
    (right); image 2: the background moved by T_A, the object by T_B."""
    rng = np.random.default_rng(seed)
    bg, obj = _texture(rng, 0.3), _texture(rng, 1.0)
    img1 = np.concatenate([bg[4:4 + H, 4:4 + SPLIT], obj[4:4 + H, 4 + SPLIT:4 + W]], axis=1)
    img2 = np.concatenate([_shifted(bg, T_A)[:, :SPLIT], _shifted(obj, T_B)[:, SPLIT:]], axis=1)
    return img1.astype(np.uint8), img2.astype(np.uint8)


def _translation(t):
    return np.array([[1.0, 0, t[0]], [0, 1, t[1]], [0, 0, 1]])


def _flow(t):
    return jnp.broadcast_to(jnp.asarray(t, jnp.float32), (H, W, 2))


def test_each_motion_explains_its_own_region():
    """On the common scale (the best candidate's: its median residual sets the Cauchy width), the
    background's translation explains the most pixels, the object's fewer, in proportion to
    their areas (60 % and 40 %) more than to their contrast (the object's is 3.3x); no motion
    explains almost none of a textured pair."""
    img1, img2 = _two_region_pair()
    shares = np.asarray(refine.inlier_shares(img1, img2, jnp.stack([_flow(T_A), _flow(T_B), _flow((0, 0))])))
    assert shares[0] > shares[1] + 0.1
    assert 0.4 < shares[1] / shares[0] < 0.9  # the areas' ratio is 0.67
    assert shares[2] < 0.05


def test_an_identical_pair_is_explained_everywhere():
    """Zero residuals everywhere (the scale at its floor ``sigma_min``): the share is 1; a one
    pixel shift of the motion explains almost nothing of a textured image."""
    img = _texture(np.random.default_rng(3), 1.0)[4:4 + H, 4:4 + W].astype(np.uint8)
    shares = np.asarray(refine.inlier_shares(img, img, jnp.stack([_flow((0, 0)), _flow((1, 0))])))
    assert shares[0] > 0.999 and shares[1] < 0.05


def test_dominant_homography_takes_the_larger_area_at_the_working_size():
    """The background (60 %, low contrast) over the object (40 %, high contrast), the object
    listed first; the pair is 320 px wide, so it is judged at 288 (the homographies conjugated
    to that size). Swapping the regions' motions swaps the answer."""
    img1, img2 = _two_region_pair(1)
    k, shares = refine.dominant_homography(img1, img2, [_translation(T_B), _translation(T_A)])
    assert k == 1 and shares[1] > shares[0] + 0.1
    k, _ = refine.dominant_homography(img2[:, ::-1], img1[:, ::-1], [np.eye(3), _translation((2, -1)),
                                                                     _translation((-2, 0))])
    assert k == 1  # mirrored and reversed: the background moves by (2, -1)


def test_a_warped_pair_is_explained_by_its_homography():
    """Image 2 is image 1 warped by a rotation and zoom (OpenCV, cubic): judged at the working
    size (288 of 320 px), the exact homography explains about twice as many pixels as the same
    motion a quarter pixel off in any direction (a homography conjugated wrongly, e.g. its
    translation left unscaled, is 0.3 px off and loses). On the common scale about half of a
    perfect candidate's pixels count: its residuals are interpolation noise, and its median
    residual sets the width."""
    rng = np.random.default_rng(2)
    img1 = _texture(rng, 1.0)[4:4 + H, 4:4 + W].astype(np.uint8)
    c, s = 1.01 * np.cos(0.01), 1.01 * np.sin(0.01)
    Hm = np.array([[c, -s, 3.0], [s, c, -2.0], [0, 0, 1]])
    img2 = cv2.warpPerspective(img1, Hm, (W, H), flags=cv2.INTER_CUBIC)
    off = [_translation(t) @ Hm for t in ((0.25, 0), (-0.25, 0), (0, 0.25), (0, -0.25))]
    k, shares = refine.dominant_homography(img1, img2, [*off[:2], Hm, *off[2:]])
    assert k == 2 and shares[2] > 1.5 * np.delete(shares, 2).max()


def test_bad_arguments_are_named():
    img = np.zeros((H, W), np.uint8)
    with pytest.raises(ValueError, match="finite"):
        refine.dominant_homography(img, img, [])
    with pytest.raises(ValueError, match="finite"):
        refine.dominant_homography(img, img, [np.full((3, 3), np.nan)])
    with pytest.raises(ValueError, match="one size"):
        refine.dominant_homography(img, img[:, :100], [np.eye(3)])
    with pytest.raises(ValueError, match="flows"):
        refine.inlier_shares(img, img, jnp.zeros((1, H, 10, 2)))


def test_inlier_weights_are_cauchy_weights_high_on_the_region_a_motion_explains():
    """Per pixel, on the two-region pair: the background's translation weighs its own region (60 %
    of the frame, left) at least twice as much as the object's, and the object's the reverse;
    an identical pair has a residual of 0, so weight 1 exactly, except where the flow moves a
    pixel out of image 2, where it is 0: the library's bilinear rule (``0 <= x < W - 1``, the same
    for y) leaves out the last row, and the last column, or the last three under a 2 px shift right."""
    img1, img2 = _two_region_pair()
    wts = np.asarray(refine.inlier_weights(img1, img2, jnp.stack([_flow(T_A), _flow(T_B)])))
    assert wts.shape == (2, H, W) and wts.min() >= 0 and wts.max() <= 1
    inner = np.s_[4:-4, 4:-4]  # away from the frame's edges
    left, right = wts[:, inner[0], 4:SPLIT - 4], wts[:, inner[0], SPLIT + 4:-4]
    assert left[0].mean() > 2 * right[0].mean() and right[1].mean() > 2 * left[1].mean()
    img = _texture(np.random.default_rng(3), 1.0)[4:4 + H, 4:4 + W].astype(np.uint8)
    same = np.asarray(refine.inlier_weights(img, img, jnp.stack([_flow((0, 0)), _flow((2, 0))])))
    assert np.all(same[0][:-1, :-1] == 1.0) and np.all(same[0][-1] == 0) and np.all(same[0][:, -1] == 0)
    assert np.all(same[1][:, -3:] == 0.0) and np.all(same[1][-1] == 0) and same[1][:-1, :-3].min() > 0


def test_homography_weights_at_the_working_size():
    """One homography's weights at the refinement's working size (288 x 173 for 320 x 192): the
    background's translation weighs the background's columns (scaled by 288 / 320) over twice
    the object's."""
    img1, img2 = _two_region_pair(1)
    wts = refine.homography_weights(img1, img2, _translation(T_A))
    hs, ws = refine.shrunk_size(H, W, refine.RefineConfig().max_size)
    assert wts.shape == (hs, ws) and wts.dtype == np.float32
    split = int(SPLIT * ws / W)
    assert wts[4:-4, 4:split - 4].mean() > 2 * wts[4:-4, split + 4:-4].mean()


def _warped_pair(seed=2):
    """A textured image and its OpenCV warp (cubic) by a rotation, zoom and shift; the warp's
    exact flow on image 1's grid."""
    rng = np.random.default_rng(seed)
    img1 = _texture(rng, 1.0)[4:4 + H, 4:4 + W].astype(np.uint8)
    c, s = 1.01 * np.cos(0.01), 1.01 * np.sin(0.01)
    Hm = np.array([[c, -s, 3.0], [s, c, -2.0], [0, 0, 1]])
    img2 = cv2.warpPerspective(img1, Hm, (W, H), flags=cv2.INTER_CUBIC)
    ys, xs = np.mgrid[0:H, 0:W].astype(np.float64)
    p = Hm @ np.stack([xs.ravel(), ys.ravel(), np.ones(H * W)])
    exact = np.stack([p[0] / p[2] - xs.ravel(), p[1] / p[2] - ys.ravel()], -1).reshape(H, W, 2)
    return img1, img2, exact.astype(np.float32)


def test_robust_costs_tell_apart_estimates_a_few_hundredths_of_a_pixel_apart():
    """On the OpenCV-warped pair, the exact flow costs the least, and the cost grows with the
    offset: 0.03, 0.1 and 0.3 px off in x (the inlier share, a count at the Cauchy width, needs
    about a quarter pixel). ``judge_flows`` judges a 320 px wide pair at the working size 288,
    the flows resized with it: the same order, and the inlier shares it gives beside the costs
    are :func:`inlier_shares` of the pair and flows shrunk by OpenCV (area). An identical pair
    with no motion costs 0."""
    img1, img2, exact = _warped_pair()
    flows = np.stack([exact + [dx, 0.0] for dx in (0.3, 0.1, 0.0, 0.03)]).astype(np.float32)
    costs = np.asarray(refine.robust_costs(img1, img2, jnp.asarray(flows)))
    assert np.argmin(costs) == 2 and costs[3] < costs[1] < costs[0]
    at_working, shares = refine.judge_flows(img1, img2, flows)
    assert at_working.dtype == np.float64 and np.argmin(at_working) == 2
    assert at_working[3] < at_working[1] < at_working[0]
    hs, ws = 173, 288  # 192 x 320 shrunk to 288 on the longer side
    small = [cv2.resize(x.astype(np.float32), (ws, hs), interpolation=cv2.INTER_AREA) for x in (img1, img2)]
    shrunk = np.stack([cv2.resize(f, (ws, hs), interpolation=cv2.INTER_AREA) * [ws / W, hs / H] for f in flows])
    np.testing.assert_allclose(shares, refine.inlier_shares(*small, jnp.asarray(shrunk, jnp.float32)), atol=2e-3)
    same = np.asarray(refine.robust_costs(img1, img1, jnp.zeros((1, H, W, 2))))
    assert same[0] == 0.0


def test_robust_costs_are_the_cauchy_costs_of_the_inlier_weights():
    """Per pixel the Cauchy cost is ``c^2 / 2 log(1 + z)`` and its weight ``1 / (1 + z)``, with
    ``z = (r / c)^2``: so over the common pixels, ``cost_j / cost_k = mean(-log w_j) / mean(-log
    w_k)`` for any two candidates, whatever the common width c (numpy on the weights)."""
    img1, img2 = _two_region_pair()
    flows = jnp.stack([_flow(T_A), _flow(T_B), _flow((0, 0))])
    costs = np.asarray(refine.robust_costs(img1, img2, flows), np.float64)
    wts = np.asarray(refine.inlier_weights(img1, img2, flows), np.float64).reshape(3, -1)
    common = np.all(wts > 0, axis=0)  # every candidate keeps the pixel inside image 2 (weight > 0)
    neg_log = -np.log(wts[:, common]).mean(axis=1)
    np.testing.assert_allclose(costs / costs[0], neg_log / neg_log[0], rtol=1e-4)


def test_judge_flows_refuses_bad_flows():
    img = np.zeros((H, W), np.uint8)
    with pytest.raises(ValueError, match="K >= 1"):
        refine.judge_flows(img, img, np.zeros((0, H, W, 2)))
    with pytest.raises(ValueError, match="finite"):
        refine.judge_flows(img, img, np.full((1, H, W, 2), np.nan))
    with pytest.raises(ValueError, match="one size"):
        refine.judge_flows(img, img[:, :100], np.zeros((1, H, W, 2)))
