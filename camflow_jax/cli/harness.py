"""The command-line harness every entry point shares (``estimate``, ``evaluate``, ``stabilize``,
``train`` and ``tools/``); library code never imports it. See docs/what_the_tools_refuse.md.

* bad input or arguments: a one-line ``error: ...`` naming the cause and exit code
  :data:`EXIT_BAD_INPUT` (2), before any output is touched where it can be known up front;
* failures: :func:`run_cli` turns every expected failure
  (:data:`camflow_jax.io.errors.EXPECTED_ERRORS`) into one line
  (:func:`camflow_jax.io.errors.describe_error`), exit 2, and SIGINT/SIGTERM into a clean stop
  (temporaries removed, nothing moved into place after the signal; :mod:`camflow_jax.io.interrupt`,
  installed first thing by every entry point's ``__main__`` block), exit 130/143; a traceback only with ``--verbose``
  (:func:`add_verbose_flag`); :func:`exit_process` ends the process with that status;
* shared flags and argparse types: ``--verbose``, ``--refine-size``, finite numbers, whole
  numbers with a lower bound, ``fx,fy,cx,cy``, non-empty paths.

Outputs are written by :mod:`camflow_jax.io.atomic` (never half a result, never the input, never
an existing file without ``-y``); numeric inputs are checked by :mod:`camflow_jax.geometry.checks`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import math
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from typing import NoReturn

from camflow_jax.estimators import registry
from camflow_jax.io import atomic, interrupt
from camflow_jax.io.errors import EXPECTED_ERRORS, describe_error

#: The start of the Predictor's warning for a depth model run without depth (see :func:`run_cli`).
NO_DEPTH_WARNING = "model has depth-translational bases but no depth was given"

#: Exit code of every CLI for bad input, bad arguments or a refused output.
EXIT_BAD_INPUT = 2


#: Exit status after SIGINT / SIGTERM (128 + the signal number, as a shell reports a signal).
EXIT_INTERRUPTED = interrupt.EXIT_CODES

#: SIGINT or SIGTERM as an exception (raised at the work's stop points: :mod:`camflow_jax.io.interrupt`).
Interrupted = interrupt.Interrupted


def add_verbose_flag(parser) -> None:
    """``--verbose``: on an error, print the traceback too (the one-line message stays last)."""
    parser.add_argument("--verbose", action="store_true",
                        help="on an error, also print the full traceback (for bug reports)")


def add_refine_size_flag(parser) -> None:
    """``--refine-size N`` (estimate, stabilize, evaluate): the refined camflow refines at
    :meth:`camflow_jax.refine.RefineConfig.at_size` ``(N)``; checked by :func:`check_refine_size`."""
    parser.add_argument("--refine-size", type=int, default=None, metavar="N",
                        help="refined camflow: refine at N px on the longer side instead of 288 "
                             "(RefineConfig.at_size(N); N >= 288): more precise on finely textured "
                             "images, not on average; slower (~3x the refinement's time at 576)")


def run_cli(body: Callable[[], int | None], verbose: bool = False) -> int:
    """Runs a CLI's work with the shared failure policy; returns the exit status.

    * an expected failure (:data:`EXPECTED_ERRORS`) prints ``error: <one line>``
      (:func:`describe_error`) and returns :data:`EXIT_BAD_INPUT`; the traceback goes first
      only with ``verbose``;
    * SIGINT / SIGTERM (and Ctrl-C) are recorded (:mod:`camflow_jax.io.interrupt`): with
      nothing to clean up the process ends at once (after :func:`interrupt.install`; in a
      ``main()`` called from Python :class:`Interrupted` is raised); otherwise the work stops at
      its next frame, sample or step, the writers move nothing more into place, partial outputs
      and temporaries are removed as the exception unwinds and previous outputs stay; returns
      130 / 143 with one line saying which outputs (if any) were written in full;
    * anything else is a bug: it propagates with its traceback.
    """
    atomic.reset_outcome()
    interrupt.set_describer(interrupt_line)
    try:
        with interrupt.handling(), warnings.catch_warnings():
            # The library's warning for a depth model run without depth: the CLIs say it in their
            # own note (not under -q); Python printed it raw beside the note, with a source path
            # and a code line, in every camflow run without depth, even under -q.
            warnings.filterwarnings("ignore", message=NO_DEPTH_WARNING, category=UserWarning)
            status = int(body() or 0)
            signum = interrupt.requested()
        if signum is not None:  # recorded after the work's last stop point (e.g. while printing)
            print(interrupt_line(signum), file=sys.stderr)
            return EXIT_INTERRUPTED.get(signum, 128 + signum)
        return status
    except KeyboardInterrupt as e:  # Interrupted included
        signum = getattr(e, "signum", signal.SIGINT)
        if verbose:
            traceback.print_exc()
        print(interrupt_line(signum), file=sys.stderr)
        return EXIT_INTERRUPTED.get(signum, 128 + int(signum))
    except EXPECTED_ERRORS as e:
        if verbose:
            traceback.print_exc()
        print(f"error: {describe_error(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def interrupt_line(signum: int, exiting_with: int | None = None) -> str:
    """The one line after SIGINT / SIGTERM, saying whether the outputs were complete: none
    moved into place ("nothing was written or replaced"), all of them ("written in full"), or
    some, when the signal came while they were being moved (:func:`camflow_jax.io.atomic.outcome`).
    ``exiting_with``: the signal came after the work, while the process was ending with that
    status (:func:`exit_process`)."""
    name = signal.Signals(signum).name
    moved, kept = atomic.outcome()
    when = "" if exiting_with is None else " as the process was ending"
    if moved:
        line = f"error: interrupted by {name}{when}: {', '.join(moved)} written in full"
        if kept:
            return line + f"; not written: {', '.join(kept)} (partial outputs removed; any previous version kept)"
        return line + " (the outputs are complete)"
    if exiting_with is None:
        return f"error: interrupted by {name}: nothing was written or replaced (partial outputs removed)"
    if exiting_with == 0:
        return f"error: interrupted by {name}{when}: the run had finished; nothing was lost"
    return f"error: interrupted by {name}{when} (exit status {exiting_with}, above)"


def _late_signals(status: int) -> None:
    """After the work: SIGINT / SIGTERM print :func:`interrupt_line` (naming the outputs, which
    are complete) and end the process with 130 / 143 at once."""
    if interrupt.installed():  # the watcher thread acts, at once
        interrupt.finish(lambda signum: interrupt_line(signum, status))
        return
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        for s in EXIT_INTERRUPTED:
            signal.signal(s, signal.SIG_IGN)
        with contextlib.suppress(Exception):
            print(interrupt_line(signum, status), file=sys.stderr)
        _flush()
        os._exit(EXIT_INTERRUPTED[signum])

    for s in EXIT_INTERRUPTED:
        signal.signal(s, handler)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def exit_process(status: int) -> NoReturn:
    """Ends a command-line process with ``status`` (what :func:`run_cli` returned): every entry
    point's ``sys.exit(main())`` is ``exit_process(main())``.

    After SIGINT / SIGTERM (130 / 143) the process ends at once, once its output is flushed:
    every cleanup already ran while :func:`run_cli` unwound, but other threads may still be
    inside XLA (the refinement compiles its two directions in worker threads), and Python's
    shutdown would wait for them and then tear the runtime down under them: the process died
    with SIGSEGV (rc -11) when the signal came during such a compilation.

    Any other status: the work is over, so the process waits for its other (non-daemon)
    threads, runs the exit handlers (``atexit``: logging's flush, JAX's own) and the flushes of
    standard output and error, then ends, skipping the interpreter's teardown of the runtime
    (about half a second). A SIGINT / SIGTERM meanwhile prints the one interrupt line, saying
    that the outputs are complete, and ends with 130 / 143: Python's teardown used to restore
    the default action first, so a signal in that last half second killed the process with rc
    143 and no word although its output was written."""
    _flush()
    if status in EXIT_INTERRUPTED.values():
        os._exit(status)
    _late_signals(status)
    # What the interpreter does first at exit: the hooks of threading's own exit list (a thread
    # pool's workers wait for work until concurrent.futures' hook tells them to stop: joined
    # before it, a live pool, the Predictor's refinement threads, hung the process for good),
    # then the join of every non-daemon thread.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:  # a Python without it: the joins alone
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon:
                t.join()
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    _flush()
    os._exit(int(status))


def check_refine_size(size: int | None, no_refine: bool) -> None:
    """``--refine-size N`` of the CLIs: at least the default working size, and not together with
    ``--no-refine`` (ValueError: one line, exit 2)."""
    if size is None:
        return
    if no_refine:
        raise ValueError("--refine-size needs refinement: do not also give --no-refine")
    from camflow_jax.refine import RefineConfig  # JAX: imported when a size is given
    try:
        RefineConfig.at_size(size)  # the one rule for a working size
    except ValueError:
        raise ValueError(f"--refine-size must be at least {RefineConfig().max_size} (the default "
                         f"working size), got {size}") from None


def camflow_only_flags(method: str, **given) -> None:
    """The one rule for depth and intrinsics flags: they feed CamFlow's depth bases only, so a
    classical estimator (sift_ransac, orb, dis, ecc, identity...) given any of them is refused
    (ValueError naming the flags) instead of ignoring them silently. ``given``: flag -> value
    (``None``/``False`` = not given)."""
    used = [flag for flag, v in given.items() if v is not None and v is not False]
    if used and not registry.is_camflow(method):
        raise ValueError(f"{', '.join(used)} only apply to camflow estimators (CamFlow+'s depth "
                         f"bases); {method} does not use them: drop them or choose camflow")


def finite_float(text: str) -> float:
    """argparse ``type=``: a finite float (``nan``/``inf`` refused with the flag's usage error)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return v


def int_at_least(lo: int, unit: str = "", why: str = ""):
    """argparse ``type=``: a whole number >= ``lo`` (``unit`` names what it counts, ``why``
    says why smaller ones are refused), e.g. ``int_at_least(1, "frames")``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number{' of ' + unit if unit else ''}, "
                                             f"got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}{' (' + why + ')' if why else ''}, got {text!r}")
        return v

    return parse


def path_arg(text: str) -> str:
    """argparse ``type=`` of every file or folder flag: a non-empty path. ``-o ""`` used to end
    in ``error: no such file or directory`` naming no flag (or, for optional outputs such as
    ``--export-motion ""``, to be ignored silently); argparse now names the flag:
    ``argument -o/--output: empty path``."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path" if not text else f"empty path ({text!r})")
    return text


def intrinsics_arg(text: str) -> tuple[float, ...]:
    """argparse ``type=``: ``fx,fy,cx,cy``, four finite numbers (checked against the image size
    later, by :func:`check_intrinsics`)."""
    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 4 or not all(math.isfinite(v) for v in vals):
        raise argparse.ArgumentTypeError(f"must be 4 finite numbers fx,fy,cx,cy; got {text!r}")
    return vals
