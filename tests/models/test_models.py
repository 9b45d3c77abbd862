"""CamFlow network: parameter counts, call contract, batching, preprocessing, Swin internals.

Oracles: the released model's parameter count (docs/design.md, "Network") and its stored
buffers (relative-position index, shifted-window masks) from the in-repo parity fixture
(tests/fixtures/parity); numpy einsums and a numpy convolution; OpenCV's resize for
preprocessing; the symmetry of the two directions; adjoint identities and closed-form sums for the
hand-written gradients (conv3x3_s1, window_attention).
"""

from __future__ import annotations

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax.models import build_model, count_params, init_variables, preprocess, swin
from helpers import FIXTURES

# A released-format state dict at 128x256 (see tests/fixtures/parity/README.md).
PARITY_128 = FIXTURES / "parity" / "camflow_released_128x256.npz"

# Small but complete architecture for fast tests (same structure, fewer blocks per stage).
SMALL = {"depths": [2, 2, 2]}


def _shapes(model, h, w, n):
    g = jnp.zeros((1, h, w, 1))
    return jax.eval_shape(lambda: model.init(jax.random.key(0), g, g, jnp.zeros((n, h, w, 2))))


def test_param_count_matches_release():
    model = build_model({"group_sizes": [12, 12]})
    assert count_params(_shapes(model, 64, 64, 24)["params"]) == 2_594_689


def test_camflow_plus_count_is_release_plus_one_stochastic_group():
    # The depth group mirrors the stochastic one: count that group's parameters in the
    # released state dict (tokens, 3 class-attention blocks without the unused info_flatten,
    # norm and the two head layers) and add them once.
    d = np.load(PARITY_128)
    group = sum(d[k].size for k in d.files
                if k.startswith("sd/h_net.") and "noise" in k and "info_flatten" not in k)
    model = build_model({"group_sizes": [12, 12, 12]})
    assert count_params(_shapes(model, 64, 64, 36)["params"]) == 2_594_689 + group


@pytest.fixture(scope="module")
def plus_model():
    """CamFlow+ (3 groups) small variant with initialized variables at 64x128."""
    model = build_model({"group_sizes": [12, 12, 12], **SMALL})
    rng = np.random.default_rng(0)
    b, h, w = 2, 64, 128
    g1 = rng.standard_normal((b, h, w, 1)).astype(np.float32)
    g2 = np.roll(g1, 3, axis=2) + 0.1 * rng.standard_normal((b, h, w, 1)).astype(np.float32)
    bases = rng.uniform(-1, 1, (b, 36, h, w, 2)).astype(np.float32)
    bases_b = rng.uniform(-1, 1, (b, 36, h, w, 2)).astype(np.float32)
    variables = init_variables(model, jax.random.key(1), h, w)
    # Make the LayerScale gammas non-trivial so the class-attention branches matter.
    variables = jax.tree_util.tree_map_with_path(
        lambda p, x: 0.3 * jnp.ones_like(x) if "gamma" in str(p[-1]) else x, variables)
    apply = jax.jit(lambda v, a, c, bs, bb: model.apply(v, a, c, bs, bb))
    return model, variables, apply, (g1, g2, bases, bases_b)


def test_outputs_contract_and_basis_combination(plus_model):
    model, variables, apply, (g1, g2, bases, bases_b) = plus_model
    out = jax.tree.map(np.asarray, apply(variables, g1, g2, bases, bases_b))
    b, h, w = g1.shape[:3]
    shapes = {"flow_f": (b, h, w, 2), "flow_b": (b, h, w, 2), "logvar_f": (b, h, w, 1),
              "logvar_b": (b, h, w, 1), "coeffs_f": (b, 36), "coeffs_b": (b, 36),
              "trans_f": (b, h, w, 2), "trans_b": (b, h, w, 2), "feat1": (b, h, w, 1), "feat2": (b, h, w, 1)}
    assert {k: v.shape for k, v in out.items()} == shapes
    assert all(np.all(np.isfinite(v)) for v in out.values())
    assert out["logvar_f"].min() >= 0 and out["logvar_b"].min() >= 0
    # Flows are the coefficient-weighted sums of each direction's own bases (numpy oracle);
    # the translational part is the depth group's (last 12) share.
    np.testing.assert_allclose(out["flow_f"], np.einsum("bn,bnhwc->bhwc", out["coeffs_f"], bases), atol=1e-4)
    np.testing.assert_allclose(out["flow_b"], np.einsum("bn,bnhwc->bhwc", out["coeffs_b"], bases_b), atol=1e-4)
    np.testing.assert_allclose(out["trans_f"], np.einsum("bn,bnhwc->bhwc", out["coeffs_f"][:, 24:],
                                                         bases[:, 24:]), atol=1e-4)
    np.testing.assert_allclose(out["trans_b"], np.einsum("bn,bnhwc->bhwc", out["coeffs_b"][:, 24:],
                                                         bases_b[:, 24:]), atol=1e-4)
    assert np.abs(out["coeffs_f"]).max() > 0


