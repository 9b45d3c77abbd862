"""bfloat16 compute (``ModelConfig.dtype``, ``Predictor(dtype=)``, ``config.model.dtype``) against
the float32 reference: weights stay float32, outputs are float32, and the results stay close."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax import benchmarking, checkpoint, trainer
from camflow_jax.data.synthetic import SyntheticScenes
from camflow_jax.predictor import Predictor

# bf16 against float32 with the shipped weights on held-out synthetic pairs (seed 1000) at
# 64x128. Measured (2-core CPU, pairs 0-5, both directions): the mean endpoint distance between
# the two flows is 0.01-0.38 px per pair and direction (mean 0.09), while both are 2.2-3.3 px
# from the ground truth and their mean errors against it differ by 0.003 px. bf16 keeps 8
# mantissa bits (relative rounding 2^-9); the attention softmax and the coefficient heads
# amplify that into a few percent of the flow, not into a change of accuracy. Bounds, with
# room for other CPUs' summation orders: any pair and direction below 0.5 px, the mean below
# 0.2 px, and the mean error against the ground truth within 0.1 px of float32's.
BF16_MAX_GAP_PX, BF16_MEAN_GAP_PX, BF16_ACCURACY_PX = 0.5, 0.2, 0.1


def _epe(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b), axis=-1).mean())


@pytest.fixture(scope="module")
def shipped_64x128():
    model, variables, _, cfg = checkpoint.load_model(checkpoint.pretrained_path(checkpoint.PRETRAINED))
    cfg = {**cfg, "height": 64, "width": 128}
    return (Predictor(model, variables, None, cfg, refine=False),
            Predictor(model, variables, None, cfg, refine=False, dtype="bfloat16"))


def test_bf16_inference_agrees_with_float32(shipped_64x128):
    p32, p16 = shipped_64x128
    assert p16.model.config.dtype == "bfloat16" and p32.model.config.dtype == "float32"
    # The weights are shared and stay float32: bf16 is a compute dtype only.
    assert {x.dtype for x in jax.tree.leaves(p16.variables)} == {jnp.dtype(jnp.float32)}
    src = SyntheticScenes(seed=1000, num_samples=4, height=64, width=128)
    gaps, errs32, errs16 = [], [], []
    for i in range(len(src)):
        s = src[i]
        cam = dict(depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"])
        a = p32(s["img1"], s["img2"], **cam, confidence=True)
        b = p16(s["img1"], s["img2"], **cam, confidence=True)
        for k in ("flow_f", "flow_b", "logvar_f", "coeffs_f"):
            assert b[k].dtype == np.float32 and np.all(np.isfinite(b[k])), k
        gaps += [_epe(a["flow_f"], b["flow_f"]), _epe(a["flow_b"], b["flow_b"])]
        errs32.append(_epe(a["flow_f"], s["flow_f"]))
        errs16.append(_epe(b["flow_f"], s["flow_f"]))
        # bf16 must really have run: identical outputs would mean the dtype was ignored.
        assert not np.array_equal(a["flow_f"], b["flow_f"])
    assert max(gaps) < BF16_MAX_GAP_PX and np.mean(gaps) < BF16_MEAN_GAP_PX, gaps
    assert abs(np.mean(errs16) - np.mean(errs32)) < BF16_ACCURACY_PX, (errs32, errs16)
    assert min(errs32) > 5 * BF16_MEAN_GAP_PX, errs32  # the bounds are small next to the model's error


def test_predictor_dtype_is_validated(shipped_64x128):
    p32, _ = shipped_64x128
    with pytest.raises(ValueError, match="dtype"):
        Predictor(p32.model, p32.variables, p32.static_bases, p32.model_config, dtype="int8")


@pytest.mark.slow
def test_bf16_train_step_runs_and_its_loss_is_close_to_float32():
    """One real train step (the trainer's setup, smoke config) in each dtype from the same state
    and batch: the bf16 loss terms are finite and within 2% of float32's, the parameters stay
    float32 and the update differs (bf16 really ran)."""
    terms, params = {}, {}
    for dtype in ("float32", "bfloat16"):
        config = benchmarking.load_config("camflow_jax/configs/smoke.py", 64, 128, 2, dtype, arch="config")
        config.model.depths, config.model.num_heads = (1, 1, 1), (1, 1, 1)
        t = benchmarking.build_train(config)
        host = next(iter(trainer.make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
        state, out = t["p_train"](t["state"], t["to_global"](host), t["static"])
        terms[dtype] = {k: float(v) for k, v in jax.device_get(out).items()}
        params[dtype] = state["params"]
    assert {x.dtype for x in jax.tree.leaves(params["bfloat16"])} == {jnp.dtype(jnp.float32)}
    f32, b16 = terms["float32"], terms["bfloat16"]
    assert all(np.isfinite(v) for v in b16.values()), b16
    assert abs(b16["loss"] - f32["loss"]) <= 0.02 * abs(f32["loss"]), (f32, b16)
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), params["float32"], params["bfloat16"]))
    assert max(moved) > 0
