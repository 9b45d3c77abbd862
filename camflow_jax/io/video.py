"""Streaming video / frame-folder input and output (PyAV, i.e. FFmpeg), RGB uint8 frames ``[H, W, 3]``.

A *source* is either a video file (anything FFmpeg demuxes and decodes) or a folder of images
(png, jpg, jpeg, bmp, tif, tiff; sorted in natural order, so ``f2.png`` < ``f10.png``; hidden
files, whose names start with a dot such as macOS's ``._f0.png``, are ignored). Frames
are read lazily and can be read any number of times, so a clip never has to fit in memory.

Opening a video walks its video packets without decoding them (cheap): their number is the
frame count (the container's own count is often a guess) and their presentation timestamps
(PTS) are the frames' times. Then the first frame is decoded, so unreadable input fails early.

* **damaged frames**: a frame that does not decode is an error naming the frame when a later
  frame decodes (the video is damaged in the middle; a silently shortened clip would pass as a
  result). Damaged frames at the very end cannot be told from the end of the stream; the CLI
  warns when fewer frames decode than the container holds, and names an MP4/MOV whose index
  lists more frames than the file holds, or that ends inside a box, as truncated
  (:meth:`FrameSource.damage`). In frame folders, an image that
  does not decode (or is truncated, see :func:`camflow_jax.io.images.read_rgb`) is an error
  naming its frame index.
* **frame size changes**: every decoded frame is checked against the first; a change is an
  error naming the frame, for every codec (frames are never rescaled silently).
* **variable frame rate** (VFR): when the frame intervals vary (:data:`VFR_SPREAD`),
  :attr:`FrameSource.variable_rate` is set and ``fps`` becomes the mean rate (frames /
  duration). Outputs that keep timestamps (see below) write every frame at its input PTS; a
  constant-rate output (``.avi``) is written at the mean rate, which keeps the duration but
  evens out the timing inside the clip, and :attr:`FrameSource.timing_note` says so.

* **rotation** (phone videos: a display matrix, e.g. ffprobe's ``rotation=-90``): frames are
  read upright, as players, ``ffmpeg`` and OpenCV show them: quarter turns and mirrors are
  applied to the decoded pixels (exactly, no resampling), ``height`` / ``width`` are the upright
  size and :attr:`FrameSource.rotation_note` says what was done. The matrix comes from the
  first decoded frame's side data (FFmpeg attaches the container's to every frame), else from
  PyAV 12-13's stream side data or the legacy ``rotate`` tag (rotations only). Outputs are
  written upright with no display matrix, so they play the same everywhere (frame folders
  included). Any other angle is refused (re-encode upright).

A *sink* is a video file (by extension, see :data:`VIDEO_EXTENSIONS`) or a folder of
``frame_000000.png`` files (a path without extension, or an existing folder); any other
extension (``.webm``, ``.png``...) is refused (:func:`output_kind`).

* ``.mp4 .m4v .mov .mkv``: H.264 (libx264, CRF :data:`H264_CRF`, yuv420p; yuv444p when the frame
  size is odd, which 4:2:0 cannot hold), or MPEG-4 part 2 where the installed FFmpeg has no
  H.264 encoder (:func:`video_encoder` says which). Frames are written with the input's PTS and
  time base when given (VFR kept), otherwise at a constant rate.
* ``.avi``: Motion-JPEG at a constant rate (AVI has no per-frame timestamps).
* **audio**: with ``audio_from``, the first audio stream of that file is copied packet by
  packet (no re-encoding, same timestamps); when the output container cannot hold its codec it
  is transcoded to AAC, and :attr:`FrameSink.notes` says so. So is PCM audio into ``.mp4`` /
  ``.m4v`` (:data:`PCM_UNSAFE`: players decode it as noise). Frame folders hold no audio.

Every written video is checked after closing: its packets are counted (demuxed, not decoded),
so a full disk that left a truncated file is an error, not a short result.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from fractions import Fraction
from typing import Iterator

import cv2
import numpy as np

from camflow_jax.io.images import read_rgb
from camflow_jax.io.orientation import orientation as _orientation
from camflow_jax.io.orientation import orientation_note as _orientation_note
from camflow_jax.io.orientation import upright as _upright

__all__ = ["IMAGE_EXTENSIONS", "VIDEO_EXTENSIONS", "AudioInfo", "FrameSource", "FrameSink",
           "audio_summary", "is_video_path", "keeps_timestamps", "output_kind", "timing_summary",
           "video_encoder", "write_frames"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
#: Output extensions written as a video -> the video codec family (:func:`video_encoder`).
VIDEO_EXTENSIONS = {".mp4": "h264", ".m4v": "h264", ".mov": "h264", ".mkv": "h264",
                    ".avi": "mjpeg"}
#: Extensions whose container keeps per-frame timestamps (AVI is constant rate).
TIMESTAMPED = (".mp4", ".m4v", ".mov", ".mkv")

#: libx264's constant rate factor (18: visually near lossless; FFmpeg's default is 23).
H264_CRF = 18

#: Outputs whose PCM audio is transcoded to AAC: MP4 can hold PCM (ISO/IEC 23003-5, 'ipcm'),
#: but players and FFmpeg before 6 (5.1 measured) decode it as noise.
PCM_UNSAFE = (".mp4", ".m4v")
#: Sample rates the AAC encoder takes (another input rate is resampled to the next one up).
AAC_RATES = (7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000)

#: Frame intervals are "variable" when the longest exceeds the shortest by this factor.
VFR_SPREAD = 1.5


def _av():
    """PyAV, imported on first use (no import-time cost for modules that only name paths)."""
    try:
        import av
    except ImportError as e:  # a core dependency (setup.cfg); this is a broken install
        raise ValueError(f"video input/output needs PyAV (pip install av): {e}") from e
    return av


def _is_cover_art(stream) -> bool:
    """True for a video stream that is a picture attached to audio (FFmpeg's ``attached_pic``
    disposition: an .mp3's or .m4a's cover art), not moving pictures."""
    try:
        return bool(int(stream.disposition) & int(_av().stream.Disposition.attached_pic))
    except (AttributeError, TypeError, ValueError):  # an older PyAV without dispositions
        return False


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


def video_encoder(ext: str) -> tuple[str, str | None]:
    """(FFmpeg encoder name, note or None) for an output extension: libx264 for the H.264
    containers when the installed PyAV has it, else MPEG-4 part 2 with a note; mjpeg for .avi."""
    family = VIDEO_EXTENSIONS[ext.lower()]
    if family == "mjpeg":
        return "mjpeg", None
    available = _av().codecs_available
    if "libx264" in available:
        return "libx264", None
    return "mpeg4", ("this PyAV build has no H.264 encoder (libx264): the video was written as "
                     "MPEG-4 part 2")


def _error_types():
    av = _av()
    return (av.error.FFmpegError, OSError, ValueError)


@dataclasses.dataclass(frozen=True)
class AudioInfo:
    """The first audio stream of a video: codec name, sample rate, channels, duration (s)."""

    codec: str
    sample_rate: int
    channels: int
    duration: float | None


def check_rereadable(path: str) -> None:
    """Refuses (ValueError, one line) an input that is not a regular file: a named pipe,
    ``/dev/stdin`` fed by a pipe, a terminal or a socket. A video is opened several times (its
    frames counted, then read for the estimation and again for the rendering): the second open
    of a pipe blocked for ever in FFmpeg's C code (deaf to SIGINT / SIGTERM), and ``/dev/stdin``
    failed as "unknown format or corrupt file". Checked with stat(2), which never opens (nor
    blocks on) the pipe."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # the open that follows names the problem
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = ("a pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a terminal or device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    raise ValueError(f"input {path} is {kind}: a video is read more than once (counted, then read for "
                     "the estimation and the rendering), which a stream cannot be; write it to a file "
                     f"first (e.g. cat ... > clip.mp4) and pass that file")


class FrameSource:
    """Re-iterable RGB frame reader for a video file or an image folder.

    Opening checks that the input exists and that its first frame decodes, so unreadable input
    fails early with a clear message. ``fps`` comes from the container (the mean rate for a
    variable frame rate), or ``default_fps`` for folders and containers that report none.
    ``pts`` / ``time_base``: the frames' presentation timestamps (sorted) and their unit, None
    for folders and streams without timestamps. ``audio``: :class:`AudioInfo` or None.
    """

    #: Set when a variable-frame-rate video is written at a constant rate (module doc).
    timing_note: str | None = None
    variable_rate: bool = False
    pts: list[int] | None = None
    time_base: Fraction | None = None
    audio: AudioInfo | None = None
    #: Set when a display matrix turns the frames (module doc); they are read upright.
    rotation_note: str | None = None
    _orient: tuple | None = None
    #: The frame count an MP4/MOV file's index lists (None for other containers, folders).
    index_count: int | None = None
    count_hint: int | None = None

    def __init__(self, path: str, default_fps: float = 30.0):
        self.path = str(path)
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"input not found: {self.path}")
        self.is_folder = os.path.isdir(self.path)
        if not self.is_folder:
            check_rereadable(self.path)
        self._files: list[str] = []
        if self.is_folder:
            # Hidden files are not frames: macOS's ._NAME (AppleDouble) and .DS_Store, editors'
            # and our own .partial temporaries; ._frame_000000.png sorted first and was read as
            # frame 0 (with a size error blaming it).
            names = [n for n in os.listdir(self.path)
                     if os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS and not n.startswith(".")]
            if not names:
                raise ValueError(f"input folder {self.path} holds no images "
                                 f"(looked for {', '.join(IMAGE_EXTENSIONS)})")
            self._files = [os.path.join(self.path, n) for n in sorted(names, key=_natural_key)]
            self.fps = float(default_fps)
            self.count_hint = len(self._files)
        else:
            self._scan(default_fps)
        first = next(iter(self), None)
        if first is None:
            raise ValueError(f"no frame of {self.path} could be decoded"
                             + (f" ({self.damage(0)})" if self.damage(0) else ""))
        self.height, self.width = first.shape[:2]
        if self._orient is not None:
            self.rotation_note = _orientation_note(self._orient, self.path, self.width,
                                                   self.height)

    def _open(self):
        av = _av()
        try:
            container = av.open(self.path)
        except _error_types() as e:
            why = _mp4_truncation(self.path)
            if why:
                raise ValueError(f"{self.path} is truncated: {why}; no frame can be read") from None
            raise ValueError(f"cannot open {self.path} as a video (unknown format or corrupt "
                             f"file: {e})") from None
        if not container.streams.video:
            container.close()
            raise ValueError(f"cannot open {self.path} as a video (it holds no video stream)")
        if all(_is_cover_art(s) for s in container.streams.video):
            container.close()  # an audio file's picture (an .mp3's cover art) is one still image
            raise ValueError(f"cannot open {self.path} as a video (it holds no video stream, only a "
                             "still picture attached to the audio, such as an album cover)")
        return container

    def _scan(self, default_fps: float) -> None:
        """Demuxes the video packets without decoding: frame count, timestamps, audio."""
        with self._open() as c:
            stream = c.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            self.fps = float(rate) if rate and 0 < float(rate) < 1000 else float(default_fps)
            if c.streams.audio:
                a = c.streams.audio[0]
                dur = (float(a.duration * a.time_base) if a.duration and a.time_base
                       else None)
                self.audio = AudioInfo(a.codec_context.name, int(a.codec_context.sample_rate or 0),
                                       int(a.codec_context.channels or 0), dur)
            stamps, count = [], 0
            try:
                for packet in c.demux(stream):
                    if packet.size == 0:
                        continue
                    count += 1
                    stamps.append(packet.pts)
            except _error_types():
                pass  # a damaged tail: decoding tells more, and the count is a hint only
            self.count_hint = count or None
            # The frame count an MP4/MOV index (its sample table) lists: more than the packets
            # the file holds means the file was cut short. Other containers' counts are guesses.
            if c.format.name.startswith("mov") and stream.frames:
                self.index_count = int(stream.frames)
            if stream.time_base and count and all(p is not None for p in stamps):
                self.time_base = Fraction(stream.time_base)
                self.pts = sorted(int(p) for p in stamps)
        self._check_timing()

    def _check_timing(self) -> None:
        if self.pts is None or len(self.pts) < 2:
            return
        t = np.asarray(self.pts, np.float64) * float(self.time_base)
        steps = np.diff(t)
        if not np.all(np.isfinite(steps)) or steps.min() <= 0:
            self.pts = None  # repeated or missing timestamps: not usable as times
            return
        if steps.max() > VFR_SPREAD * steps.min():
            duration = t[-1] - t[0] + float(np.median(steps))
            nominal = self.fps
            self.fps = len(t) / duration
            self.variable_rate = True
            self.timing_note = (
                f"variable frame rate (frame intervals {1000 * steps.min():.0f} to "
                f"{1000 * steps.max():.0f} ms; the container's nominal rate is {nominal:g} fps): "
                f"written at the mean rate {self.fps:.3f} fps so the output keeps the input's "
                f"duration ({duration:.2f} s); the timing inside the clip is evened out (an "
                ".mp4/.mov/.mkv output keeps the timestamps)")

    def damage(self, decoded: int) -> str | None:
        """How the video is damaged when only ``decoded`` of its frames decoded, in words naming
        the file (None when nothing is missing): cut short (its MP4/MOV index lists more frames
        than the file holds), or frames at the end that do not decode."""
        held = self.count_hint or 0
        if self.index_count and self.index_count > held:
            return (f"{self.path} is truncated or damaged: its index lists {self.index_count} frames, "
                    f"the file holds {held} and {decoded} decode")
        if held and decoded < held:
            return (f"{self.path}: the container holds {held} frames but only {decoded} decode (the end "
                    "of the video may be damaged)")
        return None

    def override_fps(self, fps: float) -> None:
        """The user's frame rate: the output is written at this constant rate."""
        self.fps = float(fps)
        self.pts = self.time_base = None
        self.timing_note = None
        self.variable_rate = False

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
        errors = _error_types()
        with self._open() as c:
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            index, failed, first = 0, None, None
            packets = c.demux(stream)
            while True:
                try:
                    packet = next(packets)
                except StopIteration:
                    break
                except errors:  # a damaged container: the rest cannot be demuxed
                    break
                try:
                    frames = packet.decode()
                except errors:
                    if failed is None:
                        failed = index
                    continue
                for fr in frames:
                    if failed is not None:
                        raise ValueError(
                            f"{self.path}: frame {failed} cannot be decoded but frame {failed + 1} "
                            "can: the video is damaged in the middle. Re-encode it (e.g. ffmpeg "
                            "-i IN -c:v libx264 OUT.mp4) or extract its frames to a folder, then "
                            "run again")
                    size = (fr.width, fr.height)
                    if first is None:
                        first = size
                    elif size != first:
                        raise ValueError(
                            f"{self.path}: frame {index} is {size[0]}x{size[1]} but frame 0 is "
                            f"{first[0]}x{first[1]}: the frame size changes mid-stream. Re-encode "
                            "it at one size (e.g. ffmpeg -i IN -vf scale=W:H OUT.mp4) or extract "
                            "its frames")
                    if index == 0:
                        self._orient = _orientation(fr, stream, self.path)
                    index += 1
                    yield _upright(fr.to_ndarray(format="rgb24"), self._orient)
            self.decoded_count = index


