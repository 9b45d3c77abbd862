"""Roofline estimates (tools.bench.accel) against closed forms, and the benchmark's roofline mode."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from tools.bench import accel

#: Tests of measurement code (tools/bench): the slow tier (python -m pytest -q -m slow tests).
pytestmark = pytest.mark.slow


def test_cost_of_a_matmul_is_its_closed_form():
    m, k, n = 64, 128, 32
    f = jax.jit(lambda a, b: a @ b)
    a, b = jnp.ones((m, k)), jnp.ones((k, n))
    cost = accel.cost_of(f.lower(a, b).compile())
    assert cost["flops"] == 2 * m * k * n  # one multiply and one add per term
    # At least the two operands and the result cross memory once (float32).
    assert cost["bytes_accessed"] >= 4 * (m * k + k * n + m * n)


def test_roofline_takes_the_larger_bound():
    h100 = accel.DEVICES["h100_sxm"]
    compute_bound = accel.roofline(989e12, 1.0, h100, "bfloat16")  # one second of bf16 peak
    assert compute_bound["bound"] == "compute" and compute_bound["lower_bound_s"] == pytest.approx(1.0)
    memory_bound = accel.roofline(1.0, 819e9, "tpu_v5e", "float32")  # one second of v5e HBM
    assert memory_bound["bound"] == "memory" and memory_bound["lower_bound_s"] == pytest.approx(1.0)
    assert memory_bound["arithmetic_intensity"] == pytest.approx(1.0 / 819e9)
    # fp32 on the H100's CUDA cores is ~15x slower than its dense bf16 tensor-core peak.
    r32, r16 = (accel.roofline(1e12, 1.0, h100, d)["compute_s"] for d in ("float32", "bfloat16"))
    assert r32 / r16 == pytest.approx(989 / 67)
    with pytest.raises(ValueError, match="float16"):
        accel.roofline(1.0, 1.0, h100, "float16")


def test_device_specs_cite_their_source():
    for spec in accel.DEVICES.values():
        assert spec.source.startswith(("NVIDIA", "Cloud TPU")) and "https://" in spec.source
        assert {"float32", "bfloat16"} <= set(spec.peak_flops) and spec.hbm_bytes_per_s > 1e11


@pytest.mark.slow
def test_roofline_mode_on_a_tiny_network(tmp_path):
    from tools.bench import benchmarking
    out = benchmarking.run(benchmarking.BenchmarkOptions(
        mode="roofline", height=64, width=128, arch="config", config="camflow_jax/configs/smoke.py",
        fast_compile=True, out=str(tmp_path / "r.json")))
    assert (tmp_path / "r.json").is_file() and out["machine"]["jax"] == jax.__version__
    rows = {(r["computation"], r["dtype"]): r for r in out["results"]}
    assert set(rows) == {(c, d) for c in ("infer_flows_only", "infer_with_confidence", "infer_flows_only_refined",
                                          "train_step") for d in ("float32", "bfloat16")}
    for (comp, dtype), r in rows.items():
        assert r["flops_per_pair"] > 0 and r["bytes_accessed_per_pair"] > 0, (comp, dtype)
        for est in r["estimates"].values():
            assert est["lower_bound_s"] == max(est["compute_s"], est["memory_s"]) > 0
    # The flows-only forward drops the mask net: fewer FLOPs than the forward with confidence;
    # refinement adds to it; a train step (forward + backward, batch 2) costs more per pair.
    f32 = {c: rows[(c, "float32")]["flops_per_pair"] for c in ("infer_flows_only", "infer_with_confidence",
                                                                  "infer_flows_only_refined", "train_step")}
    assert f32["infer_flows_only"] < f32["infer_with_confidence"] < f32["train_step"]
    assert f32["infer_flows_only_refined"] > f32["infer_flows_only"]
