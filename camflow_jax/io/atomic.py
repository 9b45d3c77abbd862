"""Safe output writing shared by the tools, the trainer and the checkpoint writer.

* an existing output file is never replaced without ``overwrite``; files a tool did not write are
  never deleted, even with ``overwrite``;
* an output is never the input: identity is decided by the file system (``os.path.samefile``:
  symlinks and hard links included), not by comparing path strings;
* outputs are written to a hidden temporary file or folder next to their destination and moved
  into place only when complete, so an interrupted or failed run never leaves half a result and
  never damages the previous one; without ``overwrite`` the move fails if the destination appeared
  in the meantime (another run), instead of replacing it; outputs follow the umask;
* :func:`strict_json` is the package's one JSON writer (no ``NaN`` tokens).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from camflow_jax.io import interrupt
from camflow_jax.io.errors import describe_error


def strict_json(obj, *, nonfinite: str = "refuse", **kwargs) -> str:
    """The one JSON writer of the package: valid JSON text (no ``NaN``/``Infinity`` tokens).

    numpy arrays and scalars become lists and Python numbers, tuples become lists and dict keys
    strings. Non-finite floats, which JSON cannot hold, follow ``nonfinite``:

    * ``"refuse"`` (default): ValueError (results that must be finite, e.g. a homography);
    * ``"mark"``: NaN (undefined) -> ``null``, +-inf -> the strings ``"inf"`` / ``"-inf"``
      (result tables, where an infinite PSNR of identical images is a value).
    """
    if nonfinite not in ("refuse", "mark"):
        raise ValueError(f"nonfinite must be 'refuse' or 'mark', got {nonfinite!r}")
    try:
        return json.dumps(_json_value(obj, nonfinite == "mark"), allow_nan=False, **kwargs)
    except ValueError as e:
        raise ValueError(f"refusing to write invalid JSON (a value is NaN or infinite): {e}") from None


def _json_value(x, mark: bool):
    if isinstance(x, dict):
        return {str(k): _json_value(v, mark) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_value(v, mark) for v in x]
    if isinstance(x, np.ndarray):
        return _json_value(x.tolist(), mark)
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if mark and not math.isfinite(v):
            return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return v
    return x


# ----------------------------------------------------------------------------- identity
def same_file(a, b) -> bool:
    """True when ``a`` and ``b`` exist and are the same file or folder (symlinks followed,
    hard links detected by inode)."""
    if a is None or b is None:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:  # either does not exist (or cannot be inspected)
        return False


def _inside(path, folder) -> bool:
    """True when ``path``'s parent folder is ``folder`` (by identity)."""
    parent = os.path.dirname(os.path.abspath(os.fspath(path))) or "."
    return same_file(parent, folder)


def check_not_inputs(outputs: Iterable, inputs: Iterable,
                     input_folder_exts: tuple[str, ...] = ()) -> None:
    """ValueError if an output path is (by file identity) one of the inputs, or, for input
    folders, would add a file with one of ``input_folder_exts`` to them."""
    inputs = [os.fspath(p) for p in inputs if p]
    for out in (os.fspath(p) for p in outputs if p):
        for inp in inputs:
            if same_file(out, inp):
                how = "" if os.path.abspath(out) == os.path.abspath(inp) else " (a link to it)"
                raise ValueError(f"output {out} is the input {inp}{how}; choose another output")
            if (input_folder_exts and os.path.isdir(inp) and _inside(out, inp)
                    and os.path.splitext(out)[1].lower() in input_folder_exts):
                raise ValueError(f"output {out} would be written into the input folder {inp} "
                                 "and become one of its frames; choose another output")


def check_distinct(outputs: Iterable[tuple[str, object]]) -> None:
    """ValueError when two of a run's outputs, ``(what, path)`` pairs (``what`` names the flag
    that chose it), are one file: the same path spelled differently, or links to one file.
    Found up front, it would otherwise be found when the second is moved into place, after the
    whole run, as if another run had written it."""
    seen: list[tuple[str, str]] = []
    for what, path in outputs:
        if not path:
            continue
        path = os.fspath(path)
        for other_what, other in seen:
            if os.path.abspath(path) == os.path.abspath(other) or same_file(path, other):
                raise ValueError(f"{what} and {other_what} are the same file ({path}): a run writes "
                                 "each output once; choose another name for one of them")
        seen.append((what, path))


