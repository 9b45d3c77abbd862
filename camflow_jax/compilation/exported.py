"""A ``jax.jit`` whose traced programs outlive the process: :class:`ExportedJit`.

With JAX's persistent compilation cache a fresh process still traces and lowers every jitted
function before it can look its compiled program up: for the Predictor's forward at 640x360
that was ~60 % of the first call even with the compiled program on disk (docs/performance.md,
"Compile once"). :class:`ExportedJit` keeps, per input signature, the traced and lowered
program as a serialized :mod:`jax.export` artifact (:mod:`.store`, kind ``exported``). A
fresh process deserializes it (milliseconds), and ``jax.jit(exported.call)`` compiles it
through the persistent cache: no Python tracing, no Flax.

Per signature (the arguments' tree structure, shapes, dtypes and weak types, plus the static
arguments) the first call in a process:

1. reads the artifact made from the same things (the function's name, the owner's ``key``,
   the signature, and :func:`~.store.environment`: jax/jaxlib versions, backend, the package's
   source digest); when there is one and it deserializes, calls it;
2. otherwise exports the function (``jax.export.export``: one trace and lowering, as ``jax.jit``
   does), stores the artifact and calls the exported function, so that the program compiled
   now is the one later processes find in the persistent cache.

Later calls of that signature go straight to the jitted exported call. The owner must put in
``key`` everything the function reads besides its arguments (e.g. the model's architecture,
the network size); code changes are covered by the source digest, but a function replaced at
run time (a test's monkeypatch inside the traced code) is not: use a fresh
``CAMFLOW_JAX_CACHE_DIR`` or ``CAMFLOW_JAX_NO_CACHE=1`` there. A loaded artifact whose first
call fails (it cannot be lowered or compiled here) is dropped, and the function is exported
again from the code.

Falls back to the plain ``jax.jit`` (same results, traced as before) when caches are off
(``CAMFLOW_JAX_NO_CACHE=1``), when ``jax.export`` cannot serialize (the ``flatbuffers``
package is missing, or an argument is not an array), or when exporting fails for any reason:
the artifacts are an optimization, never a requirement. The results are the same either way
(the same StableHLO compiled by the same XLA; tests/compilation/test_cache.py compares them).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax import export

from camflow_jax.compilation import store

__all__ = ["ExportedJit", "KIND", "can_serialize"]

#: The store's kind for these artifacts (``<cache_root>/exported/``).
KIND = "exported"

_log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def can_serialize() -> bool:
    """Whether ``jax.export`` can serialize here (it needs the ``flatbuffers`` package)."""
    return importlib.util.find_spec("flatbuffers") is not None


def _fast_signature(x):
    """(shape, dtype, weak type) of an array argument, the dtype itself (cheap to hash: the
    per-call lookup key); None for anything else."""
    if isinstance(x, jax.Array):
        return x.shape, x.dtype, bool(getattr(x, "weak_type", False))
    if isinstance(x, (np.ndarray, np.generic)):
        return np.shape(x), x.dtype, False
    return None


def _leaf_signature(x):
    """:func:`_fast_signature` with the dtype named (the stored artifact's key)."""
    s = _fast_signature(x)
    return None if s is None else (tuple(s[0]), str(s[1]), s[2])


class ExportedJit:
    """``jax.jit(fun, static_argnames=static_argnames)`` with its traced programs kept on disk
    (see the module doc). Called like the jitted function (static arguments by keyword).

    Args:
      fun: the function to jit.
      name: a stable name for it (part of the artifacts' key), e.g. ``"Predictor.forward"``.
      key: everything ``fun`` reads besides its arguments, as a value whose ``repr`` is
        deterministic (e.g. a tuple of strings and numbers).
      static_argnames: as ``jax.jit``'s.
    """

    def __init__(self, fun: Callable, *, name: str, key: Any = (), static_argnames: Sequence[str] = ()):
        self.jitted = jax.jit(fun, static_argnames=tuple(static_argnames))
        self.name = name
        self.key = key
        self._calls: dict = {}
        self._how: dict = {}  # signature -> "loaded" | "exported" | "jit"
        self._lock = threading.Lock()

    # The jitted function's own API, for tools that inspect it (tools.bench.accel).
    def lower(self, *args, **kwargs):
        return self.jitted.lower(*args, **kwargs)

    def trace(self, *args, **kwargs):
        return self.jitted.trace(*args, **kwargs)

    def _cache_size(self) -> int:
        """Signatures prepared in this process (what ``jax.jit``'s ``_cache_size`` counts)."""
        return len(self._calls)

    def how(self) -> list[str]:
        """Per signature prepared so far, in order: ``loaded`` (from an artifact), ``exported``
        (traced here and stored) or ``jit`` (the plain jit: caches off or export impossible)."""
        return list(self._how.values())

    def __call__(self, *args, **static):
        leaves, tree = jax.tree.flatten(args)
        # the lookup key: shapes and dtypes as they are (hashing np.dtype is cheaper than
        # naming it; a model has hundreds of leaves); the stored key names them (_prepare)
        fast = (tree, tuple(_fast_signature(x) for x in leaves), tuple(sorted(static.items())))
        call = self._calls.get(fast)
        if call is None:
            with self._lock:  # one preparation per signature, whichever thread asks first
                call = self._calls.get(fast)
                if call is None:
                    sig = (tree, tuple(_leaf_signature(x) for x in leaves), fast[2])
                    call, how = self._prepare(args, static, sig, fast)
                    self._calls[fast], self._how[fast] = call, how
        return call(*args)

    def _prepare(self, args, static, sig, key) -> tuple[Callable, str]:
        """The call for signature ``sig`` (names: the stored artifact's key), kept under ``key``."""
        plain = functools.partial(self.jitted, **static) if static else self.jitted
        if not can_serialize() or any(s is None for s in sig[1]) or store.path_for(KIND, ()) is None:
            return plain, "jit"
        parts = [self.name, repr(self.key), str(sig[0]), repr(sig[1]), repr(sig[2])]
        data = store.read(KIND, parts)
        if data is not None:
            try:
                loaded = jax.jit(export.deserialize(bytearray(data)).call)
            except Exception as e:  # damaged or from an incompatible jax: make it again
                _log.debug("cannot load the stored %s (%s: %s); exporting it again", self.name, type(e).__name__, e)
            else:
                again = lambda: self._export(args, static, parts, plain)  # noqa: E731
                return self._first_call_checked(loaded, key, again), "loaded"
        return self._export(args, static, parts, plain)

    def _export(self, args, static, parts, plain) -> tuple[Callable, str]:
        """Traces the function into a ``jax.export`` artifact, stores it, and returns its call
        (or the plain jit when it cannot be exported)."""
        try:
            exp = export.export(self.jitted)(*args, **static)
            payload = exp.serialize()
        except Exception as e:
            _log.debug("cannot export %s (%s: %s); using jax.jit", self.name, type(e).__name__, e)
            return plain, "jit"
        store.write(KIND, parts, bytes(payload))
        return jax.jit(exp.call), "exported"

    def _first_call_checked(self, loaded: Callable, key, again: Callable[[], tuple[Callable, str]]) -> Callable:
        """``loaded``, whose first call falls back to ``again()`` (export from the code) when it
        raises: a stored program that cannot be lowered or compiled here never fails a run."""

        def first(*args):
            try:
                out = loaded(*args)
            except Exception as e:
                _log.debug("the stored %s failed (%s: %s); exporting it again", self.name, type(e).__name__, e)
                with self._lock:
                    call, how = again()
                    self._calls[key], self._how[key] = call, how
                return call(*args)
            with self._lock:
                if self._calls.get(key) is first:
                    self._calls[key] = loaded  # later calls: straight to the jitted call
            return out

        return first