def _mp4_truncation(path: str) -> str | None:
    """Why an MP4/MOV file (an ``ftyp`` box first) that FFmpeg cannot open is truncated, or
    None: a top-level box runs past the end of the file, or there is no ``moov`` box (the
    index, written last by most recorders)."""
    import struct

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            pos, boxes, cut = 0, [], None
            while pos + 8 <= size and len(boxes) < 256:
                f.seek(pos)
                head = f.read(16)
                length, kind = struct.unpack(">I4s", head[:8])
                if length == 1 and len(head) == 16:
                    length = struct.unpack(">Q", head[8:16])[0]
                elif length == 0:  # "to the end of the file"
                    length = size - pos
                boxes.append(kind)
                if length < 8:
                    return None  # not a box structure we know
                if pos + length > size:
                    cut = kind.decode("latin-1")
                    break
                pos += length
    except OSError:
        return None
    if not boxes or boxes[0] != b"ftyp":
        return None
    if cut is not None:
        return (f"the file ends inside its '{cut}' box ({size} bytes): it was cut short, as when a "
                "recording or a copy is interrupted")
    if b"moov" not in boxes:
        return ("it holds no index (the MP4/MOV 'moov' box, written last): it was cut short, as "
                "when a recording or a copy is interrupted")
    return None


