"""The rows of a benchmark table: estimators from the registry (:mod:`camflow_jax.estimators.registry`)
and the evaluation-only oracles.

A :class:`Method` runs on a benchmark sample: ``method(sample, need_backward) -> (flow_f,
flow_b or None, info)``. Names (:func:`build_methods`):

* any registry name (``identity``, ``sift_ransac``, ``sift_magsac``, ``orb_ransac``,
  ``orb_magsac``, ``dis``, ``ecc``, ``camflow``, ``camflow_net``, ``camflow:PATH``,
  ``camflow_net:PATH``); the sample's depth maps and K (when it has them) are passed on;
* ``camflow`` gives two rows, ``camflow`` (refined) and ``camflow_net`` (the network alone),
  for the checkpoint given (or the shipped model); with several labelled checkpoints
  (``b8=DIR8,b36=DIR36``) one pair of rows per label, ``camflow:b8``, ``camflow_net:b8``, ...;
  ``camflow:LABEL`` / ``camflow_net:LABEL`` pick one label (or, when no label matches, name a
  checkpoint path as the registry's ``camflow:PATH`` does);
* **evaluation-only oracles** (:data:`ORACLES`; they read the sample's labels, so they are no
  estimators): ``gt_homography`` (the dataset's homography label as a flow) and ``gyro`` (the
  GHOF gyro field).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from camflow_jax.estimators import registry
from camflow_jax.geometry import host

__all__ = ["ORACLES", "Method", "parse_checkpoints", "build_methods", "from_estimator", "oracle"]

#: Evaluation-only oracles, implemented here (the registry only names them, to refuse them).
ORACLES = tuple(registry.ORACLES)


@dataclass
class Method:
    """A named table row: ``run(sample, need_backward) -> (flow_f, flow_b or None, info)``
    (``info["fallback"]``: the estimator fell back to identity). ``note``: said once in the
    printout and in ``meta.json`` (e.g. which model a CamFlow row ran)."""
    name: str
    run: Callable
    note: str = ""
    estimator: object = None
    #: ``run_many(samples, need_backward) -> [run's result per sample]``: several samples per
    #: call (camflow: one batch of the predictor), or None
    run_many: Callable | None = None

    def batch_size(self) -> int:
        """Samples per :attr:`run_many` call worth gathering (1: one at a time)."""
        return max(1, int(getattr(self.estimator, "batch_size", 1) or 1)) if self.run_many else 1

    def __call__(self, sample: dict, need_backward: bool):
        return self.run(sample, need_backward)


def parse_checkpoints(spec, must_exist: bool = False) -> list[tuple[str, str]]:
    """``"a=DIR1,b=DIR2"`` / ``"DIR"`` / list -> ``[(label, path)]`` (label defaults to the
    directory's base name; empty items between commas are skipped).

    ValueError naming the entry for an empty label or path (``=DIR``, ``a=``), repeated labels,
    and, with ``must_exist``, a path that does not exist (``a=DIR,b``: ``b`` is no folder)."""
    if spec is None or spec == "" or spec == []:
        return []
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        label, sep, path = item.partition("=")
        if not sep:
            path, label = label, os.path.basename(os.path.normpath(label))
        label, path = label.strip(), path.strip()
        if not label or not path:
            raise ValueError(f"--checkpoint entry {item!r} is malformed: entries are DIR or "
                             "LABEL=DIR, comma-separated")
        if must_exist and not os.path.exists(path):
            raise ValueError(f"--checkpoint entry {item!r}: no checkpoint at {path!r} (no such "
                             "file or folder; entries are DIR or LABEL=DIR, comma-separated)")
        out.append((label, path))
    labels = [lab for lab, _ in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"checkpoint labels must be distinct, got {labels}")
    return out


def from_estimator(name: str, est, note: str = "") -> Method:
    """A row from a registry estimator ``est(img1, img2, *, depth1, depth2, intrinsics) -> Motion``.

    The estimator's own answer is measured (:meth:`camflow_jax.estimators.registry.Estimator.raw`, no
    plausibility checks). The backward flow (CAHomo's protocol) is the estimator's own ``flow_b``, else the inverse
    of its homography, else the estimator run on the swapped pair.
    """
    call = getattr(est, "raw", est)  # the estimator itself, without the plausibility checks

    def result(s, motion, need_b):
        flow_b = None
        if need_b:
            h, w = s["img1"].shape[:2]
            if motion.flow_b is not None:
                flow_b = motion.flow_b
            elif motion.homography is not None:
                flow_b = host.homography_flow(np.linalg.inv(motion.homography), h, w)
            else:
                swapped = {"depth1": s.get("depth2"), "depth2": s.get("depth1"), "intrinsics": s.get("K")}
                flow_b = call(s["img2"], s["img1"], **swapped).flow_f
        return motion.flow_f, flow_b, {"fallback": bool(motion.fallback)}

    def run(s, need_b):
        cam = {"depth1": s.get("depth1"), "depth2": s.get("depth2"), "intrinsics": s.get("K")}
        return result(s, call(s["img1"], s["img2"], **cam), need_b)

    def run_many(samples, need_b):
        motions = est.estimate_many([(s["img1"], s["img2"], s.get("depth1"), s.get("depth2"), s.get("K"))
                                     for s in samples], checked=False)
        return [result(s, m, need_b) for s, m in zip(samples, motions)]

    return Method(name, run, note, est, run_many if hasattr(est, "estimate_many") else None)


def oracle(name: str, dataset: str) -> Method:
    """Evaluation-only: ``gt_homography`` / ``gyro`` read the sample's labels (module doc)."""
    if name not in ORACLES:
        raise ValueError(f"unknown oracle {name!r}; choose from {ORACLES}")

    def run(s, need_b):
        h, w = s["img1"].shape[:2]
        if name == "gyro":
            if "gyro_field" not in s:
                raise ValueError("method 'gyro' needs the GHOF benchmark files (--dataset=ghof)")
            flow_f, flow_b = s["gyro_field"], None
            if need_b:
                raise ValueError("method 'gyro' has no backward flow")
        elif "homography" in s:  # synthetic pseudo-label
            H = np.asarray(s["homography"], np.float64)
            flow_f = host.homography_flow(H, h, w)
            flow_b = host.homography_flow(np.linalg.inv(H), h, w) if need_b else None
        elif "homo_field" in s:
            flow_f, flow_b = s["homo_field"], None
        else:
            raise ValueError(f"method 'gt_homography' needs a homography label, which {dataset!r} "
                             "samples do not have")
        return np.asarray(flow_f, np.float32), flow_b, {}

    return Method(name, run)


def _camflow_rows(name: str, ckpts: list[tuple[str, str]], channel_order: str,
                  refine_size: int | None = None, forward_only: bool = False) -> list[Method]:
    """The rows a CamFlow name asks for (module doc). Each checkpoint is loaded once, here (a
    missing one is reported before the run), and shared by its refined and network-only rows.
    ``refine_size``: the refined rows refine at that size (``RefineConfig.at_size``);
    ``forward_only``: the Predictor's forward-only path (the protocol reads no backward flow)."""
    base, _, label = name.partition(":")
    kinds = ("camflow", "camflow_net") if base == "camflow" else (base,)
    if label:
        path = dict(ckpts).get(label)
        if path is None and os.path.exists(label):  # the registry's camflow:PATH
            path = label
        if path is None:
            if ckpts:
                raise ValueError(f"no checkpoint labelled {label!r} in {[c[0] for c in ckpts]}")
            raise ValueError(f"method {name!r} needs --checkpoint={label}=DIR")
        wanted = [(label, path)]
    elif ckpts:
        wanted = ckpts
    else:
        wanted = [(None, None)]  # the shipped model
    rows = []
    for lab, path in wanted:
        suffix = "" if (lab is None or (not label and len(ckpts) == 1)) else f":{lab}"
        first = registry.get(kinds[0] if path is None else f"{kinds[0]}:{path}", channel_order=channel_order,
                               forward_only=forward_only)
        model = first.predictor
        for kind in kinds:
            size = {"refine_size": refine_size} if refine_size is not None and registry.is_refined(kind) else {}
            est = first if kind == kinds[0] and not size else registry.get(kind, predictor=model,
                                                                             forward_only=forward_only, **size)
            rows.append(from_estimator(kind + suffix, est,
                                       f"{kind + suffix}: {getattr(model, 'description', path)}"))
    return rows


def _used_labels(names: Sequence[str], ckpts: list[tuple[str, str]]) -> set[str]:
    """The checkpoint labels the method names ask for: all of them for a plain ``camflow`` /
    ``camflow_net``, one for ``camflow:LABEL``."""
    used: set[str] = set()
    for name in names:
        if name in ORACLES:
            continue
        try:
            canonical, _ = registry.resolve(name)
        except ValueError:
            continue
        if registry.is_camflow(canonical):
            label = canonical.partition(":")[2]
            used |= {label} if label else {lab for lab, _ in ckpts}
    return used


def build_methods(names: Sequence[str], dataset: str, checkpoints=None,
                  channel_order: str = "rgb", refine_size: int | None = None) -> list[Method]:
    """The :class:`Method` rows for ``names`` (module doc). Old registry names (``sift``) work
    with a note; unknown names: ValueError naming the valid ones. ``refine_size``: the refined
    camflow rows refine at that size (``RefineConfig.at_size``; ValueError without one).
    Checkpoints given when no method uses any (no camflow name) are a ValueError naming them
    (they would be ignored silently); ``camflow:LABEL`` may pick some of several."""
    ckpts = parse_checkpoints(checkpoints)
    if ckpts and not _used_labels(names, ckpts):
        labels = [lab for lab, _ in ckpts]
        raise ValueError(f"checkpoints {labels} (--checkpoint) are used by no method in "
                         f"{list(names)}: add camflow (every checkpoint) or camflow:{labels[0]} to "
                         "the methods, or drop --checkpoint")
    forward_only = dataset != "cahomo"  # only CAHomo's protocol reads the backward flow
    out: list[Method] = []
    for name in names:
        if name in ORACLES:
            out.append(oracle(name, dataset))
            continue
        try:
            canonical, note = registry.resolve(name)
        except ValueError as e:
            raise ValueError(f"{e}; or an evaluation-only oracle: {', '.join(ORACLES)}") from None
        if registry.is_camflow(canonical):
            out.extend(_camflow_rows(canonical, ckpts, channel_order, refine_size, forward_only))
        else:
            out.append(from_estimator(canonical, registry.get(canonical, forward_only=forward_only), note))
    names_out = [m.name for m in out]
    registry.require_refined_method(refine_size, names_out)
    if len(set(names_out)) != len(names_out):
        raise ValueError(f"methods listed twice: {names_out}")
    return out
