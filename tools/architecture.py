"""The package's shape, measured (docs/architecture.md): import cycles, imports inside functions
(each listed), files directly in the package, files over 700 lines, and, with ``--walk``, the
modules a training config passes through during a one-step run of ``train_and_evaluate`` on the
smoke config (a tiny net; it trains for a few seconds after compiling).

    python tools/architecture.py [--walk] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # camflow_jax from this checkout, installed or not
    sys.path.insert(0, str(ROOT))

from tools.bench import architecture as arch  # noqa: E402

#: The one-step run of ``--walk``: the smoke config with the training tests' tiny net.
WALK_OVERRIDES = {"batch_size": 4, "num_steps": 1, "data.num_train": 8, "data.num_eval": 2, "model.depths": (1,),
                  "model.layer_depth": (1,), "model.num_heads": (2,), "model.width": 64}


def config_walk() -> list[str]:
    from camflow_jax.configs import smoke
    from camflow_jax.training import loop

    config = smoke.get_config()
    config.update_from_flattened_dict(WALK_OVERRIDES)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):  # the run's log
        return arch.config_walk(lambda c: loop.train_and_evaluate(c, Path(tmp) / "wd"), config)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--walk", action="store_true", help="also trace a config through a one-step training run")
    p.add_argument("--json", help="write the report to this file too")
    args = p.parse_args(argv)
    edges = arch.import_edges()
    inside = [e for e in edges if e.inside_function]
    report = {
        "modules": len(arch.package_modules()),
        "internal_imports": len(edges),
        "inside_functions": len(inside),
        "inside_share": round(len(inside) / max(len(edges), 1), 3),
        "cycles": arch.import_cycles(edges),
        "top_level_files": arch.top_level_files(),
        "over_700_lines": {f: n for f, n in arch.line_counts().items() if n > 700},
        "longest": max(arch.line_counts().items(), key=lambda kv: kv[1]),
        "inside_by_module": dict(Counter(e.source for e in inside).most_common()),
        "inside": [f"{e.source}:{e.line} -> {e.target}" for e in inside],
    }
    if args.walk:
        report["config_walk"] = config_walk()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
