"""The evaluation datasets, in one registry (docs/evaluation.md, docs/real_images.md).

Benchmarks (random-access sources with ``categories``; the readers live in
:mod:`camflow_jax.data.benchmarks`, which the training sources share for the GHOF intrinsics and
the band-wise gyro flow, and :mod:`camflow_jax.data.synthetic`):

* ``ghof_cam``, ``ghof``, ``cahomo``: the public benchmark files (``data`` = their path);
* ``synthetic``: the held-out ``SyntheticScenes(seed, num, height, width)`` (no download; the
  same generator as the training pipeline's ``data.name = "synthetic"`` evaluation split, which
  uses ``data.eval_seed`` / ``data.num_eval``).

Real images (:mod:`.real`): the Middlebury 'Aloe' stereo pair and ``vtest.avi`` from Debian's
``opencv-doc`` package (:data:`OPENCV_DOC`, :func:`load_stereo`, :func:`read_frames`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

__all__ = ["Dataset", "REGISTRY", "DATASETS", "load_dataset", "categories", "OPENCV_DOC",
           "MISSING_DATA", "STEREO_FILES", "VIDEO_FILE", "load_stereo", "read_frames", "video_fps"]


@dataclass(frozen=True)
class Dataset:
    """A registered benchmark: ``load(data, **options)`` builds its source."""
    name: str
    description: str
    needs_data: bool
    load: Callable


def _ghof_cam(data, *, depth_dir=None, intrinsics=None, **_):
    from camflow_jax.data import benchmarks

    kw = {} if intrinsics is None else {"intrinsics": intrinsics}
    return benchmarks.GHOFCam(data, depth_dir=depth_dir, **kw)


def _ghof(data, *, depth_dir=None, intrinsics=None, **_):
    from camflow_jax.data import benchmarks

    kw = {} if intrinsics is None else {"intrinsics": intrinsics}
    return benchmarks.GHOFBenchmark(data, depth_dir=depth_dir, **kw)


def _cahomo(data, *, depth_dir=None, intrinsics=None, list_file=None, **_):
    from camflow_jax.data import benchmarks

    return benchmarks.CAHomoTest(data, list_file=list_file, depth_dir=depth_dir, intrinsics=intrinsics)


def _synthetic(data, *, num=None, seed=1000, size=(320, 576), **_):
    from camflow_jax.data import synthetic

    n = 100 if num is None else int(num)
    return synthetic.SyntheticScenes(seed=seed, num_samples=n, height=int(size[0]), width=int(size[1]),
                                     textures_dir=data)


#: name -> :class:`Dataset`, in the order the CLI lists them.
REGISTRY = {d.name: d for d in (
    Dataset("ghof_cam", "GHOF-Cam.npy (GT camera flow, mask, homography field)", True, _ghof_cam),
    Dataset("ghof", "GHOF_Clean_*.npy / GHOF_Final_*.npy (gyro homographies, optical flow)", True, _ghof),
    Dataset("cahomo", "CAHomo test folder (6 annotated point pairs per image pair)", True, _cahomo),
    Dataset("synthetic", "held-out SyntheticScenes(seed, num, HxW); data = optional texture folder",
            False, _synthetic),
)}
DATASETS = tuple(REGISTRY)


def load_dataset(dataset: str, data=None, *, num: int | None = None, seed: int = 1000,
                 size: tuple[int, int] = (320, 576), depth_dir=None, intrinsics=None,
                 list_file: str | None = None):
    """Returns a random-access source with ``categories`` for one of :data:`DATASETS`."""
    spec = REGISTRY.get(dataset)
    if spec is None:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {DATASETS}")
    if spec.needs_data and data is None:
        raise ValueError(f"--data is required for dataset {dataset!r} (path to the benchmark)")
    return spec.load(data, num=num, seed=seed, size=size, depth_dir=depth_dir, intrinsics=intrinsics,
                     list_file=list_file)


def categories(source) -> tuple[str, ...]:
    """The table columns of a source (its ``categories``; the synthetic ones otherwise)."""
    cats = getattr(source, "categories", None)
    if cats is None:
        from camflow_jax.data import synthetic

        cats = synthetic.CATEGORIES
    return tuple(cats)


# ----------------------------------------------------------------------------- opencv-doc
#: Where Debian's ``opencv-doc`` installs OpenCV's sample data.
OPENCV_DOC = "/usr/share/doc/opencv-doc/examples/data"
MISSING_DATA = "needs Debian's opencv-doc package: apt-get install opencv-doc"
STEREO_FILES = ("aloeL.jpg", "aloeR.jpg", "aloeGT.png")
VIDEO_FILE = "vtest.avi"


def load_stereo(data) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Aloe from ``data``: (left RGB uint8, right RGB uint8, disparity float32 [H, W] of the
    left view in full-size pixels, valid bool [H, W]; 0 in the PNG = unknown)."""
    data = Path(data)
    left = cv2.imread(str(data / STEREO_FILES[0]), cv2.IMREAD_COLOR)
    right = cv2.imread(str(data / STEREO_FILES[1]), cv2.IMREAD_COLOR)
    gt = cv2.imread(str(data / STEREO_FILES[2]), cv2.IMREAD_UNCHANGED)
    if gt is None or left is None or right is None:
        raise ValueError(f"cannot read the stereo files in {data}")
    left, right = cv2.cvtColor(left, cv2.COLOR_BGR2RGB), cv2.cvtColor(right, cv2.COLOR_BGR2RGB)
    if gt.ndim == 3:
        gt = gt[..., 0]
    disp = gt.astype(np.float32)
    return left, right, disp, disp > 0


def read_frames(path, count: int) -> list[np.ndarray]:
    """The first ``count`` frames of a video (RGB uint8); at least 4 are needed."""
    from itertools import islice

    from camflow_jax.stabilization.video_io import FrameSource

    frames = list(islice(FrameSource(os.fspath(path)), count))
    if len(frames) < 4:
        raise ValueError(f"{path}: read {len(frames)} frames, need at least 4")
    return frames


def video_fps(path, default: float = 25.0) -> float:
    """The frame rate a video file declares (``default`` when it declares none)."""
    cap = cv2.VideoCapture(os.fspath(path))
    fps = float(cap.get(cv2.CAP_PROP_FPS) or 0) or default
    cap.release()
    return fps
