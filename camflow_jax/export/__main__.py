"""``python -m camflow_jax.export``: a model's network as ONNX and StableHLO, with a manifest.

    python -m camflow_jax.export -o DIR                          # the shipped model, its size
    python -m camflow_jax.export --checkpoint CKPT -o DIR        # your own model
    python -m camflow_jax.export -o DIR --size 320x576 --batch 2 --platforms cpu,cuda

Writes network.onnx, network.stablehlo, (CamFlow+) depth_bases.stablehlo, static_bases.npy,
example.npz and manifest.json into DIR, atomically, after checking that ONNX Runtime's flows
match JAX's on a synthetic pair (:mod:`camflow_jax.export.bundle`; docs/export.md). Bad
arguments, a missing checkpoint or package, or an output that cannot be written: one
``error:`` line, exit code 2.
"""

from __future__ import annotations

if __name__ == "__main__":
    # SIGINT / SIGTERM handled from the first moment, before the heavy imports (a signal during
    # JAX's import: one line and exit 130/143; camflow_jax/io/interrupt.py).
    from camflow_jax.io import interrupt
    interrupt.block()
    interrupt.install()

import argparse
import sys
from collections.abc import Sequence

from camflow_jax import export as export_lib
from camflow_jax.cli import harness
from camflow_jax.compilation import cache
from camflow_jax.export import onnx as onnx_lib
from camflow_jax.export import stablehlo
from camflow_jax.io import atomic
from camflow_jax.predictor import Predictor

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m camflow_jax.export",
                                description="Export a model's network (flows only, both directions, fixed "
                                            "size) as ONNX and StableHLO, with a manifest.")
    p.add_argument("-o", "--out", required=True, type=harness.path_arg, help="output folder")
    p.add_argument("-y", "--overwrite", action="store_true", help="replace an earlier export in the folder")
    p.add_argument("--checkpoint", default=None, type=harness.path_arg,
                   help="camflow_jax checkpoint (inference dir or workdir); default: the shipped model")
    p.add_argument("--size", default=None, metavar="HxW",
                   help="network size to export at (default: the model's); multiples of its size_multiple")
    p.add_argument("--batch", default="1", metavar="N", help="fixed batch size (default 1)")
    p.add_argument("--platforms", default="cpu", help="StableHLO platforms, e.g. cpu,cuda (default cpu)")
    p.add_argument("--formats", default=",".join(export_lib.FORMATS),
                   help="onnx and/or stablehlo (default both)")
    p.add_argument("--opset", default=str(onnx_lib.DEFAULT_OPSET), metavar="N",
                   help=f"ONNX opset (default {onnx_lib.DEFAULT_OPSET})")
    p.add_argument("--precision", default=None, choices=["exact", "default", "bfloat16"],
                   help="the network's precision policy (default: the model's; docs/performance.md, "
                        "'Precision policy'); ONNX needs a float32 one (exact or default)")
    p.add_argument("--no-check", action="store_true",
                   help="skip running the artifacts on the example pair (and example.npz)")
    harness.add_verbose_flag(p)
    return p


def _whole(text: str, flag: str, lo: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"{flag} must be a whole number, got {text!r}") from None
    if v < lo:
        raise ValueError(f"{flag} must be at least {lo}, got {v}")
    return v


#: The largest --batch: the export runs (and checks) the network at that batch on the example
#: pair; 99999999999 passed the argument checks and ended in a 38-line traceback after 15 s.
MAX_BATCH = 1024


def _max_opset() -> int:
    """The newest ONNX opset the installed ``onnx`` package knows (a file written at a newer one
    is refused by ONNX Runtime); the default where it is not installed (its absence is reported
    by the dependency check)."""
    try:
        import onnx
        return int(onnx.defs.onnx_opset_version())
    except Exception:  # noqa: BLE001 (not installed, or an unusual build)
        return onnx_lib.DEFAULT_OPSET


def _check_out_not_a_model(out: str, checkpoint: str | None) -> None:
    """``-o`` inside the shipped models' folder (the package's weights) or inside the model
    exported (``--checkpoint``) is refused: the export wrote into the shipped model's folder."""
    from pathlib import Path

    from camflow_jax.models import checkpoint as ckpt
    target = Path(out).resolve()
    folders = [("the shipped models' folder", Path(ckpt.__file__).resolve().parent / "weights")]
    if checkpoint:
        folders.append(("the exported model's folder (--checkpoint)", Path(checkpoint).resolve()))
    for what, folder in folders:
        if target == folder or folder in target.parents:
            raise ValueError(f"-o {out} is inside {what} {folder}: the export would be written among the "
                             "model's own files; choose another output folder")


def _formats(text: str) -> tuple[str, ...]:
    names = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    if not names or any(f not in export_lib.FORMATS for f in names) or len(set(names)) != len(names):
        raise ValueError(f"--formats must be onnx, stablehlo or both (onnx,stablehlo), got {text!r}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cache.enable()  # compiled programs kept per user (docs/performance.md, "Compile once")
    return harness.run_cli(lambda: _run(args), verbose=args.verbose)


def _run(args) -> int:
    size = export_lib.parse_size(args.size) if args.size is not None else None
    batch = _whole(args.batch, "--batch", 1)
    if batch > MAX_BATCH:
        raise ValueError(f"--batch must be at most {MAX_BATCH} (the export runs the network at that batch), got {batch}")
    opset = _whole(args.opset, "--opset", onnx_lib.MIN_OPSET)
    platforms = stablehlo.parse_platforms(args.platforms)
    formats = _formats(args.formats)
    if "onnx" in formats and opset > _max_opset():
        raise ValueError(f"--opset must be at most {_max_opset()} (the newest opset the installed onnx "
                         f"package knows), got {opset}")
    _check_out_not_a_model(args.out, args.checkpoint)
    atomic.check_output_dir(args.out, export_lib.FILES, args.overwrite, inputs=[args.checkpoint])
    if "onnx" in formats:
        try:
            for name in ("jax2onnx", "onnx", "onnxruntime"):
                onnx_lib.require(name)
        except export_lib.MissingDependency as e:
            raise ValueError(str(e)) from None  # one line, exit 2
    pred = Predictor.load(args.checkpoint, refine=False, precision=args.precision)
    export_lib.export_spec(pred, size, batch)  # refuses a size the model cannot run at, before any output
    if "onnx" in formats and pred.precision == "bfloat16":
        raise ValueError("the ONNX export needs a float32 precision policy (ONNX's Conv has no bfloat16): "
                         "pass --precision exact, or --formats stablehlo")
    print(f"model: {pred.description}", file=sys.stderr)
    manifest = export_lib.write_bundle(pred, args.out, size=size, batch=batch, platforms=platforms,
                                       formats=formats, opset=opset, check=not args.no_check,
                                       overwrite=args.overwrite, log=lambda line: print(line, file=sys.stderr))
    s = manifest["size"]
    print(f"exported {manifest['bases']['num_bases']} bases at {s['height']}x{s['width']}, batch {s['batch']}: "
          f"{', '.join(sorted(manifest['files']))} and manifest.json in {args.out}/")
    onnx_check = (manifest.get("checks") or {}).get("onnxruntime")
    if onnx_check:
        d = onnx_check["max_abs_diff"]
        print(f"ONNX Runtime vs JAX on the example pair: max |flow difference| "
              f"{max(d['flow_f'], d['flow_b']):.2e} px")
    return 0


if __name__ == "__main__":
    harness.exit_process(main())
