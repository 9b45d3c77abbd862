"""Motion bases against closed forms and least-squares oracles (numpy float64)."""

import re

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax import bases as B


def _lstsq_residual(bases, flow):
    A = np.asarray(bases, np.float64).reshape(bases.shape[0], -1).T
    c, *_ = np.linalg.lstsq(A, np.asarray(flow, np.float64).reshape(-1), rcond=None)
    return (A @ c).reshape(flow.shape) - flow


def _homography_flow(H, h, w):
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    d = H[2, 0] * xs + H[2, 1] * ys + H[2, 2]
    return np.stack([(H[0, 0] * xs + H[0, 1] * ys + H[0, 2]) / d - xs,
                     (H[1, 0] * xs + H[1, 1] * ys + H[1, 2]) / d - ys], -1)


def test_homography_bases_orthogonal_unit_max_and_span():
    h, w = 32, 48
    hb = np.asarray(B.homography_bases(h, w), np.float64)
    assert hb.shape == (12, h, w, 2)
    g = hb.reshape(12, -1)
    gram = g @ g.T
    off = gram - np.diag(np.diag(gram))
    assert np.abs(off).max() < 1e-4 * np.diag(gram).min()
    np.testing.assert_allclose(np.abs(hb).max(axis=(1, 2, 3)), 1.0, atol=1e-6)
    # span = {1, x, y, xy, x^2, y^2} x {u, v} in normalized coords (closed form)
    xs = np.linspace(-1, 1, w)[None].repeat(h, 0)
    ys = np.linspace(-1, 1, h)[:, None].repeat(w, 1)
    for m in [np.ones_like(xs), xs, ys, xs * ys, xs ** 2, ys ** 2]:
        for c in range(2):
            f = np.zeros((h, w, 2))
            f[..., c] = m
            assert np.abs(_lstsq_residual(hb, f)).max() < 1e-4
    # first basis is the u translation, with positive sign
    np.testing.assert_allclose(hb[0, ..., 0], 1.0, atol=1e-5)
    np.testing.assert_allclose(hb[0, ..., 1], 0.0, atol=1e-5)


def test_homography_fit_quality_320x576_12_vs_8():
    """Random homographies with ±16 px uniform corner jitter, least-squares fits."""
    h, w = 320, 576
    rng = np.random.default_rng(0)
    sets = {12: np.asarray(B.homography_bases(h, w), np.float64),
            8: np.asarray(B.homography_bases_first_order(h, w), np.float64)}
    pinv = {k: (v.reshape(k, -1).T, np.linalg.pinv(v.reshape(k, -1).T)) for k, v in sets.items()}
    src = np.float32([[0, 0], [w - 1, 0], [0, h - 1], [w - 1, h - 1]])
    epe = {12: [], 8: []}
    for _ in range(64):
        H = cv2.getPerspectiveTransform(src, src + rng.uniform(-16, 16, (4, 2)).astype(np.float32))
        f = _homography_flow(H, h, w).reshape(-1)
        for k, (A, P) in pinv.items():
            r = (A @ (P @ f) - f).reshape(h, w, 2)
            epe[k].append(np.sqrt((r ** 2).sum(-1)).mean())
    mean12, mean8 = np.mean(epe[12]), np.mean(epe[8])
    assert mean12 <= 0.06, mean12
    assert mean8 > 5 * mean12, (mean8, mean12)


def _depth_closed_form(depth, K):
    fx, fy, cx, cy = K
    h, w = depth.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    inv = 1.0 / depth
    z = np.zeros_like(inv)
    return [np.stack([fx * inv, z], -1), np.stack([z, fy * inv], -1),
            -np.stack([(xs - cx) * inv, (ys - cy) * inv], -1)]


def test_depth_bases_equal_closed_forms_up_to_scale():
    rng = np.random.default_rng(1)
    h, w = 24, 40
    depth = rng.uniform(1.0, 5.0, (h, w))
    K = (50.0, 55.0, 19.0, 12.5)
    db = np.asarray(B.depth_translational_bases(jnp.asarray(depth), jnp.asarray(K), sigmas=(0.0,)), np.float64)
    assert db.shape == (3, h, w, 2)
    for got, ref in zip(db, _depth_closed_form(depth, K)):
        scale = np.sum(got * ref) / np.sum(ref * ref)
        assert scale != 0
        np.testing.assert_allclose(got, scale * ref, atol=1e-5)
        mag = np.sqrt((got ** 2).sum(-1))
        assert abs(np.percentile(mag, 99) - 1.0) < 1e-4


