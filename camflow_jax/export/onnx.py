"""ONNX: a JAX function converted with jax2onnx, cleaned for ONNX Runtime, and run there.

The converter and the runtime are optional packages, imported on first use
(:func:`require`): ``import camflow_jax`` never needs them. jax2onnx releases that run on
JAX 0.10 (0.14.1 and later) pin ``orbax-checkpoint<0.11.37`` although the converter never
imports Orbax; installing them with their dependencies would downgrade the Orbax this package
saves its checkpoints with, so jax2onnx is installed on its own, without dependencies
(:data:`INSTALL_HINT`); what it needs of them at run time (onnx, onnx-ir, numpy, ml_dtypes, JAX)
is there.

The conversion writes Flax's LayerNorm as ONNX ``LayerNormalization`` (one kernel; see
:func:`convert_raw`); the export converts the network's ONNX form
(:func:`camflow_jax.export.network.flows_function` with ``onnx=True``). After conversion
(:func:`convert`) two passes touch the graph, neither changing what it computes:

* the intermediate ``value_info`` jax2onnx records is dropped: some of its shapes describe the
  channel-last layout of a tensor the graph holds channel-first around a ``Conv``, which ONNX
  Runtime reports as "Error merging shape info" on every load. The graph's inputs and outputs
  keep their types and shapes; ONNX Runtime infers the rest;
* every two-input ``Einsum`` whose operands have static shapes becomes Transpose / Reshape /
  ``MatMul`` / Reshape / Transpose (:func:`einsum_to_matmul`): the same products and sums,
  run by ONNX Runtime's GEMM kernels instead of its generic Einsum (the attention and basis
  combination of the shipped model: the unrewritten graph took 1.05-1.10x the time on 2 CPU
  cores; docs/export.md, "What converts").
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["MissingDependency", "INSTALL_HINT", "JAX2ONNX_VERSION", "require", "versions", "convert",
           "convert_raw", "finish", "einsum_to_matmul", "session", "run", "DEFAULT_OPSET", "MIN_OPSET"]

#: The jax2onnx release the export is tested with (0.14.1 is the first to run on JAX 0.10).
JAX2ONNX_VERSION = "0.17.1"
#: How to install the optional packages (README: the package is installed from a checkout).
INSTALL_HINT = (f"pip install -e '.[export]' && pip install --no-deps jax2onnx=={JAX2ONNX_VERSION} "
                "(in a checkout of camflow_jax; --no-deps keeps jax2onnx's orbax-checkpoint<0.11.37 "
                "pin from downgrading Orbax)")

#: The ONNX opset the network is written in by default: the lowest the converter writes it in
#: (17 lacks the two-input ReduceMean), so that older runtimes load it too (ONNX Runtime 1.14,
#: early 2023, and later).
DEFAULT_OPSET = MIN_OPSET = 18


class MissingDependency(ImportError):
    """An optional package the export needs is not installed (the message says how to get it)."""


def require(name: str):
    """Imports the optional package ``name`` (``jax2onnx``, ``onnx``, ``onnxruntime``) or raises
    :class:`MissingDependency` naming it and :data:`INSTALL_HINT`."""
    try:
        if name == "jax2onnx":
            with _quiet_converter():
                return importlib.import_module(name)
        return importlib.import_module(name)
    except ImportError as e:
        raise MissingDependency(f"the ONNX export needs the package {name!r}, which is not installed "
                                f"({e}): {INSTALL_HINT}") from e


def versions() -> dict[str, str | None]:
    """Installed versions of the converter and the runtime (None: not installed)."""
    out = {}
    for name in ("jax2onnx", "onnx", "onnx-ir", "onnxruntime"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


@contextlib.contextmanager
def _quiet_converter() -> Iterator[None]:
    """jax2onnx imports its example plugins too and logs a warning with a traceback for each
    one whose package (equinox, dm_pix...) is missing, none of them used here; its plugins also
    reach JAX names that JAX now reports as deprecated."""
    log = logging.getLogger("jax2onnx")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        log.setLevel(level)


def convert(fn: Callable, inputs: Mapping[str, Any], output_names: Sequence[str], *, name: str,
            opset: int = DEFAULT_OPSET, doc: str = "", metadata: Mapping[str, str] | None = None,
            matmul: bool = True, native_layer_norm: bool = True):
    """``fn`` (a function of the arrays ``inputs``, name -> ``jax.ShapeDtypeStruct``, in call
    order) as a checked ``onnx.ModelProto`` with those input and output names, after the passes
    of the module doc (``matmul=False``: without the Einsum rewrite; ``native_layer_norm``: as
    :func:`convert_raw`). ``doc`` and ``metadata`` are stored in the model (``doc_string``,
    ``metadata_props``)."""
    return finish(convert_raw(fn, inputs, output_names, name=name, opset=opset, native_layer_norm=native_layer_norm),
                  matmul=matmul, doc=doc, metadata=metadata)


def convert_raw(fn: Callable, inputs: Mapping[str, Any], output_names: Sequence[str], *, name: str,
                opset: int = DEFAULT_OPSET, native_layer_norm: bool = True):
    """jax2onnx's conversion of ``fn`` as it comes (:func:`convert` without its passes).

    ``native_layer_norm``: Flax's LayerNorm as ONNX ``LayerNormalization`` (opset 17 and later;
    jax2onnx's ``normalization_mode="prefer_native"``), one kernel, instead of jax2onnx's default
    explicit graph of 12 nodes (Flax's fast variance E[x^2] - E[x]^2, which ONNX Runtime does not
    fuse). ONNX computes the variance as E[(x - E[x])^2]: the same to float32 rounding."""
    jax2onnx = require("jax2onnx")
    with _quiet_converter():
        return jax2onnx.to_onnx(fn, list(inputs.values()), model_name=name, opset=int(opset),
                                input_names=list(inputs), output_names=list(output_names),
                                normalization_mode="prefer_native" if native_layer_norm else "auto")


def finish(model, *, matmul: bool = True, doc: str = "", metadata: Mapping[str, str] | None = None):
    """:func:`convert`'s passes on a converted ``model``, in place; returns it, checked."""
    onnx = require("onnx")
    del model.graph.value_info[:]
    if matmul:
        einsum_to_matmul(model)
    model.doc_string = doc
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = str(key), str(value)
    onnx.checker.check_model(model, full_check=True)
    return model


