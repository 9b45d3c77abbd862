"""CamFlow+ in the stabilizer: per-frame depth and intrinsics reach the model, aligned and scaled."""

import cv2
import numpy as np
import pytest

from camflow_jax import stabilize
from camflow_jax.stabilization import estimators


class _Recorder:
    """A predictor stand-in that records what the estimator hands it."""

    num_depth = 12
    description = "recorder"

    def __init__(self):
        self.calls = []

    def __call__(self, a, b, depth1=None, depth2=None, intrinsics=None, refine=None):
        self.calls.append((a.shape, depth1, depth2, intrinsics))
        return {"flow_f": np.zeros(a.shape[:2] + (2,), np.float32)}


def _depth_folder(tmp_path, n, h, w):
    d = tmp_path / "depth"
    d.mkdir()
    for t in range(n):
        np.save(d / f"{t:04d}.npy", np.full((h, w), 1.0 + t, np.float32))
    return d


def _frames(h, w):
    rng = np.random.default_rng(0)
    return [cv2.GaussianBlur(rng.integers(0, 255, (h, w, 3)).astype(np.uint8), (0, 0), 1.5) for _ in range(2)]


def test_frame_t_gets_depth_t_and_t_plus_1_and_scaled_intrinsics(tmp_path):
    from camflow_jax.data.depth import depth_files

    files = depth_files(_depth_folder(tmp_path, 4, 60, 80))  # half the frames' resolution
    rec = _Recorder()
    est = estimators.CamFlowEstimator(rec, depth_files=files, intrinsics=(100.0, 100.0, 79.5, 59.5),
                                      frame_size=(120, 160))
    frames = _frames(120, 160)  # two different textured frames (identical ones need no estimate)
    est(*frames)
    est(*frames)
    (_, d1, d2, K), (_, e1, e2, _) = rec.calls
    assert d1.shape == (120, 160) and np.all(d1 == 1.0) and np.all(d2 == 2.0)
    assert np.all(e1 == 2.0) and np.all(e2 == 3.0)  # the second pair is frames 1 and 2
    np.testing.assert_allclose(K, [100.0, 100.0, 79.5, 59.5])  # same size: unchanged
    # At half the size, K follows the half-pixel convention: cx' = (cx + 0.5) / 2 - 0.5.
    rec2 = _Recorder()
    est2 = estimators.CamFlowEstimator(rec2, depth_files=files, intrinsics=(100.0, 100.0, 79.5, 59.5),
                                       frame_size=(120, 160))
    est2(*_frames(60, 80))
    np.testing.assert_allclose(rec2.calls[0][3], [50.0, 50.0, 39.5, 29.5])
    # A field of view instead: fx = (W / 2) / tan(fov / 2).
    rec3 = _Recorder()
    estimators.CamFlowEstimator(rec3, depth_files=files, fov_deg=90.0)(*frames)
    np.testing.assert_allclose(rec3.calls[0][3][:2], [80.0, 80.0], rtol=1e-6)


def test_depth_of_another_aspect_or_too_few_files_is_named(tmp_path):
    from camflow_jax.data.depth import depth_files

    files = depth_files(_depth_folder(tmp_path, 2, 60, 60))
    est = estimators.CamFlowEstimator(_Recorder(), depth_files=files)
    with pytest.raises(ValueError, match="0000.npy: depth is 60x60"):
        est(*_frames(120, 160))


def test_cli_refuses_depth_flags_for_other_estimators(tmp_path, capsys):
    frames = tmp_path / "in"
    frames.mkdir()
    for t in range(3):
        cv2.imwrite(str(frames / f"{t}.png"), np.zeros((32, 48, 3), np.uint8))
    code = stabilize.main([str(frames), "-o", str(tmp_path / "out"), "--estimator", "sift_ransac",
                           "--depth", str(_depth_folder(tmp_path, 3, 32, 48)), "-q"])
    assert code == 2
    assert "--depth" in capsys.readouterr().err


def test_an_all_nan_depth_file_is_named_not_the_predictors_argument(tmp_path):
    """Issue 63: one all-NaN map in the --depth folder used to be reported as the Predictor's
    ``depths2[0]``; the error names the file."""
    from camflow_jax.data.depth import depth_files

    folder = _depth_folder(tmp_path, 3, 60, 80)
    np.save(folder / "0001.npy", np.full((60, 80), np.nan, np.float32))
    est = estimators.CamFlowEstimator(_Recorder(), depth_files=depth_files(folder))
    with pytest.raises(ValueError, match=r"depth file .*0001\.npy: only 0\.00% of the pixels hold a finite positive depth"):
        est(*_frames(120, 160))
