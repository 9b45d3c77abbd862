"""The basis ablation (tools.bench.ablation, CLI python -m tools.bench basis_ablation): the four
variants carry the paper's basis counts, and one tiny run trains, evaluates side by side and,
run again (through the command line), reuses the trained workdirs."""

import json
import subprocess
import sys

import numpy as np
import pytest

from camflow_jax import configs, models
from camflow_jax.models import basis_set
from camflow_jax.training.loop import model_config_from
from helpers import ROOT
from tools.bench import ablation

TINY_CONFIG = """
from camflow_jax.configs import smoke


def get_config():
    c = smoke.get_config()
    c.model.depths = (1, 1, 1)
    c.model.height = c.model.width = 64  # the smallest input (multiples of 64)
    c.checkpoint_every = 0
    c.data.num_eval = 0  # no held-out evaluation inside training: the ablation evaluates afterwards
    return c
"""


def test_variants_have_the_papers_basis_counts():
    base = configs.load("synthetic")
    for name, static, groups in (("8", 8, ["homography"]), ("12", 12, ["homography"]),
                                 ("24", 24, ["homography", "stochastic"]),
                                 ("36", 24, ["homography", "stochastic", "depth"])):
        mc = model_config_from(ablation.variant_config(base, name, num_steps=7))
        assert mc["group_names"] == groups
        assert models.build_model(mc).num_bases == int(name)
        bases = basis_set.static_bases({**mc, "height": 64, "width": 128})
        assert bases.shape == (static, 64, 128, 2)
        # every basis is a real field at the 1-px-max scale (none left empty by a group of 0)
        np.testing.assert_allclose(np.abs(bases).reshape(static, -1).max(1), 1.0, atol=1e-5)
    assert base.num_steps != 7 and base.bases.num_homography == 12  # the base config is untouched
    with pytest.raises(ValueError, match="unknown variant"):
        ablation.variant_config(base, "200", None)


@pytest.mark.slow
def test_tiny_ablation_trains_evaluates_and_resumes(tmp_path):
    cfg = tmp_path / "tiny.py"
    cfg.write_text(TINY_CONFIG)
    wd, out = tmp_path / "abl", tmp_path / "eval"
    lines = []
    run = ablation.run_ablation(configs.load(str(cfg)), wd, out=out, variants=["8", "36"], steps=1, num=2,
                                baselines=["identity"], log=lines.append)
    assert run["found"] == [] and set(run["trained"]) == {"b8", "b36"}
    assert sum("training 1 steps" in line for line in lines) == 2
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"identity", "camflow_net:b8", "camflow_net:b36"}
    for method in results.values():
        assert np.isfinite(method["AVG"]["epe"])
    assert json.loads((wd / "b8" / "model.json").read_text())["model_config"]["group_sizes"] == [8]
    assert set(json.loads((out / "train_seconds.json").read_text())) == {"b8", "b36"}
    # Run again, as users do, through the command line: both finished, evaluated again, not retrained.
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "basis_ablation", "--config", str(cfg),
                           "--workdir", str(wd), "--out", str(out), "--variants=8,36", "--steps=1", "--num=2",
                           "--baselines=identity"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("trained workdir found") == 2 and "] training " not in proc.stdout
    assert set(json.loads((out / "results.json").read_text())) == set(results)
