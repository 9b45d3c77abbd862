r"""Benchmark evaluation: ``python -m camflow_jax.evaluate`` and the flag-free :func:`evaluate`.

    python -m camflow_jax.evaluate --dataset=synthetic --num=100 \
        --methods=identity,sift_magsac,dis,camflow --checkpoint=CKPT --out=out/eval_synth
    python -m camflow_jax.evaluate --dataset=ghof_cam --data=GHOF-Cam.npy --methods=... --out=DIR
    python -m camflow_jax.evaluate --dataset=cahomo --data=CAHomo/Test --methods=... --out=DIR

Datasets and metrics (see :mod:`camflow_jax.metrics` for the exact formulas):

=========  ==========================================================================
ghof_cam   epe (published all-pixel form vs gt_flow on the valid mask), epe_valid,
           pme (GHOF protocol: EPE vs the GT homography field, top half of the rows),
           psnr / ssim of warp(img2, flow_f) vs img1 inside mask & both warps' validity
ghof       epe (generic optical-flow EPE vs gt_flow, all pixels, no mask), pme (Clean
           files only: they carry homo_field)
cahomo     pme (6 annotated points, min of forward / backward error)
synthetic  epe (all-pixel form on valid_f), epe_valid, pme (static background points,
           flow read bilinearly), psnr / ssim inside valid_f & warp validity. Held-out
           ``SyntheticScenes(seed=--seed, num_samples=--num)``: no download needed.
=========  ==========================================================================

Methods: ``identity``, ``sift_ransac``, ``sift_magsac``, ``orb_ransac``, ``orb_magsac``,
``dis`` (OpenCV), ``camflow`` (a trained checkpoint via :class:`camflow_jax.predictor.Predictor`;
several checkpoints ``--checkpoint=b8=DIR8,b24=DIR24`` give methods ``camflow:b8``,
``camflow:b24`` — the basis-count ablation), and the oracles ``gt_homography`` (the dataset's
homography label as a flow) and ``gyro`` (GHOF gyro field). Feature methods that fail (too
few matches) fall back to identity; the fallbacks are counted in ``meta.json``.

Outputs in ``--out``: ``results.json`` = ``{method: {category: {metric: value}}}`` with the
dataset's categories plus ``AVG`` (= mean of the category means), ``results.csv`` (long form
with sample counts), ``results.md`` (one paper-style table per metric), ``per_sample.csv`` and
``meta.json`` (dataset, sample counts, seconds per pair, fallbacks). The CLI refuses an
``--out`` that already holds these files unless ``-y/--overwrite`` is given, and an unwritable
one before the evaluation starts; the files are written to a temporary folder and moved in
when complete (docs/what_the_tools_refuse.md). Flags are spelled with hyphens
(``--no-progress``); the older underscore spellings still work.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from collections.abc import Callable, Sequence

import cv2
import numpy as np

from camflow_jax import baselines, metrics

__all__ = ["DATASETS", "METRIC_NAMES", "PUBLISHED_IDENTITY", "evaluate", "load_dataset",
           "parse_checkpoints", "check_published_identity", "score_sample", "format_table", "warp_np",
           "warp_validity_np", "main"]

DATASETS = ("ghof_cam", "ghof", "cahomo", "synthetic")
ORACLES = ("gt_homography", "gyro")

#: Metric columns per dataset, in table order.
METRIC_NAMES = {
    "ghof_cam": ("epe", "epe_valid", "pme", "psnr", "ssim"),
    "ghof": ("epe", "pme"),
    "cahomo": ("pme",),
    "synthetic": ("epe", "epe_valid", "pme", "psnr", "ssim"),
}

_METRIC_TITLES = {
    "epe": "EPE (px, published all-pixel form: mean over H*W of |(flow - gt) * mask|)",
    "epe_valid": "EPE (px, mean over valid pixels only)",
    "psnr": "PSNR (dB) of warp(img2, flow_f) vs img1 inside the valid mask",
    "ssim": "SSIM (luma, Gaussian 11/1.5) of warp(img2, flow_f) vs img1 inside the valid mask",
}
_PME_TITLES = {
    "ghof_cam": "PME (px, GHOF protocol: EPE vs GT homography field over the top half rows)",
    "ghof": "PME (px, GHOF protocol: EPE vs GT homography field over the top half rows)",
    "cahomo": "PME (px, CAHomo protocol: 6 points, min of forward/backward error)",
    "synthetic": "PME (px, static background points, flow read bilinearly)",
}
_EPE_GHOF = "EPE (px, generic optical flow vs gt_flow, all pixels incl. moving objects)"

#: Published identity (zero-flow) rows: CAHomo PME (the paper's CAHomo table), GHOF-Cam
#: EPE and GHOF PME (paper tables, row I_3x3). A full-benchmark run with ``identity`` is checked
#: against them: they validate the data files and the protocol together.
PUBLISHED_IDENTITY = {
    "cahomo": {"pme": {"RE": 7.75, "LT": 7.65, "LL": 7.21, "SF": 7.53, "LF": 3.39, "AVG": 6.70}},
    "ghof_cam": {"epe": {"RE": 3.65, "FOG": 6.69, "LL": 5.88, "RAIN": 4.90, "SNOW": 4.96, "AVG": 5.22},
                 "pme": {"RE": 4.94, "FOG": 7.24, "LL": 8.09, "RAIN": 5.48, "SNOW": 5.89, "AVG": 6.33}},
}
_HIGHER_IS_BETTER = {"psnr", "ssim"}


# ----------------------------------------------------------------------------- numpy warping
def warp_np(image: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """``out(p) = image(p + flow(p))`` (bilinear, 0 outside) — numpy/OpenCV twin of
    :func:`camflow_jax.geometry.warp` for scoring on the CPU."""
    h, w = flow.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    mx = xs + flow[..., 0].astype(np.float32)
    my = ys + flow[..., 1].astype(np.float32)
    src = np.asarray(image, np.float32)
    out = cv2.remap(src, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return out.reshape(src.shape)


def warp_validity_np(flow: np.ndarray) -> np.ndarray:
    """1 where ``p + flow(p)`` lies in ``[0, W-1) x [0, H-1)`` (the warp's support), else 0."""
    h, w = flow.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    x = xs + flow[..., 0]
    y = ys + flow[..., 1]
    return ((x >= 0) & (x < w - 1) & (y >= 0) & (y < h - 1)).astype(np.float32)


def _alignment_scores(img1, img2, flow_f, mask, form) -> dict:
    warped = np.clip(np.rint(warp_np(img2, flow_f)), 0, 255)
    return {"psnr": metrics.psnr(img1, warped, mask, form=form),
            "ssim": metrics.ssim(img1, warped, mask, form=form)}


# ----------------------------------------------------------------------------- data
def load_dataset(dataset: str, data=None, *, num: int | None = None, seed: int = 1000,
                 size: tuple[int, int] = (320, 576), depth_dir=None, intrinsics=None,
                 list_file: str | None = None):
    """Returns a random-access source with ``categories`` for one of :data:`DATASETS`."""
    if dataset == "synthetic":
        from camflow_jax.data import synthetic

        n = 100 if num is None else int(num)
        return synthetic.SyntheticScenes(seed=seed, num_samples=n, height=int(size[0]),
                                         width=int(size[1]), textures_dir=data)
    if data is None:
        raise ValueError(f"--data is required for dataset {dataset!r} (path to the benchmark)")
    from camflow_jax.data import benchmarks

    if dataset == "ghof_cam":
        kw = {} if intrinsics is None else {"intrinsics": intrinsics}
        return benchmarks.GHOFCam(data, depth_dir=depth_dir, **kw)
    if dataset == "ghof":
        kw = {} if intrinsics is None else {"intrinsics": intrinsics}
        return benchmarks.GHOFBenchmark(data, depth_dir=depth_dir, **kw)
    if dataset == "cahomo":
        return benchmarks.CAHomoTest(data, list_file=list_file, depth_dir=depth_dir, intrinsics=intrinsics)
    raise ValueError(f"unknown dataset {dataset!r}; choose from {DATASETS}")


def _categories(source) -> tuple[str, ...]:
    cats = getattr(source, "categories", None)
    if cats is None:
        from camflow_jax.data import synthetic

        cats = synthetic.CATEGORIES
    return tuple(cats)


# ----------------------------------------------------------------------------- methods
def parse_checkpoints(spec) -> list[tuple[str, str]]:
    """``"a=DIR1,b=DIR2"`` / ``"DIR"`` / list -> ``[(label, path)]`` (label defaults to the
    directory's base name)."""
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
        out.append((label.strip(), path.strip()))
    labels = [lab for lab, _ in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"checkpoint labels must be distinct, got {labels}")
    return out


class _Method:
    """A named estimator: ``run(sample, need_backward) -> (flow_f, flow_b or None, info)``."""

    def __init__(self, name: str, fn: Callable):
        self.name = name
        self._fn = fn

    def __call__(self, sample: dict, need_backward: bool):
        return self._fn(sample, need_backward)


def _classical(name: str) -> _Method:
    def run(s, need_b):
        img1, img2 = s["img1"], s["img2"]
        h, w = img1.shape[:2]
        flow_f, info = baselines.estimate_flow(name, img1, img2)
        flow_b = None
        if need_b:
            if name == "dis":
                flow_b = baselines.dis_flow(img2, img1)
            elif info.get("homography") is not None:
                flow_b = baselines.homography_flow_np(np.linalg.inv(info["homography"]), h, w)
            else:
                flow_b = np.zeros((h, w, 2), np.float32)
        return flow_f, flow_b, {"fallback": bool(info.get("fallback", False))}

    return _Method(name, run)


def _oracle(name: str, dataset: str) -> _Method:
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
            flow_f = baselines.homography_flow_np(H, h, w)
            flow_b = baselines.homography_flow_np(np.linalg.inv(H), h, w) if need_b else None
        elif "homo_field" in s:
            flow_f, flow_b = s["homo_field"], None
        else:
            raise ValueError(f"method 'gt_homography' needs a homography label, which {dataset!r} "
                             "samples do not have")
        return np.asarray(flow_f, np.float32), flow_b, {}

    return _Method(name, run)


def _camflow(name: str, path: str, channel_order: str) -> _Method:
    from camflow_jax.predictor import Predictor

    pred = Predictor.load(path, channel_order=channel_order)
    print(f"{name}: {getattr(pred, 'description', path)}", file=sys.stderr)

    def run(s, need_b):
        out = pred(s["img1"], s["img2"], depth1=s.get("depth1"), depth2=s.get("depth2"),
                   intrinsics=s.get("K"))
        return out["flow_f"], out["flow_b"], {}

    m = _Method(name, run)
    m.predictor = pred
    return m


def _build_methods(names: Sequence[str], dataset: str, checkpoints, channel_order: str) -> list[_Method]:
    ckpts = parse_checkpoints(checkpoints)
    out: list[_Method] = []
    for name in names:
        if name in baselines.METHODS:
            out.append(_classical(name))
        elif name in ORACLES:
            out.append(_oracle(name, dataset))
        elif name == "camflow" or name.startswith("camflow:"):
            if not ckpts:
                if name != "camflow":
                    raise ValueError(f"method {name!r} needs --checkpoint={name.split(':', 1)[1]}=DIR")
                out.append(_camflow("camflow", None, channel_order))  # the shipped model
                continue
            wanted = ckpts if name == "camflow" else [c for c in ckpts if c[0] == name.split(":", 1)[1]]
            if not wanted:
                raise ValueError(f"no checkpoint labelled {name.split(':', 1)[1]!r} in {[c[0] for c in ckpts]}")
            for label, path in wanted:
                mname = "camflow" if (name == "camflow" and len(ckpts) == 1) else f"camflow:{label}"
                out.append(_camflow(mname, path, channel_order))
        else:
            raise ValueError(f"unknown method {name!r}; choose from "
                             f"{baselines.METHODS + ORACLES + ('camflow',)}")
    names_out = [m.name for m in out]
    if len(set(names_out)) != len(names_out):
        raise ValueError(f"methods listed twice: {names_out}")
    return out


# ----------------------------------------------------------------------------- scoring
def score_sample(dataset: str, sample: dict, flow_f: np.ndarray, flow_b=None,
                 iqa_form: str = "masked") -> dict:
    """Per-sample metrics of one forward (and, for CAHomo, backward) flow."""
    flow_f = np.asarray(flow_f, np.float32)
    h, w = sample["img1"].shape[:2]
    if flow_f.shape != (h, w, 2):
        raise ValueError(f"flow_f has shape {flow_f.shape}, expected {(h, w, 2)} (input resolution)")
    if not np.all(np.isfinite(flow_f)):
        raise ValueError("estimated flow_f contains non-finite values")
    if dataset == "cahomo":
        return {"pme": metrics.cahomo_pme(flow_f, sample["points"], flow_b)}
    if dataset == "ghof":
        out = {"epe": metrics.epe_all_pixels(flow_f, sample["gt_flow"])}
        if "homo_field" in sample:
            out["pme"] = metrics.ghof_pme(flow_f, sample["homo_field"])
        return out
    if dataset == "ghof_cam":
        mask = sample["mask"]
        iqa_mask = (mask > 0.5) * warp_validity_np(flow_f) * warp_validity_np(sample["homo_field"])
        out = {"epe": metrics.epe_all_pixels(flow_f, sample["gt_flow"], mask),
               "epe_valid": metrics.epe_valid(flow_f, sample["gt_flow"], mask),
               "pme": metrics.ghof_pme(flow_f, sample["homo_field"])}
        out.update(_alignment_scores(sample["img1"], sample["img2"], flow_f, iqa_mask, iqa_form))
        return out
    if dataset == "synthetic":
        valid = np.asarray(sample["valid_f"], np.float32)
        out = {"epe": metrics.epe_all_pixels(flow_f, sample["flow_f"], valid),
               "epe_valid": metrics.epe_valid(flow_f, sample["flow_f"], valid),
               "pme": metrics.point_error(flow_f, sample["points1"], sample["points2"])}
        iqa_mask = (valid > 0.5) * warp_validity_np(flow_f)
        out.update(_alignment_scores(sample["img1"], sample["img2"], flow_f, iqa_mask, iqa_form))
        return out
    raise ValueError(f"unknown dataset {dataset!r}")


# ----------------------------------------------------------------------------- tables
def _fmt(v: float, metric: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if math.isinf(v):
        return "inf"
    return f"{v:.4f}" if metric == "ssim" else f"{v:.2f}"


def format_table(results: dict, metric: str, categories: Sequence[str], markdown: bool = False) -> str:
    """Paper-style table of one metric: rows = methods, columns = AVG then categories."""
    cols = [metrics.AVG] + [c for c in categories]
    rows = []
    for method, table in results.items():
        if not any(metric in table.get(c, {}) for c in cols):
            continue
        rows.append([method] + [_fmt(table.get(c, {}).get(metric, float("nan")), metric) for c in cols])
    if not rows:
        return ""
    header = ["method"] + cols
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * len(cols)) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt_row = lambda r: "  ".join(str(x).ljust(widths[0]) if i == 0 else str(x).rjust(widths[i])  # noqa: E731
                                  for i, x in enumerate(r))
    return "\n".join([fmt_row(header), "-" * (sum(widths) + 2 * len(widths) - 2)] + [fmt_row(r) for r in rows])


def check_published_identity(dataset: str, table: dict) -> dict:
    """Compares an identity-method table with :data:`PUBLISHED_IDENTITY` (2-decimal rounding).

    Returns ``{metric: {"match": bool, "max_abs_diff": float}}`` (empty if nothing to compare).
    """
    out = {}
    for metric, ref in PUBLISHED_IDENTITY.get(dataset, {}).items():
        diffs = [abs(table.get(c, {}).get(metric, float("nan")) - v) for c, v in ref.items()]
        worst = max(diffs)
        out[metric] = {"match": bool(worst <= 0.005 + 1e-9), "max_abs_diff": worst}
    return out


def _title(dataset: str, metric: str) -> str:
    if metric == "pme":
        return _PME_TITLES[dataset]
    if dataset == "ghof" and metric == "epe":
        return _EPE_GHOF
    arrow = "higher is better" if metric in _HIGHER_IS_BETTER else "lower is better"
    return f"{_METRIC_TITLES[metric]} ({arrow})"


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, (np.floating, np.integer)):
        return _json_safe(x.item())
    return x


