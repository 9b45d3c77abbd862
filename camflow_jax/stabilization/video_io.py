"""Streaming video / frame-folder input and output (OpenCV), RGB uint8 frames ``[H, W, 3]``.

A *source* is either a video file (anything ``cv2.VideoCapture`` decodes) or a folder of
images (png, jpg, jpeg, bmp, tif, tiff; sorted in natural order, so ``f2.png`` < ``f10.png``).
Frames are read lazily and can be read any number of times, so a clip never has to fit in
memory. Video containers often lie about their frame count: we read until decoding fails and
never trust ``CAP_PROP_FRAME_COUNT`` except as a hint for progress bars and for this check: when
a frame fails to decode, a few more reads are tried, and if a later frame decodes the video is
damaged in the middle, which is an error naming the frame (a silently shortened clip would pass
as a result). Damaged frames at the very end cannot be told from the end of the stream; the
CLI warns when fewer frames decode than the container holds. In frame folders, an image
that does not decode (or is truncated, see :func:`camflow_jax.data.images.read_rgb`) is an
error naming its frame index.

Opening a video also walks its packets without decoding them (cheap) for two things OpenCV's
decoder hides:

* **frame size changes**: OpenCV's FFmpeg reader scales every frame to the first frame's size
  and reports nothing. Packets that carry their own size (Motion-JPEG, PNG: every frame of an
  MJPG ``.avi``) are checked, and a change is an error naming the frame. For other codecs
  (H.264...) the size is inside the compressed stream and cannot be checked here: re-encode
  such a video at one size first.
* **variable frame rate**: the presentation timestamps give the real duration. When the frame
  intervals vary (:data:`VFR_SPREAD`), ``fps`` becomes the mean rate (frames / duration), so
  the constant-rate output keeps the input's duration (the timing inside the clip is evened
  out), and :attr:`FrameSource.timing_note` says so. The packet count replaces the container's
  frame count, which for such videos is duration x nominal rate, not a count.

A *sink* is a video file (by extension, see :data:`VIDEO_EXTENSIONS`) or a folder of
``frame_000000.png`` files (a path without extension, or an existing folder); any other
extension (``.webm``, ``.png``...) is refused (:func:`output_kind`). Audio is not carried over
(OpenCV has no audio support).
"""

from __future__ import annotations

import os
import re
from typing import Iterator

import cv2
import numpy as np

from camflow_jax.data.images import read_rgb

__all__ = ["IMAGE_EXTENSIONS", "VIDEO_EXTENSIONS", "FrameSource", "FrameSink", "is_video_path",
           "output_kind", "write_frames"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
#: Output extensions written as a video (codec by extension); anything else is a frame folder.
VIDEO_EXTENSIONS = {".mp4": "mp4v", ".m4v": "mp4v", ".mov": "mp4v", ".avi": "MJPG",
                    ".mkv": "XVID"}


#: Frame intervals are "variable" when the longest exceeds the shortest by this factor.
VFR_SPREAD = 1.5

#: Reads tried after a frame fails to decode, beyond the container's announced frame count.
RETRIES_AFTER_FAILURE = 8


def _natural_key(name: str):
    return [int(tok) if tok.isdigit() else tok.lower() for tok in re.split(r"(\d+)", name)]


def is_video_path(path: str) -> bool:
    """True when ``path`` names a video container we write (by extension)."""
    return os.path.splitext(str(path))[1].lower() in VIDEO_EXTENSIONS


def output_kind(path: str) -> str:
    """``"video"`` (a :data:`VIDEO_EXTENSIONS` name) or ``"frames"`` (a name without extension,
    or an existing folder); ValueError for any other extension, listing what can be written."""
    ext = os.path.splitext(os.path.normpath(str(path)))[1].lower()
    if ext in VIDEO_EXTENSIONS:
        return "video"
    if not ext or os.path.isdir(path):
        return "frames"
    raise ValueError(f"cannot write {path}: {ext} is not an output this tool writes; use a video "
                     f"({', '.join(VIDEO_EXTENSIONS)}) or a folder of PNG frames (a name without "
                     "extension)")


def _packets(path: str) -> Iterator[tuple[float, bytes]]:
    """(timestamp in ms, the first 64 KiB of the packet) of every packet of a video, demuxed
    without decoding (OpenCV's raw mode); nothing when the backend has no raw mode."""
    cap = cv2.VideoCapture(path)
    try:
        if not cap.isOpened() or not cap.set(cv2.CAP_PROP_FORMAT, -1):
            return
        while True:
            ok, packet = cap.read()
            if not ok or packet is None:
                return
            yield cap.get(cv2.CAP_PROP_POS_MSEC), packet.reshape(-1)[:65536].tobytes()
    finally:
        cap.release()


def _packet_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) stored in a compressed frame that carries its own size (JPEG, PNG)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        m = data[i + 1]
        if m == 0xFF:
            i += 1
            continue
        if m in (0x01, 0xD8) or 0xD0 <= m <= 0xD7:
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC) and i + 9 <= len(data):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        if m in (0xDA, 0xD9):
            return None
        i += 2 + length
    return None