@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_sort_free_quantile_matches_numpy(n):
    """The bisection quantile behind depth normalization equals np.quantile (linear), with
    repeated values and a validity mask."""
    rng = np.random.default_rng(n)
    for x in (rng.gamma(2.0, size=n), np.round(rng.gamma(2.0, size=n), 1), np.zeros(n)):
        x = x.astype(np.float32)
        valid = rng.random(n) > 0.3
        valid[0] = True
        for q in (0.0, 0.5, 0.99, 1.0):
            got = float(B.quantile_nonneg(jnp.asarray(x), q, jnp.asarray(valid)))
            want = np.quantile(x[valid].astype(np.float64), q)
            assert abs(got - want) <= 1e-5 * max(1.0, want), (q, got, want)


def test_depth_pyramid_levels_use_blurred_depth():
    rng = np.random.default_rng(2)
    depth = rng.uniform(1.0, 5.0, (32, 48)).astype(np.float32)
    K = (40.0, 40.0, 24.0, 16.0)
    db = np.asarray(B.depth_translational_bases(depth, K, sigmas=(0.0, 2.0)))
    assert db.shape == (6, 32, 48, 2)
    blurred = cv2.GaussianBlur(depth.astype(np.float64), (13, 13), 2.0, borderType=cv2.BORDER_REPLICATE)
    ref = _depth_closed_form(blurred, K)[0]
    scale = np.sum(db[3] * ref) / np.sum(ref * ref)
    np.testing.assert_allclose(db[3], scale * ref, atol=2e-3)


def test_constant_depth_lies_in_homography_span():
    h, w = 32, 48
    db = np.asarray(B.depth_translational_bases(jnp.full((h, w), 7.0), jnp.array([40.0, 40.0, 20.0, 14.0])))
    hb = np.asarray(B.homography_bases(h, w))
    for f in db:
        assert np.abs(_lstsq_residual(hb, f)).max() < 1e-4


def test_two_layer_lateral_translation_needs_depth_bases():
    """Pure sideways translation: true flow u = fx * t / Z(p), a step at the layer boundary."""
    h, w = 64, 96
    depth = np.full((h, w), 10.0)
    depth[16:48, 20:60] = 2.0  # near box in front of a far wall
    K = np.array([80.0, 80.0, 47.5, 31.5])
    flow = np.zeros((h, w, 2))
    flow[..., 0] = K[0] * 0.25 / depth
    hb = np.asarray(B.homography_bases(h, w))
    hyb = np.asarray(B.hybrid_bases(h, w, depth=jnp.asarray(depth, jnp.float32), K=jnp.asarray(K), num_stochastic=0))
    assert hyb.shape == (24, h, w, 2)
    epe_h = np.sqrt((_lstsq_residual(hb, flow) ** 2).sum(-1)).mean()
    epe_hd = np.sqrt((_lstsq_residual(hyb, flow) ** 2).sum(-1)).mean()
    assert epe_h > 1.0, epe_h
    assert epe_hd < 0.05, epe_hd


@pytest.mark.parametrize("bad", [np.nan, np.inf, -3.0, 0.0])
def test_depth_bases_finite_with_invalid_depth(bad):
    depth = np.full((16, 24), 4.0, np.float32)
    depth[3:7, 5:9] = bad
    depth[0, 0] = 1e-9  # absurdly near pixel: clamped, must not set the scale
    db = np.asarray(jax.jit(B.depth_translational_bases)(depth, jnp.array([20.0, 20.0, 12.0, 8.0])))
    assert np.all(np.isfinite(db))
    all_bad = np.asarray(B.depth_translational_bases(np.full((16, 24), np.nan, np.float32), (20.0, 20.0, 12.0, 8.0)))
    assert np.all(np.isfinite(all_bad))


def test_depth_bases_errors_and_batching():
    with pytest.raises(ValueError, match=re.escape("depth has shape (2, 3, 4); expected [H, W]")):
        B.depth_translational_bases(np.ones((2, 3, 4)), (1, 1, 1, 1))
    with pytest.raises(ValueError, match=re.escape("K has shape (3,); expected (4,): (fx, fy, cx, cy)")):
        B.depth_translational_bases(np.ones((8, 8)), (1, 1, 1))
    d = jnp.stack([jnp.full((16, 24), 3.0), jnp.linspace(1, 5, 16 * 24).reshape(16, 24)])
    K = jnp.array([[20.0, 20.0, 12.0, 8.0]] * 2)
    hyb = B.hybrid_bases(16, 24, depth=d, K=K, num_stochastic=4)
    assert hyb.shape == (2, 28, 16, 24, 2)
    single = B.hybrid_bases(16, 24, depth=d[1], K=K[1], num_stochastic=4)
    np.testing.assert_allclose(np.asarray(hyb[1]), np.asarray(single), atol=1e-6)


