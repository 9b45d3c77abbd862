"""Real video I/O (PyAV: H.264, timestamps, audio, rotation) and the motion file
(--export-motion / --path, its source fingerprint) of ``python -m camflow_jax.stabilize``.
Oracles: PyAV's demuxer (packet bytes and timestamps), numpy products of the exported
homographies, the clip's ground truth, cv2.warpPerspective for an edited path, hashlib and
numpy block means of PyAV-decoded frames for the fingerprint, and np.rot90 / ffmpeg's own
autorotation / ffprobe for rotated videos."""

import hashlib
import json
import os
import shutil
import struct
import subprocess
from fractions import Fraction

import av
import cv2
import numpy as np
import pytest

from camflow_jax import stabilize
from camflow_jax.io import orientation
from camflow_jax.io import video as video_io
from camflow_jax.stabilization import clips, fingerprint, motion_file

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
        elif fmt.startswith("s32"):  # e.g. pcm_s24le: 24-bit samples in 32-bit words
            chunk = (chunk * (2**31 - 256)).astype(np.int32)
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


def test_pcm_audio_into_mp4_is_transcoded_to_aac(tmp_path, clip, capsys):
    """Issue 44: 24-bit 96 kHz PCM was copied into .mp4, where FFmpeg 5.1 decodes it as noise;
    it is transcoded to AAC with a warning (the sine stays a sine), and kept as PCM in .mov."""
    src = tmp_path / "in.mov"
    _video_with_audio(src, clip.frames[:8], [40 * i for i in range(8)], "pcm_s24le", 96000)
    assert _streams(src)["audio"]["codec"] == "pcm_s24le"
    assert stabilize.main([str(src), "-o", str(tmp_path / "o.mp4"), "--estimator=identity"] + FAST) == 0
    err = capsys.readouterr().err.strip()
    assert err == ("warning: the input's pcm_s24le audio (96000 Hz) was transcoded to AAC: PCM in .mp4 is "
                   "decoded as noise by common players (FFmpeg 5.1 among them); a .mov or .mkv output keeps "
                   "it as it is"), err
    assert json.loads((tmp_path / "o.json").read_text())["audio"].startswith("transcoded to aac")
    with av.open(str(tmp_path / "o.mp4")) as c:
        assert c.streams.audio[0].codec_context.name == "aac"
        rate = c.streams.audio[0].codec_context.sample_rate
        sound = np.concatenate([f.to_ndarray()[0] for f in c.decode(audio=0)])
    assert rate == 96000 and len(sound) / rate == pytest.approx(8 * 0.04, abs=0.03)
    spectrum = np.abs(np.fft.rfft(sound[2048:]))  # past the encoder's priming
    peak = np.fft.rfftfreq(len(sound) - 2048, 1 / rate)[np.argmax(spectrum)]
    assert abs(peak - 440) < 20 and np.max(np.abs(sound)) == pytest.approx(0.3, abs=0.05)
    assert stabilize.main([str(src), "-o", str(tmp_path / "k.mov"), "--estimator=identity"] + FAST) == 0
    assert capsys.readouterr().err == "" and _streams(tmp_path / "k.mov")["audio"]["codec"] == "pcm_s24le"


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


def _exported_motion(tmp_path, clip, args, second: str):
    """Six frames in a folder, stabilized with ``args`` twice, exporting the motion as
    ``m.json`` and as ``m<second>``; returns the folder and the JSON document."""
    src = _folder(tmp_path / "in", clip.frames[:6])
    for out, name in (("a", "m.json"), ("a2", "m" + second)):
        assert stabilize.main([str(src), "-o", str(tmp_path / out), "--export-motion",
                               str(tmp_path / name)] + args) == 0
    return src, json.loads((tmp_path / "m.json").read_text())


