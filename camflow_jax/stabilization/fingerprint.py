"""The source fingerprint of a motion file: which video its motion was measured on (issue 44).

``--export-motion`` writes it into the file's header (key ``source``); ``--path`` compares it
with the input before the motion is applied. Without it, the motion of another video of the
same size and length was applied with exit code 0 and no warning (a stabilized 0.97 fell to
0.30). The frame size and the frame count are checked by their own rules (the file's
``frame_size`` / ``num_frames``; never overridable: the motion cannot be rendered on other
frames); the fingerprint adds what tells two such videos apart:

* ``times_sha256`` / ``duration_s``: SHA-256 of the first ``num_frames`` presentation times
  (sorted, relative to the first, in whole microseconds, little-endian int64) and their span;
  None for inputs without timestamps (frame folders). Read from the container (no decoding),
  before ``--fps`` replaces them; compared when the input holds at least that many.
* ``frames``: for every frame of a clip up to 120 frames, else 120 evenly spaced ones, first,
  middle and last included (:func:`sample_indices`), ``sha256`` of the
  decoded RGB bytes (as the stabilizer reads them: upright, ``[H, W, 3]`` uint8, row-major) and
  ``thumbnail``: a 16x16 grey image (Rec. 601 luma, area means, rounded to uint8; hex).
  Frames are *the same* when their thumbnails differ by at most :data:`TOLERANCE` grey levels
  in every cell; the exact hash only adds a note when the pictures match but the bytes differ.
  Why not the exact bytes alone: they are not stable across decoders. Measured on a 10-bit
  H.264 / HEVC clip (320x240; phone videos are often 10-bit), PyAV's rgb24 against the
  ffmpeg 5.1 command line and OpenCV differed by up to 57 grey levels per pixel (mean 3), and
  PyAV against itself with bicubic conversion by 30; the thumbnails by at most 1.02. 8-bit
  H.264, MPEG-4 and Motion-JPEG decoded bit-identically there. Two different videos differ by
  far more: two shakes of one still image by 36-63 levels, two planar clips by 90-106.
* ``name``: the exported video's file name, for messages only (a renamed video matches).

The frames are hashed as the render pass decodes them, so exporting costs no extra decoding;
checking (:class:`Check`, the one rule) compares the timing and frame 0 before any work, and
the other sampled frames as the render pass reaches them; a difference is refused before any
work when it is known then and the input holds the file's number of frames, else after the
render pass (where the frame-count rule speaks first), before any output is moved into place.
"""

from __future__ import annotations

import hashlib
import os
import re

import cv2
import numpy as np

__all__ = ["SCHEME", "THUMB_SIDE", "TOLERANCE", "IGNORE_FLAG", "sample_indices", "thumbnail",
           "frame_signature", "timing", "build", "validate", "Check"]

#: The layout written (``scheme`` in the fingerprint); :func:`validate` reads this one only.
SCHEME = 1
#: Thumbnail side (cells).
THUMB_SIDE = 16
#: Largest thumbnail cell difference (grey levels) between pictures that are the same.
TOLERANCE = 4.0
#: The command-line flag that applies a motion file whose fingerprint does not match.
IGNORE_FLAG = "--ignore-fingerprint"

_LUMA = np.array([0.299, 0.587, 0.114], np.float32)
_HEX64 = re.compile(r"[0-9a-f]{64}")


#: At most this many frames are fingerprinted, evenly spaced (every frame of a clip up to this
#: long): with first, middle and last only, a clip with frames 3-7 replaced got the wrong
#: motion with a note that the pictures match (issue 63). ~600 bytes of the file each.
MAX_SAMPLES = 120


