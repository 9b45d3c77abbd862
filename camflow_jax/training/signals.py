"""SIGINT (Ctrl-C) and SIGTERM during training: save, then stop; a second signal aborts.

``python -m camflow_jax.train`` runs :func:`camflow_jax.training.loop.train_and_evaluate` inside
:class:`GracefulStop`. The first SIGINT/SIGTERM asks the loop to stop: it finishes the step (or
the evaluation batch) in progress, saves a checkpoint if a step ran since the last one, waits
for the checkpoint to be on disk and raises :class:`TrainingInterrupted`; the CLI exits with
128 + the signal number (130 for SIGINT, 143 for SIGTERM). When nothing is unsaved (during
setup, the first step's compilation after a restore, a final evaluation after the last save)
the process exits at once with that code. A second signal exits at once, whatever is running;
checkpoints are written to a temporary folder and renamed when complete, so the last finished
one stays intact (as after ``kill -9``).

Python runs signal handlers only between bytecodes of the main thread, which may be inside a
minutes-long XLA compilation. So the handler itself does nothing: ``signal.set_wakeup_fd``
hands each signal's number to a watcher thread, which reacts at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving (``step``: the last step run and saved)."""

    def __init__(self, signum: int, step: int):
        self.signum, self.step = signum, step
        super().__init__(f"interrupted by {signal.Signals(signum).name} at step {step}; the checkpoint of step "
                         f"{step} is saved: run the same command again to resume")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopRequested(Exception):
    """Raised inside the loop (after a step, between evaluation batches) once a signal came."""


class GracefulStop:
    """Context manager installing the handlers (main thread only; elsewhere it does nothing).

    The loop reports its state: :meth:`ran_step` after a step, :meth:`saved` after starting a
    save, ``manager`` (the orbax manager, whose saves in flight count as unsaved work), and
    calls :meth:`check` where it can stop. ``signum`` is the first signal received (None if none).
    """

    def __init__(self, graceful: bool = True):
        self.graceful = graceful  # False: every signal exits at once (multi-process runs)
        self.signum: int | None = None
        self.manager = None
        self._unsaved = False
        self._lock = threading.Lock()
        self._active = False

    # ---- the loop's side
    def ran_step(self) -> None:
        with self._lock:
            self._unsaved = True

    def saved(self) -> None:
        with self._lock:
            self._unsaved = False

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def check(self) -> None:
        if self.signum is not None:
            raise StopRequested()

    # ---- installation
    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old_handlers = {s: signal.signal(s, _ignore) for s in SIGNALS}
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._active = True
        self._watcher = threading.Thread(target=self._watch, name="camflow-signal-watcher", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc) -> bool:
        if not self._active:
            return False
        signal.set_wakeup_fd(self._old_fd)
        for s, h in self._old_handlers.items():
            signal.signal(s, h)
        os.write(self._write, b"\0")  # wakes the watcher: stop
        self._watcher.join(timeout=5)
        os.close(self._read)
        os.close(self._write)
        self._active = False
        return False

    # ---- the watcher thread
    def _watch(self) -> None:
        while True:
            data = os.read(self._read, 64)
            for signum in data:
                if signum == 0:
                    return
                if signum in SIGNALS:
                    self._on_signal(signum)

    def _busy(self) -> bool:
        """Work that a stop must finish first: steps since the last save, a save in flight."""
        with self._lock:
            if self._unsaved:
                return True
        mngr = self.manager
        try:
            return bool(mngr is not None and mngr.is_saving_in_progress())
        except Exception:  # noqa: BLE001 (a closed manager: nothing in flight)
            return False

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            _exit(f"{name} again: aborting at once (the last finished checkpoint is intact)", signum)
        self.signum = signum
        if not self.graceful:
            _exit(f"interrupted by {name}: exiting at once (the last finished checkpoint is intact)", signum)
        if not self._busy():
            _exit(f"interrupted by {name}: nothing ran since the last checkpoint; run the same command "
                  "again to resume", signum)
        print(f"{name} received: finishing the current step and saving a checkpoint "
              f"(send it again to abort at once)", file=sys.stderr, flush=True)


def _ignore(signum, frame) -> None:
    """The Python-level handler: the watcher thread acts (see the module docstring)."""


def _exit(message: str, signum: int) -> None:
    print(message, file=sys.stderr, flush=True)
    try:
        sys.stdout.flush()
    finally:
        os._exit(128 + signum)
