"""A trained model against the shipped one (or ``--reference``), with the commands the model
card's tables come from, on this machine: what decides whether a model trained on an
accelerator ships (docs/model_card.md, "Shipping a model").

    python -m tools.bench model_compare --candidate DIR --out OUT [--reference DIR] [--num 100]
        [--parts synthetic,no_depth,homography,aloe]

Each part runs its documented command once per model, as a subprocess, into ``OUT/<model>/``
(``reference``, ``candidate``):

- ``synthetic``: ``python -m camflow_jax.evaluate --dataset=synthetic --num=N --seed=1000
  --size=320x576 --methods=camflow`` (the network alone and refined, with depth and K);
- ``no_depth``: ``python -m tools.bench.studies.refinement.synthetic_no_depth`` (the same pairs
  without depth);
- ``homography``: ``python -m tools.bench.studies.refinement.homography_pairs`` (N pairs, at
  most 30: pure homographies);
- ``aloe``: ``python tools/eval_real.py --parts stereo`` (Middlebury Aloe, with and without
  depth; needs Debian's opencv-doc).

``OUT/compare.json`` holds every number, ``OUT/compare.md`` the table and the verdict of the
shipping rule (:func:`verdict`): the candidate ships if it is better as a network alone on
the synthetic benchmark with depth and no refined number is worse than the reference's by more
than :data:`SLACK_PX`. Issue 62's targets are checked beside it (:data:`TARGETS`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PARTS = ("synthetic", "no_depth", "homography", "aloe")
#: The most pure-homography pairs the model card's row used.
HOMOGRAPHY_PAIRS = 30
#: A refined number counts as worse when it exceeds the reference's by more than this (px): the
#: rounding of the figures the docs report (0.332 against 0.339 on Aloe was worse).
SLACK_PX = 0.005
#: Issue 62's targets: (row, column, bound) with the bound in px; ``None``: no worse than the reference.
TARGETS = (("synthetic, with depth", "alone", 4.0), ("synthetic, without depth", "refined", 2.0),
           ("Aloe, without depth", "refined", 6.0), ("synthetic, with depth", "refined", None))


def commands(part: str, checkpoint: str | None, out: Path, num: int) -> list[list[str]]:
    """The command(s) of ``part`` for the model at ``checkpoint`` (None: the shipped one), writing under ``out``."""
    py = sys.executable
    ck = ["--checkpoint", str(checkpoint)] if checkpoint else []
    if part == "synthetic":
        return [[py, "-m", "camflow_jax.evaluate", "--dataset=synthetic", f"--num={num}", "--seed=1000",
                 "--size=320x576", "--methods=camflow", "--no-progress", "-y", "-o", str(out / "synthetic"), *ck]]
    if part == "no_depth":
        return [[py, "-m", "tools.bench.studies.refinement.synthetic_no_depth", str(out / "no_depth"),
                 "--num", str(num), *ck]]
    if part == "homography":
        return [[py, "-m", "tools.bench.studies.refinement.homography_pairs", str(min(num, HOMOGRAPHY_PAIRS)),
                 str(out / "homography.json"), *ck]]
    if part == "aloe":
        return [[py, str(ROOT / "tools" / "eval_real.py"), "--parts", "stereo", "--methods", "camflow,camflow_net",
                 "--fx-scales", "", "--out", str(out / "aloe"), *ck]]
    raise ValueError(f"unknown part {part!r}; the parts are {', '.join(PARTS)}")


def read(part: str, out: Path) -> dict[str, dict[str, float]]:
    """``{row: {"alone": px, "refined": px}}`` of ``part``'s results under ``out``."""
    if part in ("synthetic", "no_depth"):
        r = json.loads((out / part / "results.json").read_text())
        row = "synthetic, with depth" if part == "synthetic" else "synthetic, without depth"
        return {row: {"alone": r["camflow_net"]["AVG"]["epe"], "refined": r["camflow"]["AVG"]["epe"],
                      **{f"refined {c}": v["epe"] for c, v in r["camflow"].items() if c != "AVG"},
                      **{f"alone {c}": v["epe"] for c, v in r["camflow_net"].items() if c != "AVG"}}}
    if part == "homography":
        r = json.loads((out / "homography.json").read_text())
        return {f"pure homographies ({r['n']} pairs)": {"alone": r["mean"]["camflow_net"],
                                                         "refined": r["mean"]["camflow"]}}
    if part == "aloe":
        rows = {x["method"]: x["epe"] for x in json.loads((out / "aloe" / "results.json").read_text())["stereo"]["rows"]}
        return {f"Aloe, {d}": {"alone": rows[f"camflow_net ({k})"], "refined": rows[f"camflow ({k})"]}
                for d, k in (("with depth", "depth"), ("without depth", "no depth"))}
    raise ValueError(f"unknown part {part!r}")