def sample_indices(num_frames: int) -> list[int]:
    """The frames fingerprinted: every frame up to :data:`MAX_SAMPLES`, else that many evenly
    spaced, first, middle and last included. A file written with fewer (first, middle and last)
    is checked on the frames it lists."""
    n = int(num_frames)
    if n <= 0:
        return []
    picks = np.rint(np.linspace(0, n - 1, min(n, MAX_SAMPLES))).astype(int)
    return sorted({0, n // 2, n - 1, *(int(i) for i in picks)})


def thumbnail(frame: np.ndarray) -> np.ndarray:
    """A ``THUMB_SIDE x THUMB_SIDE`` uint8 grey image of an RGB frame: Rec. 601 luma, area
    means (``cv2.INTER_AREA``), rounded."""
    grey = np.asarray(frame, np.float32) @ _LUMA
    small = cv2.resize(grey, (THUMB_SIDE, THUMB_SIDE), interpolation=cv2.INTER_AREA)
    return np.clip(np.rint(small), 0, 255).astype(np.uint8)


def frame_signature(frame: np.ndarray) -> dict:
    """``{"sha256": hex of the RGB bytes, "thumbnail": hex of :func:`thumbnail`}``."""
    frame = np.ascontiguousarray(frame, np.uint8)
    return {"sha256": hashlib.sha256(frame.tobytes()).hexdigest(),
            "thumbnail": thumbnail(frame).tobytes().hex()}


def timing(source, num_frames: int | None = None) -> dict:
    """``{"times_sha256", "duration_s"}`` of a :class:`camflow_jax.io.video.FrameSource`'s
    container timestamps (module doc), for its first ``num_frames`` frames (all by default);
    None values when it has no usable timestamps or fewer than ``num_frames``."""
    pts, base = getattr(source, "pts", None), getattr(source, "time_base", None)
    n = len(pts) if pts is not None and num_frames is None else num_frames
    if pts is None or base is None or n is None or len(pts) < n or n < 1:
        return {"times_sha256": None, "duration_s": None}
    p = np.asarray(pts[:n], np.int64)
    base = float(base)
    us = np.rint((p - p[0]).astype(np.float64) * base * 1e6).astype("<i8")
    return {"times_sha256": hashlib.sha256(us.tobytes()).hexdigest(),
            "duration_s": float((p[-1] - p[0]) * base)}


def build(name: str, times: dict, signatures: dict[int, dict]) -> dict:
    """The fingerprint (module doc) from :func:`timing` and per-index :func:`frame_signature`."""
    return {"scheme": SCHEME, "name": os.path.basename(str(name)), **times,
            "frames": [{"index": int(i), **signatures[i]} for i in sorted(signatures)]}


def validate(fp, num_frames: int) -> str | None:
    """What is wrong with a fingerprint read from a file (None when it is well formed)."""
    if not isinstance(fp, dict):
        return "must be an object"
    if fp.get("scheme") != SCHEME:
        return f"unknown scheme {fp.get('scheme')!r} (this camflow_jax reads {SCHEME})"
    if not isinstance(fp.get("name", ""), str):
        return "name must be a string"
    sha, dur = fp.get("times_sha256"), fp.get("duration_s")
    if sha is not None and not (isinstance(sha, str) and _HEX64.fullmatch(sha)):
        return "times_sha256 must be 64 hex digits or null"
    if dur is not None and not (isinstance(dur, (int, float)) and not isinstance(dur, bool)
                                and np.isfinite(dur) and dur >= 0):
        return "duration_s must be a number >= 0 or null"
    frames = fp.get("frames")
    if not isinstance(frames, list):
        return "frames must be a list"
    for k, f in enumerate(frames):
        if not isinstance(f, dict):
            return f"frames[{k}] must be an object"
        i = f.get("index")
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_frames:
            return f"frames[{k}] has index {i!r}, not a frame 0..{num_frames - 1}"
        if not (isinstance(f.get("sha256"), str) and _HEX64.fullmatch(f["sha256"])):
            return f"frames[{k}] sha256 must be 64 hex digits"
        t = f.get("thumbnail")
        if not (isinstance(t, str) and re.fullmatch(f"[0-9a-f]{{{2 * THUMB_SIDE ** 2}}}", t)):
            return f"frames[{k}] thumbnail must be {2 * THUMB_SIDE ** 2} hex digits"
    return None


class Check:
    """Compares an input with a motion file's fingerprint (module doc); the one rule.

    ``start(times, frame0, count)`` before any work, ``frame(t, frame)`` for each rendered
    frame, ``finish()`` after the last. A difference raises ValueError (one line naming the
    file, the video it was exported from and what differs): at ``start`` when the input holds
    ``num_frames`` frames (``count``, the container's packets or the folder's images), else
    at ``finish``, so that the frame-count rule, which no flag overrides, speaks first. With
    ``ignore`` all differences become one line in :attr:`warnings` at ``finish()``. :attr:`notes` says when there is
    nothing to check, or when the pictures match but their bytes do not."""

    def __init__(self, fp: dict | None, motion_path: str, input_path: str, num_frames: int,
                 ignore: bool = False):
        self.fp, self.path, self.input, self.ignore = fp, str(motion_path), str(input_path), bool(ignore)
        self.num_frames = int(num_frames)
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self._frames = {f["index"]: f for f in (fp or {}).get("frames", [])}
        self._times: str | None = None
        self._other: dict[int, int] = {}  # frame -> largest thumbnail difference
        self._inexact: list[int] = []
        self._done: set[int] = set()
        if fp is None:
            self.notes.append(f"{self.path} has no source fingerprint (written before camflow_jax "
                              "recorded one, or by hand): it is not checked against the input; "
                              "only its frame size and count are")

    def start(self, times: dict, frame0: np.ndarray | None, count: int | None = None) -> None:
        if self.fp is None:
            return
        want, got = self.fp.get("times_sha256"), times.get("times_sha256")
        if want is not None and got is not None and got != want:
            self._times = (f"the frame times differ (over {times['duration_s']:.3f} s here, "
                           f"{self.fp.get('duration_s') or 0:.3f} s in the file)")
        if frame0 is not None:
            self._compare(0, frame0)
        if count is None or count == self.num_frames:
            self._raise()

    def frame(self, t: int, frame: np.ndarray) -> None:
        if self.fp is not None and t in self._frames and t not in self._done:
            self._compare(t, frame)

    def finish(self) -> None:
        if self.fp is None:
            return
        self._raise()
        what = self._differences()
        if what:
            self.warnings.append(f"{what}; applied anyway ({IGNORE_FLAG})")
        if self._inexact:
            shown = sorted(self._inexact)
            listed = ", ".join(map(str, shown[:8])) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")
            self.notes.append(f"{self.path}: the decoded bytes of frame {listed} differ from the "
                              "exported run's (another decoder, or a re-encode), the pictures match "
                              f"(thumbnails within {TOLERANCE:g} grey levels)")

    def _compare(self, t: int, frame: np.ndarray) -> None:
        want = self._frames.get(t)
        if want is None:
            return
        self._done.add(t)
        got = frame_signature(frame)
        if got["sha256"] == want["sha256"]:
            return
        a = np.frombuffer(bytes.fromhex(want["thumbnail"]), np.uint8).astype(int)
        b = np.frombuffer(bytes.fromhex(got["thumbnail"]), np.uint8).astype(int)
        diff = int(np.abs(a - b).max())
        if diff > TOLERANCE:
            self._other[t] = diff
        else:
            self._inexact.append(t)

    def _differences(self) -> str | None:
        found = [self._times] if self._times else []
        if self._other:
            ts = sorted(self._other)
            listed = ", ".join(map(str, ts[:8])) + (f" and {len(ts) - 8} more" if len(ts) > 8 else "")
            which = f"frame {ts[0]} shows another picture" if len(ts) == 1 else \
                f"frames {listed} show other pictures"
            found.append(f"{which} ({THUMB_SIDE}x{THUMB_SIDE} grey thumbnails differ "
                         f"by up to {max(self._other.values())} levels, more than {TOLERANCE:g})")
        if not found:
            return None
        name = self.fp.get("name")
        return (f"{self.path} was exported from another video" + (f" ({name})" if name else "")
                + f", not {self.input}: " + "; ".join(found))

    def _raise(self) -> None:
        what = None if self.ignore else self._differences()
        if what:
            raise ValueError(f"{what}. Pass {IGNORE_FLAG} to apply it anyway")
