"""Reading images from disk (one place, one error wording).

Damaged or misleading files are refused with a ValueError naming the file instead of being
processed silently (docs/what_the_tools_refuse.md):

* a truncated JPEG (its data ends before the end-of-image marker): OpenCV would decode it with
  the missing part grey and only print a libjpeg warning;
* a 16-bit image whose values all stay below 4096 (e.g. 12-bit sensor data in a 16-bit PNG):
  converted to 8 bits it would be almost black (at most 15 of 255). Full-range 16-bit images
  are read as OpenCV reads them (the top 8 bits);
* a float image (32-bit TIFF, EXR, PFM) must hold values in [0, 1] (the usual convention for
  float images: 0 black, 1 white); they are scaled to 0..255 and rounded. Values outside
  [0, 1] (beyond :data:`FLOAT_RANGE_SLACK`, e.g. 0..255 floats or HDR radiance) or NaN/inf are
  refused with the range found, since any fixed mapping of them would be a guess.
"""

from __future__ import annotations

import os
import struct

import cv2
import numpy as np

__all__ = ["read_rgb", "jpeg_is_truncated"]

#: A 16-bit image whose maximum is below this is refused (it holds at most 12 significant bits).
MIN_16BIT_PEAK = 4096

#: Float images may stray this far outside [0, 1] (rounding in the tool that wrote them).
FLOAT_RANGE_SLACK = 1e-3

_NO_LENGTH_MARKERS = set(range(0xD0, 0xD8)) | {0x01, 0xD8}  # RSTn, TEM, SOI
_CHUNK = 1 << 16


def jpeg_is_truncated(path) -> bool:
    """True for a JPEG (by its magic bytes) whose data ends before its end-of-image marker.

    The marker segments are walked up to the first start-of-scan (so an EXIF thumbnail's own
    end marker is skipped); after it, entropy-coded data cannot contain ``FF D9`` except as the
    real end marker (``FF`` bytes are stuffed), which must follow. Non-JPEG files: False.
    """
    with open(path, "rb") as f:
        if f.read(2) != b"\xff\xd8":
            return False
        while True:
            b = f.read(1)
            if not b:
                return True  # ended inside the header
            if b != b"\xff":
                return False  # not a marker: malformed; the decoder will say so
            marker = f.read(1)
            while marker == b"\xff":  # fill bytes
                marker = f.read(1)
            if not marker:
                return True
            m = marker[0]
            if m in _NO_LENGTH_MARKERS:
                continue
            if m == 0xD9:
                return False  # end of image before any scan: the decoder will refuse it
            raw = f.read(2)
            if len(raw) < 2:
                return True
            (length,) = struct.unpack(">H", raw)
            if m == 0xDA:  # start of scan: entropy-coded data follows
                break
            f.seek(length - 2, os.SEEK_CUR)
        scan_start = f.tell()
        size = f.seek(0, os.SEEK_END)
        # Fast path: the end marker sits at (or near) the end of the file.
        tail = max(scan_start, size - _CHUNK)
        f.seek(tail)
        if b"\xff\xd9" in f.read():
            return False
        # Slow path (trailing data after the image, or truncated): scan the whole remainder.
        f.seek(scan_start)
        prev = b""
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return True
            if b"\xff\xd9" in prev + chunk:
                return False
            prev = chunk[-1:]


def _float_to_uint8(img: np.ndarray, path: str) -> np.ndarray:
    finite = np.isfinite(img)
    if not finite.all():
        raise ValueError(f"image {path} holds {int((~finite).sum())} NaN/inf values")
    lo, hi = float(img.min(initial=0.0)), float(img.max(initial=0.0))
    if lo < -FLOAT_RANGE_SLACK or hi > 1 + FLOAT_RANGE_SLACK:
        raise ValueError(f"image {path} is a float image with values in [{lo:g}, {hi:g}]; float "
                         "images are read as 0 = black, 1 = white, so values must lie in [0, 1]: "
                         "scale it (or save it as 8/16-bit) first")
    return np.round(np.clip(img, 0.0, 1.0) * 255.0).astype(np.uint8)


def read_rgb(path) -> np.ndarray:
    """uint8 RGB ``[H, W, 3]`` (EXIF orientation applied); FileNotFoundError / ValueError naming
    the file otherwise (see the module doc for what is refused)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"image not found: {path}")
    try:
        truncated = jpeg_is_truncated(path)
    except OSError as e:
        raise ValueError(f"cannot read image {path}: {e}") from None
    if truncated:
        raise ValueError(f"image {path} is a truncated JPEG (its data ends before the end-of-image "
                         "marker; part of it would decode as grey): re-export or re-copy it")
    img = cv2.imread(path, cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH)
    if img is None:
        raise ValueError(f"cannot decode image {path}")
    if img.dtype == np.uint16:
        peak = int(img.max(initial=0))
        if peak < MIN_16BIT_PEAK:
            raise ValueError(f"image {path} is 16-bit but its values stay below {MIN_16BIT_PEAK} (max "
                             f"{peak}: 12-bit or less data?); read as 16-bit it would be almost black. "
                             "Scale it to the full 16-bit range or convert it to 8-bit first")
        img = (img >> 8).astype(np.uint8)  # what cv2.IMREAD_COLOR does
    elif img.dtype.kind == "f":  # float TIFF / EXR / PFM: values in [0, 1] (module doc)
        img = _float_to_uint8(img, path)
    elif img.dtype != np.uint8:
        raise ValueError(f"image {path} has {img.dtype} samples; 8-bit, 16-bit or float images "
                         "(values in [0, 1]) are read")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
