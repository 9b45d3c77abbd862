"""tools/basis_ablation.py: the four variants carry the paper's basis counts, and one tiny run
trains, evaluates side by side and, run again, reuses the trained workdirs."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from camflow_jax import checkpoint, configs, models
from camflow_jax.trainer import model_config_from

ROOT = Path(__file__).resolve().parents[1]

TINY_CONFIG = """
from camflow_jax.configs import smoke


def get_config():
    c = smoke.get_config()
    c.model.depths = (1, 1, 1)
    c.checkpoint_every = 0
    return c
"""


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("camflow_ablation_tool", ROOT / "tools" / "basis_ablation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_variants_have_the_papers_basis_counts(tool):
    base = configs.load("synthetic")
    for name, static, groups in (("8", 8, ["homography"]), ("12", 12, ["homography"]),
                                 ("24", 24, ["homography", "stochastic"]),
                                 ("36", 24, ["homography", "stochastic", "depth"])):
        mc = model_config_from(tool.variant_config(base, name, num_steps=7))
        assert mc["group_names"] == groups
        assert models.build_model(mc).num_bases == int(name)
        bases = checkpoint.model_bases({**mc, "height": 64, "width": 128})
        assert bases.shape == (static, 64, 128, 2)
        # every basis is a real field at the 1-px-max scale (none left empty by a group of 0)
        np.testing.assert_allclose(np.abs(bases).reshape(static, -1).max(1), 1.0, atol=1e-5)
    assert base.num_steps != 7 and base.bases.num_homography == 12  # the base config is untouched
    with pytest.raises(ValueError, match="unknown variant"):
        tool.variant_config(base, "200", None)


def test_tiny_ablation_trains_evaluates_and_resumes(tool, tmp_path, capsys):
    cfg = tmp_path / "tiny.py"
    cfg.write_text(TINY_CONFIG)
    wd, out = tmp_path / "abl", tmp_path / "eval"
    args = ["--config", str(cfg), "--workdir", str(wd), "--out", str(out), "--variants=8,36",
            "--steps=1", "--num=2", "--baselines=identity"]
    assert tool.main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"identity", "camflow_net:b8", "camflow_net:b36"}
    for method in results.values():
        assert np.isfinite(method["AVG"]["epe"])
    assert json.loads((wd / "b8" / "model.json").read_text())["model_config"]["group_sizes"] == [8]
    assert set(json.loads((out / "train_seconds.json").read_text())) == {"b8", "b36"}
    capsys.readouterr()
    assert tool.main(args) == 0  # both finished: evaluated again, not retrained
    assert capsys.readouterr().out.count("trained workdir found") == 2
