"""Photometric refinement in the basis span (camflow_jax.refine), against independent oracles:
homographies applied by OpenCV, cv2.findTransformECC, integer shifts (exact by slicing), finite
differences, and the synthetic renderer's geometric ground truth."""

from __future__ import annotations

import functools

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fixtures_benchmarks as fx
from camflow_jax import bases
from camflow_jax import refine as R
from camflow_jax.geometry import device
from camflow_jax.refine import pyramid as refine_pyramid
from camflow_jax.refine import solver as refine_solver

H, W = 96, 160
CFG = R.RefineConfig(levels=2, iterations=(20, 10), strides=(1, 1), active=(12, 0), max_size=W)
HB = np.asarray(bases.homography_bases(H, W))  # [12, H, W, 2]


@functools.lru_cache(maxsize=None)
def _jitted(cfg):
    return jax.jit(lambda a, b, B, s: R.refine_motion(a, b, B, s, cfg))


def refine(img1, img2, basis, starts, cfg=CFG):
    out = _jitted(cfg)(jnp.asarray(img1, jnp.float32), jnp.asarray(img2, jnp.float32),
                       jnp.asarray(basis, jnp.float32), jnp.asarray(starts, jnp.float32))
    return {k: np.asarray(v) for k, v in out.items()}


def interior_epe(flow, gt, margin=8):
    e = np.linalg.norm(np.asarray(flow, np.float64) - gt, axis=-1)
    return float(e[margin:-margin, margin:-margin].mean())


