"""Reliability of `python -m camflow_jax.train`: damaged checkpoints, config files, signals,
unusable workdirs, a full disk, kill -9. Everything about the CLI runs it in a subprocess (real
signals, real flipped bytes, a real full tmpfs where the sandbox allows mounting one) and every
resume is compared bit for bit with an uninterrupted run (test_train's 4-step reference).
"""

import errno
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import (
    EVAL_FLAG,
    ROOT,
    TRAIN_FLAGS,
    assert_one_line_error,
    logged_metrics,
    run_train,
    train_env,
    trained_params,
)


# ----------------------------------------------------------------------------- helpers
def _assert_bit_identical(wd, ref_wd):
    """The resumed run's weights, BatchNorm statistics and per-step losses equal the
    uninterrupted run's exactly (same device count, same data order)."""
    ref, got = trained_params(ref_wd), trained_params(wd)
    assert ref.keys() == got.keys()
    differ = [k for k in ref if ref[k].tobytes() != got[k].tobytes()]
    assert not differ, f"{len(differ)} arrays differ, e.g. {differ[:3]}"
    assert [r["step"] for r in logged_metrics(wd)] == [1, 2, 3, 4]
    assert [r["total"] for r in logged_metrics(wd)] == [r["total"] for r in logged_metrics(ref_wd)]


class _Run:
    """A training CLI run in the background: stdout lines are read as they come (to send a
    signal at a chosen moment), stderr goes to a file."""

    def __init__(self, workdir, *args, cache):
        self.stderr_path = Path(workdir).parent / f"{Path(workdir).name}.stderr"
        self._err = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "camflow_jax.train", f"--workdir={workdir}", *TRAIN_FLAGS, *args],
            cwd=ROOT, env=train_env(cache), stdout=subprocess.PIPE, stderr=self._err, text=True)
        self.lines, self._q = [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, text, timeout=600):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self._q.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} never printed:\n{''.join(self.lines)[-3000:]}\n{self.stderr()[-3000:]}")

    def finish(self, timeout=600):
        rc = self.proc.wait(timeout=timeout)
        self._err.close()
        return rc

    def stderr(self):
        return self.stderr_path.read_text()


def _flip_bytes_that_load_silently(step_dir, original):
    """Flips 16 bytes inside the step's largest array data file (raw float data in a zstd frame,
    which has no checksum of its own), at the first of a few offsets where orbax alone still
    restores the step and some array changed: without our checksums it would load."""
    from camflow_jax.models import checkpoint
    f = max((Path(step_dir) / "state").glob("ocdbt.process_*/d/*"), key=lambda p: p.stat().st_size)
    clean = f.read_bytes()
    ref = {k: np.asarray(v).tobytes() for k, v in checkpoint.tree_arrays(original).items()}
    for frac in (0.5, 0.6, 0.7, 0.4, 0.3, 0.8):
        data = bytearray(clean)
        at = int(len(data) * frac)
        data[at:at + 16] = bytes(b ^ 0xFF for b in data[at:at + 16])
        f.write_bytes(bytes(data))
        try:
            raw = checkpoint._restore_raw(Path(step_dir) / "state")
        except ValueError:
            continue  # this offset breaks the zstd frame: orbax notices, try another
        got = checkpoint.tree_arrays(raw)
        if any(np.asarray(got[k]).tobytes() != ref[k] for k in ref):
            return
    raise AssertionError(f"no offset of {f} gave a silently changed array")


