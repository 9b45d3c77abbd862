"""The real-image experiments (tools.bench.real, CLI tools/eval_real.py) against
independent oracles on synthetic data built here (CI has no opencv-doc): the basis-span and
homography oracles, the disparity -> flow sign (cv2.remap), the disparity resize / fill / forward
projection, the shake's ground truth, the CamFlow rows (a stub estimator), a tiny end-to-end
run, and the missing-data exit."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from camflow_jax import bases
from camflow_jax.estimators import registry
from camflow_jax.estimators.registry import Motion
from camflow_jax.evaluation import metrics
from helpers import ROOT
from tools.bench import opencv_doc, real


def _cli(*args):
    """Runs the command-line layer as users do: (exit status, stdout, stderr)."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "eval_real.py"), *args],
                       capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr



def _texture(h, w, seed=0):
    rng = np.random.default_rng(seed)
    img = cv2.resize(rng.uniform(0, 255, (h // 4 + 1, w // 4 + 1, 3)).astype(np.float32), (w, h),
                     interpolation=cv2.INTER_CUBIC)
    return np.clip(img, 0, 255).astype(np.uint8)


def _homography_flow(H, h, w):
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    den = H[2, 0] * xs + H[2, 1] * ys + H[2, 2]
    u = (H[0, 0] * xs + H[0, 1] * ys + H[0, 2]) / den - xs
    v = (H[1, 0] * xs + H[1, 1] * ys + H[1, 2]) / den - ys
    return np.stack([u, v], -1)


def _stereo_pair(h=60, w=96, d_bg=4.0, d_fg=9.0):
    """Left texture, a right view rendered from it exactly (integer disparities: left pixel x
    lands on right pixel x - d) and the left disparity: a background plane and a nearer square."""
    big = _texture(h, w + 40, seed=1).astype(np.float32)
    disp = np.full((h, w), d_bg, np.float32)
    disp[20:40, 40:60] = d_fg
    left = big[:, 20:20 + w]
    # right pixel x_r shows the left point x with x - d(x) = x_r; render by forward splatting
    # points of the left view (nearer wins), sampled from the wider texture.
    right = np.zeros_like(left)
    zbuf = np.full((h, w), -np.inf)
    for y in range(h):
        for x in range(w):
            xr = int(x - disp[y, x])
            if 0 <= xr < w and disp[y, x] > zbuf[y, xr]:
                zbuf[y, xr] = disp[y, x]
                right[y, xr] = left[y, x]
    holes = ~np.isfinite(zbuf)
    right[holes] = big[:, 20:20 + w][holes]
    valid = np.ones((h, w), bool)
    valid[:, :12] = False  # points that leave the right image
    valid[0, 0] = False
    return left.astype(np.uint8), right.astype(np.uint8), disp.astype(np.float32), valid


# ----------------------------------------------------------------------------- oracles
def test_h12_oracle_reproduces_flows_in_its_span():
    h, w = 40, 64
    B = np.asarray(bases.homography_bases(h, w), np.float64)
    coeffs = np.random.default_rng(0).normal(0, 3, 12)
    flow = np.tensordot(coeffs, B, axes=1)
    mask = np.random.default_rng(1).uniform(size=(h, w)) > 0.3
    garbage = np.where(mask[..., None], flow, 1e3)  # invalid pixels must not matter
    fit = real.fit_span(garbage, mask, real.homography12_bases(h, w))
    assert metrics.epe_valid(fit, flow, np.ones((h, w), bool)) < 1e-3
    # An affine flow (x, y monomials) is in the span too, written independently of the bases.
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    aff = np.stack([0.5 + 0.01 * xs - 0.02 * ys, -1.0 + 0.03 * xs + 0.005 * ys], -1)
    assert metrics.epe_valid(real.fit_span(aff, mask, real.homography12_bases(h, w)), aff, mask) < 1e-3


def test_homography_oracles_on_a_pure_homography_flow():
    h, w = 48, 80
    H = np.array([[1.02, 0.01, 2.0], [-0.015, 0.99, -1.5], [1e-4, -5e-5, 1.0]])
    flow = _homography_flow(H, h, w)
    mask = np.ones((h, w), bool)
    mask[:10] = False
    fit, Hfit = real.fit_single_homography(np.where(mask[..., None], flow, 50.0), mask)
    assert metrics.epe_valid(fit, flow, np.ones((h, w), bool)) < 5e-3
    np.testing.assert_allclose(Hfit, H, atol=1e-3)
    # The 12 second-order bases approximate it (not exactly: perspective is not quadratic) far
    # better than identity does.
    e12 = metrics.epe_valid(real.fit_span(flow, mask, real.homography12_bases(h, w)), flow, mask)
    assert e12 < 0.05 * metrics.epe_valid(np.zeros_like(flow), flow, mask)


# ----------------------------------------------------------------------------- stereo pieces
def test_disparity_flow_sign_warps_right_onto_left():
    left, right, disp, valid = _stereo_pair()
    flow = real.disparity_to_flow(disp, valid)
    assert np.all(flow[valid][:, 0] < 0) and np.all(flow[..., 1] == 0) and np.all(flow[~valid] == 0)
    # independent warp: sample the right image at x - d with cv2.remap
    h, w = disp.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    m = valid.copy()
    m[20:40, 30:62] = False  # occlusion around the square: not photo-consistent
    warped = cv2.remap(right.astype(np.float32), xs - disp, ys, cv2.INTER_LINEAR)
    err_ok = np.abs(warped - left)[m].mean()
    warped_bad = cv2.remap(right.astype(np.float32), xs + disp, ys, cv2.INTER_LINEAR)
    assert err_ok < 4.0 and np.abs(warped_bad - left)[m].mean() > 4 * err_ok
    assert real.photometric_error(left, right, flow, m) == pytest.approx(err_ok, rel=0.1, abs=0.5)
    scan = real.disparity_scale_scan(left, right, disp, m)
    assert scan["best"]["scale"] == 1.0 and scan["best"]["sign"] == "-d"
    assert abs(scan["best"]["offset"]) <= 0.25


def test_resize_pair_scales_the_flow_with_the_x_axis():
    H, W = 90, 160
    img = _texture(H, W)
    disp = np.full((H, W), 8.0, np.float32)
    valid = np.ones((H, W), bool)
    valid[40:50, 60:80] = False
    L, R, d, v, (sx, sy) = real.resize_pair(img, img, disp, valid, 80)
    assert L.shape == (45, 80, 3) and d.shape == (45, 80)
    assert sx == pytest.approx(0.5) and sy == pytest.approx(0.5)
    np.testing.assert_allclose(d[v], 4.0, atol=1e-5)
    # a working pixel touching an invalid full-size pixel is invalid; far ones are valid
    assert not v[20:25, 30:40].any() and v[:15].all()


def test_fill_rows_takes_the_farther_neighbour_and_projection_moves_layers():
    d = np.array([[10, 0, 0, 4, 4], [0, 6, 0, 0, 0], [0, 0, 0, 0, 0]], np.float32)
    f = real.fill_rows(d, d > 0)
    np.testing.assert_array_equal(f[0], [10, 4, 4, 4, 4])
    np.testing.assert_array_equal(f[1], [6, 6, 6, 6, 6])
    np.testing.assert_array_equal(f[2], np.median([10, 4, 4, 6]))
    # background disparity 2, a near block (5) at x = 10..14: in the right view the block sits at
    # x = 5..9 and covers the background that lands there.
    disp = np.full((3, 30), 2.0, np.float32)
    disp[:, 10:15] = 5.0
    dr, ok = real.forward_project_disparity(disp, np.ones_like(disp, bool))
    np.testing.assert_array_equal(dr[0, 5:10], 5.0)
    np.testing.assert_array_equal(dr[0, 15:28], 2.0)
    assert not ok[0, 28:].any()  # nothing lands right of x = W - 1 - 2


def _stereo_folder(tmp_path):
    left, right, disp, valid = _stereo_pair()
    data = tmp_path / "data"
    data.mkdir()
    for name, img in (("aloeL.jpg", left), ("aloeR.jpg", right)):
        cv2.imwrite(str(data / name), cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 98])
    cv2.imwrite(str(data / "aloeGT.png"), np.where(valid, np.rint(disp), 0).astype(np.uint8))
    return data


def test_camflow_rows_pass_depth_and_intrinsics(tmp_path):
    """A stub estimator records its inputs; the rows follow what it returns."""
    data = _stereo_folder(tmp_path)
    calls = []

    class Stub:
        predictor = SimpleNamespace(num_depth=12)

        def __call__(self, a, b, *, depth1=None, depth2=None, intrinsics=None):
            calls.append((a.shape, depth1, depth2, intrinsics))
            d = np.zeros(a.shape[:2], np.float32) if depth1 is None else 1.0 / depth1
            return Motion(np.stack([-d, np.zeros_like(d)], -1))

    class NoDepth(Stub):
        predictor = SimpleNamespace(num_depth=0)

    res = real.stereo_experiment(data, 48, ["camflow", "camflow_net", "camflow_net:other"],
                                 {"camflow": Stub(), "camflow_net": Stub(), "camflow_net:other": NoDepth()},
                                 (0.5,), log=lambda *a: None)
    rows = {r["method"]: r for r in res["rows"]}
    assert list(rows) == ["camflow (no depth)", "camflow (depth)", "camflow_net (no depth)",
                          "camflow_net (depth)", "camflow_net (depth, fx x0.5)",
                          "camflow_net:other (no depth)", "camflow_net:other (depth)"]
    h, w = 30, 48
    assert calls[0] == ((h, w, 3), None, None, None)
    _, d1, d2, K = calls[1]
    np.testing.assert_allclose(K, [w, w, (w - 1) / 2, (h - 1) / 2])
    np.testing.assert_allclose(calls[4][3][:2], [w / 2, w / 2])
    assert np.all(np.isfinite(d1)) and np.all(d1 > 0) and np.all(np.isfinite(d2))
    # the stub returns (-1/depth1, 0) = the GT flow on valid pixels: EPE ~ 0
    assert rows["camflow (depth)"]["epe"] < 1e-4 and rows["camflow_net (depth)"]["epe"] < 1e-4
    assert rows["camflow (no depth)"]["epe"] == pytest.approx(res["info"]["gt_magnitude_mean"], rel=1e-4)
    # a model without depth bases: its depth row is skipped with the reason, not computed
    assert rows["camflow_net:other (depth)"]["epe"] is None
    assert "no depth bases" in rows["camflow_net:other (depth)"]["note"]
    # a skipped estimator (no model) is a row with the reason
    res = real.stereo_experiment(data, 48, ["camflow"], {"camflow": "skipped: no model"}, log=lambda *a: None)
    assert res["rows"] == [{"method": "camflow (no depth)", "epe": None, "photometric": None,
                            "note": "skipped: no model"}]


# ----------------------------------------------------------------------------- video pieces
def test_shake_ground_truth_matches_the_rendered_frames():
    H, W, m = 120, 160, 20
    frame = np.zeros((H, W, 3), np.uint8)
    frame[58:63, 78:83] = 255  # a dot at (80, 60) full pixels = (60, 40) crop pixels
    shaken, J = real.shake_frames([frame] * 6, seed=3, jitter=0.02, jitter_deg=1.0, margin=m)
    assert shaken[0].shape == (H - 2 * m, W - 2 * m, 3) and J.shape == (6, 3, 3)
    for img, Jt in zip(shaken, J):
        g = img[..., 0].astype(np.float64)
        ys, xs = np.mgrid[0:g.shape[0], 0:g.shape[1]]
        c = np.array([(g * xs).sum(), (g * ys).sum()]) / g.sum()
        p = Jt @ np.array([60.0, 40.0, 1.0])
        np.testing.assert_allclose(c, p[:2] / p[2], atol=0.2)
    # flow on a coarse grid, in full pixels: a pure translation is constant
    T = np.array([[1.0, 0, 3.0], [0, 1.0, -2.0], [0, 0, 1.0]])
    np.testing.assert_allclose(real.homography_flow_on_grid(T, (H, W), (30, 40)), np.broadcast_to([3.0, -2.0], (30, 40, 2)),
                               atol=1e-9)


def test_end_to_end_on_a_fake_data_folder(tmp_path):
    data = _stereo_folder(tmp_path)
    # a static "video": the same textured frame 50 times (2 s at 25 fps: two bins of the 1 Hz
    # band, so stability is defined; lossless-ish MJPG at high quality)
    frame = cv2.cvtColor(_texture(144, 192, seed=5), cv2.COLOR_RGB2BGR)
    vw = cv2.VideoWriter(str(data / "vtest.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 25, (192, 144))
    assert vw.isOpened()
    for _ in range(50):
        vw.write(frame)
    vw.release()
    out = tmp_path / "out"
    rc, _, err = _cli("--data", str(data), "--out", str(out), "--frames", "50", "--width", "96",
                      "--methods", "identity,oracle_homography,oracle_h12", "--estimators", "dis",
                      "--margin", "16", "--image-metrics")
    assert rc == 0, err
    res = json.loads((out / "results.json").read_text())
    rows = {r["method"]: r for r in res["stereo"]["rows"]}
    assert rows["identity"]["epe"] == pytest.approx(res["stereo"]["info"]["gt_magnitude_mean"], rel=1e-5)
    assert rows["oracle_h12"]["epe"] < rows["identity"]["epe"]
    assert rows["oracle_homography"]["epe"] < rows["identity"]["epe"]
    v = {(r["video"], r["estimator"]): r for r in res["video"]["rows"]}
    static, shake = v[("static", "dis")], v[("shake", "dis")]
    assert static["residual_mean_px"] < 0.2 and static["flow_mag_px"] < 0.2
    assert shake["hf_in_px"] > 1.0 and shake["hf_out_px"] < shake["hf_in_px"]
    assert 0 < shake["cropping"] <= 1 and 0 < shake["stability"] <= 1
    assert "| static | dis |" in (out / "results.md").read_text()


def test_missing_data_and_bad_arguments_exit_2_with_one_line(tmp_path):
    rc, _, err = _cli("--data", str(tmp_path / "nowhere"), "--out", "")
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: {tmp_path / 'nowhere'}: {opencv_doc.MISSING_DATA}")
    assert opencv_doc.MISSING_DATA == "needs Debian's opencv-doc package: apt-get install opencv-doc"
    # the default folder: the same line, exactly, when it is missing
    if not Path(opencv_doc.OPENCV_DOC, "aloeL.jpg").is_file():
        rc, _, err = _cli("--out", "")
        assert rc == 2 and err.strip() == f"error: {opencv_doc.OPENCV_DOC}: {opencv_doc.MISSING_DATA}"
    rc, _, err = _cli("--methods", "bogus")
    assert rc == 2 and err.startswith("error:") and "bogus" in err and len(err.strip().splitlines()) == 1
    # --refine-size needs a refined camflow row (checked before any data is read)
    rc, _, err = _cli("--data", str(tmp_path / "nowhere"), "--methods", "camflow_net", "--estimators", "dis",
                      "--refine-size", "576")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "needs a refined camflow" in err


def test_an_unwritable_out_is_refused_before_the_evaluation(tmp_path):
    """Issue 44: an unwritable --out failed after the whole evaluation (evaluate checks up front).
    The data folder's left image is damaged, so an evaluation that ran first would fail on it
    with another message."""
    data = _stereo_folder(tmp_path)
    (data / "aloeL.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "file").write_text("x")
    for out, expect in ((tmp_path / "file" / "out", "cannot write to " + str(tmp_path / "file")),
                        (data, "is the input")):
        rc, _, err = _cli("--data", str(data), "--out", str(out), "--parts", "stereo", "--methods", "identity")
        assert rc == 2 and err.startswith("error: ") and expect in err and len(err.strip().splitlines()) == 1, err


def test_refine_size_reaches_the_refined_camflow_rows_only():
    from camflow_jax.predictor import Predictor
    from camflow_jax.refine import RefineConfig

    model = Predictor.from_pretrained()
    ests = real.pair_estimators(["camflow", "camflow_net", "dis"], model, "", refine_size=576)
    assert ests["camflow"].refine == RefineConfig.at_size(576) and not ests["camflow_net"].refine
    assert real.pair_estimators(["camflow"], model, "")["camflow"].refine is True  # the default refinement
    video = real.video_estimators(["camflow", "camflow_net", "dis"], model, "", refine_size=576)
    assert video["camflow"]().motion_estimator.refine == RefineConfig.at_size(576)
    assert not video["camflow_net"]().motion_estimator.refine and video["dis"]().name == "dis"
    registry.require_refined_method(576, ["dis", "camflow:/some/checkpoint"])  # a refined row: fine
    registry.require_refined_method(None, ["dis"])
    with pytest.raises(ValueError, match="needs a refined camflow"):
        registry.require_refined_method(576, ["camflow_net", "dis"])


def test_method_names_follow_the_registry():
    names, notes = real.check_pair_methods(["sift", "dis", "oracle_h12", "camflow_net"])
    assert names == ["sift_ransac", "dis", "oracle_h12", "camflow_net"]
    assert len(notes) == 1 and "'sift_ransac'" in notes[0]
    with pytest.raises(ValueError, match="camflow_net"):
        real.check_pair_methods(["camflow_depth"])  # the old row name says what replaced it
    with pytest.raises(ValueError, match="unknown estimator 'bogus'"):
        real.check_pair_methods(["bogus"])
    ests = real.pair_estimators(["identity", "camflow", "oracle_span36"], None, "skipped: no model")
    assert set(ests) == {"identity", "camflow"} and ests["camflow"] == "skipped: no model"
    assert ests["identity"].name == "identity"


def test_video_names_follow_the_registry():
    names, notes = real.check_video_estimators(["sift", "dis", "camflow_net"])
    assert names == ["sift_ransac", "dis", "camflow_net"] and len(notes) == 1
    with pytest.raises(ValueError, match="unknown estimator 'oracle_h12'"):
        real.check_video_estimators(["oracle_h12"])  # oracles are stereo-only
    facts = real.video_estimators(["dis", "camflow"], None, "skipped: no model")
    assert facts["camflow"] == "skipped: no model"
    a, b = facts["dis"](), facts["dis"]()
    assert a is not b and a.name == "dis" and a.calls == 0  # a fresh estimator per clip


def test_a_mis_sized_ground_truth_is_named(tmp_path):
    """POOR (issue 63): a ground truth of another size than the pair was not named."""
    data = _stereo_folder(tmp_path)
    gt = cv2.imread(str(data / "aloeGT.png"), cv2.IMREAD_UNCHANGED)
    cv2.imwrite(str(data / "aloeGT.png"), gt[:-4])
    with pytest.raises(ValueError, match=r"aloeGT\.png is \d+x\d+ but .*aloeL\.jpg is"):
        opencv_doc.load_stereo(data)
