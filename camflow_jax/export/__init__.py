"""Portable export of a model's network: ONNX, StableHLO and a manifest (docs/export.md).

    python -m camflow_jax.export -o DIR                       # the shipped model at its size
    python -m camflow_jax.export --checkpoint CKPT -o DIR --platforms cpu,cuda

    from camflow_jax.export import write_bundle
    manifest = write_bundle(Predictor.from_pretrained(), "out/export")

* :mod:`.network`: what is exported (the flows-only forward at a fixed size, both directions;
  CamFlow+'s basis builder), as plain JAX functions, and the export's shapes (:class:`ExportSpec`);
* :mod:`.onnx`: conversion with jax2onnx and running with ONNX Runtime (optional packages,
  imported on first use);
* :mod:`.stablehlo`: ``jax.export`` artifacts;
* :mod:`.manifest`: ``manifest.json``;
* :mod:`.bundle`: the export folder, written atomically after the artifacts were checked.

Test-time refinement, the confidence maps and the homography fit stay in camflow_jax.
"""

import importlib

#: The package's names and the modules that define them, imported on first use (PEP 562): so
#: ``python -m camflow_jax.export`` installs its signal handling before JAX is imported.
_LAZY = {"FILES": "bundle", "FORMATS": "bundle", "write_bundle": "bundle", "ExportSpec": "network",
         "export_spec": "network", "parse_size": "network", "INSTALL_HINT": "onnx", "MissingDependency": "onnx"}

__all__ = ["FILES", "FORMATS", "write_bundle", "ExportSpec", "export_spec", "parse_size", "INSTALL_HINT",
           "MissingDependency"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