# ----------------------------------------------------------------------------- 1. checksums
@pytest.mark.slow
def test_flipped_bytes_in_a_workdir_checkpoint_are_refused_by_estimate(tmp_path, four_steps_one_device):
    import cv2

    from camflow_jax.models import checkpoint
    wd = tmp_path / "w"
    shutil.copytree(four_steps_one_device, wd)
    step2 = checkpoint._restore_raw(wd / "checkpoints" / "2" / "state")
    _flip_bytes_that_load_silently(wd / "checkpoints" / "4", checkpoint._restore_raw(wd / "checkpoints" / "4" / "state"))
    # Library: the damaged newest step is skipped for step 2, whose weights are used.
    _, variables, _, _ = checkpoint.load_model(wd)
    for k, v in checkpoint.tree_arrays(step2["params"]).items():
        assert np.asarray(checkpoint.tree_arrays(variables["params"])[k]).tobytes() == np.asarray(v).tobytes(), k
    assert (wd / "checkpoints" / "4").is_dir()  # a reader moves nothing
    # CLI: with step 2 damaged too there is no intact step: one line, exit 2, nothing written.
    _flip_bytes_that_load_silently(wd / "checkpoints" / "2", step2)
    cv2.imwrite(str(tmp_path / "a.png"), (np.random.default_rng(0).random((64, 128, 3)) * 255).astype(np.uint8))
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.estimate", str(tmp_path / "a.png"),
                           str(tmp_path / "a.png"), "--checkpoint", str(wd), "-o", str(tmp_path / "out")],
                          cwd=ROOT, env=train_env(tmp_path / "c"), capture_output=True, text=True, timeout=600)
    assert_one_line_error(proc, "no intact checkpoint", "checksum mismatch", str(wd / "checkpoints"))
    assert not (tmp_path / "out").exists()


def test_resume_moves_a_checkpoint_with_flipped_bytes_aside(tmp_path, cache, four_steps_one_device):
    from camflow_jax.models import checkpoint
    wd = tmp_path / "w"
    shutil.copytree(four_steps_one_device, wd)
    step4 = wd / "checkpoints" / "4"
    _flip_bytes_that_load_silently(step4, checkpoint._restore_raw(step4 / "state"))
    damaged = (step4 / "state").rglob("*")
    damaged_bytes = {p.relative_to(step4): p.read_bytes() for p in damaged if p.is_file()}
    out = run_train(wd, "--config.num_steps=4", cache=cache).stdout
    assert "checkpoint step 4 is unreadable" in out and "checksum mismatch" in out and "at step 2" in out
    aside = list((wd / "checkpoints").glob("damaged_4_*"))
    assert len(aside) == 1  # moved aside, byte for byte, never deleted
    assert {p.relative_to(aside[0]): p.read_bytes() for p in (aside[0] / "state").rglob("*") if p.is_file()} \
        == damaged_bytes
    _assert_bit_identical(wd, four_steps_one_device)


# ----------------------------------------------------------------------------- 2. config files
_CONFIG_FILES = {
    "syntax": ("from camflow_jax.configs import smoke\ndef get_config(:\n    return smoke.get_config()\n",
               ["line 2", "invalid syntax"]),
    "misspelt_key": ("from camflow_jax.configs import smoke\ndef get_config():\n    c = smoke.get_config()\n"
                     "    c.optim.learnin_rate = 1e-3\n    return c\n",
                     ["unknown config key optim.learnin_rate", "did you mean optim.learning_rate"]),
    "wrong_type": ("from camflow_jax.configs import smoke\ndef get_config():\n    c = smoke.get_config()\n"
                   "    c.batch_size = 'eight'\n    return c\n", ["line 4", "batch_size", "eight", "int"]),
    "wrong_type_new_dict": ("import ml_collections\nfrom camflow_jax.configs import smoke\ndef get_config():\n"
                            "    c = smoke.get_config().to_dict()\n    c['batch_size'] = 'eight'\n"
                            "    return ml_collections.ConfigDict(c)\n",
                            ["config key batch_size must be an integer", "'eight'"]),
    "no_get_config": ("x = 1\n", ["defines no get_config() function"]),
    "raises": ("def get_config():\n    raise RuntimeError('no dataset here')\n",
               ["get_config() failed", "line 2", "RuntimeError: no dataset here"]),
}


