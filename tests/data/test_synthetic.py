"""Synthetic parallax scenes against independent oracles: OpenCV warping and homography fits,
closed-form pinhole reprojection written here with numpy, and a second, independent ray cast."""

import os
import pickle
import subprocess
import sys

import cv2
import numpy as np
import pytest

from camflow_jax.data.synthetic import files
from camflow_jax.data.synthetic import scenes as S
from camflow_jax.data.synthetic.render import render_view
from helpers import ROOT

H, W = 96, 160  # homography_fit_stride(96, 160) == 1: the label uses every valid pixel
N_TEX = 6  # small texture bank keeps the suite fast


@pytest.fixture(scope="module")
def ds():
    return S.SyntheticScenes(seed=0, num_samples=50, height=H, width=W, num_textures=N_TEX)


@pytest.fixture(scope="module")
def samples(ds):
    return [ds[i] for i in range(10)]  # two of each category


@pytest.fixture(scope="module")
def re_samples():
    src = S.SyntheticScenes(seed=3, num_samples=50, height=128, width=256, categories=("RE",),
                            num_textures=N_TEX)
    return [src[i] for i in range(6)]


def _grid(h, w):
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    return gx, gy


def _kmat(K):
    fx, fy, cx, cy = (float(v) for v in K)
    return np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])


def test_contract_keys_shapes_dtypes(samples):
    spec = {
        "img1": ((H, W, 3), np.uint8), "img2": ((H, W, 3), np.uint8),
        "depth1": ((H, W), np.float32), "depth2": ((H, W), np.float32),
        "K": ((4,), np.float32),
        "flow_f": ((H, W, 2), np.float32), "flow_b": ((H, W, 2), np.float32),
        "valid_f": ((H, W), np.float32), "valid_b": ((H, W), np.float32),
        "homography": ((3, 3), np.float32),
        "points1": ((32, 2), np.float32), "points2": ((32, 2), np.float32),
        "R": ((3, 3), np.float32), "t": ((3,), np.float32),
    }
    for s in samples:
        assert set(s) == set(spec) | {"category", "category_id"}
        for k, (shape, dtype) in spec.items():
            assert s[k].shape == shape and s[k].dtype == dtype, (k, s[k].shape, s[k].dtype)
        for k in ("depth1", "depth2"):
            assert np.all(np.isfinite(s[k])) and s[k].min() > 0
        for k in ("flow_f", "flow_b", "homography", "points1", "points2"):
            assert np.all(np.isfinite(s[k])), k
        for k in ("valid_f", "valid_b"):
            assert set(np.unique(s[k])) <= {0.0, 1.0}
            assert s[k].mean() > 0.2  # a usable pair
        assert isinstance(s["category"], str)
        assert S.CATEGORIES[int(s["category_id"])] == s["category"]
        assert s["category_id"].dtype == np.int32
        # R is a rotation
        np.testing.assert_allclose(s["R"] @ s["R"].T, np.eye(3), atol=1e-5)
        assert np.linalg.det(s["R"]) == pytest.approx(1.0, abs=1e-5)


def test_categories_cycle_and_restrict(ds, samples):
    assert [s["category"] for s in samples[:5]] == list(S.CATEGORIES)
    assert {s["category"] for s in samples[5:]} == set(S.CATEGORIES)
    only = S.SyntheticScenes(seed=0, num_samples=4, height=64, width=128, categories=("FOG", "SNOW"),
                             num_textures=N_TEX)
    assert [only[i]["category"] for i in range(4)] == ["FOG", "SNOW", "FOG", "SNOW"]


def test_categories_look_different(samples):
    """LL is dark; FOG lowers the contrast of far pixels; RAIN/SNOW add bright particles."""
    by = {s["category"]: s for s in samples[:5]}
    assert by["LL"]["img1"].mean() < 0.4 * by["RE"]["img1"].mean()
    for s in samples:  # the two frames of a pair are never identical (noise, exposure)
        assert np.any(s["img1"] != s["img2"])