def test_bad_motion_files_are_one_line_errors(tmp_path, clip, capsys):
    args = ["--estimator=identity"] + FAST
    src, good = _exported_motion(tmp_path, clip, args, ".csv")
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
    note = capsys.readouterr().err.strip()  # written before fingerprints: said, not refused
    assert note.startswith("note: ") and "v0ok.npz has no source fingerprint" in note, note

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


def test_motion_files_that_would_render_black_frames_are_refused(tmp_path, clip, capsys):
    """Issue 44: a (nearly) singular smoothed path, a 1e6 px path edit and a 1e9 px pair motion
    rendered black frames with exit code 0; each is refused before any output, naming the file,
    the field and the frame. A small edit still renders."""
    args = ["--estimator=identity", "--crop", "none"] + FAST
    src, good = _exported_motion(tmp_path, clip, args, ".npz")
    capsys.readouterr()

    def render(name, doc):
        (tmp_path / name).write_text(json.dumps(doc))
        rc = stabilize.main([str(src), "-o", str(tmp_path / "o"), "--path", str(tmp_path / name)] + args)
        return rc, capsys.readouterr().err

    def refused(name, doc, *expect):
        rc, err = render(name, doc)
        line = _one_error_line(err)
        assert rc == 2 and f"{tmp_path / name}: " in line, line
        for e in expect:
            assert e in line, line
        assert not (tmp_path / "o").exists()

    def edited(t, f):
        doc = json.loads(json.dumps(good))
        doc["frames"][t]["smoothed_path"] = f(np.asarray(doc["frames"][t]["smoothed_path"])).tolist()
        return doc

    refused("singular.json", edited(3, lambda s: np.diag([1e-5, 1e-5, 1.0]) @ s),
            "smoothed_path at frame 3 is degenerate", "area change", "would render black")
    moved = np.eye(3)
    moved[0, 2] = 1e6
    refused("far.json", edited(2, lambda s: moved @ s),
            "smoothed_path at frame 2 would show the picture in only 0% of the output frame",
            "at least 50% needed", "1e+06 px")
    doc = json.loads(json.dumps(good))
    doc["frames"][4]["pair_homography"][0][2] = 1e9
    refused("pair.json", doc, "pair_homography at frame 4 moves the frame by 1e+09 px, more than "
            "its diagonal (115 px)")
    z = dict(np.load(tmp_path / "m.npz"))
    flows = z["flows"].copy()
    flows[1, ..., 1] = 1e9
    np.savez(tmp_path / "flows.npz", **dict(z, flows=flows))
    rc = stabilize.main([str(src), "-o", str(tmp_path / "o"), "--path", str(tmp_path / "flows.npz")] + args)
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "flows.npz: flows at frame 1 move a pixel by 1e+09 working px" in line, line
    # A small edit (4 px, as test_an_edited_path_renders_as_warp_perspective_predicts) renders.
    moved[0, 2] = 4.0
    rc, err = render("small.json", edited(2, lambda s: moved @ s))
    assert rc == 0, err
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["path"]["frames_moved"] == 1 and report["unstabilized_frames"] == []


# ----------------------------------------------------------------------------- fingerprint
def _h264(path, frames, fps=25, rotation=None, hflip=False, vflip=False, codec=None, pix_fmt="yuv420p"):
    """A constant-rate H.264 (MPEG-4 where there is no libx264; or ``codec``) video written with
    PyAV; ``rotation``: a display matrix turning the picture that many degrees counter-clockwise
    (PyAV's and ffprobe's sign), mirrored by ``hflip`` / ``vflip``."""
    out = av.open(str(path), "w")
    v = out.add_stream(codec or ("libx264" if "libx264" in av.codecs_available else "mpeg4"), rate=fps)
    v.width, v.height, v.pix_fmt = frames.shape[2], frames.shape[1], pix_fmt
    if rotation is not None:
        v.set_display_rotation(rotation, hflip=hflip, vflip=vflip)
    for f in frames:
        for pk in v.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")):
            out.mux(pk)
    for pk in v.encode(None):
        out.mux(pk)
    out.close()
    return path