@pytest.mark.parametrize("case", sorted(_CONFIG_FILES))
def test_config_file_problems_are_one_line_errors(tmp_path, cache, case):
    text, needles = _CONFIG_FILES[case]
    cfg = tmp_path / "cfg.py"
    cfg.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.train", f"--config={cfg}",
                           f"--workdir={tmp_path / 'w'}"], cwd=ROOT, env=train_env(cache), capture_output=True,
                          text=True, timeout=300)
    assert_one_line_error(proc, str(cfg), *needles)
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()


def test_every_packaged_config_passes_the_check_and_a_misspelt_one_does_not():
    import ml_collections

    from camflow_jax import configs

    for name in configs.names():
        configs.load(name)
    c = configs.load("smoke")
    c.data.num_trian = 5  # unlocked ConfigDicts accept new keys: the check is what refuses them
    with pytest.raises(configs.ConfigError, match="data.num_trian; did you mean data.num_train"):
        configs.check(c)
    c = configs.load("smoke").to_dict()
    c["optim"]["learning_rate"] = "1e-4"
    with pytest.raises(configs.ConfigError, match="optim.learning_rate must be a number"):
        configs.check(ml_collections.ConfigDict(c))


# ----------------------------------------------------------------------------- 3. signals
@pytest.mark.parametrize("sig, moment, extra", [
    # During the steps: the step in progress finishes, is saved (checkpoints every 4 steps
    # here, so it would not be otherwise), exit 130.
    (signal.SIGINT, "step 1/4", ["--config.checkpoint_every=4"]),
    # During the evaluation of step 1 (eval_every=1; its first batch compiles the eval step):
    # the evaluation stops, step 1 is saved, exit 143.
    pytest.param(signal.SIGTERM, "step 1/4", ["--config.checkpoint_every=4", "--config.eval_every=1", EVAL_FLAG],
                 marks=pytest.mark.slow),
], ids=["sigint-steps", "sigterm-evaluation"])
def test_a_signal_saves_exits_and_resume_is_bit_identical(tmp_path, cache, four_steps_one_device,
                                                          sig, moment, extra):
    wd = tmp_path / "w"
    run = _Run(wd, "--config.num_steps=4", *extra, cache=cache)
    run.wait_for(moment)
    sent = time.time()
    run.proc.send_signal(sig)
    rc = run.finish()
    took = time.time() - sent
    assert rc == 128 + sig, run.stderr()[-3000:]
    err = run.stderr()
    assert "Traceback" not in err
    line = [ln for ln in err.splitlines() if ln.startswith("interrupted by")]
    assert len(line) == 1 and signal.Signals(sig).name in line[0], err[-2000:]
    saved = int(line[0].split(" at step ")[1].split(";")[0])
    assert 1 <= saved < 4
    from camflow_jax.models import checkpoint
    assert checkpoint.steps(wd / "checkpoints") == [saved]  # the interrupted step was saved
    assert took < 60, f"took {took:.0f} s to stop"
    run_train(wd, "--config.num_steps=4", cache=cache)
    _assert_bit_identical(wd, four_steps_one_device)


def test_a_signal_during_compilation_exits_at_once(tmp_path, cache):
    wd = tmp_path / "w"
    run = _Run(wd, "--config.num_steps=4", cache=cache)
    run.wait_for("CamFlow [")  # printed right before the first step (which compiles)
    sent = time.time()
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish() == 143, run.stderr()[-2000:]
    assert time.time() - sent < 5
    assert "nothing ran since the last checkpoint" in run.stderr()
    assert not list((wd / "checkpoints").iterdir())


@pytest.mark.slow
def test_a_second_signal_aborts_at_once_and_the_last_checkpoint_stays_usable(tmp_path, cache,
                                                                            four_steps_one_device):
    wd = tmp_path / "w"
    run = _Run(wd, "--config.num_steps=4", "--config.checkpoint_every=1", cache=cache)
    run.wait_for("step 2/4")
    run.proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    sent = time.time()
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130
    assert time.time() - sent < 5
    assert "SIGINT again: aborting at once" in run.stderr()
    run_train(wd, "--config.num_steps=4", cache=cache)  # resumes from whatever finished
    _assert_bit_identical(wd, four_steps_one_device)


