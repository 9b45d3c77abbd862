"""One benchmark run: every method on every sample, scored by the dataset's protocol and
aggregated per category (:func:`evaluate`; ``python -m camflow_jax.evaluate`` is its
command line, docs/evaluation.md).

Outputs in ``out_dir`` (:data:`camflow_jax.evaluation.reports.BENCHMARK_FILES`):
``results.json`` = ``{method: {category: {metric: value}}}`` with the dataset's categories plus
``AVG`` (= mean of the category means), ``results.csv`` (long form with sample counts),
``results.md`` (one paper-style table per metric), ``per_sample.csv`` and ``meta.json``
(dataset, sample counts, seconds per pair, fallbacks). The files are written to a temporary
folder and moved in when complete.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from camflow_jax.data import datasets
from camflow_jax.evaluation import methods as methods_lib
from camflow_jax.evaluation import metrics, protocols, reports
from camflow_jax.io import interrupt
from camflow_jax.io.atomic import check_writable

__all__ = ["EvalOptions", "evaluate"]


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """How :func:`evaluate` runs (every field keeps its default unless set).

    Attributes:
      data: benchmark path (GHOF-Cam / GHOF ``.npy`` file, CAHomo folder); for ``synthetic``
        an optional folder of texture photos.
      checkpoints: for ``camflow``: ``"DIR"`` or ``"label=DIR,label2=DIR2"`` (or a list).
      num: synthetic: number of held-out samples (default 100); others: evaluate only the
        first ``num`` samples (quick checks; the tables then are not the published protocol).
      seed, size: the held-out synthetic set ``SyntheticScenes(seed, num, *size)``.
      depth_dir, intrinsics, list_file: passed to the readers (see
        :mod:`camflow_jax.data.benchmarks`).
      out_dir: if given, results.json / .csv / .md, per_sample.csv and meta.json go there.
      iqa_form: 'masked' (statistics over masked pixels) or 'zeroed' (the release's form).
      channel_order: colour order of the images as given to the network ('rgb' or 'bgr').
      progress: a progress bar on stderr.
      source: an already-built random-access source (overrides dataset/data loading).
      verbose: print the tables (:func:`.reports.benchmark_summary`).
      refine_size: the refined camflow rows refine at this longer side instead of 288 px
        (:meth:`camflow_jax.refine.RefineConfig.at_size`; recorded in ``meta``).
    """

    data: Any = None
    checkpoints: Any = None
    num: int | None = None
    seed: int = 1000
    size: tuple[int, int] = (320, 576)
    depth_dir: Any = None
    intrinsics: Any = None
    list_file: str | None = None
    out_dir: Any = None
    iqa_form: str = "masked"
    channel_order: str = "rgb"
    progress: bool = True
    source: Any = None
    verbose: bool = True
    refine_size: int | None = None


def evaluate(dataset: str, methods: Sequence[str] | str, options: EvalOptions | None = None, **settings) -> dict:
    """Runs ``methods`` on a benchmark and aggregates per-category tables.

    Args:
      dataset: one of :data:`camflow_jax.data.datasets.DATASETS`.
      methods: names (list or comma-separated string): estimator registry names
        (:mod:`camflow_jax.estimators.registry`), ``camflow:LABEL`` for a labelled ``checkpoints``
        entry, and the evaluation-only oracles (:data:`.methods.ORACLES`); ``camflow``
        gives two rows, ``camflow`` (refined) and ``camflow_net`` (the network alone).
      options: an :class:`EvalOptions` (default: its defaults).
      settings: :class:`EvalOptions` fields as keywords (``num=5, out_dir=...``), which replace
        those of ``options``; an unknown name is a TypeError.
    Returns:
      ``{"results": {method: {category: {metric: value}}}, "counts": same shape with sample
      counts, "meta": {...}, "per_sample": [...]}``; categories include ``AVG``.
    """
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(EvalOptions)})
    if unknown:
        raise TypeError(f"evaluate() got unexpected keyword argument(s) {', '.join(unknown)} (see EvalOptions)")
    o = dataclasses.replace(options or EvalOptions(), **settings)
    data, checkpoints, num, seed, size = o.data, o.checkpoints, o.num, o.seed, o.size
    depth_dir, intrinsics, list_file, out_dir = o.depth_dir, o.intrinsics, o.list_file, o.out_dir
    iqa_form, channel_order, progress, source = o.iqa_form, o.channel_order, o.progress, o.source
    verbose, refine_size = o.verbose, o.refine_size
    if dataset not in datasets.DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {datasets.DATASETS}")
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    if not methods:
        raise ValueError("no methods given")
    if iqa_form not in ("masked", "zeroed"):
        raise ValueError(f"iqa_form must be 'masked' or 'zeroed', got {iqa_form!r}")
    if out_dir is not None:  # an unwritable out_dir is reported before the evaluation runs

        check_writable(os.path.dirname(os.path.abspath(os.fspath(out_dir))))
        if os.path.isdir(out_dir):
            check_writable(os.fspath(out_dir))
    if source is None:
        source = datasets.load_dataset(dataset, data, num=num, seed=seed, size=size, depth_dir=depth_dir,
                                       intrinsics=intrinsics, list_file=list_file)
    categories = datasets.categories(source)
    runners = methods_lib.build_methods(list(methods), dataset, checkpoints, channel_order, refine_size)
    n = len(source) if (num is None or dataset == "synthetic") else min(int(num), len(source))
    need_b = dataset == "cahomo"
    metric_names = protocols.METRIC_NAMES[dataset]

    records = {m.name: [] for m in runners}
    seconds = {m.name: [] for m in runners}
    fallbacks = {m.name: 0 for m in runners}
    per_sample = []
    batch = max([m.batch_size() for m in runners] + [1])  # camflow on an accelerator: its predictor's batches
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc=f"evaluate {dataset}", unit="pair", file=sys.stderr)
    for lo in range(0, n, batch):
        interrupt.check()  # SIGINT / SIGTERM from the command line: stop at the next sample
        chunk = list(range(lo, min(n, lo + batch)))
        samples = [source[i] for i in chunk]
        for i, s in zip(chunk, samples):
            if str(s["category"]) not in categories:
                raise ValueError(f"sample {i}: category {str(s['category'])!r} not in {categories}")
        outputs = {}  # method -> [(flow_f, flow_b, info, seconds)] per sample of the chunk
        for m in runners:
            if m.batch_size() > 1 and len(samples) > 1:
                t0 = time.perf_counter()
                res = m.run_many(samples, need_b)
                share = (time.perf_counter() - t0) / len(samples)  # the batch's time, shared
                outputs[m.name] = [(*r, share) for r in res]
            else:
                outputs[m.name] = []
                for s in samples:
                    t0 = time.perf_counter()
                    r = m(s, need_b)
                    outputs[m.name].append((*r, time.perf_counter() - t0))
        for j, (i, s) in enumerate(zip(chunk, samples)):
            cat = str(s["category"])
            for m in runners:
                flow_f, flow_b, info, dt = outputs[m.name][j]
                try:
                    vals = protocols.score_sample(dataset, s, flow_f, flow_b, iqa_form)
                except ValueError as e:
                    raise ValueError(f"method {m.name}, sample {i} ({s.get('key', i)}): {e}") from None
                records[m.name].append((cat, vals))
                seconds[m.name].append(dt)
                fb = bool(info.get("fallback", False))
                fallbacks[m.name] += int(fb)
                per_sample.append({"index": i, "key": s.get("key", f"{i:05d}"), "category": cat,
                                   "method": m.name, "values": vals, "seconds": dt, "fallback": fb})
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()

    results, counts = {}, {}
    for name, recs in records.items():
        results[name], counts[name] = metrics.category_table(recs, categories)
    present = [c for c in categories if any(c in results[m] for m in results)]
    per_cat = {c: 0 for c in categories}
    for row in per_sample:
        if row["method"] == runners[0].name:
            per_cat[row["category"]] += 1
    # The first call of a jitted model includes compilation: time from the second pair on.
    sec = {k: float(np.median(v[1:] if len(v) > 1 else v)) for k, v in seconds.items()}
    meta = {
        "dataset": dataset, "data": None if data is None else os.fspath(data),
        "num_samples": n, "samples_per_category": per_cat, "categories": list(present),
        "metrics": list(metric_names), "methods": [m.name for m in runners],
        "checkpoints": dict(methods_lib.parse_checkpoints(checkpoints)), "seconds_per_pair": sec,
        "fallbacks_to_identity": fallbacks, "iqa_form": iqa_form,
    }
    if refine_size is not None:
        meta["refine_size"] = int(refine_size)
    notes = [m.note for m in runners if m.note]
    if notes:
        meta["notes"] = notes
    if dataset == "synthetic":
        meta.update(seed=seed, size=list(size))
    if hasattr(source, "skipped") and source.skipped:
        meta["skipped_pairs_unknown_video"] = len(source.skipped)
    if "identity" in results and num is None and dataset in protocols.PUBLISHED_IDENTITY:
        meta["published_identity_check"] = protocols.check_published_identity(dataset, results["identity"])
    run = {"results": results, "counts": counts, "meta": meta, "per_sample": per_sample}
    if verbose:
        print(reports.benchmark_summary(run))
    if out_dir is not None:
        reports.write_benchmark(out_dir, run)
        if verbose:
            print(f"wrote {os.path.join(out_dir, 'results.json')} (+ .csv, .md, per_sample.csv, meta.json)")
    return run
