"""Training system: device-count invariance, multi-process, resume, CLI and config errors.

Runs go through the real CLI in subprocesses (device counts must be fixed before jax is
imported) with the smoke config narrowed to one pyramid level (:data:`helpers.TRAIN_FLAGS`): these tests are
about control flow and bookkeeping, not accuracy, and the narrow net compiles about 3x faster.
Every single-device run compiles the same program, so the session's persistent compilation
cache (``tests/conftest.py``) compiles it once; the 4-step reference run is shared by the
session (``four_steps_one_device``, also used by training/test_recovery.py).
"""

import inspect
import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, TRAIN_FLAGS, assert_one_line_error, logged_metrics, run_train, train_env, trained_params


def _stdout(workdir) -> str:
    return (Path(workdir).parent / f"{Path(workdir).name}.stdout").read_text()


def _tensorboard_scalars(workdir) -> dict[str, dict[int, float]]:
    """Every scalar of the workdir's event files, read with the record framing of the TFRecord
    format (length, crc, payload, crc) and tensorboardX's own Event protobuf."""
    import struct

    from tensorboardX.proto import event_pb2

    out: dict = {}
    files = sorted(Path(workdir).glob("events.out.tfevents.*"))
    assert files, f"no event files in {workdir}"
    for f in files:
        data, pos = f.read_bytes(), 0
        while pos < len(data):
            (n,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
            pos += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, {})[event.step] = v.simple_value
    return out


def test_metrics_go_to_jsonl_and_tensorboard(four_steps_one_device):
    lines = logged_metrics(four_steps_one_device)
    scalars = _tensorboard_scalars(four_steps_one_device)
    assert [r["step"] for r in lines] == [1, 2, 3, 4]
    for key in ("total", "motion", "grad_norm", "param_norm", "lr", "steps_per_sec"):
        np.testing.assert_allclose([scalars[f"train/{key}"][r["step"]] for r in lines], [r[key] for r in lines],
                                   rtol=1e-6, err_msg=key)
    table = json.loads((four_steps_one_device / "eval_4.json").read_text())
    assert scalars["eval/epe/AVG/camflow"][4] == pytest.approx(table["camflow"]["AVG"]["epe"], rel=1e-6)


def test_progress_eta_leaves_out_compilation(monkeypatch):
    from camflow_jax.training import loop
    clock = iter([0.0, 100.0, 101.0, 102.0])  # construction; step 1 ends after a 100 s compile; 1 s/step
    monkeypatch.setattr(loop.time, "time", lambda: next(clock))
    p = loop.Progress(start=0, total=10, batch_size=4)
    p.update(1)
    assert p.eta() is None
    terms = {"total": 1.0, "motion": 1.0, "feature": 0.0, "smooth": 0.0}
    assert "first step 100.0s (includes compilation)" in p.line(1, terms, 1e-4)
    p.update(2)
    assert p.eta() == pytest.approx(8.0)  # 8 steps left at 1 step/s (step 1's rate, compile included: 800 s)
    rates = p.update(3)
    assert p.eta() == pytest.approx(7.0) and rates["steps_per_sec"] == pytest.approx(1.0)
    assert "1.00 steps/s | ETA 0m07s" in p.line(3, terms, 1e-4)


def test_end_of_run_tables_are_labelled(four_steps_one_device):
    out = _stdout(four_steps_one_device)
    for label in ("EPE (px), the published all-pixel form over the valid mask, step 4:",
                  "EPE (px), the mean over valid pixels, step 4:"):
        after = out.split(label, 1)
        assert len(after) == 2, out[-2000:]
        assert after[1].lstrip("\n").startswith("| method |")  # the label heads its own table
    assert out.count("| method |") == 2


