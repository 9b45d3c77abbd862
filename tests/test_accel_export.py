"""The code lowers for GPU and TPU, checked without either: ``jax.export`` with
``platforms=["cuda"]`` / ``["tpu"]`` of the functions that run there.

(a) the sharded train step, built as the trainer builds it, over a 4-device mesh (4 CPU devices
forced in a subprocess: the flag must be set before jax starts), with the trainer's shardings;
(b) the jitted functions the Predictor calls for a pair with refinement (network forward with
and without confidence, the per-direction refinement, the homography fit).
A CPU-only custom call, a float64 leak or a host callback would fail or show up here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = ("cuda", "tpu")

# Runs in a subprocess with 4 forced CPU devices; prints one JSON line.
_TRAIN_EXPORT = r"""
import json, sys
import jax
from jax.sharding import PartitionSpec as P
from camflow_jax import accel, benchmarking, trainer

config = benchmarking.load_config("camflow_jax/configs/smoke.py", 64, 128, 4, arch="config")
config.model.depths, config.model.num_heads = (1, 1, 1), (1, 1, 1)   # same code, fewer blocks
config.model.dtype = sys.argv[1]
t = benchmarking.build_train(config)                  # the trainer's own setup functions
host = next(iter(trainer.make_train_dataset(config, t["source"], read_threads=0, prefetch=1)))
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
    }
print(json.dumps(res))
"""


@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=pytest.mark.slow)])
def test_sharded_train_step_exports_for_gpu_and_tpu(tmp_path, dtype):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _TRAIN_EXPORT, dtype], cwd=ROOT, env=env,
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


@pytest.fixture(scope="module")
def small_predictor():
    """The shipped weights at a 64x128 network size (same code as 128x256, a quarter of the work)."""
    from camflow_jax import checkpoint
    from camflow_jax.predictor import Predictor

    model, variables, _, cfg = checkpoint.load_model(checkpoint.pretrained_path(checkpoint.PRETRAINED))
    return Predictor(model, variables, None, {**cfg, "height": 64, "width": 128})


def _pair():
    from camflow_jax.data.synthetic import SyntheticScenes

    s = SyntheticScenes(seed=1000, num_samples=1, height=64, width=128)[0]
    return s["img1"], s["img2"], {"depth1": s["depth1"], "depth2": s["depth2"], "intrinsics": s["K"]}


def test_predictor_functions_export_for_gpu_and_tpu(small_predictor):
    from camflow_jax import accel

    a, b, cam = _pair()
    calls = accel.capture_jitted_calls(small_predictor, a, b, **cam, refine=True)
    calls += [c for c in accel.capture_jitted_calls(small_predictor, a, b, **cam, refine=False, confidence=True)
              if c.name == "_forward"]
    names = [c.name for c in calls]
    # forward (flows-only), refinement per direction, homography fit; forward with confidence
    assert names.count("_forward") == 2 and names.count("_refine") == 2 and "_fit_homography" in names, names
    assert [c.kwargs.get("confidence") for c in calls if c.name == "_forward"] == [False, True]
    seen = set()
    for c in calls:
        key = (c.name, str(c.fn.trace(*c.args, **c.kwargs).jaxpr.in_avals), repr(sorted(c.kwargs.items())))
        if key in seen:  # the two refinement directions share one signature (one compilation)
            continue
        seen.add(key)
        for platform in PLATFORMS:
            e = accel.export_for(c.fn, platform, *c.args, **c.kwargs)
            assert e.platforms == (platform,) and e.nr_devices == 1
            assert accel.uses_float64(e) == [], (c.name, platform)
            text = e.mlir_module()
            assert "lapack" not in text and "callback" not in text, (c.name, platform)
    assert len(seen) == 4  # forward x2, refine, fit


def test_captured_calls_are_the_ones_the_predictor_runs(small_predictor):
    """The capture answers with zeros without running anything; the functions it records,
    run for real, give the Predictor's own flows (an independent check that the export above
    covered what the Predictor computes)."""
    from camflow_jax import accel

    a, b, cam = _pair()
    calls = accel.capture_jitted_calls(small_predictor, a, b, **cam, refine=False)
    assert [c.name for c in calls] == ["_forward"]
    out = calls[0].fn(*calls[0].args, **calls[0].kwargs)
    ref = small_predictor(a, b, **cam, refine=False)
    np.testing.assert_allclose(np.asarray(out["flow_f"]), ref["flow_f"], atol=1e-5)
    assert "logvar_f" not in ref and "logvar_f" not in out  # flows-only by default
