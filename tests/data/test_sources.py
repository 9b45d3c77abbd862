"""The GHOF training source's sample folders (camflow_jax.data.sources.GhofTrain): what a
malformed sample is told in one line, naming its file."""

import cv2
import numpy as np
import pytest

from camflow_jax.data import sources


def _sample(root, gyro, depth1=None, depth2=None):
    """One GHOF sample folder ``root/sample_0``: two black 60x80 frames, the gyro homographies
    ``gyro`` and, when given, the depth maps (``depth{1,2}.npy``)."""
    d = root / "sample_0"
    d.mkdir()
    img = np.zeros((60, 80, 3), np.uint8)
    cv2.imwrite(str(d / "img1.png"), img)
    cv2.imwrite(str(d / "img2.png"), img)
    np.save(d / "gyro_homo.npy", gyro)
    for name, depth in (("depth1.npy", depth1), ("depth2.npy", depth2)):
        if depth is not None:
            np.save(d / name, depth)
    return d


def test_a_depth_of_another_aspect_is_refused_naming_the_file(tmp_path):
    _sample(tmp_path, np.tile(np.eye(3, dtype=np.float32), (6, 1, 1)),
            np.ones((60, 60), np.float32), np.ones((30, 40), np.float32))
    src = sources.GhofTrain(tmp_path, "depth{}.npy")
    with pytest.raises(ValueError, match="depth1.npy: depth is 60x60"):
        src[0]


def test_a_malformed_pseudo_label_file_and_a_missing_frame_are_named(tmp_path):
    d = _sample(tmp_path, np.zeros((10, 4)))
    with pytest.raises(ValueError, match="gyro_homo.npy"):
        sources.GhofTrain(tmp_path)[0]
    (d / "img2.png").unlink()
    with pytest.raises(FileNotFoundError, match="img2.png"):
        sources.GhofTrain(tmp_path)[0]
