"""Losses: closed forms (numpy), the NLL minimiser log(2|d|^2), depth-aware smoothness
properties, ratio balancing with a stopped gradient, and gradient flow through the model."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax.models import build_model, init_variables
from camflow_jax.training import losses


def _np_nll(y, yh, s, mask=None, reduction="paper"):
    """Paper Eq. (nll): per pixel, the sum over channels; then the mean over (selected) pixels.
    The release's form: the mean over elements."""
    s = np.broadcast_to(s, y.shape)
    e = math.sqrt(2) * np.exp(-s / 2) * np.abs(y - yh) + s / 2
    m = np.ones(y.shape[:-1]) if mask is None else mask
    if reduction == "paper":
        per_pixel = e.sum(-1)
        return (per_pixel * m).sum() / m.sum()
    return (e * m[..., None]).sum() / (m.sum() * y.shape[-1])


def test_nll_closed_form_mask_and_nonfinite():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(2, 5, 7, 2)).astype(np.float32)
    yh = rng.normal(size=(2, 5, 7, 2)).astype(np.float32)
    s = rng.uniform(-2, 3, (2, 5, 7, 1)).astype(np.float32)
    np.testing.assert_allclose(losses.laplace_nll(y, yh, s), _np_nll(y, yh, s), rtol=1e-5)
    # The paper's Eq. (nll) with d = exp(-s): sum over channels of sqrt(2 d)|.| - 1/2 log d,
    # mean over the 2*5*7 pixels.
    d = np.exp(-s)
    paper = np.sum(np.sqrt(2 * d) * np.abs(y - yh) - 0.5 * np.log(d)) / (2 * 5 * 7)
    np.testing.assert_allclose(losses.laplace_nll(y, yh, s), paper, rtol=1e-5)
    # The release's form is the mean over elements: half of it for 2 channels.
    np.testing.assert_allclose(losses.laplace_nll(y, yh, s, reduction="release"), paper / 2, rtol=1e-5)
    np.testing.assert_allclose(losses.laplace_nll(y, yh, s, reduction="release"),
                               _np_nll(y, yh, s, reduction="release"), rtol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        losses.laplace_nll(y, yh, s, reduction="mean")
    mask = (rng.uniform(size=(2, 5, 7)) > 0.4).astype(np.float32)
    np.testing.assert_allclose(losses.laplace_nll(y, yh, s, mask), _np_nll(y, yh, s, mask), rtol=1e-5)
    # Non-finite targets are excluded like masked-out elements, and leak no NaN into gradients.
    y_bad = y.copy()
    y_bad[mask == 0] = np.nan
    np.testing.assert_allclose(losses.laplace_nll(y_bad, yh, s), _np_nll(y, yh, s, mask), rtol=1e-5)
    g = jax.grad(lambda a, b: losses.laplace_nll(y_bad, a, b), argnums=(0, 1))(yh, s)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in g)
    with pytest.raises(ValueError, match="broadcast"):
        losses.laplace_nll(y, yh, s[:, :3])


@pytest.mark.parametrize("delta", [0.05, 1.0, 7.5])
def test_nll_minimiser_is_log_2_delta_squared(delta):
    y, yh = np.array([[delta]], np.float32), np.zeros((1, 1), np.float32)
    s_star = math.log(2 * delta**2)

    def f(s):
        return losses.laplace_nll(y, yh, jnp.full((1, 1), s))

    assert abs(float(jax.grad(f)(s_star))) < 1e-5
    grid = np.linspace(s_star - 3, s_star + 3, 6001)
    values = np.array([math.sqrt(2) * math.exp(-v / 2) * delta + v / 2 for v in grid])
    assert abs(grid[values.argmin()] - s_star) < 2e-3
    assert float(f(s_star)) < min(float(f(s_star - 0.3)), float(f(s_star + 0.3)))