def test_a_workdir_extended_stopped_and_resumed_matches_the_uninterrupted_run(tmp_path, cache, four_steps_one_device):
    """One workdir through three runs of the CLI, each resuming the last, ends where the
    uninterrupted 4-step reference ends (same losses, same weights):

    1. ``num_steps=2``: ends at step 2 (checkpoint 2);
    2. ``num_steps=4`` with ``stop_after_seconds``: resumes at step 2, stops after step 3 with
       a checkpoint and ``stopped_early`` in its summary;
    3. ``num_epochs=2`` with ``num_steps=1``: the epochs win (8 training pairs at batch 4 are 2
       steps an epoch, so 4 steps; the lr schedule's epoch length is the reference's): resumes
       at step 3 and ends at step 4.
    """
    wd = tmp_path / "w"
    first = run_train(wd, "--config.num_steps=2", cache=cache)
    assert "step 2/2" in first.stdout
    second = run_train(wd, "--config.num_steps=4", "--config.stop_after_seconds=1e-6", cache=cache).stdout
    assert "resumed from" in second and "at step 2" in second and "stopping at step 3" in second
    assert "step 1/4" not in second and "step 4/4" not in second
    assert json.loads((wd / "summary.json").read_text())["stopped_early"] is True
    assert (wd / "checkpoints" / "3").is_dir()
    # The changed setting is named, and the config that trained steps 1-2 is kept beside the new one.
    assert "note: resuming with 2 changed setting(s) (num_steps: 2 -> 4; stop_after_seconds: 0.0 -> 1e-06)" in second
    assert json.loads((wd / "config_until_step_2.json").read_text())["stop_after_seconds"] == 0
    assert json.loads((wd / "config.json").read_text())["stop_after_seconds"] == 1e-6
    third = run_train(wd, "--config.num_epochs=2", "--config.num_steps=1", cache=cache).stdout
    assert "at step 3" in third and "step 4/4" in third
    assert "kept in config_until_step_3.json" in third and "num_epochs: 0 -> 2" in third
    summary = json.loads((wd / "summary.json").read_text())
    assert summary["final_step"] == 4 and summary["stopped_early"] is False
    assert [r["step"] for r in logged_metrics(wd)] == [1, 2, 3, 4]
    ref, got = trained_params(four_steps_one_device), trained_params(wd)
    assert ref.keys() == got.keys()
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
    np.testing.assert_allclose([r["total"] for r in logged_metrics(wd)],
                               [r["total"] for r in logged_metrics(four_steps_one_device)], rtol=1e-5)


def _assert_same_run(wd, ref_wd):
    """Same training run up to float reduction order.

    Losses of every step and BatchNorm statistics (direct functions of the data split) must
    agree tightly. Parameters get an absolute slack of 4 steps x lr: some parameters have an
    exactly-zero true gradient (a key bias shifts every attention score equally), and Adam turns
    float-noise gradients of either sign into full +-lr steps.
    """
    np.testing.assert_allclose([r["total"] for r in logged_metrics(wd)], [r["total"] for r in logged_metrics(ref_wd)], rtol=1e-4)
    ref, got = trained_params(ref_wd), trained_params(wd)
    assert ref.keys() == got.keys()
    for k in ref:
        if k.startswith("batch_stats"):
            # Running means near zero carry float32 reduction-order noise of a few 1e-6 (two
            # processes reduce the batch in another order than one): an absolute 1e-5 slack.
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=k)
        else:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-3, atol=4 * 1e-4 + 1e-6, err_msg=k)


# The default tier's multi-device run: one process with a 4-device mesh (one program to compile).
# Its slow sibling, test_two_processes_match_single_process, runs 2 processes with 2 devices each
# (two programs compiled at once: about 95 s of the 2-core machine against about 45 s).
def test_four_devices_match_one_device(tmp_path, cache, four_steps_one_device):
    wd = tmp_path / "four"
    out = run_train(wd, "--config.num_steps=4", devices=4, cache=cache).stdout
    assert "on 4 cpu device(s)" in out
    _assert_same_run(wd, four_steps_one_device)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # see test_four_devices_match_one_device
