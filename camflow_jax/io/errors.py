"""Expected failures in one line: which exceptions a tool reports without a traceback
(:data:`EXPECTED_ERRORS`), their one-line description (:func:`describe_error`), and naming the
file being read in such a failure (:func:`reading`). Plain Python: safe in input-pipeline workers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


#: Failures a CLI reports as one line (exit :data:`EXIT_BAD_INPUT`) instead of a traceback:
#: bad values, missing or unreadable files, damaged files of any format (numpy headers raise
#: ``tokenize.TokenError``/``SyntaxError``, truncated archives ``zipfile.BadZipFile``, which
#: are ``Exception`` subclasses outside ``ValueError``/``OSError``), and OS errors.
def _expected_errors() -> tuple[type[BaseException], ...]:
    import tokenize
    import zipfile

    return (ValueError, OSError, EOFError, tokenize.TokenError, SyntaxError, zipfile.BadZipFile)


EXPECTED_ERRORS = _expected_errors()

_ERRNO_WORDS = {
    "ENOSPC": "disk full", "EDQUOT": "disk quota exceeded", "EROFS": "read-only file system",
    "EACCES": "permission denied", "EPERM": "operation not permitted", "ENOENT": "no such file or directory",
    "ENOTDIR": "not a directory", "EISDIR": "is a directory", "EEXIST": "already exists",
    "EFBIG": "file too large", "EMFILE": "too many open files", "EIO": "input/output error",
}


def describe_error(e: BaseException, context: str | None = None) -> str:
    """One line for an expected failure: OS errors in plain words with the path (``disk full:
    out/flow_f.npy``), others as their message, prefixed by ``context`` (e.g. the file being
    read) when given. Never more than one line and never empty."""
    import errno as _errno

    if isinstance(e, OSError) and e.errno is not None:
        words = _ERRNO_WORDS.get(_errno.errorcode.get(e.errno, ""), e.strerror or type(e).__name__)
        paths = [p for p in (e.filename, e.filename2) if p not in (None, "")]
        msg = f"{words}: {' -> '.join(map(str, paths))}" if paths else words
    else:
        msg = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, (SyntaxError,)) or type(e).__module__ in ("tokenize", "zipfile"):
            msg = f"damaged or unreadable file ({type(e).__name__}: {msg})"
    if context:
        msg = f"{context}: {msg}"
    return msg[:500]


@contextlib.contextmanager
def reading(path, what: str = "file") -> Iterator[None]:
    """Names ``path`` in an expected failure raised while reading it (damaged numpy headers and
    archives raise errors that do not say which file): re-raised as ValueError ``cannot read
    <what> PATH: <cause>`` unless the message already names the file."""
    try:
        yield
    except EXPECTED_ERRORS as e:
        if path is None:
            raise
        p = os.fspath(path)
        named = isinstance(e, OSError) and e.filename not in (None, "")
        if named or p in str(e):
            raise
        raise ValueError(describe_error(e, f"cannot read {what} {p}")) from e
