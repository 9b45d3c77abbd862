"""The held-out set a training config evaluates on (camflow_jax/training/heldout.py): GHOF-Cam
when ``data.eval_path`` names its file, synthetic scenes otherwise (every paper recipe), the
``eval_baselines`` rows scored on that set. The GHOF-Cam file is a tiny fake
(tests/fixtures_benchmarks.py)."""

import json

import numpy as np
import pytest

import fixtures_benchmarks as fx
from camflow_jax import configs
from camflow_jax.data import benchmarks, sources
from camflow_jax.training import feed, heldout, loop
from helpers import run_train


def _ghof_cam(tmp_path, per_split=2):
    """A 10-pair GHOF-Cam file (48x64, two pairs per split) and a depth folder for it."""
    path = tmp_path / "GHOF-Cam.npy"
    items = fx.make_ghof_cam(str(path), per_split=per_split)
    depth = tmp_path / "depth"
    depth.mkdir()
    for i in range(len(items)):
        np.savez(depth / f"{i:05d}.npz", depth1=np.full((48, 64), 2.0, np.float32),
                 depth2=np.full((48, 64), 3.0, np.float32))
    return path, depth, items


@pytest.mark.parametrize("name", ["ghof", "ghof_release", "cahomo", "synthetic", "pretrained_cpu", "smoke"])
def test_every_recipe_without_eval_path_evaluates_synthetic_scenes(name):
    config = configs.load(name)
    source, categories, label = heldout.heldout_source(config)
    assert label == "synthetic" and isinstance(source, sources.SyntheticPairs)
    assert len(source) == config.data.num_eval and categories == heldout.CATEGORIES
    config.data.num_eval = 0
    assert heldout.heldout_source(config) == (None, (), None)


def test_eval_path_selects_ghof_cam_spread_over_its_categories(tmp_path):
    path, depth, items = _ghof_cam(tmp_path)
    config = configs.load("ghof")
    config.model.height, config.model.width = 64, 64
    config.data.eval_path, config.data.eval_depth_dir, config.data.num_eval = str(path), str(depth), 5
    loop.validate_heldout(config)
    source, categories, label = heldout.heldout_source(config)
    assert label == "GHOF-Cam" and categories == benchmarks.GHOF_CATEGORIES
    assert len(source) == 5  # one of each split's two
    assert sorted(int(source[i]["category_id"]) for i in range(5)) == [0, 1, 2, 3, 4]
    config.data.num_eval = 50  # more than the file holds: all of it
    source, _, _ = heldout.heldout_source(config)
    assert len(source) == len(items)
    pair = source[3]
    np.testing.assert_array_equal(pair["gt_flow_f"], items[3]["gt_flow"])
    np.testing.assert_array_equal(pair["gt_valid_f"], items[3]["mask"])
    assert pair["depth1"].shape == (48, 64) and pair["K"].shape == (4,)


def test_the_baselines_rows_are_scored_on_ghof_cam(tmp_path):
    """A model predicting zero flow scores exactly as the identity baseline, per GHOF category,
    on the network-size crops of the GHOF-Cam pairs."""
    path, depth, items = _ghof_cam(tmp_path)
    config = configs.load("smoke")
    config.model.width = 64
    config.data.eval_path, config.data.eval_depth_dir = str(path), str(depth)
    source, categories, _ = heldout.heldout_source(config)
    records = heldout.evaluate_heldout(lambda b: np.zeros_like(b["gt_flow_f"]), source, feed.prepare_kwargs(config),
                                       3, ("identity",), {})
    assert len(records["camflow"]) == config.data.num_eval == 4
    table = heldout.summarize(records, categories)
    assert set(table) == {"camflow", "identity"}
    assert table["camflow"] == table["identity"] and table["identity"]["AVG"]["epe"] > 0


def test_a_missing_eval_file_or_depth_is_refused_before_training(tmp_path):
    path, depth, _ = _ghof_cam(tmp_path, per_split=1)
    config = configs.load("ghof")
    config.data.eval_path = str(tmp_path / "nope.npy")
    with pytest.raises(FileNotFoundError, match="data.eval_path"):
        loop.validate_config(config)
    config.data.eval_path = str(path)
    with pytest.raises(ValueError, match="data.eval_depth_dir"):
        loop.validate_config(config)
    config.bases.use_depth = False
    loop.validate_heldout(config)


def test_training_evaluates_on_ghof_cam_with_its_baselines(tmp_path, cache):
    path, depth, _ = _ghof_cam(tmp_path, per_split=1)
    wd = tmp_path / "w"
    out = run_train(wd, "--config.num_steps=1", "--config.data.num_eval=5", f"--config.data.eval_path={path}",
                    f"--config.data.eval_depth_dir={depth}", cache=cache).stdout
    assert "on 5 held-out pairs (GHOF-Cam)" in out
    table = json.loads((wd / "eval_1.json").read_text())
    assert set(table) == {"camflow", "identity"}
    assert set(table["camflow"]) == {*benchmarks.GHOF_CATEGORIES, "AVG"}