def smooth_texture(rng, h=H, w=W):
    """Smooth random texture: bilinear samples of it are close to the continuous image."""
    small = rng.uniform(0, 255, (h // 6, w // 6)).astype(np.float32)
    return cv2.GaussianBlur(cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC), (0, 0), 1.5)


def shifted_pair(rng, dx, dy):
    """(img1, img2) with img2(x) = img1(x - (dx, dy)) exactly (integer shift by slicing), so
    warp(img2, (dx, dy)) = img1 wherever both are defined."""
    big = smooth_texture(rng, H + 2 * abs(dy) + 2, W + 2 * abs(dx) + 2)
    y0, x0 = abs(dy) + 1, abs(dx) + 1
    img1 = big[y0:y0 + H, x0:x0 + W]
    img2 = big[y0 - dy:y0 - dy + H, x0 - dx:x0 - dx + W]
    return img1, img2


def translation_coeffs(dx, dy):
    """Coefficients of a constant flow (dx, dy) in the homography bases (least squares: exact,
    the span holds translations)."""
    flow = np.broadcast_to(np.float32([dx, dy]), (H, W, 2))
    return np.asarray(bases.least_squares_coeffs(jnp.asarray(flow), jnp.asarray(HB)))


def test_exact_homography_pair_matches_truth_and_opencv_ecc():
    rng = np.random.default_rng(0)
    img1, img2, Ht = fx.make_pair(rng, H, W, jitter=4.0)
    truth = fx.homography_flow(Ht, H, W)
    out = refine(img1, img2, HB, np.zeros((1, 12)))  # from zero motion
    assert out["improved"] and out["cost_after"] < out["cost_before"]
    Hr = np.asarray(device.fit_homography(jnp.asarray(out["flow"])), np.float64)
    assert interior_epe(fx.homography_flow(Hr, H, W), truth) < 0.1
    # OpenCV's direct alignment of the same pair agrees.
    g1 = cv2.cvtColor(img1, cv2.COLOR_RGB2GRAY).astype(np.float32)
    g2 = cv2.cvtColor(img2, cv2.COLOR_RGB2GRAY).astype(np.float32)
    _, He = cv2.findTransformECC(g1, g2, np.eye(3, dtype=np.float32), cv2.MOTION_HOMOGRAPHY,
                                 (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 200, 1e-7), None, 5)
    assert interior_epe(fx.homography_flow(Hr, H, W), fx.homography_flow(He, H, W)) < 0.1


def test_exact_solution_is_a_fixed_point_and_gain_bias_do_not_move_it():
    rng = np.random.default_rng(1)
    img1, img2 = shifted_pair(rng, 3, -2)
    c = translation_coeffs(3, -2)
    truth = np.broadcast_to(np.float32([3, -2]), (H, W, 2))
    out = refine(img1, img2, HB, c[None])
    assert interior_epe(out["flow"], truth) < 1e-2
    # A gain and a bias on image 2 (a brightness / contrast change) leave the answer in place.
    out2 = refine(img1, 1.3 * img2 + 20.0, HB, c[None])
    assert interior_epe(out2["flow"], truth) < 2e-2
    # And from a start 2 px off, both converge to it.
    c_off = translation_coeffs(1.5, -0.5)
    assert interior_epe(refine(img1, 0.8 * img2 - 10.0, HB, c_off[None])["flow"], truth) < 0.05


def test_moving_patch_gets_low_weight_and_does_not_move_the_solution():
    rng = np.random.default_rng(2)
    img1, img2 = shifted_pair(rng, -4, 2)
    img2 = img2.copy()
    # An independently moving textured object covering 6 % of the frame.
    img2[20:50, 40:70] = smooth_texture(np.random.default_rng(9), 30, 30) * 0.5 + 100
    truth = np.broadcast_to(np.float32([-4, 2]), (H, W, 2))
    out = refine(img1, img2, HB, translation_coeffs(-2, 1)[None])
    assert interior_epe(out["flow"], truth) < 0.1
    w = out["weights"]
    assert w.shape == (H, W) and 0.0 <= w.min() and w.max() <= 1.0
    patch = w[22 - 2:48 - 2, 44 + 4:66 + 4].mean()  # the patch seen from image 1's grid
    assert patch < 0.3 < w[60:90, 100:150].mean()


def test_parallax_pairs_with_depth_bases_recover_the_rendered_flow():
    """Rendered scenes (camera translation + rotation over planes at several depths, moving
    objects, occlusions): the depth-translational bases hold their static flow, so perturbed
    starts refine to the truth on the valid pixels: within 0.5 px on average over three pairs
    at this small size (occlusion boundaries bias the photometric optimum by a few tenths of a
    pixel here), and always well below the start's error."""
    from camflow_jax.data.synthetic.scenes import SyntheticScenes

    ds = SyntheticScenes(seed=3, num_samples=3, height=H, width=W, categories=("RE",))
    errs = []
    for i in range(3):
        p = ds[i]
        valid = (np.asarray(p["valid_f"]).reshape(H, W) > 0)
        B = np.asarray(bases.hybrid_bases(H, W, np.asarray(p["depth1"], np.float32), np.asarray(p["K"], np.float32)))
        truth = np.asarray(p["flow_f"], np.float32)
        c_true = np.asarray(R.project_flow(jnp.where(valid[..., None], truth, np.nan), jnp.asarray(B)))
        span = np.tensordot(c_true, B, axes=1)
        assert np.linalg.norm(span - truth, axis=-1)[valid].mean() < 0.1  # the span holds the scene
        c0 = c_true + np.random.default_rng(3).normal(0, 0.8, c_true.shape) * (np.abs(c_true).max() / 10)
        start_err = np.linalg.norm(np.tensordot(c0, B, axes=1) - truth, axis=-1)[valid].mean()
        out = refine(p["img1"], p["img2"], B, c0[None])
        errs.append(np.linalg.norm(out["flow"] - truth, axis=-1)[valid].mean())
        assert start_err > 1.0 and errs[-1] < start_err / 2
    assert np.mean(errs) < 0.5


def test_jacobian_matches_finite_differences():
    rng = np.random.default_rng(4)
    img1, img2 = shifted_pair(rng, 2, 1)
    one = CFG.replace(levels=1, iterations=(1,), strides=(1,), active=(0,))
    stack1, stack2 = R.image_pyramid(jnp.asarray(img1), one)[0], R.image_pyramid(jnp.asarray(img2), one)[0]
    data = refine_pyramid.level_data(stack1[..., 0], stack2, *R.basis_pyramid(HB, one).levels[0], 1)
    c = jnp.asarray(translation_coeffs(1.6, 0.7) + 0.05 * rng.normal(size=12))
    r, grad, inside = R.residual(*data, c)
    J = np.asarray(R.jacobian(grad, data[3], data[4]))  # [N, P]
    eps = 1e-2
    inner = np.zeros((H, W), bool)
    inner[10:-10, 10:-10] = True
    inner = inner.reshape(-1) & np.asarray(inside)
    for k in (0, 1, 4, 11):
        e = np.zeros(12, np.float32)
        e[k] = eps
        fd = (np.asarray(R.residual(*data, c + e)[0]) - np.asarray(R.residual(*data, c - e)[0])) / (2 * eps)
        # Bilinear sampling makes r piecewise linear while J uses central-difference image
        # gradients: they agree to within ~15 % pixel by pixel and are nearly collinear.
        assert np.abs(fd - J[k])[inner].mean() < 0.15 * np.abs(fd)[inner].mean(), k
        assert np.corrcoef(fd[inner], J[k][inner])[0, 1] > 0.98, k


def test_textureless_pair_returns_the_start_and_never_nan():
    flat = np.full((H, W), 90.0, np.float32)
    c = translation_coeffs(1.0, 0.0)
    out = refine(flat, flat, HB, c[None])
    assert not out["improved"] and np.allclose(out["coeffs"], c)
    assert np.all(np.isfinite(out["flow"])) and np.all(np.isfinite(out["weights"]))
    nan_start = np.full((1, 12), np.nan, np.float32)
    out = refine(flat, flat, HB, nan_start)
    assert np.all(np.isfinite(out["coeffs"])) and np.all(np.isfinite(out["flow"]))


def test_refine_pair_runs_both_directions():
    rng = np.random.default_rng(5)
    img1, img2 = shifted_pair(rng, 2, -1)
    cf, cb = translation_coeffs(1, 0)[None], translation_coeffs(-1, 0)[None]
    out = jax.jit(lambda a, b: R.refine_pair(a, b, jnp.asarray(HB), jnp.asarray(HB), cf, cb, CFG))(img1, img2)
    flows = np.asarray(out["flow"])
    assert flows.shape == (2, H, W, 2)
    assert interior_epe(flows[0], np.float32([2, -1])) < 0.05
    assert interior_epe(flows[1], np.float32([-2, 1])) < 0.05


@pytest.mark.parametrize("select_after", [None, 0])
def test_a_second_start_wins_when_the_first_is_in_the_wrong_basin(select_after):
    # the true motion is a shift of (2, -1); the reference start is 17 px off (beyond the
    # 2-level pyramid's reach: alone it ends far off), zero motion is close: the zero start
    # must win, chosen by the final cost or already at the coarsest level, and give the shift
    rng = np.random.default_rng(9)
    img1, img2 = shifted_pair(rng, 2, -1)
    starts = np.stack([translation_coeffs(-12, 8), np.zeros(12, np.float32)])
    if select_after is None:
        alone = refine(img1, img2, HB, starts[:1])
        assert interior_epe(alone["flow"], np.float32([2, -1])) > 5
    out = refine(img1, img2, HB, starts, CFG.replace(starts=("network", "zero"), select_after=select_after))
    assert int(out["start"]) == 1 and bool(out["improved"])
    assert interior_epe(out["flow"], np.float32([2, -1])) < 0.05
    assert out["iterations"].shape == (2,)
    costs = np.asarray(out["start_costs"])
    if select_after is None:
        # each start's final cost, on one scale: the first start's equals its cost when run
        # alone (same result, same scale), and the winner's is the reported cost_after
        assert costs.shape == (2,) and costs[1] < costs[0]
        np.testing.assert_allclose(costs[0], float(alone["cost_after"]), rtol=1e-5)
        np.testing.assert_allclose(costs[1], float(out["cost_after"]), rtol=1e-6)
    else:
        assert costs.shape == (1,)  # only the start chosen at the coarsest level went on


def test_an_unrolled_loop_gives_the_while_loops_results_in_a_batch():
    """RefineConfig.loop="unrolled" (the whole iteration budget as straight-line code, finished
    pairs frozen) against the while loop, vmapped over rendered pairs that converge after
    different numbers of iterations: the same iterations, coefficients and costs, and flows
    within 0.5 px of the renderer's on average."""
    from camflow_jax.data.synthetic.scenes import SyntheticScenes

    ds = SyntheticScenes(seed=3, num_samples=3, height=H, width=W, categories=("RE",))
    pairs = [ds[i] for i in range(3)]
    B = np.stack([np.asarray(bases.hybrid_bases(H, W, np.asarray(p["depth1"], np.float32),
                                                np.asarray(p["K"], np.float32))) for p in pairs])
    img1 = np.stack([p["img1"] for p in pairs]).astype(np.float32)
    img2 = np.stack([p["img2"] for p in pairs]).astype(np.float32)
    # starts: the true coefficients perturbed (as in the test above)
    starts = []
    for p, b in zip(pairs, B):
        valid = np.asarray(p["valid_f"]).reshape(H, W) > 0
        c = np.asarray(R.project_flow(jnp.where(valid[..., None], p["flow_f"], np.nan), jnp.asarray(b)))
        starts.append(c + np.random.default_rng(3).normal(0, 0.8, c.shape) * (np.abs(c).max() / 10))
    starts = np.asarray(starts, np.float32)[:, None]
    cfg = CFG
    runs = {}
    for loop in R.LOOPS:
        f = jax.jit(jax.vmap(lambda a, b, bb, s, c=cfg.replace(loop=loop): R.refine_motion(a, b, bb, s, c)))
        runs[loop] = {k: np.asarray(v) for k, v in f(img1, img2, B, starts).items()}
    w, u = runs["while"], runs["unrolled"]
    assert np.array_equal(w["iterations"], u["iterations"])
    assert len({tuple(i) for i in w["iterations"]}) > 1  # the pairs stopped at different iterations
    np.testing.assert_allclose(u["coeffs"], w["coeffs"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(u["cost_after"], w["cost_after"], rtol=1e-4)
    errs = [np.linalg.norm(u["flow"][i] - p["flow_f"], axis=-1)[np.asarray(p["valid_f"]).reshape(H, W) > 0].mean()
            for i, p in enumerate(pairs)]
    assert np.mean(errs) < 0.5, errs


def test_config_is_checked():
    with pytest.raises(ValueError, match="loop must be one of while, unrolled"):
        R.RefineConfig(loop="for")
    with pytest.raises(ValueError, match="iterations"):
        R.RefineConfig(levels=2, iterations=(1, 2, 3))
    with pytest.raises(ValueError, match="starts"):
        R.RefineConfig(starts=("sift",))
    with pytest.raises(ValueError, match="unknown refinement setting"):
        R.RefineConfig().replace(level=2)
    with pytest.raises(ValueError, match="select_after"):
        R.RefineConfig(select_after=3)
    with pytest.raises(ValueError, match="noise_ratio"):
        R.RefineConfig(noise_ratio=0.0)
    with pytest.raises(ValueError, match="noise_presmooth"):
        R.RefineConfig(noise_presmooth=float("nan"))
    with pytest.raises(ValueError, match="unknown basis group 'depht0'"):
        R.RefineConfig(active=("homography > homography+depht0", "all", "all"))
    with pytest.raises(ValueError, match="count must be >= 0"):
        R.RefineConfig(active=(-1, 0, 0))
    with pytest.raises(ValueError, match="an entry is"):
        R.RefineConfig(active=(1.5, 0, 0))
    for bad in (dict(detail_size=8), dict(detail_stride=0), dict(detail_iterations=-1), dict(detail_size=True)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            R.RefineConfig(**bad)
    assert hash(R.RefineConfig()) == hash(R.RefineConfig())  # a static jit argument


def test_active_stages_name_basis_groups():
    plus = (("homography", 12), ("stochastic", 12), ("depth", 12))
    H12, S12, D0, D1 = tuple(range(12)), tuple(range(12, 24)), (24, 25, 26), (27, 28, 29)
    assert R.active_stages("homography > homography+depth0", plus) == (H12, H12 + D0)
    assert R.active_stages("homography+depth0+depth1", plus) == (H12 + D0 + D1,)
    assert R.active_stages("depth1 + stochastic", plus) == (S12 + D1,)
    assert R.active_stages("all", plus) == R.active_stages(0, plus) == (tuple(range(36)),)
    assert R.active_stages(8, plus) == (tuple(range(8)),)
    assert R.active_stages("depth", plus) == (tuple(range(24, 36)),)
    camflow = (("homography", 12), ("stochastic", 12))  # no depth group: its names are skipped
    assert R.active_stages("homography > homography+depth0", camflow) == (H12,)  # one stage, not two
    assert R.active_stages("depth0", camflow) == ()  # nothing to refine at that level
    assert R.default_groups(36) == plus and R.default_groups(24) == camflow
    assert R.default_groups(12) == (("homography", 12),)


def test_a_stage_moves_only_its_groups():
    """An integer shift (exact by slicing) with 12 homography + 3 extra smooth bases: refining
    the homography group alone recovers the shift with the extra coefficients held exactly at
    their start; "homography > depth" runs the homography, then the extra bases, whose
    iterations add up at that level."""
    rng = np.random.default_rng(11)
    img1, img2 = shifted_pair(rng, 2, -1)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    extra = np.stack([np.stack([np.sin(xx / 17.0), np.cos(yy / 13.0)], -1),
                      np.stack([np.cos(xx / 23.0) * 0.5, np.sin(yy / 11.0)], -1),
                      np.stack([np.sin((xx + yy) / 19.0), 0.3 * np.cos(xx / 29.0)], -1)])
    B = np.concatenate([HB, extra])
    groups = (("homography", 12), ("depth", 3))
    start = np.zeros((1, 15), np.float32)
    start[0, 12:] = (0.2, -0.1, 0.15)  # a wrong, fixed offset from the extra bases
    one = R.RefineConfig(levels=1, iterations=(30,), strides=(1,), active=("homography",), max_size=W,
                         noise_presmooth=None)
    out = jax.jit(lambda a, b, s: R.refine_motion(a, b, jnp.asarray(B), s, one, groups))(img1, img2, start)
    np.testing.assert_array_equal(np.asarray(out["coeffs"])[12:], start[0, 12:])  # held exactly
    flow_h = np.tensordot(np.asarray(out["coeffs"])[:12], HB, axes=1)
    fixed = np.tensordot(start[0, 12:], extra, axes=1)
    # the homography part absorbs the shift as well as the fixed offset lets it (least squares)
    want = np.asarray(bases.least_squares_coeffs(jnp.asarray(np.float32([2, -1]) - fixed), jnp.asarray(HB)))
    assert interior_epe(flow_h, np.tensordot(want, HB, axes=1)) < 0.1
    two = one.replace(active=("homography > depth",))
    out2 = jax.jit(lambda a, b, s: R.refine_motion(a, b, jnp.asarray(B), s, two, groups))(img1, img2, start)
    assert interior_epe(np.asarray(out2["flow"]), np.broadcast_to(np.float32([2, -1]), (H, W, 2))) < 0.1
    assert int(np.asarray(out2["iterations"])[0]) > int(np.asarray(out["iterations"])[0])  # both stages ran


def test_at_size_keeps_the_coarsest_level_and_the_samples_per_level():
    base = R.RefineConfig()
    assert R.RefineConfig.at_size(base.max_size) == base

    def count(sizes, strides):  # sampled pixels per level (sizes finest first)
        return [len(range(0, a, k)) * len(range(0, b, k)) for (a, b), k in zip(sizes[::-1], strides)]

    default_sizes = R.pyramid_sizes(162, 288, base.levels)  # a 9:16 input at the default size
    for size, levels in ((576, 4), (640, 4), (1152, 5)):
        cfg = R.RefineConfig.at_size(size, tol=0.01)
        assert (cfg.levels, cfg.max_size, cfg.tol) == (levels, size, 0.01)
        assert cfg.active == base.active + ("all",) * (levels - base.levels)
        sizes = R.pyramid_sizes(round(size * 9 / 16), size, cfg.levels)
        got = count(sizes, cfg.strides)
        assert all(abs(n - got[0]) <= 0.02 * got[0] for n in got), got  # the same at every level
        if size in (576, 1152):  # a power of two times 288: the default's coarse levels exactly
            assert sizes[-1] == default_sizes[-1]
            assert got[:base.levels] == count(default_sizes, base.strides)
        else:  # the number of levels is rounded: the coarsest grid within a factor sqrt(2)
            assert 72 / 2 ** 0.5 <= sizes[-1][1] <= 72 * 2 ** 0.5
    with pytest.raises(ValueError, match="max_size >= 288"):
        R.RefineConfig.at_size(100)


def test_fit_to_gives_a_small_pair_the_levels_it_allows():
    """RefineConfig.fit_to (what the Predictor's refiner applies to each pair; issue 63): a
    config set for a larger size is carried down as at_size builds it (the oracle: at_size of
    the pair's size, the rule --refine-size uses), then no level under MIN_COARSEST px; configs
    that fit are returned as they are; the result is idempotent and a valid config."""
    base = R.RefineConfig()
    assert base.fit_to(64) is base and base.fit_to(5000) is base  # 16 px coarsest: fits
    big = R.RefineConfig.at_size(4608)
    assert big.fit_to(4608) is big
    for longest, like in ((192, 288), (288, 288), (700, 700), (1200, 1152)):
        fit, want = big.fit_to(longest), R.RefineConfig.at_size(like)
        assert (fit.levels, fit.iterations, fit.strides, fit.active) == (want.levels, want.iterations, want.strides,
                                                                       want.active), longest
        assert fit.max_size == longest and fit.fit_to(longest) is fit  # refined at the pair's size; idempotent
    assert R.RefineConfig.at_size(1152).fit_to(64).levels == 3
    tiny = base.fit_to(24)  # 24 / 4 = 6 px < 8: two levels; the finest refines what the config's finest does
    assert (tiny.levels, tiny.iterations, tiny.strides, tiny.active) == (2, (8, 10), (1, 2), (base.active[0], "all"))
    assert base.fit_to(12).levels == 1 and base.fit_to(12).active == ("all",)
    five = R.RefineConfig(levels=5, iterations=(8, 10, 10, 10, 10), strides=(1,) * 5, active=("all",) * 5,
                          select_after=4, starts=("network", "zero"))
    assert (five.fit_to(64).levels, five.fit_to(64).select_after) == (4, 3)  # 64 / 8 = 8 px: four levels
    assert five.fit_to(128) is five


def test_levels_a_small_image_cannot_hold_are_refused_by_the_solver_in_one_line():
    """POOR (issue 63): levels halving an image below 2 px ended in JAX's "Shape of array too
    small to calculate a numerical gradient" (at_size(4608) on a 64 px pair, through the
    Predictor). The solver called directly refuses them naming the size and the levels; the
    Predictor refines with the levels the pair allows (below)."""
    cfg = R.RefineConfig.at_size(4608)
    img = np.zeros((12, 16), np.float32)
    message = ("refinement: a 16x12 image halved 6 times (RefineConfig levels=7) is 1x1 px at its coarsest level, "
               "under 2 px a side: give fewer levels (RefineConfig.fit_to(16) gives 2)")
    with pytest.raises(ValueError) as e:
        R.refine_motion(img, img, np.zeros((12, 12, 16, 2), np.float32), np.zeros((1, 12), np.float32), cfg)
    assert str(e.value) == message


def _block_std(g, block=8):
    """noise_ratio's denominator in numpy: the median standard deviation over 8x8 blocks."""
    h, w = (g.shape[0] // block) * block, (g.shape[1] // block) * block
    return np.median(np.float64(g[:h, :w]).reshape(h // block, block, w // block, block).std(axis=(1, 3)))


def test_noise_ratio_measures_the_noise_floor_not_the_texture():
    rng = np.random.default_rng(0)
    h, w = 160, 288
    clean = smooth_texture(rng, h, w)
    fine = cv2.GaussianBlur(rng.uniform(-40, 40, (h, w)).astype(np.float32), (0, 0), 0.7)
    clean[:, : w // 2] += fine[:, : w // 2]  # half the frame: strong texture at the finest scale
    assert float(R.noise_ratio(clean)) < 0.02  # texture is not noise
    for sigma in (1.0, 3.0, 6.0):  # white Gaussian noise of a known std
        noisy = clean + rng.normal(0, sigma, clean.shape).astype(np.float32)
        got = float(R.noise_ratio(noisy)) * _block_std(noisy)
        assert 0.7 * sigma < got < 0.9 * sigma, (sigma, got)  # a low percentile: ~0.79 sigma


def test_pair_pyramids_pre_blur_noisy_pairs_only():
    rng = np.random.default_rng(1)
    a, b = shifted_pair(rng, 2, 1)
    dark = [0.2 * x + rng.normal(0, 3.0, x.shape).astype(np.float32) for x in (a, b)]  # low light
    cfg = R.RefineConfig(levels=2, iterations=(1, 1), strides=(1, 1), active=(0, 0))
    pairs = jax.jit(R.pair_pyramids, static_argnums=2)
    finest = jax.jit(lambda g, c: R.image_pyramid(g, c)[-1], static_argnums=1)
    for (g1, g2), expect in (((a, b), False), ((dark[0], dark[1]), True), ((a, dark[1]), True)):  # either image
        ratios = [float(R.noise_ratio(g)) for g in (g1, g2)]
        assert (max(ratios) > cfg.noise_ratio) == expect, ratios
        assert g1 is not a or ratios[0] < cfg.noise_ratio, ratios  # the clean image alone is not noisy
        p1, p2, noisy = pairs(g1, g2, cfg)
        assert bool(noisy) == expect
        used = cfg.replace(presmooth=cfg.noise_presmooth if expect else cfg.presmooth)
        for got, g in ((p1, g1), (p2, g2)):
            np.testing.assert_allclose(np.asarray(got[-1]), np.asarray(finest(g, used)), atol=1e-5)
    p1, _, noisy = pairs(dark[0], dark[1], cfg.replace(noise_presmooth=None))
    assert not bool(noisy)
    np.testing.assert_allclose(np.asarray(p1[-1]), np.asarray(finest(dark[0], cfg)), atol=1e-5)
    _, _, noisy = pairs(dark[0][:9, :40], dark[1][:9, :40], cfg)  # too small to test: not noisy
    assert not bool(noisy)


# ----------------------------------------------------------------------------- the Predictor
@pytest.fixture(scope="module")
def shipped():
    from camflow_jax.predictor import Predictor

    return Predictor.from_pretrained()


def test_predictor_refines_by_default_and_keeps_the_network_result(shipped):
    from camflow_jax.data.synthetic.scenes import SyntheticScenes

    p = SyntheticScenes(seed=5, num_samples=1, height=H, width=W, categories=("RE",))[0]
    cam = dict(depth1=p["depth1"], depth2=p["depth2"], intrinsics=p["K"])
    out = shipped(p["img1"], p["img2"], **cam)
    net = shipped(p["img1"], p["img2"], refine=False, **cam)
    assert out["refined"] and not net["refined"] and "net_flow_f" not in net
    for key in ("flow_f", "flow_b", "homography", "coeffs_f", "coeffs_b"):
        np.testing.assert_allclose(out["net_" + key], net[key], rtol=1e-5, atol=1e-4)
    assert out["weights_f"].shape == (H, W) and out["weights_b"].shape == (H, W)
    info = out["refine_info"]
    assert info["start"] == ["network", "network"] and len(info["iterations"]) == 2
    assert np.allclose(info["start_costs"], np.asarray(info["cost_after"])[:, None])  # one start
    assert info["noisy"] is False and info["note"] == ""
    rng = np.random.default_rng(0)  # the same pair, dark and noisy: the noise test says so
    dark = [np.clip(0.2 * np.float32(p[k]) + rng.normal(0, 4, np.shape(p[k])), 0, 255).astype(np.uint8)
            for k in ("img1", "img2")]
    info_dark = shipped(dark[0], dark[1], **cam)["refine_info"]
    assert info_dark["noisy"] is True and "pre-blur" in info_dark["note"]
    valid = np.asarray(p["valid_f"]).reshape(H, W) > 0
    e = lambda f: np.linalg.norm(f - p["flow_f"], axis=-1)[valid].mean()  # noqa: E731
    assert e(out["flow_f"]) < 0.5 * e(net["flow_f"])
    # The homography is a fit of the refined flow (OpenCV's DLT on its correspondences agrees).
    ys, xs = np.mgrid[0:H:8, 0:W:8]
    src = np.stack([xs.ravel(), ys.ravel()], -1).astype(np.float32)
    dst = src + out["flow_f"][ys.ravel(), xs.ravel()]
    Hcv, _ = cv2.findHomography(src, dst, 0)
    assert interior_epe(fx.homography_flow(out["homography"], H, W), fx.homography_flow(Hcv, H, W)) < 0.3


@pytest.mark.slow  # compiles the refinement again for the turned size (about 25 s on 2 cores)
def test_predictor_refines_a_small_pair_with_the_levels_it_allows(shipped):
    """POOR (issue 63): RefineConfig.at_size(4608) on a 64x64 pair built 7 levels, the coarsest
    1 px, and ended in JAX's words; at_size(1152) (5 levels) fell back to the network silently
    (its finer levels sample every 8th and 16th pixel: 4 to 8 samples a row; EPE 1.57 px
    against the true homography, the network's 1.53). The refiner now uses the levels the pair
    allows (RefineConfig.fit_to), with a note. Oracle: the homography the pair was made with."""
    rng = np.random.default_rng(4)
    img1, img2, Ht = fx.make_pair(rng, 64, 64, jitter=6.0)
    truth = fx.homography_flow(Ht, 64, 64)
    out = shipped(img1, img2, refine=R.RefineConfig.at_size(4608))
    info = out["refine_info"]
    assert info["note"].startswith("a 64x64 pair is too small for the refinement's 7 pyramid levels (set for 4608 px; "
                                   "the coarsest would be 1 px): refined with 3, the settings of its coarsest ones"), info
    assert info["improved"] == [True, True] and [len(i) for i in info["iterations"]] == [3, 3]
    e = lambda f: float(np.linalg.norm(f - truth, axis=-1)[6:-6, 6:-6].mean())  # noqa: E731
    assert e(out["net_flow_f"]) > 1.0 and e(out["flow_f"]) < 0.1, (e(out["net_flow_f"]), e(out["flow_f"]))


def test_predictor_turned_pair_gives_the_turned_motion(shipped):
    """Portrait input: the same pair turned by 90 degrees gives the same refined motion, turned
    (the default tier checks the network's portrait path in test_estimate)."""
    from camflow_jax.data.synthetic.scenes import SyntheticScenes

    p = SyntheticScenes(seed=5, num_samples=1, height=H, width=W, categories=("RE",))[0]
    out = shipped(p["img1"], p["img2"], depth1=p["depth1"], depth2=p["depth2"], intrinsics=p["K"])
    rot = lambda a: np.ascontiguousarray(np.rot90(a, k=-1, axes=(0, 1)))  # noqa: E731
    K = np.asarray(p["K"], np.float64)  # (fx, fy, cx, cy); rot90 k=-1 maps (x, y) -> (H-1-y, x)
    Kr = (K[1], K[0], H - 1 - K[3], K[2])
    outp = shipped(rot(p["img1"]), rot(p["img2"]), depth1=rot(p["depth1"]), depth2=rot(p["depth2"]),
                   intrinsics=Kr)
    assert outp["rotated"] and outp["refined"] and outp["weights_f"].shape == (W, H)
    back = np.rot90(outp["flow_f"], k=1, axes=(0, 1))
    back = np.stack([back[..., 1], -back[..., 0]], -1)  # vectors turned back with the grid
    assert interior_epe(back, out["flow_f"]) < 0.05


def test_predictor_detail_level_runs_above_the_working_size(shipped):
    from camflow_jax.data.synthetic.scenes import SyntheticScenes

    p = SyntheticScenes(seed=5, num_samples=1, height=H, width=W, categories=("RE",))[0]
    cam = dict(depth1=p["depth1"], depth2=p["depth2"], intrinsics=p["K"])
    cfg = R.RefineConfig(max_size=W // 2, detail_size=W)  # working size 48x80, detail 96x160
    assert shipped.refiner.working_size(H, W, cfg) == (H // 2, W // 2) and shipped.refiner.detail_size(H, W, cfg) == (H, W)
    assert shipped.refiner.detail_size(H, W, cfg.replace(detail_size=None)) is None
    assert shipped.refiner.detail_size(H, W, cfg.replace(detail_size=W // 2)) is None  # not above the working size
    assert shipped.refiner.detail_size(H, W, R.RefineConfig()) is None  # the input is the working size
    out = shipped(p["img1"], p["img2"], **cam, refine=cfg)
    assert out["refine_info"]["detail_size_hw"] == [H, W]
    assert [len(i) for i in out["refine_info"]["iterations"]] == [4, 4]  # three levels + detail
    assert out["flow_f"].shape == (H, W, 2) and out["weights_f"].shape == (H, W)
    # the static bases' detail samples are built once with their pyramid and cached
    (static,) = shipped.refiner._static_cache.as_dict().values()
    k = cfg.detail_stride
    assert static.detail[0].shape == (shipped.static_bases.shape[0], -(-H // k), -(-W // k))
    valid = np.asarray(p["valid_f"]).reshape(H, W) > 0
    e = lambda f: np.linalg.norm(f - p["flow_f"], axis=-1)[valid].mean()  # noqa: E731
    assert e(out["flow_f"]) < 0.5 * e(out["net_flow_f"])


def test_predictor_refines_the_directions_in_two_threads_as_in_one(shipped, monkeypatch):
    """On a multi-core CPU the pair's directions run in two threads; the results are those of
    the same calls made one after the other (bit for bit), and an error in a direction reaches
    the caller as itself."""
    import threading

    from camflow_jax.data.synthetic.scenes import SyntheticScenes
    from camflow_jax.refine import pairs as P

    p = SyntheticScenes(seed=5, num_samples=1, height=H, width=W, categories=("RE",))[0]
    cam = dict(depth1=p["depth1"], depth2=p["depth2"], intrinsics=p["K"])
    seen, direction = [], shipped.refiner._refine_direction

    def spy(*a, **k):
        seen.append(threading.current_thread().name)
        return direction(*a, **k)

    monkeypatch.setattr(shipped.refiner, "_refine_direction", spy)
    monkeypatch.setattr(P, "usable_cpus", lambda: 2)
    par = shipped(p["img1"], p["img2"], **cam)
    assert len(seen) == 2 and all(n.startswith("camflow-refine") for n in seen), seen
    seen.clear()
    monkeypatch.setattr(P, "usable_cpus", lambda: 1)
    ser = shipped(p["img1"], p["img2"], **cam)
    assert seen == [threading.current_thread().name] * 2
    for key in ("flow_f", "flow_b", "coeffs_f", "coeffs_b", "weights_f", "weights_b", "homography"):
        np.testing.assert_array_equal(par[key], ser[key])
    assert par["refine_info"] == ser["refine_info"]

    # the caller's default device (a thread-local setting) holds in the threads
    monkeypatch.setattr(P, "usable_cpus", lambda: 2)
    where = lambda: (threading.current_thread().name[:14], jax.config.jax_default_device)  # noqa: E731
    with jax.default_device(jax.devices()[-1]):
        assert shipped.refiner._in_parallel([where] * 2, on_cpu=True) == [("camflow-refine", jax.devices()[-1])] * 2

    def broken(*a, **k):
        raise FloatingPointError("direction failed")

    monkeypatch.setattr(shipped.refiner, "_refine_direction", broken)
    monkeypatch.setattr(P, "usable_cpus", lambda: 2)
    with pytest.raises(FloatingPointError, match="direction failed"):
        shipped(p["img1"], p["img2"], **cam)


def _block_mean_np(x, times):
    """numpy oracle of repeated 2x2 averaging with the last row/column repeated when odd."""
    for _ in range(times):
        h, w = x.shape[-2:]
        x = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, h % 2), (0, w % 2)], mode="edge")
        x = 0.25 * (x[..., 0::2, 0::2] + x[..., 1::2, 0::2] + x[..., 0::2, 1::2] + x[..., 1::2, 1::2])
    return x


def test_basis_pyramid_samples_the_halved_bases():
    # an odd size, so the edge repetition matters; values halve with each level (pixels of the
    # coarser grid)
    rng = np.random.default_rng(11)
    u, v = rng.normal(size=(2, 5, 37, 51)).astype(np.float32)
    cfg = R.RefineConfig(levels=3, iterations=(1, 1, 1), strides=(1, 2, 3), active=(0, 0, 0))
    bp = R.basis_pyramid((u, v), cfg)
    assert len(bp.levels) == 3 and np.array_equal(np.asarray(bp.full[0][0]), u)
    for li, (lu, lv) in enumerate(bp.levels):  # coarsest first
        times, k = 2 - li, cfg.strides[li]
        for got, src in ((lu, u), (lv, v)):
            want = (_block_mean_np(src, times) / 2 ** times)[:, ::k, ::k].reshape(5, -1)
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    both = R.join_basis_pyramids(bp, R.basis_pyramid((2 * u[:2], 2 * v[:2]), cfg))
    assert len(both.full) == 2 and both.levels[0][0].shape[0] == 7


def test_sampling_matches_opencv_remap_with_replicated_borders():
    rng = np.random.default_rng(12)
    img = rng.uniform(0, 255, (23, 31, 3)).astype(np.float32)
    x = rng.uniform(-3, 34, 500).astype(np.float32)
    y = rng.uniform(-3, 26, 500).astype(np.float32)
    got = np.asarray(refine_solver._sample_edge(jnp.asarray(img), jnp.asarray(x), jnp.asarray(y)))
    # clamped coordinates = replicated borders for bilinear interpolation
    xc, yc = np.clip(x, 0, 30), np.clip(y, 0, 22)
    want = cv2.remap(img, xc[None], yc[None], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)[0]
    np.testing.assert_allclose(got, want, atol=0.05)  # OpenCV's 5-bit interpolation weights


def test_project_flow_with_dependent_bases_is_the_minimum_norm_fit():
    # a basis repeated (as depth bases of a constant depth map repeat the homography span):
    # the normal equations are singular; the projection must still reproduce the flow with
    # the minimum-norm coefficients (numpy's lstsq), not huge cancelling ones
    B = np.concatenate([HB, HB[:2], 0.5 * HB[:1]])  # [15, H, W, 2]
    c_true = translation_coeffs(1.5, -0.75)
    flow = np.einsum("n,nhwc->hwc", c_true, HB)
    got = np.asarray(R.project_flow(jnp.asarray(flow), jnp.asarray(B)))
    want = np.linalg.lstsq(B.reshape(15, -1).T.astype(np.float64), flow.reshape(-1), rcond=None)[0]
    np.testing.assert_allclose(got, want, atol=1e-3)
    np.testing.assert_allclose(np.einsum("n,nhwc->hwc", got, B), flow, atol=1e-3)


def test_detail_level_bases_are_the_working_bases_enlarged_as_opencv_does():
    # The detail level refines the flow the caller gets: the working-size flow enlarged
    # bilinearly (cv2.resize, half-pixel centres). Its bases at the sampled pixels must be
    # exactly the bases enlarged that way (a non-integer ratio, odd sizes, two groups).
    rng = np.random.default_rng(13)
    u, v = rng.normal(size=(2, 5, 37, 51)).astype(np.float32)
    u2, v2 = rng.normal(size=(2, 2, 37, 51)).astype(np.float32)
    Hd, Wd, k = 80, 113, 3
    stack = jnp.asarray(rng.normal(size=(Hd, Wd, 3)).astype(np.float32))
    parts = [R.basis_pyramid((u, v), CFG), R.basis_pyramid((u2, v2), CFG)]
    # built on the fly from the full bases, and built beforehand per part (as the Predictor
    # caches its static bases') and joined: both must be OpenCV's enlargement
    cached = R.join_basis_pyramids(*(R.with_detail(p, (Hd, Wd), k) for p in parts))
    for bp in (R.join_basis_pyramids(*parts), cached):
        data, grad1 = refine_pyramid.detail_data(stack, stack, bp, k)
        phi1, _, pts, bu, bv = (np.asarray(a) for a in data)
        for got, comps, scale in ((bu, np.concatenate([u, u2]), Wd / 51), (bv, np.concatenate([v, v2]), Hd / 37)):
            want = np.stack([cv2.resize(c, (Wd, Hd), interpolation=cv2.INTER_LINEAR)[::k, ::k].reshape(-1)
                             for c in comps]) * scale
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="detail samples"):  # built for another stride
        refine_pyramid.detail_data(stack, stack, cached, k + 1)
    ys, xs = np.mgrid[0:Hd:k, 0:Wd:k]
    np.testing.assert_array_equal(pts, np.stack([xs.reshape(-1), ys.reshape(-1)]).astype(np.float32))
    np.testing.assert_array_equal(phi1, np.asarray(stack)[::k, ::k, 0].reshape(-1))
    np.testing.assert_array_equal(np.asarray(grad1), np.asarray(stack)[::k, ::k, 1:].reshape(-1, 2))


def test_detail_level_refines_against_the_full_resolution_images():
    # A homography pair at twice the working size; the working-size images are its area
    # halves (as the Predictor makes them). With the full-resolution pair as ``detail``, the
    # result (the working flow enlarged, as a caller gets it) matches the truth at full
    # resolution and OpenCV's ECC on the full-resolution pair; the exact solution stays put.
    from camflow_jax.geometry import host
    rng = np.random.default_rng(14)
    Hd, Wd = 2 * H, 2 * W
    img1, img2, Ht = fx.make_pair(rng, Hd, Wd, jitter=6.0)
    g1, g2 = (cv2.cvtColor(x, cv2.COLOR_RGB2GRAY).astype(np.float32) for x in (img1, img2))
    s1, s2 = (cv2.resize(x, (W, H), interpolation=cv2.INTER_AREA) for x in (g1, g2))
    truth = fx.homography_flow(Ht, Hd, Wd)
    cfg = CFG.replace(detail_size=Wd, detail_iterations=10, detail_stride=2)
    run = jax.jit(lambda a, b, c, d, s: R.refine_motion(a, b, jnp.asarray(HB), s, cfg, detail=(c, d)))
    out = {k: np.asarray(v) for k, v in run(s1, s2, g1, g2, jnp.zeros((1, 12))).items()}
    assert out["iterations"].shape == (3,) and out["iterations"][-1] > 0 and out["improved"]
    big = host.resize_flow(out["flow"], Hd, Wd)
    # 0.0137 (0.0221 without the detail level; with the textbook Cauchy width 2.385, which weighs
    # a noise-free pair's interpolation residuals more efficiently, 0.006 and 0.015)
    assert interior_epe(big, truth, margin=16) < 0.017
    _, He = cv2.findTransformECC(g1, g2, np.eye(3, dtype=np.float32), cv2.MOTION_HOMOGRAPHY,
                                 (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 200, 1e-7), None, 5)
    assert interior_epe(big, fx.homography_flow(He, Hd, Wd), margin=16) < 0.015
    # from the truth's coefficients it stays there
    A = np.array([[2.0, 0, 0.5], [0, 2.0, 0.5], [0, 0, 1]])  # working pixel -> full-resolution pixel
    exact = bases.least_squares_coeffs(jnp.asarray(fx.homography_flow(np.linalg.inv(A) @ Ht @ A, H, W)),
                                       jnp.asarray(HB))
    fixed = {k: np.asarray(v) for k, v in run(s1, s2, g1, g2, jnp.asarray(exact)[None]).items()}
    # where the cost's minimum lies on this pair (0.015 px; under 0.01 with the textbook width 2.385)
    assert interior_epe(host.resize_flow(fixed["flow"], Hd, Wd), truth, margin=16) < 0.02
    with pytest.raises(ValueError, match="detail stacks"):  # smaller than the working size (traced only)
        jax.eval_shape(lambda: R.refine_motion(s1, s2, HB, np.zeros((1, 12)), cfg, detail=(g1[:H // 2], g2[:H // 2])))


def test_detail_level_without_the_noise_test():
    # noise_presmooth=None (no noise test) with a detail level crashed building the detail
    # stacks (the pair's "not noisy" flag chose between two pre-blurs, one of them None). It now
    # refines like a config whose test never fires (the same 1-px pre-blur), and the detail
    # stacks are the images' own stacks at the plain pre-blur (the closed form: blur, normalise).
    rng = np.random.default_rng(15)
    img1, img2, _ = fx.make_pair(rng, 2 * H, 2 * W, jitter=4.0)
    g1, g2 = (cv2.cvtColor(x, cv2.COLOR_RGB2GRAY).astype(np.float32) for x in (img1, img2))
    s1, s2 = (cv2.resize(x, (W, H), interpolation=cv2.INTER_AREA) for x in (g1, g2))
    base = CFG.replace(detail_size=2 * W, detail_stride=4)
    off = base.replace(noise_presmooth=None)
    never = base.replace(noise_ratio=1e9)  # the test runs and never fires
    got = [{k: np.asarray(v) for k, v in R.refine_motion(s1, s2, HB, jnp.zeros((1, 12)), c, detail=(g1, g2)).items()}
           for c in (off, never)]
    assert got[0]["improved"] and not got[1]["noisy"]
    np.testing.assert_allclose(got[0]["flow"], got[1]["flow"], atol=1e-4)
    stack, _ = refine_pyramid.detail_stacks(g1, g2, off, jnp.asarray(False))
    phi = refine_pyramid.local_normalize(g1, off.local_sigma, off.epsilon, off.presmooth)
    np.testing.assert_allclose(np.asarray(stack[..., 0]), np.asarray(phi), atol=1e-5)
    assert not np.allclose(np.asarray(stack[..., 0]),
                           np.asarray(refine_pyramid.local_normalize(g1, off.local_sigma, off.epsilon, 2.0)), atol=1e-3)