def keeps_timestamps(path: str) -> bool:
    """True when an output at ``path`` is written with the input's timestamps (module doc)."""
    return os.path.splitext(str(path))[1].lower() in TIMESTAMPED


def timing_summary(source: "FrameSource", output_path: str) -> str:
    """How the output's frame times relate to the input's, in words (for reports)."""
    if source.pts is None:
        return f"constant rate {source.fps:g} fps"
    if keeps_timestamps(output_path):
        kind = "variable" if source.variable_rate else "constant"
        return f"the input's timestamps ({kind} frame rate, time base {source.time_base})"
    if output_kind(output_path) == "frames":
        return f"none (frame folder); the input's mean rate is {source.fps:g} fps"
    return f"constant rate {source.fps:g} fps" + (" (the input's mean rate)"
                                                   if source.variable_rate else "")


def audio_summary(source: "FrameSource", sink: "FrameSink") -> str:
    """What happened to the input's audio, in words (for reports)."""
    audio = getattr(source, "audio", None)
    if audio is None:
        return "none in the input"
    if not sink.is_video:
        return f"not written ({audio.codec} audio; a frame folder holds no audio)"
    if sink.audio_mode == "copied":
        return f"copied ({audio.codec}, not re-encoded)"
    if sink.audio_mode:
        return f"{sink.audio_mode} (the input's {audio.codec} does not fit {sink.ext})"
    return "not written"