def test_directions_share_weights_and_samples_are_independent(plus_model):
    model, variables, apply, (g1, g2, bases, bases_b) = plus_model
    out = apply(variables, g1, g2, bases, bases_b)
    # Swapping the images (and the direction's bases) swaps the directions exactly.
    sw = apply(variables, g2, g1, bases_b, bases)
    np.testing.assert_allclose(sw["flow_f"], out["flow_b"], atol=1e-4)
    np.testing.assert_allclose(sw["logvar_b"], out["logvar_f"], atol=1e-4)
    np.testing.assert_allclose(sw["coeffs_f"], out["coeffs_b"], rtol=1e-4, atol=1e-4)
    # In inference mode a sample's result does not depend on the rest of the batch.
    g1x, g2x = g1.copy(), g2.copy()
    g1x[0], g2x[0] = g2[0], -g1[0]
    other = apply(variables, g1x, g2x, bases, bases_b)
    np.testing.assert_allclose(other["flow_f"][1], out["flow_f"][1], atol=1e-4)
    np.testing.assert_allclose(other["logvar_b"][1], out["logvar_b"][1], atol=1e-4)
    assert np.abs(np.asarray(other["flow_f"][0] - out["flow_f"][0])).max() > 1e-3


def test_init_variables_follow_release_initialization():
    model = build_model({"group_sizes": [12, 12, 12]})
    v = init_variables(model, jax.random.key(0), 320, 576)
    ref = _shapes(model, 64, 64, 36)
    assert jax.tree.structure(v) == jax.tree.structure(ref)
    assert all(a.shape == b.shape for a, b in zip(jax.tree.leaves(v), jax.tree.leaves(ref)))
    p = v["params"]
    qkv = np.asarray(p["met"]["encoder_level_0"]["stage_0_block_0"]["attn"]["qkv"]["kernel"])
    assert abs(qkv.std() / np.sqrt(2 / 96) - 1) < 0.03  # Kaiming normal, fan-in 96
    conv = p["met"]["encoder_level_2"]["stage_0_down"]["conv_0"]["kernel"]  # 3x3x24x48
    assert abs(float(np.std(conv)) / np.sqrt(2 / 216) - 1) < 0.05
    assert not np.any(p["met"]["encoder_level_0"]["stage_0_block_0"]["attn"]["qkv"]["bias"])
    bias = np.asarray(p["mask_net"]["conv_4"]["bias"])  # conv 74 -> 8, U(+-1/sqrt(666))
    assert np.abs(bias).max() <= 1 / np.sqrt(666) and np.abs(bias).max() > 0
    assert np.all(p["met"]["ca_depth_level_1"]["gamma_1"] == np.float32(1e-6))
    assert abs(float(np.std(p["met"]["tokens_depth"])) - 0.02) < 0.002
    assert np.all(p["met"]["norm_depth"]["scale"] == 1)
    assert np.all(v["batch_stats"]["features"]["bn_0"]["var"] == 1)
    again = init_variables(model, jax.random.key(0))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(v), jax.tree.leaves(again)))


