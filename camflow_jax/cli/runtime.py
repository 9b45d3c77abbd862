"""Process settings the command-line entry points apply before they start any work.

**Transparent huge pages for glibc's malloc.** XLA's CPU runtime allocates its large scratch
buffers (hundreds of MB per train step) with ``malloc`` on every call; glibc serves them with a
fresh ``mmap`` and unmaps them on ``free``, so every call faults the buffers in again, one 4 KiB
page at a time (~195,000 minor faults and ~0.6 s of system time per step of the default run).
With the glibc tunable ``glibc.malloc.hugetlb=1`` (glibc >= 2.35) malloc asks the kernel for
transparent huge pages on those mappings (``madvise(MADV_HUGEPAGE)``): 2 MiB per fault, ~800
faults per step. docs/performance.md has the measured effect.

glibc reads ``GLIBC_TUNABLES`` once, when the process starts; there is no call that turns the
setting on later. So :func:`use_huge_pages` re-executes the running command once
(``os.execv``: the same PID, arguments, standard streams and working directory) with
``glibc.malloc.hugetlb=1`` added to ``GLIBC_TUNABLES`` (what was there is kept). It does so only
when all of these hold (:func:`hugepage_decision` says which one did not):

* Linux with glibc >= 2.35 (``os.confstr('CS_GNU_LIBC_VERSION')``);
* transparent huge pages available: ``/sys/kernel/mm/transparent_hugepage/enabled`` is
  ``always`` or ``madvise`` (with ``always`` the kernel already uses them, but glibc then also
  aligns its mappings so they can be used);
* ``CAMFLOW_JAX_NO_HUGEPAGES`` is unset, empty or ``0`` (the opt-out);
* ``GLIBC_TUNABLES`` does not already name ``glibc.malloc.hugetlb`` (the user's own value wins);
* the process was not already re-executed by this function (``CAMFLOW_JAX_HUGEPAGES_REEXEC`` in
  the environment: a guard against loops, e.g. where glibc ignores the tunable);
* the command line can be repeated: Python >= 3.10 (``sys.orig_argv``), not interactive, and the
  program does not come from standard input.

Only the ``__main__`` blocks of the entry points call it (``python -m camflow_jax.train`` and the
``estimate``/``evaluate``/``stabilize`` commands): importing a module or calling a ``main()`` from
Python (tests, notebooks) never re-executes anything.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Mapping

__all__ = ["OPT_OUT_ENV", "GUARD_ENV", "TUNABLE", "MIN_GLIBC", "THP_ENABLED_PATH", "glibc_version",
           "thp_mode", "with_hugetlb", "hugepage_decision", "reexec_argv", "use_huge_pages"]

#: Set to anything but ``0`` or empty to keep the allocator as it is.
OPT_OUT_ENV = "CAMFLOW_JAX_NO_HUGEPAGES"
#: Set in the re-executed process: it never re-executes again.
GUARD_ENV = "CAMFLOW_JAX_HUGEPAGES_REEXEC"
TUNABLE_NAME = "glibc.malloc.hugetlb"
TUNABLE = f"{TUNABLE_NAME}=1"
#: First glibc with the ``glibc.malloc.hugetlb`` tunable.
MIN_GLIBC = (2, 35)
THP_ENABLED_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"


def glibc_version() -> tuple[int, int] | None:
    """(major, minor) of the C library this process runs on, or None when it is not glibc."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")  # e.g. "glibc 2.36"
    except (AttributeError, ValueError, OSError):
        return None
    m = re.fullmatch(r"glibc (\d+)\.(\d+)\S*", (text or "").strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def thp_mode(path: str = THP_ENABLED_PATH) -> str | None:
    """The kernel's transparent huge page mode (the bracketed word of ``path``: ``always``,
    ``madvise`` or ``never``), or None when it cannot be read."""
    try:
        with open(path) as f:
            m = re.search(r"\[(\w+)\]", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def with_hugetlb(tunables: str | None) -> str:
    """``GLIBC_TUNABLES`` with ``glibc.malloc.hugetlb=1`` appended (``:``-separated)."""
    return f"{tunables}:{TUNABLE}" if tunables else TUNABLE


def hugepage_decision(environ: Mapping[str, str], glibc: tuple[int, int] | None, thp: str | None,
                      platform: str = sys.platform) -> tuple[bool, str]:
    """(re-execute?, why) for a process with this environment, glibc version and THP mode."""
    if environ.get(OPT_OUT_ENV, "") not in ("", "0"):
        return False, f"{OPT_OUT_ENV} is set"
    if environ.get(GUARD_ENV):
        return False, "already re-executed"
    if not platform.startswith("linux"):
        return False, f"not Linux ({platform})"
    if glibc is None:
        return False, "not glibc"
    if glibc < MIN_GLIBC:
        return False, f"glibc {glibc[0]}.{glibc[1]} has no {TUNABLE_NAME} (needs 2.35)"
    if thp not in ("always", "madvise"):
        return False, f"transparent huge pages unavailable ({thp or 'unknown'})"
    names = [item.split("=", 1)[0] for item in environ.get("GLIBC_TUNABLES", "").split(":")]
    if TUNABLE_NAME in names:
        return False, f"GLIBC_TUNABLES already sets {TUNABLE_NAME}"
    return True, "enabling " + TUNABLE


def reexec_argv() -> list[str] | None:
    """The command line that starts this process again (the interpreter's own options kept), or
    None when it cannot be repeated."""
    orig = getattr(sys, "orig_argv", None)
    if not orig or not sys.executable or sys.flags.interactive:
        return None
    rest = list(orig[1:])
    # Options before the program: -c CODE / -m MODULE / a script; '-' or nothing means stdin.
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("-c", "-m"):
            return [sys.executable, *rest] if i + 1 < len(rest) else None
        if a.startswith(("-c", "-m")) and not a.startswith("--"):
            return [sys.executable, *rest]  # -cCODE / -mMODULE
        if a in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if a == "-" or a == "--":
            return None
        if not a.startswith("-"):
            return [sys.executable, *rest]  # a script path
        i += 1
    return None


def use_huge_pages(environ: Mapping[str, str] | None = None) -> None:
    """Re-execute this process once with ``glibc.malloc.hugetlb=1`` when it can help (see the
    module docstring); return (doing nothing) otherwise. Call it first thing, before any threads
    or work: on success it does not return."""
    env = os.environ if environ is None else environ
    ok, _ = hugepage_decision(env, glibc_version(), thp_mode())
    if not ok:
        return
    argv = reexec_argv()
    if argv is None:
        return
    new_env = dict(env)
    new_env["GLIBC_TUNABLES"] = with_hugetlb(env.get("GLIBC_TUNABLES"))
    new_env[GUARD_ENV] = "1"
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    # SIGINT / SIGTERM stay pending across the exec (a blocked signal is kept by execve, a
    # handled one would kill the new process before it installs its handlers):
    # camflow_jax.io.interrupt.install() unblocks them in the new process.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
    try:
        os.execve(sys.executable, argv, new_env)
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return  # carry on unchanged: the setting is an optimization, not a requirement
