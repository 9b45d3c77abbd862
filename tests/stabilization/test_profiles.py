"""Motion profiles and their smoothing (camflow_jax.stabilization.profiles).

Oracles: direct per-frame loops over the published Jacobi update (written here from the
formula, independent of the banded block matmul), np.polyfit for the end extension, the
closed-form frequency response of the update on an infinite sinusoid, hand-computed windows.
"""

import numpy as np
import pytest

from camflow_jax.stabilization import profiles as pr


def _reference_jacobi(c, radii, lam, iterations):
    """P_t <- (C_t + lam sum_r w_tr P_r) / (1 + lam sum_r w_tr), w = exp(-(r-t)^2/(Omega_t/3)^2)."""
    c = np.asarray(c, np.float64).reshape(len(c), -1)
    p = c.copy()
    t_len = len(c)
    for _ in range(iterations):
        new = np.empty_like(p)
        for t in range(t_len):
            num, den = np.zeros(c.shape[1]), 0.0
            for r in range(t_len):
                if r != t and abs(r - t) <= radii[t]:
                    w = np.exp(-((r - t) ** 2) / (radii[t] / 3.0) ** 2)
                    num += w * p[r]
                    den += w
            new[t] = (c[t] + lam * num) / (1 + lam * den)
        p = new
    return p


def test_accumulate_profiles_is_prefix_sum():
    flows = np.zeros((4, 2, 3, 2), np.float32)
    flows[..., 0] = np.array([1.0, 2.0, -0.5, 4.0])[:, None, None]
    c = pr.accumulate_profiles(flows)
    assert c.shape == (5, 2, 3, 2)
    np.testing.assert_allclose(c[:, 0, 0, 0], [0.0, 1.0, 3.0, 2.5, 6.5])
    np.testing.assert_allclose(c[..., 1], 0.0)