def test_shared_bases_and_no_depth_group():
    # 8-basis ablation: one group, 64x64 (the coarsest maps are a single unshifted window).
    model = build_model({"group_sizes": [8], **SMALL})
    rng = np.random.default_rng(2)
    g = rng.standard_normal((1, 64, 64, 1)).astype(np.float32)
    bases = rng.uniform(-1, 1, (8, 64, 64, 2)).astype(np.float32)
    variables = init_variables(model, jax.random.key(0))
    apply = jax.jit(model.apply)  # one jitted function for both sets of weights: one compile
    out = apply(variables, g, -g, bases)
    assert out["coeffs_f"].shape == (1, 8)
    assert np.all(np.asarray(out["trans_f"]) == 0)
    np.testing.assert_allclose(out["flow_b"], np.einsum("bn,nhwc->bhwc", out["coeffs_b"], bases), atol=1e-4)
    # The release's init starts far from identity; identity_motion zeroes only the heads' outputs.
    assert float(np.abs(out["flow_f"]).mean()) > 1.0
    ident = init_variables(model, jax.random.key(0), identity_motion=True)
    out = apply(ident, g, -g, bases)
    assert np.all(np.asarray(out["flow_f"]) == 0) and np.all(np.asarray(out["flow_b"]) == 0)
    head = ident["params"]["met"]["head_homography"]
    assert not np.any(head["out"]["kernel"]) and np.std(np.asarray(head["hidden"]["kernel"])) > 0


def test_bfloat16_compute_close_to_float32(plus_model):
    model, variables, apply, (g1, g2, bases, bases_b) = plus_model
    m16 = build_model({"group_sizes": [12, 12, 12], **SMALL, "precision": "bfloat16"})
    a = apply(variables, g1, g2, bases, bases_b)
    b = jax.jit(m16.apply)(variables, g1, g2, bases, bases_b)
    assert b["flow_f"].dtype == jnp.float32 and b["logvar_f"].dtype == jnp.float32
    err = float(jnp.abs(a["flow_f"] - b["flow_f"]).max())
    assert np.isfinite(err) and err < 0.05 * float(jnp.abs(a["flow_f"]).max()) + 1e-3


def test_bad_inputs_raise_clear_errors():
    model = build_model({"group_sizes": [12, 12], **SMALL})
    g = jnp.zeros((1, 64, 64, 1))
    bases = jnp.zeros((24, 64, 64, 2))
    variables = _shapes(model, 64, 64, 24)
    with pytest.raises(ValueError, match="multiples of 64"):
        jax.eval_shape(model.apply, variables, jnp.zeros((1, 64, 96, 1)), jnp.zeros((1, 64, 96, 1)),
                       jnp.zeros((24, 64, 96, 2)))
    with pytest.raises(ValueError, match="needs? 24"):
        jax.eval_shape(model.apply, variables, g, g, jnp.zeros((12, 64, 64, 2)))
    with pytest.raises(ValueError, match="gray2"):
        jax.eval_shape(model.apply, variables, g, jnp.zeros((2, 64, 64, 1)), bases)
    with pytest.raises(ValueError, match=r"\[B, H, W, 1\]"):
        jax.eval_shape(model.apply, variables, jnp.zeros((1, 64, 64, 3)), jnp.zeros((1, 64, 64, 3)), bases)
    with pytest.raises(ValueError, match="group_sizes"):
        build_model({"dtype": "float32"})
    with pytest.raises(ValueError, match="dtype"):
        build_model({"group_sizes": [12], "dtype": "int8"})
    with pytest.raises(ValueError, match="precision"):
        build_model({"group_sizes": [12], "precision": "tf32"})
    with pytest.raises(ValueError, match="layer_depth"):
        build_model({"group_sizes": [12], "layer_depth": [2, 2, 1]})


def test_model_config_is_the_single_source_of_architecture_fields():
    import dataclasses

    from camflow_jax import configs
    from camflow_jax.models import FIELDS, NETWORK_FIELDS, ModelConfig, checkpoint

    # A training config's model section is the network fields plus the input size.
    assert set(configs.load("default").model.keys()) == set(NETWORK_FIELDS) | {"height", "width"}
    cfg = ModelConfig(group_sizes=(12, 12, 12), embed_dim=8, depths=(1, 1, 1), num_heads=(2, 4, 8))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.embed_dim = 16
    model = build_model(cfg)
    assert model.config == cfg and build_model(cfg.to_dict()).config == cfg and hash(cfg) == hash(model.config)
    params = _shapes(model, 64, 64, 36)["params"]
    assert params["met"]["tokens_depth"].shape == (12, 8 * 2 ** 2)  # embed_dim x 2^(levels - 1)
    # depths (1, 1, 1): one block per stage; layer_depth (3, 2, 1): 3 stages at the finest level.
    assert sorted(params["met"]["encoder_level_2"]) == ["stage_0_block_0", "stage_0_down", "stage_1_block_0",
                                                        "stage_1_down", "stage_2_block_0"]
    assert sorted(params["met"]["encoder_level_0"]) == ["stage_0_block_0"]
    # model.json files: the shipped one and a minimal early one read back through ModelConfig.
    shipped = checkpoint.read_model_config(checkpoint.pretrained_path())
    # (the shipped one was written before the precision policy: it says dtype float32 and
    # reads as the default policy, 'exact'; and before the contrast floor: it gets the default)
    assert ModelConfig.from_dict(shipped).to_dict() == {
        **{k: shipped[k] for k in FIELDS if k not in ("precision", "contrast_floor")},
        "precision": "exact", "contrast_floor": ModelConfig().contrast_floor}
    assert ModelConfig.from_dict({"group_sizes": [12, 12], "height": 320, "dtype": None}) == ModelConfig()
    with pytest.raises(ValueError, match="group_names"):
        ModelConfig(group_sizes=(12, 12), group_names=("stochastic", "homography"))
    for bad in (-0.1, float("nan"), "dim"):
        with pytest.raises(ValueError, match="contrast_floor must be a finite number >= 0"):
            ModelConfig(contrast_floor=bad)


