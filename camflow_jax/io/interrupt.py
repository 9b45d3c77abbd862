"""SIGINT (Ctrl-C) and SIGTERM for the command lines: a flag the work checks, not an exception
raised in arbitrary code.

Python runs a signal handler between two bytecodes of the main thread, wherever that is: inside
JAX's garbage-collector callback or a ``__del__`` an exception raised by the handler is printed
as "Exception ignored" and dropped, and inside an import or a C extension's callback it leaves
modules half-initialized (jaxlib's init then died with SIGSEGV or SIGABRT). So here the signal is
only *recorded*:

* :func:`block` then :func:`install` (the entry points' ``__main__`` blocks, first thing,
  before the heavy imports; a signal in between stays pending) set the handlers; ``signal.set_wakeup_fd`` hands each signal to a watcher thread,
  which acts even while the main thread is inside a long C call (an XLA compilation);
* nothing to clean up (no temporary registered by :func:`track`: imports, model loading, a
  computation before any output is started): the process prints the one line and exits at once
  with 130 (SIGINT) / 143 (SIGTERM) (``os._exit``: no half-initialized module is torn down);
* temporaries exist (an output being written, a scratch folder): the signal is recorded; the
  work stops at its next check (:func:`check`: each frame, sample or step), the atomic writers
  refuse to move outputs into place (:mod:`camflow_jax.io.atomic`), the temporaries are removed
  as the exception unwinds, and the command line exits 130 / 143 with its one line;
* a second signal ends the process at once (temporaries removed first, best effort).

Without :func:`install` (a library call, a notebook, a test calling ``main()``), nothing is
installed by this module at import; :func:`handling` (the CLI harness) installs a handler for the
duration of a call that records the signal and raises :class:`Interrupted` only when no
temporary exists. :func:`check` is a no-op while no signal was recorded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator

__all__ = ["SIGNALS", "EXIT_CODES", "Interrupted", "install", "installed", "handling", "requested",
           "check", "track", "untrack", "set_describer", "finish", "reset", "exit_code", "default_line"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Exit status after SIGINT / SIGTERM (128 + the signal number, as a shell reports a signal).
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread like Ctrl-C so that every ``finally`` block
    and context manager on the way out runs (temporary files and folders are removed)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def exit_code(signum: int) -> int:
    return EXIT_CODES.get(signum, 128 + int(signum))


def default_line(signum: int) -> str:
    return (f"error: interrupted by {signal.Signals(signum).name}: nothing was written or replaced "
            "(partial outputs removed)")


class _State:
    def __init__(self):
        self.signum: int | None = None  # the first signal recorded
        self.count = 0
        self.temporaries: list[list[str]] = []  # name lists of live temporaries (io.atomic)
        self.lock = threading.Lock()
        self.describe: Callable[[int], str] = default_line
        self.installed = False  # install() ran: this process belongs to a command line
        self.exiting = False
        self.finished = False  # finish(): the work is over, the process is ending


_STATE = _State()


# ----------------------------------------------------------------------------- the work's side
def requested() -> int | None:
    """The signal recorded (SIGINT / SIGTERM), or None."""
    return _STATE.signum


def check() -> None:
    """Raises :class:`Interrupted` once a signal was recorded (the work's stop points: each frame,
    sample or step, and every move of an output into place)."""
    signum = _STATE.signum
    if signum is not None:
        raise Interrupted(signum)


def track(names: list[str]) -> None:
    """Registers a temporary's name list (filled by :func:`camflow_jax.io.atomic.new_temp`):
    while any is registered, a signal is recorded instead of ending the process at once."""
    with _STATE.lock:
        _STATE.temporaries.append(names)


def untrack(names: list[str]) -> None:
    with _STATE.lock:
        for i, n in enumerate(_STATE.temporaries):
            if n is names:
                del _STATE.temporaries[i]
                break


def _busy() -> bool:
    with _STATE.lock:
        return any(bool(n) for n in _STATE.temporaries)


def set_describer(describe: Callable[[int], str] | None) -> None:
    """The one line printed when the process ends on a signal (default :func:`default_line`)."""
    _STATE.describe = describe or default_line


def finish(describe: Callable[[int], str]) -> None:
    """The work is over (process mode): a signal from now on (or one recorded but not acted on)
    prints ``describe(signum)`` and ends the process at once."""
    _STATE.describe = describe
    _STATE.finished = True
    signum = _STATE.signum
    if signum is not None:
        _remove_temporaries()
        _exit_now(signum, _line(signum))


def reset() -> None:
    """Forgets a recorded signal (each command-line run in one process starts afresh)."""
    _STATE.signum, _STATE.count = None, 0


# ----------------------------------------------------------------------------- ending the process
def _line(signum: int) -> str:
    try:
        return _STATE.describe(signum)
    except Exception:  # noqa: BLE001 (the line must come whatever state the run is in)
        return default_line(signum)


def _remove_temporaries() -> None:
    with _STATE.lock:
        names = [n for lst in _STATE.temporaries for n in lst]
    for name in names:
        with contextlib.suppress(OSError):
            if os.path.isdir(name) and not os.path.islink(name):
                shutil.rmtree(name, ignore_errors=True)
            elif os.path.lexists(name):
                os.remove(name)


def _exit_now(signum: int, line: str) -> None:
    """Prints ``line`` and ends the process with the signal's status, at once."""
    with _STATE.lock:
        if _STATE.exiting:
            return
        _STATE.exiting = True
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    os._exit(exit_code(signum))


