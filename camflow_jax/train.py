"""Training entry point.

    python -m camflow_jax.train --config=configs/synthetic.py --workdir=DIR [--config.key=value ...]

Several processes (multi-host TPU/GPU, or a localhost test): pass --coordinator_address,
--num_processes and --process_id, or nothing on platforms where jax.distributed.initialize()
discovers them (Cloud TPU, SLURM).
"""

if __name__ == "__main__":
    # SIGINT / SIGTERM handled from the first moment, before the heavy imports (a signal during
    # JAX's import: one line and exit 130/143; camflow_jax/io/interrupt.py). Then re-execute
    # once with huge pages for malloc (camflow_jax/cli/runtime.py, docs/performance.md), before
    # the imports below: the restart then costs only an interpreter start.
    from camflow_jax.io import interrupt
    interrupt.block()  # pending, not lost, until install() (also across the re-execution)
    from camflow_jax.cli import runtime
    runtime.use_huge_pages()
    interrupt.install()

import logging as std_logging
import signal
import sys

from absl import app, flags, logging
from ml_collections import config_flags


class _ConfigFileFailed(Exception):
    """A config file that does not load (not a ValueError: absl would prefix the flag to it)."""


class _ConfigFileParser(flags.ArgumentParser):
    """The ``--config`` flag's parser: the file executed by :func:`camflow_jax.configs.load_file`
    (once per run; a failure named in one line, the file and the cause) and the config locked,
    as ml_collections' own parser does."""

    def parse(self, path):
        from camflow_jax import configs

        try:
            config = configs.load_file(path)
        except (OSError, ValueError) as e:
            raise _ConfigFileFailed(" ".join(str(e).split())[:500]) from e
        if callable(getattr(config, "lock", None)):
            config.lock()  # --config.key overrides set only known keys
        return config

    def flag_type(self):
        return "config object"


def _define_config_flag() -> flags.FlagHolder:
    """``--config=FILE`` and its ``--config.key=value`` overrides (ml_collections' config flag),
    the file loaded by :class:`_ConfigFileParser`."""
    holder = config_flags.DEFINE_config_file("config", None, "Training config file (get_config()).",
                                             lock_config=True)
    flags.FLAGS["config"].parser = _ConfigFileParser()
    return holder


_CONFIG = _define_config_flag()
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and summaries.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-process runs).")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with auto-detection.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    verbose = flags.FLAGS["verbosity"].present and flags.FLAGS.verbosity >= 1
    if not flags.FLAGS["verbosity"].present:
        # Orbax logs every checkpoint step at INFO; keep the console to our progress lines
        # (--verbosity=0 brings them back).
        logging.set_verbosity(logging.WARNING)
    if not verbose:
        _quiet_background_failures()
    import jax

    from camflow_jax.io import errors
    from camflow_jax.training import signals
    distributed = (_NUM_PROCESSES.value or 1) > 1 or _DISTRIBUTED.value
    try:
        # Several processes save collectively: one stopping to save alone would wait forever, so
        # there a signal exits at once (the last finished checkpoint stays intact).
        with signals.GracefulStop(graceful=not distributed) as stop:
            config = _CONFIG.value  # loaded and checked once by _parse_flags
            if distributed:
                # CPU processes need a collectives backend for cross-process reductions; the option
                # only concerns the CPU backend, and must be set before any backend is initialized.
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
                jax.distributed.initialize(coordinator_address=_COORDINATOR.value,
                                           num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value)
            from camflow_jax.training.loop import DivergedError, train_and_evaluate

            try:
                train_and_evaluate(config, _WORKDIR.value, stop=stop)
            except DivergedError as e:
                _fail(str(e), 1)
        if stop.signum is not None:  # came after the last stop point: the run is complete and saved
            _fail(f"interrupted by {signal.Signals(stop.signum).name} after the run completed", 128 + stop.signum,
                  prefix="")
    except signals.TrainingInterrupted as e:
        _fail(str(e), e.exit_code, prefix="")
    except errors.EXPECTED_ERRORS as e:
        # Bad config, data or workdir, a full disk: one line naming the problem (--verbosity=1
        # for the trace).
        if verbose:
            raise
        _fail(errors.describe_error(e), 2)


def _fail(message: str, code: int, prefix: str = "error: ") -> None:
    print(f"{prefix}{message}", file=sys.stderr, flush=True)
    sys.exit(code)


class _DropBackgroundFailures(std_logging.Filter):
    """Orbax's writer threads log each failure (with its traceback) before the main thread
    raises it, and asyncio logs the unretrieved exceptions of their tasks: the failure is
    reported once, as one line, by :func:`main`."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.levelno < std_logging.ERROR:
            return True
        return not ("orbax" in (record.pathname or "") or record.name == "asyncio")


def _quiet_background_failures() -> None:
    for name in ("absl", "asyncio"):
        std_logging.getLogger(name).addFilter(_DropBackgroundFailures())
    # After a failed save, tensorstore completes the writes still pending on orbax's (closed)
    # event loop and prints each callback's "RuntimeError: Event loop is closed" through the
    # except hooks: hundreds of tracebacks before the one line about the failure.
    previous_hook, previous_unraisable = sys.excepthook, sys.unraisablehook

    def excepthook(kind, value, tb):
        if not _closed_loop_noise(value):
            previous_hook(kind, value, tb)

    def unraisablehook(info):
        if not _closed_loop_noise(info.exc_value):
            previous_unraisable(info)

    sys.excepthook, sys.unraisablehook = excepthook, unraisablehook


def _closed_loop_noise(e) -> bool:
    return isinstance(e, RuntimeError) and str(e) == "Event loop is closed"


def _parse_flags(argv):
    """absl's parser, but a bad flag, config file or ``--config.key`` exits with code 2 after one
    line. The config file is executed once (:func:`camflow_jax.configs.load_file`), the
    ``--config.key`` overrides set on it (unknown keys are refused: the config is locked), and the
    result checked once (:func:`camflow_jax.configs.check`: known keys, values of their type, the
    named choices); ``train_and_evaluate`` does not check that config again."""
    from camflow_jax import configs

    try:
        parsed = flags.FLAGS(argv)
    except _ConfigFileFailed as e:
        _fail(str(e), 2)
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
        msg = str(e).strip().strip('"')
        if isinstance(e, (AttributeError, KeyError)):
            msg = f"unknown config key {msg} (the config is locked: see configs/default.py for the keys)"
        _fail(msg.splitlines()[0] if msg else type(e).__name__, 2)
    if _CONFIG.value is not None:
        try:
            configs.check(_CONFIG.value, config_flags.get_config_filename(flags.FLAGS["config"]))
        except configs.ConfigError as e:
            _fail(" ".join(str(e).split())[:500], 2)
    return parsed


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