def test_preprocess_matches_release_pipeline_with_opencv():
    rng = np.random.default_rng(6)
    rgb = rng.integers(0, 256, (2, 90, 160, 3), dtype=np.uint8)
    ours = np.asarray(preprocess(rgb, 64, 128))
    mean = np.array([118.93, 113.97, 102.60]).reshape(1, 1, 3)
    std = np.array([69.85, 68.81, 72.45]).reshape(1, 1, 3)
    for i in range(2):
        bgr = rgb[i, ..., ::-1].astype(np.float32)  # what cv2.imread gives the release
        gray = np.mean((bgr - mean) / std, axis=2).astype(np.float32)
        ref = cv2.resize(gray, (128, 64), interpolation=cv2.INTER_LINEAR)
        np.testing.assert_allclose(ours[i, ..., 0], ref, atol=2e-4)
    np.testing.assert_allclose(np.asarray(preprocess(rgb[..., ::-1], 64, 128, "bgr")), ours, atol=1e-6)
    assert preprocess(rgb[0], 64, 128).shape == (64, 128, 1)
    with pytest.raises(ValueError, match="NaN"):
        preprocess(np.full((1, 8, 8, 3), np.nan, np.float32), 8, 8)
    with pytest.raises(ValueError, match=r"\[B, H, W, 3\]"):
        preprocess(np.zeros((1, 8, 8)), 8, 8)


def test_window_partition_round_trip_and_order():
    x = jnp.arange(2 * 16 * 24 * 3, dtype=jnp.float32).reshape(2, 16, 24, 3)
    w = swin.window_partition(x, 8)
    assert w.shape == (2, 6, 64, 3)
    # Window 1 is rows 0..7, columns 8..15; its tokens are row-major.
    np.testing.assert_array_equal(w[0, 1, 9], x[0, 1, 9])
    np.testing.assert_array_equal(swin.window_merge(w, 8, 16, 24), x)


def test_static_attention_tables_match_released_buffers():
    d = np.load(PARITY_128)
    np.testing.assert_array_equal(
        swin.relative_position_index(8), d["sd/h_net.encoder_layers.0.layer.0.attn.relative_position_index"])
    # Shifted blocks of the finest encoder at 128x256: 24 channels at 64x128, 48 at 32x64, 96 at 16x32.
    for k, (h, w) in {1: (64, 128), 4: (32, 64), 7: (16, 32)}.items():
        ref = d[f"sd/h_net.encoder_layers.0.layer.{k}.attn_mask"].astype(np.float32)
        np.testing.assert_array_equal(swin.shifted_window_mask(h, w, 8, 4), ref)
    # Maps no larger than the window are a single unshifted window (the release's rule).
    assert swin.window_config(8, 16, 8, 4) == (8, 0)


def _np_conv3x3(x, k):
    """Cross-correlation, zero padding 1, stride 1, NHWC/HWIO, written out tap by tap."""
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = x.shape[1:3]
    return sum(np.einsum("bhwi,io->bhwo", xp[:, i:i + h, j:j + w], k[i, j]) for i in range(3) for j in range(3))


