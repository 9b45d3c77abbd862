"""Input-pipeline worker processes and read threads never use JAX.

On an accelerator machine the trainer's process owns the device; a grain worker process that
calls a ``jax.numpy`` function initialises a backend of its own, and there (CUDA) that fails
(``RuntimeError: Unable to initialize backend 'cuda'``) before step 1. Everything a worker runs
(the sources' ``__getitem__``, the resize/crop transform, the labels, depth and intrinsics
updates) is numpy/OpenCV.

The tests make JAX unusable where the worker code runs: ``JAX_PLATFORMS`` names a platform that
does not exist, so the first backend a process initialises raises. In the training test it is
set only for the worker processes: grain starts them with multiprocessing's ``spawn``, so they
import jax afresh from the environment the trainer has when it starts them, while the trainer
itself read ``JAX_PLATFORMS=cpu`` when it imported jax and initialised its CPU backend before
the change (``_LAUNCH``).

The training run is test_train's smoke run (:data:`helpers.TRAIN_FLAGS`): training/test_train.py
runs first (conftest.LONGEST_FIRST), so in the default tier its step comes from the session's
compilation cache.
"""

import os
import subprocess
import sys

import cv2
import numpy as np
import pytest

from fixtures_benchmarks import random_homography, textured_image
from helpers import ROOT, TRAIN_FLAGS, logged_metrics, train_env

NO_PLATFORM = "no_such_platform"

# ``python -m camflow_jax.train ARGS`` (runpy runs the module as __main__, as ``-m`` does, so the
# workers import it as their __mp_main__ as in a real run), after this process has initialised
# its own (CPU) backend and set JAX_PLATFORMS for the processes it starts from then on.
_LAUNCH = f"""
import os, runpy, sys
import jax
jax.config.update("jax_platforms", "cpu")
assert jax.devices()[0].platform == "cpu"
os.environ["JAX_PLATFORMS"] = {NO_PLATFORM!r}
sys.argv[0] = "camflow_jax.train"
runpy.run_module("camflow_jax.train", run_name="__main__", alter_sys=True)
"""


