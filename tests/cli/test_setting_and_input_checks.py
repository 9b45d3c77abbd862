"""The checks of settings and inputs at the command lines: inputs that cannot be read twice,
training settings, and the poor cases of issue 63, grouped by surface. Signals:
tests/cli/test_signals.py."""

import os
import subprocess
import sys
import threading
import time

import cv2
import numpy as np
import pytest

from helpers import ROOT


def _env(tmp_path):
    (tmp_path / "systmp").mkdir(exist_ok=True)
    return dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path / "systmp"))


def _cli(tmp_path, module, *args, timeout=300, **kw):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=timeout, **kw)


def _one_error_line(proc, *needles, code=2):
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _clip(path, n=10, h=48, w=64):
    wr = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (w, h))
    rng = np.random.default_rng(0)
    base = cv2.GaussianBlur(rng.integers(0, 256, (h + 8, w + 8, 3), dtype=np.uint8), (5, 5), 0)
    for t in range(n):
        wr.write(np.ascontiguousarray(base[t % 5:t % 5 + h, t % 7:t % 7 + w]))
    wr.release()
    return path


# ----------------------------------------------------------------------------- streams as input
def test_a_named_pipe_or_piped_stdin_as_video_is_refused_at_once(tmp_path):
    """Bad (issue 63): a named pipe as input hung for ever (opened a second time, in FFmpeg's C
    code, deaf to SIGINT / SIGTERM); /dev/stdin fed by a pipe was blamed as "unknown format or
    corrupt file". Now refused at once, before opening it, exit 2, one line saying to write it
    to a file first; /dev/stdin redirected from a regular file still works."""
    clip = _clip(tmp_path / "clip.avi")
    fifo = tmp_path / "f.mp4"
    os.mkfifo(fifo)

    def writer():
        try:
            with open(fifo, "wb") as f:  # blocks until a reader opens the pipe
                f.write(clip.read_bytes())
        except (BrokenPipeError, OSError):
            pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    t0 = time.monotonic()
    proc = _cli(tmp_path, "camflow_jax.stabilize", fifo, "-o", "o.avi", "--estimator=identity", "-q", timeout=120)
    _one_error_line(proc, f"input {fifo} is a pipe", "write it to a file first")
    assert time.monotonic() - t0 < 60 and not (tmp_path / "o.avi").exists()
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer's open return
    t.join(5)

    cat = subprocess.Popen(["cat", str(clip)], stdout=subprocess.PIPE)
    proc = _cli(tmp_path, "camflow_jax.stabilize", "/dev/stdin", "-o", "o.avi", "--estimator=identity", "-q",
                stdin=cat.stdout)
    cat.stdout.close()
    cat.wait(10)
    _one_error_line(proc, "input /dev/stdin is a pipe", "write it to a file first")
    with open(clip, "rb") as f:
        proc = _cli(tmp_path, "camflow_jax.stabilize", "/dev/stdin", "-o", "o.avi", "--estimator=identity", "-q",
                    stdin=f)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o.avi").exists()


# ----------------------------------------------------------------------------- training settings
TRAIN = ["--config=configs/smoke.py", "--config.batch_size=4", "--config.data.num_eval=0",
         "--config.data.num_train=8", "--config.model.depths=(1,)", "--config.model.layer_depth=(1,)",
         "--config.model.num_heads=(2,)", "--config.model.width=64"]


def test_keep_checkpoints_0_is_refused_naming_the_key(tmp_path):
    """Bad (issue 63): keep_checkpoints=0 trained, printed "done" and kept no checkpoint: the
    weights were lost without a word. Now refused before training, one line naming the key."""
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.train", f"--workdir={tmp_path / 'wd'}", *TRAIN,
                           "--config.keep_checkpoints=0"], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    _one_error_line(proc, "config key keep_checkpoints must be >= 1", "got 0")
    assert not (tmp_path / "wd" / "checkpoints").exists() or not os.listdir(tmp_path / "wd" / "checkpoints")