def test_stochastic_bases_seeded_orthogonal_and_finite():
    h, w = 24, 40
    a = B.stochastic_bases(h, w, n=12, seed=3)
    b = B.stochastic_bases(h, w, n=12, seed=3)
    c = B.stochastic_bases(h, w, n=12, seed=4)
    assert a.shape == (12, h, w, 2) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0.1
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(np.abs(a).max(axis=(1, 2, 3)), 1.0, atol=1e-6)
    hb = np.asarray(B.homography_bases(h, w), np.float64).reshape(12, -1)
    hb /= np.linalg.norm(hb, axis=1, keepdims=True)
    s = a.reshape(12, -1).astype(np.float64)
    s /= np.linalg.norm(s, axis=1, keepdims=True)
    assert np.abs(s @ hb.T).max() < 1e-4  # orthogonal to the homography span
    assert np.abs(s @ s.T - np.eye(12)).max() < 1e-4  # orthonormal among themselves
    raw = B.stochastic_bases(h, w, n=12, seed=3, orthogonal_to_homography=False, min_denominator=0.0)
    r = raw.reshape(12, -1).astype(np.float64)
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    assert np.abs(r @ hb.T).max() > 0.3  # the raw paper recipe overlaps the physical span
    assert np.all(np.isfinite(raw))


def test_combine_matches_numpy():
    rng = np.random.default_rng(5)
    bases = rng.normal(size=(5, 6, 7, 2)).astype(np.float32)
    coeffs = rng.normal(size=(3, 5)).astype(np.float32)
    ref = np.tensordot(coeffs, bases, axes=(1, 0))
    np.testing.assert_allclose(np.asarray(B.combine(coeffs, bases)), ref, atol=1e-5)
    per_sample = np.stack([bases * (i + 1) for i in range(3)])
    ref2 = np.stack([np.tensordot(coeffs[i], per_sample[i], axes=(0, 0)) for i in range(3)])
    np.testing.assert_allclose(np.asarray(B.combine(coeffs, per_sample)), ref2, atol=1e-4)
    with pytest.raises(ValueError):
        B.combine(coeffs, bases[0])


@pytest.mark.parametrize("coeffs, bases, message", [
    (np.ones((2, 7)), np.ones((8, 4, 6, 2)), "combine: coefficients have shape (2, 7) but bases has 8 basis fields "
                                             "(shape (8, 4, 6, 2)); expected (..., 8)"),
    (np.ones((2, 8)), np.ones((3, 8, 4, 6, 2)), "combine: coefficients have shape (2, 8) but bases holds 3 set(s) of "
                                                "8 basis fields (shape (3, 8, 4, 6, 2)); expected (3, 8)"),
    (np.ones((8,)), np.ones((2, 8, 4, 6, 2)), "combine: coefficients have shape (8,) but bases holds 2 set(s) of 8 "
                                              "basis fields (shape (2, 8, 4, 6, 2)); expected (2, 8)"),
    (np.ones((2, 8)), np.ones((8, 4, 6)), "combine: bases has shape (8, 4, 6); expected [N, h, w, 2] (N basis "
                                          "fields of (u, v) per pixel) or a basis set per sample [B, N, h, w, 2]"),
    (np.ones((2, 8)), np.ones((8, 4, 6, 3)), "combine: bases has shape (8, 4, 6, 3); expected [N, h, w, 2]"),
    ([[1.0, 2.0], [3.0]], np.ones((2, 4, 6, 2)), "combine: coefficients must be an array of numbers (nested lists of "
                                                 "different lengths?)"),
    (np.array(["a", "b"]), np.ones((2, 4, 6, 2)), "combine: coefficients must hold real numbers, got dtype <U1"),
    (np.ones((1, 2)), np.ones((2, 4, 6, 2), complex), "combine: bases must hold real numbers, got dtype complex128"),
])
def test_combine_refuses_shapes_that_do_not_fit_in_one_line(coeffs, bases, message):
    """POOR (issue 63): mismatched coefficients ended in einsum's words ("Size of label 'n' for
    operand 1 (7) does not match previous terms (8)"), a list in an AttributeError, a basis set
    of 3 channels was combined silently. One line naming the argument, its shape and the
    expected one, raised when the call is traced (under jit too)."""
    with pytest.raises(ValueError) as e:
        B.combine(coeffs, bases)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
    if isinstance(coeffs, np.ndarray) and coeffs.dtype.kind == "f" and bases.dtype.kind == "f":
        with pytest.raises(ValueError, match=re.escape(message)):
            jax.jit(B.combine)(coeffs, bases)


