"""Benchmark readers: restricted unpickling, GHOF-Cam / GHOF / CAHomo formats, depth files."""

import os
import pickle

import cv2
import numpy as np
import pytest

import fixtures_benchmarks as fx
from camflow_jax.data import benchmarks


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo should-never-run",))


def _npy_with_payload(path, payload: bytes, shape=(1,)):
    """An object-dtype .npy file whose pickle body is ``payload``."""
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "|O", "fortran_order": False, "shape": shape})
        fh.write(payload)


def test_malicious_pickle_is_refused(tmp_path):
    arr = np.empty(1, dtype=object)
    arr[0] = _Evil()
    np.save(tmp_path / "evil.npy", arr, allow_pickle=True)
    with pytest.raises(ValueError, match="refusing to load global .*system"):
        benchmarks.load_npy(tmp_path / "evil.npy")
    # builtins beyond plain containers (eval, getattr, ...) are refused too.
    _npy_with_payload(tmp_path / "eval.npy", b"cbuiltins\neval\n(S'1'\ntR.")  # protocol 0
    with pytest.raises(ValueError, match="builtins.eval"):
        benchmarks.load_npy(tmp_path / "eval.npy")


def test_object_arrays_load_including_numpy1_pickles(tmp_path):
    items = [{"img1": np.arange(6, dtype=np.uint8).reshape(2, 3), "split": "Fog",
              "x": np.float32(1.5), "pts": [(1, 2), (3, 4)]}]
    arr = np.empty(1, dtype=object)
    arr[0] = items[0]
    np.save(tmp_path / "ok.npy", arr, allow_pickle=True)
    got = benchmarks.load_npy(tmp_path / "ok.npy")[0]
    np.testing.assert_array_equal(got["img1"], items[0]["img1"])
    assert got["split"] == "Fog" and got["x"] == 1.5 and got["pts"] == [(1, 2), (3, 4)]
    # A numpy-1.x era file: protocol 2, 'numpy.core.multiarray' globals, bytes via _codecs.
    body = pickle.dumps(arr, protocol=2).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert b"numpy.core.multiarray" in body
    _npy_with_payload(tmp_path / "old.npy", body)
    old = benchmarks.load_npy(tmp_path / "old.npy")[0]
    np.testing.assert_array_equal(old["img1"], items[0]["img1"])
    # Plain numeric arrays go through np.load without pickle.
    np.save(tmp_path / "num.npy", np.ones((2, 2)))
    np.testing.assert_array_equal(benchmarks.load_npy(tmp_path / "num.npy"), np.ones((2, 2)))


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        benchmarks.load_npy(tmp_path / "nope.npy")
    (tmp_path / "junk.npy").write_bytes(b"not a numpy file at all")
    with pytest.raises(ValueError, match="not a valid .npy"):
        benchmarks.load_npy(tmp_path / "junk.npy")
    arr = np.empty(1, dtype=object)
    arr[0] = {"a": np.zeros(100)}
    np.save(tmp_path / "t.npy", arr, allow_pickle=True)
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "trunc.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="trunc.npy"):
        benchmarks.load_npy(tmp_path / "trunc.npy")


def test_ghof_cam_reader(tmp_path):
    items = fx.make_ghof_cam(str(tmp_path / "GHOF-Cam.npy"), per_split=1)
    r = benchmarks.GHOFCam(tmp_path / "GHOF-Cam.npy")
    assert len(r) == 5 and r.categories == ("RE", "FOG", "LL", "RAIN", "SNOW")
    cats = [r[i]["category"] for i in range(len(r))]
    assert cats == ["RE", "FOG", "LL", "RAIN", "SNOW"]  # Fog -> FOG, Dark -> LL, Rain -> RAIN
    s = r[2]
    assert s["img1"].dtype == np.uint8 and s["img1"].shape == (48, 64, 3)
    np.testing.assert_array_equal(s["gt_flow"], items[2]["gt_flow"])
    np.testing.assert_array_equal(s["mask"], items[2]["mask"])
    np.testing.assert_allclose(s["K"], benchmarks.GHOF_INTRINSICS)
    assert s["key"] == "00002"


def test_ghof_cam_reader_rejects_bad_samples(tmp_path):
    items = fx.make_ghof_cam(str(tmp_path / "a.npy"), per_split=1)
    items[3] = dict(items[3], gt_flow=np.zeros((10, 10, 2), np.float32))
    del items[1]["homo_field"]
    arr = np.empty(len(items), dtype=object)
    for i, it in enumerate(items):
        arr[i] = it
    np.save(tmp_path / "b.npy", arr, allow_pickle=True)
    r = benchmarks.GHOFCam(tmp_path / "b.npy")
    with pytest.raises(ValueError, match="sample 3 gt_flow"):
        r[3]
    with pytest.raises(ValueError, match=r"sample 1 lacks \['homo_field'\]"):
        r[1]
    np.save(tmp_path / "c.npy", np.zeros((3, 3)))
    with pytest.raises(ValueError, match="object array"):
        benchmarks.GHOFCam(tmp_path / "c.npy")