def _outputs(feat1, feat2, flow_f, flow_b, logvar=0.0, trans=None):
    b, h, w = feat1.shape[:3]
    lv = jnp.full((b, h, w, 1), logvar, jnp.float32)
    z = jnp.zeros((b, h, w, 2))
    return {"feat1": feat1, "feat2": feat2, "flow_f": flow_f, "flow_b": flow_b, "logvar_f": lv,
            "logvar_b": lv, "trans_f": z if trans is None else trans, "trans_b": z if trans is None else trans}


def test_feature_loss_vanishes_for_the_true_shift():
    rng = np.random.default_rng(1)
    f1 = rng.uniform(0.5, 1.5, (1, 16, 24, 1)).astype(np.float32)
    f2 = np.roll(f1, (2, 3), axis=(1, 2))  # image 2 content moved by (u, v) = (3, 2)
    flow_f = np.broadcast_to(np.array([3.0, 2.0], np.float32), (1, 16, 24, 2))
    out = _outputs(f1, f2, flow_f, -flow_f)
    # warp(F2, m_ab) = F1 wherever the sample lands inside image 2: the loss is 0 there.
    assert float(losses.feature_loss(out)) < 1e-6
    # Counting out-of-frame pixels (warped value 0), as the release does, penalises them.
    assert float(losses.feature_loss(out, mask_out_of_frame=False)) > 0.1
    # The wrong sign of the flow does not align the features.
    assert float(losses.feature_loss(_outputs(f1, f2, -flow_f, flow_f))) > 0.1


def _np_smooth(t, d, alpha):
    d = d / np.median(d)
    h, w = d.shape
    acc = 0.0
    for i in range(h - 1):
        for j in range(w - 1):
            gd = abs(d[i, j + 1] - d[i, j]) + abs(d[i + 1, j] - d[i, j])
            gt = np.abs(t[i, j + 1] - t[i, j]).sum() + np.abs(t[i + 1, j] - t[i, j]).sum()
            acc += math.exp(-alpha * gd) * gt
    return acc / ((h - 1) * (w - 1))


def test_smoothness_closed_form_and_depth_edges():
    rng = np.random.default_rng(2)
    t = rng.normal(size=(1, 5, 6, 2)).astype(np.float32)
    d = rng.uniform(1, 3, (1, 5, 6)).astype(np.float32)
    np.testing.assert_allclose(losses.smoothness_loss(t, d, 2.0), _np_smooth(t[0], d[0], 2.0), rtol=1e-5)
    # Scale-free in depth (normalized by the median).
    np.testing.assert_allclose(losses.smoothness_loss(t, 37 * d, 2.0), _np_smooth(t[0], d[0], 2.0), rtol=1e-5)

    h, w = 16, 32
    depth = np.where(np.arange(w) < 16, 2.0, 8.0) * np.ones((1, h, 1))
    # Translational flow f^x = fx / D: constant inside each constant-depth region.
    trans = np.stack([100 / depth, np.zeros_like(depth)], -1).astype(np.float32)
    assert float(losses.smoothness_loss(trans, depth, alpha=20.0)) < 1e-9
    jump = np.zeros((1, h, w, 2), np.float32)
    edge, inside = jump.copy(), jump.copy()
    edge[:, :, 16:, 0] = 1.0  # a 1 px step at the depth edge ...
    inside[:, :, 8:, 0] = 1.0  # ... and the same step inside the near region
    l_edge = float(losses.smoothness_loss(edge, depth, alpha=10.0))
    l_inside = float(losses.smoothness_loss(inside, depth, alpha=10.0))
    assert l_inside > 1e4 * l_edge and l_inside > 0
    # Invalid depth (NaN, 0) is excluded, never NaN.
    bad = depth.copy()
    bad[:, :, 7:10] = np.nan
    bad[:, 0, 0] = 0.0
    val, grad = jax.value_and_grad(losses.smoothness_loss)(jnp.asarray(inside), bad)
    assert float(val) == 0.0 and np.all(np.isfinite(np.asarray(grad)))
    with pytest.raises(ValueError, match="same grid"):
        losses.smoothness_loss(trans, depth[:, :8])


