"""Random-access training sources (grain ``RandomAccessDataSource`` protocol: ``len``, ``[i]``).

Every source yields a *training pair* dict of numpy arrays at its native resolution:

  img1, img2            uint8 [H, W, 3] RGB
  flow_f, flow_b        float32 [H, W, 2] motion pseudo-labels (image-1 grid / image-2 grid)
  label_mask_f/_b       float32 [H, W]  1 where the label is trusted
  depth1, depth2, K     float32 [H, W], [H, W], [4]  (only when the source has depth)
  category_id           int32

Readers validate what they open and name the file that is missing or malformed.
"""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

from camflow_jax.data.benchmarks import GHOF_INTRINSICS, bandwise_homography_flow
from camflow_jax.data.depth import check_depth_aspect, resize_depth
from camflow_jax.geometry import classical, host
from camflow_jax.io.images import read_rgb

_IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp")
_VIDEO_EXTS = (".mp4", ".avi", ".mov", ".mkv", ".m4v", ".webm")


def homography_pair_labels(H: np.ndarray, h: int, w: int) -> dict:
    """Forward label from H (image 1 -> 2) and backward label from its inverse."""
    H = np.asarray(H, np.float64)
    return {"flow_f": host.homography_flow(H, h, w),
            "flow_b": host.homography_flow(np.linalg.inv(H), h, w),
            "label_mask_f": np.ones((h, w), np.float32), "label_mask_b": np.ones((h, w), np.float32)}


def _load_homographies(path: Path) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"missing pseudo-label file {path}")
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as e:  # numpy raises several types for damaged files
        raise ValueError(f"cannot read {path}: {e}") from e
    arr = np.asarray(arr, np.float64)
    if arr.ndim == 2 and arr.shape[1] == 9:
        arr = arr.reshape(-1, 3, 3)
    if arr.ndim != 3 or arr.shape[1:] != (3, 3) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{path}: expected finite homographies of shape (N, 3, 3) or (N, 9), got {arr.shape}")
    return arr


class GhofTrain:
    """GHOF training folders ``ROOT/sample_*/{img1.png, img2.png, gyro_homo.npy}``.

    Labels: the band-wise gyro homography flow (forward) and the band-wise inverse homographies
    (backward; bands taken on image-2 rows — an approximation the release makes too).
    ``depth_pattern`` like ``"depth{}.npy"`` adds depth1/depth2 (any estimator, any scale) and
    the GHOF intrinsics.
    """

    def __init__(self, root, depth_pattern: str = ""):
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"GHOF training folder {self.root} does not exist")
        self.samples = sorted(p for p in self.root.iterdir() if p.is_dir() and p.name.startswith("sample"))
        if not self.samples:
            raise FileNotFoundError(f"{self.root} has no sample_* folders (expected sample_i/img1.png, img2.png, gyro_homo.npy)")
        if depth_pattern and "{}" not in depth_pattern:
            raise ValueError(f"depth_pattern must contain '{{}}' (replaced by 1 and 2), got {depth_pattern!r}")
        self.depth_pattern = depth_pattern

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        d = self.samples[i]
        img1, img2 = read_rgb(d / "img1.png"), read_rgb(d / "img2.png")
        h, w = img1.shape[:2]
        homos = _load_homographies(d / "gyro_homo.npy")
        out = {"img1": img1, "img2": img2, "category_id": np.int32(0),
               "flow_f": bandwise_homography_flow(homos, h, w),
               "flow_b": bandwise_homography_flow(np.linalg.inv(homos), h, w),
               "label_mask_f": np.ones((h, w), np.float32), "label_mask_b": np.ones((h, w), np.float32)}
        if self.depth_pattern:
            for k in (1, 2):
                f = d / self.depth_pattern.format(k)
                if not f.is_file():
                    raise FileNotFoundError(f"missing depth file {f} (data.depth_pattern={self.depth_pattern!r})")
                dep = np.load(f).astype(np.float32)
                dep = dep.reshape(dep.shape[:2]) if dep.ndim == 3 and dep.shape[-1] == 1 else dep
                if dep.ndim != 2:
                    raise ValueError(f"{f}: depth must be [H, W], got shape {dep.shape}")
                check_depth_aspect(dep.shape, (h, w), str(f))
                out[f"depth{k}"] = resize_depth(dep, h, w)
            sx, sy = w / 800.0, h / 600.0
            out["K"] = np.asarray(GHOF_INTRINSICS, np.float32) * np.array([sx, sy, sx, sy], np.float32)
        return out


