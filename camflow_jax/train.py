"""Training entry point.

    python -m camflow_jax.train --config=configs/synthetic.py --workdir=DIR [--config.key=value ...]

Several processes (multi-host TPU/GPU, or a localhost test): pass --coordinator_address,
--num_processes and --process_id, or nothing on platforms where jax.distributed.initialize()
discovers them (Cloud TPU, SLURM).
"""

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
    from camflow_jax.trainer import train_and_evaluate

    train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main)
