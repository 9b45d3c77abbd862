"""Training entry point.

    python -m camflow_jax.train --config=configs/synthetic.py --workdir=DIR [--config.key=value ...]

Several processes (multi-host TPU/GPU, or a localhost test): pass --coordinator_address,
--num_processes and --process_id, or nothing on platforms where jax.distributed.initialize()
discovers them (Cloud TPU, SLURM).
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file (get_config()).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and summaries.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process runs).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index (multi-process runs).")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() with auto-detection.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:
        # Orbax logs every checkpoint step at INFO; keep the console to our progress lines
        # (--verbosity=0 brings them back).
        logging.set_verbosity(logging.WARNING)
    import jax

    if (_NUM_PROCESSES.value or 1) > 1 or _DISTRIBUTED.value:
        # CPU processes need a collectives backend for cross-process reductions; the option
        # only concerns the CPU backend, and must be set before any backend is initialized.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=_COORDINATOR.value, num_processes=_NUM_PROCESSES.value,
                                   process_id=_PROCESS_ID.value)
    from camflow_jax.trainer import DivergedError, train_and_evaluate

    try:
        config = _CONFIG.value
        config.get("seed")  # a config file that failed to load raises here
    except OSError as e:
        _fail(" ".join(str(e).split())[:500], 2)
    try:
        train_and_evaluate(config, _WORKDIR.value)
    except DivergedError as e:
        _fail(str(e), 1)
    except (ValueError, FileNotFoundError, NotADirectoryError, PermissionError) as e:
        # Bad config, data or workdir: one line naming the problem (--verbosity=1 for the trace).
        if flags.FLAGS.verbosity >= 1:
            raise
        _fail(str(e), 2)


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def _parse_flags(argv):
    """absl's parser, but a bad flag, config file or ``--config.key`` exits with code 2 after one
    line (unknown keys are rejected: the config is locked)."""
    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
        msg = str(e).strip().strip('"')
        if isinstance(e, (AttributeError, KeyError)):
            msg = f"unknown config key {msg} (the config is locked: see configs/default.py for the keys)"
        _fail(msg.splitlines()[0] if msg else type(e).__name__, 2)


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