def test_conv3x3_s1_value_and_gradients_against_numpy():
    # The input's gradient is hand-written (a flipped-kernel forward conv): check the forward
    # against a numpy correlation and both gradients against the adjoint identities of that
    # numpy operator, <vjp_x(g), u> = <g, conv(u, k)> and <vjp_k(g), v> = <g, conv(x, v)>.
    from camflow_jax.models.layers import conv3x3_s1
    r = np.random.default_rng(0)
    x, k = r.normal(size=(2, 7, 9, 5)), r.normal(size=(3, 3, 5, 4))
    g, u, v = r.normal(size=(2, 7, 9, 4)), r.normal(size=x.shape), r.normal(size=k.shape)
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    y, vjp = jax.vjp(conv3x3_s1, f32(x), f32(k))
    np.testing.assert_allclose(np.asarray(y), _np_conv3x3(x, k), rtol=1e-4, atol=1e-4)
    dx, dk = (np.asarray(a, np.float64) for a in vjp(f32(g)))
    np.testing.assert_allclose(np.sum(dx * u), np.sum(g * _np_conv3x3(u, k)), rtol=1e-4)
    np.testing.assert_allclose(np.sum(dk * v), np.sum(g * _np_conv3x3(x, v)), rtol=1e-4)
    # Also per element: the gradient of y[b, i, j, o] wrt x is the kernel placed around (i, j).
    e = np.zeros_like(g)
    e[1, 0, 4, 2] = 1.0
    dx_e = np.asarray(vjp(f32(e))[0])
    xp_ref = np.zeros((2, 9, 11, 5))
    xp_ref[1, 0:3, 4:7] = k[:, :, :, 2]
    ref = xp_ref[:, 1:-1, 1:-1]
    np.testing.assert_allclose(dx_e, ref, rtol=1e-5, atol=1e-6)


def _attention_np(q, k, v, bias, mask):
    logits = np.einsum("bwhnd,bwhmd->bwhnm", q, k) + bias
    if mask is not None:
        logits = logits + mask[None, :, None]
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("bwhnm,bwhmd->bwhnd", e / e.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("with_mask", [True, False])
def test_window_attention_value_and_gradients_against_float64_finite_differences(with_mask):
    r = np.random.default_rng(1)
    shape = (2, 3, 2, 5, 3)  # [B, nW, heads, N, d]
    q, k, v = (r.normal(size=shape) for _ in range(3))
    bias = r.normal(size=(2, 5, 5))
    mask = np.where(r.uniform(size=(3, 5, 5)) < 0.3, -100.0, 0.0) if with_mask else None
    g = r.normal(size=shape)
    f32 = lambda x: None if x is None else jnp.asarray(x, jnp.float32)  # noqa: E731
    out, vjp = jax.vjp(lambda q, k, v, b: swin.window_attention(q, k, v, b, f32(mask)), f32(q), f32(k), f32(v), f32(bias))
    np.testing.assert_allclose(np.asarray(out), _attention_np(q, k, v, bias, mask), rtol=1e-5, atol=1e-6)
    # outside differentiation the value is the plain formulation's, bit for bit (inference does
    # not change); under it, the saved-probabilities forward agrees to float32 rounding (above)
    def plain(q, k, v, b, m):
        logits = jnp.einsum("bwhnd,bwhmd->bwhnm", q, k).astype(jnp.float32) + b
        return swin.softmax_attend(logits if m is None else logits + m[None, :, None], v)

    args = (f32(q), f32(k), f32(v), f32(bias), f32(mask))
    assert np.array_equal(np.asarray(jax.jit(swin.window_attention)(*args)), np.asarray(jax.jit(plain)(*args)))
    grads = vjp(f32(g))
    eps = 1e-6
    for i, x in enumerate((q, k, v, bias)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            args = [q, k, v, bias]
            hi, lo = x.copy(), x.copy()
            hi[idx] += eps
            lo[idx] -= eps
            args[i] = hi
            f_hi = np.sum(_attention_np(*args, mask) * g)
            args[i] = lo
            num[idx] = (f_hi - np.sum(_attention_np(*args, mask) * g)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(grads[i]), num, rtol=2e-4, atol=2e-5, err_msg=f"argument {i}")


def test_window_attention_gradients_keep_the_compute_dtype():
    r = np.random.default_rng(2)
    shape = (1, 2, 2, 4, 2)
    q, k, v = (jnp.asarray(r.normal(size=shape), jnp.bfloat16) for _ in range(3))
    bias = jnp.asarray(r.normal(size=(2, 4, 4)), jnp.float32)
    out, vjp = jax.vjp(lambda q, k, v, b: swin.window_attention(q, k, v, b, None), q, k, v, bias)
    grads = vjp(jnp.ones_like(out))
    assert out.dtype == jnp.bfloat16
    assert [x.dtype for x in grads] == [jnp.bfloat16] * 3 + [jnp.float32]
    ref = jax.vjp(lambda q, k, v, b: swin.window_attention(q, k, v, b, None),
                  *(x.astype(jnp.float32) for x in (q, k, v)), bias)[1](jnp.ones(shape, jnp.float32))
    for a, b in zip(grads, ref):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b), rtol=0.05, atol=0.05)