# ----------------------------------------------------------------------------- 4. workdir
def _chattr(path, flag):
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.mark.parametrize("case", ["file", "below_a_file", "immutable", "read_only_mount"])
def test_an_unusable_workdir_is_refused_before_training(tmp_path, cache, case):
    target = tmp_path / "wd"
    cleanup = None
    if case == "file":
        target.write_text("not a folder")
        needle = "not a directory"
    elif case == "below_a_file":
        (tmp_path / "f").write_text("x")
        target = tmp_path / "f" / "wd"
        needle = "not a directory"  # errors.describe_error's plain words
    elif case == "immutable":  # chattr +i stops root too (chmod 555 does not)
        target.mkdir()
        if not _chattr(target, "+i"):
            pytest.skip("chattr +i is not permitted here")
        cleanup = lambda: _chattr(target, "-i")  # noqa: E731
        needle = "operation not permitted"
    else:
        target.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(target)],
                          capture_output=True).returncode:
            pytest.skip("mounting a tmpfs is not permitted here")
        cleanup = lambda: subprocess.run(["umount", str(target)])  # noqa: E731
        needle = "read-only file system"
    try:
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-m", "camflow_jax.train", f"--workdir={target}", *TRAIN_FLAGS],
                              cwd=ROOT, env=train_env(cache), capture_output=True, text=True, timeout=300)
        assert_one_line_error(proc, str(target), needle)
        assert "step 1/" not in proc.stdout and time.time() - t0 < 60  # refused before any step
    finally:
        if cleanup:
            cleanup()


# ----------------------------------------------------------------------------- 5. disk full
@pytest.mark.slow
def test_a_full_disk_is_one_line_and_the_last_checkpoint_resumes(tmp_path, cache, four_steps_one_device):
    """A real full file system: a tmpfs that holds the metadata and one or two checkpoints (sized
    from the reference workdir's files)."""
    def size(path):
        return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())

    ckpt = size(four_steps_one_device / "checkpoints" / "4")
    metadata = size(four_steps_one_device) - size(four_steps_one_device / "checkpoints")
    mnt = tmp_path / "small"
    mnt.mkdir()
    kib = int(metadata + 1.7 * ckpt) // 1024
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(mnt)],
                      capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        wd = mnt / "w"
        proc = run_train(wd, "--config.num_steps=12", "--config.checkpoint_every=1", cache=cache, check=False)
        assert_one_line_error(proc, "disk full", str(wd))
        # Nothing else about the failure (orbax's own progress warnings, such as a slow save, may
        # precede it): no tracebacks, no tensorstore status lines.
        others = [ln for ln in proc.stderr.splitlines() if not ln.startswith("error: ")]
        assert not [ln for ln in others if "rror" in ln or "space" in ln or "RESOURCE" in ln], proc.stderr[-3000:]
        from camflow_jax.models import checkpoint
        good = checkpoint.steps(wd / "checkpoints")
        assert good and good[0] < 12
        shutil.copytree(wd, tmp_path / "moved", ignore=shutil.ignore_patterns(".lock"))
    finally:
        subprocess.run(["umount", str(mnt)])
    moved = tmp_path / "moved"
    if good[0] > 4:
        pytest.fail(f"{kib} KiB held {good[0]} steps: the test expects fewer than 4")
    out = run_train(moved, "--config.num_steps=4", cache=cache).stdout
    assert f"at step {good[0]}" in out and "unreadable" not in out
    _assert_bit_identical(moved, four_steps_one_device)