def test_accumulate_profiles_rejects_bad_input():
    with pytest.raises(ValueError, match="flows must be"):
        pr.accumulate_profiles(np.zeros((3, 4, 2)))
    bad = np.zeros((3, 2, 2, 2))
    bad[1, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        pr.accumulate_profiles(bad)


@pytest.mark.parametrize("operator", [True, False], ids=["operator", "iterated"])
def test_blocked_jacobi_matches_reference_loop(operator, monkeypatch):
    # both ways smooth_profiles applies (3): its T x T operator, and the banded iteration
    # it uses for clips longer than OPERATOR_MAX_FRAMES
    monkeypatch.setattr(pr, "OPERATOR_MAX_FRAMES", 10_000 if operator else 0)
    rng = np.random.default_rng(0)
    t_len = 37
    c = rng.normal(size=(t_len, 2, 3, 2)).astype(np.float32) * 5
    radii = rng.integers(1, 12, size=t_len)
    # Small blocks and column chunks exercise the block boundaries and the column chunks.
    got = pr.smooth_profiles(c, radii, strength=3.0, iterations=6, extrapolate_ends=False,
                             block=8, column_chunk=5)
    want = _reference_jacobi(c, radii, 3.0, 6)
    np.testing.assert_allclose(got.reshape(t_len, -1), want, atol=1e-4)


def test_end_extension_matches_polyfit_reference():
    rng = np.random.default_rng(1)
    t_len, radius = 25, 4
    c = (np.arange(t_len)[:, None] * 1.5 + rng.normal(size=(t_len, 3))).astype(np.float32)
    radii = np.full(t_len, radius)
    got = pr.smooth_profiles(c, radii, strength=2.0, iterations=5)
    pad = 3 * radius
    ext = []
    for j in range(c.shape[1]):
        a = np.polyfit(np.arange(radius + 1), c[:radius + 1, j], 1)
        b = np.polyfit(np.arange(radius + 1), c[-radius - 1:, j], 1)
        head = np.polyval(a, np.arange(-pad, 0))
        tail = np.polyval(b, np.arange(radius + 1, radius + 1 + pad))
        ext.append(np.concatenate([head, c[:, j], tail]))
    ext = np.stack(ext, 1)
    want = _reference_jacobi(ext, np.full(len(ext), radius), 2.0, 5)[pad:pad + t_len]
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_constant_profile_is_preserved():
    c = np.full((50, 3, 4, 2), 7.25, np.float32)
    radii = np.random.default_rng(2).integers(1, 30, 50)
    for ext in (False, True):
        np.testing.assert_allclose(pr.smooth_profiles(c, radii, extrapolate_ends=ext), c,
                                   atol=1e-4)


def test_linear_ramp_preserved_away_from_ends_and_with_extension_everywhere():
    t = np.arange(300, dtype=np.float32)
    c = np.stack([3.0 * t + 7.0, -0.5 * t], -1)[:, None, None, :]  # [T, 1, 1, 2]
    radii = np.full(300, 10)
    plain = pr.smooth_profiles(c, radii, 5.0, 10, extrapolate_ends=False)
    # Truncated windows bend the ends (by several frames' worth of motion) ...
    assert np.abs(plain - c)[0].max() > 5.0
    # ... but the middle, more than iterations x radius away from the ends, is untouched.
    np.testing.assert_allclose(plain[100:200], c[100:200], atol=1e-2)
    ext = pr.smooth_profiles(c, radii, 5.0, 10, extrapolate_ends=True)
    np.testing.assert_allclose(ext, c, atol=1e-2)


@pytest.mark.parametrize("period", [4, 8, 64])
def test_sinusoid_response_matches_closed_form(period):
    # Interior of a long clip: every frame sees the full symmetric window, so a sinusoid is
    # scaled by g_n with g_0 = 1, g_{k+1} = (1 + lam W(w) g_k) / (1 + lam S),
    # W(w) = sum_{d != 0} w_d cos(w d), S = sum_{d != 0} w_d.
    radius, lam, iters = 30, 5.0, 10
    t = np.arange(600, dtype=np.float64)
    omega = 2 * np.pi / period
    c = np.cos(omega * t)[:, None].astype(np.float32)
    got = pr.smooth_profiles(c, np.full(600, radius), lam, iters, extrapolate_ends=False)
    d = np.array([k for k in range(-radius, radius + 1) if k != 0], np.float64)
    w = np.exp(-d ** 2 / (radius / 3.0) ** 2)
    S, Wf = w.sum(), (w * np.cos(omega * d)).sum()
    g = 1.0
    for _ in range(iters):
        g = (1 + lam * Wf * g) / (1 + lam * S)
    mid = slice(300 - 2 * period, 300 + 2 * period)
    np.testing.assert_allclose(got[mid, 0], g * c[mid, 0], atol=2e-3)
    if period <= 8:
        assert abs(g) < 0.02  # high frequencies attenuated


def test_adaptive_radii_hand_computed():
    # Still for t <= 20, then a pan of 10 px/frame; threshold 25 px, radius range [2, 12].
    t_len = 40
    pos = np.where(np.arange(t_len) > 20, 10.0 * (np.arange(t_len) - 20), 0.0)
    c = np.zeros((t_len, 4, 4, 2), np.float32)
    c[..., 0] = pos[:, None, None]
    radii = pr.adaptive_radii(c, max_radius=12, min_radius=2, threshold=25.0)
    # t = 5: within 12 frames nothing moves -> full radius.
    assert radii[5] == 12
    # t = 15: |C_{15+k} - C_15| = 10 (k - 5) <= 25 for k <= 7 -> radius 7.
    assert radii[15] == 7
    # t = 30 (in the pan): 10 k <= 25 -> k <= 2.
    assert radii[30] == 2
    # t = 39 (last frame): backwards 10 k <= 25 -> 2.
    assert radii[39] == 2


def test_smoothing_params_validation():
    with pytest.raises(ValueError, match="max_radius"):
        pr.SmoothingParams(max_radius=0)
    with pytest.raises(ValueError, match="min_radius"):
        pr.SmoothingParams(max_radius=5, min_radius=6)
    with pytest.raises(ValueError, match="radii must be"):
        pr.smooth_profiles(np.zeros((5, 2)), np.ones(4))
