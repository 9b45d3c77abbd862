"""Accelerator readiness on a CPU: export for GPU/TPU, and bfloat16 compute against float32.

The code lowers for GPU and TPU, checked without either: ``jax.export`` with
``platforms=["cuda"]`` / ``["tpu"]`` of the functions that run there.

(a) the sharded train step, built as the trainer builds it, over a 4-device mesh (4 CPU devices
forced in a subprocess: the flag must be set before jax starts), with the trainer's shardings;
(b) the jitted functions the Predictor calls for a pair with refinement (network forward with
and without confidence, the per-direction refinement, the homography fit).
A CPU-only custom call, a float64 leak or a host callback would fail or show up here.
Under the 'exact' precision policy every dot and convolution of those exported modules,
the refinement's and the homography fit's included, carries precision HIGHEST (no TF32 on a
GPU, no single bfloat16 pass on a TPU).

The bfloat16 policy (``ModelConfig.precision``, ``Predictor(precision=)``,
``config.model.precision``): weights stay float32, outputs are float32, and results stay close
to float32's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from camflow_jax.data.synthetic.scenes import SyntheticScenes
from camflow_jax.models import checkpoint
from camflow_jax.predictor import Predictor
from camflow_jax.training import feed
from helpers import ROOT, with_devices
from tools.bench import benchmarking

PLATFORMS = ("cuda", "tpu")

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


# Runs in a subprocess with 4 forced CPU devices; prints one JSON line.
_TRAIN_EXPORT = r"""
import json, sys
import jax
from jax.sharding import PartitionSpec as P
from camflow_jax.training import feed
from tools.bench import accel
from tools.bench import benchmarking
config = benchmarking.load_config("camflow_jax/configs/smoke.py", 64, 128, 4, arch="config")
config.model.depths, config.model.num_heads = (1, 1, 1), (1, 1, 1)   # same code, fewer blocks
config.model.precision = sys.argv[1]
t = benchmarking.build_train(config)                  # the trainer's own setup functions
host = next(iter(feed.make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
batch = t["to_global"](host)
mesh = batch["img1"].sharding.mesh
res = {"devices": jax.device_count(), "batch_spec": str(batch["img1"].sharding.spec)}
for platform in ("cuda", "tpu"):
    e = accel.export_for(t["p_train"], platform, t["state"], batch, t["static"])
    shardings = jax.tree.unflatten(e.in_tree, list(e.in_shardings_jax(mesh)))[0]  # (args, kwargs)
    res[platform] = {
        "platforms": list(e.platforms), "nr_devices": e.nr_devices,
        "batch_specs": sorted({str(s.spec) for s in jax.tree.leaves(shardings[1])}),
        "state_specs": sorted({str(s.spec) for s in jax.tree.leaves(shardings[0])}),
        "x64": accel.uses_float64(e),
        "custom_calls": sorted(set(l.split('@')[1].split('(')[0] for l in e.mlir_module().splitlines()
                                   if 'stablehlo.custom_call @' in l)),
        "products": [("HIGHEST" in l) for l in e.mlir_module().splitlines()
                     if "stablehlo.dot_general" in l or "stablehlo.convolution" in l],
    }
print(json.dumps(res))
"""


@pytest.mark.parametrize("precision", ["exact", pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_sharded_train_step_exports_for_gpu_and_tpu(tmp_path, precision):
    env = dict(os.environ, XLA_FLAGS=with_devices(4), JAX_PLATFORMS="cpu",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _TRAIN_EXPORT, precision], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["devices"] == 4 and res["batch_spec"] == "P('data',)"
    for platform in PLATFORMS:
        r = res[platform]
        assert r["platforms"] == [platform] and r["nr_devices"] == 4, r
        # The trainer's layout survives the export: the batch split over the data axis, the
        # state (params, batch stats, optimizer) replicated.
        assert r["batch_specs"] == ["P('data',)"], r
        assert r["state_specs"] == ["P()"], r
        assert r["x64"] == [], r
        # Only XLA's own sharding annotations: no CPU-only kernels (LAPACK, ducc FFT, callbacks).
        assert not [c for c in r["custom_calls"] if "lapack" in c or "cpu" in c.lower() or "callback" in c], r
        # the train step's products, forward and backward, losses and warps included
        assert len(r["products"]) > 100 and (all(r["products"]) if precision == "exact" else not all(r["products"])), r


@pytest.fixture(scope="module")
def small_predictor():
    """The shipped weights at a 64x128 network size (same code as 128x256, a quarter of the work)."""
    model, variables, _, cfg = checkpoint.load_model(checkpoint.pretrained_path(checkpoint.PRETRAINED))
    return Predictor(model, variables, None, {**cfg, "height": 64, "width": 128})


def _pair():
    s = SyntheticScenes(seed=1000, num_samples=1, height=64, width=128)[0]
    return s["img1"], s["img2"], {"depth1": s["depth1"], "depth2": s["depth2"], "intrinsics": s["K"]}


def test_predictor_functions_export_for_gpu_and_tpu(small_predictor):
    from tools.bench import accel
    a, b, cam = _pair()
    cached = small_predictor.refiner._static_cache.as_dict()
    # a working size below the input's, so the refinement's detail level is exported too
    from camflow_jax.refine import RefineConfig

    cfg = RefineConfig(max_size=64, detail_size=128)
    assert small_predictor.refiner.detail_size(64, 128, cfg) == (64, 128)
    calls = accel.capture_jitted_calls(small_predictor, a, b, **cam, refine=cfg)
    # the recorders answer with zeros: the predictor's caches must come back as they were
    assert small_predictor.refiner._static_cache.as_dict().keys() == cached.keys()
    assert all(small_predictor.refiner._static_cache.as_dict()[k] is v for k, v in cached.items())
    calls += [c for c in accel.capture_jitted_calls(small_predictor, a, b, **cam, refine=False, confidence=True)
              if c.name == "_forward"]
    names = [c.name for c in calls]
    # forward (flows-only); the static bases' pyramid (cached per size: the capture empties the
    # cache); the pair's image pyramids and detail stacks; each direction's basis set and starts,
    # then its refinement (one signature each); the forward flow's homography; forward with confidence
    assert names == ["_forward", "_basis_pyramid", "_refine_images", "_direction_bases", "_refine_direction",
                     "_direction_bases", "_refine_direction", "_flow_homography", "_forward"], names
    assert [c.kwargs.get("confidence") for c in calls if c.name == "_forward"] == [False, True]
    seen, products = set(), {}
    for c in calls:
        key = (c.name, str(c.fn.trace(*c.args, **c.kwargs).jaxpr.in_avals), repr(sorted(c.kwargs.items())))
        if key in seen:  # the two images / directions share one signature (one compilation)
            continue
        seen.add(key)
        for platform in PLATFORMS:
            e = accel.export_for(c.fn, platform, *c.args, **c.kwargs)
            assert e.platforms == (platform,) and e.nr_devices == 1
            assert accel.uses_float64(e) == [], (c.name, platform)
            text = e.mlir_module()
            assert "lapack" not in text and "callback" not in text, (c.name, platform)
            # the shipped model's policy is 'exact' (its model.json predates the field): every
            # product of the network, the refinement and the homography fit at HIGHEST
            lines = [x for x in text.splitlines() if "stablehlo.dot_general" in x or "stablehlo.convolution" in x]
            assert all("HIGHEST" in x for x in lines), (c.name, platform, [x for x in lines if "HIGHEST" not in x][:3])
            products[c.name] = products.get(c.name, 0) + len(lines)
    assert small_predictor.precision == "exact"
    assert products["_forward"] > 100, products
    assert products["_refine_direction"] > 0 and products["_flow_homography"] > 0, products
    assert len(seen) == 7  # forward x2, static bases pyramid, images, a direction's bases and solve, homography


@pytest.mark.filterwarnings("ignore:model has depth-translational bases")
def test_the_constant_depth_calls_export_for_gpu_and_tpu(small_predictor):
    """Without depth the Predictor builds the constant depth's basis sets in calls of their own
    (kept per size: the capture empties the caches) and the forward and each direction's basis
    call take them built; those calls lower for accelerators too."""
    from tools.bench import accel

    a, b, _ = _pair()
    calls = accel.capture_jitted_calls(small_predictor, a, b, forward_only=True)
    assert [c.name for c in calls] == ["_basis_set", "_forward", "_basis_pyramid", "_refine_images", "_depth_pyramid",
                                       "_direction_bases", "_refine_direction", "_flow_homography"]
    assert calls[1].kwargs["full_bases"] is True
    for c in calls:
        if c.name not in ("_basis_set", "_forward", "_depth_pyramid", "_direction_bases"):
            continue  # the same programs as with depth (the test above)
        for platform in PLATFORMS:
            e = accel.export_for(c.fn, platform, *c.args, **c.kwargs)
            assert e.platforms == (platform,) and accel.uses_float64(e) == [], (c.name, platform)
            assert "lapack" not in e.mlir_module() and "callback" not in e.mlir_module(), (c.name, platform)


def test_captured_calls_are_the_ones_the_predictor_runs(small_predictor, monkeypatch):
    """The capture answers with zeros without running anything; the functions it records,
    run for real, give the Predictor's own flows (an independent check that the export above
    covered what the Predictor computes).

    The Predictor runs with this package's caches off, so its forward is the plain ``jax.jit``
    the capture records (an :class:`~camflow_jax.compilation.exported.ExportedJit` would compile
    its exported twin, a second compilation of the same network; compilation/test_cache.py holds the
    two bit-identical): what is checked is that the recorded function and arguments, and the
    Predictor's own pre- and post-processing around them, give its flows."""
    from camflow_jax.compilation import cache
    from tools.bench import accel

    monkeypatch.setenv(cache.OPT_OUT_ENV, "1")
    a, b, cam = _pair()
    calls = accel.capture_jitted_calls(small_predictor, a, b, **cam, refine=False)
    assert [c.name for c in calls] == ["_forward"]
    out = calls[0].fn(*calls[0].args, **calls[0].kwargs)
    ref = small_predictor(a, b, **cam, refine=False)
    np.testing.assert_allclose(np.asarray(out["flow_f"])[0], ref["flow_f"], atol=1e-5)  # a batch of one
    assert small_predictor._forward.how()[-1] == "jit"  # the recorded function itself ran
    assert "logvar_f" not in ref and "logvar_f" not in out  # flows-only by default


@pytest.fixture(scope="module")
def small_predictor_bf16(small_predictor):
    p = small_predictor
    return Predictor(p.model, p.variables, p.static_bases, p.model_config, precision="bfloat16")


@pytest.mark.slow  # compiles the bf16 network (225 s at load 9 on 2 cores); tests/models/test_models.py has a fast sibling
def test_bf16_inference_agrees_with_float32(small_predictor, small_predictor_bf16):
    p32, p16 = small_predictor, small_predictor_bf16
    assert p16.model.config.dtype == "bfloat16" and p32.model.config.dtype == "float32"
    # The weights are shared and stay float32: bf16 is a compute dtype only.
    assert {x.dtype for x in jax.tree.leaves(p16.variables)} == {jnp.dtype(jnp.float32)}
    src = SyntheticScenes(seed=1000, num_samples=4, height=64, width=128)
    gaps, errs32, errs16 = [], [], []
    for i in range(len(src)):
        s = src[i]
        cam = dict(depth1=s["depth1"], depth2=s["depth2"], intrinsics=s["K"])
        a = p32(s["img1"], s["img2"], **cam, refine=False, confidence=True)
        b = p16(s["img1"], s["img2"], **cam, refine=False, confidence=True)
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


def test_predictor_dtype_is_validated(small_predictor):
    p32 = small_predictor
    with pytest.raises(ValueError, match="dtype"):
        Predictor(p32.model, p32.variables, p32.static_bases, p32.model_config, dtype="int8")
    with pytest.raises(ValueError, match="precision"):
        Predictor(p32.model, p32.variables, p32.static_bases, p32.model_config, precision="tf32")


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
        host = next(iter(feed.make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
        state, out = t["p_train"](t["state"], t["to_global"](host), t["static"])
        terms[dtype] = {k: float(v) for k, v in jax.device_get(out).items()}
        params[dtype] = state["params"]
    assert {x.dtype for x in jax.tree.leaves(params["bfloat16"])} == {jnp.dtype(jnp.float32)}
    f32, b16 = terms["float32"], terms["bfloat16"]
    assert all(np.isfinite(v) for v in b16.values()), b16
    assert abs(b16["loss"] - f32["loss"]) <= 0.02 * abs(f32["loss"]), (f32, b16)
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), params["float32"], params["bfloat16"]))
    assert max(moved) > 0
