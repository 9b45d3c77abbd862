"""One harness for the measurements the docs report, run from the repository root:

    python -m tools.bench MODE [ARGS...]     # the same as python -m tools.bench.MODE [ARGS...]
    python -m tools.bench MODE --help        # the mode's own arguments
    python -m tools.bench                    # lists the modes

Each mode is a module of this package with a ``main(argv)`` (``command(argv)`` where the mode
sets something up first: ``benchmark``, ``adaptation`` and ``stab_vs_vidstab`` turn huge pages on, as the
package's entry points do, so that their times and time budgets are what users get).
The one-off studies behind single numbers of the docs run as modules of their own:
``python -m tools.bench.studies.<topic>.<name>`` (adaptation, network, plausibility, refinement,
stabilization).
"""

from __future__ import annotations

import importlib
import sys

#: Mode -> what it measures. The mode is the module's name in this package.
MODES = {
    "adaptation": "test-time adaptation and self-training against exact motion (shaken clips, Aloe, the benchmark)",
    "benchmark": "speed, FLOPs and memory: --mode infer | train | all | refine | refine_batch | roofline | "
                 "flows_only | release | profile | export",
    "model_compare": "a trained model against the shipped one with the model card's commands, and the shipping rule",
    "precision_compare": "the network's precision policies (exact | default | bfloat16): accuracy and speed",
    "stab_wall_time": "start-to-end wall time of python -m camflow_jax.stabilize against ffmpeg's vid.stab",
    "stab_vs_vidstab": "the stabilizer's estimators side by side with vid.stab on shaken and synthetic clips",
    "stabilization": "the stabilizer's estimators compared on generated shaky clips",
    "stab_metrics_noise": "the stabilization metrics on synthetic clips with a known camera path",
    "basis_ablation": "the basis-count ablation (8 / 12 / 24 / 36 bases) on the synthetic benchmark",
    "figure_refinement": "draws docs/images/refinement_aloe.png",
    "architecture": "the package's shape: import cycles, imports inside functions, file sizes, a config's walk",
    "accelerator_check": "tests, benchmarks and a training slice on this machine's accelerator "
                         "(also python tools/accelerator_check.py)",
}


def usage() -> str:
    width = max(map(len, MODES))
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, what in MODES.items())
    return f"usage: python -m tools.bench MODE [ARGS...]\n\nmodes:\n{rows}\n"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    mode, rest = argv[0], argv[1:]
    if mode not in MODES:
        print(f"{usage()}\nerror: unknown mode {mode!r}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__package__ or 'tools.bench'}.{mode}")
    sys.argv = [f"python -m tools.bench {mode}", *rest]  # the mode's argparse names itself so
    rc = getattr(module, "command", module.main)(rest)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