# ----------------------------------------------------------------------------- overwrite policy
def existing_outputs(path, owned: Callable[[str], bool] | Iterable[str] | None = None) -> list[str]:
    """Existing files a run writing ``path`` would replace.

    A file (or link) path: ``[path]`` if it exists. A folder: the entries inside it that the tool
    writes (``owned``: a predicate on names or a collection of names; None = every entry).
    """
    path = os.fspath(path)
    if not os.path.lexists(path):
        return []
    if not os.path.isdir(path):
        return [path]
    pred = _owned(owned)
    return sorted(os.path.join(path, n) for n in os.listdir(path) if pred(n))


def _owned(owned) -> Callable[[str], bool]:
    if owned is None:
        return lambda n: True
    if callable(owned):
        return owned
    names = frozenset(owned)
    return names.__contains__


def _refuse_existing(existing: list[str], overwrite: bool) -> None:
    if existing and not overwrite:
        shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if len(existing) > 3 else "")
        raise FileExistsError(f"refusing to overwrite {shown} (pass -y/--overwrite to replace)")


def check_writable(folder: str) -> None:
    """Creates ``folder`` (and parents) if needed and checks a file can be created in it."""
    probe: list[str] = []
    try:
        os.makedirs(folder, exist_ok=True)
        new_temp(folder, ".write-test-", "", "file", probe)
    except OSError as e:  # the errno in plain words ("read-only file system", "disk full"...)
        why = describe_error(OSError(e.errno, e.strerror)) if e.errno else str(e)
        raise OSError(f"cannot write to {folder}: {why}") from None
    finally:
        _remove(probe)


def check_output_dir(path, owned, overwrite: bool, inputs: Iterable = ()) -> None:
    """Refuses (FileExistsError / ValueError / OSError) an output folder before any work:
    not a folder, one of the inputs, holding files the tool would replace without
    ``overwrite``, or not writable (it and its parent are probed)."""
    path = os.fspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"output {path} exists and is not a folder")
    check_not_inputs([path], inputs)
    owned_pred = _owned(owned)
    if os.path.isdir(path):
        check_not_inputs([os.path.join(path, n) for n in os.listdir(path) if owned_pred(n)], inputs)
    _refuse_existing(existing_outputs(path, owned), overwrite)
    check_writable(os.path.dirname(os.path.abspath(path)))
    if os.path.isdir(path):
        check_writable(path)


def check_output_file(path, overwrite: bool, inputs: Iterable = ()) -> None:
    """Like :func:`check_output_dir` for a single output file."""
    if not path:
        return
    path = os.fspath(path)
    if os.path.isdir(path):
        raise FileExistsError(f"output {path} is a folder")
    check_not_inputs([path], inputs)
    _refuse_existing(existing_outputs(path), overwrite)
    check_writable(os.path.dirname(os.path.abspath(path)))


# ----------------------------------------------------------------------------- temporaries
def new_temp(folder: str, prefix: str, suffix: str, kind: str, names: list) -> str:
    """Creates a new empty file (``kind="file"``, mode 0600) or folder (``"dir"``, 0700) with a
    random name in ``folder`` and returns its path.

    The name goes into ``names`` (a one-element list, replaced on a retry) *before* the file
    exists, so whoever removes ``names`` in a ``finally`` block removes it even when SIGINT or
    SIGTERM, raised as an exception between any two steps (:func:`camflow_jax.cli.harness.run_cli`),
    came just after the creation: ``tempfile.mkstemp`` returns the name only once the file
    exists, and an interrupt in between left a hidden partial behind. Names are 48 random bits:
    a name taken by another process is skipped (FileExistsError), never removed."""
    if kind not in ("file", "dir"):
        raise ValueError(f"kind must be 'file' or 'dir', got {kind!r}")
    # While it exists, a SIGINT / SIGTERM is recorded (the work stops at its next check and
    # this is removed as it unwinds) instead of ending the process at once (io.interrupt).
    interrupt.track(names)
    for _ in range(100):
        name = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        names[:] = [name]
        try:
            if kind == "file":
                os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            else:
                os.mkdir(name, 0o700)
            return name
        except FileExistsError:
            names.clear()  # another's: never ours to remove
        except BaseException:
            if not names or not os.path.lexists(names[0]):
                interrupt.untrack(names)
            raise
    interrupt.untrack(names)
    raise FileExistsError(errno.EEXIST, "no free temporary name", os.path.join(folder, prefix))