@pytest.mark.parametrize("key,value,words", [
    ("keep_checkpoints", -1, "keep_checkpoints must be >= 1"),
    ("log_every", 0, "log_every must be >= 1"),
    ("checkpoint_every", -5, "checkpoint_every must be >= 0"),
    ("data.prefetch", 0, "data.prefetch must be >= 1"),
    ("data.motion_scale", 0.0, "data.motion_scale must be > 0"),
    ("data.frame_gap", 0, "data.frame_gap must be >= 1"),
    ("optim.b1", 1.0, "optim.b1 must be in [0, 1)"),
    ("optim.b2", -0.1, "optim.b2 must be in [0, 1)"),
    ("optim.decay_rate", 0.0, "optim.decay_rate must be in (0, 1]"),
    ("optim.grad_clip", float("nan"), "optim.grad_clip must be a finite number"),
    ("bases.num_homography", 7, "bases.num_homography must be 12 (second order), 8 (first order) or 0"),
    ("bases.depth_sigmas", ("abc",), "bases.depth_sigmas must be a tuple of finite numbers > 0"),
    ("bases.depth_sigmas", (1.0, -2.0), "bases.depth_sigmas must be a tuple of finite numbers > 0"),
])
def test_every_training_setting_is_checked_naming_the_key(key, value, words):
    from camflow_jax.configs import default
    from camflow_jax.training import loop

    config = default.get_config()
    loop.validate_settings(config)  # the defaults pass
    node = config
    *groups, last = key.split(".")
    for g in groups:
        node = node[g]
    node[last] = value
    with pytest.raises(ValueError, match=r"^config key " + words.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        loop.validate_settings(config)


def test_bases_depth_sigmas_abc_on_the_command_line_names_the_key(tmp_path):
    """POOR (issue 63): --config.bases.depth_sigmas=abc named no key."""
    proc = subprocess.run([sys.executable, "-m", "camflow_jax.train", f"--workdir={tmp_path / 'wd'}", *TRAIN,
                           "--config.bases.depth_sigmas=abc"], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    _one_error_line(proc, "bases.depth_sigmas")


def test_num_workers_above_the_usable_cores_is_clamped_with_a_warning():
    """POOR (issue 63): data.num_workers=64 on 2 cores started 64 processes (8x slower), no word."""
    from camflow_jax.data import pipeline

    assert [pipeline.resolve_num_workers(n, cpus=2) for n in (0, 1, 2, 3, 64)] == [0, 1, 2, 2, 2]
    assert pipeline.resolve_num_workers(-1, cpus=16) == 14  # auto unchanged
    assert pipeline.clamped_workers_note(2, cpus=2) is None and pipeline.clamped_workers_note(-1, cpus=2) is None
    assert pipeline.clamped_workers_note(64, cpus=2) == ("data.num_workers=64 is more than the 2 usable core(s) of "
                                                         "this process: using 2 worker process(es)")


def test_a_frames_folder_with_one_odd_sized_frame_is_named_before_training(tmp_path):
    """POOR (issue 63): one odd-sized frame ended training at step 12 in grain's words
    ("same structure"), no file named. Now: a ValueError naming the frame when the folder is
    opened (headers only), and at the read for a size no header said."""
    from camflow_jax.data import sources

    folder = tmp_path / "clip"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for t in range(6):
        h, w = (48, 64) if t != 4 else (50, 64)
        cv2.imwrite(str(folder / f"f{t:03d}.png"), rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"frame .*f004\.png is 64x50, the other frames of its folder are 64x48 "
                                         r"\(f000\.png\)"):
        sources.FramePairs(tmp_path)
    cv2.imwrite(str(folder / "f004.png"), rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
    assert len(sources.FramePairs(tmp_path)) == 5


# ----------------------------------------------------------------------------- tiny images
@pytest.mark.parametrize("shape", [(1, 1), (1, 40), (40, 1)])
def test_tiny_images_are_refused_naming_the_file(tmp_path, shape):
    """POOR (issue 63): two identical 1x1 images wrote a result, then the summary print crashed
    (TypeError, rc 1); 1xN images ended in numpy's "Shape of array too small to calculate a
    numerical gradient". Now one line naming the file, exit 2, nothing written."""
    img = np.full(shape + (3,), 100, np.uint8)
    cv2.imwrite(str(tmp_path / "a.png"), img)
    cv2.imwrite(str(tmp_path / "b.png"), img)
    proc = _cli(tmp_path, "camflow_jax.estimate", "a.png", "b.png", "--method", "identity", "-o", "out")
    _one_error_line(proc, f"a.png is {shape[1]}x{shape[0]} px", "at least 8x8 px")
    assert not (tmp_path / "out").exists()


def test_a_one_pixel_high_video_names_the_video_not_dis(tmp_path):
    """POOR (issue 63): a 120x1 video blamed DIS, which the user had not chosen."""
    folder = tmp_path / "frames"
    folder.mkdir()
    for t in range(5):
        cv2.imwrite(str(folder / f"{t:03d}.png"), np.full((1, 120, 3), 20 * t, np.uint8))
    proc = _cli(tmp_path, "camflow_jax.stabilize", folder, "-o", "o.avi", "-q")
    line = _one_error_line(proc, f"{folder} is 120x1 px: too small to stabilize", "at least 32x32 px")
    assert "DIS" not in line and not (tmp_path / "o.avi").exists()


# ----------------------------------------------------------------------------- export
def test_export_refuses_absurd_batch_and_opset_and_the_models_own_folder(tmp_path):
    """POOR (issue 63): --batch 99999999999 and --opset 99 passed the argument checks and ended
    in 38-82-line tracebacks after 15 s (with --no-check an opset-99 file was written);
    -o into the shipped model's own folder wrote there. Now refused in the argument checks,
    naming the flag, exit 2, nothing written."""
    from camflow_jax.models import checkpoint

    shipped = checkpoint.pretrained_path()
    before = sorted(os.listdir(shipped))
    for args, words in ((["--batch", "99999999999"], ["--batch must be at most 1024", "got 99999999999"]),
                        (["--opset", "99", "--no-check"], ["--opset must be at most", "got 99"])):
        t0 = time.monotonic()
        proc = _cli(tmp_path, "camflow_jax.export", "-o", "ex", *args)
        _one_error_line(proc, *words)
        assert not (tmp_path / "ex").exists() and time.monotonic() - t0 < 60
    for out in (shipped, shipped / "export", shipped.parent):
        proc = _cli(tmp_path, "camflow_jax.export", "-o", out, "-y")
        _one_error_line(proc, f"-o {out} is inside the shipped models' folder")
    assert sorted(os.listdir(shipped)) == before


# ----------------------------------------------------------------------------- stabilize
def test_a_crop_ratio_beyond_the_largest_zoom_is_refused(tmp_path):
    """POOR (issue 63): --crop 0.0001 zoomed 10000x, every frame one flat colour, rc 0."""
    _clip(tmp_path / "in.avi")
    proc = _cli(tmp_path, "camflow_jax.stabilize", "in.avi", "-o", "o.avi", "--estimator=identity", "-q",
                "--crop", "0.0001")
    _one_error_line(proc, "crop ratio 0.0001 is a 10000x zoom", "at least 0.01")
    assert not (tmp_path / "o.avi").exists()


def _frames_folder(folder, frames):
    folder.mkdir()
    for t, f in enumerate(frames):
        cv2.imwrite(str(folder / f"{t:04d}.png"), f)


def test_motion_file_fingerprint_catches_frames_3_to_7_replaced_and_reads_a_bom(tmp_path):
    """POOR (issue 63): the fingerprint checked frames 0, middle and last only: a clip with
    frames 3-7 replaced got the wrong motion with a note that the pictures match. And a motion
    CSV saved with a UTF-8 BOM (as spreadsheets do) "has 21 rows" where it has 20."""
    from camflow_jax.stabilization import fingerprint

    assert fingerprint.sample_indices(20) == list(range(20))
    big = fingerprint.sample_indices(10000)
    assert len(big) <= fingerprint.MAX_SAMPLES + 3 and {0, 5000, 9999} <= set(big)
    rng = np.random.default_rng(1)
    base = cv2.GaussianBlur(rng.integers(0, 256, (72, 96, 3), dtype=np.uint8), (5, 5), 0)
    frames = [np.ascontiguousarray(np.roll(base, (t % 3, t % 5), axis=(0, 1))[:64, :80]) for t in range(20)]
    other = cv2.GaussianBlur(rng.integers(0, 256, (64, 80, 3), dtype=np.uint8), (5, 5), 0)
    _frames_folder(tmp_path / "a", frames)
    _frames_folder(tmp_path / "b", frames[:3] + [np.roll(other, t, axis=1) for t in range(3, 8)] + frames[8:])
    proc = _cli(tmp_path, "camflow_jax.stabilize", "a", "-o", "oa", "--estimator=identity", "-q",
                "--export-motion", "m.csv")
    assert proc.returncode == 0, proc.stderr
    proc = _cli(tmp_path, "camflow_jax.stabilize", "b", "-o", "ob", "--estimator=identity", "-q", "--path", "m.csv")
    _one_error_line(proc, "m.csv was exported from another video", "frames 3, 4, 5, 6, 7 show other pictures")
    assert not (tmp_path / "ob").exists()
    # the same file with a BOM still applies to its own video
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "m.csv").read_bytes())
    proc = _cli(tmp_path, "camflow_jax.stabilize", "a", "-o", "oc", "--estimator=identity", "-q", "--path", "bom.csv")
    assert proc.returncode == 0 and "rows" not in proc.stderr, proc.stderr


# ----------------------------------------------------------------------------- wording
def test_the_no_depth_warning_is_not_printed_raw_by_the_cli_harness(capsys):
    """Every CLI body runs in harness.run_cli, which drops the library's no-depth warning (the
    CLIs print their own note); other warnings still show."""
    import warnings

    from camflow_jax.cli import harness
    from camflow_jax.predictor import Predictor  # noqa: F401 (the warning's source, for the category)

    def body():
        warnings.warn(harness.NO_DEPTH_WARNING + ": using a constant depth", UserWarning)
        warnings.warn("another warning", UserWarning)

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert harness.run_cli(body) == 0
    assert [str(w.message) for w in shown] == ["another warning"]


@pytest.mark.slow
def test_a_camflow_run_without_depth_prints_our_note_only(tmp_path):
    """POOR (issue 63): a raw UserWarning with a source path and a code line was printed beside
    the CLI's own note in every camflow run without depth, even under -q."""
    _clip(tmp_path / "in.avi", n=4, h=64, w=96)
    proc = _cli(tmp_path, "camflow_jax.stabilize", "in.avi", "-o", "o.avi", "--estimator=camflow_net", "-q")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "UserWarning" not in proc.stderr and ".py:" not in proc.stderr, proc.stderr
    assert "depth" not in proc.stderr  # -q: not even our note
    proc = _cli(tmp_path, "camflow_jax.stabilize", "in.avi", "-o", "o.avi", "--estimator=camflow_net", "-y")
    assert proc.returncode == 0 and "UserWarning" not in proc.stderr, proc.stderr
    assert proc.stderr.count("no --depth") == 1


@pytest.mark.parametrize("depth,words", [
    (np.ones((4, 6), bool), r"depth1 is a boolean array \(a mask, not depth\)"),
    (np.ones((4, 6), complex), "depth1 is a complex array"),
    (np.ones((4, 6), object), "depth1 is an array of Python objects"),
    ([[1.0, 2.0], [3.0]], r"depth1 is not an \[H, W\] array of numbers"),
    (np.full((4, 6), np.nan), r"^depth1: only 0\.00% of the pixels hold a finite positive depth \(all NaN, inf or "
                              r"<= 0; at least one needed\)$"),
    (np.full((4, 6), -2.0), r"all NaN, inf or <= 0; at least one needed"),
    (np.zeros((4, 6)), r"all NaN, inf or <= 0; at least one needed"),
    (np.ones((4, 5)), r"^depth1 is 5x4 but its image is 6x4; depth must be aligned with its image$"),
    (np.ones((2, 4, 6)), r"^depth1 must be a non-empty \[H, W\] map, got shape \(2, 4, 6\)$"),
])
def test_object_complex_bool_and_ragged_depth_are_refused_in_our_words(depth, words):
    """POOR (issue 63): such depth arrays given to the Predictor met numpy's words (or dtype
    names); one line naming the argument, as the Predictor's check says it."""
    from camflow_jax.predictor import _check_depth

    with pytest.raises(ValueError, match=words):
        _check_depth(depth, (4, 6), "depth1")


def test_the_predictor_fills_invalid_depth_pixels_with_the_median_of_the_valid_ones():
    """Documented: NaN, inf and <= 0 pixels of a depth given to the Predictor take the median of
    its valid pixels (numpy's median: the oracle); huge or tiny finite depth is kept as it is."""
    from camflow_jax.predictor import _check_depth

    d = np.arange(1, 25, dtype=np.float64).reshape(4, 6)
    d[0, :3] = [np.nan, -np.inf, -1.0]
    d[1, 0] = 0.0
    d[3, 5] = 1e38
    out = _check_depth(d, (4, 6), "depth1")
    ok = np.isfinite(d) & (d > 0)
    assert out.dtype == np.float32 and np.all(out[ok] == d[ok].astype(np.float32))
    assert np.all(out[~ok] == np.float32(np.median(d[ok])))


@pytest.mark.parametrize("sigmas, words", [
    ([-1.0, 2.0, 8.0, 32.0], r"^bases\.depth_sigmas\[0\] must be a finite number of pixels >= 0 \(0: no blur\), got "
                             r"-1\.0 \(in \(-1\.0, 2\.0, 8\.0, 32\.0\)\)$"),
    (["abc", 2, 8, 32], r"bases\.depth_sigmas\[0\] must be a finite number of pixels >= 0 \(0: no blur\), got 'abc'"),
    ([0.0, float("nan"), 8, 32], r"bases\.depth_sigmas\[1\] must be a finite number"),
    ("abc", r"^bases\.depth_sigmas must be a non-empty sequence of blurs in pixels"),
    (5, r"^bases\.depth_sigmas must be a non-empty sequence of blurs in pixels"),
])
def test_bad_depth_sigmas_in_a_model_config_are_refused_naming_the_key(sigmas, words):
    """POOR (issue 63): a model config's bases.depth_sigmas of "abc" ended in "could not convert
    string to float", 5 in "'int' object is not iterable", NaN in "cannot convert float NaN to
    integer" at the first depth pair, and a negative blur was taken as none. The Predictor
    refuses them when it is built, naming the key."""
    from camflow_jax.models import checkpoint
    from camflow_jax.predictor import Predictor

    model, variables, bases, cfg = checkpoint.load_model(checkpoint.pretrained_path(checkpoint.PRETRAINED))
    with pytest.raises(ValueError, match=words):
        Predictor(model, variables, bases, {**cfg, "bases": {**cfg["bases"], "depth_sigmas": sigmas}})


def test_a_cover_art_only_mp3_is_said_to_hold_no_video_stream(tmp_path, capsys):
    """POOR (issue 63): an .mp3 whose only picture is its cover art was refused with "needs at
    least 2 frames"; it holds no video, and the error says so, naming the file."""
    import av
    from av.stream import Disposition

    from camflow_jax import stabilize

    path = tmp_path / "song.mp3"
    with av.open(str(path), "w") as c:  # audio plus a PNG marked as an attached picture, as taggers write it
        audio = c.add_stream("mp3", rate=44100)
        cover = c.add_stream("png")
        cover.width, cover.height, cover.pix_fmt = 32, 32, "rgb24"
        cover.disposition = Disposition.attached_pic
        for p in [*cover.encode(av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")),
                  *cover.encode()]:
            c.mux(p)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 44100), np.int16), format="s16", layout="mono")
        frame.sample_rate = 44100
        for p in [*audio.encode(frame), *audio.encode()]:
            c.mux(p)
    with av.open(str(path)) as c:  # the oracle: FFmpeg marks the picture stream as cover art
        assert [s.disposition & Disposition.attached_pic for s in c.streams.video] == [Disposition.attached_pic]
    assert stabilize.main([str(path), "-o", str(tmp_path / "out.mp4"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "song.mp3 as a video (it holds no video stream, only a still picture" in err, err
    assert "2 frames" not in err and not (tmp_path / "out.mp4").exists()


def test_refine_levels_beyond_the_working_size_are_refused_naming_the_setting():
    """POOR (issue 63, from earlier rounds): RefineConfig(levels=8) built a pyramid whose coarsest
    level was 3 px wide (288 / 2**7) and fell back silently; it is refused, naming the setting."""
    from camflow_jax.refine import RefineConfig

    with pytest.raises(ValueError, match=r"levels=8 halves the working size \(max_size 288 px\) 7 times: the "
                                         r"coarsest level would be 2\.25 px, under 8 px; use at most 6 levels"):
        RefineConfig(levels=8, iterations=(1,) * 8, strides=(1,) * 8, active=("all",) * 8)
    RefineConfig(levels=6, iterations=(1,) * 6, strides=(1,) * 6, active=("all",) * 6)  # 9 px: accepted
    assert RefineConfig.at_size(4608).levels == 7  # the largest working sizes keep their levels
