"""Bad input never loses data or passes as a result (issue 13): the CLIs at their boundary.

Each test names the bad or poor case of the issue it guards. CLIs run in-process through their
``main(argv)`` (argparse refusals raise SystemExit(2)); inputs are tiny. The table of what the
tools refuse is docs/what_the_tools_refuse.md.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fixtures_benchmarks as fx
from camflow_jax import bases as B
from camflow_jax import estimate, stabilize
from camflow_jax import evaluate as ev
from camflow_jax.estimators import outputs
from camflow_jax.geometry import checks, device
from camflow_jax.io import video as video_io
from camflow_jax.stabilization import clips
from helpers import ROOT, digest


def _pair(tmp_path, h=64, w=96):
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), (3, 3), 0)
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    cv2.imwrite(str(a), img)
    cv2.imwrite(str(b), np.roll(img, 2, axis=1))
    return str(a), str(b)


def _no_partials(folder) -> bool:
    return not [n for n in os.listdir(folder) if ".partial-" in n]


# ----------------------------------------------------------------------------- estimate: results
class _FakePredictor:
    """Stands in for a loaded model (no network): returns fixed flows / homography."""

    description = "fake model"
    num_depth = 0

    def __init__(self, flow_value=np.nan, homography=None):
        self.flow_value, self.homography = flow_value, homography

    def __call__(self, img1, img2, depth1=None, depth2=None, intrinsics=None, refine=None, confidence=None):
        h, w = img1.shape[:2]
        flow = np.full((h, w, 2), self.flow_value, np.float32)
        H = self.homography if self.homography is not None else device.fit_homography(flow)
        return {"flow_f": flow, "flow_b": flow.copy(), "homography": np.asarray(H, np.float64),
                "logvar_f": np.zeros((h, w, 1), np.float32), "rotated": False}


def _use_predictor(monkeypatch, pred):
    from camflow_jax.predictor import Predictor

    monkeypatch.setattr(Predictor, "load", classmethod(lambda cls, *a, **k: pred))
    monkeypatch.setattr(Predictor, "from_checkpoint", classmethod(lambda cls, *a, **k: pred))


def test_estimate_never_writes_nan_flows(tmp_path, monkeypatch, capsys):
    """Bad: a checkpoint with NaN weights gave all-NaN flows, exit 0."""
    _use_predictor(monkeypatch, _FakePredictor(np.nan))
    a, b = _pair(tmp_path)
    out = tmp_path / "out"
    assert estimate.main([a, b, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "\nerror: " in "\n" + err and "non-finite" in err and "damaged" in err
    assert not out.exists() and _no_partials(tmp_path)


def test_estimate_never_writes_a_degenerate_homography(tmp_path, monkeypatch, capsys):
    """Bad: H = [[0,0,cx],[0,0,cy],[0,0,1]] (every pixel to the centre) was written."""
    h, w = 64, 96
    degenerate = np.array([[0, 0, (w - 1) / 2], [0, 0, (h - 1) / 2], [0, 0, 1.0]])
    _use_predictor(monkeypatch, _FakePredictor(0.0, degenerate))
    a, b = _pair(tmp_path, h, w)
    assert estimate.main([a, b, "-o", str(tmp_path / "out")]) == 2
    assert "degenerate" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_fit_homography_flags_missing_data():
    """fit_homography returned that singular matrix silently; now NaN and valid=False."""
    nan = np.full((16, 24, 2), np.nan, np.float32)
    assert np.all(np.isnan(np.asarray(device.fit_homography(nan))))
    H, ok = device.fit_homography(np.zeros((2, 16, 24, 2), np.float32),
                                    jnp.stack([jnp.zeros((16, 24)), jnp.ones((16, 24))]), return_valid=True)
    assert np.asarray(ok).tolist() == [False, True]
    assert np.all(np.isnan(np.asarray(H)[0])) and np.allclose(np.asarray(H)[1], np.eye(3), atol=1e-4)
    H, ok = jax.jit(lambda f: device.fit_homography(f, return_valid=True))(nan)  # jit-safe
    assert not bool(ok)
    assert checks.homography_problem(np.eye(3), 16, 24) is None


def test_estimate_refuses_absurd_intrinsics_and_depth(tmp_path, capsys):
    a, b = _pair(tmp_path)
    assert estimate.main([a, b, "--method", "dis", "-o", str(tmp_path / "o"),
                          "--intrinsics=150,150,1e30,1e30"]) == 2
    assert "principal point" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # non-finite: refused by the flag's parser
        estimate.main([a, b, "--method", "dis", "-o", str(tmp_path / "o"), "--intrinsics=nan,1,1,1"])
    assert e.value.code == 2
    np.save(tmp_path / "d.npy", np.full((64, 96), np.nan, np.float32))
    assert estimate.main([a, b, "--method", "dis", "-o", str(tmp_path / "o"),
                          "--depth1", str(tmp_path / "d.npy"), "--depth2", str(tmp_path / "d.npy")]) == 2
    assert "finite positive depth" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    from camflow_jax.predictor import _check_intrinsics

    with pytest.raises(ValueError, match="principal point"):
        _check_intrinsics((150, 150, 1e30, 1e30), (90, 160))


@pytest.fixture(scope="module")
def tiny_model():
    """A tiny CamFlow+ structure and weights (never run: these checks come before compiling)."""
    from camflow_jax.models import build_model

    cfg = {"group_sizes": [12, 12, 12], "height": 64, "width": 128, "embed_dim": 8,
           "depths": [1, 1, 1], "num_heads": [1, 1, 1]}
    model = build_model(cfg)
    g = jnp.zeros((1, 64, 128, 1))
    shapes = jax.eval_shape(lambda k: model.init(k, g, g, jnp.zeros((36, 64, 128, 2)), train=False),
                            jax.random.key(0))
    variables = jax.tree.map(lambda s: np.full(s.shape, 0.01, s.dtype), shapes)
    return cfg, variables


def test_damaged_checkpoints_are_refused_before_running(tmp_path, tiny_model, capsys):
    """Bad: NaN weights and an all-NaN basis in a checkpoint passed as a result."""
    from camflow_jax.models import basis_set, checkpoint
    cfg, variables = tiny_model
    nan_weights = jax.tree.map(np.copy, variables)
    leaf = jax.tree.leaves(nan_weights["params"])[0]
    leaf.reshape(-1)[0] = np.nan
    checkpoint.save_model(tmp_path / "w", cfg, nan_weights)
    good_bases = basis_set.static_bases(cfg)
    checkpoint.save_model(tmp_path / "b", cfg, variables, bases=np.full_like(good_bases, np.nan))
    a, b = _pair(tmp_path)
    assert estimate.main([a, b, "--checkpoint", str(tmp_path / "w"), "-o", str(tmp_path / "o")]) == 2
    assert "model weights" in capsys.readouterr().err
    assert estimate.main([a, b, "--checkpoint", str(tmp_path / "b"), "-o", str(tmp_path / "o")]) == 2
    assert "static bases" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_import_refuses_a_nan_basis(tmp_path, tiny_model, monkeypatch):
    """Bad: the importer checked the weights but accepted a NaN basis."""
    from camflow_jax.models import build_model, importing, official

    cfg, variables = tiny_model
    nan_bases = np.full((24, 64, 128, 2), np.nan, np.float32)
    monkeypatch.setattr(official, "load_released",
                        lambda path, size=None: (build_model(cfg), variables, nan_bases))
    src = tmp_path / "released.npz"
    src.write_bytes(b"stand-in")
    with pytest.raises(ValueError, match="NaN"):  # the command line's exit 2 (tests/models/test_parity.py)
        importing.import_released(src, tmp_path / "ck")
    assert not (tmp_path / "ck").exists() and _no_partials(tmp_path)


def test_import_refuses_a_size_the_network_cannot_take(tmp_path, tiny_model, monkeypatch):
    """Issue 44: --size 10,20 wrote a checkpoint that estimate then refused ('network size 10x20
    must be a multiple of 64'); the importer refuses it, in one line, and writes nothing."""
    from camflow_jax.models import build_model, importing, official

    cfg, variables = tiny_model
    sizes = []

    def load(path, size=None):
        sizes.append(size)
        return build_model(cfg), variables, np.full((24,) + tuple(size or (64, 128)) + (2,), 0.5, np.float32)

    monkeypatch.setattr(official, "load_released", load)
    src = tmp_path / "released.npz"
    src.write_bytes(b"stand-in")
    with pytest.raises(ValueError) as e:  # the command line prints it as its one 'error:' line
        importing.import_released(str(src), str(tmp_path / "ck"), (10, 20))
    assert str(e.value) == ("the basis is 10x20 (H x W), but the network's sides must be multiples of "
                            f"{build_model(cfg).size_multiple}: estimate would refuse the checkpoint. Pass the size "
                            "the weights were trained at (--size H,W; the release: 320,576)"), str(e.value)
    assert sizes == [(10, 20)] and not (tmp_path / "ck").exists() and _no_partials(tmp_path)
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "import_official_checkpoint.py"), str(src), "-o",
                        str(tmp_path / "ck"), "--size", "10"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "argument --size: must be H,W" in r.stderr  # argparse names the flag
    with pytest.raises(ValueError, match="multiples of 64"):
        importing.check_size((320, 570), 64)
    importing.check_size((320, 576), 64)
    importing.import_released(str(src), str(tmp_path / "ck"))  # 64x128: fits
    assert (tmp_path / "ck" / "model.json").exists()