def _remove(names: list) -> None:
    """Removes the files or folders named in ``names`` (those that exist)."""
    try:
        for name in names:
            if os.path.isdir(name) and not os.path.islink(name):
                shutil.rmtree(name, ignore_errors=True)
            elif os.path.lexists(name):
                os.remove(name)
    finally:
        interrupt.untrack(names)


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[str]:
    """A new folder in the system's temporary folder (``TMPDIR``), removed with everything in
    it when the block ends, however it ends (an exception, SIGINT / SIGTERM raised by the CLI
    harness included: see :func:`new_temp`)."""
    names: list[str] = []
    try:
        yield new_temp(tempfile.gettempdir(), prefix, "", "dir", names)
    finally:
        _remove(names)


# ----------------------------------------------------------------------------- atomic writing
def _temp_name(path: str) -> tuple[str, str]:
    folder = os.path.dirname(os.path.abspath(path))
    stem = os.path.basename(os.path.normpath(path))
    return folder, f".{stem}.partial-"


#: OS failures of a write that say nothing about which file (the data, not the name, failed).
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)


def _disk_full(folder: str) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (64 << 10)


def _at_destination(e: OSError, tmp: str, path: str) -> OSError:
    """``e`` (raised while writing ``tmp``) told in terms of the destination ``path``: OS errors
    name the temporary path or none at all (a full disk fails the write, not the open), and
    OpenCV writers return False without a reason (checked against the free space here)."""
    fn = e.filename
    if e.errno is not None:
        if fn not in (None, "") and not str(fn).startswith(tmp):
            return e  # about another file (e.g. an input read inside the block)
        if fn in (None, "") and e.errno not in _WRITE_ERRNOS:
            return e
        return type(e)(e.errno, e.strerror, path)
    # No errno (OpenCV's False, numpy's "6144 requested and 4064 written"): a full disk under
    # the destination explains it; otherwise at least name the destination, not the temporary.
    if _disk_full(os.path.dirname(os.path.abspath(path))):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    if tmp in str(e):
        return type(e)(str(e).replace(tmp, path))
    return e


def _raced(path: str) -> FileExistsError:
    return FileExistsError(f"refusing to overwrite {path}: it appeared while this run was writing "
                           "(another run writing the same output?); pass -y/--overwrite to replace")