def _decoded(path):
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _times_sha256(path):
    """By hand: the sorted packet times relative to the first, whole microseconds, int64 LE."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        pts = sorted(p.pts for p in c.demux(s) if p.size)
        base = Fraction(s.time_base)
    us = [round((p - pts[0]) * base * 10 ** 6) for p in pts]
    return hashlib.sha256(b"".join(struct.pack("<q", u) for u in us)).hexdigest()


def _block_thumbnail(frame):
    """16x16 Rec. 601 grey block means (sides divisible by 16), float."""
    g = frame.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    h, w = g.shape
    return g.reshape(16, h // 16, 16, w // 16).mean(axis=(1, 3))


def _err_lines(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [ln for ln in err.splitlines() if ln.strip()]


def test_motion_files_are_bound_to_their_video(tmp_path, clip, capsys):
    """Issue 44: the motion of another video of the same size and length was applied with rc 0
    and no warning. Each format carries the exported video's fingerprint (checked here against
    hashlib / numpy on PyAV's own decoding and demuxing); the same video is accepted, others
    are one-line refusals (exit 2, nothing written) unless --ignore-fingerprint."""
    n = 10
    a = clip.frames[:n]
    b = clips.planar_clip(n, 64, 96, seed=7).frames
    # Intra-only (Motion-JPEG): a frame's bytes do not depend on the frames after it. With H.264
    # the rate control looks ahead, so c.mp4's frame 0 came out up to 4-5 grey levels (in the
    # thumbnail) from a.mp4's, at the tolerance, and the test failed on some machines.
    intra = dict(codec="mjpeg", pix_fmt="yuvj420p")
    _h264(tmp_path / "a.mp4", a, **intra)
    _h264(tmp_path / "b.mp4", b, **intra)                           # another video
    _h264(tmp_path / "slow.mp4", a, fps=20, **intra)                # the pictures, other times
    _h264(tmp_path / "c.mp4", np.concatenate([a[:5], b[5:]]), **intra)  # frame 0 and times alike
    _h264(tmp_path / "long.mp4", clip.frames[:n + 2], **intra)      # longer
    frames = _decoded(tmp_path / "a.mp4")
    args = ["--estimator=identity"] + FAST
    for ext in (".json", ".csv", ".npz"):
        m = tmp_path / f"m{ext}"
        assert stabilize.main([str(tmp_path / "a.mp4"), "-o", str(tmp_path / f"e{ext[1:]}.mp4"),
                               "--export-motion", str(m)] + args) == 0
        assert stabilize.main([str(tmp_path / "long.mp4"), "-o", str(tmp_path / f"l{ext[1:]}.mp4"),
                               "--export-motion", str(tmp_path / f"mlong{ext}")] + args) == 0
        fp = motion_file.read(str(m)).source
        assert fp["name"] == "a.mp4" and fp["scheme"] == 1
        assert fp["times_sha256"] == _times_sha256(tmp_path / "a.mp4")
        assert fp["duration_s"] == pytest.approx((n - 1) / 25)
        assert [f["index"] for f in fp["frames"]] == list(range(n))  # every frame of a short clip (issue 63)
        for f in fp["frames"]:
            assert f["sha256"] == hashlib.sha256(frames[f["index"]].tobytes()).hexdigest()
            thumb = np.frombuffer(bytes.fromhex(f["thumbnail"]), np.uint8).reshape(16, 16)
            assert np.abs(thumb - _block_thumbnail(frames[f["index"]])).max() <= 0.51
        capsys.readouterr()
        # the same video: accepted without a word
        assert stabilize.main([str(tmp_path / "a.mp4"), "-o", str(tmp_path / "same.mp4"), "-y",
                               "--path", str(m)] + args) == 0
        assert _err_lines(capsys) == []
        for other, expect in (("b.mp4", "frame 0 shows another picture"),
                              ("slow.mp4", "the frame times differ (over 0.450 s here, 0.360 s"),
                              ("c.mp4", "frames 5, 6, 7, 8, 9 show other pictures")):
            rc = stabilize.main([str(tmp_path / other), "-o", str(tmp_path / "o.mp4"), "--path",
                                 str(m)] + args)
            line = _one_error_line(capsys.readouterr().err)
            assert rc == 2 and f"{m} was exported from another video (a.mp4), not " in line, line
            assert expect in line and line.endswith("Pass --ignore-fingerprint to apply it anyway")
            assert not (tmp_path / "o.mp4").exists() and not (tmp_path / "o.json").exists()
        # another length: the frame-count rule (no flag overrides it) speaks first
        rc = stabilize.main([str(tmp_path / "b.mp4"), "-o", str(tmp_path / "o.mp4"), "--path",
                             str(tmp_path / f"mlong{ext}"), "--ignore-fingerprint"] + args)
        line = _one_error_line(capsys.readouterr().err)
        assert rc == 2 and "the input has 10 frames but the motion loaded from" in line, line
        assert "covers 12" in line and "fingerprint" not in line
        rc = stabilize.main([str(tmp_path / "b.mp4"), "-o", str(tmp_path / "o.mp4"), "--path",
                             str(tmp_path / f"mlong{ext}")] + args)
        assert rc == 2 and _one_error_line(capsys.readouterr().err) == line
        # the override: applied, with one warning line naming what differs
        assert stabilize.main([str(tmp_path / "b.mp4"), "-o", str(tmp_path / "forced.mp4"), "-y",
                               "--path", str(m), "--ignore-fingerprint"] + args) == 0
        lines = _err_lines(capsys)
        assert len(lines) == 1 and lines[0].startswith("warning: ") and "frames 0, 1, 2, 3, 4, 5, 6, 7 and 2 more" in lines[0]
        assert lines[0].endswith("applied anyway (--ignore-fingerprint)"), lines
        report = json.loads((tmp_path / "forced.json").read_text())
        assert report["warnings"] == [lines[0][len("warning: "):]]


def _without_fingerprint(src, dst):
    """A copy of a motion file as versions before the fingerprint wrote it."""
    ext = src.suffix
    if ext == ".json":
        doc = json.loads(src.read_text())
        del doc["source"]
        dst.write_text(json.dumps(doc))
    elif ext == ".csv":
        lines = src.read_text().splitlines(keepends=True)
        assert sum(ln.startswith("# source: ") for ln in lines) == 1
        dst.write_text("".join(ln for ln in lines if not ln.startswith("# source: ")))
    else:
        z = dict(np.load(src))
        meta = json.loads(str(z["meta"]))
        del meta["source"]
        np.savez(dst, **dict(z, meta=np.str_(json.dumps(meta))))


def test_motion_files_without_a_fingerprint_still_work(tmp_path, clip, capsys):
    """Files written before the fingerprint (or by hand) are applied as before, to any video of
    their size and length, with one note saying they were not checked; a damaged fingerprint
    is a one-line error."""
    _h264(tmp_path / "a.mp4", clip.frames[:8])
    _h264(tmp_path / "b.mp4", clips.planar_clip(8, 64, 96, seed=7).frames)
    args = ["--estimator=identity"] + FAST
    for ext in (".json", ".csv", ".npz"):
        assert stabilize.main([str(tmp_path / "a.mp4"), "-o", str(tmp_path / f"e{ext[1:]}.mp4"),
                               "--export-motion", str(tmp_path / f"m{ext}")] + args) == 0
        old = tmp_path / f"old{ext}"
        _without_fingerprint(tmp_path / f"m{ext}", old)
        assert motion_file.read(str(old)).source is None
        capsys.readouterr()
        for video in ("a.mp4", "b.mp4"):
            assert stabilize.main([str(tmp_path / video), "-o", str(tmp_path / "o.mp4"), "-y",
                                   "--path", str(old)] + args) == 0
            lines = _err_lines(capsys)
            assert len(lines) == 1 and lines[0] == (
                f"note: {old} has no source fingerprint (written before camflow_jax recorded one, "
                "or by hand): it is not checked against the input; only its frame size and count are")
    doc = json.loads((tmp_path / "m.json").read_text())
    doc["source"]["frames"][1]["sha256"] = "abc"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    assert stabilize.main([str(tmp_path / "a.mp4"), "-o", str(tmp_path / "p.mp4"), "--path",
                           str(tmp_path / "bad.json")] + args) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "bad.json: source (the fingerprint of the exported video): frames[1] sha256 must be" in line
    assert not (tmp_path / "p.mp4").exists()


def test_a_fingerprint_allows_decoder_noise_not_another_picture(tmp_path, clip, capsys):
    """Pictures are compared by 16x16 grey thumbnails within 4 levels, not by their bytes (which
    differ between decoders for 10-bit video; module doc of fingerprint): +-1 grey level of
    noise on every pixel is the same video (with a note), a 2-pixel shift of the picture is not."""
    frames = clip.frames[:8]
    rng = np.random.default_rng(0)
    noisy = np.clip(frames.astype(int) + rng.integers(-1, 2, frames.shape), 0, 255).astype(np.uint8)
    shifted = np.roll(frames, 2, axis=2)
    assert max(np.abs(_block_thumbnail(x) - _block_thumbnail(y)).max()
               for x, y in zip(frames, noisy)) < 1.5
    assert min(np.abs(_block_thumbnail(x) - _block_thumbnail(y)).max()
               for x, y in zip(frames, shifted)) > 10
    args = ["--estimator=identity"] + FAST
    src = _folder(tmp_path / "in", frames)
    assert stabilize.main([str(src), "-o", str(tmp_path / "a"), "--export-motion",
                           str(tmp_path / "m.json")] + args) == 0
    fp = motion_file.read(str(tmp_path / "m.json")).source
    assert fp["times_sha256"] is None and fp["duration_s"] is None  # frames have no times
    capsys.readouterr()
    assert stabilize.main([str(_folder(tmp_path / "noisy", noisy)), "-o", str(tmp_path / "b"),
                           "--path", str(tmp_path / "m.json")] + args) == 0
    lines = _err_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("note: ") and "decoded bytes of frame 0, 1, 2, 3, 4, 5, 6, 7 " \
        "differ from the exported run's (another decoder, or a re-encode), the pictures match" in lines[0]
    assert stabilize.main([str(_folder(tmp_path / "shifted", shifted)), "-o", str(tmp_path / "c"),
                           "--path", str(tmp_path / "m.json")] + args) == 2
    assert "frame 0 shows another picture" in _one_error_line(capsys.readouterr().err)


def test_ten_bit_video_decodes_to_other_bytes_but_the_same_thumbnails(tmp_path, clip):
    """Why the fingerprint compares thumbnails, not bytes: a 10-bit video (phones record them)
    converted to 8-bit RGB by two of PyAV's own conversions (bilinear, bicubic) gives other
    bytes, while the thumbnails stay well within the tolerance; a Check built on one decoding
    accepts the other, with a note."""
    path = tmp_path / "ten.mkv"
    try:
        _h264(path, clip.frames[:6], codec="libx264", pix_fmt="yuv420p10le")
    except (av.error.FFmpegError, ValueError) as e:
        pytest.skip(f"this PyAV cannot write 10-bit H.264: {e}")
    with av.open(str(path)) as c:
        pairs = [(f.to_ndarray(format="rgb24"), f.to_ndarray(format="rgb24", interpolation="BICUBIC"))
                 for f in c.decode(video=0)]
    assert any(a.tobytes() != b.tobytes() for a, b in pairs)
    worst = max(np.abs(_block_thumbnail(a) - _block_thumbnail(b)).max() for a, b in pairs)
    assert worst < fingerprint.TOLERANCE / 2, worst
    idx = fingerprint.sample_indices(len(pairs))
    fp = fingerprint.build("ten.mkv", {"times_sha256": None, "duration_s": None},
                           {i: fingerprint.frame_signature(pairs[i][0]) for i in idx})
    check = fingerprint.Check(fp, "m.json", "ten.mkv", len(pairs))
    check.start({"times_sha256": None}, pairs[0][1], len(pairs))
    for t, (_, b) in enumerate(pairs):
        check.frame(t, b)
    check.finish()  # no error
    assert check.warnings == [] and len(check.notes) == 1 and "the pictures match" in check.notes[0]


# ----------------------------------------------------------------------------- rotation
#: Whether this PyAV can write a display matrix (VideoStream.set_display_rotation, recent PyAV).
needs_display_matrix = pytest.mark.skipif(
    not hasattr(av.video.stream.VideoStream, "set_display_rotation"),
    reason="this PyAV cannot write a display matrix (VideoStream.set_display_rotation)")


def _ffprobe_rotation(path):
    """The display-matrix rotation ffprobe reports for the first video stream (0 without one)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream_side_data=rotation", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    for stream in json.loads(out).get("streams", []):
        for sd in stream.get("side_data_list", []):
            if "rotation" in sd:
                return int(sd["rotation"])
    return 0


