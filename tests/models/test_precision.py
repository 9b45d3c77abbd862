"""The precision policy (camflow_jax/models/precision.py): one setting for the network's compute
dtype and its matmul/convolution precision, read by the model, the Predictor, the trainer's
config and model.json.

Oracles: the StableHLO the network lowers to, for the CPU (``jax.jit(...).lower``) and for CUDA
(``jax.export`` with ``platforms=["cuda"]``, no GPU needed): under 'exact' every dot_general and
convolution carries precision HIGHEST, forward and backward (the hand-written VJPs included);
under 'default' none of the network's does, only the combination of the bases into flows, which
is HIGHEST under every policy. (The Predictor's other functions, the refinement and the
homography fit, are checked in tests/tools/test_accel.py.)
"""

from __future__ import annotations

import collections
import json
import shutil

import jax
import jax.numpy as jnp
import pytest

from camflow_jax import configs
from camflow_jax.models import ModelConfig, build_model, checkpoint
from camflow_jax.models import precision as precision_lib
from camflow_jax.predictor import Predictor
from camflow_jax.training import loop
from camflow_jax.training import workdir as workdir_lib
from tools.bench import accel

# A small network with every kind of layer: convolutions (stride 1 and 2, one input channel,
# one output channel), a Swin encoder with a plain and a shifted-window block, class attention,
# the coefficient heads and the mask net; one pyramid level, so lowering takes seconds.
TINY = {"group_sizes": [4, 4, 4], "embed_dim": 8, "depths": [2], "layer_depth": [1], "num_heads": [1]}
SIZE = 32


def products(text: str) -> dict:
    """``{(op, at HIGHEST): count}`` of the dot_general and convolution ops of a StableHLO text."""
    count = collections.Counter()
    for line in text.splitlines():
        for op in ("dot_general", "convolution"):
            if f"stablehlo.{op}" in line:
                count[(op, "HIGHEST" in line)] += 1
    return dict(count)


def _gradient(model):
    def loss(params, stats, g1, g2, bases):
        out, _ = model.apply({"params": params, "batch_stats": stats}, g1, g2, bases, train=True,
                             mutable=["batch_stats"])
        return jnp.sum(out["flow_f"]) + jnp.sum(out["logvar_f"])
    return jax.jit(jax.grad(loss))


def test_exact_lowers_every_dot_and_convolution_to_highest_and_default_does_not():
    g = jax.ShapeDtypeStruct((1, SIZE, SIZE, 1), jnp.float32)  # lowering needs shapes only
    bases = jax.ShapeDtypeStruct((12, SIZE, SIZE, 2), jnp.float32)
    found = {}
    for precision in ("exact", "default"):
        model = build_model({**TINY, "precision": precision})
        variables = jax.eval_shape(lambda a, bs, m=model: m.init(jax.random.key(0), a, a, bs), g, bases)
        # the train-mode gradient, lowered for this CPU: the forward with the mask net and the
        # backward, the custom VJPs of the 3x3 convolution and of the window attention included
        grad = _gradient(model).lower(variables["params"], variables["batch_stats"], g, g, bases).as_text()
        # the inference forward (with the mask net), exported for CUDA
        fwd = jax.jit(lambda v, a, b, bs, m=model: m.apply(v, a, b, bs, confidence=True))
        exported = accel.export_for(fwd, "cuda", variables, g, g, bases)
        assert exported.platforms == ("cuda",)
        found[precision] = {"cpu_gradient": products(grad), "cuda_forward": products(exported.mlir_module())}
    for where, ops in found["exact"].items():
        assert set(ops) == {("dot_general", True), ("convolution", True)}, (where, ops)
        assert ops[("convolution", True)] >= 12 and ops[("dot_general", True)] >= 50, (where, ops)
    for where, ops in found["default"].items():
        assert ("convolution", True) not in ops, (where, ops)
        # the same ops at the backend's default, but for the two sums of bases (flows and depth
        # translations), HIGHEST under every policy
        assert ops[("dot_general", True)] == 2, (where, ops)
        assert ops[("dot_general", True)] + ops[("dot_general", False)] == found["exact"][where][("dot_general", True)]
        assert ops[("convolution", False)] == found["exact"][where][("convolution", True)]