def test_combine_takes_lists_one_motion_leading_axes_and_integer_weights():
    """Python lists are converted; coefficients ``[..., N]`` give ``[..., h, w, 2]``; integer
    coefficients combine the float bases (they used to cast the bases to integers); vmap over
    the coefficients is the batched call. Oracle: numpy's tensordot."""
    rng = np.random.default_rng(6)
    bases = rng.normal(size=(5, 3, 4, 2)).astype(np.float32)
    coeffs = rng.normal(size=(2, 3, 5)).astype(np.float32)
    ref = np.tensordot(coeffs, bases, axes=(-1, 0))
    np.testing.assert_allclose(np.asarray(B.combine(coeffs, bases)), ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(B.combine(coeffs[0, 0].tolist(), bases.tolist())), ref[0, 0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(jax.vmap(B.combine, in_axes=(0, None))(coeffs[0], bases)), ref[0],
                               atol=1e-5)
    ints = np.array([[1, 0, 2, 0, 0]])
    np.testing.assert_allclose(np.asarray(B.combine(ints, bases)), (bases[0] + 2 * bases[2])[None], atol=1e-6)
    np.testing.assert_allclose(np.asarray(B.combine(coeffs[0], bases[None])), ref[0], atol=1e-5)  # one shared set


K8 = [20.0, 20.0, 8.0, 4.0]


@pytest.mark.parametrize("call, needle", [
    (lambda: B.homography_bases(0, 10), "homography_bases: h and w must be whole numbers >= 2, got h=0"),
    (lambda: B.homography_bases_first_order(8, 1), "homography_bases_first_order: h and w"),
    (lambda: B.stochastic_bases(2.5, 8, 4), "stochastic_bases: h and w must be whole numbers >= 2, got h=2.5"),
    (lambda: B.stochastic_bases(8, 16, 2.5), "need whole numbers n >= 1"),
    (lambda: B.static_bases(True, 16), "h and w must be whole numbers"),
    (lambda: B.stochastic_bases(8, 16, 2.0), "need whole numbers n >= 1"),
    (lambda: B.static_bases(8, 16, num_stochastic=-1), "num_stochastic must be a whole number >= 0, got -1"),
    (lambda: B.static_bases(8, 16, num_stochastic=2.5), "num_stochastic must be a whole number >= 0, got 2.5"),
    (lambda: B.static_bases(8, 16, num_homography=12.0), "num_homography must be 0, 8 or 12, got 12.0"),
    (lambda: B.hybrid_bases(8, 16, num_homography=True), "num_homography must be 0, 8 or 12, got True"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), [np.nan, 10, 4, 4]), "K must be 4 finite numbers"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), [10, np.inf, 4, 4]), "K must be 4 finite numbers"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), [0, 10, 4, 4]), "with fx, fy > 0"),
    # issue 63: depth and blurs that ended in numpy's or JAX's words (or were taken silently)
    (lambda: B.depth_translational_bases(np.ones((8, 16), bool), K8), "depth_translational_bases: depth is a "
     "boolean array (a mask, not depth): depth must be an [H, W] map of real numbers (one per pixel)"),
    (lambda: B.depth_translational_bases(np.ones((8, 16), complex), K8), "depth_translational_bases: depth is a "
     "complex array"),
    (lambda: B.depth_translational_bases(np.full((8, 16), "a"), K8), "depth_translational_bases: depth is an array "
     "of strings"),
    (lambda: B.depth_translational_bases([[1.0, 2.0], [3.0]], K8), "depth_translational_bases: depth must be an "
     "array of numbers (nested lists of different lengths?)"),
    (lambda: B.depth_translational_bases(np.ones((0, 16)), K8), "depth_translational_bases: depth has shape (0, 16); "
     "expected [H, W]"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), K8, (0.0, -2.0)), "depth_translational_bases: sigmas[1] "
     "must be a finite number of pixels >= 0 (0: no blur), got -2.0 (in (0.0, -2.0))"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), K8, (np.nan,)), "sigmas[0] must be a finite number"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), K8, ("abc",)), "sigmas[0] must be a finite number of "
     "pixels >= 0 (0: no blur), got 'abc'"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), K8, (True,)), "sigmas[0] must be a finite number"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), K8, 3.0), "depth_translational_bases: sigmas must be a "
     "non-empty sequence of blurs in pixels (numbers >= 0, e.g. (0, 2, 8, 32)), got 3.0"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), K8, ()), "sigmas must be a non-empty sequence"),
    (lambda: B.depth_translational_bases(np.ones((8, 16)), K8, (1e9,)), "depth_translational_bases: sigmas[0] = "
     "1e+09 px is more than 4x the depth map's longer side (16 px): a blur that wide leaves a constant depth"),
    (lambda: B.hybrid_bases(8, 16, np.ones((2, 2, 8, 16)), K8), "hybrid_bases: depth has shape (2, 2, 8, 16); "
     "expected (8, 16) or (B, 8, 16)"),
    (lambda: B.hybrid_bases(8, 16, np.ones((2, 8, 16)), [K8] * 3), "hybrid_bases: K has shape (3, 4) for 2 depth "
     "maps; expected (2, 4) or (4,)"),
    (lambda: B.hybrid_bases(8, 16, np.ones((8, 16)), K8, sigmas=(-1,)), "hybrid_bases: sigmas[0] must be a finite"),
    (lambda: B.default_depth_sigmas("576"), "default_depth_sigmas: width must be a number of pixels > 0, got '576'"),
])
def test_bad_basis_arguments_are_refused_in_our_words(call, needle):
    """Sizes that are not whole numbers >= 2 and intrinsics that are not finite (fx, fy > 0)
    were an internal broadcasting TypeError, a silent truncation or non-finite B. POOR (issue
    63): a boolean, complex or object depth map was taken as numbers, strings and ragged lists
    ended in numpy's words, a negative blur was taken as none, a NaN one ended in "cannot
    convert float NaN to integer", 1e9 in a MemoryError, a batch of depth maps with one K or
    a K per map too many in vmap's three-line "inconsistent sizes". One line, naming the argument."""
    with pytest.raises(ValueError) as e:
        call()
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_depth_checks_run_at_trace_time_and_batches_take_one_camera():
    """Dtype, shape and blurs are static: under jit they are checked when tracing. One K ``[4]``
    for a batch of depth maps is every map's camera (it used to fail in vmap's words); the
    result is the per-map call's. A map without any valid pixel is a constant depth (documented:
    the bases then lie in the homography span), traced or not."""
    with pytest.raises(ValueError, match="depth is a boolean array"):
        jax.jit(B.depth_translational_bases)(np.ones((8, 16), bool), np.float32(K8))
    d = np.stack([np.full((8, 16), 3.0, np.float32), np.linspace(1, 5, 128, dtype=np.float32).reshape(8, 16)])
    one = np.asarray(B.hybrid_bases(8, 16, d, K8, num_stochastic=0))
    each = np.stack([np.asarray(B.hybrid_bases(8, 16, d[i], K8, num_stochastic=0)) for i in range(2)])
    np.testing.assert_allclose(one, each, atol=1e-5)
    invalid = np.asarray(B.depth_translational_bases(np.full((8, 16), -1.0), K8))
    np.testing.assert_allclose(invalid, np.asarray(B.depth_translational_bases(np.full((8, 16), 7.0), K8)), atol=1e-6)


def test_numpy_integer_sizes_and_counts_are_python_integers():
    """numpy integers (e.g. a shape read from an array) are accepted and give exactly the bases
    of the same Python integers."""
    np.testing.assert_array_equal(np.asarray(B.homography_bases(np.int64(8), np.int32(12))),
                                  np.asarray(B.homography_bases(8, 12)))
    np.testing.assert_array_equal(B.stochastic_bases(np.int64(8), 12, np.int16(3), np.uint8(1)),
                                  B.stochastic_bases(8, 12, 3, 1))
    assert B.static_bases(8, 12, np.int64(8), np.int64(2)).shape == (10, 8, 12, 2)


def test_traced_intrinsics_are_left_to_the_caller():
    """Under vmap the intrinsics are traced: the check cannot read them, and must not fail."""
    out = jax.vmap(B.depth_translational_bases)(np.ones((2, 8, 16), np.float32),
                                                    np.array([[10.0, 10, 4, 4]] * 2, np.float32))
    assert out.shape == (2, 12, 8, 16, 2) and bool(jnp.all(jnp.isfinite(out)))
