"""Video / frame-folder I/O and the ``python -m camflow_jax.stabilize`` CLI (run in-process)."""

import json
import os

import cv2
import numpy as np
import pytest

from camflow_jax import stabilize
from camflow_jax.io import video as video_io
from camflow_jax.stabilization import clips


@pytest.fixture(scope="module")
def clip():
    return clips.planar_clip(20, 64, 96, seed=2)


def _count_frames(path):
    cap = cv2.VideoCapture(str(path))
    n = 0
    while cap.read()[0]:
        n += 1
    fps = cap.get(cv2.CAP_PROP_FPS)
    cap.release()
    return n, fps


def test_video_run_keeps_frames_and_fps_and_writes_report(tmp_path, clip, capsys):
    src = tmp_path / "in.avi"
    video_io.write_frames(str(src), clip.frames, fps=24.0)
    out = tmp_path / "out.mp4"
    rc = stabilize.main([str(src), "-o", str(out), "--estimator=dis", "-q", "--metrics"])
    assert rc == 0, capsys.readouterr().err
    n, fps = _count_frames(out)
    assert (n, fps) == (20, 24.0)
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["frames"] == 20 and report["estimator"] == "dis"
    assert report["zoom"] >= 1.0 and report["border_fraction_max"] == 0.0
    assert set(report["metrics"]["output"]) >= {"stability", "cropping", "distortion"}
    # 20 frames at 24 fps is shorter than one period of the 1 Hz band: reported as null.
    assert report["metrics"]["output"]["stability"] is None
    assert 0 < report["metrics"]["output"]["stability_classic"] <= 1
    for name in ("out_path.png", "out_tracks.png"):
        assert cv2.imread(str(tmp_path / name)) is not None

    # Never overwrite without -y; nothing is touched.
    before = out.stat().st_mtime_ns
    assert stabilize.main([str(src), "-o", str(out), "--estimator=dis", "-q"]) == 2
    assert "-y" in capsys.readouterr().err and out.stat().st_mtime_ns == before
    assert stabilize.main([str(src), "-o", str(out), "--estimator=dis", "-q", "-y",
                           "--no-metrics", "--no-plots", "--crop", "none"]) == 0
    # Without --metrics (the default): no scoring, no plots.
    assert stabilize.main([str(src), "-o", str(tmp_path / "plain.mp4"), "--estimator=dis", "-q"]) == 0
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert "metrics" not in plain and "plots" not in plain and plain["frames"] == 20
    assert not (tmp_path / "plain_path.png").exists() and not (tmp_path / "plain_tracks.png").exists()