class FrameSource:
    """Re-iterable RGB frame reader for a video file or an image folder.

    Opening checks that the input exists and that its first frame decodes, so unreadable input
    fails early with a clear message. ``fps`` comes from the container (or ``default_fps`` for
    folders and containers that report none).
    """

    def __init__(self, path: str, default_fps: float = 30.0):
        self.path = str(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"input not found: {self.path}")
        self.is_folder = os.path.isdir(self.path)
        self._files: list[str] = []
        if self.is_folder:
            names = [n for n in os.listdir(self.path)
                     if os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS]
            if not names:
                raise ValueError(f"input folder {self.path} holds no images "
                                 f"(looked for {', '.join(IMAGE_EXTENSIONS)})")
            self._files = [os.path.join(self.path, n) for n in sorted(names, key=_natural_key)]
            self.fps = float(default_fps)
            self.count_hint = len(self._files)
        else:
            cap = cv2.VideoCapture(self.path)
            try:
                if not cap.isOpened():
                    raise ValueError(f"cannot open {self.path} as a video (unknown format or "
                                     "corrupt file)")
                fps = cap.get(cv2.CAP_PROP_FPS)
                self.fps = float(fps) if np.isfinite(fps) and 0 < fps < 1000 else float(default_fps)
                n = cap.get(cv2.CAP_PROP_FRAME_COUNT)
                self.count_hint = int(n) if np.isfinite(n) and n > 0 else None
            finally:
                cap.release()
            self._scan_packets()
        first = next(iter(self), None)
        if first is None:
            raise ValueError(f"no frame of {self.path} could be decoded")
        self.height, self.width = first.shape[:2]

    #: Set when the video has a variable frame rate (see the module doc); None otherwise.
    timing_note: str | None = None

    def _scan_packets(self) -> None:
        """Walks the packets without decoding (module doc): frame size changes, real timing."""
        stamps, first = [], None
        for ms, packet in _packets(self.path):
            size = _packet_size(packet)
            if size is not None:
                if first is None:
                    first = size
                elif size != first:
                    raise ValueError(
                        f"{self.path}: frame {len(stamps)} is {size[0]}x{size[1]} but frame 0 is "
                        f"{first[0]}x{first[1]}: the frame size changes mid-stream (OpenCV would "
                        "squash the frames to the first size silently). Re-encode it at one size "
                        "(e.g. ffmpeg -i IN -vf scale=W:H OUT.mp4) or extract its frames")
            stamps.append(ms)
        if len(stamps) < 2:
            return
        self.count_hint = len(stamps)  # what the container holds (its "frame count" may be a guess)
        t = np.sort(np.asarray(stamps, np.float64))
        steps = np.diff(t)
        if not np.all(np.isfinite(steps)) or steps.min() <= 0:
            return
        if steps.max() > VFR_SPREAD * steps.min():
            duration = (t[-1] - t[0] + float(np.median(steps))) / 1000.0
            nominal = self.fps
            self.fps = len(t) / duration
            self.timing_note = (
                f"variable frame rate (frame intervals {steps.min():.0f} to {steps.max():.0f} ms; the "
                f"container's nominal rate is {nominal:g} fps): written at the mean rate "
                f"{self.fps:.3f} fps so the output keeps the input's duration ({duration:.2f} s); "
                "the timing inside the clip is evened out")

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.is_folder:
            yield from self._iter_folder()
        else:
            yield from self._iter_video()

    def _check_size(self, frame: np.ndarray, where: str) -> None:
        size = getattr(self, "height", None), getattr(self, "width", None)
        if size[0] is not None and frame.shape[:2] != size:
            raise ValueError(f"{where}: frame size {frame.shape[1]}x{frame.shape[0]} differs from "
                             f"the first frame's {size[1]}x{size[0]}")

    def _iter_folder(self) -> Iterator[np.ndarray]:
        for index, f in enumerate(self._files):
            try:
                img = read_rgb(f)
            except (ValueError, FileNotFoundError) as e:
                raise ValueError(f"frame {index} of {self.path}: {e}") from None
            self._check_size(img, f)
            yield img

    def _iter_video(self) -> Iterator[np.ndarray]:
        cap = cv2.VideoCapture(self.path)
        try:
            index = 0
            while True:  # until decoding fails: container frame counts are not trusted
                ok, img = cap.read()
                if not ok or img is None:
                    self._check_stream_end(cap, index)
                    break
                self._check_size(img, f"{self.path} frame {index}")
                index += 1
                yield cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
            self.decoded_count = index
        finally:
            cap.release()

    def _check_stream_end(self, cap, index: int) -> None:
        """Frame ``index`` did not decode: an error if a later frame does (module doc)."""
        hint = getattr(self, "count_hint", None) or 0
        tries = min(max(hint - index, 0), 1000) + RETRIES_AFTER_FAILURE
        for k in range(1, tries + 1):
            ok, _ = cap.read()
            if ok:
                raise ValueError(
                    f"{self.path}: frame {index} cannot be decoded but frame {index + k} can: the "
                    "video is damaged in the middle. Re-encode it (e.g. ffmpeg -i IN -c:v libx264 "
                    "OUT.mp4) or extract its frames to a folder, then run again")


