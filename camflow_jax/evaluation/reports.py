"""Result tables and files: paper-style text/markdown tables, CSV, JSON (docs/evaluation.md).

* :func:`format_table`: one metric, rows = methods, columns = AVG then the categories (text or
  markdown); the trainer prints its held-out tables with it too.
* :func:`benchmark_summary` / :func:`write_benchmark`: what ``python -m camflow_jax.evaluate``
  prints and the files it writes (:data:`BENCHMARK_FILES`).
* :func:`real_markdown`: the tables of the real-image experiments (:mod:`tools.bench.real`).
* :func:`write_json`: every JSON file goes through :func:`camflow_jax.io.atomic.strict_json`
  (NaN -> ``null``, +-inf -> ``"inf"``/``"-inf"``).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence

from camflow_jax.evaluation import metrics, protocols
from camflow_jax.io import atomic

__all__ = ["BENCHMARK_FILES", "format_table", "benchmark_summary", "benchmark_markdown",
           "write_benchmark", "write_json", "real_markdown"]

#: Files a benchmark run writes into its output folder (an existing one is replaced only with
#: -y; other files there are kept).
BENCHMARK_FILES = ("results.json", "meta.json", "results.csv", "per_sample.csv", "results.md")


# ----------------------------------------------------------------------------- JSON
def write_json(path, obj, indent: int = 2) -> None:
    """Writes ``obj`` as strict JSON (``atomic.strict_json(nonfinite="mark")``)."""
    text = atomic.strict_json(obj, nonfinite="mark", indent=indent)
    with open(path, "w") as fh:
        fh.write(text)


# ----------------------------------------------------------------------------- benchmark tables
def _fmt(v, metric: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if math.isinf(v):
        return "inf"
    return f"{v:.4f}" if metric == "ssim" else f"{v:.2f}"


def format_table(results: dict, metric: str, categories: Sequence[str], markdown: bool = False) -> str:
    """Paper-style table of one metric: rows = methods, columns = AVG then categories
    (``results``: ``{method: {category: {metric: value}}}``); "" when no method has it."""
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


def _seconds_line(seconds: dict) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in seconds.items())


def benchmark_summary(run: dict) -> str:
    """The text ``evaluate`` prints: sample counts, one table per metric, timings, the
    published-identity check and fallbacks (``run``: what :func:`.benchmark.evaluate` returns)."""
    meta, results = run["meta"], run["results"]
    dataset, present = meta["dataset"], meta["categories"]
    per_cat = meta["samples_per_category"]
    lines = [f"\n{dataset}: {meta['num_samples']} samples ("
             + ", ".join(f"{c} {n}" for c, n in per_cat.items()) + ")"]
    for m in meta["metrics"]:
        t = format_table(results, m, present)
        if t:
            lines.append(f"\n{protocols.metric_title(dataset, m)}\n{t}")
    lines.append("\nseconds per pair (median): " + _seconds_line(meta["seconds_per_pair"]))
    for metric, chk in meta.get("published_identity_check", {}).items():
        state = "matches" if chk["match"] else f"DIFFERS (max |diff| {chk['max_abs_diff']:.3f})"
        lines.append(f"sanity: identity {metric} {state} the published zero-flow row")
    fallbacks = meta["fallbacks_to_identity"]
    if any(fallbacks.values()):
        lines.append("fallbacks to identity (feature matching failed): "
                     + ", ".join(f"{k} {v}" for k, v in fallbacks.items() if v))
    for note in meta.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def benchmark_markdown(run: dict) -> str:
    """``results.md``: one markdown table per metric and the timings."""
    meta, results = run["meta"], run["results"]
    dataset = meta["dataset"]
    out = [f"# {dataset}: {meta['num_samples']} samples\n\n"]
    for m in meta["metrics"]:
        t = format_table(results, m, meta["categories"], markdown=True)
        if t:
            out.append(f"**{protocols.metric_title(dataset, m)}**\n\n{t}\n\n")
    out.append("Seconds per pair (median): " + _seconds_line(meta["seconds_per_pair"]) + "\n")
    return "".join(out)


def write_benchmark(out_dir, run: dict) -> None:
    """Writes :data:`BENCHMARK_FILES` into a temporary folder next to ``out_dir`` and moves
    them in when all are complete (an interrupted run leaves no half-written result)."""
    with atomic.atomic_dir(out_dir, BENCHMARK_FILES) as tmp:
        _write_benchmark_files(tmp, run)


def _write_benchmark_files(out_dir, run: dict) -> None:
    results, counts, meta = run["results"], run["counts"], run["meta"]
    metric_names = meta["metrics"]
    write_json(os.path.join(out_dir, "results.json"), results)
    write_json(os.path.join(out_dir, "meta.json"), meta)
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
        for row in run["per_sample"]:
            wr.writerow([row["index"], row["key"], row["category"], row["method"]]
                        + [repr(row["values"].get(k, float("nan"))) for k in metric_names]
                        + [f"{row['seconds']:.4f}", int(row["fallback"])])
    with open(os.path.join(out_dir, "results.md"), "w") as fh:
        fh.write(benchmark_markdown(run))


# ----------------------------------------------------------------------------- real images
def _f(v, fmt=".3f"):
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def real_markdown(results: dict) -> str:
    """Markdown tables of :func:`.real.stereo_experiment` / :func:`.real.video_experiment`
    results (``{"stereo": ..., "video": ...}``, either may be absent)."""
    out = []
    st = results.get("stereo")
    if st:
        i = st["info"]
        out += [f"### Stereo: Aloe (Middlebury 2006), {i['working_size'][0]}x{i['working_size'][1]}",
                "",
                f"Valid GT pixels {100 * i['valid_fraction']:.1f}% (full size "
                f"{100 * i['valid_fraction_full']:.1f}%), mean GT flow {i['gt_magnitude_mean']:.2f} px "
                f"(range {i['gt_magnitude_range'][0]:.1f}..{i['gt_magnitude_range'][1]:.1f}); "
                f"K = ({', '.join(f'{v:.1f}' for v in i['intrinsics'])}); CamFlow: {i['camflow']}.", "",
                "| method | EPE px | photometric error (grey levels) | note |", "|---|---|---|---|"]
        for r in st["rows"]:
            out.append(f"| {r['method']} | {_f(r['epe'])} | {_f(r['photometric'], '.2f')} | {r['note']} |")
        out += ["", "Disparity check (full size, warp(right, (-(s d + o), 0)) vs left, valid pixels):", "",
                "| candidate | scale s | offset o | mean abs error | median |", "|---|---|---|---|---|"]
        for r in st["disparity_scan"]["rows"]:
            out.append(f"| {r['kind']} ({r['sign']}) | {r['scale']:.3f} | {r['offset']:+.2f} | "
                       f"{r['mae']:.2f} | {r['median_ae']:.2f} |")
        out.append("")
    vi = results.get("video")
    if vi:
        i = vi["info"]
        out += [f"### Video: vtest.avi, first {i['frames']} frames ({i['size'][0]}x{i['size'][1]}, "
                f"{i['fps']:g} fps); shake seed {i['shake']['seed']}, cropped to "
                f"{i['shake']['shaken_size'][0]}x{i['shake']['shaken_size'][1]}", "",
                "| video | estimator | pair-flow EPE px (mean/max) | mean flow px | residual px mean (max) "
                "| HF shake px in -> out (reduction) | zoom | stability in -> out | cropping | distortion "
                "| ms/pair |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in vi["rows"]:
            if "flow_epe_px" not in r:
                out.append(f"| {r['video']} | {r['estimator']} | {r['note']} |  |  |  |  |  |  |  |  |")
                continue
            red = f"x{r['hf_reduction']:.1f}" if r["hf_in_px"] > 1e-6 else "static input"
            out.append(
                f"| {r['video']} | {r['estimator']} | {_f(r['flow_epe_px'])} / {_f(r['flow_epe_max_px'], '.2f')} "
                f"| {_f(r['flow_mag_px'])} | {_f(r['residual_mean_px'])} ({_f(r['residual_max_px'], '.2f')}) "
                f"| {_f(r['hf_in_px'])} -> {_f(r['hf_out_px'])} ({red}) "
                f"| {_f(r['zoom'])} | {_f(r.get('stability_in'))} -> {_f(r.get('stability'))} "
                f"| {_f(r.get('cropping'))} | {_f(r.get('distortion'))} | {_f(r['ms_per_pair'], '.1f')} |")
        out.append("")
    return "\n".join(out)
