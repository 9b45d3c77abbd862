"""Files made once per machine and read back by later processes: :func:`read`, :func:`write`.

A file is named by a hash of what it was made from (:func:`made_from`): its kind, the caller's
parts (e.g. a model's architecture and an input size), and the environment that shaped it
(:func:`environment`: the jax, jaxlib, numpy, flax and opt_einsum versions, the backend and its
device, the JAX settings that change what a trace gives, and a digest of this package's source
code, so an edit to any module invalidates every file). It lives at
``<cache_root>/<kind>/<hash>.bin`` (:func:`camflow_jax.compilation.cache.cache_root`).

Each file holds a header (what it was made from, the payload's length and CRC-32) and the
payload. :func:`read` returns the payload only when the header matches what the reader would
make it from and the payload is whole; anything else (a file from another jax version, a
truncated or damaged file, an unreadable folder) is a miss, and the next :func:`write`
replaces it. Files are written to a temporary name and renamed into place
(:func:`camflow_jax.io.atomic.atomic_file`), so concurrent processes each see a whole file or
none. Each kind's folder stays under :data:`camflow_jax.compilation.cache.MAX_FOLDER_BYTES`: the
first write of a process removes the files used longest ago (a read marks a file used), so files
of older package versions, which no key matches any more, age out. A write that fails (read-only folder, full disk) costs one warning line per process
(:func:`camflow_jax.compilation.cache.warn_once`) and the process carries on without it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import jax
import numpy as np

from camflow_jax.compilation import cache
from camflow_jax.io import atomic

__all__ = ["MAGIC", "environment", "source_digest", "made_from", "path_for", "read", "write"]

MAGIC = b"camflow_jax artifact 1\n"
_PACKAGE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of this package's Python source (every ``.py`` file, by relative path): any edit
    to the code gives another digest (~20 ms for ~110 files, once per process)."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(_PACKAGE)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, str]:
    """What shapes a traced or computed artifact besides its own inputs (see the module doc).
    Initialises JAX's default backend."""
    import jaxlib

    dev = jax.devices()[0]
    return {
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", ""),
        "numpy": np.__version__,
        # what a trace goes through besides jax: the network's layers, einsum's contraction order
        "flax": _version("flax"),
        "opt_einsum": _version("opt_einsum"),
        "backend": jax.default_backend(),
        "platform_version": str(getattr(dev.client, "platform_version", "")),
        "device_kind": str(dev.device_kind),
        "host": cache.host_tag(),
        "x64": str(bool(jax.config.jax_enable_x64)),
        "matmul_precision": str(jax.config.jax_default_matmul_precision),
        "dtype_promotion": str(jax.config.jax_numpy_dtype_promotion),
        "source": source_digest(),
    }


def made_from(kind: str, parts: Any) -> dict:
    """The header a file of ``kind`` made from ``parts`` (JSON-able; e.g. reprs) carries."""
    return {"kind": kind, "parts": parts, "environment": environment()}


def _key(made: dict) -> str:
    return hashlib.sha256(json.dumps(made, sort_keys=True, default=repr).encode()).hexdigest()[:40]


def path_for(kind: str, parts: Any) -> Path | None:
    """Where the file of ``kind`` made from ``parts`` lives (None: caches are off)."""
    root = cache.cache_root()
    if root is None:
        return None
    return root / kind / f"{_key(made_from(kind, parts))}.bin"


def read(kind: str, parts: Any) -> bytes | None:
    """The payload stored for ``kind`` and ``parts``, or None (missing, stale, damaged, caches
    off)."""
    path = path_for(kind, parts)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    expected = json.dumps(made_from(kind, parts), sort_keys=True, default=repr).encode()
    try:
        if not data.startswith(MAGIC):
            return None
        at = len(MAGIC)
        (hlen,) = struct.unpack_from("<I", data, at)
        header = json.loads(data[at + 4:at + 4 + hlen])
        payload = data[at + 4 + hlen:]
        if (json.dumps(header["made_from"], sort_keys=True).encode() != expected
                or header["size"] != len(payload) or header["crc32"] != zlib.crc32(payload)):
            return None
    except (ValueError, KeyError, TypeError, struct.error):
        return None
    cache.touch(path)  # used now: the size bound removes the files used longest ago first
    return payload


def write(kind: str, parts: Any, payload: bytes) -> bool:
    """Stores ``payload`` for ``kind`` and ``parts`` (atomically, replacing what was there).
    False (after at most one warning line per process) when it could not be written."""
    path = path_for(kind, parts)
    if path is None:
        return False
    made = json.loads(json.dumps(made_from(kind, parts), sort_keys=True, default=repr))
    header = json.dumps({"made_from": made, "size": len(payload), "crc32": zlib.crc32(payload)},
                        sort_keys=True).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic.atomic_file(path, record=False) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + struct.pack("<I", len(header)) + header)
                fh.write(payload)
        cache.prune(path.parent)
    except OSError as e:
        cache.warn_once(f"cannot store {kind} ({cache.failure_text(e, path.parent)}); carrying on without it "
                        f"(set {cache.OPT_OUT_ENV}=1 to turn the cache off)")
        return False
    return True