def test_unreadable_inputs_are_refused(tmp_path, capsys):
    assert stabilize.main([str(tmp_path / "missing.mp4"), "-o", str(tmp_path / "o.mp4")]) == 2
    assert "input not found" in capsys.readouterr().err
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 500)
    assert stabilize.main([str(bad), "-o", str(tmp_path / "o.mp4")]) == 2
    assert "cannot open" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert stabilize.main([str(empty), "-o", str(tmp_path / "o.mp4")]) == 2
    assert "holds no images" in capsys.readouterr().err
    assert not (tmp_path / "o.mp4").exists()
    assert stabilize.main([str(bad), "-o", str(tmp_path / "o.mp4"), "--estimator=raft"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown estimator 'raft'; choose from identity,") and err.count("\n") == 1


def test_estimator_names_old_names_and_no_refine(tmp_path, clip, capsys):
    """Registry names; old sift / orb with a one-line note (same method); --no-refine."""
    src = tmp_path / "in.avi"
    video_io.write_frames(str(src), clip.frames[:6], fps=24.0)
    fast = ["-q", "--no-metrics", "--no-plots", "-y"]
    assert stabilize.main([str(src), "-o", str(tmp_path / "a.avi"), "--estimator=sift", *fast]) == 0
    err = capsys.readouterr().err
    assert "note: estimator 'sift' is now called 'sift_ransac'" in err
    assert json.loads((tmp_path / "a.json").read_text())["estimator"] == "sift_ransac"
    assert stabilize.main([str(src), "-o", str(tmp_path / "b.avi"), "--estimator=ecc", "--no-refine",
                           *fast]) == 0
    assert "ecc ignores --no-refine" in capsys.readouterr().err
    assert stabilize.main([str(src), "-o", str(tmp_path / "c.avi"), "--estimator=camflow", "--no-refine",
                           "--refine-size=576", *fast]) == 2  # refused before anything is loaded
    assert "do not also give --no-refine" in capsys.readouterr().err and not (tmp_path / "c.avi").exists()
    assert stabilize.main([str(src), "-o", str(tmp_path / "d.avi"), "--two-motions", *fast]) == 2
    err = capsys.readouterr().err
    assert "--two-motions only applies to camflow" in err and len(err.strip().splitlines()) == 1
    assert stabilize.main([str(src), "-o", str(tmp_path / "e.avi"), "--no-two-motions", *fast]) == 2
    assert "--no-two-motions only applies to camflow" in capsys.readouterr().err
    assert json.loads((tmp_path / "b.json").read_text())["estimator"] == "ecc"


def test_frame_folders_and_motion_reuse(tmp_path, clip):
    src = tmp_path / "frames"
    src.mkdir()
    for i, f in enumerate(clip.frames):  # unpadded names: natural order matters
        cv2.imwrite(str(src / f"f{i}.png"), cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    assert [os.path.basename(p) for p in video_io.FrameSource(str(src))._files[:3]] == \
        ["f0.png", "f1.png", "f2.png"]
    got = np.stack(list(video_io.FrameSource(str(src))))
    np.testing.assert_array_equal(got, clip.frames)

    args = ["--estimator=dis", "-q", "--no-metrics", "--no-plots", "--fps", "12"]
    assert stabilize.main([str(src), "-o", str(tmp_path / "a"), "--save-motion",
                           str(tmp_path / "m.npz")] + args) == 0
    assert stabilize.main([str(src), "-o", str(tmp_path / "b"), "--load-motion",
                           str(tmp_path / "m.npz")] + args) == 0
    a = sorted(os.listdir(tmp_path / "a"))
    assert len(a) == 20 and a[0] == "frame_000000.png"
    for name in a[::7]:
        np.testing.assert_array_equal(cv2.imread(str(tmp_path / "a" / name)),
                                      cv2.imread(str(tmp_path / "b" / name)))
    assert json.loads((tmp_path / "a.json").read_text())["fps"] == 12.0


def test_pass_two_reuses_pass_one_frames_within_the_limit(tmp_path, clip, monkeypatch):
    """A short clip is decoded once: pass 2 renders the frames pass 1 kept, and the output is the
    one a second decoding gives (KEEP_FRAMES_BYTES 0: decoded twice, as longer clips are)."""
    from camflow_jax.stabilization import runner

    src = tmp_path / "in.avi"
    video_io.write_frames(str(src), clip.frames, fps=24.0)
    decodes = []
    original = video_io.FrameSource.__iter__

    def counted(self):
        decodes.append(1)
        return original(self)

    monkeypatch.setattr(video_io.FrameSource, "__iter__", counted)
    args = ["--estimator=klt_ransac", "-q"]
    assert stabilize.main([str(src), "-o", str(tmp_path / "kept")] + args) == 0
    assert len(decodes) == 2  # FrameSource's first-frame peek, then pass 1
    monkeypatch.setattr(runner, "KEEP_FRAMES_BYTES", 0)
    assert stabilize.main([str(src), "-o", str(tmp_path / "again")] + args) == 0
    assert len(decodes) == 2 + 3  # the peek, pass 1 and pass 2
    names = sorted(os.listdir(tmp_path / "kept"))
    assert names == sorted(os.listdir(tmp_path / "again")) and len(names) == 20
    for name in names:
        np.testing.assert_array_equal(cv2.imread(str(tmp_path / "kept" / name)),
                                      cv2.imread(str(tmp_path / "again" / name)))
    keep = runner.KeptFrames(limit=3 * clip.frames[0].nbytes)
    for f in clip.frames[:3]:
        keep.add(f)
    assert keep.complete(3) and not keep.complete(4) and len(keep.frames()) == 3
    keep.add(clip.frames[3])  # past the limit: nothing is kept from now on
    keep.add(clip.frames[4])
    assert not keep.complete(3) and keep.frames() == []


def test_frame_size_change_is_an_error(tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    cv2.imwrite(str(d / "0.png"), np.zeros((32, 48, 3), np.uint8))
    cv2.imwrite(str(d / "1.png"), np.zeros((40, 48, 3), np.uint8))
    with pytest.raises(ValueError, match="differs from the first frame"):
        list(video_io.FrameSource(str(d)))
    with pytest.raises(FileExistsError):
        video_io.FrameSink(str(d / "0.png"), 30.0)


def test_the_default_run_imports_neither_jax_nor_matplotlib(tmp_path, clip):
    # Start-up is part of a run's wall time (issue 42): the default estimator (SIFT), the
    # smoothing and the rendering are numpy and OpenCV; JAX (~1 s to import) comes in with
    # camflow only, matplotlib with --metrics' plots only.
    import subprocess
    import sys

    src = tmp_path / "in.avi"
    video_io.write_frames(str(src), clip.frames, fps=24.0)
    code = ("import sys\nfrom camflow_jax import stabilize\n"
            f"rc = stabilize.main([{str(src)!r}, '-o', {str(tmp_path / 'o.mp4')!r}, '-q'])\n"
            "print(rc, sorted(m for m in ('jax', 'flax', 'matplotlib') if m in sys.modules))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[-2] == "0 []", res.stdout + res.stderr
