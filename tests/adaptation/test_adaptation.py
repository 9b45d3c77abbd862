"""Self-training and test-time adaptation (camflow_jax.adaptation, python -m camflow_jax.adapt).

Oracles: the known homographies of planar clips (:func:`camflow_jax.stabilization.clips.planar_clip`,
exact pair motion; with a moving object, the background's exact motion and the object's mask),
numpy closed forms (an exact inverse flow agrees with itself), file bytes
(an interrupted run leaves the previous checkpoint's files as they were)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from camflow_jax.adaptation import finetune as ft
from camflow_jax.adaptation import run, teacher
from camflow_jax.adaptation.config import AdaptConfig
from camflow_jax.adaptation.footage import Clip, clip_pairs, read_clips, split_pairs
from camflow_jax.geometry import host
from camflow_jax.predictor import Predictor
from camflow_jax.stabilization.clips import moving_object_clip, planar_clip
from helpers import ROOT

H, W = 128, 256  # the shipped network's own size: the labels' grid equals the input grid


@pytest.fixture(scope="module")
def clip():
    """A planar clip with its exact pair homographies (image t -> image t + 1)."""
    return planar_clip(num_frames=12, height=H, width=W, seed=3)


@pytest.fixture(scope="module")
def loaded():
    return run.load_model()


@pytest.fixture(scope="module")
def labelled(clip, loaded, tmp_path_factory):
    clips = [Clip("planar", clip.frames)]
    pairs = clip_pairs(clips)
    cache = tmp_path_factory.mktemp("teacher")
    labels = teacher.label_pairs(loaded[4], clips, pairs, cache_dir=cache, progress=False)
    return clips, pairs, labels, cache


def _epe(flow, truth):
    valid = host.warp_validity(truth) > 0
    return float(np.hypot(*(flow - truth).transpose(2, 0, 1))[valid].mean())


def test_labels_of_a_homography_clip_follow_the_known_homographies(clip, loaded, labelled):
    clips, pairs, labels, _ = labelled
    bases = np.asarray(loaded[4].constant_depth_bases((H, W)), np.float32)
    assert labels.keep.all(), labels.reason
    for i, (_, t, _) in enumerate(pairs):
        Hm = clip.pair_homographies[t]
        # warp(img2, flow_f) ~ img1: flow_f(x) = H x - x for H mapping image-1 pixels to image 2
        truth_f = host.homography_flow(Hm, H, W)
        truth_b = host.homography_flow(np.linalg.inv(Hm), H, W)
        assert _epe(teacher.label_flows(labels.coeffs_f[i], bases), truth_f) < 0.35
        assert _epe(teacher.label_flows(labels.coeffs_b[i], bases), truth_b) < 0.35
        wf, wb = labels.weights(i)
        # the refinement trusts a clean planar pair (Cauchy IRLS weights average about 0.5 there)
        assert wf.mean() > 0.3 and wb.mean() > 0.3
    assert not labels.two_motion.any()  # one motion: the refined flow is every label


def test_labels_of_a_clip_with_a_large_moving_object_follow_the_camera(loaded):
    """A planar clip with an object of 30 % of the frame sliding across it (about 2.5 px a frame
    of its own): the refined flow bends towards the object, so those pairs are labelled by the
    camera's motion. Against the clip's exact background homographies the labels are several
    times closer than the refined flow's, and their weights are low on the object (the clip's own
    object mask). A pair whose two motions explain it about equally is dropped, not guessed."""
    obj = moving_object_clip(7, H, W, seed=0, object_fraction=0.3, travel=0.06)
    clips = [Clip("object", obj.frames)]
    pairs = clip_pairs(clips)
    bases = np.asarray(loaded[4].constant_depth_bases((H, W)), np.float32)
    got = {tm: teacher.label_pairs(loaded[4], clips, pairs, teacher.TeacherSettings(two_motions=tm), progress=False)
           for tm in (True, False)}
    lab = got[True]
    assert not got[False].two_motion.any()
    assert lab.two_motion.sum() >= 4, (lab.two_motion, lab.reason)
    assert all(r.startswith("two motions explain the pair about equally") for r, k in zip(lab.reason, lab.keep)
               if not k), lab.reason
    err = {tm: [_epe(teacher.label_flows(got[tm].coeffs_f[i], bases), host.homography_flow(obj.pair_homographies[t], H, W))
                for i, (_, t, _) in enumerate(pairs) if lab.two_motion[i]] for tm in got}
    assert np.mean(err[True]) < 0.1 and np.mean(err[True]) < 0.25 * np.mean(err[False]), err
    for i, (_, t, _) in enumerate(pairs):
        if lab.two_motion[i]:
            wf, on = lab.weights(i)[0], obj.info["object_mask"][t]
            assert wf[on].mean() < 0.5 * wf[~on].mean(), (t, wf[on].mean(), wf[~on].mean())


def test_cached_labels_are_read_back_and_a_damaged_chunk_is_relabelled(loaded, labelled):
    clips, pairs, labels, cache = labelled
    again = teacher.label_pairs(loaded[4], clips, pairs, cache_dir=cache, progress=False)
    assert again.seconds == 0.0  # nothing refined: read from the cache
    np.testing.assert_array_equal(again.coeffs_f, labels.coeffs_f)
    np.testing.assert_array_equal(again.weight_b, labels.weight_b)
    npz = next(Path(cache).glob("*.npz"))
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npz.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="damaged"):
        third = teacher.label_pairs(loaded[4], clips, pairs, cache_dir=cache, progress=False)
    assert third.seconds > 0
    np.testing.assert_allclose(third.coeffs_f, labels.coeffs_f, atol=1e-5)
    # the same weights with the network's contrast floor off answer differently: not read back
    pred = loaded[4]
    other = teacher.label_pairs(Predictor(pred.model, pred.variables, pred.static_bases, pred.model_config,
                                          contrast_floor=0.0), clips, pairs, cache_dir=cache, progress=False)
    assert other.seconds > 0


def test_forward_backward_weight_against_closed_forms():
    Hm = np.array([[1.01, 0.01, 2.0], [-0.01, 0.99, -1.5], [1e-5, 0, 1.0]])
    f = host.homography_flow(Hm, 64, 96).astype(np.float32)
    b = host.homography_flow(np.linalg.inv(Hm), 64, 96).astype(np.float32)
    w = teacher.fb_weight(f, b)
    inside = host.warp_validity(f) > 0
    assert w[inside].min() > 0.95 and (w[~inside] == 0).all()
    assert teacher.fb_weight(f, f)[inside].mean() < 0.05  # a backward flow that agrees with nothing


def test_split_pairs_hold_out_spread_or_by_time():
    pairs = [(0, t, t + 1) for t in range(24)] + [(1, t, t + 1) for t in range(8)]
    train, held = split_pairs(pairs, 0.125)
    assert sorted(train + held) == list(range(32)) and not set(train) & set(held)
    assert held == [i for i in range(32) if i % 8 == 4]
    train, held = split_pairs(pairs, 0.25, every=False)
    assert held == [18, 19, 20, 21, 22, 23, 30, 31]  # each clip's last quarter
    with pytest.raises(ValueError, match="at least 2"):
        split_pairs(pairs[:1])


@pytest.mark.slow  # compiles the fine-tuning step (~1-2 min on 2 cores)
def test_adaptation_lowers_the_network_error_against_the_exact_motion(clip, loaded, labelled):
    """A few steps on the clip's own labels bring the network alone closer to the exact flows of
    the clip's pairs (the renderer's homographies, not the teacher)."""
    model, variables, static, _, pred = loaded
    clips, pairs, labels, _ = labelled
    footage = ft.Footage.of(pred, clips, [np.asarray(pred.constant_depth_bases((H, W)), np.float32)])
    cfg = AdaptConfig(max_steps=25, synthetic_batch=0, batch_size=4, learning_rate=3e-4)
    new, history = ft.finetune(model, variables, static, pred.depth_sigmas, footage, labels,
                               list(range(len(pairs))), cfg, progress=False)
    assert history["steps"] == 25

    def error(v):
        ff, _ = ft.network_flows(model, v, footage, pairs)
        return np.mean([_epe(ff[i], host.homography_flow(clip.pair_homographies[t], H, W))
                        for i, (_, t, _) in enumerate(pairs)])

    before, after = error(variables), error(new)
    assert after < 0.8 * before, (before, after)


def test_the_one_direction_step_is_the_backward_loss_of_pairs_turned_round(loaded, labelled):
    """``AdaptConfig(directions=1)``'s step on pairs all turned round: its footage loss is the
    label-weighted L1 distance (numpy) between the two-direction network's backward flows and the
    backward labels, its synthetic loss the plain L1 distance of the backward flows to the
    renderer's exact backward flows; a rate of 0 leaves the parameters as they were. With
    ``directions=2`` on rows not turned, each loss is the mean of the two directions'."""
    import jax

    from camflow_jax.models import basis_set

    model, variables, static, _, pred = loaded
    clips, pairs, labels, _ = labelled
    bases = np.asarray(pred.constant_depth_bases((H, W)), np.float32)
    footage = ft.Footage.of(pred, clips, [bases])
    pool = ft.SyntheticPool.render(2, H, W, seed=5, channel_order=pred.channel_order)
    pick = np.array([0, 2, 5])
    real = ft.footage_batch(footage, labels, 0, pick, np.random.default_rng(0), 0.0, np.ones(3, bool))
    syn = ft.synthetic_batch(pool, np.array([0, 1]), np.ones(2, bool))
    tx = ft.optimizer(variables["params"], "all")
    sig = tuple(pred.depth_sigmas or ())
    step = ft.make_step(model, tx, static, sig, 0.3, directions=1)
    params, _, terms = step(variables["params"], tx.init(variables["params"]), variables["batch_stats"], real, syn,
                            np.float32(0.0))
    g = footage.gray[0]
    out = model.apply(variables, g[pick], g[pick + 1], bases, None, train=False, confidence=False)
    lab = np.einsum("bk,khwc->bhwc", labels.coeffs_b[pick], bases)
    w = np.stack([labels.weights(i)[1] for i in pick])
    err = np.abs(np.asarray(out["flow_b"]) - lab).sum(-1)
    np.testing.assert_allclose(float(terms["footage"]), (w * err).sum() / w.sum(), rtol=2e-4)
    bf, bb = (np.stack([basis_set.with_depth_bases(static, d[i], pool.K[i], sig) for i in (0, 1)])
              for d in (pool.depth1, pool.depth2))
    so = model.apply(variables, pool.g1[:2], pool.g2[:2], bf, bb, train=False, confidence=False)
    ref = np.abs(np.asarray(so["flow_b"]) - pool.flow_b[:2]).sum(-1).mean()
    np.testing.assert_allclose(float(terms["synthetic"]), ref, rtol=2e-4)
    np.testing.assert_allclose(float(terms["loss"]), 0.7 * float(terms["footage"]) + 0.3 * ref, rtol=2e-4)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(variables["params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # both directions of rows not turned: the mean of the two directions' losses (numpy)
    both = ft.make_step(model, tx, static, sig, 0.3, directions=2)
    _, _, terms2 = both(variables["params"], tx.init(variables["params"]), variables["batch_stats"],
                        ft.footage_batch(footage, labels, 0, pick, np.random.default_rng(0), 0.0),
                        ft.synthetic_batch(pool, np.array([0, 1])), np.float32(0.0))
    lab_f = np.einsum("bk,khwc->bhwc", labels.coeffs_f[pick], bases)
    w_f = np.stack([labels.weights(i)[0] for i in pick])
    err_f = np.abs(np.asarray(out["flow_f"]) - lab_f).sum(-1)
    np.testing.assert_allclose(float(terms2["footage"]),
                               0.5 * ((w_f * err_f).sum() / w_f.sum() + (w * err).sum() / w.sum()), rtol=2e-4)
    ref_f = np.abs(np.asarray(so["flow_f"]) - pool.flow_f[:2]).sum(-1).mean()
    np.testing.assert_allclose(float(terms2["synthetic"]), 0.5 * (ref_f + ref), rtol=2e-4)
    with pytest.raises(ValueError, match="directions must be 1 or 2"):
        AdaptConfig(directions=3)


def test_an_interrupted_adaptation_leaves_the_previous_checkpoint_untouched(clip, loaded, tmp_path):
    out = tmp_path / "adapted"
    out.mkdir()
    old = {"model.json": b'{"old": 1}', "weights.npz": b"old weights", "adapt.json": b"{}"}
    for name, data in old.items():
        (out / name).write_bytes(data)
    folder = tmp_path / "frames"
    folder.mkdir()
    import cv2

    for t, f in enumerate(clip.frames[:6]):
        cv2.imwrite(str(folder / f"{t:03d}.png"), f[..., ::-1])
    calls = []

    def stop():
        calls.append(1)
        if len(calls) > 1:  # while labelling: nothing learned yet, nothing to write
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run.adapt([folder], out, overwrite=True, model=loaded, cache_dir=None, progress=False, stop=stop,
                  config=AdaptConfig(max_steps=50, synthetic_batch=0), log=lambda m: None)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_an_adaptation_that_did_not_help_is_not_kept(clip, loaded, tmp_path, monkeypatch, capsys):
    """adapt writes nothing (the previous checkpoint's bytes stay) and says why in one line;
    stabilize --adapt goes on with the model it started from, with a warning. With a gain it
    stabilizes with the adapted checkpoint, the model it started from measuring beside it."""
    import argparse
    import contextlib

    import cv2

    from camflow_jax import stabilize

    out = tmp_path / "adapted"
    out.mkdir()
    (out / "model.json").write_bytes(b'{"old": 1}')
    folder = tmp_path / "frames"
    folder.mkdir()
    for t, f in enumerate(clip.frames[:4]):
        cv2.imwrite(str(folder / f"{t:03d}.png"), f[..., ::-1])
    report = {"heldout_error_before_px": 2.0, "heldout_error_after_px": 2.5, "held_out_kept": 1, "steps": 1}
    monkeypatch.setattr(run, "adapt_clips", lambda clips, **kw: (loaded[1], loaded[3], dict(report)))
    monkeypatch.setattr(run, "load_model", lambda checkpoint=None: loaded)
    with pytest.raises(ValueError, match=r"did not lower the network's error on the 1 held-out pairs "
                                         r"\(2.00 -> 2.50 px after 1 steps\).*nothing was written"):
        run.adapt([folder], out, overwrite=True, model=loaded)
    assert [p.name for p in out.iterdir()] == ["model.json"] and (out / "model.json").read_bytes() == b'{"old": 1}'
    args = argparse.Namespace(estimator="camflow", no_refine=False, depth=None, adapt_minutes=None, adapt_frames=4,
                              input=str(folder), checkpoint=None, quiet=True)
    with contextlib.ExitStack() as stack:
        stabilize._adapt_first(args, False, stack)
    assert args.checkpoint is None and "stabilizing with the unadapted model" in capsys.readouterr().err
    assert getattr(args, "reference", None) is None
    # a gain: the adapted checkpoint is stabilized with, and the model it started from beside it
    gain = dict(report, heldout_error_after_px=1.5, clips=[], checkpoint="shipped")
    monkeypatch.setattr(run, "adapt_clips", lambda clips, **kw: (loaded[1], loaded[3], gain))
    from camflow_jax.stabilization import estimators
    with contextlib.ExitStack() as stack:
        stabilize._adapt_first(args, False, stack)
        assert os.path.isdir(args.checkpoint) and args.reference is loaded[4]
        est = stabilize._estimator(argparse.Namespace(**vars(args), refine_size=None, two_motions=None, intrinsics=None,
                                                      fov=None), estimators)
        assert est.reference_estimator.predictor is loaded[4] and est.predictor is not loaded[4]
    assert run.no_gain(dict(report, heldout_error_after_px=1.9)) is None
    assert run.no_gain(dict(report, heldout_error_after_px=None)) is None  # nothing held out: nothing to judge


@pytest.mark.slow  # trains: compiles the fine-tuning step
def test_an_adaptation_interrupted_while_training_or_saving_leaves_the_previous_checkpoint(clip, loaded, tmp_path,
                                                                                         monkeypatch):
    out = tmp_path / "adapted"
    out.mkdir()
    (out / "model.json").write_bytes(b'{"old": 1}')
    frames = [Clip("planar", clip.frames[:6])]
    steps = []

    def stop():
        steps.append(1)
        if len(steps) > 6:  # 3 labelling batches, then 3 training steps
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run.adapt_clips(frames, model=loaded, cache_dir=None, progress=False, stop=stop,
                        config=AdaptConfig(max_steps=50, synthetic_batch=0), log=lambda m: None)
    # the save itself interrupted: the checkpoint writer fails after writing part of the folder
    from camflow_jax.models import checkpoint as ckpt

    def broken(directory, *a, **k):
        Path(directory, "weights.npz").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "save_compact", broken)
    with pytest.raises(KeyboardInterrupt):
        run.save(out, loaded[1], loaded[3], loaded[2], {"clips": [], "heldout_error_before_px": None,
                                                        "heldout_error_after_px": None, "steps": 0,
                                                        "checkpoint": "shipped"}, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["model.json"] and (out / "model.json").read_bytes() == b'{"old": 1}'


def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "camflow_jax.adapt", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300, **kw)


def test_the_cli_refuses_bad_input_in_one_line(tmp_path):
    import cv2

    folder = tmp_path / "two"
    folder.mkdir()
    for t in range(2):
        cv2.imwrite(str(folder / f"{t}.png"), np.full((64, 128, 3), 40 * t, np.uint8))
    cases = [((folder, "-o", tmp_path / "o1"), "at least 3"),
             ((tmp_path / "missing.mp4", "-o", tmp_path / "o2"), "not found"),
             ((folder, "-o", tmp_path / "o3", "--minutes", "0"), "--minutes must be > 0"),
             ((folder, "-o", tmp_path / "o4", "--occluders", "1.5"), "--occluders must be a share in [0, 1]"),
             ((folder, "-o", ROOT / "camflow_jax" / "models" / "weights" / "mine"), "shipped model")]
    for args, words in cases:
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_read_clips_names_the_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        read_clips([tmp_path / "nope"])


def test_the_selftrain_config_is_checked_naming_the_key():
    from camflow_jax import configs
    from camflow_jax.training import loop

    c = configs.load("selftrain")
    with pytest.raises(ValueError, match="selftrain.footage is empty"):
        loop.validate_config(c)
    c.selftrain.footage = "clips/"
    for key, value, words in (("minutes", 0.0, "selftrain.minutes must be a finite number > 0"),
                              ("holdout", 1.0, "selftrain.holdout must be a share"),
                              ("occluders", -0.1, "selftrain.occluders must be a share"),
                              ("trainable", "most", "selftrain.trainable must be one of"),
                              ("learning_rate", -1e-3, "selftrain.learning_rate must be a finite number > 0"),
                              ("synthetic_batch", -1, "selftrain.synthetic_batch must be >= 0"),
                              ("max_frames", 2, "selftrain.max_frames must be >= 3")):
        bad = c.copy_and_resolve_references()
        bad.selftrain[key] = value
        with pytest.raises(ValueError, match=words):
            loop.validate_config(bad)


def test_footage_inputs_finds_videos_and_frame_folders(tmp_path):
    import cv2

    from camflow_jax.adaptation.footage import footage_inputs

    (tmp_path / "b_frames").mkdir()
    cv2.imwrite(str(tmp_path / "b_frames" / "0.png"), np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "a.mp4").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("x")
    assert footage_inputs(tmp_path) == [str(tmp_path / "a.mp4"), str(tmp_path / "b_frames")]
    assert footage_inputs(tmp_path / "b_frames") == [str(tmp_path / "b_frames")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no video"):
        footage_inputs(tmp_path / "empty")


@pytest.mark.slow  # two rounds of labels and fine-tuning (~3 min on 2 cores)
def test_selftraining_rounds_through_the_training_entry(clip, tmp_path):
    import cv2

    from camflow_jax import configs
    from camflow_jax.models import checkpoint as ckpt
    from camflow_jax.training import loop

    folder = tmp_path / "frames"
    folder.mkdir()
    for t, f in enumerate(clip.frames):
        cv2.imwrite(str(folder / f"{t:03d}.png"), f[..., ::-1])
    c = configs.load("selftrain")
    c.selftrain.footage, c.selftrain.minutes, c.selftrain.synthetic_batch = str(folder), 1.2, 0
    summary = loop.train_and_evaluate(c, tmp_path / "wd")
    assert [r["round"] for r in summary["selftrain"]] == [1, 2]
    for r in (1, 2):
        ckpt.load_model(tmp_path / "wd" / f"round_{r}")  # each round's model loads
    ckpt.load_model(tmp_path / "wd")
    assert (tmp_path / "wd" / "selftrain.json").is_file()


def test_a_saved_adaptation_is_a_checkpoint_every_tool_loads(loaded, tmp_path):
    """The save writes model.json, weights.npz and the report (NaN as null) all at once, and the
    Predictor loads the folder back with the saved weights (16-bit: within float16's precision)."""
    import json

    from camflow_jax.predictor import Predictor

    model, variables, static, model_config, _ = loaded
    report = {"clips": [{"name": "c", "frames": 3, "size_hw": [64, 128]}], "heldout_error_before_px": float("nan"),
              "heldout_error_after_px": None, "steps": 0, "checkpoint": "shipped", "log": []}
    run.save(tmp_path / "a", variables, model_config, static, report)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["adapt.json", "model.json", "weights.npz"]
    assert json.loads((tmp_path / "a" / "adapt.json").read_text())["heldout_error_before_px"] is None
    pred = Predictor.from_checkpoint(tmp_path / "a", refine=False)
    a = np.asarray(pred.variables["params"]["met"]["head_homography"]["out"]["kernel"])
    b = np.asarray(variables["params"]["met"]["head_homography"]["out"]["kernel"])
    np.testing.assert_allclose(a, b, atol=2e-3 * np.abs(b).max())
    with pytest.raises(FileExistsError):
        run.save(tmp_path / "a", variables, model_config, static, report)  # no -y: refused


def test_stabilize_adapt_refuses_what_it_cannot_adapt(clip, tmp_path):
    from camflow_jax.io import video

    src = tmp_path / "in.avi"
    video.write_frames(str(src), clip.frames[:6], fps=10.0)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for extra, words in ((["--estimator", "klt_ransac"], "--adapt adapts camflow's network"),
                         (["--estimator", "camflow", "--no-refine"], "--no-refine does not run it"),
                         (["--estimator", "camflow", "--adapt-minutes", "0"], "--adapt-minutes must be > 0")):
        r = subprocess.run([sys.executable, "-m", "camflow_jax.stabilize", str(src), "-o", str(tmp_path / "o.mp4"),
                            "--adapt", "-q", *extra], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "o.mp4").exists()


def test_stabilize_adapt_note_counts_the_averaged_and_the_kept_pairs():
    from camflow_jax import stabilize

    note = stabilize.adapt_note({"calls": 10, "averaged_pairs": 7, "reference_pairs": 2}, 1.0)
    assert "within 1 px on 7 of 10 pairs" in note and "of the other 3, the unadapted model's motion fitted 2" in note
    note = stabilize.adapt_note({"calls": 10, "averaged_pairs": 10, "reference_pairs": 0}, 0.5)
    assert "within 0.5 px on 10 of 10 pairs (their mean kept)" in note and "other" not in note


def test_spread_orders_pairs_coarse_to_fine():
    order = teacher.spread(list(range(40)))
    assert sorted(order) == list(range(40))
    assert order[:3] == [0, 16, 32] and order[3:8] == [8, 24, 4, 12, 20]  # every 16th, the 8ths between, ...
    assert max(np.diff(sorted(order[:10]))) <= 8  # any prefix covers the footage evenly


def test_the_weights_running_average_against_a_numpy_loop():
    """The running average ``finetune`` returns with ``AdaptConfig(average=d)``: after each step
    a <- b a + (1 - b) p with b = min(d, (1 + step) / (10 + step)), started at the first weights
    (numpy loop over a known sequence of weights); 0 is refused nowhere and 1 is refused."""
    rng = np.random.default_rng(0)
    seq = [{"w": rng.normal(size=(3, 2)).astype(np.float32), "b": rng.normal(size=(2,)).astype(np.float32)}
           for _ in range(30)]
    avg, ref = seq[0], {k: v.astype(np.float64) for k, v in seq[0].items()}
    for step, p in enumerate(seq[1:], start=1):
        b = ft.average_decay(step, 0.95)
        assert b == pytest.approx(min(0.95, (1 + step) / (10 + step)))
        avg = ft._averaged(avg, p, np.float32(b))
        ref = {k: b * ref[k] + (1 - b) * p[k] for k in ref}
    for k in ref:
        np.testing.assert_allclose(np.asarray(avg[k]), ref[k], rtol=1e-5, atol=1e-6)
    AdaptConfig(average=0.0)
    with pytest.raises(ValueError, match="average must be in"):
        AdaptConfig(average=1.0)


def test_the_learning_rate_schedules_and_the_optimizer_against_optax_adam():
    """``constant`` keeps the rate; ``cosine`` is the half cosine lr (1 + cos(pi f)) / 2 over the
    steps (``max_steps``) or over the seconds after the first step; the optimizer's updates times
    -lr are optax.adam's on the trained parameters and zero on the others."""
    import math

    import jax
    import optax

    cos = AdaptConfig(schedule="cosine", max_steps=40, learning_rate=2e-4)
    assert [ft.learning_rate(cos, s, 0.0, 0.0) for s in (0, 10, 20, 40, 50)] == pytest.approx(
        [2e-4, 1e-4 * (1 + math.cos(math.pi / 4)), 1e-4, 0.0, 0.0])
    timed = AdaptConfig(schedule="cosine", seconds=110.0)  # first step 10 s: 100 s of schedule after it
    assert ft.learning_rate(timed, 0, 0.0, 0.0) == pytest.approx(3e-4)
    assert ft.learning_rate(timed, 5, 60.0, 10.0) == pytest.approx(1.5e-4)
    assert ft.learning_rate(timed, 9, 200.0, 10.0) == 0.0
    assert ft.learning_rate(AdaptConfig(max_steps=40), 39, 99.0, 5.0) == pytest.approx(3e-4)
    with pytest.raises(ValueError, match="schedule must be one of"):
        AdaptConfig(schedule="linear")

    rng = np.random.default_rng(1)
    params = {"met": {"w": rng.normal(size=(4, 3)).astype(np.float32)},
              "features": {"w": rng.normal(size=(3,)).astype(np.float32)}}
    tx, ref = ft.optimizer(params, "all"), optax.adam(5e-4)
    state, ref_state = tx.init(params), ref.init(params["met"])
    for _ in range(3):
        grads = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32), params)
        u, state = tx.update(grads, state, params)
        r, ref_state = ref.update(grads["met"], ref_state, params["met"])
        np.testing.assert_allclose(-5e-4 * np.asarray(u["met"]["w"]), r["w"], rtol=1e-5, atol=1e-9)
        assert not np.asarray(u["features"]["w"]).any()