class FrameSink:
    """Writes RGB uint8 frames to a video file (by extension) or a folder of PNGs.

    Refuses to replace an existing output unless ``overwrite``. Use as a context manager.
    """

    def __init__(self, path: str, fps: float, overwrite: bool = False):
        self.path = str(path)
        self.fps = float(fps)
        if os.path.exists(self.path) and not overwrite:
            raise FileExistsError(f"output {self.path} exists (pass -y / overwrite=True to "
                                  "replace it)")
        self.is_video = output_kind(self.path) == "video"
        if self.is_video:
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                raise FileNotFoundError(f"output folder {parent} does not exist")
        if not self.is_video and os.path.isdir(self.path):
            # Replacing a frame folder: drop only the frames we would have written, so a shorter
            # clip does not leave stale frames behind; other files are left alone.
            for n in os.listdir(self.path):
                if re.fullmatch(r"frame_\d{6}\.png", n):
                    os.remove(os.path.join(self.path, n))
        elif not self.is_video and os.path.exists(self.path):
            raise FileExistsError(f"output {self.path} exists and is not a folder")
        self._writer = None
        self.count = 0

    def write(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[-1] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"expected an RGB uint8 frame [H, W, 3], got {frame.dtype} "
                             f"{frame.shape}")
        bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
        if self.is_video:
            if self._writer is None:
                ext = os.path.splitext(self.path)[1].lower()
                fourcc = cv2.VideoWriter_fourcc(*VIDEO_EXTENSIONS[ext])
                h, w = frame.shape[:2]
                self._writer = cv2.VideoWriter(self.path, fourcc, self.fps, (w, h))
                if not self._writer.isOpened():
                    raise ValueError(f"OpenCV cannot write {self.path} "
                                     f"(codec {VIDEO_EXTENSIONS[ext]})")
            self._writer.write(bgr)
        else:
            os.makedirs(self.path, exist_ok=True)
            name = os.path.join(self.path, f"frame_{self.count:06d}.png")
            if not cv2.imwrite(name, bgr):
                raise ValueError(f"cannot write {name}")
        self.count += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
            self._check_written()

    def _check_written(self) -> None:
        """OpenCV's video writer reports no write errors (a full disk leaves a truncated file
        and no sign): the frames of the closed file are counted (demuxed, not decoded)."""
        found = sum(1 for _ in _packets(self.path))
        if found < self.count:
            import errno

            st = os.statvfs(os.path.dirname(os.path.abspath(self.path)))
            full = st.f_bavail * st.f_frsize < (1 << 20)
            code = errno.ENOSPC if full else errno.EIO
            raise OSError(code, f"{os.strerror(code)} (the video holds {found} of the {self.count} "
                                "frames written)", self.path)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        elif self._writer is not None:  # failing already: release without the check
            self._writer.release()
            self._writer = None
        return False


def write_frames(path: str, frames, fps: float = 30.0, overwrite: bool = False) -> int:
    """Writes an iterable of RGB frames to ``path``; returns the number written."""
    with FrameSink(path, fps, overwrite=overwrite) as sink:
        for f in frames:
            sink.write(f)
        return sink.count