def _rate(fps: float) -> Fraction:
    """A frame rate as the fraction containers store (30000/1001 stays exact)."""
    return Fraction(float(fps)).limit_denominator(1001)


class FrameSink:
    """Writes RGB uint8 frames to a video file (by extension) or a folder of PNGs.

    ``pts`` / ``time_base``: write frame i at ``pts[i]`` (timestamp containers only; see the
    module doc), else at the constant ``fps``. ``audio_from``: a video whose first audio stream
    is carried over. Refuses to replace an existing output unless ``overwrite``. Use as a
    context manager; :attr:`notes` lists what a user should know (codec fallback, audio).
    """

    def __init__(self, path: str, fps: float, overwrite: bool = False, *,
                 pts: list[int] | None = None, time_base: Fraction | None = None,
                 audio_from: str | None = None):
        self.path = str(path)
        self.fps = float(fps)
        if os.path.exists(self.path) and not overwrite:
            raise FileExistsError(f"output {self.path} exists (pass -y / overwrite=True to "
                                  "replace it)")
        self.is_video = output_kind(self.path) == "video"
        self.ext = os.path.splitext(self.path)[1].lower()
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
        keep = self.is_video and self.ext in TIMESTAMPED and pts is not None and time_base
        self._pts = list(pts) if keep else None
        self._time_base = Fraction(time_base) if keep else None
        self.audio_from = audio_from if self.is_video else None
        self.notes: list[str] = []
        self.codec: str | None = None
        self.audio_mode: str | None = None  # "copied", "transcoded to aac" or None
        self._out = self._video = self._audio = self._audio_in = self._audio_packets = None
        self._resampler = None
        self.count = 0

    # ---------------------------------------------------------------- opening
    def _open_video(self, h: int, w: int) -> None:
        av = _av()
        codec, note = video_encoder(self.ext)
        if note:
            self.notes.append(note)
        self.codec = codec
        self._out = av.open(self.path, "w")
        rate = _rate(self.fps)
        v = self._out.add_stream(codec, rate=rate)
        v.width, v.height = w, h
        if codec == "mjpeg":
            v.pix_fmt = "yuvj420p"
            v.codec_context.qscale = True
            v.codec_context.global_quality = 2 * 118  # -q:v 2 (FF_QP2LAMBDA = 118)
        elif h % 2 or w % 2:
            if codec != "libx264":
                raise ValueError(f"cannot write {self.path}: {codec} needs an even frame size, "
                                 f"the frames are {w}x{h}; write a frame folder instead")
            v.pix_fmt = "yuv444p"
            self.notes.append(f"the frame size {w}x{h} is odd, which 4:2:0 video cannot hold: "
                              "written as H.264 4:4:4 (some players cannot show it)")
        else:
            v.pix_fmt = "yuv420p"
        if codec == "libx264":
            v.options = {"crf": str(H264_CRF), "preset": "medium"}
            # x264's own threads, as many as it picks for the machine (ffmpeg's default; the
            # library's is one): 300 frames at 640x480 on 2 cores encode in 3.2 s instead of 5.1.
            # Frame threads as ffmpeg's command line uses them, not PyAV's default slice threads:
            # 300 shaken 640x480 frames encode in ~7 s instead of ~9 (docs/performance.md).
            v.thread_count = 0
            v.thread_type = "AUTO"
        elif codec == "mpeg4":
            v.codec_context.qscale = True
            v.codec_context.global_quality = 2 * 118
        if self._pts is not None:
            v.time_base = self._time_base
            v.codec_context.time_base = self._time_base
        self._video = v
        if self.audio_from:
            self._open_audio()

    def _open_audio(self) -> None:
        av = _av()
        try:
            src = av.open(self.audio_from)
        except _error_types() as e:
            raise ValueError(f"cannot read the audio of {self.audio_from}: {e}") from None
        if not src.streams.audio:
            src.close()
            return
        a_in = src.streams.audio[0]
        name = a_in.codec_context.name
        self._audio_in = src
        pcm_in_mp4 = name.startswith("pcm_") and self.ext in PCM_UNSAFE
        if name in self._out.supported_codecs and not pcm_in_mp4:
            self._audio = self._out.add_stream_from_template(a_in)
            self.audio_mode = "copied"
        else:
            rate = a_in.codec_context.sample_rate
            if rate not in AAC_RATES:
                rate = min((r for r in AAC_RATES if r >= rate), default=max(AAC_RATES))
            self._audio = self._out.add_stream("aac", rate=rate, layout=a_in.codec_context.layout.name)
            self._resampler = av.AudioResampler(format="fltp", layout=a_in.codec_context.layout.name,
                                                rate=rate)
            self.audio_mode = "transcoded to aac"
            if pcm_in_mp4:
                self.notes.append(
                    f"the input's {name} audio ({a_in.codec_context.sample_rate} Hz) was transcoded to AAC: "
                    f"PCM in {self.ext} is decoded as noise by common players (FFmpeg 5.1 among them); "
                    "a .mov or .mkv output keeps it as it is")
            else:
                self.notes.append(f"the {self.ext} container cannot hold the input's {name} audio: "
                                  "it was transcoded to AAC")
        self._audio_packets = self._audio_source_packets(src, a_in)
        self._pending = None

    def _audio_source_packets(self, src, a_in):
        """Audio packets ready to mux (copied, or transcoded frames encoded to AAC)."""
        for packet in src.demux(a_in):
            if self._resampler is None:
                if packet.dts is None or packet.size == 0:
                    continue
                packet.stream = self._audio
                yield packet
                continue
            for frame in packet.decode():
                for fr in self._resampler.resample(frame):
                    fr.pts = None
                    yield from self._audio.encode(fr)
        if self._resampler is not None:
            for fr in self._resampler.resample(None):
                fr.pts = None
                yield from self._audio.encode(fr)
            yield from self._audio.encode(None)

    def _mux_audio_until(self, seconds: float | None) -> None:
        """Muxes the audio packets up to ``seconds`` (all of them for None): audio interleaved
        with the video as it is written, never buffered whole."""
        if self._audio_packets is None:
            return
        while True:
            p = self._pending
            if p is None:
                p = next(self._audio_packets, None)
                if p is None:
                    self._audio_packets = None
                    return
            t = p.pts if p.pts is not None else p.dts
            if seconds is not None and t is not None and p.time_base is not None \
                    and float(t * p.time_base) > seconds:
                self._pending = p
                return
            self._pending = None
            self._out.mux(p)

    # ---------------------------------------------------------------- writing
    def write(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[-1] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"expected an RGB uint8 frame [H, W, 3], got {frame.dtype} "
                             f"{frame.shape}")
        if self.is_video:
            self._write_video(frame)
        else:
            os.makedirs(self.path, exist_ok=True)
            name = os.path.join(self.path, f"frame_{self.count:06d}.png")
            # Encoded in memory and written by Python: a full disk is an OSError (ENOSPC) that
            # the atomic writer names by the output folder, where cv2.imwrite printed libpng's
            # "Write Error" and failed naming the hidden temporary file.
            ok, png = cv2.imencode(".png", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
            if not ok:
                raise ValueError(f"cannot encode frame {self.count} as PNG")
            _write_file(name, png.tobytes())
        self.count += 1

    def _frame_pts(self, i: int) -> int:
        pts = self._pts
        if i < len(pts):
            return pts[i]
        step = (pts[-1] - pts[0]) // max(1, len(pts) - 1) if len(pts) > 1 else 1
        return pts[-1] + (i - len(pts) + 1) * max(1, step)

    def _write_video(self, frame: np.ndarray) -> None:
        av = _av()
        if self._out is None:
            self._open_video(*frame.shape[:2])
        vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        if self._pts is not None:
            vf.pts = self._frame_pts(self.count)
            vf.time_base = self._time_base
            seconds = float(vf.pts * self._time_base)
        else:
            vf.pts = self.count
            seconds = self.count / self.fps
        self._mux_audio_until(seconds)
        for packet in self._video.encode(vf):
            self._out.mux(packet)

    def close(self) -> None:
        if self._out is None:
            return
        try:
            for packet in self._video.encode(None):
                self._out.mux(packet)
            self._mux_audio_until(None)
        finally:
            self._release()
        self._check_written()

    def _release(self) -> None:
        out, self._out = self._out, None
        if self._audio_in is not None:
            self._audio_in.close()
            self._audio_in = None
        if out is not None:
            out.close()

    def _check_written(self) -> None:
        """Counts the frames of the closed file (demuxed, not decoded): a write error that
        left a truncated file (a full disk) is an error."""
        av = _av()
        try:
            with av.open(self.path) as c:
                found = sum(1 for p in c.demux(c.streams.video[0]) if p.size)
        except _error_types():
            found = 0
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
        else:  # failing already: release without the check
            try:
                self._release()
            except _error_types():
                pass
        return False


def _write_file(path: str, data: bytes) -> None:
    """Writes ``data`` to a new file ``path`` (OS errors raised as they are)."""
    with open(path, "wb") as f:
        f.write(data)


def write_frames(path: str, frames, fps: float = 30.0, overwrite: bool = False) -> int:
    """Writes an iterable of RGB frames to ``path``; returns the number written."""
    with FrameSink(path, fps, overwrite=overwrite) as sink:
        for f in frames:
            sink.write(f)
        return sink.count