@needs_display_matrix
@pytest.mark.parametrize("rotation", [90, 270])
def test_rotated_videos_are_stabilized_upright(tmp_path, clip, capsys, rotation):
    """Issue 44: a phone video with a 90-degree display matrix was stabilized into an output with
    none, which played sideways. Its frames are now read upright (np.rot90 of PyAV's decoded
    frames, and what ffmpeg's own autorotation gives), the stabilizer works on that picture, and
    the output is written upright with no display matrix (read back by PyAV and ffprobe)."""
    frames = clip.frames[:8]                          # 96 wide, 64 high coded
    src = _h264(tmp_path / "phone.mp4", frames, rotation=rotation)
    with av.open(str(src)) as c:
        assert next(c.decode(video=0)).rotation == (90 if rotation == 90 else -90)  # the input
    coded = np.stack(_decoded(src))
    want = np.rot90(coded, rotation // 90, axes=(1, 2))  # counter-clockwise quarter turns
    assert want.shape[1:3] == (96, 64)
    if shutil.which("ffmpeg"):  # ffmpeg applies the display matrix itself when it decodes
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(src), "-f", "rawvideo", "-pix_fmt",
                              "rgb24", "-"], capture_output=True, check=True).stdout
        np.testing.assert_array_equal(np.frombuffer(raw, np.uint8).reshape(want.shape), want)
    args = ["--estimator=identity", "--crop", "none"] + FAST
    # a frame folder (lossless): identity motion and no zoom render the upright input exactly
    assert stabilize.main([str(src), "-o", str(tmp_path / "frames"), "--export-motion",
                           str(tmp_path / "m.json")] + args) == 0
    note = _err_lines(capsys)
    angle = "+90" if rotation == 90 else "-90"
    assert note == [f"note: {src}: its display matrix turns the 96x64 coded frames by {angle} degrees "
                    "(ffprobe's rotation): they are read upright (64x96), as players show them, and "
                    "the output is written upright with no display matrix"]
    np.testing.assert_array_equal(_read(tmp_path / "frames"), want)
    assert motion_file.read(str(tmp_path / "m.json")).frame_size == (96, 64)
    report = json.loads((tmp_path / "frames.json").read_text())
    assert report["frame_size"] == [96, 64] and report["notes"] == [note[0][len("note: "):]]
    # a video: upright, no display matrix, the same picture up to the codec
    assert stabilize.main([str(src), "-o", str(tmp_path / "out.mp4")] + args) == 0
    with av.open(str(tmp_path / "out.mp4")) as c:
        first = next(c.decode(video=0))
        assert (first.width, first.height) == (64, 96) and first.rotation == 0
        assert not any(str(sd.type).endswith("DISPLAYMATRIX") for sd in first.side_data)
    out = np.stack(_decoded(tmp_path / "out.mp4")).astype(int)
    right, wrong = np.abs(out - want).mean(), np.abs(out - np.rot90(want, 2, axes=(1, 2))).mean()
    assert right < 6 and wrong > 5 * right, (right, wrong)  # H.264 of 64x96 frames vs half a turn
    if shutil.which("ffprobe"):
        assert _ffprobe_rotation(src) == (90 if rotation == 90 else -90)
        assert _ffprobe_rotation(tmp_path / "out.mp4") == 0
    # the motion file exported from the rotated video applies to it again
    assert stabilize.main([str(src), "-o", str(tmp_path / "again"), "--path",
                           str(tmp_path / "m.json")] + args) == 0
    np.testing.assert_array_equal(_read(tmp_path / "again"), want)


