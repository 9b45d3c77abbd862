"""Real video I/O (PyAV: H.264, timestamps, audio) and the motion file (--export-motion /
--path) of ``python -m camflow_jax.stabilize``. Oracles: PyAV's demuxer (packet bytes and
timestamps), numpy products of the exported homographies, the clip's ground truth, and
cv2.warpPerspective for an edited path."""

import json
import os
from fractions import Fraction

import av
import cv2
import numpy as np
import pytest

from camflow_jax import stabilize
from camflow_jax.io import video as video_io
from camflow_jax.stabilization import clips, motion_file

FAST = ["-q", "--no-metrics", "--no-plots"]


@pytest.fixture(scope="module")
def clip():
    return clips.planar_clip(16, 64, 96, seed=2)


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _sine(seconds, rate=16000):
    t = np.arange(int(round(seconds * rate))) / rate
    return (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def _video_with_audio(path, frames, pts_ms, audio_codec="aac", audio_rate=16000):
    """H.264 video whose frame i is shown at pts_ms[i] (time base 1/1000), plus a mono sine
    audio track as long as the video, written with PyAV."""
    out = av.open(str(path), "w")
    v = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=25)
    v.width, v.height, v.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
    v.time_base = v.codec_context.time_base = Fraction(1, 1000)
    a = out.add_stream(audio_codec, rate=audio_rate, layout="mono")
    for f, p in zip(frames, pts_ms):
        vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
        vf.pts, vf.time_base = int(p), Fraction(1, 1000)
        for pk in v.encode(vf):
            out.mux(pk)
    for pk in v.encode(None):
        out.mux(pk)
    step = pts_ms[-1] - pts_ms[-2]
    sound = _sine((pts_ms[-1] + step) / 1000.0, audio_rate)
    n = a.codec_context.frame_size or 1024
    fmt = a.codec_context.format.name
    for k in range(0, len(sound), n):
        chunk = sound[k:k + n][None]
        if fmt.startswith("s16"):
            chunk = (chunk * 32767).astype(np.int16)
        fr = av.AudioFrame.from_ndarray(chunk, format=fmt, layout="mono")
        fr.sample_rate, fr.pts = audio_rate, k
        for pk in a.encode(fr):
            out.mux(pk)
    for pk in a.encode(None):
        out.mux(pk)
    out.close()


def _streams(path):
    """Per stream type: codec, packet payloads, sorted packet times (s), average rate."""
    out = {}
    with av.open(str(path)) as c:
        for s in c.streams:
            out[s.type] = {"codec": s.codec_context.name, "rate": getattr(s, "average_rate", None),
                           "bytes": [], "times": []}
        for pk in c.demux():
            if pk.size:
                d = out[pk.stream.type]
                d["bytes"].append(bytes(pk))
                d["times"].append(float(pk.pts * pk.time_base))
    for d in out.values():
        d["times"].sort()
    return out


def test_audio_and_frame_rate_survive_a_round_trip(tmp_path, clip, capsys):
    src = tmp_path / "in.mp4"
    _video_with_audio(src, clip.frames, [40 * i for i in range(len(clip.frames))])  # 25 fps
    for name in ("o1.mp4", "o2.mkv"):
        assert stabilize.main([str(src), "-o", str(tmp_path / name), "--estimator=identity"]
                              + FAST) == 0, capsys.readouterr().err
        a, b = _streams(src), _streams(tmp_path / name)
        assert b["video"]["codec"] == "h264" and b["video"]["rate"] == 25
        assert len(b["video"]["times"]) == len(clip.frames)
        # Copied, not re-encoded: the same packets, at the same times relative to the video
        # (Matroska shifts every stream alike so that none starts below 0).
        assert b["audio"]["codec"] == "aac" and b["audio"]["bytes"] == a["audio"]["bytes"]
        rel = lambda d: np.asarray(d["audio"]["times"]) - d["video"]["times"][0]  # noqa: E731
        np.testing.assert_allclose(rel(b), rel(a), atol=1e-6)
        report = json.loads((tmp_path / (name[:-4] + ".json")).read_text())
        assert report["audio"].startswith("copied (aac") and report["video_codec"] == "libx264"
    # A frame folder holds no audio: said in the report, not silently dropped.
    assert stabilize.main([str(src), "-o", str(tmp_path / "frames"), "--estimator=identity"]
                          + FAST) == 0
    assert "not written" in json.loads((tmp_path / "frames.json").read_text())["audio"]


