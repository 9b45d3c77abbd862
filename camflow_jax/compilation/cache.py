"""JAX's persistent compilation cache, on by default in a per-user folder: :func:`enable`.

Where (:func:`cache_root`, then ``jax/<host>`` under it, ``<host>`` naming the CPU:
:func:`host_tag`):

* ``$CAMFLOW_JAX_CACHE_DIR`` when set;
* else ``$XDG_CACHE_HOME/camflow_jax`` (an absolute ``XDG_CACHE_HOME``), else
  ``~/.cache/camflow_jax``.

Opt-out: ``CAMFLOW_JAX_NO_CACHE=1`` (anything but empty or ``0``) turns off every cache of this
package (compiled programs, exported programs, static bases). The user's own JAX setting always
wins: with ``JAX_COMPILATION_CACHE_DIR`` (or ``jax_compilation_cache_dir`` set in the process)
JAX uses that folder with its own thresholds, and ``JAX_ENABLE_COMPILATION_CACHE=false`` keeps
JAX's cache off; :func:`enable` then changes nothing.

What :func:`enable` sets, in our folder only:

* ``jax_persistent_cache_min_compile_time_secs = 0`` (JAX's default, 1 s, would store only the
  big programs): the small programs (eager ``jnp`` ops, the refinement's homography fit) took
  0.03-0.24 s each to compile and 0.002-0.016 s to read back on the 2-core test machine,
  about 4 KiB each on disk (docs/performance.md). ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS``
  in the environment wins.
* its own file store for JAX's entries (same file names as JAX's: ``<key>-cache``), because
  JAX's writes its files in place: a full disk, a crash or a second process reading at the
  wrong moment leaves or sees a truncated entry, which JAX then warns about on every run and
  never replaces. Here every entry is written to a temporary file and renamed into place
  (readers never see part of one), an entry that does not decompress is a miss and is replaced,
  and a folder that cannot be written (read-only, full, not a folder) costs one warning line
  per process, after which the process compiles without storing. This hooks into a private JAX
  function (``jax._src.compilation_cache.get_file_cache``); a JAX without it keeps its own
  store, and a user's ``jax_compilation_cache_max_size`` (LRU eviction) keeps JAX's too.

Entries from another jax/jaxlib version are never read: JAX's cache key holds the versions.
The folder may be deleted at any time.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import threading
from collections.abc import Mapping
from pathlib import Path

import jax

from camflow_jax.io import atomic
from camflow_jax.io.errors import describe_error

__all__ = ["OPT_OUT_ENV", "DIR_ENV", "JAX_SUBDIR", "opted_out", "cache_root", "host_tag", "enable", "warn_once",
           "failure_text"]

#: Set to anything but ``0`` or empty: no cache of this package (JAX's own settings still apply).
OPT_OUT_ENV = "CAMFLOW_JAX_NO_CACHE"
#: The cache folder, instead of the per-user default.
DIR_ENV = "CAMFLOW_JAX_CACHE_DIR"
#: JAX's compiled programs, under the cache folder.
JAX_SUBDIR = "jax"
#: JAX's own setting of the threshold, which :func:`enable` leaves alone.
MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_warned = False


def opted_out(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(OPT_OUT_ENV, "") not in ("", "0")


def cache_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """This package's per-user cache folder (see the module doc), or None when opted out or
    when there is no home folder to put it in. Nothing is created here."""
    env = os.environ if environ is None else environ
    if opted_out(env):
        return None
    if env.get(DIR_ENV):
        return Path(os.path.expanduser(env[DIR_ENV])).absolute()
    xdg = env.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "camflow_jax"
    home = env.get("HOME")
    if not home:
        try:
            home = str(Path.home())
        except (RuntimeError, KeyError):
            return None
    return Path(home) / ".cache" / "camflow_jax"


@functools.lru_cache(maxsize=1)
def host_tag() -> str:
    """A short name of this machine's CPU: its architecture and a hash of its model and
    instruction-set flags (Linux: ``/proc/cpuinfo``). Programs compiled for the host CPU go
    in a folder of their own per tag, so a cache folder shared between machines (a network
    home) never hands one CPU code built for another."""
    try:
        with open("/proc/cpuinfo") as fh:
            fields = {}
            for line in fh:
                if not line.strip():
                    break  # the first processor's block
                k, _, v = line.partition(":")
                fields[k.strip()] = v.strip()
        text = "|".join(fields.get(k, "") for k in ("vendor_id", "model name", "flags", "Features", "CPU part"))
    except OSError:  # not Linux
        text = platform.processor() or ""
    return f"{platform.machine() or 'cpu'}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def warn_once(message: str) -> None:
    """The one warning line a process gets about its caches (the first problem; later ones are
    logged at debug level). The run goes on without what failed."""
    global _warned
    with _lock:
        first, _warned = not _warned, True
    if first:
        _log.warning("warning: %s", message)
    else:
        _log.debug("%s", message)


def failure_text(e: OSError, folder) -> str:
    """``e`` in one line, naming ``folder`` unless the error names a path already."""
    text = describe_error(e)
    return text if e.filename else f"{text}: {folder}"


def enable(environ: Mapping[str, str] | None = None) -> str | None:
    """Turns on JAX's persistent compilation cache in ``<cache_root>/jax/<host_tag>`` unless the user set
    up (or turned off) JAX's own, or opted out (module doc). Idempotent and cheap; creates
    nothing until JAX first stores a program. Returns the folder JAX caches in (the user's own,
    or ours), or None when it caches nothing."""
    env = os.environ if environ is None else environ
    with _lock:
        current = jax.config.jax_compilation_cache_dir
        if current:
            return current  # the user's, or ours from an earlier call
        if not jax.config.jax_enable_compilation_cache:
            return None
        root = cache_root(env)
        if root is None:
            return None
        path = str(root / JAX_SUBDIR / host_tag())
        _use_atomic_store(path)
        jax.config.update("jax_compilation_cache_dir", path)
        if MIN_TIME_ENV not in env:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        return path


# ----------------------------------------------------------------------------- size bound
#: Each cache folder (JAX's programs for this CPU, each kind of the package's files) is kept under
#: this many bytes: the files used longest ago go first. Programs of an older package version or
#: another jax are never read again (their keys differ) and age out this way; before, the cache
#: only grew (11 -> 21 MB after one edit of the package).
MAX_FOLDER_BYTES = 512 * 1024 * 1024
_pruned: set = set()


#: A file read is marked used (its mtime set to now) only when its mark is older than this: the
#: recency :func:`prune` needs is a matter of days, and a file's mtime otherwise says when it was
#: written.
TOUCH_AFTER_SECONDS = 24 * 3600


def touch(path, now: float | None = None) -> None:
    """Marks a cache file as used now (its mtime, when older than :data:`TOUCH_AFTER_SECONDS`), so
    :func:`prune` keeps it longer than files nobody reads."""
    import time

    try:
        now = time.time() if now is None else now
        if now - os.stat(path).st_mtime > TOUCH_AFTER_SECONDS:
            os.utime(path, (now, now))
    except OSError:
        pass


def prune(folder, max_bytes: int = MAX_FOLDER_BYTES, *, once: bool = True) -> int:
    """Removes the least recently used files of ``folder`` (by mtime; :func:`touch` marks a use)
    until the rest fits in ``max_bytes``; hidden temporaries and subfolders are left alone.
    ``once``: at most once per folder and process (a listing per write would cost more than it
    saves). Returns the bytes removed; never raises."""
    key = os.path.abspath(str(folder))
    if once and key in _pruned:
        return 0
    _pruned.add(key)
    try:
        entries = []
        with os.scandir(key) as it:
            for e in it:
                if e.is_file(follow_symlinks=False) and not e.name.startswith("."):
                    st = e.stat(follow_symlinks=False)
                    entries.append((st.st_mtime, st.st_size, e.path))
    except OSError:
        return 0
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        try:
            os.remove(path)
        except OSError:
            continue
        total -= size
        removed += size
    return removed


# ----------------------------------------------------------------------------- JAX's entries
def _intact(data: bytes) -> bool:
    """Whether a cache entry decompresses (JAX's compression, whichever it uses)."""
    try:
        from jax._src import compilation_cache as cc

        cc.decompress_executable(data)
    except ImportError:
        return True  # cannot check: let JAX try
    except Exception:
        return False
    return True


def _file_cache_class():
    """A JAX ``CacheInterface`` over a folder, written atomically, never raising (None when
    this JAX has no such interface)."""
    try:
        from jax._src.compilation_cache_interface import CacheInterface
    except ImportError:
        return None

    class AtomicFileCache(CacheInterface):
        def __init__(self, path: str):
            self._path = Path(path)
            self._writable = True

        def _file(self, key: str) -> Path:
            return self._path / f"{key}-cache"

        def get(self, key: str):
            try:
                data = self._file(key).read_bytes()
            except OSError:
                return None  # missing or unreadable: a miss
            if not _intact(data):
                _log.debug("damaged compilation cache entry %s: compiling it again", key)
                return None
            touch(self._file(key))
            return data

        def put(self, key: str, value: bytes) -> None:
            if not self._writable:
                return
            try:
                self._path.mkdir(parents=True, exist_ok=True)
                with atomic.atomic_file(self._file(key), record=False) as tmp:
                    with open(tmp, "wb") as fh:
                        fh.write(value)
                prune(self._path)
            except OSError as e:
                self._writable = False
                warn_once(f"cannot store compiled programs ({failure_text(e, self._path)}); compiling without "
                          f"storing them (set {OPT_OUT_ENV}=1 to turn the cache off)")

    return AtomicFileCache


def _use_atomic_store(path: str) -> bool:
    """Makes JAX store its entries for ``path`` with :func:`_file_cache_class`'s class (module
    doc); False (JAX's own store) where this JAX lacks the hook or the user asked for eviction."""
    try:
        from jax._src import compilation_cache as cc

        original = cc.get_file_cache
    except (ImportError, AttributeError):
        return False
    cls = _file_cache_class()
    if cls is None:
        return False
    original = getattr(original, "_camflow_original", original)

    def get_file_cache(p):
        if (os.path.abspath(str(p)) == os.path.abspath(path)
                and getattr(jax.config, "jax_compilation_cache_max_size", -1) == -1
                and not getattr(jax.config, "jax_compilation_cache_check_contents", False)):
            return cls(str(p)), p
        return original(p)

    get_file_cache._camflow_original = original
    cc.get_file_cache = get_file_cache
    return True