def test_two_processes_match_single_process(tmp_path, cache, four_steps_one_device):
    import jax

    if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
        pytest.skip("this jax has no CPU collectives backend for multi-process CPU runs")
    wd = tmp_path / "multi"
    port = _free_port()
    env = train_env(cache, devices=2)
    procs = [subprocess.Popen([sys.executable, "-m", "camflow_jax.train", f"--workdir={wd}", *TRAIN_FLAGS,
                               "--config.num_steps=4", f"--coordinator_address=127.0.0.1:{port}",
                               "--num_processes=2", f"--process_id={i}"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, f"{o[-2000:]}\n{e[-4000:]}"
    assert "2 process(es)" in outs[0][0]
    _assert_same_run(wd, four_steps_one_device)


def test_the_config_file_is_executed_once_and_its_overrides_apply(tmp_path, cache):
    """One ``train`` invocation executes the config file once (its ``get_config()`` appends a
    line to a file each time) and checks it once; ``--config.key`` overrides still apply."""
    calls = tmp_path / "calls.txt"
    cfg = tmp_path / "cfg.py"
    cfg.write_text("from camflow_jax.configs import smoke\n"
                   f"open({str(calls)!r}, 'a').write('get_config\\n')\n"
                   "def get_config():\n"
                   f"    open({str(calls)!r}, 'a').write('get_config()\\n')\n"
                   "    return smoke.get_config()\n")
    wd = tmp_path / "w"
    assert TRAIN_FLAGS[0] == "--config=configs/smoke.py"
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.train", f"--workdir={wd}", f"--config={cfg}",
                           *TRAIN_FLAGS[1:], "--config.num_steps=0"], cwd=ROOT, env=train_env(cache),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert calls.read_text().splitlines() == ["get_config", "get_config()"]
    assert json.loads((wd / "config.json").read_text())["num_steps"] == 0
    assert json.loads((wd / "summary.json").read_text())["final_step"] == 0


def test_the_cli_checks_the_config_once(monkeypatch):
    """The CLI checks the config with its overrides; ``validate_config`` does not walk that
    unchanged config again, but does once it changed."""
    from camflow_jax import configs
    from camflow_jax.training import loop

    walks, real = [], configs._check_node

    def counted(node, ref, prefix, source):
        walks.extend([source] if not prefix else [])  # a walk from the top
        return real(node, ref, prefix, source)

    monkeypatch.setattr(configs, "_check_node", counted)
    c = configs.load("smoke")
    loop.validate_config(c)
    assert len(walks) == 1
    c.model.precision = "nope"
    with pytest.raises(configs.ConfigError, match="model.precision must be one of"):
        loop.validate_config(c)
    assert len(walks) == 2


def test_unknown_config_key_is_rejected(tmp_path, cache):
    proc = run_train(tmp_path, "--config.optim.learnin_rate=1", cache=cache, check=False)
    assert_one_line_error(proc, "learnin_rate")


@pytest.mark.parametrize("flag, needle", [("--config.optim.learning_rate=nan", "learning_rate"),
                                          ("--config.loss.feature=-1", "loss.feature"),
                                          ("--config.optim.freeze=('shallow',)", "shallow"),
                                          ("--config.eval_baselines=('nope',)", "unknown estimator 'nope'"),
                                          ("--config.data.read_nice=25", "data.read_nice"),
                                          ("--config.data.num_workers=-2", "data.num_workers"),
                                          ("--config.data.render=gpu", "data.render")])
def test_bad_hyperparameters_are_one_line_errors(tmp_path, cache, flag, needle):
    proc = run_train(tmp_path / "w", "--config.num_steps=1", flag, cache=cache, check=False)
    assert_one_line_error(proc, needle)
    assert not (tmp_path / "w" / "checkpoints").exists() or not any((tmp_path / "w" / "checkpoints").iterdir())


def test_a_non_finite_step_term_is_a_divergence_that_names_it():
    """The loop's guard (the slow-tier test below runs it end to end): any non-finite term of a
    step, the parameter norm included, stops the run with one message naming the terms and the
    last saved step."""
    from camflow_jax.training import loop

    ok = loop.check_finite({"total": np.float32(1.5), "param_norm": np.float32(3.0)}, 7, 6)
    assert ok == {"total": 1.5, "param_norm": 3.0}
    with pytest.raises(loop.DivergedError, match=r"diverged at step 7: non-finite param_norm, total; nothing "
                                                 r"after step 6 was saved"):
        loop.check_finite({"total": np.float32(np.nan), "param_norm": np.float32(np.inf), "nll": 1.0}, 7, 6)
    with pytest.raises(loop.DivergedError, match="nothing after step 0 was saved"):
        loop.check_finite({"param_norm": np.float32(np.inf)}, 1, None)


@pytest.mark.slow  # compiles a program of its own (the learning rate is a constant of the step): ~45 s
def test_divergence_stops_before_saving(tmp_path, cache):
    # lr 1e30: the parameters blow up at the first update. The NLL excludes non-finite
    # predictions, so the loss alone would look fine; the parameter norm gives it away.
    wd = tmp_path / "w"
    proc = run_train(wd, "--config.num_steps=2", "--config.checkpoint_every=1", "--config.optim.learning_rate=1e30",
                  cache=cache, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "diverged at step 1" in proc.stderr and "param_norm" in proc.stderr
    assert not list((wd / "checkpoints").glob("[0-9]*"))


def _write_old_state(item, scratch):
    """Rewrites the Orbax state at ``item`` as the trainer of earlier versions saved it: with an
    (unused) ``rng`` entry, which the train state no longer has."""
    import shutil

    import jax
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ck:
        tree = ck.restore(item)
        assert "rng" not in tree
        tree["rng"] = np.asarray(jax.random.key_data(jax.random.key(7)))
        ck.save(scratch, tree, force=True)
    with ocp.StandardCheckpointer() as ck:
        assert "rng" in ck.metadata(scratch).item_metadata.tree
    shutil.rmtree(item)
    shutil.copytree(scratch, item)


def test_damaged_latest_checkpoint_falls_back_and_is_kept(tmp_path, cache, four_steps_one_device):
    """Every file of step 4's state is garbage: the trainer says so, moves it aside, resumes
    from step 2 and saves step 4 again, giving the uninterrupted result. Step 2's state is
    written as earlier versions wrote it (an unused ``rng`` entry): such workdirs resume too."""
    import shutil

    wd = tmp_path / "w"
    shutil.copytree(four_steps_one_device, wd)
    for f in (wd / "checkpoints" / "4" / "state").rglob("*"):
        if f.is_file() and f.stat().st_size > 0:
            f.write_bytes(b"\0" * 7)  # every file of step 4's state is now garbage
    _write_old_state(wd / "checkpoints" / "2" / "state", tmp_path / "old_state")
    proc = run_train(wd, "--config.num_steps=4", cache=cache)
    assert "checkpoint step 4 is unreadable" in proc.stdout and "at step 2" in proc.stdout
    assert "step 2 is unreadable" not in proc.stdout  # the old entry is not damage
    assert len(list((wd / "checkpoints").glob("damaged_4_*"))) == 1  # moved aside, not deleted
    assert (wd / "checkpoints" / "4").is_dir()  # saved again
    assert [r["step"] for r in logged_metrics(wd)] == [1, 2, 3, 4]  # no repeated steps
    ref, got = trained_params(four_steps_one_device), trained_params(wd)
    for k in ref:  # steps 3-4 rerun from step 2 give the uninterrupted result
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_no_readable_checkpoint_moves_nothing_and_stops(tmp_path, cache, four_steps_one_device):
    import shutil

    wd = tmp_path / "w"
    shutil.copytree(four_steps_one_device, wd)
    for f in (wd / "checkpoints").rglob("state/*"):
        if f.is_file():
            f.write_bytes(b"\0" * 7)
    before = sorted(p.name for p in (wd / "checkpoints").iterdir())
    proc = run_train(wd, "--config.num_steps=4", cache=cache, check=False)
    assert_one_line_error(proc, "could be restored", "nothing was moved")
    assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == before


def test_a_second_trainer_on_the_same_workdir_is_refused(tmp_path, cache):
    import fcntl

    wd = tmp_path / "w"
    wd.mkdir()
    with open(wd / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running trainer holds it
        proc = run_train(wd, "--config.num_steps=1", cache=cache, check=False)
    assert_one_line_error(proc, "in use by another trainer")


def test_config_changes_name_every_differing_setting():
    from camflow_jax.training import workdir

    old = json.dumps({"batch_size": 4, "optim": {"learning_rate": 1e-4, "b1": 0.9}, "gone": 1})
    new = json.dumps({"batch_size": 8, "optim": {"learning_rate": 1e-4, "b1": 0.5}, "added": True})
    assert workdir.config_changes(old, new) == ["added: - -> True", "batch_size: 4 -> 8", "gone: 1 -> -",
                                                "optim.b1: 0.9 -> 0.5"]
    assert workdir.config_changes(new, new) == []
    assert workdir.config_changes("{not json", new) == ["config.json: unreadable -> new"]


def test_num_epochs_counts_whole_batches_of_the_training_set():
    import ml_collections

    from camflow_jax.training.loop import with_step_count

    c = ml_collections.ConfigDict(dict(batch_size=4, num_steps=1, num_epochs=2,
                                       optim=dict(steps_per_epoch=0)))
    for num_train, per_epoch in ((24, 6), (27, 6), (3, 1)):  # a partial last batch is dropped; >= 1
        got, steps_per_epoch = with_step_count(c, num_train)
        assert (steps_per_epoch, got.num_steps) == (per_epoch, 2 * per_epoch)
    c.optim.steps_per_epoch = 5  # an explicit epoch length wins
    assert with_step_count(c, 24)[0].num_steps == 10
    c.num_epochs = 0  # no epochs: num_steps as given
    assert with_step_count(c, 24)[0].num_steps == 1


def test_resume_with_another_model_is_refused_and_keeps_the_checkpoints(tmp_path, cache, four_steps_one_device):
    import shutil

    wd = tmp_path / "w"
    shutil.copytree(four_steps_one_device, wd)
    before = sorted(p.name for p in (wd / "checkpoints").iterdir())
    model_json = (wd / "model.json").read_text()
    proc = run_train(wd, "--config.num_steps=6", "--config.model.embed_dim=16", cache=cache, check=False)
    assert proc.returncode != 0
    assert "different model" in proc.stderr and "embed_dim: 8 -> 16" in proc.stderr
    assert sorted(p.name for p in (wd / "checkpoints").iterdir()) == before
    assert (wd / "model.json").read_text() == model_json


def test_missing_data_folder_is_named(tmp_path, cache):
    proc = run_train(tmp_path / "w", "--config.data.name=ghof", f"--config.data.path={tmp_path / 'nope'}",
                  "--config.bases.use_depth=False", cache=cache, check=False)
    assert proc.returncode != 0
    assert "nope" in proc.stderr and "does not exist" in proc.stderr


def test_bandwise_labels_follow_each_band_homography():
    from camflow_jax.data.sources import bandwise_homography_flow

    H = np.stack([np.array([[1, 0, i], [0, 1, -i], [0, 0, 1]], np.float64) for i in range(10)])
    flow = bandwise_homography_flow(H, 600, 40)
    for i in range(10):  # oracle: band i's rows move by H_i, a pure translation (i, -i)
        np.testing.assert_allclose(flow[60 * i:60 * (i + 1)], np.broadcast_to([i, -i], (60, 40, 2)), atol=1e-5)


DEVICE = "--config.data.render=device"


def test_device_rendering_trains_and_resumes_the_same_batches(tmp_path, cache):
    """data.render=device: 4 steps, then steps 3-4 again from checkpoint 2 (checkpoint 4
    removed): the same losses and weights, as the batch of step s is render_batch(seed, s)."""
    import shutil

    ref = tmp_path / "ref"
    proc = run_train(ref, "--config.num_steps=4", DEVICE, cache=cache)
    assert "data: rendered on the device(s)" in proc.stdout
    state = json.loads(next((ref / "checkpoints" / "4" / "data").glob("process_0-of-1.json")).read_text())
    assert state == {"render": "device", "seed": 0, "next_step": 5}
    wd = tmp_path / "resumed"
    shutil.copytree(ref, wd)
    shutil.rmtree(wd / "checkpoints" / "4")
    out = run_train(wd, "--config.num_steps=4", DEVICE, cache=cache).stdout
    assert "at step 2" in out and "step 3/4" in out and "step 1/4" not in out
    assert [r["step"] for r in logged_metrics(wd)] == [1, 2, 3, 4]
    np.testing.assert_allclose([r["total"] for r in logged_metrics(wd)], [r["total"] for r in logged_metrics(ref)], rtol=1e-6)
    want, got = trained_params(ref), trained_params(wd)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7, err_msg=k)
    # A device-rendered run does not resume with the host pipeline's data position, nor the reverse.
    proc = run_train(wd, "--config.num_steps=6", cache=cache, check=False)
    assert_one_line_error(proc, "could be restored")


def test_device_feed_batches_are_render_batch_of_the_step():
    """The trainer's device feed yields, at training step s, render_batch(bank, train_seed, s) of
    the scenes the host source describes (its seed, procedural bank, render size, motion scale),
    sharded on the mesh's data axis; its position is checkpointed and restored."""
    import jax

    from camflow_jax import configs
    from camflow_jax.data import datasets
    from camflow_jax.data.synthetic import device
    from camflow_jax.training import steps
    from camflow_jax.training.feed import train_feed

    config = configs.load("smoke")
    config.batch_size, config.model.width, config.data.num_train = 4, 64, 8
    config.data.render, config.data.motion_scale, config.data.train_seed = "device", 1.5, 3
    source = datasets.training_source(config.data, config.model.height, config.model.width, "train")
    feed = train_feed(config, source, steps.make_mesh())
    it = iter(feed.dataset)
    it.set_state(json.dumps({"render": "device", "seed": 3, "next_step": 2}).encode())
    got = feed.put(next(it))
    assert got["img1"].sharding.spec == jax.sharding.PartitionSpec("data")
    want = device.render_batch(device.procedural_bank(3, 24), 3, 2, batch_size=4, height=64, width=64,
                               motion_scale=1.5, render_size=(72, 72), need_depth=bool(config.bases.use_depth),
                               category_order="random")
    np.testing.assert_array_equal(np.asarray(want["category_id"]),
                                  device.row_categories(3, 2 * 4 + np.arange(4), len(device.CATEGORIES), "random"))
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), err_msg=k)
    assert json.loads(it.get_state()) == {"render": "device", "seed": 3, "next_step": 3}
    with pytest.raises(ValueError, match="host pipeline"):
        it.set_state(json.dumps({"last_seen_indices": {}}).encode())


def test_device_feed_mixes_categories_per_batch_like_the_host_shuffle():
    """Issue 39: the host pipeline shuffles SyntheticScenes (sample i has category i % 5), so the
    number of low-light rows in a batch of 8 is about Binomial(8, 1/5) (closed form below); the
    device feed must mix them the same way (the host's distribution), not give every batch the
    fixed 1-or-2 of a cycle (once suspected of a low-light gap that turned out to be the spread
    between draws of training scenes)."""
    from math import comb

    from camflow_jax.data.synthetic import device
    from camflow_jax.training import feed

    B, n, steps_ = 8, len(device.CATEGORIES), 2000
    idx = np.arange(1, steps_ + 1)[:, None] * B + np.arange(B)[None, :]  # rows of steps 1..2000
    param = inspect.signature(feed.device_feed).parameters.get("category_order")
    if param is None:  # a feed without the choice renders sample i with category i % n
        cats = idx % n
    else:
        cats = np.asarray(device.row_categories(0, idx, n, param.default))
    assert cats.min() >= 0 and cats.max() < n
    ll = (cats == device.CATEGORIES.index("LL")).sum(1)
    got = np.bincount(ll, minlength=B + 1) / steps_
    want = np.array([comb(B, k) * (1 / n) ** k * (1 - 1 / n) ** (B - k) for k in range(B + 1)])
    np.testing.assert_allclose(got, want, atol=0.04)
    # every category about equally often overall
    np.testing.assert_allclose(np.bincount(cats.ravel(), minlength=n) / cats.size, 1 / n, atol=0.01)
    # the cycle (render_batch's default) is what the host's unshuffled indices give
    np.testing.assert_array_equal(device.row_categories(0, idx, n, "cycle"), idx % n)


@pytest.mark.parametrize("change, needle", [(dict(render="gpu"), "must be 'host' or 'device'"),
                                            (dict(name="ghof"), "data.name='synthetic'"),
                                            (dict(label="homography"), "data.label='flow'"),
                                            (dict(resize_height=72), "does not resize")])
def test_device_rendering_needs_flow_labelled_synthetic_scenes(change, needle):
    from camflow_jax import configs
    from camflow_jax.training import loop

    data = configs.load("smoke").data
    data.render = "device"
    data.update(change)
    with pytest.raises(ValueError, match=needle):
        loop.validate_render(data)
