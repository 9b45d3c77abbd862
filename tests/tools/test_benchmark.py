"""The benchmark (tools.bench.benchmarking, CLI python -m tools.bench benchmark): one run of every
measurement on a tiny narrow network, plus XLA FLOP counts checked against closed forms (linear
in batch, backward >= forward, the mask net's convolutions), and the command line's JSON lines."""

import json
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import ROOT
from tools.bench import benchmarking, timing
from tools.bench.benchmarking import release as release_bench

#: Tests of measurement code (tools/bench): the slow tier (python -m pytest -q -m slow tests).
pytestmark = pytest.mark.slow

# A narrower net than configs/smoke.py (one pyramid level, one Swin block): the train step
# compiles in seconds. CamFlow+ 36 with per-sample depth bases, as the benchmark's default config.
TINY_CONFIG = """
from camflow_jax.configs import smoke


def get_config():
    c = smoke.get_config()
    c.model.depths, c.model.layer_depth, c.model.num_heads = (1,), (1,), (2,)
    return c
"""


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("config") / "tiny.py"
    cfg.write_text(TINY_CONFIG)
    return cfg


@pytest.fixture(scope="module")
def report(tiny_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    opts = benchmarking.BenchmarkOptions(mode="all", arch="config", config=str(tiny_config), height=64, width=64,
                                         batch=2, groups="12,12,12", repeats=2, warmup=0, fast_compile=True,
                                         out=str(out))
    emitted = []
    t0 = time.perf_counter()
    result = benchmarking.run(opts, on_result=emitted.append)
    wall = time.perf_counter() - t0
    assert emitted == result["results"]  # each measurement handed on as soon as it is measured
    return result, json.loads(out.read_text()), wall


def test_report_structure_and_file(report):
    result, written, _ = report
    assert written == json.loads(json.dumps(result))
    m = result["machine"]
    for k in ("platform", "device_kind", "cpu_count", "cpu_model", "xla_flags", "python", "jax", "jaxlib", "flax",
              "optax", "date_utc", "loadavg_before", "loadavg_after"):
        assert k in m, k
    assert [r["measurement"] for r in result["results"]] == ["infer", "infer", "train", "train_data"]
    assert [r["batch"] for r in result["results"]] == [1, 2, 2, 2]
    infer1 = result["results"][0]
    # The keys the README quotes (the old tool's output) are still there.
    for k in ("device", "platform", "cpu_count", "height", "width", "batch", "groups", "dtype", "per_sample_bases",
              "repeats", "compile_s", "median_s", "mean_s", "min_s", "median_s_per_pair",
              "median_process_cpu_s", "loadavg_before", "loadavg_after"):
        assert k in infer1, k
    train, data = result["results"][2:]
    assert train["groups"] == [12, 12, 12] and train["per_sample_depth_bases"] and train["loss_finite"]
    for r in result["results"]:  # the narrow net of the config, not the released structure
        assert r["embed_dim"] == 8 and r["depths"] == [1], r["measurement"]
    assert data["pipeline_as_trainer"]  # tiny batches: the trainer's pipeline, unchanged
    assert data["render"] == "host"  # the config's data.render (--render device: the device feed)


def test_the_timing_core_times_calls_in_turn_and_records_the_host_without_jax():
    """tools.bench.timing, the one core every mode times with: interleaved calls run in their
    order round after round, each timed once per round (wall and CPU); the host's record and the
    load need no JAX (the stabilizer's modes and the accelerator check run without it)."""
    order = []
    wall, cpu = timing.interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 3)
    assert order == ["a", "b"] * 3
    assert all(len(v) == 3 and min(v) >= 0 for v in (*wall.values(), *cpu.values()))
    wall, cpu = timing.repeat(lambda: time.sleep(0.01), 2)
    assert len(wall) == len(cpu) == 2 and min(wall) >= 0.01 and max(cpu) < min(wall)
    assert len(timing.load_average()) == 3
    order = []
    run = timing.warm_interleaved({"a": lambda: order.append("a"), "b": lambda: time.sleep(0.01)}, 3, 2)
    assert order == ["a"] * 6  # a first call, 2 warm-up rounds, 3 timed rounds
    assert run["first"]["b"] >= 0.01 and len(run["wall"]["b"]) == len(run["cpu"]["a"]) == 3
    assert min(run["wall"]["b"]) >= 0.01 and len(run["loadavg_before"]) == len(run["loadavg_after"]) == 3
    code = ("import sys; from tools.bench import timing; h = timing.host_info(); timing.load_average(); "
            "print(sorted(k for k in ('cpu_count', 'cpu_model', 'python', 'os', 'date_utc') if k in h), "
            "'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["['cpu_count',", "'cpu_model',", "'date_utc',", "'os',", "'python']", "False"], out


def test_cpu_model_is_the_first_model_name_line(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B14 96-Core\n\n"
                 "processor\t: 1\nmodel name\t: Other\n")
    assert timing.cpu_model(str(f)) == "AMD EPYC 9B14 96-Core"
    f.write_text("processor\t: 0\nmodel name\t:\n")  # present but empty
    assert timing.cpu_model(str(f)) is None
    assert timing.cpu_model(str(tmp_path / "missing")) is None


def test_timing_summary_against_hand_computed_values():
    # 4 calls of a batch of 4 pairs, 1.2e10 FLOPs per call. By hand: sorted times 0.1, 0.2,
    # 0.3, 0.6 -> median 0.25 s, mean 0.3 s, min 0.1 s; 4 pairs / 0.25 s = 16 pairs/s;
    # 1.2e10 / 0.25 s = 4.8e10 FLOP/s; 3e9 FLOPs and 0.0625 s per pair.
    r = benchmarking.timing_summary([0.3, 0.1, 0.2, 0.6], [0.5, 0.9, 0.7, 1.1], 4, 1.2e10)
    assert (r["median_s"], r["mean_s"], r["min_s"]) == (0.25, 0.3, 0.1)
    assert (r["pairs_per_s"], r["median_s_per_pair"]) == (16.0, 0.0625)
    assert (r["flops_per_pair"], r["flops_per_s"]) == (3e9, 4.8e10)
    assert (r["median_process_cpu_s"], r["mean_process_cpu_s"]) == (0.8, 0.8)
    assert r["times_s"] == [0.3, 0.1, 0.2, 0.6]
    none = benchmarking.timing_summary([0.5], [0.5], 1, None)  # a backend without cost analysis
    assert none["flops"] is None and none["flops_per_s"] is None and none["pairs_per_s"] == 2.0


def test_times_are_real_measurements(report):
    result, _, wall = report
    repeats = result["args"]["repeats"]
    timed = 0.0
    for r in result["results"]:
        assert r["mean_s"] > 0 and r["pairs_per_s"] > 0 and r["compile_s"] > 0, r["measurement"]
        assert r["mean_process_cpu_s"] > 0 and r["flops_per_s"] > 0
        if "times_s" in r:  # the summary describes the samples it reports
            assert len(r["times_s"]) == repeats
            assert r["min_s"] == min(r["times_s"])
            assert r["median_s"] == pytest.approx(float(np.median(r["times_s"])), abs=2e-4)
            assert r["min_s"] <= r["median_s"] <= max(r["times_s"])
        timed += repeats * r["mean_s"]
    # Seconds, not another unit: all timed calls together fit in the wall time of the run,
    # which also compiled four programs.
    assert timed < wall
    # The pipeline loop fetches, then steps: its per-step time includes the data time.
    data = result["results"][3]
    assert 0 <= data["median_data_s"] and data["mean_data_s"] <= data["mean_s"] + 1e-4
    assert data["pipeline_slowdown"] > 0


def test_flops_linear_in_batch_and_backward_costs_more(report):
    infer1, infer2, train, _ = report[0]["results"]
    assert infer1["flops_per_pair"] > 1e8  # a 64x64 pair through the whole network
    assert infer2["flops"] == pytest.approx(2 * infer1["flops"], rel=0.03)
    assert infer2["flops_per_pair"] == pytest.approx(infer1["flops_per_pair"], rel=0.03)
    # Same network (CamFlow+ 36): the train step adds the backward pass (>= the forward's FLOPs).
    assert train["flops_per_pair"] > 2 * infer2["flops_per_pair"]
    assert train["flops_per_pair"] < 10 * infer2["flops_per_pair"]


def test_memory_reported(report):
    infer1, infer2, train, _ = report[0]["results"]
    for r in (infer1, infer2, train):
        mem = r["memory"]
        assert mem["process_peak_rss_bytes"] > 0
        assert mem["argument_size_in_bytes"] > 0 and mem["output_size_in_bytes"] > 0
    # The backward keeps the forward's activations: far more scratch than inference.
    assert train["memory"]["temp_size_in_bytes"] > 2 * infer2["memory"]["temp_size_in_bytes"]
    # The state is donated: its buffers alias the output.
    assert train["memory"]["alias_size_in_bytes"] > 0


def test_mask_net_flops_match_closed_form():
    """XLA's count for the mask net alone is the convolutions' 2 * Cin * Cout * (taps inside the
    image), i.e. 2 * 9 * Cin * Cout * H * W less the zero-padding taps at the border, plus a
    little elementwise work (bias, LeakyReLU)."""
    from camflow_jax.models.mask import MaskNet

    b, h, w = 2, 32, 48  # both directions of one pair
    net = MaskNet()
    x = jnp.asarray(np.random.default_rng(0).standard_normal((b, h, w, 2), np.float32))
    shapes = jax.eval_shape(net.init, jax.random.key(0), x)  # no init compile
    params = jax.tree.map(lambda s: jnp.full(s.shape, 0.1, s.dtype), shapes)
    compiled = jax.jit(net.apply).lower(params, x).compile()
    got = benchmarking.flops_of(compiled)
    chans = [(2, 8), (10, 16), (26, 32), (58, 16), (74, 8), (82, 1)]
    dense = sum(2 * 9 * ci * co * h * w * b for ci, co in chans)
    inside = sum(2 * ci * co * (3 * h - 2) * (3 * w - 2) * b for ci, co in chans)
    assert inside <= got <= 1.02 * inside, (got, inside)
    assert got == pytest.approx(dense, rel=0.05)


def test_command_line_prints_one_json_line_per_measurement(tiny_config, tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "benchmark", "--mode", "infer", "--arch", "config",
                           "--config", str(tiny_config), "--height", "64", "--width", "64", "--batch", "1",
                           "--groups", "12,12", "--repeats", "1", "--warmup", "0", "--fast-compile", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    written = json.loads(out.read_text())
    assert lines == written["results"] and [r["measurement"] for r in lines] == ["infer"]
    assert lines[0]["groups"] == [12, 12] and lines[0]["embed_dim"] == 8
    assert (lines[0]["precision"], lines[0]["dtype"]) == ("exact", "float32")  # the library's default policy
    # every flag is recorded under its argparse name, as before
    assert written["args"] == {**vars(benchmarking.BenchmarkOptions()), "mode": "infer", "arch": "config",
                               "config": str(tiny_config), "height": 64, "width": 64, "batch": 1, "groups": "12,12",
                               "repeats": 1, "warmup": 0, "fast_compile": True, "out": str(out)}


# --- mode release (against the authors' PyTorch model): only its refusals are tested here; they
# need neither torch nor the release's code, and cost milliseconds (benchmarking.run checks the
# release before anything else), plus one run of the CLI for its exit code and one-line message.

def _refusal(path, monkeypatch) -> str:
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    opts = benchmarking.BenchmarkOptions(mode="release", release_code=None if path is None else str(path))
    with pytest.raises(benchmarking.ReleaseUnavailable) as e:
        benchmarking.run(opts)
    return str(e.value)


def _fake_release(root, net_py: str):
    (root / "model").mkdir(exist_ok=True)
    (root / "experiments").mkdir(exist_ok=True)
    for f in release_bench.RELEASE_FILES:
        (root / f).write_text(net_py)


def test_release_mode_refuses_a_missing_or_wrong_release_path(tmp_path, monkeypatch):
    assert "--release-code PATH" in _refusal(None, monkeypatch)
    err = _refusal(tmp_path, monkeypatch)
    assert "does not hold the released CamFlow code" in err and "model/net.py" in err
    _fake_release(tmp_path, "")  # the files, but no CamFlow network in net.py
    assert "defines no CamFlow network" in _refusal(tmp_path, monkeypatch)


def test_release_mode_refuses_without_torch(tmp_path, monkeypatch):
    _fake_release(tmp_path, "class CamFlow(nn.Module):\n\n\ndef fetch_net(params):\n")
    err = _refusal(tmp_path, monkeypatch)
    assert "needs PyTorch" in err and "pip install torch" in err


def test_release_mode_refusal_is_one_line_and_exit_code_2(tmp_path):
    # the path is checked before torch is imported, so this holds with or without torch
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "benchmark", "--mode", "release",
                           "--release-code", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("benchmark.py: error: "), proc.stderr
    assert "does not hold the released CamFlow code" in proc.stderr


# --- mode profile: where the time goes, per op

def test_op_group_strips_transformations_and_marks_the_backward():
    assert (benchmarking.op_group("jit(train_step)/transpose(jvp(CamFlow))/met/encoder_level_1/stage_0_block_2/attn/x")
            == "B CamFlow/met/encoder_level_#/stage_#_block_#")
    assert (benchmarking.op_group("jit(<lambda>)/CamFlow/mask_net/conv_2/conv_general_dilated", depth=3)
            == "F CamFlow/mask_net/conv_#")
    assert (benchmarking.op_group("jit(train_step)/transpose(jvp(CamFlow))/mask_net/conv_2/transpose(jvp())/"
                                  "conv_general_dilated", depth=9)
            == "B CamFlow/mask_net/conv_#/conv_general_dilated")
    assert benchmarking.op_group("jit(f)/CamFlow/met/vmap(jit(_take))/gather") == "F CamFlow/met/_take/gather"


def test_profile_attributes_a_calls_time_to_the_scope_that_spends_it():
    def f(a, b):
        with jax.named_scope("big"):
            x = jnp.tanh(a @ b @ b)
        with jax.named_scope("small"):
            return x[:8, :8] + 1.0

    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.standard_normal((768, 768), np.float32)) for _ in range(2))
    fwd = jax.jit(f).lower(a, b).compile()
    grad = jax.jit(jax.grad(lambda a, b: jnp.sum(f(a, b)))).lower(a, b).compile()
    for compiled, direction in ((fwd, "F"), (grad, "B")):
        jax.block_until_ready(compiled(a, b))
        t0 = time.perf_counter()
        for _ in range(3):
            jax.block_until_ready(compiled(a, b))
        wall_ms = (time.perf_counter() - t0) / 3 * 1e3
        names = benchmarking.hlo_op_names(compiled)
        assert f"{direction} big/dot_general" in {benchmarking.op_group(op) for op in names.values()}
        s = benchmarking.profile_summary(benchmarking.trace_op_times(compiled, (a, b), calls=3), names)
        groups = dict(s["groups"])
        assert any(k.startswith(f"{direction} big/") for k in groups), groups
        big = sum(v for k, v in groups.items() if k[2:].startswith("big/"))  # a gradient also runs the forward
        # the two 768^3 products dominate: most of the attributed time, and a sizeable part of
        # the wall time measured by an independent clock (both cores may work at once: <= 2.5x)
        assert big >= 0.7 * s["attributed_ms"], s
        assert 0.2 * wall_ms <= big <= 2.5 * wall_ms, (big, wall_ms, s)
        assert all(row[2] == names[row[0]] for row in s["instructions"])


