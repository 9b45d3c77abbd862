"""One export folder: :func:`write_bundle` writes, for a Predictor's model at one size,

==========================  =================================================================
``network.onnx``            the flows function (:mod:`.network`) as ONNX (``onnx`` format)
``network.stablehlo``       the same function as a serialized ``jax.export`` artifact
``depth_bases.stablehlo``   CamFlow+: the per-image basis builder (depth, K -> bases)
``static_bases.npy``        the static bases ``[N_static, h, w, 2]`` float32
``example.npz``             a synthetic pair at the export size (inputs, depths, intrinsics,
                            bases) with the JAX outputs: a golden test for a port
``manifest.json``           what all of it is (:mod:`.manifest`)
==========================  =================================================================

The folder is written atomically (:func:`camflow_jax.io.atomic.atomic_dir`): all of it or
nothing, an earlier export in it replaced only with ``overwrite``. Before anything is moved into
place the artifacts are run on the example pair and compared (``check``): the deserialized
StableHLO artifact, compiled here, gives the JAX reference; ONNX Runtime's flows must agree with
it to :data:`FLOW_TOLERANCE_PX`, or nothing is written.

The depth-basis builder is exported as StableHLO only: jax2onnx does not convert it (docs/export.md,
"What converts, what does not, and what was done"); ``manifest.json`` states its steps for a port.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from camflow_jax.data.synthetic import SyntheticScenes
from camflow_jax.export import manifest as manifest_lib
from camflow_jax.export import network, stablehlo
from camflow_jax.export import onnx as onnx_lib
from camflow_jax.io import atomic

__all__ = ["FILES", "FORMATS", "FLOW_TOLERANCE_PX", "write_bundle", "example_pair"]

#: Every file an export may write (the folder's own files: others in it are left alone).
FILES = ("network.onnx", "network.stablehlo", "depth_bases.stablehlo", "static_bases.npy", "example.npz",
         "manifest.json")
#: The artifact formats.
FORMATS = ("onnx", "stablehlo")
#: Largest flow difference (network pixels) allowed between ONNX Runtime and JAX.
FLOW_TOLERANCE_PX = 1e-3
#: The example pair: a held-out synthetic scene (docs/synthetic.md).
EXAMPLE_SEED = 1000


def example_pair(spec: network.ExportSpec) -> dict[str, np.ndarray]:
    """A synthetic pair rendered at the export size, tiled to the batch: img1, img2 float32
    ``[B, h, w, 3]`` (0..255), depth1, depth2 ``[B, h, w]``, K ``[B, 4]`` (network pixels)."""
    pair = SyntheticScenes(seed=EXAMPLE_SEED, num_samples=1, height=spec.height, width=spec.width,
                           num_textures=4, homography=False)[0]

    def tile(x, dtype=np.float32):
        return np.repeat(np.asarray(x, dtype)[None], spec.batch, axis=0)

    return {"img1": tile(pair["img1"]), "img2": tile(pair["img2"]), "depth1": tile(pair["depth1"]),
            "depth2": tile(pair["depth2"]), "K": tile(pair["K"])}


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def write_bundle(predictor, out_dir, *, size: tuple[int, int] | None = None, batch: int = 1,
                 platforms: Sequence[str] = ("cpu",), formats: Sequence[str] = FORMATS,
                 opset: int = onnx_lib.DEFAULT_OPSET, check: bool = True, overwrite: bool = False,
                 log=None) -> dict:
    """Exports ``predictor``'s network (module doc) into ``out_dir``; returns the manifest.

    Args:
      predictor: a :class:`camflow_jax.predictor.Predictor` (its model, weights, static bases).
      size: ``(h, w)`` to export at (default: the model's network size).
      batch: the fixed batch size.
      platforms: the StableHLO artifacts' platforms (``cpu``, ``cuda``, ``rocm``, ``tpu``).
      formats: ``onnx`` and/or ``stablehlo``.
      opset: the ONNX opset.
      check: run the artifacts on the example pair and refuse (ValueError) flows that disagree.
      overwrite: replace an earlier export in ``out_dir``.
      log: called with a line of progress (e.g. ``print``); None: silent.
    """
    say = log or (lambda line: None)
    formats = tuple(formats)
    if not formats or any(f not in FORMATS for f in formats):
        raise ValueError(f"formats must be some of {FORMATS}, got {formats}")
    platforms = tuple(platforms)
    stablehlo.parse_platforms(",".join(platforms))  # validates
    spec = network.export_spec(predictor, size, batch)
    if "onnx" in formats and getattr(predictor, "precision", None) == "bfloat16":
        raise ValueError("the ONNX export needs a float32 precision policy (ONNX's Conv has no bfloat16): export "
                         "with --precision exact (Predictor(precision='exact')), or --formats stablehlo")
    atomic.check_output_dir(out_dir, FILES, overwrite)
    if "onnx" in formats:
        for name in ("jax2onnx", "onnx", "onnxruntime"):
            onnx_lib.require(name)
    static = network.static_bases_at(predictor, spec)
    flows = network.flows_function(predictor, spec)
    shapes = spec.flow_shapes()
    blobs: dict[str, bytes] = {"static_bases.npy": _npy_bytes(static)}
    files: dict[str, dict] = {"static_bases.npy": {"what": "the static bases (homography | stochastic)",
                                                   "shape": list(static.shape), "dtype": "float32"}}
    exported: dict[str, Any] = {}
    if "stablehlo" in formats:
        say(f"StableHLO ({','.join(platforms)}) ...")
        exported["network"] = stablehlo.export_function(flows, shapes, platforms)
        blobs["network.stablehlo"] = bytes(exported["network"].serialize())
        files["network.stablehlo"] = {
            "what": "the flows function, serialized jax.export.Exported (jax.export.deserialize(data).call(...))",
            **stablehlo.describe(exported["network"], network.FLOW_INPUTS, network.FLOW_OUTPUTS)}
        if spec.num_depth:
            fn = network.depth_bases_function(predictor, spec, static)
            exported["depth_bases"] = stablehlo.export_function(fn, spec.bases_shapes(), platforms)
            blobs["depth_bases.stablehlo"] = bytes(exported["depth_bases"].serialize())
            files["depth_bases.stablehlo"] = {
                "what": "CamFlow+'s basis builder: (depth, K) -> the image's full basis set",
                **stablehlo.describe(exported["depth_bases"], network.BASES_INPUTS, network.BASES_OUTPUTS)}
    onnx_model = None
    if "onnx" in formats:
        say(f"ONNX (jax2onnx, opset {opset}) ...")
        onnx_model = onnx_lib.convert(
            network.flows_function(predictor, spec, onnx=True), shapes, network.FLOW_OUTPUTS, name="camflow_flows", opset=opset,
            doc=f"camflow_jax flows-only network of {predictor.description} at {spec.height}x{spec.width}, "
                f"batch {spec.batch}; see manifest.json",
            metadata={"camflow_jax.format": manifest_lib.FORMAT, "height": spec.height, "width": spec.width,
                      "batch": spec.batch, "num_bases": spec.num_bases})
        blobs["network.onnx"] = onnx_model.SerializeToString()
        files["network.onnx"] = {"what": "the flows function as ONNX", "opset": int(opset),
                                 "inputs": list(network.FLOW_INPUTS), "outputs": list(network.FLOW_OUTPUTS)}
    checks = None
    if check:
        say("checking the artifacts on the example pair ...")
        checks, example = _check(predictor, spec, static, flows, exported, onnx_model)
        blobs["example.npz"] = _npz_bytes(example)
        files["example.npz"] = {"what": "a synthetic pair (seed 1000) at the export size: inputs, depth1, depth2, "
                                        "K, and the JAX outputs (flow_f, flow_b, coeffs_f, coeffs_b)",
                                "arrays": sorted(example)}
    conv = onnx_lib.versions() if "onnx" in formats else {}
    manifest = manifest_lib.build(predictor, spec, files, checks, conv)
    blobs["manifest.json"] = (atomic.strict_json(manifest, indent=2) + "\n").encode()
    with atomic.atomic_dir(out_dir, FILES, overwrite=overwrite) as tmp:
        for name, data in blobs.items():
            with open(os.path.join(tmp, name), "wb") as fh:
                fh.write(data)
    return json.loads(blobs["manifest.json"])


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _check(predictor, spec, static, flows, exported, onnx_model) -> tuple[dict, dict]:
    """Runs what was exported on the example pair: the reference is the StableHLO artifact
    (deserialized from its bytes and compiled here) when there is a CPU one, else ``jax.jit``
    of the function. Returns the measured differences and the example's arrays."""
    ex = example_pair(spec)
    on_cpu = "network" in exported and "cpu" in exported["network"].platforms
    if spec.num_depth:
        if "depth_bases" in exported and on_cpu:
            build = jax.jit(stablehlo.load(exported["depth_bases"].serialize()).call)
        else:
            build = jax.jit(network.depth_bases_function(predictor, spec, static))
        bases_f = np.asarray(build(ex["depth1"], ex["K"]))
        bases_b = np.asarray(build(ex["depth2"], ex["K"]))
    else:
        bases_f = bases_b = np.repeat(static[None], spec.batch, axis=0)
    feeds = {"img1": ex["img1"], "img2": ex["img2"], "bases_f": bases_f, "bases_b": bases_b}
    if on_cpu:
        reference = jax.jit(stablehlo.load(exported["network"].serialize()).call)
        how = "the network.stablehlo artifact, deserialized and compiled for the CPU"
    else:
        reference = jax.jit(flows)
        how = "jax.jit of the exported function on the CPU"
    ref = dict(zip(network.FLOW_OUTPUTS, (np.asarray(x) for x in reference(*feeds.values()))))
    checks: dict[str, Any] = {"pair": f"synthetic scene, seed {EXAMPLE_SEED}, at {spec.height}x{spec.width}",
                              "reference": how,
                              "mean_abs_flow_f_px": float(np.mean(np.linalg.norm(ref["flow_f"], axis=-1)))}
    if onnx_model is not None:
        got = onnx_lib.run(onnx_lib.session(onnx_model), feeds)
        diff = {k: _max_diff(got[k], ref[k]) for k in network.FLOW_OUTPUTS}
        checks["onnxruntime"] = {"max_abs_diff": diff, "tolerance_flow_px": FLOW_TOLERANCE_PX}
        worst = max(diff["flow_f"], diff["flow_b"])
        if not worst <= FLOW_TOLERANCE_PX:
            raise ValueError(f"the ONNX model's flows differ from JAX's by {worst:.3g} px on the example pair "
                             f"(allowed {FLOW_TOLERANCE_PX:g}): not written")
    example = {**ex, **ref, "img1": ex["img1"].astype(np.uint8), "img2": ex["img2"].astype(np.uint8)}
    return checks, example