def test_total_loss_weights_and_skips():
    rng = np.random.default_rng(3)
    b, h, w = 2, 8, 12
    out = _outputs(rng.normal(size=(b, h, w, 1)), rng.normal(size=(b, h, w, 1)),
                   rng.normal(size=(b, h, w, 2)), rng.normal(size=(b, h, w, 2)), 0.3,
                   rng.normal(size=(b, h, w, 2)))
    lab_f, lab_b = rng.normal(size=(b, h, w, 2)), rng.normal(size=(b, h, w, 2))
    d1, d2 = rng.uniform(1, 2, (b, h, w)), rng.uniform(1, 2, (b, h, w))
    batch = {"flow_f": lab_f, "flow_b": lab_b, "depth1": d1, "depth2": d2}
    total, terms = losses.total_loss(out, batch, {"motion": 1.0, "feature": 10.0, "smooth": 40.0, "alpha": 3.0})
    m = losses.laplace_nll(lab_f, out["flow_f"], out["logvar_f"]) + losses.laplace_nll(
        lab_b, out["flow_b"], out["logvar_b"])
    f = losses.feature_loss(out)
    s = losses.smoothness_loss(out["trans_f"], d1, 3.0) + losses.smoothness_loss(out["trans_b"], d2, 3.0)
    np.testing.assert_allclose([terms["motion"], terms["feature"], terms["smooth"]], [m, f, s], rtol=1e-6)
    np.testing.assert_allclose(total, m + 10 * f + 40 * s, rtol=1e-6)
    _, terms = losses.total_loss(out, {"flow_f": lab_f, "flow_b": lab_b}, {"feature": 1.0, "smooth": 40.0})
    assert float(terms["smooth"]) == 0.0 and float(terms["feature"]) > 0
    mask = np.zeros((b, h, w), np.float32)
    mask[:, :4] = 1
    _, terms = losses.total_loss(out, dict(batch, label_mask_f=mask, label_mask_b=mask), {})
    m_masked = losses.laplace_nll(lab_f[:, :4], out["flow_f"][:, :4], out["logvar_f"][:, :4]) + \
        losses.laplace_nll(lab_b[:, :4], out["flow_b"][:, :4], out["logvar_b"][:, :4])
    np.testing.assert_allclose(terms["motion"], m_masked, rtol=1e-6)


def test_ratio_balancing_keeps_the_feature_gradient():
    rng = np.random.default_rng(4)
    b, h, w = 1, 8, 8
    f1 = jnp.asarray(rng.uniform(size=(b, h, w, 1)), jnp.float32)
    lab = jnp.asarray(rng.normal(size=(b, h, w, 2)), jnp.float32)

    def outputs(theta):  # a tiny differentiable "model"
        flow = jnp.broadcast_to(theta[:2], (b, h, w, 2))
        return _outputs(f1, f1 * theta[2], flow, -flow, logvar=0.0)

    batch = {"flow_f": lab, "flow_b": -lab}
    weights = {"motion": 1.0, "feature": 0.5, "balance_feature": True}
    theta = jnp.array([0.3, -0.2, 1.7])
    @jax.jit
    def pieces(t):
        g = jax.grad(lambda t: losses.total_loss(outputs(t), batch, weights)[0])(t)
        lm, g_m = jax.value_and_grad(lambda t: losses.motion_loss(outputs(t), lab, -lab))(t)
        lf, g_f = jax.value_and_grad(lambda t: losses.feature_loss(outputs(t)))(t)
        return g, g_m + 0.5 * (lm / lf) * g_f

    g, expected = pieces(theta)
    np.testing.assert_allclose(g, expected, rtol=1e-5)
    # theta[2] only changes the feature term: it keeps its gradient (an undetached ratio,
    # w_f * L_m / L_f * L_f = w_f * L_m, would give it exactly 0).
    assert abs(float(g[2])) > 1e-3