#: Files written into ``--out`` (an existing one is replaced only with -y; others are kept).
OUTPUT_FILES = ("results.json", "meta.json", "results.csv", "per_sample.csv", "results.md")


def _write_outputs(out_dir, *args):
    """Writes :data:`OUTPUT_FILES` into a temporary folder next to ``out_dir`` and moves them
    in when all are complete (an interrupted run leaves no half-written result)."""
    from camflow_jax import cli_utils

    with cli_utils.atomic_dir(out_dir, OUTPUT_FILES) as tmp:
        _write_files(tmp, *args)


def _write_files(out_dir, dataset, results, counts, categories, metric_names, per_sample, meta):
    from camflow_jax.cli_utils import strict_json

    with open(os.path.join(out_dir, "results.json"), "w") as fh:
        fh.write(strict_json(_json_safe(results), indent=2))
    with open(os.path.join(out_dir, "meta.json"), "w") as fh:
        fh.write(strict_json(_json_safe(meta), indent=2))
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["method", "category", "metric", "value", "num_samples"])
        for method, table in results.items():
            for cat, vals in table.items():
                for k, v in vals.items():
                    wr.writerow([method, cat, k, repr(float(v)), counts[method][cat][k]])
    with open(os.path.join(out_dir, "per_sample.csv"), "w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["index", "key", "category", "method"] + list(metric_names) + ["seconds", "fallback"])
        for row in per_sample:
            wr.writerow([row["index"], row["key"], row["category"], row["method"]]
                        + [repr(row["values"].get(k, float("nan"))) for k in metric_names]
                        + [f"{row['seconds']:.4f}", int(row["fallback"])])
    with open(os.path.join(out_dir, "results.md"), "w") as fh:
        fh.write(f"# {dataset}: {meta['num_samples']} samples\n\n")
        for m in metric_names:
            t = format_table(results, m, categories, markdown=True)
            if t:
                fh.write(f"**{_title(dataset, m)}**\n\n{t}\n\n")
        fh.write("Seconds per pair (median): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in meta["seconds_per_pair"].items()) + "\n")


# ----------------------------------------------------------------------------- main entry
def evaluate(dataset: str, methods: Sequence[str] | str, *, data=None, checkpoints=None,
             num: int | None = None, seed: int = 1000, size: tuple[int, int] = (320, 576),
             depth_dir=None, intrinsics=None, list_file: str | None = None, out_dir=None,
             iqa_form: str = "masked", channel_order: str = "rgb", progress: bool = True,
             source=None, verbose: bool = True) -> dict:
    """Runs ``methods`` on a benchmark and aggregates per-category tables.

    Args:
      dataset: one of :data:`DATASETS`.
      methods: names (list or comma-separated string); see the module doc.
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
      source: an already-built random-access source (overrides dataset/data loading).
    Returns:
      ``{"results": {method: {category: {metric: value}}}, "counts": same shape with sample
      counts, "meta": {...}}``; categories include ``AVG`` = mean of category means.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {DATASETS}")
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    if not methods:
        raise ValueError("no methods given")
    if iqa_form not in ("masked", "zeroed"):
        raise ValueError(f"iqa_form must be 'masked' or 'zeroed', got {iqa_form!r}")
    if out_dir is not None:  # an unwritable out_dir is reported before the evaluation runs
        from camflow_jax.cli_utils import check_writable

        check_writable(os.path.dirname(os.path.abspath(os.fspath(out_dir))))
        if os.path.isdir(out_dir):
            check_writable(os.fspath(out_dir))
    if source is None:
        source = load_dataset(dataset, data, num=num, seed=seed, size=size, depth_dir=depth_dir,
                              intrinsics=intrinsics, list_file=list_file)
    categories = _categories(source)
    runners = _build_methods(list(methods), dataset, checkpoints, channel_order)
    n = len(source) if (num is None or dataset == "synthetic") else min(int(num), len(source))
    need_b = dataset == "cahomo"
    metric_names = METRIC_NAMES[dataset]

    records = {m.name: [] for m in runners}
    seconds = {m.name: [] for m in runners}
    fallbacks = {m.name: 0 for m in runners}
    per_sample = []
    iterator = range(n)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc=f"evaluate {dataset}", unit="pair", file=sys.stderr)
    for i in iterator:
        s = source[i]
        cat = str(s["category"])
        if cat not in categories:
            raise ValueError(f"sample {i}: category {cat!r} not in {categories}")
        for m in runners:
            t0 = time.perf_counter()
            flow_f, flow_b, info = m(s, need_b)
            dt = time.perf_counter() - t0
            try:
                vals = score_sample(dataset, s, flow_f, flow_b, iqa_form)
            except ValueError as e:
                raise ValueError(f"method {m.name}, sample {i} ({s.get('key', i)}): {e}") from None
            records[m.name].append((cat, vals))
            seconds[m.name].append(dt)
            fb = bool(info.get("fallback", False))
            fallbacks[m.name] += int(fb)
            per_sample.append({"index": i, "key": s.get("key", f"{i:05d}"), "category": cat,
                               "method": m.name, "values": vals, "seconds": dt, "fallback": fb})

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
        "checkpoints": dict(parse_checkpoints(checkpoints)), "seconds_per_pair": sec,
        "fallbacks_to_identity": fallbacks, "iqa_form": iqa_form,
    }
    if dataset == "synthetic":
        meta.update(seed=seed, size=list(size))
    if hasattr(source, "skipped") and source.skipped:
        meta["skipped_pairs_unknown_video"] = len(source.skipped)
    if "identity" in results and num is None and dataset in PUBLISHED_IDENTITY:
        meta["published_identity_check"] = check_published_identity(dataset, results["identity"])
    if verbose:
        print(f"\n{dataset}: {n} samples ({', '.join(f'{c} {per_cat[c]}' for c in categories)})")
        for m in metric_names:
            t = format_table(results, m, present)
            if t:
                print(f"\n{_title(dataset, m)}\n{t}")
        print("\nseconds per pair (median): " + ", ".join(f"{k} {v:.3f}" for k, v in sec.items()))
        for metric, chk in meta.get("published_identity_check", {}).items():
            state = "matches" if chk["match"] else f"DIFFERS (max |diff| {chk['max_abs_diff']:.3f})"
            print(f"sanity: identity {metric} {state} the published zero-flow row")
        if any(fallbacks.values()):
            print("fallbacks to identity (feature matching failed): "
                  + ", ".join(f"{k} {v}" for k, v in fallbacks.items() if v))
    if out_dir is not None:
        _write_outputs(out_dir, dataset, results, counts, present, metric_names, per_sample, meta)
        if verbose:
            print(f"wrote {os.path.join(out_dir, 'results.json')} (+ .csv, .md, per_sample.csv, meta.json)")
    return {"results": results, "counts": counts, "meta": meta}


def _parse_size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be HxW, e.g. 320x576; got {text!r}") from None
    if h <= 0 or w <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return h, w


def _parse_intrinsics(text: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 4 or not all(math.isfinite(v) for v in vals):
        raise argparse.ArgumentTypeError(f"intrinsics must be fx,fy,cx,cy; got {text!r}")
    return vals


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m camflow_jax.evaluate",
                                description="Evaluate camera-motion estimators on a benchmark.")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--data", default=None, help="benchmark path (synthetic: optional texture folder)")
    p.add_argument("--methods", default="identity,sift_magsac",
                   help="comma-separated: " + ",".join(baselines.METHODS + ORACLES + ("camflow",)))
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint dir for 'camflow'; several as label=DIR,label2=DIR2")
    p.add_argument("-o", "--out", default=None, help="output folder for results.json/.csv/.md")
    p.add_argument("-y", "--overwrite", action="store_true",
                   help="replace an existing result in the output folder")
    p.add_argument("--num", type=int, default=None,
                   help="synthetic: number of held-out samples (default 100); others: first N only")
    p.add_argument("--seed", type=int, default=1000, help="synthetic held-out seed")
    p.add_argument("--size", type=_parse_size, default=(320, 576), help="synthetic image size HxW")
    # Flags are spelled with hyphens like the other tools; the underscore forms still work.
    p.add_argument("--depth-dir", "--depth_dir", dest="depth_dir", default=None,
                   help="per-sample depth files (see data/benchmarks.py)")
    p.add_argument("--intrinsics", type=_parse_intrinsics, default=None, help="fx,fy,cx,cy override")
    p.add_argument("--list-file", "--list_file", dest="list_file", default=None,
                   help="CAHomo pair list (default test.txt)")
    p.add_argument("--iqa-form", "--iqa_form", dest="iqa_form", default="masked",
                   choices=("masked", "zeroed"))
    p.add_argument("--channel-order", "--channel_order", dest="channel_order", default="rgb",
                   choices=("rgb", "bgr"), help="colour order of the images as fed to the network")
    p.add_argument("--no-progress", "--no_progress", dest="no_progress", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from camflow_jax import cli_utils

    try:
        if args.out is not None:  # refused or unwritable: said before the evaluation runs
            ckpts = [path for _, path in parse_checkpoints(args.checkpoint)]
            cli_utils.check_output_dir(args.out, OUTPUT_FILES, args.overwrite,
                                       inputs=[args.data, args.depth_dir, args.list_file] + ckpts)
        evaluate(args.dataset, args.methods, data=args.data, checkpoints=args.checkpoint,
                 num=args.num, seed=args.seed, size=args.size, depth_dir=args.depth_dir,
                 intrinsics=args.intrinsics, list_file=args.list_file, out_dir=args.out,
                 iqa_form=args.iqa_form, channel_order=args.channel_order,
                 progress=not args.no_progress)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return cli_utils.EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
