"""Middlebury ``.flo`` optical-flow files.

Layout (little endian): float32 magic 202021.25 (the bytes "PIEH"), int32 width, int32 height,
then ``height * width * 2`` float32 values, row-major, (u, v) interleaved per pixel. Width comes
before height (some readers get this backwards).
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["FLO_MAGIC", "write_flo", "read_flo"]

FLO_MAGIC = 202021.25
_MAX_SIDE = 1 << 16  # sanity bound against reading garbage as a huge allocation


def write_flo(path: str | os.PathLike, flow) -> None:
    """Writes a flow ``[H, W, 2]`` (u, v in pixels) as a Middlebury ``.flo`` file."""
    f = np.asarray(flow, dtype=np.float32)
    if f.ndim != 3 or f.shape[-1] != 2:
        raise ValueError(f"flow must be [H, W, 2], got shape {f.shape}")
    h, w = f.shape[:2]
    # Python's own writes, not ndarray.tofile: an exception raised by a signal handler (the
    # CLIs' SIGTERM) inside tofile came out as a TypeError naming the file object
    with open(path, "wb") as fh:
        fh.write(np.array([FLO_MAGIC], "<f4").tobytes())
        fh.write(np.array([w, h], "<i4").tobytes())
        fh.write(np.ascontiguousarray(f, dtype="<f4").tobytes())


def read_flo(path: str | os.PathLike) -> np.ndarray:
    """Reads a Middlebury ``.flo`` file into float32 ``[H, W, 2]``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"flow file not found: {path}")
    with open(path, "rb") as fh:
        header = fh.read(12)
        if len(header) < 12:
            raise ValueError(f"{path}: too short to be a .flo file ({len(header)} bytes)")
        magic = np.frombuffer(header[:4], "<f4")[0]
        if magic != np.float32(FLO_MAGIC):
            raise ValueError(f"{path}: bad .flo magic {magic!r} (expected {FLO_MAGIC}, 'PIEH')")
        w, h = (int(v) for v in np.frombuffer(header[4:12], "<i4"))
        if not (0 < w < _MAX_SIDE and 0 < h < _MAX_SIDE):
            raise ValueError(f"{path}: implausible .flo size {w} x {h}")
        data = np.fromfile(fh, "<f4", count=2 * w * h)
    if data.size != 2 * w * h:
        raise ValueError(f"{path}: truncated .flo data ({data.size} of {2 * w * h} values)")
    return data.reshape(h, w, 2).astype(np.float32)