@pytest.mark.skipif("libopus" not in av.codecs_available, reason="no Opus encoder in this PyAV")
def test_audio_the_container_cannot_hold_is_transcoded_to_aac(tmp_path, clip, capsys):
    src = tmp_path / "in.mkv"
    _video_with_audio(src, clip.frames[:8], [40 * i for i in range(8)], "libopus", 48000)
    assert "opus" not in av.open(str(tmp_path / "probe.avi"), "w").supported_codecs
    assert stabilize.main([str(src), "-o", str(tmp_path / "o.avi"), "--estimator=identity",
                           "--no-metrics", "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "cannot hold the input's opus audio: it was transcoded to AAC" in err
    a, b = _streams(src), _streams(tmp_path / "o.avi")
    assert b["audio"]["codec"] == "aac" and b["video"]["codec"] == "mjpeg"
    with av.open(str(src)) as c:
        s = c.streams.audio[0]
        src_len = float(s.duration * s.time_base) if s.duration else a["audio"]["times"][-1]
    with av.open(str(tmp_path / "o.avi")) as c:
        got = sum(f.samples for f in c.decode(audio=0)) / 48000
    assert got == pytest.approx(src_len, abs=1 / 25)  # same duration within a frame


def test_variable_frame_rate_keeps_its_timestamps(tmp_path, clip):
    steps = [33] * 5 + [80] * 5 + [20] * 5  # ms
    pts = np.r_[0, np.cumsum(steps)].astype(int)
    src = tmp_path / "vfr.mp4"
    _video_with_audio(src, clip.frames, pts)
    assert video_io.FrameSource(str(src)).variable_rate
    assert stabilize.main([str(src), "-o", str(tmp_path / "o.mp4"), "--estimator=identity"]
                          + FAST) == 0
    for name in ("o.mp4", "v.mkv"):
        if name == "v.mkv":
            assert stabilize.main([str(src), "-o", str(tmp_path / name), "--estimator=identity"]
                                  + FAST) == 0
        got = np.asarray(_streams(tmp_path / name)["video"]["times"])
        np.testing.assert_allclose(got - got[0], pts / 1000.0, atol=1e-6)
    # --fps: the user's constant rate instead.
    assert stabilize.main([str(src), "-o", str(tmp_path / "c.mp4"), "--estimator=identity",
                           "--fps", "10"] + FAST) == 0
    got = _streams(tmp_path / "c.mp4")["video"]["times"]
    assert got == pytest.approx(np.arange(len(pts)) / 10.0, abs=1e-6)


def _folder(path, frames):
    path.mkdir()
    for i, f in enumerate(frames):
        cv2.imwrite(str(path / f"{i:03d}.png"), cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    return path


def _read(folder):
    return np.stack(list(video_io.FrameSource(str(folder)))).astype(int)


def test_exported_motion_reproduces_the_output(tmp_path, clip, capsys):
    src = _folder(tmp_path / "in", clip.frames)
    args = ["--estimator=sift_ransac"] + FAST
    for ext in (".npz", ".json", ".csv"):
        assert stabilize.main([str(src), "-o", str(tmp_path / f"a{ext[1:]}"), "--export-motion",
                               str(tmp_path / f"m{ext}")] + args) == 0
    ref = _read(tmp_path / "anpz")
    for ext in (".json", ".csv"):  # the same run each time
        np.testing.assert_array_equal(_read(tmp_path / f"a{ext[1:]}"), ref)
    rec = motion_file.read(str(tmp_path / "m.json"))
    csv_rec = motion_file.read(str(tmp_path / "m.csv"))
    for k in ("pair_homography", "camera_path", "smoothed_path", "correction"):
        np.testing.assert_array_equal(getattr(csv_rec, k), getattr(rec, k))  # repr: exact
    n = len(clip.frames)
    assert rec.version == 1 and rec.num_frames == n and rec.frame_size == (64, 96)
    # The camera path is the product of the pairs (numpy, independently).
    c = np.eye(3)
    for t in range(n - 1):
        c = rec.pair_homography[t] @ c
        np.testing.assert_allclose(rec.camera_path[t + 1], c / c[2, 2], atol=1e-9)
    # Pairs map frame t to t+1 in input pixels: compare with the clip's ground truth at corners.
    corners = np.array([[0, 0, 1], [95, 0, 1], [0, 63, 1], [95, 63, 1]], float)
    for t in range(n - 1):
        p, q = corners @ rec.pair_homography[t].T, corners @ clip.pair_homographies[t].T
        assert np.abs(p[:, :2] / p[:, 2:] - q[:, :2] / q[:, 2:]).max() < 1.0
    # smoothed path = Z^-1 correction camera path (the schema's definition).
    z = np.array([[rec.zoom, 0, 47.5 * (1 - rec.zoom)], [0, rec.zoom, 31.5 * (1 - rec.zoom)],
                  [0, 0, 1]])
    s = np.linalg.inv(z) @ rec.correction @ rec.camera_path
    np.testing.assert_allclose(rec.smoothed_path, s / s[:, 2:3, 2:3], atol=1e-9)
    assert rec.correction_fit_rms_px.max() < 0.05  # a planar scene: the warp is a homography

    # Rendering from each file: the NPZ (dense flows) exactly, JSON / CSV (homographies) within
    # interpolation noise; estimation is skipped.
    for ext in (".npz", ".json", ".csv"):
        out = tmp_path / f"b{ext[1:]}"
        assert stabilize.main([str(src), "-o", str(out), "--path", str(tmp_path / f"m{ext}")]
                              + args) == 0
        d = np.abs(_read(out) - ref)
        if ext == ".npz":
            assert d.max() == 0
        else:
            assert d.max() <= 1 and d.mean() < 0.01, (ext, d.max(), d.mean())
        report = json.loads((tmp_path / f"b{ext[1:]}.json").read_text())
        assert report["motion_source"] == f"loaded from {tmp_path / f'm{ext}'}"  # not re-run
        assert report["estimator_stats"]["calls"] == n - 1
    # The old flag names are the same flags.
    assert stabilize.main([str(src), "-o", str(tmp_path / "old"), "--load-motion",
                           str(tmp_path / "m.npz")] + args) == 0
    np.testing.assert_array_equal(_read(tmp_path / "old"), ref)


def _edit(rec_path, out_path, frames, delta):
    doc = json.loads(rec_path.read_text())
    for t in frames:
        s = np.asarray(doc["frames"][t]["smoothed_path"])
        doc["frames"][t]["smoothed_path"] = (delta @ s).tolist()
    out_path.write_text(json.dumps(doc))
    return doc


def test_an_edited_path_renders_as_warp_perspective_predicts(tmp_path, clip):
    src = _folder(tmp_path / "in", clip.frames)
    a = np.deg2rad(3.0)
    delta = np.array([[np.cos(a), -np.sin(a), 4.0], [np.sin(a), np.cos(a), -2.5], [0, 0, 1]])
    edited = [3, 4, 9]
    # identity motion, no zoom: the unedited output is the input, so the edited frames must be
    # exactly cv2.warpPerspective(input, S'_t).
    args = ["--estimator=identity", "--crop", "none"] + FAST
    assert stabilize.main([str(src), "-o", str(tmp_path / "a"), "--export-motion",
                           str(tmp_path / "m.json")] + args) == 0
    _edit(tmp_path / "m.json", tmp_path / "e.json", edited, delta)
    assert stabilize.main([str(src), "-o", str(tmp_path / "b"), "--path",
                           str(tmp_path / "e.json")] + args) == 0
    out = _read(tmp_path / "b")
    for t in range(len(clip.frames)):
        if t not in edited:
            np.testing.assert_array_equal(out[t], clip.frames[t])
            continue
        s = np.asarray(json.loads((tmp_path / "e.json").read_text())["frames"][t]["smoothed_path"])
        want = cv2.warpPerspective(clip.frames[t], s, (96, 64), flags=cv2.INTER_LINEAR)
        d = np.abs(out[t] - want.astype(int))[4:-4, 6:-6]  # away from the new borders
        assert d.mean() < 0.5 and np.percentile(d, 99) <= 2, (t, d.mean(), d.max())
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["path"]["frames_moved"] == len(edited)

    # Real motion (SIFT): output = warpPerspective(input, Z S'_t C_t^-1) with the file's C.
    args = ["--estimator=sift_ransac", "--crop", "0.9"] + FAST
    assert stabilize.main([str(src), "-o", str(tmp_path / "c"), "--export-motion",
                           str(tmp_path / "n.json")] + args) == 0
    doc = _edit(tmp_path / "n.json", tmp_path / "f.json", edited, delta)
    assert stabilize.main([str(src), "-o", str(tmp_path / "d"), "--path",
                           str(tmp_path / "f.json")] + args) == 0
    out, ref = _read(tmp_path / "d"), _read(tmp_path / "c")
    zoom = doc["zoom"]
    z = np.array([[zoom, 0, 47.5 * (1 - zoom)], [0, zoom, 31.5 * (1 - zoom)], [0, 0, 1]])
    for t in range(len(clip.frames)):
        if t not in edited:  # JSON: the motion is the homographies (module doc of motion_file)
            assert np.abs(out[t] - ref[t]).max() <= 1
            continue
        fr = doc["frames"][t]
        w = z @ np.asarray(fr["smoothed_path"]) @ np.linalg.inv(np.asarray(fr["camera_path"]))
        want = cv2.warpPerspective(clip.frames[t], w, (96, 64), flags=cv2.INTER_LINEAR)
        d = np.abs(out[t] - want.astype(int))[4:-4, 6:-6]
        assert d.mean() < 1.0, (t, d.mean())
    assert json.loads((tmp_path / "f.json").read_text())["version"] == 1


def test_bad_motion_files_are_one_line_errors(tmp_path, clip, capsys):
    src = _folder(tmp_path / "in", clip.frames[:6])
    args = ["--estimator=identity"] + FAST
    assert stabilize.main([str(src), "-o", str(tmp_path / "a"), "--export-motion",
                           str(tmp_path / "m.json")] + args) == 0
    assert stabilize.main([str(src), "-o", str(tmp_path / "a2"), "--export-motion",
                           str(tmp_path / "m.csv")] + args) == 0
    good = json.loads((tmp_path / "m.json").read_text())
    capsys.readouterr()

    def bad(name, doc=None, text=None, expect=""):
        p = tmp_path / name
        p.write_text(text if text is not None else json.dumps(doc))
        rc = stabilize.main([str(src), "-o", str(tmp_path / "o"), "--path", str(p)] + args)
        line = _one_error_line(capsys.readouterr().err)
        assert rc == 2 and name in line and expect in line, line
        assert not (tmp_path / "o").exists()

    doc = json.loads(json.dumps(good))
    doc["version"] = 7
    bad("version.json", doc, expect="unknown motion file version 7")
    doc = json.loads(json.dumps(good))
    doc["frames"] = doc["frames"][:-1]
    bad("count.json", doc, expect="num_frames is 6 but the file lists 5 frames")
    doc = json.loads(json.dumps(good))
    doc["num_frames"], doc["frames"] = 5, doc["frames"][:-1]
    doc["frames"][-1]["pair_homography"] = None
    bad("fewer.json", doc, expect="5")
    doc = json.loads(json.dumps(good))
    doc["frames"][2]["smoothed_path"] = [[1, 0, 0], [0, 1, 0]]
    bad("shape.json", doc, expect="smoothed_path at frame 2 has shape [2, 3], not [3, 3]")
    text = json.dumps(good).replace('"smoothed_path": [[1.0', '"smoothed_path": [[NaN', 1)
    bad("nan.json", text=text, expect="non-finite")
    doc = json.loads(json.dumps(good))
    doc["frames"][1]["smothed_path"] = doc["frames"][1].pop("smoothed_path")
    bad("typo.json", doc, expect="unknown keys ['smothed_path']")
    bad("cut.json", text=(tmp_path / "m.json").read_text()[:200], expect="not a readable motion file")
    lines = (tmp_path / "m.csv").read_text().splitlines()
    bad("short.csv", text="\n".join(lines[:-1]) + "\n", expect="num_frames is 6 but the file has 5 rows")
    bad("nan.csv", text="\n".join(lines[:-1] + [lines[-1].replace("1.0", "nan", 1)]) + "\n",
        expect="non-finite")
    bad("version.csv", text="\n".join(ln.replace("# version: 1", "# version: 2") for ln in lines),
        expect="unknown motion file version 2")
    bad("m.txt", text="x", expect="a motion file is .json, .csv, .npz")
    # Another clip's file: a different frame size.
    assert stabilize.main([str(tmp_path / "a"), "-o", str(tmp_path / "o"), "--path",
                           str(tmp_path / "m.json")] + args) == 0  # same size: fine
    other = _folder(tmp_path / "small", [f[:32, :48] for f in clip.frames[:6]])
    assert stabilize.main([str(other), "-o", str(tmp_path / "p"), "--path",
                           str(tmp_path / "m.json")] + args) == 2
    assert "made for 96x64 frames; the input is 48x32" in _one_error_line(capsys.readouterr().err)
    # An export name we cannot write is refused before any work.
    assert stabilize.main([str(src), "-o", str(tmp_path / "q"), "--export-motion",
                           str(tmp_path / "m.yaml")] + args) == 2
    assert "m.yaml" in _one_error_line(capsys.readouterr().err)
    assert not os.path.exists(tmp_path / "q")


def test_motion_files_for_another_grid_or_out_of_order_are_refused(tmp_path, clip, capsys):
    """Issue 44: dense flows of another working grid were stretched onto the frames, and
    swapped per-frame entries rendered the wrong frames; both are one-line errors now."""
    src = _folder(tmp_path / "in", clip.frames[:6])
    args = ["--estimator=sift_ransac"] + FAST
    for ext in (".npz", ".json", ".csv"):
        assert stabilize.main([str(src), "-o", str(tmp_path / f"a{ext[1:]}"), "--export-motion",
                               str(tmp_path / f"m{ext}")] + args) == 0
    capsys.readouterr()

    def refused(path, *expect):
        rc = stabilize.main([str(src), "-o", str(tmp_path / "o"), "--path", str(path)] + args)
        line = _one_error_line(capsys.readouterr().err)
        assert rc == 2 and str(path) in line, line
        for e in expect:
            assert e in line, line
        assert not (tmp_path / "o").exists()

    # 64x96 frames at the default work_scale 0.25: a 16x24 working grid (by hand).
    z = dict(np.load(tmp_path / "m.npz"))
    assert z["flows"].shape == (5, 16, 24, 2)
    for name, flows in (("narrow.npz", z["flows"][:, :, :21]),
                        ("tall.npz", np.concatenate([z["flows"], z["flows"][:, :2]], axis=1))):
        np.savez(tmp_path / name, **dict(z, flows=flows))
        refused(tmp_path / name, "flows has shape", f"{list(flows.shape)}", "expected [5, 16, 24, 2]")
    # version 0 (flows only) is checked the same way
    np.savez(tmp_path / "v0.npz", flows=z["flows"][:, :, :21], frame_size=np.array([64, 96]),
             fps=np.float64(30), estimator=np.str_("sift_ransac"))
    refused(tmp_path / "v0.npz", "flows has shape [5, 16, 21, 2], expected [5, 16, 24, 2]")
    np.savez(tmp_path / "v0ok.npz", flows=z["flows"], frame_size=np.array([64, 96]),
             fps=np.float64(30), estimator=np.str_("sift_ransac"))
    assert stabilize.main([str(src), "-o", str(tmp_path / "ok"), "--path",
                           str(tmp_path / "v0ok.npz")] + args) == 0

    good = json.loads((tmp_path / "m.json").read_text())
    doc = json.loads(json.dumps(good))
    doc["frames"][1], doc["frames"][2] = doc["frames"][2], doc["frames"][1]
    (tmp_path / "swap.json").write_text(json.dumps(doc))
    refused(tmp_path / "swap.json", "frame entry 1 has index 2, expected 1")
    doc = json.loads(json.dumps(good))
    doc["frames"][4]["index"] = 3  # repeated
    (tmp_path / "rep.json").write_text(json.dumps(doc))
    refused(tmp_path / "rep.json", "frame entry 4 has index 3, expected 4")
    doc = json.loads(json.dumps(good))
    del doc["frames"][3]["index"]
    (tmp_path / "noidx.json").write_text(json.dumps(doc))
    refused(tmp_path / "noidx.json", "frame entry 3 has no index")
    doc = json.loads(json.dumps(good))
    doc["frames"][0]["index"] = "0"
    (tmp_path / "stridx.json").write_text(json.dumps(doc))
    refused(tmp_path / "stridx.json", "frame entry 0 has index '0', not a whole number")

    lines = (tmp_path / "m.csv").read_text().splitlines()
    head = [ln for ln in lines if ln.startswith("#")]
    body = [ln for ln in lines if not ln.startswith("#")]
    rows = body[1:]
    rows[2], rows[3] = rows[3], rows[2]
    (tmp_path / "swap.csv").write_text("\n".join(head + body[:1] + rows) + "\n")
    refused(tmp_path / "swap.csv", "frame entry 2 has frame 3, expected 2")
    # the unedited files (in order) still render
    for ext in (".json", ".csv"):
        assert stabilize.main([str(src), "-o", str(tmp_path / f"r{ext[1:]}"), "--path",
                               str(tmp_path / f"m{ext}")] + args) == 0