@needs_display_matrix
@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg (the oracle) is not installed")
def test_mirrored_videos_are_read_as_ffmpeg_shows_them(tmp_path, clip):
    """Display matrices with a mirror (which frame.rotation alone does not tell apart from a
    half turn): the frames read are the ones ffmpeg's own autorotation gives."""
    for rotation, hflip, vflip in ((0, True, False), (0, False, True), (90, True, False),
                                   (270, False, True), (180, False, False)):
        path = tmp_path / f"m{rotation}{int(hflip)}{int(vflip)}.mp4"
        _h264(path, clip.frames[:2], rotation=rotation, hflip=hflip, vflip=vflip)
        source = video_io.FrameSource(str(path))
        assert source.rotation_note is not None  # the matrix is there
        got = np.stack(list(source))
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt",
                              "rgb24", "-"], capture_output=True, check=True).stdout
        np.testing.assert_array_equal(np.frombuffer(raw, np.uint8).reshape(got.shape), got,
                                      err_msg=f"{rotation} {hflip} {vflip}")


@needs_display_matrix
def test_older_pyav_rotation_sources_read_as_the_frame_matrix(tmp_path, clip):
    """PyAV 12-13 gave the rotation as stream.side_data['DISPLAYMATRIX'] (ffprobe's sign), older
    FFmpeg the 'rotate' tag (clockwise): both give the matrix FFmpeg attaches to the frames."""
    from types import SimpleNamespace as NS
    for ccw in (90, -90, 180):
        src = _h264(tmp_path / f"r{ccw}.mp4", clip.frames[:2], rotation=ccw)
        with av.open(str(src)) as c:
            frame = next(c.decode(video=0))
        real = orientation.display_matrix(frame, NS(metadata={}))
        assert real is not None
        bare = NS(side_data=())  # a frame without side data
        side = orientation.display_matrix(bare, NS(side_data={"DISPLAYMATRIX": float(ccw)}, metadata={}))
        tag = orientation.display_matrix(bare, NS(metadata={"rotate": str(-ccw % 360)}))
        np.testing.assert_allclose(side, real, atol=1e-9)
        np.testing.assert_allclose(tag, real, atol=1e-9)
    assert orientation.display_matrix(NS(side_data=()), NS(metadata={"rotate": "0"})) is None


@needs_display_matrix
def test_a_display_matrix_that_is_no_quarter_turn_is_refused(tmp_path, clip, capsys):
    src = _h264(tmp_path / "tilted.mp4", clip.frames[:4], rotation=45)
    assert stabilize.main([str(src), "-o", str(tmp_path / "o.mp4"), "--estimator=identity"]
                          + FAST) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{src}: its display matrix turns the picture by 45.0 degrees, not a multiple of 90" in line
    assert not (tmp_path / "o.mp4").exists()