# ----------------------------------------------------------------------------- Einsum -> MatMul
def _static_shapes(model) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape that ONNX's own shape inference fixes completely."""
    onnx = require("onnx")
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    for init in g.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    return shapes


def _ellipsis_labels(eq: str, count: int) -> str:
    """``count`` labels for an ellipsis, none of them used in ``eq``."""
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in eq]
    return "".join(free[:count])


def einsum_to_matmul(model) -> int:
    """Rewrites, in place, each two-input ``Einsum`` of ``model``'s main graph whose operands'
    shapes are static and need no broadcasting (each label one size, no repeated label) as
    ``MatMul`` of the operands arranged [batch..., free, contracted] and [batch..., contracted,
    free]; returns how many it rewrote. Others are left as they are."""
    shapes = _static_shapes(model)
    nodes, count = [], 0
    for node in model.graph.node:
        new = _as_matmul(node, shapes) if node.op_type == "Einsum" and len(node.input) == 2 else None
        nodes.extend([node] if new is None else new)
        count += new is not None
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return count


def _as_matmul(node, shapes) -> list | None:
    onnx = require("onnx")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    eq = next((a.s.decode() for a in node.attribute if a.name == "equation"), "").replace(" ", "")
    a, b = node.input
    if a not in shapes or b not in shapes or eq.count("->") != 1:
        return None
    lhs, out = eq.split("->")
    if lhs.count(",") != 1:
        return None
    ta, tb = lhs.split(",")
    ta, tb = lhs.split(",")
    ell = {len(shape) - (len(t) - 3) for t, shape in ((ta, shapes[a]), (tb, shapes[b])) if "..." in t}
    if len(ell) > 1 or min(ell, default=0) < 0:
        return None  # ellipses of different ranks broadcast
    labels = _ellipsis_labels(eq, ell.pop() if ell else 0)
    ta, tb, out = (t.replace("...", labels) for t in (ta, tb, out))
    if len(ta) != len(shapes[a]) or len(tb) != len(shapes[b]) or any(len(set(t)) != len(t) for t in (ta, tb, out)):
        return None
    size: dict[str, int] = {}
    for term, shape in ((ta, shapes[a]), (tb, shapes[b])):
        for c, n in zip(term, shape):
            if size.setdefault(c, n) != n:
                return None  # broadcasting (a label of size 1 on one side)
    batch = [c for c in ta if c in tb and c in out]
    contract = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    if sorted(out) != sorted(batch + free_a + free_b):
        return None  # a label summed within one operand
    prefix = (node.name or node.output[0]) + "_mm"
    new: list = []

    def transpose(x: str, term: str, order: list[str], tag: str) -> str:
        perm = [term.index(c) for c in order]
        if perm == sorted(perm):
            return x
        y = f"{prefix}_{tag}_t"
        new.append(helper.make_node("Transpose", [x], [y], name=y, perm=perm))
        return y

    def reshape(x: str, dims: list[int], tag: str, y: str | None = None) -> str:
        y = y or f"{prefix}_{tag}_r"
        c = f"{prefix}_{tag}_shape"
        new.append(helper.make_node("Constant", [], [c], name=c,
                                    value=numpy_helper.from_array(np.asarray(dims, np.int64), c)))
        new.append(helper.make_node("Reshape", [x, c], [y], name=y))
        return y

    def prod(labels: list[str]) -> int:
        return int(np.prod([size[c] for c in labels], dtype=np.int64))

    lead = [size[c] for c in batch]
    xa = reshape(transpose(a, ta, batch + free_a + contract, "a"), lead + [prod(free_a), prod(contract)], "a")
    xb = reshape(transpose(b, tb, batch + contract + free_b, "b"), lead + [prod(contract), prod(free_b)], "b")
    mm = f"{prefix}_out"
    new.append(helper.make_node("MatMul", [xa, xb], [mm], name=mm))
    order = batch + free_a + free_b
    perm = [order.index(c) for c in out]
    if perm == sorted(perm):
        reshape(mm, [size[c] for c in order], "o", y=node.output[0])
    else:
        r = reshape(mm, [size[c] for c in order], "o")
        new.append(helper.make_node("Transpose", [r], [node.output[0]], name=f"{prefix}_o_t", perm=perm))
    return new


# ----------------------------------------------------------------------------- running
def session(model, threads: int | None = None, spinning: bool = False):
    """An ONNX Runtime CPU session of ``model`` (a ModelProto, its bytes or a path); ``threads``:
    intra-op threads (None: ONNX Runtime's default, one per physical core); ``spinning``: whether
    its worker threads spin after each call (ONNX Runtime's default) instead of sleeping. Off here
    (``session.intra_op.allow_spinning`` 0): on a CPU shared with other work, or with JAX in the
    same process, the spinning threads took the cores from the next call's work and made both
    slower (docs/export.md, "Speed"). Warnings off (its constant folding notes that it has no CPU
    kernel to fold jax2onnx's ``CastLike``)."""
    ort = require("onnxruntime")
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = int(threads)
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run(sess, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """All outputs of ``sess`` for ``feeds`` (name -> array, cast to float32), by name."""
    names = [o.name for o in sess.get_outputs()]
    values = sess.run(names, {k: np.ascontiguousarray(v, np.float32) for k, v in feeds.items()})
    return dict(zip(names, values))
