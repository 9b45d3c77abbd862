"""Benchmark: inference latency/throughput, train-step throughput and memory, XLA FLOP counts.

Measurements (``--mode``; ``all`` runs the four in this order):
  infer   jitted forward (both directions + masks) at ``--batch``: latency per call and per
          pair, pairs/s. Random weights and random static bases (timing does not depend on
          their values); the network has ``--groups`` (default 12,12: CamFlow, 24 bases).
  train   the real train step, built exactly like ``camflow_jax.training.loop.train_and_evaluate``
          does it (``model_config_from`` -> ``build_model`` -> ``init_variables(identity_motion=
          True)`` -> ``make_optimizer`` -> ``make_steps`` -> ``jax.jit(..., donate_argnums=(0,))``
          over the 1-D data mesh) from ``--config`` (default ``configs/synthetic.py``: CamFlow+
          36 bases, per-sample depth bases built inside the step, synthetic data) with
          model.height/width and batch_size overridden. Timed on one fixed device-resident
          batch (no input pipeline).
  train_data  the same compiled step fed from the real grain pipeline (``datasets.training_source``
          + ``train_dataset`` + ``jax.make_array_from_process_local_data`` per batch), stepping
          without blocking as the trainer's loop does, so the input pipeline overlaps the
          device work; compare its pairs/s with ``train`` to see whether the pipeline starves
          the device (``pipeline_slowdown`` = train pairs/s / train_data pairs/s). The read
          options are the config's (``data.read_threads``, ``data.prefetch``) unless
          ``--prefetch-threads``/``--prefetch-buffer`` replace them.
          With ``--render device`` (or a config with ``data.render = "device"``) the step is
          fed as the trainer then feeds it: the batches rendered on the device(s)
          (``training/feed.py``), and ``pipeline_slowdown`` is that feed's.
  all     infer at batch 1, infer at ``--batch``, train, train_data.
  refine  the shipped model's ``Predictor`` (``from_pretrained()``) on a held-out synthetic pair
          (seed 1000, sample 0, with depth and K) at ``--height``x``--width``:
          ``pred(..., refine=False)`` and ``pred(...)`` interleaved, ``--repeats`` each after
          ``--warmup``; the refinement's added time as a fraction of the network's; first-call
          seconds and jit cache sizes on that pair and on a second one (sample 1) of the same
          size (one compilation per size).
  refine_batch  ``Predictor.predict_batch`` at ``--batch`` pairs per call (the shipped model,
          held-out synthetic pairs with depth and K at ``--height``x``--width``), the network
          alone and refined, interleaved with the single-pair call on the first pair: pairs/s of
          each, the batch's speed-up over single refined calls, and the refinement's added time
          as a fraction of the network's. ``--batched-refinement on|off`` forces the batch's
          refinement into one vmapped program or a pair at a time (default: the Predictor's).
  refine_trips  the slowest-pair effect of the batched refinement: ``predict_batch`` as one
          vmapped program on ``--batch`` of those pairs, the iterations each direction ran per
          level (mean, median, the batch's largest), then each level capped at the median
          direction's count, timed interleaved with the default, with its EPE and final cost.
  flows_only  the network forward with the mask net (confidence maps) and without it (the
          flows-only path the Predictor runs by default), both compiled and timed interleaved
          at ``--batch`` with mode infer's weights and inputs: the time the mask net costs.
  release  against the authors' released PyTorch model (``--release-code``: a clone of
          github.com/lhaippp/CamFlow-Code; needs ``pip install torch``, imported only in this mode):
          their CamFlow network built from their experiments/params.json (24 bases, random
          weights, random bases), its forward in eval mode under torch.no_grad() at batch 1, timed
          interleaved round by round with mode flows_only's two compiled forwards of ours (full:
          flows + confidence, both directions; flows only) at the same structure (``--arch
          release``, ``--groups 12,12``): medians, per-round ratios ours / release, CPU seconds,
          torch's thread count (its default). ``--release-train``: instead, their train step in
          torch (forward, their net_stg 4 loss, backward, Adam) against our real train step (mode
          train's) at ``--train-batch`` (default 2); skipped below 12 GiB of available memory. The
          JSON says what each side computes. Where timm, torchvision, kornia, einops, imageio or
          mlflow are not installed (and for model/DLT.py, which the release lacks), stand-ins are
          put in sys.modules for the names the release imports but the timed paths never call.
          Exits 2 with a one-line message without torch or without the release at the path.
  roofline  no timing: XLA's FLOP and byte counts (cost analysis of the CPU compilation) of the
          Predictor's jitted calls for one ``--height`` x ``--width`` pair (flows-only forward,
          forward with confidence, flows-only forward + refinement; random weights of the
          ``--arch`` structure with ``--groups`` bases) and of the real train step at
          ``--train-size`` with ``--train-batch`` (default 2), each in float32 and bfloat16,
          turned into roofline lower bounds, max(FLOPs / peak, bytes / HBM bandwidth), for one
          H100 SXM and one TPU v5e chip (``tools.bench.accel``: the spec numbers and their
          sources). Estimates, not measurements.
  profile  where the time goes, per XLA op (``--profile``: ``forward`` = mode flows_only's two
          forwards, ``train`` = mode train's step on its fixed batch, ``all`` = both): each is
          timed, then up to 3 calls run under ``jax.profiler.trace``; every traced thunk is
          matched to its HLO instruction and that instruction's jax scope (``op_name``), and
          the report lists milliseconds per call per module group (forward ``F`` and backward
          ``B`` apart; e.g. ``B CamFlow/met/encoder_level_#/stage_#_block_#``) and per
          instruction, largest first (``--profile-top`` rows). The durations are the
          dispatching thread's, summed over both threads; work that a library runs on its own
          threads is undercounted. Measure with huge pages (the default here): without them a
          fresh buffer's page faults are charged to whatever op first writes it.

  export  the shipped model exported as ``python -m camflow_jax.export`` does, at ``--height`` x
          ``--width`` and ``--batch``, on a held-out synthetic pair: the network in ONNX Runtime
          (CPU, its default threads; as written, with its threads not spinning between calls, and
          without the Einsum rewrite) against the same function in JAX (``jax.jit``) and as the
          deserialized StableHLO artifact, in blocks of ``--repeats`` after ``--warmup``, the
          blocks' sequence twice; flow differences, conversion and first-call
          seconds (``tools.bench.benchmarking.export``). Needs the export's packages
          (docs/export.md).

The network structure is the released CamFlow's (embed 24, depths (2, 4, 6), heads (3, 12, 24);
``--arch release``, the default) in every mode, or the ``model`` section of ``--config``
(``--arch config``, e.g. the narrow nets of ``configs/synthetic.py`` and ``configs/smoke.py``).

Each function is lowered and compiled once (``jax.jit(f).lower(...).compile()``); the compiled
object is what is timed. Every measurement reports: median/mean/min seconds per call, per
pair, pairs/s, median and mean process CPU seconds per call (CPU time / wall time > 1 means
several cores worked), lower and compile seconds, FLOPs per call and per pair from XLA's cost
analysis and the achieved FLOP/s (= flops / median time), memory (``compiled.memory_analysis()``
sizes; on GPU the device's ``peak_bytes_in_use``; the process peak RSS, which is a high-water
mark over the whole process, so it only grows from one measurement to the next), and the load
average before/after (timings are only comparable on an otherwise idle machine).
XLA's cost analysis counts a while loop's body once (the 31-pass bisection quantile of the
depth-basis normalization), which is negligible next to the network.

One JSON line is printed per measurement; ``--out FILE.json`` writes all of them plus machine
info (platform, device kind, CPU count, Python/jax/jaxlib/flax/optax versions, UTC date, load
average before/after the whole run).

Reproduce the Performance page's numbers (docs/performance.md) on an otherwise idle machine
(check first that nothing else runs, e.g. ``pgrep -f camflow_jax.train``):

    python -m tools.bench benchmark --mode all --height 320 --width 576 --batch 8 --train-batch 2 \\
        --repeats 3 --warmup 1 --out docs/benchmarks/cpu_2core.json
    python -m tools.bench benchmark --mode infer --height 320 --width 576 --batch 1 --groups 12,12 --repeats 15 \\
        --out docs/benchmarks/cpu_2core_infer_b1.json

    python -m tools.bench benchmark --mode flows_only --height 320 --width 576 --repeats 15 \\
        --out docs/benchmarks/cpu_2core_flows_only.json
    python -m tools.bench benchmark --mode roofline --height 320 --width 576 --train-batch 2 --fast-compile \\
        --out docs/benchmarks/roofline_320x576.json

The exported network in ONNX Runtime against JAX (docs/export.md), the shipped model at its own size:

    python -m tools.bench benchmark --mode export --height 128 --width 256 --repeats 15 --warmup 3 \\
        --out docs/benchmarks/cpu_2core_export_128x256.json

Per-op profiles (docs/performance.md, "Twelfth round"):

    python -m tools.bench benchmark --mode profile --profile all --height 320 --width 576 --train-batch 2 \\
        --repeats 3 --warmup 1 --profile-top 60 --out docs/benchmarks/cpu_2core_profile_320x576_r12.json
    python -m tools.bench benchmark --mode profile --profile train --arch config --height 64 --width 128 \\
        --batch 8 --repeats 10 --warmup 2 --profile-top 60 --out docs/benchmarks/cpu_2core_profile_train_64x128_r12.json

Against the released PyTorch model (docs/performance.md, "Against the released PyTorch model";
``pip install torch`` and ``git clone https://github.com/lhaippp/CamFlow-Code /tmp/CamFlow-Code``):

    python -m tools.bench benchmark --mode release --release-code /tmp/CamFlow-Code --height 320 --width 576 \\
        --repeats 15 --warmup 3 --out docs/benchmarks/cpu_2core_release_320x576.json
    python -m tools.bench benchmark --mode release --release-code /tmp/CamFlow-Code --release-train \\
        --height 320 --width 576 --train-batch 2 --repeats 3 --warmup 1 \\
        --out docs/benchmarks/cpu_2core_release_train_b2_320x576.json

(``--fast-compile`` only lowers LLVM's optimization level; XLA's HLO passes, fusion included, and
so the counts the roofline uses are the same);

(the second is the batch-1 inference latency with more repeats; the train step at 320x576 and
batch 8 needs ~29 GiB, hence ``--train-batch 2`` on machines with less memory).
Tiny sizes for a quick check: ``--arch config --config configs/smoke.py --height 64 --width 128
--batch 2 --repeats 2``. Glibc maps each call's large XLA scratch buffers afresh (one page fault
per 4 KiB: ~56k per 320x576 forward). Like the training command, this script re-executes itself
once with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, which backs them with transparent huge pages
(:mod:`camflow_jax.cli.runtime`; docs/performance.md has its effect); ``CAMFLOW_JAX_NO_HUGEPAGES=1``
measures without. The machine info records ``glibc_tunables``.

Compile times and first calls are measured as a fresh install sees them: this script turns off
the caches of :mod:`camflow_jax.compilation` (the per-user persistent compilation cache, the
Predictor's exported programs, the stored static bases) unless ``--compile-cache`` is given; a
``JAX_COMPILATION_CACHE_DIR`` of your own still applies (docs/performance.md, "Compile once").

This script parses the arguments and prints; the measurements are
:mod:`tools.bench.benchmarking` (:func:`tools.bench.benchmarking.run`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from camflow_jax.compilation import cache
from camflow_jax.export import MissingDependency
from tools.bench import benchmarking, timing
from tools.bench.benchmarking import MODES

#: The repository root (configs/ lives there).
ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--mode", default="infer", choices=MODES)
    p.add_argument("--height", type=int, default=320)
    p.add_argument("--width", type=int, default=576)
    p.add_argument("--batch", type=int, default=1,
                   help="batch of mode infer, of the large-batch inference and of the train step in mode all")
    p.add_argument("--groups", default=None,
                   help="group sizes, e.g. 12,12 (CamFlow, the inference default) or 12,12,12 (CamFlow+ with "
                        "depth bases); train mode defaults to the config's bases")
    p.add_argument("--precision", default=None, choices=["exact", "default", "bfloat16"],
                   help="the network's precision policy (docs/performance.md, 'Precision policy'): 'exact' "
                        "(float32, dots and convolutions at HIGHEST), 'default' (float32 at the backend's "
                        "default: TF32 on recent NVIDIA GPUs), 'bfloat16'; default: exact, or --dtype's")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="the older spelling: float32 = --precision exact, bfloat16 = --precision bfloat16")
    p.add_argument("--per-sample-bases", action="store_true",
                   help="inference: pass [B, N, H, W, 2] bases (and separate backward bases) as CamFlow+ does")
    p.add_argument("--config", default=str(ROOT / "configs" / "synthetic.py"),
                   help="training config file (get_config()): loss, optimizer, bases and data of the train step")
    p.add_argument("--arch", default="release", choices=["release", "config"],
                   help="network width/depth: 'release' = the released CamFlow structure (embed 24, depths "
                        "(2, 4, 6), heads (3, 12, 24)) for inference and training; 'config' = --config's model "
                        "section (e.g. the narrow nets of configs/synthetic.py and configs/smoke.py)")
    p.add_argument("--train-batch", type=int, default=None,
                   help="batch of the train measurements (default: --batch)")
    p.add_argument("--train-size", default=None, metavar="HxW",
                   help="input size of the train measurements (default: --height x --width), e.g. 128x256 "
                        "where the 320x576 step does not fit in memory")
    p.add_argument("--repeats", type=int, default=20, help="timed calls (train modes: steps)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls after compilation")
    p.add_argument("--prefetch-buffer", type=int, default=None,
                   help="train_data: batches prepared ahead (default: the config's data.prefetch)")
    p.add_argument("--prefetch-threads", type=int, default=None,
                   help="train_data: read threads (default: the config's data.read_threads; grain's own "
                        "default is 16)")
    p.add_argument("--render", default=None, choices=["host", "device"],
                   help="train modes: data.render of the config (train_data then measures the grain pipeline "
                        "or the batches rendered on the device); default: the config's")
    p.add_argument("--fast-compile", action="store_true",
                   help="compile with XLA's backend optimization level 0 (less compile time, slower "
                        "code, same FLOP counts): for tests, not for timings")
    p.add_argument("--release-code", default=None, metavar="PATH",
                   help="release: a clone of https://github.com/lhaippp/CamFlow-Code (the authors' PyTorch "
                        "release; needs pip install torch)")
    p.add_argument("--release-train", action="store_true",
                   help="release: time the train steps (batch --train-batch, default 2) instead of the forwards")
    p.add_argument("--profile", default="all", choices=list(benchmarking.PROFILE_TARGETS),
                   help="profile: the forwards (with confidence and flows-only), the train step, or all")
    p.add_argument("--profile-top", type=int, default=40,
                   help="profile: rows of the module-group and instruction tables in the report")
    p.add_argument("--batched-refinement", default="auto", choices=["auto", "on", "off"],
                   help="refine_batch: the batch's refinement as one vmapped program (on), a pair at a time "
                        "(off), or the Predictor's choice by device (auto)")
    p.add_argument("--out", default=None, help="JSON file for all results and machine info")
    p.add_argument("--compile-cache", action="store_true",
                   help="keep camflow_jax's compilation caches on (default: off, so compile and first-call "
                        "times are a fresh install's)")
    args = p.parse_args(argv)
    if args.mode == "release" and (args.arch != "release" or args.groups not in (None, "12,12")):
        p.error("--mode release compares the released structure: --arch release, --groups 12,12")
    return args


def main(argv=None):
    opts = vars(parse_args(argv))
    if opts.pop("compile_cache"):
        cache.enable()  # as the trainer and the Predictor do: a program compiled before is read back
    else:
        os.environ[cache.OPT_OUT_ENV] = "1"
    try:
        benchmarking.run(benchmarking.BenchmarkOptions(**opts),
                         on_result=lambda r: print(json.dumps(r), flush=True))
    except (benchmarking.ReleaseUnavailable, MissingDependency) as e:
        print(f"benchmark.py: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


#: ``python -m tools.bench benchmark``: :func:`main` as the package's commands run (huge pages: measure
#: what users get).
command = timing.as_users_run(main)


if __name__ == "__main__":
    command()