def test_disk_full_from_the_writers_names_the_file(tmp_path, monkeypatch):
    """In-process simulation (always runs): ENOSPC raised by the writers, as a full disk does."""
    from camflow_jax.io import errors
    from camflow_jax.training import state
    from camflow_jax.training import workdir as workdir_lib
    writer = workdir_lib.MetricWriter(tmp_path, 0)

    class FullFile:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")  # file.write() names no file

        def flush(self):
            pass

    real = writer.file
    writer.file = FullFile()
    with pytest.raises(OSError) as e:
        writer.write_scalars(1, {"total": 1.0})
    assert errors.describe_error(e.value) == f"disk full: {tmp_path / 'metrics.jsonl'}"
    writer.file = real
    writer.close()
    # A metadata file being replaced on a full disk keeps its previous content.
    target = tmp_path / "config.json"
    target.write_text("old")
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space")))
    with pytest.raises(OSError):
        workdir_lib.write_text(target, "new")
    monkeypatch.setattr(os, "replace", real_replace)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []
    # Orbax's writer threads report tensorstore's status text (copied from a real full tmpfs).
    e = ValueError('RESOURCE_EXHAUSTED: Error writing local file "/x/checkpoints/2.orbax-checkpoint-tmp/state/'
                   '_sharding": Failed to write 355662 bytes to file 9: No space left on device '
                   "[os_error_code='28']")
    with pytest.raises(OSError) as caught:
        with state.storage_errors(tmp_path / "checkpoints"):
            raise e
    assert errors.describe_error(caught.value) == f"disk full: {tmp_path / 'checkpoints'}"


# ----------------------------------------------------------------------------- 6. kill -9
@pytest.mark.slow
def test_kill_9_during_a_save_keeps_the_last_checkpoint_and_resume_is_bit_identical(tmp_path, cache,
                                                                                    four_steps_one_device):
    wd = tmp_path / "w"
    run = _Run(wd, "--config.num_steps=50", "--config.checkpoint_every=1", "--config.log_every=1", cache=cache)
    run.wait_for("step 1/50")
    ckpts = wd / "checkpoints"
    deadline, caught = time.time() + 300, None
    while time.time() < deadline and caught is None:  # a save in progress: orbax's temporary folder
        tmp = [p.name for p in ckpts.iterdir() if "orbax-checkpoint-tmp" in p.name] if ckpts.is_dir() else []
        if tmp and int(tmp[0].split(".")[0]) >= 2:
            run.proc.kill()
            caught = tmp[0]
        time.sleep(0.002)
    run.finish()
    assert caught, "never saw a save in progress"
    assert run.proc.returncode == -signal.SIGKILL
    from camflow_jax.models import checkpoint
    finished = checkpoint.steps(ckpts)
    assert finished and int(caught.split(".")[0]) not in finished  # the save being written never finished
    for n in ckpts.iterdir():  # (there may be the temporary folder the kill interrupted)
        assert n.name.isdigit() or "orbax-checkpoint-tmp" in n.name, n
    if finished[0] >= 4:
        pytest.skip(f"the kill came after step {finished[0]}: nothing to resume up to step 4")
    out = run_train(wd, "--config.num_steps=4", cache=cache).stdout
    assert f"at step {finished[0]}" in out and "unreadable" not in out
    assert not [n for n in ckpts.iterdir() if "orbax-checkpoint-tmp" in n.name]  # cleaned on resume
    _assert_bit_identical(wd, four_steps_one_device)


def test_a_metrics_line_cut_by_a_kill_is_dropped_on_resume(tmp_path):
    """A kill while a line is written leaves half of it; resuming at step 2 keeps steps 1-2
    (the cut step 3 is run and logged again) instead of failing on the broken JSON."""
    from camflow_jax.training import workdir as workdir_lib
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "total": 1.0}\n{"step": 2, "total": 2.0}\n{"step": 3, "to')
    workdir_lib.MetricWriter(tmp_path, 2).close()
    assert [json.loads(ln)["step"] for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
