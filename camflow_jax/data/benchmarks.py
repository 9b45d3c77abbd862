"""Readers for the public camera-motion benchmarks: GHOF-Cam, the GHOF benchmark files, CAHomo.

Every reader is a random-access source (``len(r)``, ``r[i]`` -> dict of numpy arrays) with
``r.categories`` (table columns, in order) and ``r.name``. The evaluation opens them by dataset
name through :mod:`camflow_jax.data.datasets`; the training sources share the GHOF
intrinsics and the band-wise gyro flow defined here. Images are returned as uint8 RGB
``[H, W, 3]``; flows as float32 ``[H, W, 2]`` (u, v) on image 1's grid (docs/design.md,
"Conventions").

Formats (docs/design.md, "Benchmarks and metrics"):

* GHOF-Cam — ``GHOF-Cam.npy``: a pickled object array of dicts with ``img1``, ``img2``
  (600x800x3 uint8), ``split`` in {RE, Fog, Dark, Rain, SNOW}, ``mask`` (valid static pixels),
  ``gt_flow`` and ``homo_field`` (flows ``[H, W, 2]``). Samples carry ``category`` in
  :data:`GHOF_CATEGORIES` (Fog -> FOG, Dark -> LL, Rain -> RAIN).
* GHOF benchmark — ``GHOF_Clean_*.npy`` / ``GHOF_Final_*.npy``: object arrays of dicts with
  ``img1``, ``img2``, ``homo`` (gyro homography: ``[3, 3]`` or 10 row bands ``[10, 3, 3]`` /
  ``[10, 9]``), ``gt_flow``, ``split`` (Clean also ``homo_field``). The reader adds
  ``gyro_field``, the band-wise homography flow (:func:`bandwise_homography_flow`).
* CAHomo test set — a folder with ``test.txt`` (lines ``VIDEO/FILE1 VIDEO/FILE2``; the public
  ``Test_List.txt`` appends ``LM`` to some file names, which is tolerated), images under
  ``img/VIDEO/FILE`` and point files ``pt/<FILE1>_<FILE2>.npy`` holding a pickled dict whose
  ``matche_pts`` is a list of pairs ``[(x1, y1), (x2, y2)]`` (pixels; image 1 then image 2; at
  least 6 pairs). The original release's folder names ``Test/`` and ``Coordinate/`` and its
  point-file names that keep the ``LM`` marks are accepted too. Category by video id
  (:data:`CAHOMO_VIDEOS`, checked in the order RE, LT, LL, SF, LF).

Pickles are loaded with a restricted unpickler (:func:`load_npy`) that only rebuilds numpy
arrays, numpy scalars and builtin containers; anything else (``os.system``, arbitrary classes)
is refused with a ValueError.

Optional depth (any monocular/multi-view estimator; the paper used VGGT) is read per sample from
``depth_dir`` as ``<key>.npz`` (arrays ``depth1``, ``depth2``, optionally ``K`` = (fx, fy, cx,
cy)) or as ``<key>_1.npy`` + ``<key>_2.npy``; ``key`` is the sample's ``key`` field (GHOF: the
index as 5 digits, e.g. ``00042``; CAHomo: ``<stem1>_<stem2>``). Depth maps of another size are
resized (bilinear) to the image size; K always refers to the image as returned.
"""

from __future__ import annotations

import ast
import os
import pickle
import struct
from collections.abc import Sequence

import numpy as np

from camflow_jax.data.depth import check_depth_aspect, resize_depth
from camflow_jax.io.images import read_rgb

__all__ = [
    "GHOF_CATEGORIES",
    "GHOF_SPLITS",
    "GHOF_INTRINSICS",
    "CAHOMO_CATEGORIES",
    "CAHOMO_VIDEOS",
    "RestrictedUnpickler",
    "load_npy",
    "ghof_category",
    "cahomo_category",
    "bandwise_homography_flow",
    "load_depth_pair",
    "GHOFCam",
    "GHOFBenchmark",
    "CAHomoTest",
]

