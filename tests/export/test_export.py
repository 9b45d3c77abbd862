"""Portable export (issue 41): ``python -m camflow_jax.export`` and :mod:`camflow_jax.export`.

The model is a tiny random-weight CamFlow+ (one pyramid level, 8 + 4 + 6 bases, 32x64): what is
tested is the export, not the accuracy, and jax2onnx's conversion time grows with the number of
graph nodes. The oracles are independent of the export's own code: ONNX Runtime (another
runtime) must give the Predictor's flows, the deserialized StableHLO artifacts the Predictor's
flows and :mod:`camflow_jax.models.basis_set`'s bases, and numpy's einsum the rewritten MatMuls.
"""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax import export as jax_export

from camflow_jax.export import __main__ as export_cli
from camflow_jax.export import bundle, write_bundle
from camflow_jax.export import onnx as onnx_lib
from camflow_jax.models import basis_set, build_model, checkpoint, init_variables
from camflow_jax.predictor import Predictor
from helpers import ROOT

pytest.importorskip("jax2onnx", reason=f"the ONNX export's converter is not installed: {onnx_lib.INSTALL_HINT}")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

H, W = 32, 64
TINY = {"group_sizes": [8, 4, 6], "embed_dim": 8, "depths": [1], "layer_depth": [1], "num_heads": [2],
        "window_size": 8, "height": H, "width": W,
        "bases": {"num_homography": 8, "num_stochastic": 4, "seed": 0, "orthogonal_to_homography": True,
                  "use_depth": True, "depth_sigmas": [0.0, 2.0]}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(checkpoint folder, Predictor) of a tiny random-weight CamFlow+."""
    model = build_model(TINY)
    ckpt = checkpoint.save_compact(tmp_path_factory.mktemp("ckpt") / "tiny", TINY,
                                   init_variables(model, jax.random.key(0), H, W))
    return ckpt, Predictor.load(str(ckpt), refine=False)


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    """The export folder of the tiny model (CPU and CUDA StableHLO) and its manifest."""
    out = tmp_path_factory.mktemp("export") / "tiny"
    manifest = write_bundle(tiny[1], out, platforms=("cpu", "cuda"))
    return out, manifest


def _example(out):
    with np.load(out / "example.npz") as z:
        return {k: z[k] for k in z.files}


def _predictor_outputs(pred, ex):
    """The Predictor's network outputs (no refinement) on the example pair: its input is at
    network size, so its resizing of images, depths, intrinsics and flows changes nothing."""
    return pred(ex["img1"][0], ex["img2"][0], depth1=ex["depth1"][0], depth2=ex["depth2"][0],
                intrinsics=ex["K"][0], refine=False)


_BUILDERS = {}


def _bases(pred, depth, K):
    """An image's basis set as the Predictor builds it ``[1, N, h, w, 2]``, jitted once (eagerly,
    each operation of the depth bases would compile on its own)."""
    if id(pred) not in _BUILDERS:
        _BUILDERS[id(pred)] = jax.jit(lambda s, d, k: basis_set.with_depth_bases(s, d, k, pred.depth_sigmas))
    return np.asarray(_BUILDERS[id(pred)](pred.static_bases, depth, K))[None]


def _onnx_outputs(out, pred, ex, img1, img2) -> dict:
    """ONNX Runtime's outputs of the exported network on ``img1``, ``img2`` (``[1, h, w, 3]``)
    with the example's depths and intrinsics turned into bases as the Predictor builds them."""
    sess = ort.InferenceSession(str(out / "network.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["img1", "img2", "bases_f", "bases_b"]
    feeds = {"img1": np.asarray(img1, np.float32), "img2": np.asarray(img2, np.float32),
             "bases_f": _bases(pred, ex["depth1"][0], ex["K"][0]), "bases_b": _bases(pred, ex["depth2"][0], ex["K"][0])}
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def test_onnx_in_onnxruntime_gives_the_predictors_flows(tiny, exported):
    _, pred = tiny
    out, _ = exported
    ex = _example(out)
    want = _predictor_outputs(pred, ex)
    got = _onnx_outputs(out, pred, ex, ex["img1"], ex["img2"])
    assert np.mean(np.abs(want["flow_f"])) > 0.5  # a real motion, not zeros
    for k in ("flow_f", "flow_b"):
        assert got[k].shape == (1, H, W, 2)
        assert np.max(np.abs(got[k][0] - want[k])) < 1e-3, k
    for k in ("coeffs_f", "coeffs_b"):
        np.testing.assert_allclose(got[k][0], want[k], atol=1e-4)
    # The example's stored outputs are the JAX ones, for a port's own test.
    np.testing.assert_allclose(ex["flow_f"][0], want["flow_f"], atol=1e-4)


def test_onnx_stretches_a_dark_pair_as_the_network_does(tiny, exported):
    # The contrast floor is part of the exported graph: a pair at a fifth of its brightness
    # (below the floor) gets the Predictor's flows from ONNX Runtime too.
    from camflow_jax.models import preprocess

    _, pred = tiny
    out, _ = exported
    ex = _example(out)
    dark = {k: np.round(ex[k].astype(np.float32) * 0.2) for k in ("img1", "img2")}
    grey = np.concatenate([np.asarray(preprocess(dark[k][0], H, W)) for k in ("img1", "img2")])
    assert grey.std() < 0.5 * pred.model.config.contrast_floor  # well below the floor: stretched
    want = _predictor_outputs(pred, {**ex, **{k: v.astype(np.uint8) for k, v in dark.items()}})
    got = _onnx_outputs(out, pred, ex, dark["img1"], dark["img2"])
    for k in ("flow_f", "flow_b"):
        assert np.max(np.abs(got[k][0] - want[k])) < 1e-3, k


# Two levels, two blocks per stage (the second shifted, with the region mask): every step the
# ONNX form rewrites (thin and regular 3x3 convs, GELU, window and class attention, LayerNorm)
# and the coarse-to-fine warp between levels.
TWO_LEVEL = {**TINY, "depths": [2, 2], "layer_depth": [2, 1], "num_heads": [2, 2], "window_size": 4}


def test_onnx_form_gives_the_jax_networks_flows_within_1e4_px(tmp_path):
    """The ONNX export's formulation (:func:`camflow_jax.models.layers.onnx_form`: a Conv per 3x3
    conv, the fusable GELU, Softmax, LayerNormalization), converted and run in ONNX Runtime, on
    three synthetic pairs, against the oracle: the JAX network in its own form (jax.jit)."""
    from camflow_jax.data.synthetic import SyntheticScenes
    from camflow_jax.export import network

    model = build_model(TWO_LEVEL)
    ckpt = checkpoint.save_compact(tmp_path / "two", TWO_LEVEL, init_variables(model, jax.random.key(1), H, W))
    pred = Predictor.load(str(ckpt), refine=False)
    spec = network.export_spec(pred)
    converted = onnx_lib.convert(network.flows_function(pred, spec, onnx=True), spec.flow_shapes(),
                                 network.FLOW_OUTPUTS, name="two_level")
    ops = {n.op_type for n in converted.graph.node}
    assert {"LayerNormalization", "Softmax", "Conv"} <= ops and "Einsum" not in ops, ops
    sess = onnx_lib.session(converted)
    reference = jax.jit(network.flows_function(pred, spec))
    scenes = SyntheticScenes(seed=7, num_samples=3, height=H, width=W, num_textures=4, homography=False)
    for pair in (scenes[i] for i in range(3)):
        feeds = {"img1": pair["img1"][None], "img2": pair["img2"][None],
                 "bases_f": _bases(pred, pair["depth1"], pair["K"]), "bases_b": _bases(pred, pair["depth2"], pair["K"])}
        want = dict(zip(network.FLOW_OUTPUTS, (np.asarray(x) for x in reference(*(
            np.asarray(v, np.float32) for v in feeds.values())))))
        got = onnx_lib.run(sess, feeds)
        assert np.mean(np.abs(want["flow_f"])) > 0.5  # a real motion, not zeros
        for k in ("flow_f", "flow_b"):
            assert np.max(np.abs(got[k] - want[k])) < 1e-4, (k, np.max(np.abs(got[k] - want[k])))
        np.testing.assert_allclose(got["coeffs_f"], want["coeffs_f"], atol=1e-5)


def test_stablehlo_artifacts_deserialize_and_match_jax(tiny, exported):
    _, pred = tiny
    out, _ = exported
    ex = _example(out)
    net = jax_export.deserialize(bytearray((out / "network.stablehlo").read_bytes()))
    assert net.platforms == ("cpu", "cuda")
    assert [a.shape for a in net.in_avals] == [(1, H, W, 3)] * 2 + [(1, 18, H, W, 2)] * 2
    build = jax_export.deserialize(bytearray((out / "depth_bases.stablehlo").read_bytes()))
    bases_f = np.asarray(build.call(ex["depth1"], ex["K"]))
    np.testing.assert_allclose(bases_f, _bases(pred, ex["depth1"][0], ex["K"][0]), atol=1e-6)
    bases_b = np.asarray(build.call(ex["depth2"], ex["K"]))
    flow_f, flow_b, coeffs_f, _ = (np.asarray(x) for x in net.call(
        ex["img1"].astype(np.float32), ex["img2"].astype(np.float32), bases_f, bases_b))
    want = _predictor_outputs(pred, ex)
    np.testing.assert_allclose(flow_f[0], want["flow_f"], atol=1e-4)
    np.testing.assert_allclose(flow_b[0], want["flow_b"], atol=1e-4)
    np.testing.assert_allclose(coeffs_f[0], want["coeffs_f"], atol=1e-5)


def test_manifest_describes_the_model_and_its_bases(tiny, exported):
    _, pred = tiny
    out, manifest = exported
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert sorted(p.name for p in out.iterdir()) == sorted(bundle.FILES)
    assert manifest["size"] == {"height": H, "width": W, "batch": 1}
    b = manifest["bases"]
    assert b["num_bases"] == pred.model.num_bases == 18
    assert [(g["name"], g["size"]) for g in b["groups"]] == list(pred.basis_groups)
    assert [g["indices"] for g in b["groups"]] == [[0, 8], [8, 12], [12, 18]]
    assert b["groups"][2]["depth_sigmas_px"] == list(pred.depth_sigmas) == [0.0, 2.0]
    np.testing.assert_array_equal(np.load(out / "static_bases.npy"), np.asarray(pred.static_bases))
    assert {i["name"]: i["shape"] for i in manifest["inputs"]} == {
        "img1": [1, H, W, 3], "img2": [1, H, W, 3], "bases_f": [1, 18, H, W, 2], "bases_b": [1, 18, H, W, 2]}
    assert [o["name"] for o in manifest["outputs"]] == ["flow_f", "flow_b", "coeffs_f", "coeffs_b"]
    assert manifest["precision"]["policy"] == pred.precision == "exact"
    assert manifest["model"]["network_size_hw"] == [H, W] and manifest["model"]["size_multiple"] == 16
    assert manifest["versions"]["jax"] == jax.__version__ and manifest["versions"]["jax2onnx"]
    assert manifest["files"]["network.stablehlo"]["platforms"] == ["cpu", "cuda"]
    assert max(manifest["checks"]["onnxruntime"]["max_abs_diff"][k] for k in ("flow_f", "flow_b")) < 1e-3
    model = onnx.load(str(out / "network.onnx"))
    assert "Einsum" not in {n.op_type for n in model.graph.node}  # rewritten as MatMul
    assert {p.key: p.value for p in model.metadata_props}["num_bases"] == "18"


@pytest.mark.parametrize("flags, says", [
    (["--size", "40x64"], "--size 40x64 must be a multiple of 16"),
    (["--size", "32"], "--size must be HxW"),
    (["--batch", "0"], "--batch must be at least 1"),
    (["--platforms", "cpu,gpu"], "--platforms must be"),
    (["--formats", "tflite"], "--formats must be"),
    (["--precision", "bfloat16"], "needs a float32 precision policy"),
    (["--checkpoint", "MISSING"], "checkpoint not found"),
    (["-o", "FILE/out"], "cannot write to"),
])
def test_cli_refuses_bad_input_in_one_line(tiny, tmp_path, capsys, flags, says):
    (tmp_path / "file").write_text("x")
    argv = ["--checkpoint", str(tiny[0]), "-o", str(tmp_path / "out"), *flags]
    argv = [a.replace("MISSING", str(tmp_path / "missing")).replace("FILE", str(tmp_path / "file")) for a in argv]
    assert export_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert not (tmp_path / "out").exists()


def test_cli_refuses_to_overwrite_and_names_a_missing_converter(tiny, exported, capsys, monkeypatch):
    out, _ = exported
    before = (out / "manifest.json").read_bytes()
    assert export_cli.main(["--checkpoint", str(tiny[0]), "-o", str(out)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (out / "manifest.json").read_bytes() == before
    monkeypatch.setitem(sys.modules, "jax2onnx", None)  # an import of it now fails
    with pytest.raises(onnx_lib.MissingDependency, match=r"\[export\]"):
        onnx_lib.require("jax2onnx")
    assert export_cli.main(["--checkpoint", str(tiny[0]), "-o", str(out.parent / "other")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'jax2onnx'" in err[0] and "pip install" in err[0], err


def test_the_module_runs_and_imports_no_onnx_package(tmp_path):
    """A real process: ``python -m camflow_jax.export`` refuses a missing checkpoint with one
    line and exit code 2 (no traceback); importing the package loads no ONNX package."""
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.export", "--checkpoint", str(tmp_path / "none"),
                           "-o", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "checkpoint not found" in proc.stderr
    code = ("import sys, camflow_jax.export, camflow_jax.export.__main__; "
            "print([m for m in ('jax2onnx', 'onnx', 'onnxruntime') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


@pytest.mark.parametrize("equation, a, b", [
    ("bwhnd,bwhmd->bwhnm", (2, 3, 2, 5, 4), (2, 3, 2, 6, 4)),  # window attention logits
    ("...nm,...md->...nd", (2, 3, 5, 6), (2, 3, 6, 4)),  # attention values
    ("bn,bnhwc->bhwc", (2, 7), (2, 7, 3, 4, 2)),  # basis combination
    ("ij,kj->ki", (3, 4), (5, 4)),  # output transposed
])
def test_einsum_rewrite_computes_the_same(equation, a, b):
    helper = onnx.helper
    out = np.einsum(equation, np.zeros(a), np.zeros(b)).shape
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)], "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, a),
         helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, b)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert onnx_lib.einsum_to_matmul(model) == 1
    assert "Einsum" not in {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(a).astype(np.float32), rng.standard_normal(b).astype(np.float32)
    got = onnx_lib.run(onnx_lib.session(model), {"a": x, "b": y})["y"]
    np.testing.assert_allclose(got, np.einsum(equation, x, y), rtol=1e-5, atol=1e-5)


def test_einsum_rewrite_leaves_broadcasting_alone():
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")], "g",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, (1, 3, 4)),
         helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, (2, 4, 5))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, (2, 3, 5))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert onnx_lib.einsum_to_matmul(model) == 0