def test_bandwise_homography_flow_against_opencv(tmp_path):
    items = fx.make_ghof_benchmark(str(tmp_path / "GHOF_Clean_x.npy"), h=40, w=48, bands=4)
    r = benchmarks.GHOFBenchmark(tmp_path / "GHOF_Clean_x.npy")
    s = r[0]
    hs = items[0]["homo"].reshape(4, 3, 3)
    ys, xs = np.mgrid[0:40, 0:48].astype(np.float32)
    pts = np.stack([xs, ys], -1)
    for row in (0, 9, 10, 29, 30, 39):  # 40 rows / 4 bands = 10 rows each
        H = hs[min(row // 10, 3)]
        mapped = cv2.perspectiveTransform(pts[row][None], H)[0]
        np.testing.assert_allclose(s["gyro_field"][row], mapped - pts[row], atol=1e-3)
    assert "homo_field" in s and s["category"] == "RE"
    # Last band takes the remainder rows: 43 rows in 4 bands -> rows 30..42 use band 3.
    f = benchmarks.bandwise_homography_flow(hs, 43, 5)
    np.testing.assert_allclose(f[42], benchmarks.bandwise_homography_flow(hs[3], 43, 5)[42], atol=1e-6)
    fx.make_ghof_benchmark(str(tmp_path / "GHOF_Final_x.npy"), clean=False)
    assert "homo_field" not in benchmarks.GHOFBenchmark(tmp_path / "GHOF_Final_x.npy")[0]


def test_cahomo_reader(tmp_path):
    truth = fx.make_cahomo(str(tmp_path), pairs_per_video=2)
    r = benchmarks.CAHomoTest(tmp_path)
    assert len(r) == len(truth) == 12
    assert len(r.skipped) == 2  # video 9999999
    for i, t in enumerate(truth):
        s = r[i]
        assert s["category"] == t["category"] and s["video"] == t["video"] and s["key"] == t["key"]
        np.testing.assert_allclose(s["points"], t["points"], atol=1e-4)
        assert s["img1"].shape == (108, 192, 3) and s["img1"].dtype == np.uint8
    assert [r[i]["category"] for i in range(2, 4)] == ["RE", "RE"]  # 0000030 -> RE
    # The image comes back in RGB order (JPEG q98 adds a little error; BGR would be far off).
    rng = np.random.default_rng(2)
    img1, _, _ = fx.make_pair(rng, 108, 192, jitter=6.0)
    err_rgb = np.abs(r[0]["img1"].astype(float) - img1).mean()
    err_bgr = np.abs(r[0]["img1"][..., ::-1].astype(float) - img1).mean()
    assert err_rgb < 6.0 and err_rgb < err_bgr / 4


def test_cahomo_reader_errors(tmp_path):
    fx.make_cahomo(str(tmp_path), pairs_per_video=1)
    os.remove(tmp_path / "img" / "0000038" / "0000038_10021.jpg")
    r = benchmarks.CAHomoTest(tmp_path)
    idx = [p["video"] for p in r.pairs].index("0000038")
    with pytest.raises(FileNotFoundError, match="0000038_10021.jpg"):
        r[idx]
    np.save(tmp_path / "pt" / "0000011_10001.jpg_0000011_10005.jpg.npy", {"matche_pts": [[(1, 2), (3, 4)]] * 3})
    with pytest.raises(ValueError, match="needs 6"):
        r[0]
    with pytest.raises(FileNotFoundError, match="CAHomo folder"):
        benchmarks.CAHomoTest(tmp_path / "missing")


def test_depth_files(tmp_path):
    fx.make_ghof_cam(str(tmp_path / "g.npy"), per_split=1)
    ddir = tmp_path / "depth"
    ddir.mkdir()
    d1 = np.full((24, 32), 2.0, np.float32)
    d1[0, 0] = np.nan  # invalid pixels survive resizing as invalid, never smear
    np.savez(ddir / "00000.npz", depth1=d1, depth2=np.full((24, 32), 4.0, np.float32),
             K=np.array([1, 2, 3, 4], np.float32))
    np.save(ddir / "00001_1.npy", np.full((48, 64), 5.0, np.float32))
    np.save(ddir / "00001_2.npy", np.full((48, 64), 6.0, np.float32))
    r = benchmarks.GHOFCam(tmp_path / "g.npy", depth_dir=ddir)
    s0 = r[0]
    assert s0["depth1"].shape == (48, 64)
    assert np.isnan(s0["depth1"][0, 0]) and np.allclose(s0["depth1"][10:, 10:], 2.0)
    np.testing.assert_allclose(s0["K"], [1, 2, 3, 4])
    s1 = r[1]
    assert np.allclose(s1["depth2"], 6.0)
    np.testing.assert_allclose(s1["K"], benchmarks.GHOF_INTRINSICS)
    with pytest.raises(FileNotFoundError, match="00002"):
        r[2]


@pytest.mark.parametrize("arr", [np.arange(12, dtype=np.float32).reshape(3, 4),
                                 np.array([{"flow": np.ones((2, 2), np.float32)}], dtype=object)])
def test_version_3_npy_files_load_like_numpy_loads_them(tmp_path, arr):
    """numpy 2.4 dropped the private header reader the loader used for format 3.0 (UTF-8
    headers): such a file gave an uncaught AttributeError. numpy's own np.load is the oracle."""
    path = tmp_path / "v3.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, version=(3, 0), allow_pickle=True)
    got = benchmarks.load_npy(path)
    ref = np.load(path, allow_pickle=True)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    if arr.dtype.hasobject:
        np.testing.assert_array_equal(got[0]["flow"], ref[0]["flow"])
    else:
        np.testing.assert_array_equal(got, ref)
    path.write_bytes(path.read_bytes()[:9])  # the magic and half the header length
    with pytest.raises(ValueError, match="not a valid .npy file"):
        benchmarks.load_npy(path)