def _link_exclusive(src: str, dst: str) -> None:
    """Puts the file ``src`` at ``dst`` only if ``dst`` does not exist (atomically: link(2)
    fails with EEXIST); falls back to an O_EXCL reservation where hard links are unsupported."""
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        raise _raced(dst) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
    try:
        fd = os.open(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        raise _raced(dst) from None
    os.close(fd)
    os.replace(src, dst)  # onto our own reservation


class AtomicOutputs:
    """The outputs of one run, written to hidden temporaries next to their destinations and all
    moved into place when the ``with`` block succeeds, in the order they were added (put the
    main output first); on an exception (or SIGINT/SIGTERM, see :func:`run_cli`) every
    temporary is removed and no destination is touched.

    ``overwrite=False``: a destination is never replaced, not even one that appeared while the
    run was writing (another process): the move uses link(2) / rename(2) onto a missing path,
    which fails instead of replacing, so the check cannot race; the outputs already moved by
    this run are then taken back and the run fails with ``refusing to overwrite PATH``.
    ``overwrite=True``: destinations are replaced (``os.replace``). Files and folders get the
    permissions the umask gives (not mkstemp's 0600). ``record=False``: the files are not the
    run's outputs (a cache's entries) and :func:`outcome` does not list them.
    """

    def __init__(self, overwrite: bool = True, *, record: bool = True):
        self.overwrite = bool(overwrite)
        self.record = bool(record)
        # kind, [tmp] (empty until named), path, owned
        self._entries: list[tuple[str, list[str], str, Callable[[str], bool]]] = []

    def file(self, path, suffix: str | None = None) -> str:
        """A temporary path for the file ``path`` (same extension unless ``suffix``, so writers
        that choose a format by extension still work)."""
        path = os.fspath(path)
        folder, prefix = _temp_name(path)
        os.makedirs(folder, exist_ok=True)
        ext = os.path.splitext(path)[1] if suffix is None else suffix
        return self._new("file", folder, prefix, ext, path, _owned(None))

    def dir(self, path, owned=None) -> str:
        """A temporary folder whose files become ``path``'s (see :func:`atomic_dir`)."""
        path = os.fspath(path)
        folder, prefix = _temp_name(path)
        os.makedirs(folder, exist_ok=True)
        return self._new("dir", folder, prefix, "", path, _owned(owned))

    def _new(self, kind, folder, prefix, suffix, path, owned) -> str:
        # The entry is recorded before its temporary exists (new_temp): an interrupt right
        # after the creation cannot leave an unrecorded partial behind.
        names: list[str] = []
        entry = (kind, names, path, owned)
        self._entries.append(entry)
        try:
            new_temp(folder, prefix, suffix, kind, names)
        except BaseException:
            if not names:  # nothing was created: no entry (a caught failure must not fail the commit)
                self._entries.remove(entry)
            raise
        return names[0]

    def __enter__(self) -> "AtomicOutputs":
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self._commit()
            elif isinstance(exc, OSError):
                # A named temporary is mapped to its destination; an unnamed write failure
                # (ENOSPC...) to the output added last, the one being written.
                for _, names, path, _ in reversed(self._entries):
                    better = _at_destination(exc, names[0], path) if names else exc
                    if better is not exc:
                        raise better from exc
        finally:
            self._cleanup()
        return False

    def _cleanup(self) -> None:
        for _, names, _, _ in self._entries:
            _remove(names)

    def _commit(self) -> None:
        done: list[tuple[str, list[str]]] = []  # kind, paths this run created (undone on a race)
        mode = 0o666 & ~_umask()
        moved: list[str] = []
        try:
            for kind, (tmp,), path, owned in self._entries:
                # After SIGINT / SIGTERM nothing more is moved into place (io.interrupt).
                interrupt.check()
                try:
                    if kind == "file":
                        if not os.path.exists(tmp):
                            raise OSError(f"nothing was written for {path}")
                        os.chmod(tmp, mode)
                        if self.overwrite:
                            os.replace(tmp, path)  # a symlink at path is replaced, never its target
                        else:
                            _link_exclusive(tmp, path)
                            done.append(("file", [path]))
                    else:
                        created = _commit_dir(tmp, path, owned, self.overwrite)
                        done.append(("dir" if created is None else "files", [path] if created is None else created))
                except OSError as e:
                    raise _at_destination(e, tmp, path) from e
                moved.append(path)
                if self.record:
                    _OUTCOME["moved"].append(path)
        except BaseException:
            if not self.overwrite:
                _undo(done)
                _OUTCOME["moved"][:] = [p for p in _OUTCOME["moved"] if p not in moved]
                moved = []
            if self.record:
                _OUTCOME["kept"].extend(path for _, _, path, _ in self._entries if path not in moved)
            raise


#: What this process's :class:`AtomicOutputs` moved into place (``moved``) and, of a commit cut
#: short (an error, SIGINT / SIGTERM), which outputs were not (``kept``: their previous version,
#: if any, stays): the command lines' interrupt line says it (:func:`outcome`).
_OUTCOME: dict[str, list[str]] = {"moved": [], "kept": []}


def outcome() -> tuple[list[str], list[str]]:
    """``(moved, kept)``: the outputs moved into place since :func:`reset_outcome`, and those a
    commit cut short left out (see :data:`_OUTCOME`)."""
    return list(_OUTCOME["moved"]), list(_OUTCOME["kept"])


def reset_outcome() -> None:
    """Forgets :func:`outcome` (each command-line run starts afresh)."""
    for v in _OUTCOME.values():
        v.clear()


def _undo(done) -> None:
    """Removes what an exclusive commit created before a later output of the run failed."""
    for kind, paths in reversed(done):
        for p in paths:
            with contextlib.suppress(OSError):
                if kind == "dir":
                    shutil.rmtree(p)
                else:
                    os.remove(p)


@contextlib.contextmanager
def atomic_file(path, suffix: str | None = None, *, overwrite: bool = True,
                record: bool = True) -> Iterator[str]:
    """Yields a temporary path next to ``path`` (same extension, so writers that pick a format
    by extension still work); moved onto ``path`` when the block succeeds, removed when it
    fails. ``overwrite=False``: fails instead of replacing a ``path`` that exists by then;
    ``record=False``: not one of the run's outputs (:class:`AtomicOutputs`). A symlink at
    ``path`` is replaced, never its target."""
    with AtomicOutputs(overwrite, record=record) as outs:
        yield outs.file(path, suffix)


def write_text_atomic(path, text: str, *, overwrite: bool = True) -> None:
    with atomic_file(path, overwrite=overwrite) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)


