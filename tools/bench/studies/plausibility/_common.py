"""Shared pieces of the exposure, blur and zoom studies of this package: the scratch folder
(``--work``), the cached synthetic benchmark (written by :mod:`.render_benchmark`), the
image changes they apply and the opencv-doc frames they read."""
import os
import tempfile

import cv2
import numpy as np

from tools.bench.opencv_doc import OPENCV_DOC, VIDEO_FILE

#: Default ``--work`` folder: the rendered benchmarks and the saved flows live there.
DEFAULT_WORK = os.path.join(tempfile.gettempdir(), "camflow_plausibility")


def add_work_arg(ap):
    ap.add_argument("--work", default=DEFAULT_WORK,
                    help=f"scratch folder shared by these studies (default {DEFAULT_WORK})")


def bench_path(work, seed: int) -> str:
    """The npz :mod:`.render_benchmark` writes for ``seed`` in ``work``."""
    return os.path.join(work, f"bench{seed}.npz")


def load_bench(work, seed: int):
    path = bench_path(work, seed)
    if not os.path.exists(path):
        raise SystemExit(f"{path} missing: run python -m tools.bench.studies.plausibility.render_benchmark "
                         f"--seed {seed} --work {work} first")
    return np.load(path)


def darken(img, k):
    """Image ``img`` (uint8) scaled by ``k`` (a fraction) or, for ``"g1.8"``, put through gamma 1.8;
    ``None`` or ``"none"``: unchanged."""
    if k is None or k == "none":
        return img
    if k == "g1.8":
        return np.clip(np.rint(255.0 * (img / 255.0) ** 1.8), 0, 255).astype(np.uint8)
    return np.clip(np.rint(img * float(k)), 0, 255).astype(np.uint8)


def zoom_about_centre(img, s):
    """Image ``img`` zoomed ``s`` times about (w/2, h/2) (the zoom probes of issue 63)."""
    h, w = img.shape[:2]
    M = cv2.getRotationMatrix2D((w / 2, h / 2), 0, s)
    return cv2.warpAffine(img, M, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def doc_path(name: str) -> str:
    return os.path.join(OPENCV_DOC, name)


def read_image(name: str, rgb: bool = False):
    img = cv2.imread(doc_path(name))
    if img is None:
        raise SystemExit(f"cannot read {doc_path(name)}: needs Debian's opencv-doc package")
    return img[..., ::-1].copy() if rgb else img


def vtest_frames(count=None, rgb: bool = False):
    """The first ``count`` frames of opencv-doc's vtest.avi (all with None), BGR or RGB uint8."""
    cap = cv2.VideoCapture(doc_path(VIDEO_FILE))
    frames = []
    while count is None or len(frames) < count:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f[..., ::-1].copy() if rgb else f)
    cap.release()
    if not frames:
        raise SystemExit(f"cannot read {doc_path(VIDEO_FILE)}: needs Debian's opencv-doc package")
    return frames