def test_huge_depth_keeps_the_depth_bases():
    """Poor: depth 1e38 underflowed the depth bases to zero silently; now scale-free."""
    rng = np.random.default_rng(0)
    d = rng.uniform(1, 3, (16, 24)).astype(np.float32)
    K = jnp.array([20.0, 20.0, 12.0, 8.0])
    ref = np.asarray(B.depth_translational_bases(d, K))
    for scale in (1e38, 1e-30):
        got = np.asarray(jax.jit(B.depth_translational_bases)((d.astype(np.float64) * scale).astype(np.float32), K))
        np.testing.assert_allclose(got, ref, atol=1e-5)
    assert checks.check_depth(d * 1e38, "d").shape == d.shape  # accepted by the CLIs


# ----------------------------------------------------------------------------- estimate: files
def test_estimate_overwrite_policy_and_strict_json(tmp_path, capsys):
    """Poor: estimate overwrote an existing result silently (stabilize asked for -y)."""
    a, b = _pair(tmp_path)
    out = tmp_path / "out"
    assert estimate.main([a, b, "--method", "dis", "-o", str(out)]) == 0
    json.loads((out / "homography.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    before = digest(out)
    capsys.readouterr()
    assert estimate.main([a, b, "--method", "dis", "-o", str(out)]) == 2
    assert "-y" in capsys.readouterr().err and digest(out) == before
    (out / "notes.txt").write_text("mine")
    assert estimate.main([a, b, "--method", "sift_magsac", "-o", str(out), "-y"]) == 0
    assert (out / "notes.txt").read_text() == "mine"  # files we did not write are kept
    assert json.loads((out / "homography.json").read_text())["method"] == "sift_magsac"
    # An output that is one of the inputs is refused, -y or not.
    assert estimate.main([a, b, "--method", "dis", "-o", a, "-y"]) == 2
    assert estimate.main([a, b, "--method", "dis", "-o", str(tmp_path / "empty")]) == 0  # new folder
    assert _no_partials(tmp_path)


def test_estimate_failure_while_writing_keeps_the_previous_result(tmp_path, monkeypatch):
    a, b = _pair(tmp_path)
    out = tmp_path / "out"
    assert estimate.main([a, b, "--method", "dis", "-o", str(out)]) == 0
    before = digest(out)
    calls = []

    def broken(path, rgb):
        calls.append(path)
        if len(calls) == 3:
            raise OSError("disk full (simulated)")
        cv2.imwrite(path, rgb)

    monkeypatch.setattr(outputs, "_save_png", broken)
    assert estimate.main([a, b, "--method", "sift_magsac", "-o", str(out), "-y"]) == 2
    assert digest(out) == before and _no_partials(tmp_path)
    calls.clear()
    assert estimate.main([a, b, "--method", "dis", "-o", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists() and _no_partials(tmp_path)


def test_poor_images_are_refused(tmp_path, capsys):
    """Poor: a truncated JPEG or 12-bit data in a 16-bit PNG was processed silently; dis on
    tiny images gave a raw cv2 traceback (or crashed)."""
    rng = np.random.default_rng(1)
    img = cv2.GaussianBlur(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), (5, 5), 0)
    cv2.imwrite(str(tmp_path / "full.jpg"), img)
    data = (tmp_path / "full.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: int(len(data) * 0.6)])
    assert estimate.main([str(tmp_path / "cut.jpg"), str(tmp_path / "full.jpg"), "--method", "dis",
                          "-o", str(tmp_path / "o")]) == 2
    assert "truncated JPEG" in capsys.readouterr().err
    (tmp_path / "trailer.jpg").write_bytes(data + b"\0" * 100)  # data after the end marker: fine
    from camflow_jax.io.images import read_rgb

    assert read_rgb(tmp_path / "trailer.jpg").shape == (120, 160, 3)
    cv2.imwrite(str(tmp_path / "d12.png"), (img.astype(np.uint16) * 16))  # 12-bit range
    assert estimate.main([str(tmp_path / "d12.png"), str(tmp_path / "d12.png"), "--method", "dis",
                          "-o", str(tmp_path / "o")]) == 2
    assert "12-bit" in capsys.readouterr().err
    cv2.imwrite(str(tmp_path / "d16.png"), (img.astype(np.uint16) * 257))  # full 16-bit range
    assert np.array_equal(read_rgb(tmp_path / "d16.png"), img[..., ::-1])
    tiny = tmp_path / "tiny.png"
    cv2.imwrite(str(tiny), img[:12, :100])
    cv2.imwrite(str(tmp_path / "tiny2.png"), img[1:13, :100])  # not identical (that is zero motion)
    assert estimate.main([str(tiny), str(tmp_path / "tiny2.png"), "--method", "dis", "-o", str(tmp_path / "o")]) == 2
    assert "at least 32x32" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- evaluate
def test_evaluate_overwrite_policy_and_unwritable_out(tmp_path, monkeypatch, capsys):
    """Poor: evaluate overwrote silently; an unwritable --out was reported only at the end."""
    fx.make_cahomo(str(tmp_path / "c"), pairs_per_video=1)
    args = ["--dataset=cahomo", f"--data={tmp_path / 'c'}", "--methods=identity", "--no-progress"]
    out = tmp_path / "o"
    assert ev.main(args + ["-o", str(out)]) == 0
    before = digest(out)
    assert ev.main(args + ["-o", str(out)]) == 2
    assert "-y" in capsys.readouterr().err and digest(out) == before
    assert ev.main(args + ["-o", str(out), "--overwrite"]) == 0
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: pytest.fail("evaluation started"))
    assert ev.main(args + ["-o", str(tmp_path / "file" / "sub")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert _no_partials(tmp_path)


# ----------------------------------------------------------------------------- stabilize
@pytest.fixture(scope="module")
def clip():
    return clips.planar_clip(12, 64, 96, seed=2)


FAST = ["--estimator=identity", "-q", "--no-metrics", "--no-plots"]


def _video(tmp_path, clip, name="in.avi"):
    src = tmp_path / name
    video_io.write_frames(str(src), clip.frames, fps=24.0)
    return src


def _frames(tmp_path, clip, name="frames"):
    d = tmp_path / name
    d.mkdir()
    for i, f in enumerate(clip.frames):
        cv2.imwrite(str(d / f"f{i:02d}.png"), cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    return d


def test_stabilize_never_overwrites_its_input(tmp_path, clip, capsys):
    """Bad: -y with an output that is a symlink or hard link to the input destroyed it."""
    src = _video(tmp_path, clip)
    folder = _frames(tmp_path, clip)
    before_video, before_folder = digest(src), digest(folder)
    (tmp_path / "sym.avi").symlink_to(src)
    os.link(src, tmp_path / "hard.avi")
    (tmp_path / "symdir").symlink_to(folder)
    cases = [(src, tmp_path / "sym.avi"), (src, tmp_path / "hard.avi"), (src, src),
             (folder, tmp_path / "symdir"), (folder, Path(str(folder) + "/.")), (folder, folder)]
    for inp, out in cases:
        assert stabilize.main([str(inp), "-o", str(out), "-y"] + FAST) == 2, (inp, out)
        assert "is the input" in capsys.readouterr().err
    # A report or plot that would become a frame of the input folder is refused too.
    assert stabilize.main([str(folder), "-o", str(folder / "out.mp4"), "-y", "--estimator=identity",
                           "-q", "--metrics"]) == 2
    assert "input folder" in capsys.readouterr().err
    assert digest(src) == before_video and digest(folder) == before_folder
    assert os.path.islink(tmp_path / "sym.avi")


def test_stabilize_smoothing_is_bounded(tmp_path, clip, capsys):
    """Bad: --smoothing 1000000000 hung; 100000 died allocating 4.29 GiB."""
    src = _video(tmp_path, clip)
    t0 = time.perf_counter()
    assert stabilize.main([str(src), "-o", str(tmp_path / "o.avi"), "--smoothing", "1000000000",
                           "--estimator=identity", "-q", "--no-plots"]) == 0
    assert time.perf_counter() - t0 < 120
    assert "smoothing radius 1000000000" in capsys.readouterr().err
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["window_radius"]["max"] <= 11 and report["warnings"]
    with pytest.raises(SystemExit) as e:
        stabilize.main([str(src), "-o", str(tmp_path / "p.avi"), "--smoothing", "0"])
    assert e.value.code == 2


@pytest.mark.parametrize("flag,value", [("--max-zoom", "nan"), ("--max-zoom", "0.5"),
                                        ("--strength", "inf"), ("--fps", "0")])
def test_stabilize_numeric_flags_are_checked(tmp_path, flag, value, capsys):
    """Poor: --max-zoom nan gave an IndexError."""
    with pytest.raises(SystemExit) as e:
        stabilize.main([str(tmp_path / "in.avi"), "-o", str(tmp_path / "o.avi"), flag, value])
    assert e.value.code == 2 and flag in capsys.readouterr().err


@pytest.mark.parametrize("tool,argv,flag", [
    (estimate, ["a.png", "b.png", "-o", ""], "-o/--out"),
    (estimate, ["a.png", "b.png", "-o", "o", "--checkpoint", ""], "--checkpoint"),
    (estimate, ["", "b.png", "-o", "o"], "img1"),
    (stabilize, ["in.avi", "-o", ""], "-o/--output"),
    (stabilize, ["in.avi", "-o", "o.avi", "--export-motion", ""], "--export-motion/--save-motion"),
    (stabilize, ["in.avi", "-o", "o.avi", "--report", " "], "--report"),
    (stabilize, ["in.avi", "-o", "o.avi", "--path", ""], "--path/--load-motion"),
    (ev, ["--dataset=cahomo", "--data=c", "-o", ""], "-o/--out"),
    (ev, ["--dataset=cahomo", "--data=c", "--checkpoint="], "--checkpoint"),
])
def test_empty_paths_are_refused_naming_the_flag(tmp_path, monkeypatch, tool, argv, flag, capsys):
    """Issue 44: ``-o ""`` ended in "error: no such file or directory" naming no flag, and an
    empty ``--export-motion`` / ``--report`` was ignored silently."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        tool.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(f"error: argument {flag}: empty path"
                                                 + (" (' ')" if " " in argv else "")), err
    assert os.listdir(tmp_path) == []


def test_stabilize_outputs_that_are_one_file_are_refused_up_front(tmp_path, clip, monkeypatch, capsys):
    """Issue 44: ``-o X.mp4 --export-motion X.json`` (the default report is X.json) failed only
    after the whole run, with an 'another run' message; now before any work, naming both flags."""
    from camflow_jax.stabilization import runner

    monkeypatch.chdir(tmp_path)
    src = _video(tmp_path, clip)
    monkeypatch.setattr(runner, "stabilize_video", lambda *a, **k: pytest.fail("the run started"))
    cases = [(["-o", "X.mp4", "--export-motion", "X.json"],
              "error: --export-motion and the report (named after -o X.mp4) are the same file (X.json)"),
             (["-o", "X.mp4", "--report", "r", "--export-motion", "./r.json"],
              "error: --export-motion and the report (named after --report r) are the same file (./r.json)")]
    for argv, expect in cases:
        assert stabilize.main([str(src)] + argv + FAST) == 2
        err = capsys.readouterr().err
        assert err.startswith(expect) and len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(tmp_path)) == ["in.avi"]
    with pytest.raises(ValueError, match="export_motion and the report"):  # the library call too
        runner.check_distinct("o.mp4", runner.report_paths("o.mp4"), "o.json")


def _corrupt_frame(path: Path, index: int) -> None:
    """Scrambles the JPEG data of one frame of an MJPG AVI (headers kept)."""
    data = bytearray(path.read_bytes())
    starts = [i for i in range(len(data) - 2) if data[i:i + 3] == b"\xff\xd8\xff"]
    s, e = starts[index], starts[index + 1]
    for i in range(s + 200, e - 100):
        data[i] = (data[i] * 7 + 13) & 0xFF
    path.write_bytes(bytes(data))


def test_stabilize_corrupt_middle_frame_is_an_error(tmp_path, clip, capsys):
    """Bad: a corrupt frame in the middle silently ended the clip (5 of 12 frames, exit 0)."""
    src = _video(tmp_path, clip)
    _corrupt_frame(src, 5)
    assert stabilize.main([str(src), "-o", str(tmp_path / "o.avi")] + FAST) == 2
    err = capsys.readouterr().err
    assert "frame 5 cannot be decoded" in err and "damaged" in err
    assert not (tmp_path / "o.avi").exists() and _no_partials(tmp_path)
    folder = _frames(tmp_path, clip)
    (folder / "f05.png").write_bytes(b"not a png")
    assert stabilize.main([str(folder), "-o", str(tmp_path / "o.avi")] + FAST) == 2
    assert "frame 5 of" in capsys.readouterr().err


def test_hidden_files_in_frame_folders_are_ignored(tmp_path, clip, capsys):
    """Issue 44: a hidden file (macOS's ._f00.png, .DS_Store) sorted first and was read as frame
    0, so the size error blamed it; frame and depth folders ignore names starting with a dot."""
    from camflow_jax.data.depth import depth_files

    folder = _frames(tmp_path, clip)
    cv2.imwrite(str(folder / "._f00.png"), np.zeros((10, 10, 3), np.uint8))
    (folder / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    assert video_io.FrameSource(str(folder)).count_hint == 12
    assert stabilize.main([str(folder), "-o", str(tmp_path / "o")] + FAST) == 0
    assert capsys.readouterr().err == "" and len(os.listdir(tmp_path / "o")) == 12
    depth = tmp_path / "depth"
    depth.mkdir()
    for name in ("d0.npy", "d1.npy", "._d0.npy"):
        np.save(depth / name, np.ones((4, 4), np.float32))
    assert [os.path.basename(f) for f in depth_files(str(depth))] == ["d0.npy", "d1.npy"]


def test_stabilize_estimator_failing_everywhere_is_an_error(tmp_path, capsys):
    """Bad: an estimator failing on every frame reported success (the input, 'stability nan')."""
    flat = np.full((8, 64, 96, 3), 128, np.uint8) + np.arange(8, dtype=np.uint8)[:, None, None, None]
    src = tmp_path / "flat.avi"
    video_io.write_frames(str(src), flat, fps=24.0)
    assert stabilize.main([str(src), "-o", str(tmp_path / "o.avi"), "--estimator=sift_ransac", "-q"]) == 2
    assert "failed on all 7 frame pairs" in capsys.readouterr().err
    assert not (tmp_path / "o.avi").exists() and not (tmp_path / "o.json").exists()


def test_stabilize_failure_midway_leaves_previous_output(tmp_path, clip, monkeypatch, capsys):
    """Outputs are moved into place only after the whole run succeeded."""
    from camflow_jax.stabilization import pipeline

    src = _video(tmp_path, clip)
    out = tmp_path / "o"
    assert stabilize.main([str(src), "-o", str(out)] + FAST) == 0
    assert len(os.listdir(out)) == 12
    before, report = digest(out), digest(tmp_path / "o.json")
    real = pipeline.render

    def failing(frames, plan, progress=None):
        for t, item in enumerate(real(frames, plan, progress)):
            if t == 4:
                raise ValueError("simulated failure")
            yield item

    monkeypatch.setattr(pipeline, "render", failing)
    assert stabilize.main([str(src), "-o", str(out), "-y", "--estimator=identity", "-q"]) == 2
    assert digest(out) == before and digest(tmp_path / "o.json") == report
    assert _no_partials(tmp_path)


def test_a_command_line_ends_with_a_live_thread_pool():
    """``harness.exit_process`` with a thread pool still alive (the Predictor's refinement pool
    of two threads on a CPU): the process ends with its status. Joining the pool's idle
    workers before concurrent.futures' exit hook told them to stop hung ``estimate`` and
    ``stabilize --estimator camflow`` for good after their outputs were written."""
    script = ("from concurrent.futures import ThreadPoolExecutor\n"
              "from camflow_jax.cli import harness\n"
              "pool = ThreadPoolExecutor(2, thread_name_prefix='camflow-refine')\n"
              "assert pool.submit(lambda: 7).result() == 7\n"
              "print('done', flush=True)\n"
              "harness.exit_process(0)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr[-2000:]