GHOF_CATEGORIES = ("RE", "FOG", "LL", "RAIN", "SNOW")
#: Raw ``split`` values in the GHOF files -> table category.
GHOF_SPLITS = {"RE": "RE", "FOG": "FOG", "DARK": "LL", "LL": "LL", "RAIN": "RAIN", "SNOW": "SNOW"}
#: (fx, fy, cx, cy) of the GHOF phone camera at 600 x 800 (from the GHOF authors' gyro pipeline).
GHOF_INTRINSICS = (573.85, 575.04, 406.01, 309.01)

CAHOMO_CATEGORIES = ("RE", "LT", "LL", "SF", "LF")
#: Category -> video ids, checked in this order (0000030 appears only under RE here).
CAHOMO_VIDEOS = {
    "RE": ("0000011", "0000016", "00000147", "00000155", "00000158", "00000107", "00000239", "0000030"),
    "LT": ("0000038", "0000044", "0000046", "0000047", "00000238", "00000177", "00000188", "00000181"),
    "LL": ("0000085", "00000100", "0000091", "0000092", "00000216", "00000226"),
    "SF": ("00000244", "00000251", "0000026", "0000034", "00000115"),
    "LF": ("00000104", "0000031", "0000035", "00000129", "00000141", "00000200"),
}


# ----------------------------------------------------------------------------- safe loading
def _np_attr(paths: Sequence[str]):
    import importlib

    for p in paths:
        mod, _, name = p.rpartition(".")
        try:
            return getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError):
            continue
    return None


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that only resolves the globals needed to rebuild numpy object arrays.

    Allowed: numpy's array/scalar reconstruction helpers (``numpy.core`` and ``numpy._core``
    spellings), ``numpy.ndarray``, ``numpy.dtype`` and the ``numpy.dtypes`` classes, plain
    builtin containers/values, ``collections.OrderedDict`` and ``_codecs.encode`` (how protocol-2
    pickles store bytes). Everything else raises :class:`pickle.UnpicklingError`.
    """

    _NUMPY_HELPERS = {
        "_reconstruct": ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct"),
        "scalar": ("numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar"),
        "_frombuffer": ("numpy._core.numeric._frombuffer", "numpy.core.numeric._frombuffer"),
    }
    _NUMPY_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric",
                      "numpy._core.numeric")
    _BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "slice", "complex", "bytearray",
                 "bytes", "str", "int", "float", "bool", "range"}

    def find_class(self, module: str, name: str):
        if module in self._NUMPY_MODULES and name in self._NUMPY_HELPERS:
            obj = _np_attr(self._NUMPY_HELPERS[name])
            if obj is not None:
                return obj
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        if module == "numpy.dtypes" and name.endswith("DType") and hasattr(np.dtypes, name):
            return getattr(np.dtypes, name)
        if module in ("builtins", "__builtin__") and name in self._BUILTINS:
            import builtins

            return getattr(builtins, name)
        if module == "collections" and name == "OrderedDict":
            import collections

            return collections.OrderedDict
        if module == "_codecs" and name == "encode":
            import codecs

            return codecs.encode
        raise pickle.UnpicklingError(
            f"refusing to load global {module}.{name}: only numpy arrays, numpy scalars and "
            "builtin containers may appear in benchmark files")


def _read_header_3_0(fh):
    """(shape, fortran_order, dtype) of a version-3.0 ``.npy`` header (the 2.0 layout, a 4-byte
    little-endian length, with UTF-8 text), read with the format's own rules: a Python literal
    dict of ``descr``, ``fortran_order`` and ``shape``."""
    (length,) = struct.unpack("<I", fh.read(4))
    header = ast.literal_eval(fh.read(length).decode("utf-8"))
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"the header is not a dict of descr, fortran_order and shape: {header!r}")
    shape = header["shape"]
    if not (isinstance(shape, tuple) and all(isinstance(n, int) and n >= 0 for n in shape)):
        raise ValueError(f"bad shape in the header: {shape!r}")
    return shape, bool(header["fortran_order"]), np.lib.format.descr_to_dtype(header["descr"])


def load_npy(path: str | os.PathLike):
    """Loads a ``.npy`` file; object arrays are unpickled with :class:`RestrictedUnpickler`.

    Raises FileNotFoundError for a missing file and ValueError for a corrupt file or a pickle
    that references anything beyond numpy arrays and builtin containers.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"file not found: {path}")
    fmt = np.lib.format
    with open(path, "rb") as fh:
        try:
            version = fmt.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, fortran, dtype = fmt.read_array_header_2_0(fh)
            else:  # 3.0 (utf-8 header) has no public reader
                shape, fortran, dtype = _read_header_3_0(fh)
        except (ValueError, OSError, SyntaxError, EOFError, struct.error) as e:
            raise ValueError(f"{path}: not a valid .npy file ({e})") from None
        if not dtype.hasobject:
            try:
                return np.load(path, allow_pickle=False)
            except (ValueError, OSError, EOFError) as e:
                raise ValueError(f"{path}: corrupt .npy data ({e})") from None
        try:
            # latin1 lets Python-2 era pickles of numpy arrays load (numpy's own advice).
            arr = RestrictedUnpickler(fh, encoding="latin1").load()
        except pickle.UnpicklingError as e:
            raise ValueError(f"{path}: {e}") from None
        except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
                MemoryError, UnicodeDecodeError, OverflowError, struct.error) as e:
            raise ValueError(f"{path}: corrupt pickled data ({type(e).__name__}: {e})") from None
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{path}: expected a pickled numpy array, found {type(arr).__name__}")
    if arr.shape != tuple(shape):
        raise ValueError(f"{path}: header says shape {shape} but the data has {arr.shape}")
    return arr