def _train_with_jaxless_workers(workdir, *args, cache):
    env = train_env(cache)
    env["CAMFLOW_JAX_NO_HUGEPAGES"] = "1"  # no re-execution of the launcher
    return subprocess.run([sys.executable, "-c", _LAUNCH, f"--workdir={workdir}", *TRAIN_FLAGS, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_training_with_worker_processes_that_cannot_use_jax(tmp_path, cache):
    wd = tmp_path / "workers"
    proc = _train_with_jaxless_workers(wd, "--config.num_steps=2", "--config.data.num_workers=2", cache=cache)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "on 1 cpu device(s)" in proc.stdout and "data: 2 worker process(es)" in proc.stdout
    assert [r["step"] for r in logged_metrics(wd)] == [1, 2]
    assert all(np.isfinite(r["total"]) for r in logged_metrics(wd))


# Every training source read and prepared as a worker does it (resize with depth and K, random
# crop), in read threads too, in a process where JAX cannot start: the last line shows that it
# really cannot.
_READ_ALL = f"""
import sys
import numpy as np
from camflow_jax.data import pipeline, sources
from camflow_jax.data.synthetic.scenes import SyntheticScenes

ghof, cahomo, frames = sys.argv[1:]
by_name = {{"ghof": sources.GhofTrain(ghof, "depth{{}}.npy"), "cahomo": sources.CahomoTrain(cahomo),
           "frames": sources.FramePairs(frames),
           "synthetic": sources.SyntheticPairs(SyntheticScenes(seed=0, num_samples=2, height=40, width=72))}}
kw = dict(height=32, width=64, resize=(36, 72))
for name, src in by_name.items():
    need_depth = name in ("ghof", "synthetic")
    for i in range(len(src)):
        pair = pipeline.prepare_pair(src[i], rng=np.random.default_rng(i), need_depth=need_depth, **kw)
        assert pair["img1"].shape == (32, 64, 3) and pair["flow_f"].shape == (32, 64, 2), name
        if need_depth:
            assert pair["K"].dtype == np.float32 and np.all(np.isfinite(pair["K"])), name
        if name == "frames":  # SIFT + MAGSAC found the pan: a label everywhere
            assert pair["label_mask_f"].all()
    batches = pipeline.train_dataset(src, seed=0, global_batch=2, process_index=0, process_count=1,
                                     prepare_kwargs=dict(need_depth=need_depth, **kw), read_threads=2)
    it = iter(batches)
    for _ in range(2):
        assert next(it)["img1"].shape == (2, 32, 64, 3), name
    for b in pipeline.eval_batches(src, 2, dict(need_depth=need_depth, **kw)):
        assert b["img1"].shape[1:] == (32, 64, 3), name
    print(name, "read", flush=True)
import jax.numpy as jnp
try:
    jnp.zeros(1)
except RuntimeError as e:
    assert {NO_PLATFORM!r} in str(e), e
    print("jax unusable")
"""


def _write_rgb(path, img):
    cv2.imwrite(str(path), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))


def test_every_source_reads_and_prepares_without_jax(tmp_path):
    rng = np.random.default_rng(0)
    h, w = 45, 80
    ghof = tmp_path / "ghof"
    for i in range(2):  # GHOF training samples: band-wise gyro homographies and depth (so K)
        d = ghof / f"sample_{i}"
        d.mkdir(parents=True)
        img = textured_image(rng, h, w)
        _write_rgb(d / "img1.png", img)
        _write_rgb(d / "img2.png", cv2.warpPerspective(img, random_homography(rng, h, w, 2.0), (w, h)))
        np.save(d / "gyro_homo.npy", np.stack([random_homography(rng, h, w, 2.0) for _ in range(6)]))
        for k in (1, 2):
            np.save(d / f"depth{k}.npy", rng.uniform(1, 10, (h // 3, w // 3)).astype(np.float32))
    cahomo = tmp_path / "cahomo"
    (cahomo / "img").mkdir(parents=True)
    for n in range(3):
        _write_rgb(cahomo / "img" / f"f{n}.png", textured_image(rng, h, w))
    (cahomo / "train.txt").write_text("v/f0.png v/f1.png\nv/f1.png v/f2.png\n")
    np.save(cahomo / "train_homographies.npy", np.stack([random_homography(rng, h, w, 2.0) for _ in range(2)]))
    frames = tmp_path / "frames"
    frames.mkdir()
    img = textured_image(rng, 120, 160)
    for n in range(3):  # a panning camera: SIFT + MAGSAC finds the motion
        _write_rgb(frames / f"{n:03d}.png", np.ascontiguousarray(img[10:10 + h, 4 * n:4 * n + w]))
    env = dict(os.environ, JAX_PLATFORMS=NO_PLATFORM)
    proc = subprocess.run([sys.executable, "-c", _READ_ALL, str(ghof), str(cahomo), str(frames)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-5000:]}"
    assert proc.stdout.split() == ["ghof", "read", "cahomo", "read", "frames", "read", "synthetic", "read",
                                   "jax", "unusable"]


def test_auto_worker_count_follows_the_machine_and_other_negatives_are_refused(monkeypatch):
    from camflow_jax.data import pipeline

    assert [pipeline.resolve_num_workers(-1, cpus=c) for c in (1, 2, 3, 16, 64)] == [0, 0, 1, 14, 16]
    assert [pipeline.resolve_num_workers(n, cpus=8) for n in (0, 3, np.int64(5))] == [0, 3, 5]
    assert pipeline.resolve_num_workers(64, cpus=2) == 2  # clamped to the usable cores (issue 63)
    assert 1 <= pipeline.usable_cpus() <= (os.cpu_count() or 1)
    monkeypatch.setattr(pipeline, "usable_cpus", lambda: 8)
    assert pipeline.resolve_num_workers(-1) == 6
    for bad in (-2, -12, True, 1.5, "auto"):
        with pytest.raises(ValueError, match="data.num_workers must be an integer >= 0, or -1"):
            pipeline.resolve_num_workers(bad)