def test_profile_mode_reports_both_forwards_and_the_train_step(tiny_config):
    opts = benchmarking.BenchmarkOptions(mode="profile", profile="all", arch="config", config=str(tiny_config),
                                         height=64, width=64, batch=1, train_batch=2, groups="12,12,12", repeats=2,
                                         warmup=0, fast_compile=True, profile_top=100)
    res = {r["function"]: r for r in benchmarking.run(opts)["results"]}
    assert set(res) == {"forward_with_confidence", "forward_flows_only", "train_step"}
    groups = {k: dict(r["groups"]) for k, r in res.items()}
    for k, r in res.items():
        assert r["measurement"] == "profile" and r["median_s"] > 0 and r["attributed_ms"] > 0, r
        assert any("encoder_level_#" in g for g in groups[k]), (k, groups[k])
    # the flows-only path skips the mask net; the forward with confidence and the step run it
    assert not any("mask_net" in g for g in groups["forward_flows_only"])
    assert any(g.startswith("F CamFlow/mask_net") for g in groups["forward_with_confidence"])
    assert any(g.startswith("B CamFlow/mask_net") for g in groups["train_step"])
    assert not any(g.startswith("B ") for g in groups["forward_with_confidence"])


def test_refine_trips_counts_iterations_within_the_budget_and_the_unrolled_loop_matches():
    """Mode refine_trips on two small pairs: the iterations stay within each level's budget
    (RefineConfig's, times the level's stages), the capped budget within it too, and the
    unrolled loop runs the same iterations to the same flows (float32 round-off)."""
    from camflow_jax.refine import RefineConfig

    opts = benchmarking.BenchmarkOptions(mode="refine_trips", height=96, width=160, batch=2, repeats=1, warmup=0)
    r = benchmarking.bench_refine_trips(opts)
    cfg = RefineConfig()
    budget = [n * k for n, k in zip(r["budget_per_stage"], r["stages"])]
    assert r["budget_per_stage"][:len(cfg.iterations)] == list(cfg.iterations[:len(r["budget_per_stage"])])
    assert r["directions"] == 4 and len(r["iterations_max"]) == len(budget)
    assert all(0 < m <= n for m, n in zip(r["iterations_max"], budget))
    assert all(a <= m for a, m in zip(r["iterations_mean"], r["iterations_max"]))
    assert all(1 <= c <= n for c, n in zip(r["capped_per_stage"], r["budget_per_stage"]))
    assert all(m <= c * k for m, c, k in zip(r["capped_iterations_max"], r["capped_per_stage"], r["stages"]))
    assert r["unrolled_same_iterations"] and r["unrolled_largest_flow_change_px"] < 0.01
    assert 0 <= r["trips_beyond_mean"] < 1 and np.isfinite(r["epe_default_mean"])
    assert set(r["median_s"]) == {"default", "capped", "unrolled"}