def test_contrast_floor_stretches_dim_pairs_to_the_floor_and_leaves_others_bit_for_bit():
    from camflow_jax.models.camflow import MAX_CONTRAST_GAIN, apply_contrast_floor

    rng = np.random.default_rng(3)
    base = rng.normal(0.0, 1.0, (3, 16, 24, 1)).astype(np.float32)
    # a dim dark pair (spread 0.1, mean -1.3), a normal pair (spread 1), a nearly flat pair
    scales, means = np.array([0.1, 1.0, 0.01]), np.array([-1.3, 0.2, 0.0])
    g1 = (base * scales[:, None, None, None] + means[:, None, None, None]).astype(np.float32)
    g2 = np.roll(g1, 2, axis=2)  # the same pixels moved: the pair's statistics are g1's
    o1, o2 = (np.asarray(x) for x in apply_contrast_floor(jnp.asarray(g1), jnp.asarray(g2), 0.5))
    both = np.concatenate([g1, g2], -1).reshape(3, -1).astype(np.float64)
    m, s = both.mean(1), both.std(1)
    gain = np.clip(0.5 / s, 1.0, MAX_CONTRAST_GAIN)
    for i in range(3):  # numpy closed form: (x - m) g + m / g
        np.testing.assert_allclose(o1[i], (g1[i] - m[i]) * gain[i] + m[i] / gain[i], atol=1e-5)
        np.testing.assert_allclose(o2[i], (g2[i] - m[i]) * gain[i] + m[i] / gain[i], atol=1e-5)
    out = np.concatenate([o1, o2], -1).reshape(3, -1)
    assert abs(out[0].std() - 0.5) < 1e-4  # stretched to the floor, mean pulled in by the gain
    assert abs(out[0].mean() - m[0] / gain[0]) < 1e-5 and gain[0] == pytest.approx(0.5 / s[0])
    assert np.array_equal(o1[1], g1[1]) and np.array_equal(o2[1], g2[1])  # above the floor: untouched
    assert gain[2] == MAX_CONTRAST_GAIN and abs(out[2].std() - MAX_CONTRAST_GAIN * s[2]) < 1e-4  # capped
    # one map for both images: their difference scales by the gain (brightness constancy kept)
    np.testing.assert_allclose(o2[0] - o1[0], (g2[0] - g1[0]) * gain[0], atol=1e-5)


def test_a_dark_pair_gets_about_the_motion_of_its_bright_original():
    # The renderer's exact flow is the oracle: the shipped network on two plain synthetic scenes,
    # bright and darkened to a fifth, with the contrast floor (the default) and without it.
    from camflow_jax.data.synthetic import SyntheticScenes
    from camflow_jax.predictor import Predictor

    on = Predictor.from_pretrained()
    off = Predictor(on.model, on.variables, on.static_bases, on.model_config, contrast_floor=0.0)
    assert off.model.config.contrast_floor == 0.0 and on.model.config.contrast_floor > 0
    scenes = SyntheticScenes(seed=11, num_samples=6, height=128, width=256)
    rows = [scenes[i] for i in (0, 5)]
    assert [r["category"] for r in rows] == ["RE", "RE"]
    dark = lambda x: np.round(x.astype(np.float32) * 0.2).astype(np.uint8)  # noqa: E731

    def epe(pred, r, f=lambda x: x):
        flow = pred(f(r["img1"]), f(r["img2"]), refine=False)["flow_f"]
        return float(np.hypot(*(flow - r["flow_f"]).transpose(2, 0, 1)).mean())

    bright = np.mean([epe(on, r) for r in rows])
    assert np.mean([epe(off, r) for r in rows]) == pytest.approx(bright, abs=1e-4)  # bright: no change
    assert np.mean([epe(off, r, dark) for r in rows]) > 1.5 * bright  # the failure the floor is for
    assert np.mean([epe(on, r, dark) for r in rows]) < 1.25 * bright