def test_policies_and_model_config():
    assert precision_lib.POLICIES == ("exact", "default", "bfloat16")
    assert ModelConfig().precision == "exact" == precision_lib.DEFAULT_POLICY
    exact, default, bf16 = (ModelConfig(precision=p) for p in precision_lib.POLICIES)
    assert (exact.dtype, default.dtype, bf16.dtype) == ("float32", "float32", "bfloat16")
    assert exact.dot_precision == jax.lax.Precision.HIGHEST
    assert default.dot_precision is None and bf16.dot_precision is None
    assert bf16.jnp_dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="precision must be one of"):
        ModelConfig(precision="tf32")
    # A mapping written before the policy says 'dtype': read as a policy, never kept as a key.
    assert ModelConfig.from_dict({"group_sizes": [12], "dtype": "float32"}).precision == "exact"
    assert ModelConfig.from_dict({"group_sizes": [12], "dtype": "bfloat16"}).precision == "bfloat16"
    both = {"group_sizes": [12], "dtype": "float32", "precision": "default"}
    assert ModelConfig.from_dict(both).precision == "default"
    assert "dtype" not in ModelConfig().to_dict()
    with pytest.raises(ValueError, match="contradicts"):
        ModelConfig.from_dict({"group_sizes": [12], "dtype": "bfloat16", "precision": "exact"})
    with pytest.raises(ValueError, match="dtype"):
        ModelConfig.from_dict({"group_sizes": [12], "dtype": "float16"})


def test_model_json_round_trips_the_policy_and_older_files_load_with_the_default(tmp_path):
    shipped = checkpoint.pretrained_path()
    old = checkpoint.read_model_config(shipped)
    assert "precision" not in old and old["dtype"] == "float32"  # written before the policy
    model, variables, bases, cfg = checkpoint.load_model(shipped)
    assert model.config.precision == "exact"
    # a model.json that says precision 'default' loads as 'default'; the older key is dropped
    checkpoint.save_compact(tmp_path / "ck", {**cfg, "precision": "default"}, variables)
    written = checkpoint.read_model_config(tmp_path / "ck")
    assert written["precision"] == "default" and "dtype" not in written
    assert checkpoint.load_model(tmp_path / "ck")[0].config.precision == "default"
    # an older model.json that says dtype 'bfloat16' loads as the bfloat16 policy
    shutil.copytree(shipped, tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "model.json").read_text())
    meta["model_config"]["dtype"] = "bfloat16"
    (tmp_path / "old" / "model.json").write_text(json.dumps(meta))
    assert checkpoint.load_model(tmp_path / "old")[0].config.precision == "bfloat16"


def test_predictor_precision_argument():
    pred = Predictor.from_pretrained()
    assert pred.precision == pred.model.config.precision == "exact"  # the model config's (the default)
    model, variables, bases, cfg = pred.model, pred.variables, pred.static_bases, pred.model_config
    for precision in precision_lib.POLICIES:
        p = Predictor(model, variables, bases, cfg, precision=precision)
        assert p.precision == p.model.config.precision == p.model_config["precision"] == precision
    assert Predictor(model, variables, bases, cfg, dtype="bfloat16").precision == "bfloat16"  # the older spelling
    p = Predictor(model, variables, bases, {**cfg, "precision": "default"},
                  precision=None)
    assert p.precision == "exact"  # the model's own config decides, not the dict
    default = model.clone(config=ModelConfig.from_dict({**cfg, "precision": "default"}))
    assert Predictor(default, variables, bases, cfg).precision == "default"
    assert Predictor(default, variables, bases, cfg, dtype="float32").precision == "default"  # float32 kept
    with pytest.raises(ValueError, match="precision must be one of"):
        Predictor(model, variables, bases, cfg, precision="tf32")
    with pytest.raises(ValueError, match="contradicts"):
        Predictor(model, variables, bases, cfg, precision="exact", dtype="bfloat16")


def test_training_config_key(tmp_path):
    config = configs.load("smoke")
    assert config.model.precision == "exact"
    config.model.precision = "default"
    assert loop.model_config_from(configs.check(config))["precision"] == "default"
    config.model.precision = "tf32"
    with pytest.raises(configs.ConfigError, match="model.precision must be one of"):
        configs.check(config, "smoke")
    # A run resumes with another policy (the same weights), not with another architecture; a
    # workdir written before the policy says 'dtype'.
    config.model.precision = "exact"
    wanted = loop.model_config_from(config)
    (tmp_path / "checkpoints" / "4").mkdir(parents=True)
    saved = {k: v for k, v in wanted.items() if k != "precision"}
    (tmp_path / "model.json").write_text(json.dumps({"model_config": {**saved, "dtype": "float32"}}))
    workdir_lib.check_resumable(tmp_path, {**wanted, "precision": "bfloat16"})
    with pytest.raises(ValueError, match="embed_dim"):
        workdir_lib.check_resumable(tmp_path, {**wanted, "embed_dim": wanted["embed_dim"] * 2})