def verdict(reference: dict, candidate: dict, slack: float = SLACK_PX) -> dict:
    """The shipping rule on two tables of :func:`read` rows: ``better_alone`` (the network alone
    on the synthetic benchmark with depth, strictly lower), ``worse_refined`` (the refined rows
    where the candidate exceeds the reference by more than ``slack``), ``ships`` (better alone
    and no refined row worse), and each of :data:`TARGETS` met or missed (absent rows: None)."""
    key = "synthetic, with depth"
    better = key in reference and key in candidate and candidate[key]["alone"] < reference[key]["alone"]
    worse = [row for row in candidate if row in reference
             and candidate[row]["refined"] > reference[row]["refined"] + slack]
    targets = []
    for row, col, bound in TARGETS:
        if row not in candidate or (bound is None and row not in reference):
            met = None
        else:
            limit = reference[row][col] + slack if bound is None else bound
            met = bool(candidate[row][col] <= limit)
        targets.append({"row": row, "column": col, "bound": bound, "met": met,
                        "candidate": candidate.get(row, {}).get(col)})
    return {"better_alone": bool(better), "worse_refined": worse, "ships": bool(better and not worse),
            "slack_px": slack, "targets": targets}


def markdown(reference: dict, candidate: dict, v: dict, names: tuple[str, str]) -> str:
    lines = [f"| | {names[0]}: alone | refined | {names[1]}: alone | refined |", "|---|---:|---:|---:|---:|"]
    for row in reference | candidate:
        a, b = reference.get(row, {}), candidate.get(row, {})
        cell = lambda d, k: "" if d.get(k) is None else f"{d[k]:.3f}"  # noqa: E731
        lines.append(f"| {row} | {cell(a, 'alone')} | {cell(a, 'refined')} | {cell(b, 'alone')} | {cell(b, 'refined')} |")
    lines += ["", f"Better as a network alone (synthetic, with depth): **{'yes' if v['better_alone'] else 'no'}**; "
              f"refined rows worse by more than {v['slack_px']} px: {', '.join(v['worse_refined']) or 'none'}; "
              f"ships: **{'yes' if v['ships'] else 'no'}**.", "", "| target | candidate | met |", "|---|---:|---|"]
    for t in v["targets"]:
        bound = "no worse than the reference" if t["bound"] is None else f"<= {t['bound']} px"
        got = "" if t["candidate"] is None else f"{t['candidate']:.3f}"
        lines.append(f"| {t['row']}, {t['column']}: {bound} | {got} | "
                     f"{'not measured' if t['met'] is None else 'met' if t['met'] else 'missed'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench model_compare", description=__doc__.splitlines()[0])
    p.add_argument("--candidate", required=True, help="the trained model (a training workdir or an inference checkpoint)")
    p.add_argument("--reference", default=None, help="the model to beat (default: the shipped one)")
    p.add_argument("--out", required=True, help="folder for each model's results, compare.json and compare.md")
    p.add_argument("--parts", default=",".join(PARTS), help=f"which measurements, of {', '.join(PARTS)}")
    p.add_argument("--num", type=int, default=100, help="synthetic pairs (the first N of the benchmark's 100; "
                   f"pure homographies: at most {HOMOGRAPHY_PAIRS})")
    args = p.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    bad = [x for x in parts if x not in PARTS]
    if bad or not parts:
        p.error(f"--parts: unknown {', '.join(bad) or 'empty list'}; the parts are {', '.join(PARTS)}")
    if not 1 <= args.num <= 100:
        p.error(f"--num {args.num}: the synthetic benchmark has 100 pairs")
    for flag, path in (("--candidate", args.candidate), ("--reference", args.reference)):
        if path is not None and not Path(path).exists():
            p.error(f"{flag} {path}: no such folder")
    out = Path(args.out)
    models = {"reference": args.reference, "candidate": args.candidate}
    tables: dict[str, dict] = {m: {} for m in models}
    log = []
    for part in parts:
        for name, ck in models.items():
            for cmd in commands(part, ck, out / name, args.num):
                (out / name).mkdir(parents=True, exist_ok=True)
                t0 = time.monotonic()
                proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                seconds = round(time.monotonic() - t0, 1)
                log.append({"part": part, "model": name, "command": cmd, "rc": proc.returncode, "seconds": seconds})
                (out / name / f"{part}.log").write_text(proc.stdout)
                print(f"{part} / {name}: rc {proc.returncode} in {seconds} s", flush=True)
                if proc.returncode != 0:
                    print(f"error: {part} failed for the {name} model; its output: {out / name / f'{part}.log'}",
                          file=sys.stderr)
                    return 1
            tables[name].update(read(part, out / name))
    v = verdict(tables["reference"], tables["candidate"])
    names = (f"reference ({args.reference or 'shipped'})", f"candidate ({args.candidate})")
    (out / "compare.json").write_text(json.dumps({"models": models, "num": args.num, "tables": tables,
                                                  "verdict": v, "runs": log}, indent=1))
    md = markdown(tables["reference"], tables["candidate"], v, names)
    (out / "compare.md").write_text(md)
    print(md, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
