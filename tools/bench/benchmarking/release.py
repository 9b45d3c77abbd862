"""Against the authors' released PyTorch model (mode release): its forward and train step timed
beside ours on the same inputs (needs ``pip install torch`` and a checkout of the release).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import jax
import numpy as np

from camflow_jax.training import steps
from tools.bench.benchmarking.common import (
    BenchmarkOptions,
    apply_groups,
    arch_summary,
    compute_fields,
    flops_of,
    load_config,
    precision_of,
    timing_summary,
)
from tools.bench.benchmarking.inference import flows_only_setup
from tools.bench.benchmarking.training import mem_available_bytes, train_setup
from tools.bench.timing import warm_interleaved


class ReleaseUnavailable(RuntimeError):
    """Mode release cannot run: no ``--release-code``, a path that does not hold the authors'
    release, or no PyTorch. ``python -m tools.bench benchmark`` prints the message on one line and exits 2."""


#: Files of github.com/lhaippp/CamFlow-Code that mode release imports or reads.
RELEASE_FILES = ("model/__init__.py", "model/net.py", "model/swin_multi.py", "model/utils.py",
                 "model/flow_utils.py", "experiments/params.json")
#: ... and those the train comparison (``--release-train``) also needs.
RELEASE_LOSS_FILES = ("loss/__init__.py", "loss/losses.py")
#: Train comparison: skipped with a message where less memory than this is available.
RELEASE_TRAIN_MIN_AVAILABLE = 12 * 2**30

RELEASE_FORWARD_COMPUTES = (
    "CamFlow.forward of the release's model/net.py in eval mode under torch.no_grad(), batch 1, "
    "imgs_gray_full = imgs_gray_patch (both at --height x --width): the shallow feature net "
    "(fea_extra) on both images; the SwinTransformer h_net twice, once per direction (each: its "
    "3-level conv feature pyramid of both images, a Swin encoder per level with the second image "
    "warped by the flow so far, the 12 + 12 class-attention basis tokens, heads -> 24 "
    "coefficients); flows = bases x coefficients; both features warped by the flows; the mask net "
    "(FlowMaskEstimator) once per direction; both masks warped; both images warped and their "
    "features recomputed (fil_features); the flows (bilinear) and masks (nearest) resized to "
    "imgs_gray_full's size (the same size here), the fused mask (computed, not returned), the flows "
    "permuted to [B, H, W, 2]. It returns flow_f, flow_b [1, H, W, 2], mask_f, mask_b [1, 1, H, W], "
    "the warped images, the inputs passed through and fil_features.")
OURS_FULL_COMPUTES = (
    "camflow_jax's network (mode flows_only's compiled model.apply(..., confidence=True)), batch 1: "
    "shallow features of both images, the motion estimation transformer for both directions in one "
    "batch, flows = bases x coefficients, the second image's features warped by each direction's "
    "flow and the mask net once per direction; it returns flow_f, flow_b [1, H, W, 2], the 24 "
    "coefficients per direction, the log-variances logvar_f, logvar_b [1, H, W, 1], the features and "
    "a zero translational flow (no depth group). It does not warp the images, recompute features of "
    "warped images, warp the masks or fuse them, as the release's forward does.")
OURS_FLOWS_COMPUTES = (
    "the same compiled network with confidence=False (the flows-only path the Predictor runs by "
    "default): everything above but the feature warp and the mask net.")


def check_release(path, train: bool = False) -> Path:
    """The release's root, after checking that it holds :data:`RELEASE_FILES` (and the loss files
    for ``train``) with the CamFlow network, and that PyTorch imports; raises ReleaseUnavailable
    otherwise. The path is checked first, so no torch import is paid for a wrong path."""
    if not path:
        raise ReleaseUnavailable("--mode release needs --release-code PATH, a clone of "
                                 "https://github.com/lhaippp/CamFlow-Code")
    root = Path(path).expanduser()
    need = RELEASE_FILES + (RELEASE_LOSS_FILES if train else ())
    missing = [f for f in need if not (root / f).is_file()]
    if missing:
        raise ReleaseUnavailable(f"--release-code {path} does not hold the released CamFlow code (missing "
                                 f"{', '.join(missing)}): clone https://github.com/lhaippp/CamFlow-Code there")
    net_py = (root / "model" / "net.py").read_text(encoding="utf-8", errors="replace")
    if "class CamFlow(" not in net_py or "def fetch_net(" not in net_py:
        raise ReleaseUnavailable(f"--release-code {path}: model/net.py defines no CamFlow network "
                                 "(class CamFlow, fetch_net); it is not the lhaippp/CamFlow-Code release")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ReleaseUnavailable(f"--mode release needs PyTorch to run the released model ({e}): "
                                 "pip install torch") from None
    return root.resolve()


def _not_installed(what: str):
    def call(*args, **kwargs):
        raise NotImplementedError(f"{what}: a stand-in of tools/bench/benchmark.py --mode release for a package "
                                  "that is not installed; the benchmarked paths never call it")
    return call


def _release_shims(root: Path) -> list[str]:
    """Stand-ins, in ``sys.modules``, for what the release imports but does not need on the
    benchmarked paths, where the package is not installed: timm (trunc_normal_ = torch's,
    to_2tuple; DropPath only with drop_path > 0, which the release's params.json does not set),
    torchvision.utils.save_image / imageio / kornia.geometry (the training-time image dumps, the
    unused training_warp and evaluation helpers), einops.rearrange (the unused mask_predictor),
    mlflow (its loss logging; active_run() is None) and model/DLT.py (DLT_solve of the unused
    BasesHomo Net; the file is not in the repository). Returns the names shimmed."""
    import torch

    def installed(name):
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    def to_2tuple(x):
        return tuple(x) if isinstance(x, (list, tuple)) else (x, x)

    class DropPath(torch.nn.Identity):
        def __init__(self, drop_prob=0.0, *args, **kwargs):
            if drop_prob > 0:
                raise NotImplementedError("DropPath with drop_prob > 0: a stand-in of tools/bench/benchmark.py "
                                          "--mode release (timm is not installed)")
            super().__init__()

    packages = {
        "timm": {"models": {"layers": dict(trunc_normal_=torch.nn.init.trunc_normal_, to_2tuple=to_2tuple,
                                           DropPath=DropPath)}},
        "torchvision": {"utils": dict(save_image=_not_installed("torchvision.utils.save_image"))},
        "kornia": {"geometry": dict(warp_perspective=_not_installed("kornia.geometry.warp_perspective"),
                                    linalg=dict(transform_points=_not_installed("kornia transform_points")))},
        "einops": dict(rearrange=_not_installed("einops.rearrange")),
        "imageio": dict(get_writer=_not_installed("imageio.get_writer"), mimsave=_not_installed("imageio.mimsave")),
        "mlflow": dict(active_run=lambda: None, log_metric=_not_installed("mlflow.log_metric"),
                       set_experiment=_not_installed("mlflow.set_experiment"),
                       start_run=_not_installed("mlflow.start_run")),
    }

    def build(name, spec):
        mod = types.ModuleType(name, f"stand-in of tools/bench/benchmark.py --mode release ({name} is not installed)")
        sys.modules[name] = mod
        for k, v in spec.items():
            setattr(mod, k, build(f"{name}.{k}", v) if isinstance(v, dict) else v)
        return mod

    shimmed = []
    for name, spec in packages.items():
        if name not in sys.modules and not installed(name):
            build(name, spec)
            shimmed.append(name)
    if not (root / "model" / "DLT.py").is_file() and "model.DLT" not in sys.modules:
        mod = types.ModuleType("model.DLT", "stand-in: model/DLT.py is not in the release")
        mod.DLT_solve = _not_installed("model.DLT.DLT_solve")
        sys.modules["model.DLT"] = mod
        shimmed.append("model.DLT")
    return shimmed


def import_release(root: Path, train: bool = False) -> dict:
    """Imports the release's ``model.net`` (and ``loss.losses`` for ``train``) from ``root``
    after :func:`_release_shims`; its packages are the top-level names ``model`` and ``loss``,
    which must not be taken by other modules. Returns {'net', 'losses', 'shims'}."""
    for name in ("model", "loss"):
        mod = sys.modules.get(name)
        if mod is not None and not str(getattr(mod, "__file__", "") or "").startswith(str(root)):
            raise ReleaseUnavailable(f"a module named {name!r} other than the release's is already imported "
                                     f"({getattr(mod, '__file__', mod)}); run mode release in a fresh process")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    shims = _release_shims(root)
    with contextlib.redirect_stdout(sys.stderr):  # the release prints; stdout carries JSON lines
        net = importlib.import_module("model.net")
        losses = importlib.import_module("loss.losses") if train else None
    return {"net": net, "losses": losses, "shims": shims}


def build_release(root: Path, net, height: int, width: int, workdir: Path):
    """The release's network as ``fetch_net`` builds it from experiments/params.json (CamFlow, 24
    bases, embed 24, depths (2, 4, 6), ...), with random weights (its own init) and random bases
    saved where its constructor loads them; returns (model, params, overrides). Overrides of
    params.json: crop_size = [height, width]; basis_dir = ``workdir`` (the constructor otherwise
    generates its bases with ``.cuda()``); sup_weight = 1 where absent (the net_stg 4 loss reads
    it, params.json does not set it)."""
    import torch

    params = json.loads((root / "experiments" / "params.json").read_text())
    overrides = {"crop_size": [int(height), int(width)], "basis_dir": str(workdir) + os.sep}
    if "sup_weight" not in params:
        overrides["sup_weight"] = 1.0
    params.update(overrides)
    params = types.SimpleNamespace(**params)
    n = int(params.num_basis)
    rng = np.random.default_rng(0)
    torch.save(torch.from_numpy(rng.uniform(-1, 1, (1, n, 2 * height * width)).astype(np.float32)),
               workdir / f"basis_{n}.pt")
    torch.manual_seed(0)
    with contextlib.redirect_stdout(sys.stderr):
        model = net.fetch_net(params)
    overrides["basis_dir"] = "a temporary directory holding random bases [1, 24, 2*H*W]"
    return model, params, overrides


def _ratio_summary(ours, theirs) -> dict:
    per_round = [a / b for a, b in zip(ours, theirs)]
    return {"of_medians": round(statistics.median(ours) / statistics.median(theirs), 4),
            "per_round": [round(r, 4) for r in per_round], "median": round(statistics.median(per_round), 4),
            "min": round(min(per_round), 4), "max": round(max(per_round), 4)}


def _torch_info(torch) -> dict:
    return {"torch": torch.__version__, "torch_num_threads": torch.get_num_threads(),
            "torch_num_interop_threads": torch.get_num_interop_threads()}


def bench_release(opts: BenchmarkOptions, config, release: dict) -> dict:
    """The release's forward (torch, no_grad, eval) against our full forward and our flows-only
    forward at batch 1, interleaved round by round (release, full, flows-only, release, ...)."""
    import torch

    s = flows_only_setup(opts, config, batch=1)
    fns, variables, g1, g2, bases = (s[k] for k in ("fns", "variables", "g1", "g2", "bases"))
    h, w = opts.height, opts.width
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        rel, params, overrides = build_release(release["root"], release["net"], h, w, Path(tmp))
        build_s = time.perf_counter() - t0
    rel.eval()
    gray = torch.from_numpy(np.concatenate([np.asarray(g1), np.asarray(g2)], axis=-1)).permute(0, 3, 1, 2).contiguous()
    batch = {"imgs_gray_patch": gray, "imgs_gray_full": gray.clone(),
             "imgs_rgb_full": gray.repeat(1, 3, 1, 1).contiguous()}

    def release_forward():
        with torch.no_grad():
            return rel(batch)

    calls = {"release": release_forward,
             "ours_full": lambda: jax.block_until_ready(fns[True](variables, g1, g2, bases)),
             "ours_flows_only": lambda: jax.block_until_ready(fns[False](variables, g1, g2, bases))}
    run = warm_interleaved(calls, opts.repeats, opts.warmup)  # load changes hit all three alike, never two at once
    first, times, cpu, load_before, load_after = (run[k] for k in ("first", "wall", "cpu", "loadavg_before",
                                                                   "loadavg_after"))
    out = release_forward()
    shapes = {k: list(v.shape) for k, v in out.items() if hasattr(v, "shape")}
    finite = bool(all(torch.isfinite(out[k]).all() for k in ("flow_f", "flow_b", "mask_f", "mask_b")))
    full_r, flows_r = (_ratio_summary(times[k], times["release"]) for k in ("ours_full", "ours_flows_only"))
    return {
        "measurement": "release", "height": h, "width": w, "batch": 1, "groups": s["groups"],
        **compute_fields(precision_of(opts)), "arch": opts.arch, **arch_summary(config), "repeats": opts.repeats,
        "warmup": opts.warmup,
        "order_per_round": list(calls), **_torch_info(torch),
        "release": {"code": str(release["root"]), "net_type": params.net_type, "num_basis": int(params.num_basis),
                    "params_json_overrides": overrides, "shims": release["shims"],
                    "params": int(sum(p.numel() for p in rel.parameters())), "build_s": round(build_s, 3),
                    "output_shapes": shapes, "flows_and_masks_finite": finite,
                    "computes": RELEASE_FORWARD_COMPUTES},
        "ours": {"params": int(sum(x.size for x in jax.tree.leaves(variables["params"]))),
                 "compile_s": {"full": round(s["compile_s"][True], 3), "flows_only": round(s["compile_s"][False], 3)},
                 "full_computes": OURS_FULL_COMPUTES, "flows_only_computes": OURS_FLOWS_COMPUTES,
                 "flops": {"full": flops_of(fns[True]), "flows_only": flops_of(fns[False])}},
        "first_call_s": first,
        "release_median_s": round(statistics.median(times["release"]), 4),
        "ours_full_median_s": round(statistics.median(times["ours_full"]), 4),
        "ours_flows_only_median_s": round(statistics.median(times["ours_flows_only"]), 4),
        "ratio_full": full_r, "ratio_flows_only": flows_r,
        "targets": {"full_at_most": 0.3, "flows_only_at_most": 0.2,
                    "full_met": full_r["median"] <= 0.3, "flows_only_met": flows_r["median"] <= 0.2},
        **{f"{k}_timing": timing_summary(times[k], cpu[k], 1, None) for k in calls},
        "loadavg_before": load_before, "loadavg_after": load_after,
    }


RELEASE_STEP_CONTAINS = (
    "torch, batch {b}: CamFlow.forward in train mode with step=1 (step % 2000 == 0 would write its "
    "debug images), the whole forward as in inference but at the network size; loss/losses.py "
    "compute_losses at params.json's net_stg 4: the Laplace NLL of both flows against "
    "flow_gt_patch (random labels here) with the masks as log-variances, plus the "
    "feature-consistency NLL of both directions (features against warped features), the latter "
    "scaled by the (not gradient-stopped) supervised/unsupervised ratio x unsup_weight 100, "
    "sup_weight 1 added (params.json lacks it); backward; one torch.optim.Adam step (lr = "
    "params.json's learning_rate) over the parameters left trainable by _freeze_feature_extractor "
    "(the shallow feature net is frozen). The repository holds no training script: Adam is a "
    "stand-in for its optimizer. The step excludes data loading, as ours does.")
OURS_STEP_CONTAINS = (
    "camflow_jax's jitted train step exactly as the trainer builds it from --config ({config}) with "
    "--groups 12,12 (CamFlow, 24 static bases, no depth bases) and the released width, on one "
    "fixed device-resident batch of {b}: the uint8 RGB pair's preprocessing to gray, the forward in "
    "train mode (BatchNorm statistics updated), the loss of the config (weights motion : feature : "
    "smooth = {weights}; with configs/synthetic.py the motion NLL of both flows only, so our loss "
    "lacks the release's feature-consistency term and is cheaper by that much), backward, Adam "
    "with the epoch schedule (frozen: {frozen}), and the gradient and parameter norms.")


def bench_release_train(opts: BenchmarkOptions, release: dict) -> dict:
    """The release's train step in torch (forward, its net_stg 4 loss, backward, Adam) against our
    real train step (mode train's, CamFlow 24 bases at the released width), interleaved; skipped
    with a message where less than 12 GiB are available."""
    import torch

    th, tw = (int(v) for v in (opts.train_size or f"{opts.height}x{opts.width}").lower().split("x"))
    b = opts.train_batch or 2
    base = {"measurement": "release_train", "height": th, "width": tw, "batch": b}
    available = mem_available_bytes()
    if available is not None and available < RELEASE_TRAIN_MIN_AVAILABLE:
        return {**base, "skipped": f"{available / 2**30:.1f} GiB available, the train comparison needs at least "
                                   f"{RELEASE_TRAIN_MIN_AVAILABLE / 2**30:.0f} GiB (our 320x576 batch-2 step alone "
                                   "takes ~8 GB of XLA scratch)"}
    config = load_config(opts.config, th, tw, b, precision_of(opts), opts.arch)
    apply_groups(config, [12, 12])
    ours = train_setup(opts, config)
    state, fixed, static, step = ours["t"]["state"], ours["fixed"], ours["t"]["static"], ours["step"]

    with tempfile.TemporaryDirectory() as tmp:
        rel, params, overrides = build_release(release["root"], release["net"], th, tw, Path(tmp))
    rel.train()
    trainable = [p for p in rel.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=float(params.learning_rate))
    rng = np.random.default_rng(0)
    gray = torch.from_numpy(rng.standard_normal((b, 2, th, tw)).astype(np.float32))
    data = {"imgs_gray_patch": gray, "imgs_gray_full": gray.clone(), "imgs_rgb_full": gray.repeat(1, 3, 1, 1),
            "flow_gt_patch": torch.from_numpy(rng.normal(0, 2, (b, 4, th, tw)).astype(np.float32))}
    compute_losses = release["losses"].compute_losses
    losses_seen = {"release": [], "ours": []}

    def release_step():
        opt.zero_grad(set_to_none=True)
        with contextlib.redirect_stdout(sys.stderr):  # its NLL prints on non-finite elements
            loss = compute_losses(data, rel(data, step=1), params)["total"]
        loss.backward()
        opt.step()
        losses_seen["release"].append(float(loss.detach()))

    def ours_step():
        nonlocal state
        state, terms = step(state, fixed, static)
        jax.block_until_ready((state, terms))
        losses_seen["ours"].append(float(terms["total"]))

    calls = {"release": release_step, "ours": ours_step}
    run = warm_interleaved(calls, opts.repeats, opts.warmup)
    first, times, cpu, load_before, load_after = (run[k] for k in ("first", "wall", "cpu", "loadavg_before",
                                                                   "loadavg_after"))
    ratio = _ratio_summary(times["ours"], times["release"])
    weights = ":".join(f"{float(config.loss[k]):g}" for k in ("motion", "feature", "smooth"))
    return {
        **base, "groups": [12, 12], **compute_fields(precision_of(opts)), "arch": opts.arch, **arch_summary(config),
        "config": str(opts.config), "repeats": opts.repeats, "warmup": opts.warmup,
        "order_per_round": list(calls), **_torch_info(torch),
        "release": {"code": str(release["root"]), "params_json_overrides": overrides, "shims": release["shims"],
                    "params": int(sum(p.numel() for p in rel.parameters())),
                    "trainable_params": int(sum(p.numel() for p in trainable)),
                    "step_contains": RELEASE_STEP_CONTAINS.format(b=b)},
        "ours": {"params": ours["t"]["params"], "compile_s": round(ours["lower_s"] + ours["compile_s"], 3),
                 "flops": ours["flops"], "memory": ours["memory"],
                 "step_contains": OURS_STEP_CONTAINS.format(
                     config=opts.config, b=b, weights=weights,
                     frozen=list(steps.frozen_prefixes(config)) or "nothing")},
        "losses_finite": {k: bool(np.all(np.isfinite(v))) for k, v in losses_seen.items()},
        "first_call_s": first,
        "release_median_s": round(statistics.median(times["release"]), 4),
        "ours_median_s": round(statistics.median(times["ours"]), 4),
        "ratio": ratio, "target": {"at_most": 0.6, "met": ratio["median"] <= 0.6},
        **{f"{k}_timing": timing_summary(times[k], cpu[k], b, None) for k in calls},
        "loadavg_before": load_before, "loadavg_after": load_after,
    }
