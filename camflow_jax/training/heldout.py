"""Evaluation on the held-out pairs during training: :class:`HeldoutEvaluator` runs the jitted
eval step over the held-out set the config names (:func:`heldout_source`), scores it per
category against the labels (EPE, published all-pixel form and valid-pixel mean) beside the
configured baselines (``eval_baselines``), and writes ``eval_<step>.json``, TensorBoard and a
printed table.

The held-out set: GHOF-Cam (the ``ghof_cam`` benchmark file) when ``data.eval_path`` names it,
else host-rendered synthetic scenes (``data.eval_seed``, whatever the training data), so that
numbers stay comparable across runs and every recipe evaluates something. ``data.num_eval = 0``:
none."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np

from camflow_jax.data import benchmarks, datasets, pipeline
from camflow_jax.data.synthetic.scenes import CATEGORIES
from camflow_jax.estimators import registry
from camflow_jax.evaluation import metrics
from camflow_jax.evaluation.reports import format_table
from camflow_jax.training import workdir as workdir_lib
from camflow_jax.training.signals import GracefulStop
from camflow_jax.training.steps import host_to_global

__all__ = ["HeldoutEvaluator", "GhofCamPairs", "heldout_source", "evaluate_heldout", "summarize", "EVAL_TABLES"]


class GhofCamPairs:
    """GHOF-Cam samples as held-out pairs (the keys :func:`camflow_jax.data.pipeline.prepare_pair`
    reads): the target is the ground-truth camera flow on the valid (static) pixels of its mask;
    ``num`` samples spread evenly over the file, so every category is in (all when ``num`` is at
    least its size). ``categories``: the GHOF table columns."""

    categories = benchmarks.GHOF_CATEGORIES

    def __init__(self, bench, num: int):
        n = len(bench)
        self.bench = bench
        self.indices = np.unique(np.linspace(0, n - 1, min(int(num), n)).round().astype(int)) if n else []

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i) -> dict:
        s = self.bench[int(self.indices[i])]
        flow, mask = s["gt_flow"].astype(np.float32), s["mask"].astype(np.float32)
        out = {"img1": s["img1"], "img2": s["img2"], "flow_f": flow, "label_mask_f": mask,
               "flow_b": np.zeros_like(flow), "label_mask_b": np.zeros_like(mask),  # unused by the eval step
               "gt_flow_f": flow, "gt_valid_f": mask,
               "category_id": np.int32(self.categories.index(s["category"]))}
        out.update({k: s[k] for k in ("depth1", "depth2", "K") if k in s})
        return out


def heldout_source(config):
    """``(source, categories, name)`` of the held-out pairs ``config`` asks for: GHOF-Cam
    (:class:`GhofCamPairs` of ``data.eval_path``, depth from ``data.eval_depth_dir``) when
    ``data.eval_path`` is set, else the synthetic scenes of ``data.eval_seed``; ``(None, (), None)``
    with ``data.num_eval = 0``."""
    data = config.data
    if data.num_eval <= 0:
        return None, (), None
    if data.eval_path:
        bench = datasets.load_dataset("ghof_cam", data.eval_path, depth_dir=data.eval_depth_dir or None)
        return GhofCamPairs(bench, data.num_eval), GhofCamPairs.categories, "GHOF-Cam"
    scenes = datasets.REGISTRY["synthetic"].train(data, config.model.height, config.model.width, "eval")
    return scenes, CATEGORIES, "synthetic"


def _eval_targets(b):
    if "gt_flow_f" in b:
        return b["gt_flow_f"], b["gt_valid_f"]
    return b["flow_f"], b["label_mask_f"]


def evaluate_heldout(predict, eval_source, prepare_kwargs, batch_size, baseline_names, cache: dict):
    """Per-category EPE (published all-pixel form and valid-pixel mean) of the model and of the
    baselines (:mod:`camflow_jax.estimators.registry` names) on the held-out pairs. ``cache`` keeps
    baseline results across calls."""
    records = {"camflow": []}
    need_baselines = "baselines" not in cache
    base_records = {n: [] for n in baseline_names}
    methods = {n: registry.get(n, forward_only=True) for n in baseline_names} if need_baselines else {}
    for b in pipeline.eval_batches(eval_source, batch_size, prepare_kwargs):
        flows = np.asarray(predict(b))
        gt, valid = _eval_targets(b)
        for i in range(len(flows)):
            cat = int(b["category_id"][i])
            records["camflow"].append((cat, metrics.epe_all_pixels(flows[i], gt[i], valid[i]),
                                       metrics.epe_valid(flows[i], gt[i], valid[i])))
            if need_baselines:
                for n, method in methods.items():
                    f = method(b["img1"][i], b["img2"][i]).flow_f
                    base_records[n].append((cat, metrics.epe_all_pixels(f, gt[i], valid[i]),
                                            metrics.epe_valid(f, gt[i], valid[i])))
    if need_baselines:
        cache["baselines"] = base_records
    records.update(cache["baselines"])
    return records


def summarize(records, category_names) -> dict:
    """{method: {category: {'epe', 'epe_valid'}}} with AVG = mean of category means."""
    return {method: metrics.category_table(
                [(category_names[c], {"epe": e, "epe_valid": ev}) for c, e, ev in rows], category_names)[0]
            for method, rows in records.items()}


#: The two tables printed after an evaluation, each under its own label.
EVAL_TABLES = (("epe", "EPE (px), the published all-pixel form over the valid mask"),
               ("epe_valid", "EPE (px), the mean over valid pixels"))


class HeldoutEvaluator:
    """``evaluator(state, step)`` -> the held-out table (None without held-out pairs:
    ``data.num_eval = 0``), written to ``eval_<step>.json`` and TensorBoard and printed."""

    def __init__(self, config, prepare_kwargs: dict, p_eval, static, data_sharding, writer, workdir: Path | None,
                 stop: GracefulStop | None = None):
        self.stop, self.prepare_kwargs = stop, prepare_kwargs
        self.source, self.categories, self.name = heldout_source(config)
        self.config, self.p_eval, self.static, self.sharding = config, p_eval, static, data_sharding
        self.writer, self.workdir, self.cache = writer, workdir, {}

    def _predict(self, state, b):
        if self.stop is not None:
            self.stop.check()  # a signal stops the evaluation between batches
        n = len(b["img1"])
        pad = (-n) % jax.device_count()  # eval batches must split evenly over devices
        bb = {k: np.concatenate([v, np.repeat(v[-1:], pad, 0)]) if pad else v for k, v in b.items()}
        return np.asarray(jax.device_get(self.p_eval(state, host_to_global(bb, self.sharding), self.static)))[:n]

    def __call__(self, state, step: int) -> dict | None:
        if self.source is None:
            return None
        records = evaluate_heldout(lambda b: self._predict(state, b), self.source, self.prepare_kwargs,
                                   max(self.config.batch_size, jax.device_count()),
                                   tuple(self.config.eval_baselines), self.cache)
        table = summarize(records, self.categories)
        self.writer.write_eval(step, table)
        if self.workdir is not None:
            workdir_lib.write_text(self.workdir / f"eval_{step}.json", json.dumps(table, indent=2))
        workdir_lib.log(f"eval at step {step} on {len(records['camflow'])} held-out pairs ({self.name})")
        for metric, label in EVAL_TABLES:
            workdir_lib.log(f"\n{label}, step {step}:\n{format_table(table, metric, self.categories, markdown=True)}")
        return table