def test_every_parameter_gets_gradient_and_batchnorm_trains():
    # Two levels of one Swin block per stage keep the compile short (17 s against 25 s for three
    # levels): every parameter kind of the three-level model is still present, and the second
    # level's warp by the first level's flow is on the gradient's path.
    model = build_model({"group_sizes": [12, 12, 12], "depths": [1, 1], "layer_depth": [2, 1], "num_heads": [3, 12]})
    rng = np.random.default_rng(5)
    b, h, w = 2, 64, 64
    g1 = rng.standard_normal((b, h, w, 1)).astype(np.float32)
    g2 = np.roll(g1, 2, axis=2)
    bases = rng.uniform(-1, 1, (b, 36, h, w, 2)).astype(np.float32)
    batch = {"flow_f": rng.normal(size=(b, h, w, 2)).astype(np.float32),
             "flow_b": rng.normal(size=(b, h, w, 2)).astype(np.float32),
             "depth1": rng.uniform(1, 5, (b, h, w)).astype(np.float32),
             "depth2": rng.uniform(1, 5, (b, h, w)).astype(np.float32)}
    variables = init_variables(model, jax.random.key(0))
    weights = {"motion": 1.0, "feature": 10.0, "smooth": 40.0}

    # The inputs are arguments, not constants of the program: XLA would otherwise spend seconds
    # constant-folding the loss's depth medians (a sort of every depth map) while compiling.
    @jax.jit
    def grads(params, g1, g2, bases, batch):
        def forward(p):
            return model.apply({"params": p, "batch_stats": variables["batch_stats"]}, g1, g2, bases,
                               train=True, mutable=["batch_stats"])

        out, vjp, mut = jax.vjp(forward, params, has_aux=True)
        # Cotangents of the total loss and of the feature term alone, pulled back in one
        # (vmapped) backward pass.
        ct_total = jax.grad(lambda o: losses.total_loss(o, batch, weights)[0])(out)
        ct_feat = jax.grad(losses.feature_loss)(out)
        stacked = jax.tree.map(lambda a, c: jnp.stack([a, c]), ct_total, ct_feat)
        (g,) = jax.vmap(vjp)(stacked)
        return jax.tree.map(lambda x: x[0], g), jax.tree.map(lambda x: x[1], g), mut

    g_total, g_feat, mut = grads(variables["params"], g1, g2, bases, batch)
    flat = jax.tree_util.tree_flatten_with_path(g_total)[0]
    dead = [jax.tree_util.keystr(p) for p, x in flat if not np.any(np.asarray(x))]
    assert not dead, f"parameters without gradient: {dead[:10]}"
    assert all(np.all(np.isfinite(np.asarray(x))) for _, x in flat)
    # The feature term alone reaches the shallow features, the mask net and every group's head.
    for path in (("features", "conv_0", "kernel"), ("mask_net", "conv_out", "bias"),
                 ("met", "head_homography", "out", "kernel"), ("met", "head_stochastic", "out", "kernel"),
                 ("met", "head_depth", "out", "kernel")):
        x = g_feat
        for k in path:
            x = x[k]
        assert np.any(np.asarray(x)), path
    # Train-mode BatchNorm: running mean <- 0.9 * 0 + 0.1 * batch mean (PyTorch momentum 0.1).
    k = np.asarray(variables["params"]["features"]["conv_0"]["kernel"])
    x = np.pad(np.concatenate([g1, g2])[..., 0], ((0, 0), (1, 1), (1, 1)))
    conv = sum(x[:, i:i + h, j:j + w, None] * k[i, j, 0] for i in range(3) for j in range(3))
    np.testing.assert_allclose(mut["batch_stats"]["features"]["bn_0"]["mean"], 0.1 * conv.mean((0, 1, 2)),
                               rtol=1e-4, atol=1e-6)