def test_deterministic_per_seed_and_index(ds, samples):
    again = S.SyntheticScenes(seed=0, num_samples=50, height=H, width=W, num_textures=N_TEX)[3]
    for k, v in samples[3].items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(again[k]), err_msg=k)
    # negative indices follow the sequence convention
    np.testing.assert_array_equal(ds[-50]["img1"], samples[0]["img1"])
    other_seed = S.SyntheticScenes(seed=1, num_samples=50, height=H, width=W, num_textures=N_TEX)[3]
    assert not np.array_equal(other_seed["img1"], samples[3]["img1"])
    assert not np.allclose(other_seed["flow_f"], samples[3]["flow_f"])
    assert not np.array_equal(samples[4]["img1"], samples[3]["img1"])


def test_without_the_homography_label_every_other_field_is_the_same(samples):
    lean = S.SyntheticScenes(seed=0, num_samples=50, height=H, width=W, num_textures=N_TEX, homography=False)[3]
    assert "homography" not in lean and set(lean) == set(samples[3]) - {"homography"}
    for k, v in lean.items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(samples[3][k]), err_msg=k)
    with pytest.raises(ValueError, match="homography must be True or False"):
        S.SyntheticScenes(homography="no")


def test_training_source_computes_the_homography_label_only_for_homography_labels():
    from camflow_jax.configs import default
    from camflow_jax.data import datasets
    cfg = default.get_config().data
    cfg.name, cfg.num_train, cfg.render_height, cfg.render_width = "synthetic", 4, 48, 96
    assert datasets.training_source(cfg, 48, 96).scenes.homography is False  # flow labels: not read
    cfg.label = "homography"
    src = datasets.training_source(cfg, 48, 96)
    pair, scene = src[1], src.scenes[1]
    ys, xs = np.mgrid[0:48, 0:96].astype(np.float32)
    grid = np.stack([xs, ys], -1).reshape(-1, 1, 2)
    want = cv2.perspectiveTransform(grid, scene["homography"].astype(np.float64)).reshape(48, 96, 2) - grid.reshape(48, 96, 2)
    np.testing.assert_allclose(pair["flow_f"], want, atol=1e-3)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_read_threads_run_at_the_configured_nice_value_and_read_the_same_batches():
    import threading

    from camflow_jax.configs import default
    from camflow_jax.data import datasets, pipeline
    cfg = default.get_config().data
    cfg.name, cfg.num_train, cfg.render_height, cfg.render_width = "synthetic", 8, 48, 96
    seen = []

    class Recording:  # records the reading thread's nice value (os.getpriority: the oracle)
        def __init__(self, src):
            self.src = src

        def __len__(self):
            return len(self.src)

        def __getitem__(self, i):
            seen.append((threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
            return self.src[i]

    main_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    kw = dict(seed=0, global_batch=2, process_index=0, process_count=1,
              prepare_kwargs=dict(height=32, width=64), read_threads=1)
    batches = {}
    for nice in (0, main_nice + 5):
        seen.clear()
        it = iter(pipeline.train_dataset(Recording(datasets.training_source(cfg, 32, 64)), read_nice=nice, **kw))
        batches[nice] = [next(it) for _ in range(3)]
        readers = {tid for tid, _ in seen}
        assert threading.get_native_id() not in readers  # read in grain's thread, not here
        assert max(n for _, n in seen) == min(max(main_nice, nice), 19)  # Linux's highest nice value
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_nice
    for a, b in zip(*batches.values()):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_pickle_roundtrip_gives_same_samples(ds, samples):
    clone = pickle.loads(pickle.dumps(ds))  # grain worker processes receive a pickled source
    np.testing.assert_array_equal(clone[1]["img2"], samples[1]["img2"])
    assert "SyntheticScenes(seed=0" in repr(ds) and len(ds) == 50


def test_flow_equals_closed_form_reprojection(samples):
    """flow_f / flow_b against p' = K (R K^-1 p D(p) + t) written here with numpy matrices."""
    gx, gy = _grid(H, W)
    ph = np.stack([gx, gy, np.ones_like(gx)], -1).reshape(-1, 3).astype(np.float64)
    for s in samples:
        Km = _kmat(s["K"])
        R, t = s["R"].astype(np.float64), s["t"].astype(np.float64)
        for flow, depth, valid, Rr, tr in (
                (s["flow_f"], s["depth1"], s["valid_f"], R, t),
                (s["flow_b"], s["depth2"], s["valid_b"], R.T, -R.T @ t)):
            X = (np.linalg.inv(Km) @ ph.T) * depth.reshape(1, -1).astype(np.float64)
            q = Km @ (Rr @ X + tr[:, None])
            ref = (q[:2] / q[2]).T - ph[:, :2]
            v = valid.reshape(-1) > 0
            err = np.abs(flow.reshape(-1, 2)[v] - ref[v])
            assert err.max() < 2e-3, err.max()
        # sparse correspondences: valid pixels, image-2 positions by the same closed form
        p1 = s["points1"].astype(np.int64)
        assert np.all(s["valid_f"][p1[:, 1], p1[:, 0]] == 1)
        X = np.linalg.inv(Km) @ np.c_[p1, np.ones(32)].T * s["depth1"][p1[:, 1], p1[:, 0]]
        q = Km @ (R @ X + t[:, None])
        np.testing.assert_allclose(s["points2"], (q[:2] / q[2]).T, atol=2e-3)


def test_second_view_depth_agrees_with_reprojection(samples):
    """depth2 comes from its own ray cast; at p' it must equal the depth z2 of X2 = R X1 + t for
    valid pixels (read with OpenCV bilinear interpolation of inverse depth, exact on planes)."""
    gx, gy = _grid(H, W)
    for s in samples:
        Km = _kmat(s["K"])
        ph = np.stack([gx, gy, np.ones_like(gx)], -1).reshape(-1, 3).T.astype(np.float64)
        X2 = s["R"].astype(np.float64) @ (np.linalg.inv(Km) @ ph * s["depth1"].reshape(1, -1)) \
            + s["t"].astype(np.float64)[:, None]
        z2 = X2[2].reshape(H, W)
        f = s["flow_f"]
        x2, y2 = gx + f[..., 0], gy + f[..., 1]
        inv = 1.0 / s["depth2"]
        inv2 = cv2.remap(inv, x2, y2, cv2.INTER_LINEAR)
        # Bilinear reads are exact only when the 4 neighbours lie on one plane: skip the pixels
        # whose 2x2 neighbourhood in view 2 straddles a depth edge (they are a few percent).
        v = s["valid_f"] > 0
        x0 = np.clip(np.floor(x2).astype(int), 0, W - 2)
        y0 = np.clip(np.floor(y2).astype(int), 0, H - 2)
        nb = np.stack([inv[y0, x0], inv[y0, x0 + 1], inv[y0 + 1, x0], inv[y0 + 1, x0 + 1]])
        smooth = v & (nb.max(0) < 1.05 * nb.min(0))
        assert smooth.sum() > 0.8 * v.sum()
        rel = np.abs(1.0 / inv2[smooth] - z2[smooth]) / z2[smooth]
        # cv2.remap quantises bilinear weights to 1/32 px: allow that on steep (ground) planes
        assert np.median(rel) < 1e-4 and np.percentile(rel, 99) < 5e-3, (np.median(rel), np.percentile(rel, 99))


def test_forward_backward_consistency(samples):
    gx, gy = _grid(H, W)
    for s in samples:
        f, v = s["flow_f"], s["valid_f"] > 0
        fb = cv2.remap(s["flow_b"], gx + f[..., 0], gy + f[..., 1], cv2.INTER_LINEAR)
        d = np.linalg.norm(f + fb, axis=-1)[v]
        # bilinear reads of flow_b straddle depth edges on a few pixels: bound the bulk tightly
        assert np.median(d) < 0.01 and np.percentile(d, 95) < 0.05 and np.mean(d > 0.5) < 0.03, (
            np.median(d), np.percentile(d, 95), np.mean(d > 0.5))


def _gain_bias_residual(ref, img, mask):
    """Mean |ref - (a img + b)| on mask with (a, b) the least-squares exposure correction."""
    x, y = img[mask].reshape(-1), ref[mask].reshape(-1)
    a, b = np.linalg.lstsq(np.c_[x, np.ones_like(x)], y, rcond=None)[0]
    return float(np.abs(y - (a * x + b)).mean())


def test_warping_img2_by_flow_reproduces_img1(re_samples):
    """warp(img2, flow_f) (cv2.remap, bilinear) matches img1 on valid_f far better than img2;
    a global gain/bias fit removes the deliberate exposure change from both errors."""
    e_warp, e_id = [], []
    for s in re_samples:
        h, w = s["img1"].shape[:2]
        gx, gy = _grid(h, w)
        f, v = s["flow_f"], s["valid_f"] > 0
        i1, i2 = s["img1"].astype(np.float32), s["img2"].astype(np.float32)
        warped = cv2.remap(i2, gx + f[..., 0], gy + f[..., 1], cv2.INTER_LINEAR)
        e_warp.append(_gain_bias_residual(i1, warped, v))
        e_id.append(_gain_bias_residual(i1, i2, v))
        assert e_id[-1] > 1.5 * e_warp[-1]
    ratio = np.mean(e_id) / np.mean(e_warp)
    assert ratio > 4.0, (ratio, e_id, e_warp)


def test_moving_objects_are_masked_out(ds, samples):
    """Rebuild sample i's scene from its documented RNG order (intrinsics, then scene) and
    render it independently with render_view: depth1 matches, moving planes exist, they move,
    and none of their pixels is valid."""
    n_moving_px = 0
    for i, s in enumerate(samples[:5]):
        rng = np.random.default_rng([0, i])
        K = S.sample_intrinsics(rng, H, W)
        np.testing.assert_array_equal(K, s["K"])
        scene = S.sample_scene(rng, ds.textures, K, H, W)
        img0, depth0, ids0 = render_view(scene, np.eye(3), np.zeros(3), K, H, W, tau=0.0, return_ids=True)
        np.testing.assert_allclose(depth0, s["depth1"], rtol=1e-6)
        moving = [k + 1 for k, p in enumerate(scene.planes) if p.moving]
        assert 1 <= len(moving) <= 2
        mask = np.isin(ids0, moving)
        n_moving_px += mask.sum()
        assert not np.any(s["valid_f"][mask])
        _, depth_t1 = render_view(scene, np.eye(3), np.zeros(3), K, H, W, tau=1.0)
        if mask.any():
            assert np.any(np.abs(depth_t1 - depth0)[mask] > 1e-3)  # the objects moved
    assert n_moving_px > 0


def test_homography_label_matches_opencv_least_squares(samples):
    """cv2.findHomography(method=0) minimises the same geometric error (DLT + LM refinement)."""
    for s in samples[:6]:
        ys, xs = np.nonzero(s["valid_f"])
        p = np.stack([xs, ys], 1).astype(np.float32)
        q = p + s["flow_f"][ys, xs]
        Hc, _ = cv2.findHomography(p, q, 0)
        ours = s["homography"].astype(np.float64)

        def sse(Hm):
            r = cv2.perspectiveTransform(p[:, None].astype(np.float64), Hm)[:, 0] - q
            return float((r ** 2).sum())

        assert sse(ours) <= sse(Hc) * (1 + 1e-4) + 1e-6
        gx, gy = _grid(H, W)
        pts = np.stack([gx, gy], -1).reshape(-1, 1, 2).astype(np.float64)
        epe = np.linalg.norm(cv2.perspectiveTransform(pts, ours) - cv2.perspectiveTransform(pts, Hc), axis=-1)
        assert epe.mean() < 0.01, epe.mean()


def test_fit_homography_lsq_recovers_exact_homography():
    rng = np.random.default_rng(5)
    src = np.float32([[0, 0], [319, 0], [0, 239], [319, 239]])
    Ht = cv2.getPerspectiveTransform(src, src + rng.uniform(-30, 30, (4, 2)).astype(np.float32))
    p = rng.uniform([0, 0], [320, 240], (500, 2))
    q = cv2.perspectiveTransform(p[:, None], Ht)[:, 0]
    Hf = S.fit_homography_lsq(p, q)
    np.testing.assert_allclose(Hf, Ht / Ht[2, 2], rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match=">= 4"):
        S.fit_homography_lsq(p[:3], q[:3])
    with pytest.raises(ValueError, match="finite"):
        S.fit_homography_lsq(np.full((5, 2), np.nan), q[:5])


def test_render_view_from_other_pose_is_consistent():
    """A clean scene rendered from two poses: warping view 2 by the closed-form camera flow
    reproduces view 1 on static, visible pixels (what a stabilization benchmark relies on)."""
    h, w = 96, 160
    rng = np.random.default_rng(11)
    K = S.sample_intrinsics(rng, h, w)
    scene = S.sample_scene(rng, S.procedural_textures(2, 3), K, h, w)
    img1, d1, ids1 = render_view(scene, np.eye(3), np.zeros(3), K, h, w, return_ids=True)
    R = cv2.Rodrigues(np.deg2rad([0.5, -1.0, 0.3]))[0]
    t = np.array([0.04, -0.02, 0.05])
    img2, d2 = render_view(scene, R, t, K, h, w, tau=0.0)  # objects frozen: everything static
    assert img1.dtype == np.uint8 and img1.shape == (h, w, 3) and d1.dtype == np.float32
    Km = _kmat(K)
    gx, gy = _grid(h, w)
    ph = np.stack([gx, gy, np.ones_like(gx)], -1).reshape(-1, 3).T.astype(np.float64)
    q = Km @ (R @ (np.linalg.inv(Km) @ ph * d1.reshape(1, -1)) + t[:, None])
    x2 = (q[0] / q[2]).reshape(h, w).astype(np.float32)
    y2 = (q[1] / q[2]).reshape(h, w).astype(np.float32)
    warped = cv2.remap(img2.astype(np.float32), x2, y2, cv2.INTER_LINEAR)
    z2 = q[2].reshape(h, w)
    seen = cv2.remap(1.0 / d2, x2, y2, cv2.INTER_LINEAR)
    ok = (x2 >= 0) & (x2 < w - 1) & (y2 >= 0) & (y2 < h - 1) & (1.0 / z2 >= 0.99 * seen)
    assert ok.mean() > 0.5
    err = np.abs(warped - img1)[ok].mean()
    ident = np.abs(img2.astype(np.float32) - img1)[ok].mean()
    assert err < 0.25 * ident, (err, ident)


def test_textures_dir(tmp_path):
    rng = np.random.default_rng(0)
    for j in range(2):
        photo = cv2.GaussianBlur(rng.integers(0, 256, (90, 120, 3), dtype=np.uint8), (0, 0), 1.5)
        cv2.imwrite(str(tmp_path / f"photo{j}.png"), photo)
    (tmp_path / "notes.txt").write_text("ignored")
    src = S.SyntheticScenes(seed=0, num_samples=3, height=64, width=128, textures_dir=tmp_path)
    s = src[0]
    assert s["img1"].shape == (64, 128, 3) and s["valid_f"].mean() > 0.2


def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        S.SyntheticScenes(textures_dir=tmp_path / "missing")
    with pytest.raises(ValueError, match="no .png"):
        S.SyntheticScenes(textures_dir=tmp_path)
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg")
    src = S.SyntheticScenes(num_samples=2, height=64, width=128, textures_dir=tmp_path)
    with pytest.raises(ValueError, match="broken.jpg"):
        src[0]
    for kw in ({"height": 10}, {"width": "wide"}, {"height": 64.5}, {"num_samples": -1},
               {"seed": -3}, {"categories": ("RE", "DUSK")}, {"categories": ()}):
        with pytest.raises(ValueError):
            S.SyntheticScenes(**kw)
    src = S.SyntheticScenes(num_samples=3, height=64, width=128, num_textures=N_TEX)
    with pytest.raises(IndexError):
        src[3]
    with pytest.raises(IndexError):
        src[-4]
    with pytest.raises(TypeError):
        src[1.5]
    K = np.array([100.0, 100.0, 63.5, 31.5], np.float32)
    scene = S.sample_scene(np.random.default_rng(0), S.procedural_textures(2, 3), K, 64, 128)
    for bad in ((np.eye(2), np.zeros(3), K, 64, 128), (np.eye(3), np.zeros(3), K[:3], 64, 128),
                (np.eye(3), np.zeros(3), K, 64.0, 128), (np.eye(3), [np.nan, 0, 0], K, 64, 128)):
        with pytest.raises(ValueError):
            render_view(scene, *bad)
    depth = np.ones((64, 128), np.float32)
    depth[3, 4] = np.nan
    with pytest.raises(ValueError, match="finite and positive"):
        S.reprojection_flow(depth, K, np.eye(3), np.zeros(3))


def _render_cli(*args):
    """Runs tools/render_synthetic.py as users do: (exit status, stdout, stderr)."""
    tool = ROOT / "tools" / "render_synthetic.py"
    r = subprocess.run([sys.executable, tool, *map(str, args)], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


def test_write_samples_writes_samples_and_sheet(tmp_path):
    out = tmp_path / "out"
    source = S.SyntheticScenes(seed=0, num_samples=2, height=64, width=128, num_textures=N_TEX)
    seen = []
    sheet = files.write_samples(source, out, 0, 2, 64, progress=lambda n, sec: seen.append(n))
    assert sheet == str(out / "contact_sheet.png") and seen == [1, 2]
    names = sorted(os.listdir(out))
    assert names == ["contact_sheet.png", "sample_00000.npz", "sample_00000_img1.png",
                     "sample_00000_img2.png", "sample_00001.npz", "sample_00001_img1.png",
                     "sample_00001_img2.png"]
    with np.load(out / "sample_00001.npz") as z:
        assert z["flow_f"].shape == (64, 128, 2) and str(z["category"]) == "FOG"
    png = cv2.imread(str(out / "sample_00000_img1.png"))[..., ::-1]
    with np.load(out / "sample_00000.npz") as z:
        np.testing.assert_array_equal(png, z["img1"])
    sheet = cv2.imread(str(out / "contact_sheet.png"))
    assert sheet.shape[1] == 5 * 64 + 4 * 2 and sheet.shape[0] > 2 * 32
    timed = list(files.time_categories(("RE",), 1, height=64, width=128, num_textures=N_TEX))
    assert [r["category"] for r in timed] == ["RE"] and len(timed[0]["wall_s"]) == len(timed[0]["cpu_s"]) == 1


def test_render_tool_command_line(tmp_path):
    out = tmp_path / "out"
    rc, stdout, _ = _render_cli("--out", out, "--num", "1", "--start", "1", "--height", "64", "--width", "128",
                                "--num-textures", N_TEX, "--sheet-width", "64")
    assert rc == 0 and "wrote 1 samples" in stdout
    assert sorted(os.listdir(out)) == ["contact_sheet.png", "sample_00001.npz", "sample_00001_img1.png",
                                       "sample_00001_img2.png"]
    for bad in (["--num", "0"], ["--num", "1", "--categories", "RE,DUSK"], ["--num", "1", "--height", "8"]):
        rc, _, stderr = _render_cli("--out", out, *bad)
        assert rc == 2 and "must be" in stderr  # argparse's usage error
    rc, _, stderr = _render_cli("--out", out, "--num", "1", "--textures-dir", tmp_path / "none")
    assert rc == 2 and stderr.startswith("error:")
    rc, stdout, _ = _render_cli("--benchmark", "--num", "1", "--height", "64", "--width", "128",
                                "--num-textures", N_TEX, "--categories", "RE")
    assert rc == 0 and "RE" in stdout