def _on_signal(signum: int, can_raise: bool) -> None:
    """One signal, in the watcher thread (process mode) or the main thread's handler."""
    _STATE.count += 1
    if _STATE.signum is not None:  # the second one: at once
        _remove_temporaries()
        _exit_now(signum, f"error: interrupted by {signal.Signals(signum).name} again: stopped at once "
                          "(partial outputs removed; nothing was moved into place after the first signal)")
        return
    _STATE.signum = signum
    if _STATE.finished:  # the work is over: what is still busy is a cache's write
        _remove_temporaries()
        _exit_now(signum, _line(signum))
        return
    if _busy():
        return  # the work stops at its next check; the writers move nothing into place
    if can_raise:
        raise Interrupted(signum)
    _exit_now(signum, _line(signum))


# ----------------------------------------------------------------------------- installation
class _Watcher:
    def __init__(self):
        self.read, self.write = os.pipe()
        os.set_blocking(self.write, False)
        self.thread = threading.Thread(target=self.run, name="camflow-signal-watcher", daemon=True)

    def run(self) -> None:
        while True:
            try:
                data = os.read(self.read, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in SIGNALS:
                    _on_signal(signum, can_raise=False)


def _record(signum, frame) -> None:
    """The Python-level handler in process mode: the watcher thread acts (set_wakeup_fd)."""


_WATCHER: _Watcher | None = None


def block() -> None:
    """Blocks SIGINT / SIGTERM in the main thread: from here until :func:`install` a signal stays
    pending (also across an ``execve``: :func:`camflow_jax.cli.runtime.use_huge_pages`), and is
    delivered, not lost, when the handling is installed. The entry points' first statement."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


def install() -> None:
    """The command line's signal handling for the whole process (see the module docstring):
    called first thing by every entry point's ``__main__`` block, before the heavy imports. Any
    SIGINT / SIGTERM blocked until now (e.g. across :func:`camflow_jax.cli.runtime.use_huge_pages`'
    re-execution) is delivered here. Only from the main thread; a second call does nothing."""
    global _WATCHER
    if threading.current_thread() is not threading.main_thread():
        return
    if _STATE.installed:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        return
    # The watcher starts with the signals blocked (threads inherit the mask): the kernel then
    # delivers them to the main thread, whose mask is what runtime.use_huge_pages blocks
    # across its re-execution (a signal taken by another thread would be lost in the exec).
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    _WATCHER = _Watcher()
    _WATCHER.thread.start()
    signal.set_wakeup_fd(_WATCHER.write, warn_on_full_buffer=False)
    for s in SIGNALS:
        signal.signal(s, _record)
    _STATE.installed = True
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def installed() -> bool:
    return _STATE.installed


def _raise_when_idle(signum, frame) -> None:
    _on_signal(signum, can_raise=True)


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """The signal handling of one command-line call (:func:`camflow_jax.cli.harness.run_cli`):
    a recorded signal is forgotten first; in a process that did not :func:`install` (``main()``
    called from Python, main thread only) a handler records the signal and raises
    :class:`Interrupted` when no temporary exists; previous handlers are restored after."""
    reset()
    if _STATE.installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_when_idle) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        reset()  # library calls after it in this process are not stopped by it