class CahomoTrain:
    """CAHomo-style pairs with precomputed pseudo homographies.

    ``ROOT/train.txt``: lines ``VIDEO/FILE1 VIDEO/FILE2`` (trailing marks ignored), images under
    ``ROOT/img/``; ``ROOT/train_homographies.npy``: ``(N, 3, 3)`` homographies image 1 -> 2, one
    per line (e.g. from :func:`camflow_jax.geometry.classical.feature_homography`).
    """

    def __init__(self, root):
        self.root = Path(root)
        lst = self.root / "train.txt"
        if not lst.is_file():
            raise FileNotFoundError(f"missing {lst} (lines 'VIDEO/FILE1 VIDEO/FILE2')")
        self.pairs = []
        for n, line in enumerate(lst.read_text().splitlines(), 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 2:
                raise ValueError(f"{lst}:{n}: expected two image names, got {line!r}")
            self.pairs.append((parts[0], parts[1]))
        self.homographies = _load_homographies(self.root / "train_homographies.npy")
        if len(self.homographies) != len(self.pairs):
            raise ValueError(f"{len(self.pairs)} pairs in train.txt but {len(self.homographies)} homographies")

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        a, b = self.pairs[i]
        img1 = read_rgb(self.root / "img" / os.path.basename(a))
        img2 = read_rgb(self.root / "img" / os.path.basename(b))
        h, w = img1.shape[:2]
        return {"img1": img1, "img2": img2, "category_id": np.int32(0),
                **homography_pair_labels(self.homographies[i], h, w)}


def _header_size(path: Path) -> tuple[int, int] | None:
    """(width, height) of an image as it is read (EXIF orientation applied), from its header
    only; None where the header cannot be read (the read itself then names the file)."""
    try:
        from PIL import Image
    except ImportError:
        return None
    try:
        with Image.open(path) as im:
            w, h = im.size
            turned = im.getexif().get(0x0112, 1) in (5, 6, 7, 8)  # EXIF orientation: a quarter turn
    except Exception:  # noqa: BLE001 (PIL raises many kinds for what it cannot parse)
        return None
    return (h, w) if turned else (w, h)


def _check_frame_sizes(frames: list[Path]) -> None:
    """Every frame of a folder the size of its first one (headers only; ValueError naming the
    first that differs): one odd-sized frame used to end the training at its batch, many steps
    in, in grain's words ("same structure"), naming no file."""
    first = None
    for p in frames:
        size = _header_size(p)
        if size is None:
            continue
        if first is None:
            first = (p, size)
        elif size != first[1]:
            raise ValueError(f"frame {p} is {size[0]}x{size[1]}, the other frames of its folder are "
                             f"{first[1][0]}x{first[1][1]} ({first[0].name}): every frame of a folder must have one size")


class FramePairs:
    """Adaptation to one's own footage: pairs (t, t + gap) from folders of frames or videos,
    labelled on the fly by SIFT + MAGSAC++ homographies (pairs where that fails get an
    all-zero label mask, so they contribute nothing to the motion term)."""

    def __init__(self, root, gap: int = 1):
        self.root = Path(root)
        if not self.root.exists():
            raise FileNotFoundError(f"frames folder {self.root} does not exist")
        if gap < 1:
            raise ValueError(f"frame_gap must be >= 1, got {gap}")
        self.gap = gap
        self.clips = []  # (kind, path, frames list or count)
        candidates = [self.root] + sorted(p for p in self.root.rglob("*") if p.is_dir())
        for folder in candidates:
            frames = sorted(p for p in folder.iterdir() if p.suffix.lower() in _IMAGE_EXTS)
            if len(frames) > gap:
                _check_frame_sizes(frames)
                self.clips.append(("frames", folder, frames))
        for video in sorted(p for p in self.root.rglob("*") if p.suffix.lower() in _VIDEO_EXTS):
            cap = cv2.VideoCapture(str(video))
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else 0
            cap.release()
            if count > gap:
                self.clips.append(("video", video, count))
        self.index = [(c, t) for c, (_, _, fr) in enumerate(self.clips)
                      for t in range((len(fr) if isinstance(fr, list) else fr) - gap)]
        if not self.index:
            raise FileNotFoundError(f"{self.root} holds no frame folders or readable videos with more than {gap} frames")

    def __len__(self):
        return len(self.index)

    def _frame(self, clip, t):
        kind, path, frames = self.clips[clip]
        if kind == "frames":
            return read_rgb(frames[t])
        cap = cv2.VideoCapture(str(path))
        cap.set(cv2.CAP_PROP_POS_FRAMES, t)
        ok, img = cap.read()
        cap.release()
        if not ok:
            raise ValueError(f"cannot decode frame {t} of {path}")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    def __getitem__(self, i):
        clip, t = self.index[i]
        img1, img2 = self._frame(clip, t), self._frame(clip, t + self.gap)
        h, w = img1.shape[:2]
        if img2.shape[:2] != (h, w):  # a frame whose header did not say it (the check above)
            kind, path, frames = self.clips[clip]
            names = (frames[t], frames[t + self.gap]) if kind == "frames" else (f"{path} frame {t}", f"frame {t + self.gap}")
            raise ValueError(f"{names[0]} is {w}x{h} but {names[1]} is {img2.shape[1]}x{img2.shape[0]}: "
                             "every frame of a folder must have one size")
        H = classical.feature_homography(img1, img2, "sift", "magsac")
        labels = homography_pair_labels(np.eye(3) if H is None else H, h, w)
        if H is None:
            labels["label_mask_f"][:] = 0
            labels["label_mask_b"][:] = 0
        return {"img1": img1, "img2": img2, "category_id": np.int32(0), **labels}


class SyntheticPairs:
    """Adapter from :class:`camflow_jax.data.synthetic.scenes.SyntheticScenes` samples to training pairs.

    label='flow': the geometric camera flow on valid pixels; label='homography': the flow of
    the best-fit homography everywhere (like GHOF's gyro pseudo-label).
    """

    def __init__(self, scenes, label: str = "flow"):
        if label not in ("flow", "homography"):
            raise ValueError(f"data.label must be 'flow' or 'homography', got {label!r}")
        self.scenes, self.label = scenes, label

    def __len__(self):
        return len(self.scenes)

    def __getitem__(self, i):
        s = self.scenes[i]
        out = {k: s[k] for k in ("img1", "img2", "depth1", "depth2", "K")}
        out["category_id"] = np.int32(s["category_id"])
        out["gt_flow_f"], out["gt_valid_f"] = s["flow_f"], s["valid_f"].astype(np.float32)
        if self.label == "flow":
            out.update(flow_f=s["flow_f"], flow_b=s["flow_b"], label_mask_f=s["valid_f"].astype(np.float32),
                       label_mask_b=s["valid_b"].astype(np.float32))
        else:
            h, w = s["img1"].shape[:2]
            out.update(homography_pair_labels(s["homography"], h, w))
        return out