def _load_npz(path: str) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot read .npz ({e})") from None


# ----------------------------------------------------------------------------- helpers
def ghof_category(split) -> str:
    """Maps a GHOF ``split`` value (RE, Fog, Dark, Rain, SNOW; any case) to a table category."""
    key = str(split).strip().upper()
    if key not in GHOF_SPLITS:
        raise ValueError(f"unknown GHOF split {split!r}; expected one of RE, Fog, Dark, Rain, SNOW")
    return GHOF_SPLITS[key]


def cahomo_category(video_id: str) -> str | None:
    """CAHomo category of a video id (RE, LT, LL, SF, LF checked in that order), or None."""
    for cat in CAHOMO_CATEGORIES:
        if video_id in CAHOMO_VIDEOS[cat]:
            return cat
    return None


def bandwise_homography_flow(homographies, h: int, w: int) -> np.ndarray:
    """Dense flow of row-band homographies (rolling-shutter gyro pseudo-label).

    ``homographies`` is ``[3, 3]`` (one band) or ``[n, 3, 3]`` / ``[n, 9]``; band i covers rows
    ``[i * (h // n), (i + 1) * (h // n))`` and the last band also takes the remaining rows (for
    GHOF, 10 bands of 60 rows at 600 x 800). Each band's flow is ``H_i(p) - p``.
    """
    hs = np.asarray(homographies, np.float64)
    if hs.shape == (3, 3):
        hs = hs[None]
    elif hs.ndim == 2 and hs.shape[1] == 9:
        hs = hs.reshape(-1, 3, 3)
    if hs.ndim != 3 or hs.shape[1:] != (3, 3) or hs.shape[0] < 1:
        raise ValueError(f"homographies must be [3, 3], [n, 3, 3] or [n, 9], got {np.shape(homographies)}")
    if not np.all(np.isfinite(hs)):
        raise ValueError("homographies contain non-finite values")
    n = hs.shape[0]
    if n > h:
        raise ValueError(f"{n} bands do not fit in {h} rows")
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    band = np.minimum(np.arange(h) // (h // n), n - 1)
    Hp = hs[band][:, None]  # [h, 1, 3, 3] broadcast over columns
    den = Hp[..., 2, 0] * xs + Hp[..., 2, 1] * ys + Hp[..., 2, 2]
    u = (Hp[..., 0, 0] * xs + Hp[..., 0, 1] * ys + Hp[..., 0, 2]) / den - xs
    v = (Hp[..., 1, 0] * xs + Hp[..., 1, 1] * ys + Hp[..., 1, 2]) / den - ys
    return np.stack([u, v], axis=-1).astype(np.float32)


def _as_image(x, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 2:
        a = np.repeat(a[..., None], 3, axis=-1)
    if a.ndim != 3 or a.shape[-1] != 3:
        raise ValueError(f"{what}: expected an image [H, W, 3], got shape {a.shape}")
    if a.dtype != np.uint8:
        a = a.astype(np.float64)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{what}: non-finite pixel values")
        if a.max() <= 1.0 + 1e-6:  # [0, 1] floats
            a = a * 255.0
        a = np.clip(np.round(a), 0, 255).astype(np.uint8)
    return a


def _as_flow(x, hw: tuple[int, int], what: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float32)
    if a.ndim == 3 and a.shape[0] == 2 and a.shape[-1] != 2:  # channel-first storage
        a = np.transpose(a, (1, 2, 0))
    if a.shape != (hw[0], hw[1], 2):
        raise ValueError(f"{what}: expected a flow [{hw[0]}, {hw[1]}, 2], got shape {np.shape(x)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: non-finite flow values")
    return a


def _as_mask(x, hw: tuple[int, int], what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 3 and 1 in (a.shape[0], a.shape[-1]):
        a = a.reshape(a.shape[1:] if a.shape[0] == 1 else a.shape[:2])
    if a.shape != tuple(hw):
        raise ValueError(f"{what}: expected a mask [{hw[0]}, {hw[1]}], got shape {np.shape(x)}")
    a = a.astype(np.float32)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: non-finite mask values")
    if a.max(initial=0.0) > 1.0:  # 0/255 masks
        a = a / 255.0 if a.max() <= 255.0 else (a > 0).astype(np.float32)
    return a


def _resize_depth(d: np.ndarray, hw: tuple[int, int], what: str) -> np.ndarray:
    d = np.asarray(d, np.float32)
    if d.ndim == 3 and 1 in (d.shape[0], d.shape[-1]):
        d = d.reshape(d.shape[1:] if d.shape[0] == 1 else d.shape[:2])
    if d.ndim != 2:
        raise ValueError(f"{what}: depth must be [H, W], got shape {d.shape}")
    ok = np.isfinite(d) & (d > 0)
    if not ok.any():
        raise ValueError(f"{what}: depth has no finite positive value")
    if d.shape != tuple(hw):
        check_depth_aspect(d.shape, hw, what)
        d = resize_depth(d, hw[0], hw[1])
    return d


def load_depth_pair(depth_dir: str | os.PathLike, key: str, hw: tuple[int, int]):
    """Reads ``(depth1, depth2, K or None)`` for sample ``key`` from ``depth_dir`` (see module doc)."""
    depth_dir = os.fspath(depth_dir)
    npz = os.path.join(depth_dir, f"{key}.npz")
    K = None
    if os.path.isfile(npz):
        z = _load_npz(npz)
        if "depth1" not in z or "depth2" not in z:
            raise ValueError(f"{npz}: needs arrays 'depth1' and 'depth2', has {sorted(z)}")
        d1, d2 = z["depth1"], z["depth2"]
        if "K" in z:
            K = np.asarray(z["K"], np.float32).reshape(-1)
            if K.shape != (4,) or not np.all(np.isfinite(K)):
                raise ValueError(f"{npz}: K must be 4 finite numbers (fx, fy, cx, cy), got {z['K']!r}")
    else:
        p1 = os.path.join(depth_dir, f"{key}_1.npy")
        p2 = os.path.join(depth_dir, f"{key}_2.npy")
        if not (os.path.isfile(p1) and os.path.isfile(p2)):
            raise FileNotFoundError(
                f"no depth for sample {key!r} in {depth_dir}: expected {key}.npz or {key}_1.npy + {key}_2.npy")
        d1, d2 = load_npy(p1), load_npy(p2)
    return (_resize_depth(d1, hw, f"{key} depth1"), _resize_depth(d2, hw, f"{key} depth2"), K)


def _dict_sample(obj, i: int, path: str, required: Sequence[str]) -> dict:
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: sample {i} is a {type(obj).__name__}, expected a dict")
    missing = [k for k in required if k not in obj]
    if missing:
        raise ValueError(f"{path}: sample {i} lacks {missing} (has {sorted(obj)})")
    return obj


def _load_object_array(path: str) -> np.ndarray:
    arr = load_npy(path)
    if arr.dtype != object:
        raise ValueError(f"{path}: expected an object array of dicts, found dtype {arr.dtype}")
    arr = arr.reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{path}: contains no samples")
    return arr


class _GHOFBase:
    categories = GHOF_CATEGORIES
    required: tuple[str, ...] = ()

    def __init__(self, path, depth_dir=None, intrinsics=GHOF_INTRINSICS):
        self.path = os.fspath(path)
        self._data = _load_object_array(self.path)
        self.depth_dir = None if depth_dir is None else os.fspath(depth_dir)
        if self.depth_dir is not None and not os.path.isdir(self.depth_dir):
            raise FileNotFoundError(f"depth directory not found: {self.depth_dir}")
        self.intrinsics = None if intrinsics is None else tuple(float(v) for v in intrinsics)
        if self.intrinsics is not None and len(self.intrinsics) != 4:
            raise ValueError(f"intrinsics must be (fx, fy, cx, cy), got {intrinsics!r}")

    def __len__(self) -> int:
        return len(self._data)

    def _common(self, i: int) -> tuple[dict, dict]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} samples")
        i = i % len(self)
        raw = _dict_sample(self._data[i], i, self.path, self.required)
        img1 = _as_image(raw["img1"], f"sample {i} img1")
        img2 = _as_image(raw["img2"], f"sample {i} img2")
        if img1.shape != img2.shape:
            raise ValueError(f"{self.path}: sample {i} images differ in shape {img1.shape} vs {img2.shape}")
        key = f"{i:05d}"
        out = {"img1": img1, "img2": img2, "split": str(raw["split"]),
               "category": ghof_category(raw["split"]), "key": key, "index": i}
        hw = img1.shape[:2]
        K = None if self.intrinsics is None else np.asarray(self.intrinsics, np.float32)
        if self.depth_dir is not None:
            d1, d2, K_file = load_depth_pair(self.depth_dir, key, hw)
            out["depth1"], out["depth2"] = d1, d2
            if K_file is not None:
                K = K_file
        if K is not None:
            out["K"] = K
        return raw, out


class GHOFCam(_GHOFBase):
    """GHOF-Cam (``GHOF-Cam.npy``, 254 samples): dense camera-motion EPE on valid static pixels.

    ``r[i]`` -> img1, img2 (uint8 RGB-as-stored ``[H, W, 3]``), mask float32 ``[H, W]``, gt_flow,
    homo_field float32 ``[H, W, 2]``, category, split, key, index, K (GHOF intrinsics unless
    ``intrinsics=None``), and depth1/depth2 when ``depth_dir`` is given. The whole file is held
    in memory (an object array cannot be memory-mapped; about 2.8 GB for the full benchmark).
    """

    name = "ghof_cam"
    required = ("img1", "img2", "split", "mask", "gt_flow", "homo_field")

    def __getitem__(self, i: int) -> dict:
        raw, out = self._common(i)
        hw = out["img1"].shape[:2]
        out["mask"] = _as_mask(raw["mask"], hw, f"sample {out['index']} mask")
        out["gt_flow"] = _as_flow(raw["gt_flow"], hw, f"sample {out['index']} gt_flow")
        out["homo_field"] = _as_flow(raw["homo_field"], hw, f"sample {out['index']} homo_field")
        return out


class GHOFBenchmark(_GHOFBase):
    """GHOF benchmark file (``GHOF_Clean_*.npy`` or ``GHOF_Final_*.npy``).

    ``r[i]`` -> img1, img2, gt_flow (generic optical flow incl. moving objects), gyro_homography
    ``[n, 3, 3]``, gyro_field (band-wise flow of it), homo_field when the file has it (Clean),
    category, split, key, index, K, depth1/depth2 when ``depth_dir`` is given.
    """

    name = "ghof"
    required = ("img1", "img2", "split", "gt_flow", "homo")

    def __getitem__(self, i: int) -> dict:
        raw, out = self._common(i)
        h, w = out["img1"].shape[:2]
        idx = out["index"]
        out["gt_flow"] = _as_flow(raw["gt_flow"], (h, w), f"sample {idx} gt_flow")
        homo = np.asarray(raw["homo"], np.float64)
        out["gyro_field"] = bandwise_homography_flow(homo, h, w)
        out["gyro_homography"] = (homo.reshape(-1, 3, 3)).astype(np.float32)
        if "homo_field" in raw and raw["homo_field"] is not None:
            out["homo_field"] = _as_flow(raw["homo_field"], (h, w), f"sample {idx} homo_field")
        return out


def _strip_mark(token: str) -> tuple[str, bool]:
    """``VIDEO/FILE.jpgLM`` -> (``VIDEO/FILE.jpg``, True)."""
    if token.endswith("LM"):
        return token[:-2], True
    return token, False


class CAHomoTest:
    """CAHomo test set (4,200 pairs of 640 x 360 frames in 5 categories; sparse PME).

    ``r[i]`` -> img1, img2 (uint8 RGB), points float64 ``[N, 2, 2]`` (all annotated pairs; the
    protocol uses the first 6), category, video, key (``<stem1>_<stem2>``), index, plus K /
    depth1 / depth2 when ``intrinsics`` / ``depth_dir`` are given (CAHomo ships no intrinsics).
    Pairs whose video id is in no category are kept out of ``r`` and listed in ``r.skipped``.
    """

    name = "cahomo"
    categories = CAHOMO_CATEGORIES

    def __init__(self, root, list_file: str | None = None, depth_dir=None, intrinsics=None,
                 num_points: int = 6):
        self.root = os.fspath(root)
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"CAHomo folder not found: {self.root}")
        if list_file is None:
            for cand in ("test.txt", "Test_List.txt"):
                if os.path.isfile(os.path.join(self.root, cand)):
                    list_file = cand
                    break
            else:
                raise FileNotFoundError(f"{self.root}: no test.txt (or Test_List.txt) pair list")
        self.list_path = list_file if os.path.isabs(list_file) else os.path.join(self.root, list_file)
        if not os.path.isfile(self.list_path):
            raise FileNotFoundError(f"pair list not found: {self.list_path}")
        self.img_dir = self._first_dir(("img", "Test"), "image")
        self.pt_dir = self._first_dir(("pt", "Coordinate"), "point")
        self.num_points = int(num_points)
        self.depth_dir = None if depth_dir is None else os.fspath(depth_dir)
        if self.depth_dir is not None and not os.path.isdir(self.depth_dir):
            raise FileNotFoundError(f"depth directory not found: {self.depth_dir}")
        self.intrinsics = None if intrinsics is None else tuple(float(v) for v in intrinsics)
        self.pairs: list[dict] = []
        self.skipped: list[str] = []
        with open(self.list_path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                tokens = line.split()
                if not tokens:
                    continue
                if len(tokens) < 2:
                    raise ValueError(f"{self.list_path}:{lineno}: expected 'VIDEO/FILE1 VIDEO/FILE2', got {line.strip()!r}")
                (f1, m1), (f2, m2) = _strip_mark(tokens[0]), _strip_mark(tokens[1])
                if "/" not in f1 or "/" not in f2:
                    raise ValueError(f"{self.list_path}:{lineno}: file names must be VIDEO/FILE, got {line.strip()!r}")
                video = f1.split("/")[0]
                cat = cahomo_category(video)
                if cat is None:
                    self.skipped.append(line.strip())
                    continue
                b1, b2 = f1.split("/")[-1], f2.split("/")[-1]
                self.pairs.append({
                    "file1": f1, "file2": f2, "video": video, "category": cat,
                    "key": f"{os.path.splitext(b1)[0]}_{os.path.splitext(b2)[0]}",
                    "pt_names": (f"{b1}_{b2}.npy", f"{tokens[0].split('/')[-1]}_{tokens[1].split('/')[-1]}.npy"),
                    "marked": m1 or m2,
                })
        if not self.pairs:
            raise ValueError(f"{self.list_path}: no usable pairs (skipped {len(self.skipped)} with unknown video ids)")

    def _first_dir(self, names, what):
        for n in names:
            p = os.path.join(self.root, n)
            if os.path.isdir(p):
                return p
        raise FileNotFoundError(f"{self.root}: no {what} folder (looked for {' or '.join(names)})")

    def __len__(self) -> int:
        return len(self.pairs)

    def _read_image(self, rel: str) -> np.ndarray:
        return read_rgb(os.path.join(self.img_dir, rel))

    def _read_points(self, pair: dict) -> np.ndarray:
        for name in pair["pt_names"]:
            path = os.path.join(self.pt_dir, name)
            if os.path.isfile(path):
                break
        else:
            raise FileNotFoundError(f"CAHomo point file not found: {os.path.join(self.pt_dir, pair['pt_names'][0])}")
        obj = load_npy(path)
        if obj.dtype == object and obj.shape == ():
            obj = obj.item()
        if isinstance(obj, dict):
            if "matche_pts" not in obj:
                raise ValueError(f"{path}: point dict lacks 'matche_pts' (has {sorted(obj)})")
            obj = obj["matche_pts"]
        try:
            pts = np.asarray(obj, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: matche_pts is not a list of [[x1, y1], [x2, y2]] pairs") from None
        if pts.ndim != 3 or pts.shape[1:] != (2, 2):
            raise ValueError(f"{path}: matche_pts must be [N, 2, 2], got shape {pts.shape}")
        if pts.shape[0] < self.num_points:
            raise ValueError(f"{path}: {pts.shape[0]} point pairs, the protocol needs {self.num_points}")
        if not np.all(np.isfinite(pts)):
            raise ValueError(f"{path}: non-finite point coordinates")
        return pts

    def __getitem__(self, i: int) -> dict:
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} out of range for {len(self)} pairs")
        i = i % len(self)
        pair = self.pairs[i]
        img1, img2 = self._read_image(pair["file1"]), self._read_image(pair["file2"])
        if img1.shape != img2.shape:
            raise ValueError(f"pair {pair['key']}: images differ in shape {img1.shape} vs {img2.shape}")
        out = {"img1": img1, "img2": img2, "points": self._read_points(pair),
               "category": pair["category"], "video": pair["video"], "key": pair["key"], "index": i}
        K = None if self.intrinsics is None else np.asarray(self.intrinsics, np.float32)
        if self.depth_dir is not None:
            d1, d2, K_file = load_depth_pair(self.depth_dir, pair["key"], img1.shape[:2])
            out["depth1"], out["depth2"] = d1, d2
            K = K_file if K_file is not None else K
        if K is not None:
            out["K"] = K
        return out
