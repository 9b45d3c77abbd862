"""A video's display matrix: how players turn or mirror its coded frames (a phone's portrait
clip is often stored landscape with a 90-degree matrix), and how :class:`camflow_jax.io.video.
FrameSource` reads such frames upright. numpy only; the frame and stream are PyAV's."""

from __future__ import annotations

import numpy as np

__all__ = ["display_matrix", "orientation", "upright", "orientation_note"]


def display_matrix(frame, stream) -> np.ndarray | None:
    """The 2x2 part of a video's display matrix (libavutil/display.h: a coded pixel (x, y)
    is shown at (a x + c y, b x + d y); returned as [[a, c], [b, d]]), from the decoded
    frame's side data (FFmpeg 7 and later attach the container's matrix to every frame; PyAV
    14 and later read it as ``frame.rotation``), else the rotation alone: PyAV 12-13's
    ``stream.side_data["DISPLAYMATRIX"]`` (degrees counter-clockwise, ffprobe's sign) or the
    legacy ``rotate`` tag (degrees clockwise); None when there is none of them."""
    for sd in getattr(frame, "side_data", None) or ():
        kind = getattr(sd, "type", None)
        if str(getattr(kind, "name", kind)).endswith("DISPLAYMATRIX"):
            m = np.frombuffer(bytes(sd), np.int32).astype(np.float64)
            if m.size == 9:
                return np.array([[m[0], m[3]], [m[1], m[4]]]) / 65536.0
    side = getattr(stream, "side_data", None)
    ccw = side.get("DISPLAYMATRIX") if isinstance(side, dict) else None
    if ccw is None:
        tag = (getattr(stream, "metadata", None) or {}).get("rotate")
        ccw = None if tag is None else -_number(tag)
    if ccw is None or not np.isfinite(ccw) or float(ccw) % 360 == 0:
        return None
    a = np.deg2rad(float(ccw))
    return np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def orientation(frame, stream, path: str) -> tuple | None:
    """(transpose, flip left-right, flip up-down, the matrix) that turns decoded frames
    upright as players show them, None when they are upright already. A display matrix that is
    not a quarter turn or a mirror (e.g. 45 degrees) is refused (ValueError)."""
    r = display_matrix(frame, stream)
    if r is None:
        return None
    q = np.rint(r)
    ones = np.abs(q)
    signed_permutation = ((ones <= 1).all() and ones.sum(axis=0).tolist() == [1, 1]
                          and ones.sum(axis=1).tolist() == [1, 1])
    if not (np.allclose(r, q, atol=1e-3) and signed_permutation):
        angle = float(np.degrees(np.arctan2(-r[1, 0], r[0, 0]))) + 0.0  # + 0.0: no "-0.0"
        sx, sy = np.hypot(r[0, 0], r[1, 0]), np.hypot(r[0, 1], r[1, 1])
        what = (f"scales the picture by {sx:.3g} x {sy:.3g}" if abs(round(angle, 1)) % 90 == 0
                else f"turns the picture by {angle:.1f} degrees, not a multiple of 90")
        raise ValueError(f"{path}: its display matrix {what}: re-encode it upright first "
                         "(ffmpeg -i IN -c:a copy OUT.mp4 applies the display matrix)")
    q = q.astype(int)
    if (q == np.eye(2, dtype=int)).all():
        return None
    if q[0, 0] == 0:  # x' = c y, y' = b x
        return True, q[0, 1] < 0, q[1, 0] < 0, q
    return False, q[0, 0] < 0, q[1, 1] < 0, q


def upright(arr: np.ndarray, orient: tuple | None) -> np.ndarray:
    if orient is None:
        return arr
    transpose, flip_x, flip_y, _ = orient
    if transpose:
        arr = arr.transpose(1, 0, 2)
    if flip_x:
        arr = arr[:, ::-1]
    if flip_y:
        arr = arr[::-1]
    return np.ascontiguousarray(arr)


def orientation_note(orient: tuple, path: str, width: int, height: int) -> str:
    q = orient[3]
    coded = f"{height}x{width}" if orient[0] else f"{width}x{height}"
    if np.linalg.det(q) > 0:
        angle = int(round(np.degrees(np.arctan2(-q[1, 0], q[0, 0]))))
        how = f"turns the {coded} coded frames by {angle:+d} degrees (ffprobe's rotation)"
    else:
        how = f"mirrors{' and turns' if orient[0] else ''} the {coded} coded frames"
    return (f"{path}: its display matrix {how}: they are read upright ({width}x{height}), as "
            "players show them, and the output is written upright with no display matrix")