@contextlib.contextmanager
def atomic_dir(path, owned=None, *, overwrite: bool = True) -> Iterator[str]:
    """Yields a temporary folder next to ``path``; when the block succeeds its files become
    ``path``'s, otherwise it is deleted and ``path`` is untouched.

    ``path`` missing or empty: the folder is renamed into place (all or nothing). ``path``
    holding files: each new file replaces its namesake with ``os.replace`` and files the tool
    wrote before (``owned``, see :func:`existing_outputs`) that the new run did not write are
    removed; other files are left alone. Overwrite permission is the caller's check
    (:func:`check_output_dir`); ``overwrite=False`` also refuses, at the move, a result that
    appeared meanwhile (:class:`AtomicOutputs`).
    """
    with AtomicOutputs(overwrite) as outs:
        yield outs.dir(path, owned)


def _commit_dir(tmp: str, path: str, owned: Callable[[str], bool], overwrite: bool = True):
    """Moves ``tmp``'s files into ``path``. Returns None when ``tmp`` itself became ``path``,
    else the paths created (for :func:`_undo`; only tracked without ``overwrite``)."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"output {path} exists and is not a folder")
    if not os.path.lexists(path) or (not os.path.islink(path) and not os.listdir(path)):
        os.chmod(tmp, 0o777 & ~_umask())
        try:
            os.rename(tmp, path)  # rename(2) replaces only a missing or empty folder, atomically
            return None
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not overwrite:  # another run filled it meanwhile
                raise _raced(path) from None
    new = os.listdir(tmp)
    if not overwrite:
        created = []
        try:
            for name in new:
                src, target = os.path.join(tmp, name), os.path.join(path, name)
                if os.path.isdir(src) and not os.path.islink(src):
                    try:
                        os.mkdir(target)  # an exclusive reservation...
                    except FileExistsError:
                        raise _raced(target) from None
                    created.append(target)
                    os.rename(src, target)  # ...that rename(2) may replace (it is empty)
                else:
                    _link_exclusive(src, target)
                    created.append(target)
        except BaseException:
            _undo([("file" if os.path.isfile(p) else "dir", [p]) for p in created])
            raise
        return created
    trash = None
    try:
        for name in new:
            target = os.path.join(path, name)
            if os.path.isdir(target) and not os.path.islink(target):
                # rename(2) cannot replace a non-empty folder: move the old one aside first.
                trash = trash or tempfile.mkdtemp(prefix=".replaced-", dir=path)
                os.rename(target, os.path.join(trash, name))
            os.replace(os.path.join(tmp, name), target)
    finally:
        if trash:
            shutil.rmtree(trash, ignore_errors=True)
    stale = set(n for n in os.listdir(path) if owned(n)) - set(new)
    for name in stale:
        target = os.path.join(path, name)
        if os.path.isfile(target) or os.path.islink(target):
            os.remove(target)
        elif os.path.isdir(target):
            shutil.rmtree(target)
    return []


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask would race with other threads)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask
