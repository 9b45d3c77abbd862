"""The training recipe as the paper states it: configs, init_from, frozen features, depth resampling."""

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from camflow_jax import configs, models
from camflow_jax.data import depth as depth_lib
from camflow_jax.models import checkpoint
from camflow_jax.training import loop, state, steps
from helpers import ROOT

TINY = dict(embed_dim=8, depths=(1, 1, 1), num_heads=(2, 4, 8))


def test_paper_recipe_configs():
    # Implementation Details: Adam 1e-5, betas (0.9, 0.99), x0.8 per epoch, 5 epochs, batch 16,
    # 320x576 crops; GHOF refinement with the same setting and weights 1 : 10 : 40.
    for name in ("cahomo", "ghof"):
        c = configs.load(name)
        assert (c.optim.learning_rate, c.optim.b1, c.optim.b2, c.optim.decay_rate) == (1e-5, 0.9, 0.99, 0.8)
        assert (c.num_epochs, c.batch_size, c.model.height, c.model.width) == (5, 16, 320, 576)
        assert c.loss.nll == "paper"
    ghof = configs.load("ghof")
    assert (ghof.loss.motion, ghof.loss.feature, ghof.loss.smooth) == (1.0, 10.0, 40.0)
    assert loop.model_config_from(ghof)["group_sizes"] == [12, 12, 12]
    assert steps.frozen_prefixes(ghof) == ("features",)
    # The 24-basis CamFlow pretrains with the hybrid loss (motion + feature), no depth group.
    cahomo = configs.load("cahomo")
    assert loop.model_config_from(cahomo)["group_names"] == ["homography", "stochastic"]
    assert cahomo.loss.motion > 0 and cahomo.loss.feature > 0 and cahomo.loss.smooth == 0
    release = configs.load("ghof_release")
    assert (release.optim.learning_rate, release.batch_size, release.loss.nll) == (1e-4, 8, "release")


def test_group_names_have_one_source():
    cfg = configs.load("synthetic")
    mc = loop.model_config_from(cfg)
    assert mc["group_names"] == list(models.GROUP_NAMES)
    from camflow_jax.models import official

    assert official.RELEASED_CONFIG["group_names"] == list(models.GROUP_NAMES[:2])
    with pytest.raises(ValueError, match="physical"):
        models.resolve_config({"group_sizes": [12, 12], "group_names": ["physical", "stochastic"]})
    with pytest.raises(ValueError, match="order"):
        models.resolve_config({"group_sizes": [12, 12], "group_names": ["stochastic", "homography"]})


def _variables(groups, seed):
    sizes, names = models.group_layout(*groups)
    model = models.build_model({**TINY, "group_sizes": sizes, "group_names": names})
    return model, models.init_variables(model, jax.random.key(seed), 64, 128)


def _flat(tree):
    return {"/".join(str(getattr(k, "key", k)) for k in p): np.asarray(v)
            for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_init_from_camflow_loads_every_array_and_leaves_only_depth_fresh(tmp_path):
    src_model, src = _variables((12, 12, 0), seed=1)
    cfg = {**TINY, "group_sizes": [12, 12], "group_names": ["homography", "stochastic"], "height": 64, "width": 128}
    checkpoint.save_model(tmp_path / "camflow", cfg, src)
    _, loaded, _, loaded_cfg = checkpoint.load_model(tmp_path / "camflow")
    _, fresh = _variables((12, 12, 12), seed=2)
    out, report = state.init_from_checkpoint(fresh, loaded, {"depth"})
    got, want, init = _flat(out), _flat(src), _flat(fresh)
    for k, v in want.items():  # every source array landed unchanged
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    depth = sorted(k for k in got if k not in want)
    assert depth and all("depth" in k for k in depth)
    for k in depth:
        np.testing.assert_array_equal(got[k], init[k])
    assert report["loaded_arrays"] == len(want) and report["fresh_arrays"] == len(depth)
    assert any("homography" in k for k in want)  # the group the old trainer silently dropped


def test_init_from_refuses_unused_missing_or_misshaped_arrays():
    _, src = _variables((12, 12, 0), seed=1)
    _, fresh = _variables((12, 12, 12), seed=2)
    with pytest.raises(ValueError, match="missing from the checkpoint"):
        state.init_from_checkpoint(fresh, src, set())  # depth not expected to be new
    renamed = jax.tree.map(lambda x: x, src)
    renamed["params"]["met"]["tokens_physical"] = renamed["params"]["met"].pop("tokens_homography")
    with pytest.raises(ValueError, match="tokens_physical has no counterpart"):
        state.init_from_checkpoint(fresh, renamed, {"depth"})
    _, wide = _variables((12, 12, 0), seed=1)
    wide["params"]["met"]["tokens_stochastic"] = np.zeros((13, 64), np.float32)
    with pytest.raises(ValueError, match="tokens_stochastic is"):
        state.init_from_checkpoint(fresh, wide, {"depth"})


def test_legacy_physical_checkpoints_still_load(tmp_path):
    _, src = _variables((12, 12, 0), seed=3)
    legacy = jax.tree.map(lambda x: x, src)
    met = legacy["params"]["met"]
    for k in list(met):
        if "homography" in k:
            met[k.replace("homography", "physical")] = met.pop(k)
    cfg = {**TINY, "group_sizes": [12, 12], "group_names": ["physical", "stochastic"], "height": 64, "width": 128}
    d = tmp_path / "old"
    (d / "arrays").mkdir(parents=True)
    import json

    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ck:
        ck.save(d / "arrays", jax.tree.map(np.asarray, {"params": legacy["params"],
                                                       "batch_stats": legacy["batch_stats"]}), force=True)
    (d / "model.json").write_text(json.dumps({"format": checkpoint.FORMAT, "model_config": cfg}))
    _, variables, _, mc = checkpoint.load_model(d)
    assert mc["group_names"] == ["homography", "stochastic"]
    np.testing.assert_array_equal(variables["params"]["met"]["tokens_homography"],
                                  src["params"]["met"]["tokens_homography"])


def test_frozen_features_do_not_move_and_unknown_prefixes_are_named():
    cfg = configs.load("smoke")
    cfg.loss.feature = 10.0  # feature loss on: the shallow features are frozen automatically
    assert steps.frozen_prefixes(cfg) == ("features",)
    _, v = _variables((12, 12, 12), seed=0)
    tx = steps.make_optimizer(cfg, 10)
    params = jax.tree.map(jnp.asarray, v["params"])

    @jax.jit  # as the train step runs it (one compile; op by op, the 366 leaves took 20 s)
    def update(params):
        grads = jax.tree.map(jnp.ones_like, params)
        updates, _ = tx.update(grads, tx.init(params), params)
        return optax.apply_updates(params, updates)

    new = update(params)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(new["features"]), jax.tree.leaves(params["features"])))
    assert not np.array_equal(new["mask_net"]["conv_0"]["kernel"], params["mask_net"]["conv_0"]["kernel"])
    cfg.optim.auto_freeze = False
    assert steps.frozen_prefixes(cfg) == ()
    cfg.optim.freeze = ("shallow",)
    tx = steps.make_optimizer(cfg, 10)
    with pytest.raises(ValueError, match=r"\['shallow'\] match no parameter.*'features'"):
        tx.init(params)


def test_depth_is_resampled_like_the_image():
    rng = np.random.default_rng(0)
    d = rng.uniform(1, 5, (60, 80)).astype(np.float32)
    for hw in ((30, 40), (96, 128), (45, 60)):
        np.testing.assert_allclose(depth_lib.resize_depth(d, *hw),
                                   cv2.resize(d, hw[::-1], interpolation=cv2.INTER_LINEAR), rtol=1e-6)
    d[20, 30] = 0.0  # invalid: everything it would blend into is invalid, nothing else
    out = depth_lib.resize_depth(d, 120, 160)
    touched = cv2.resize((d <= 0).astype(np.float32), (160, 120), interpolation=cv2.INTER_LINEAR) > 0
    assert np.array_equal(np.isnan(out), touched)
    depth_lib.check_depth_aspect((300, 400), (600, 800), "x")
    depth_lib.check_depth_aspect((301, 400), (600, 800), "x")  # rounding
    with pytest.raises(ValueError, match="d.npy: depth is 300x300"):
        depth_lib.check_depth_aspect((300, 300), (600, 800), "d.npy")


def test_one_config_tree_the_checkout_files_name_the_packaged_set():
    import subprocess
    import sys
    from pathlib import Path

    names = configs.names()
    assert {"default", "cahomo", "ghof", "synthetic", "smoke"} <= set(names) and "common" not in names
    assert sorted(p.stem for p in (ROOT / "configs").glob("*.py")) == sorted(names)
    for n in names:
        shim = ROOT / "configs" / f"{n}.py"
        assert shim.read_text() == (f"from camflow_jax.configs.{n} import get_config  # noqa: F401  "
                                    f"(the one copy: camflow_jax/configs/{n}.py)\n"), shim
        assert configs.load(str(shim)).to_dict() == configs.load(n).to_dict()
        models.ModelConfig.from_dict(loop.model_config_from(configs.load(n)))  # a valid architecture
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.configs", "ghof"], capture_output=True, text=True)
    assert proc.returncode == 0 and Path(proc.stdout.strip()) == ROOT / "camflow_jax" / "configs" / "ghof.py"
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.configs", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2 and "ghof" in proc.stderr
    with pytest.raises(FileNotFoundError, match="packaged configs: cahomo"):
        configs.load("nope.py")


def test_common_settings_are_shared_not_copied():
    # The paper's data and optimizer setting is one helper used by both paper configs.
    for name in ("cahomo", "ghof"):
        c = configs.load(name)
        assert (c.data.resize_height, c.data.resize_width, c.batch_size) == (360, 640, 16)
    narrow = [configs.load(n).model for n in ("synthetic", "pretrained_cpu", "smoke")]
    assert all((m.depths, m.num_heads) == ((2, 2, 2), (2, 4, 8)) for m in narrow)
    assert [m.embed_dim for m in narrow] == [16, 16, 8]
