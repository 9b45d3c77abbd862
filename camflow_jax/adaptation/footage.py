"""The footage to learn from: frames of videos and frame folders, and their consecutive pairs.

Plain numpy (the readers are :class:`camflow_jax.io.video.FrameSource`'s): no JAX here.
"""

from __future__ import annotations

import dataclasses
import os
from itertools import islice

import numpy as np

from camflow_jax.io.video import FrameSource

__all__ = ["Clip", "read_clips", "clip_pairs", "split_pairs", "footage_inputs", "MIN_FRAMES"]

#: A clip needs this many frames (two pairs) to give a pair to learn from and one to hold out.
MIN_FRAMES = 3


@dataclasses.dataclass
class Clip:
    """One video or frame folder: ``frames`` RGB uint8 ``[T, H, W, 3]`` (all of one size)."""
    name: str
    frames: np.ndarray
    fps: float = 30.0

    @property
    def size_hw(self) -> tuple[int, int]:
        return tuple(self.frames.shape[1:3])


def read_clips(inputs, max_frames: int | None = None) -> list[Clip]:
    """The frames of each input (a video file or a folder of images), at most ``max_frames``
    each (None: all). ValueError naming the input when it holds fewer than :data:`MIN_FRAMES`
    frames or frames of several sizes; FileNotFoundError for a missing input."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    clips = []
    for path in inputs:
        src = FrameSource(os.fspath(path))
        frames = list(islice(iter(src), max_frames)) if max_frames else list(src)
        if len(frames) < MIN_FRAMES:
            raise ValueError(f"{path}: {len(frames)} frame(s); adapting needs at least {MIN_FRAMES} "
                             "(pairs to learn from and pairs to check on)")
        shapes = {f.shape for f in frames}
        if len(shapes) > 1:
            raise ValueError(f"{path}: frames of several sizes {sorted(shapes)}; give frames of one size")
        clips.append(Clip(os.path.basename(os.path.normpath(os.fspath(path))) or os.fspath(path),
                          np.stack(frames), float(getattr(src, "fps", 30.0) or 30.0)))
    if not clips:
        raise ValueError("no footage given")
    return clips


def footage_inputs(path) -> list[str]:
    """The clips of ``path``: a video file, a folder of frames (one clip), or a folder of videos
    and frame folders (each one clip, in name order). ValueError when it holds none."""
    from camflow_jax.io.video import IMAGE_EXTENSIONS, is_video_path

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"footage not found: {path}")
    if not os.path.isdir(path):
        return [path]
    names = sorted(n for n in os.listdir(path) if not n.startswith("."))
    if any(os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS for n in names):
        return [path]
    found = []
    for n in names:
        p = os.path.join(path, n)
        if os.path.isdir(p) and any(os.path.splitext(m)[1].lower() in IMAGE_EXTENSIONS for m in os.listdir(p)):
            found.append(p)
        elif os.path.isfile(p) and is_video_path(p):
            found.append(p)
    if not found:
        raise ValueError(f"{path} holds no video and no folder of frames")
    return found


def clip_pairs(clips: list[Clip], gap: int = 1) -> list[tuple[int, int, int]]:
    """``(clip index, t, t + gap)`` for every pair of frames ``gap`` apart, in clip order."""
    if gap < 1:
        raise ValueError(f"gap must be >= 1, got {gap}")
    return [(c, t, t + gap) for c, clip in enumerate(clips) for t in range(len(clip.frames) - gap)]


def split_pairs(pairs: list, holdout: float = 0.125, *, every: bool = True) -> tuple[list[int], list[int]]:
    """``(train, held)`` indices into ``pairs``. ``every`` (the default): every k-th pair is held
    out (k = round(1 / holdout)), spread over the footage; else the last ``holdout`` share of
    each clip (a split by time: the pairs held out come after every pair learned from). At least
    one pair is held out and at least one learned from (when there are two)."""
    n = len(pairs)
    if not 0 < holdout < 1:
        raise ValueError(f"holdout must be a share in (0, 1), got {holdout}")
    if n < 2:
        raise ValueError(f"{n} pair(s): at least 2 are needed (one to learn from, one to check on)")
    if every:
        k = max(2, round(1 / holdout))
        held = [i for i in range(n) if i % k == k // 2] or [n - 1]
    else:
        held = []
        for c in sorted({p[0] for p in pairs}):
            idx = [i for i, p in enumerate(pairs) if p[0] == c]
            m = max(1, int(round(len(idx) * holdout)))
            held += idx[len(idx) - m:] if len(idx) > m else idx[-1:]
    held_set = set(held)
    train = [i for i in range(n) if i not in held_set]
    if not train:
        train, held = held[:-1], held[-1:]
    return train, sorted(held)
