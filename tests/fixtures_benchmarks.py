"""Builders of tiny benchmark-format fixtures (GHOF-Cam file, GHOF file, CAHomo folder).

Everything is generated in the test's tmp_path from a seed; no data is committed. Image pairs
are related by a known homography H (image-1 pixels -> image-2 pixels), so the true forward
flow of every pair is H(p) - p.
"""

from __future__ import annotations

import os

import cv2
import numpy as np

GHOF_SPLITS = ("RE", "Fog", "Dark", "Rain", "SNOW")
# (video id, expected category) — 0000030 must count as RE; 9999999 is in no category.
CAHOMO_VIDEOS = (("0000011", "RE"), ("0000030", "RE"), ("0000038", "LT"), ("0000085", "LL"),
                 ("00000244", "SF"), ("00000104", "LF"))


def textured_image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """uint8 RGB collage of random discs and boxes (plenty of corners for SIFT / ORB)."""
    img = np.full((h, w, 3), 128, np.uint8)
    for _ in range(h * w // 60):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        r = int(rng.integers(2, max(3, min(h, w) // 10)))
        if rng.random() < 0.5:
            cv2.circle(img, (x, y), r, colour, -1, lineType=cv2.LINE_AA)
        else:
            cv2.rectangle(img, (x, y), (x + r, y + int(rng.integers(2, r + 2))), colour, -1)
    return cv2.GaussianBlur(img, (0, 0), 0.8)


def random_homography(rng: np.random.Generator, h: int, w: int, jitter: float) -> np.ndarray:
    """Homography moving the 4 corners by up to ``jitter`` px."""
    src = np.float32([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]])
    dst = src + rng.uniform(-jitter, jitter, (4, 2)).astype(np.float32)
    return cv2.getPerspectiveTransform(src, dst).astype(np.float64)


def homography_flow(H: np.ndarray, h: int, w: int) -> np.ndarray:
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    pts = np.stack([xs, ys, np.ones_like(xs)], -1) @ np.asarray(H, np.float64).T
    return (pts[..., :2] / pts[..., 2:3] - np.stack([xs, ys], -1)).astype(np.float32)


def make_pair(rng: np.random.Generator, h: int, w: int, jitter: float = 4.0):
    """(img1, img2, H) with img2 = img1 warped by H, so img2(H p) = img1(p)."""
    img1 = textured_image(rng, h, w)
    H = random_homography(rng, h, w, jitter)
    img2 = cv2.warpPerspective(img1, H, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    return img1, img2, H


def _save_object_array(path: str, items: list) -> None:
    arr = np.empty(len(items), dtype=object)
    for i, it in enumerate(items):
        arr[i] = it
    np.save(path, arr, allow_pickle=True)


def make_ghof_cam(path: str, per_split: int = 2, h: int = 48, w: int = 64, seed: int = 0) -> list[dict]:
    """Writes a GHOF-Cam-format ``.npy`` and returns the raw sample dicts."""
    rng = np.random.default_rng(seed)
    items = []
    for split in GHOF_SPLITS:
        for _ in range(per_split):
            img1, img2, H = make_pair(rng, h, w)
            homo = homography_flow(H, h, w)
            gt = homo.copy()
            gt[h // 2:, : w // 3] += rng.normal(0, 1.5, (h - h // 2, w // 3, 2)).astype(np.float32)  # parallax
            mask = np.ones((h, w), np.float32)
            y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
            mask[y0:y0 + h // 4, x0:x0 + w // 4] = 0  # a "moving object"
            items.append({"img1": img1, "img2": img2, "split": split, "mask": mask,
                          "gt_flow": gt * mask[..., None], "homo_field": homo})
    _save_object_array(path, items)
    return items


def make_ghof_benchmark(path: str, h: int = 40, w: int = 48, seed: int = 1, bands: int = 4,
                        clean: bool = True) -> list[dict]:
    """Writes a GHOF_Clean/Final-format ``.npy`` with band-wise gyro homographies ``[bands, 9]``."""
    rng = np.random.default_rng(seed)
    items = []
    for split in GHOF_SPLITS:
        img1, img2, H = make_pair(rng, h, w)
        homo = np.stack([random_homography(rng, h, w, 2.0).reshape(9) for _ in range(bands)])
        it = {"img1": img1, "img2": img2, "split": split, "homo": homo,
              "gt_flow": homography_flow(H, h, w)}
        if clean:
            it["homo_field"] = homography_flow(H, h, w)
        items.append(it)
    _save_object_array(path, items)
    return items


def make_cahomo(root: str, pairs_per_video: int = 2, h: int = 108, w: int = 192, seed: int = 2) -> list[dict]:
    """Writes a CAHomo-format folder (test.txt, img/, pt/) and returns per-pair truth.

    Some lines carry the public list's ``LM`` marks; one LM pair stores its point file under the
    original release's name (marks kept); one line names a video in no category.
    """
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "pt"), exist_ok=True)
    lines, truth = [], []
    frame = 10001
    for vid, cat in CAHOMO_VIDEOS + (("9999999", None),):
        os.makedirs(os.path.join(root, "img", vid), exist_ok=True)
        for k in range(pairs_per_video):
            img1, img2, H = make_pair(rng, h, w, jitter=6.0)
            f1, f2 = f"{vid}_{frame}.jpg", f"{vid}_{frame + 4}.jpg"
            frame += 10
            for name, img in ((f1, img1), (f2, img2)):
                cv2.imwrite(os.path.join(root, "img", vid, name), cv2.cvtColor(img, cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, 98])
            marked = (k % 2 == 1)
            mark = "LM" if marked else ""
            lines.append(f"{vid}/{f1}{mark} {vid}/{f2}{mark}")
            p1 = rng.uniform([4, 4], [w - 5, h - 5], (8, 2))
            q = np.c_[p1, np.ones(8)] @ H.T
            p2 = q[:, :2] / q[:, 2:]
            pairs = [[tuple(a), tuple(b)] for a, b in zip(p1, p2)]
            pt_name = f"{f1}{mark}_{f2}{mark}.npy" if (marked and cat == "RE") else f"{f1}_{f2}.npy"
            np.save(os.path.join(root, "pt", pt_name), {"path1": f1, "path2": f2, "matche_pts": pairs})
            if cat is not None:
                truth.append({"category": cat, "video": vid, "H": H, "points": np.asarray(pairs, float),
                              "key": f"{vid}_{frame - 10}_{vid}_{frame - 6}"})
    with open(os.path.join(root, "test.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return truth
