"""The ``adapt`` job: label a user's footage with the refined model, fine-tune the network on it
within a time budget, report the gain on pairs it did not learn from, and save a checkpoint that
``estimate``, ``stabilize``, ``evaluate`` and ``export`` take with ``--checkpoint``
(docs/adaptation.md).

:func:`adapt` is flag-free (notebooks, tests and :mod:`camflow_jax.adapt` call it);
:func:`self_train` repeats label -> train -> relabel for a number of rounds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from camflow_jax.adaptation import finetune as ft
from camflow_jax.adaptation import teacher as teacher_lib
from camflow_jax.adaptation.config import DEFAULT_MINUTES, AdaptConfig, selftrain_settings
from camflow_jax.adaptation.footage import Clip, clip_pairs, read_clips, split_pairs
from camflow_jax.geometry import host
from camflow_jax.io import atomic
from camflow_jax.io.atomic import strict_json

__all__ = ["adapt", "adapt_clips", "no_gain", "self_train", "self_train_config", "load_model", "heldout_error", "OWNED", "REPORT",
           "RESERVE_SECONDS"]

#: The files an adapted checkpoint folder holds (replaced together; other files are left alone).
REPORT = "adapt.json"
OWNED = ("model.json", "weights.npz", REPORT)
#: Seconds kept back from the budget for the checks after fine-tuning and the save.
RESERVE_SECONDS = 15.0
#: At most this share of the budget goes to labelling (then the labels cover pairs spread over
#: the footage, :func:`camflow_jax.adaptation.teacher.spread`); the rest to fine-tuning.
LABEL_SHARE = 0.4


def load_model(checkpoint=None):
    """``(model, variables, static_bases, model_config, predictor)`` of ``checkpoint`` (None: the
    shipped model), with a refined :class:`~camflow_jax.predictor.Predictor` as the teacher."""
    from camflow_jax.models import checkpoint as ckpt
    from camflow_jax.predictor import Predictor

    path = ckpt.pretrained_path() if checkpoint is None else Path(os.fspath(checkpoint))
    if not path.exists():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    model, variables, static, model_config = ckpt.load_model(path)
    pred = Predictor(model, variables, static, model_config)
    return model, variables, static, dict(model_config), pred


def landscape(clips: list[Clip]) -> list[Clip]:
    """Portrait clips turned landscape (``np.rot90``, as the Predictor turns a portrait pair), so
    that labels and the network see the frames as the Predictor does."""
    return [dataclasses.replace(c, frames=np.ascontiguousarray(np.rot90(c.frames, 1, axes=(1, 2))))
            if c.frames.shape[1] > c.frames.shape[2] else c for c in clips]


def heldout_error(model, variables, footage, labels, held, clips) -> float | None:
    """Mean end-point error (input pixels, both directions) of the network alone against the
    teacher's label flows on the kept pairs of ``held``, over the pixels that stay in the frame
    under the label; None when none was kept."""
    keep = [i for i in held if labels.keep[i]]
    if not keep:
        return None
    pairs = [labels.pairs[i] for i in keep]
    ff, fb = ft.network_flows(model, variables, footage, pairs)
    errs = []
    for j, i in enumerate(keep):
        c = labels.pairs[i][0]
        bases = footage.bases[c]
        (H0, W0), (h, w) = clips[c].size_hw, bases.shape[1:3]
        scale = np.array([W0 / w, H0 / h], np.float32)
        for net, coeffs in ((ff[j], labels.coeffs_f[i]), (fb[j], labels.coeffs_b[i])):
            lab = teacher_lib.label_flows(coeffs, bases)
            valid = host.warp_validity(lab) > 0
            e = np.hypot(*((net - lab) * scale).transpose(2, 0, 1))
            errs.append(float(e[valid].mean()) if valid.any() else np.nan)
    return float(np.nanmean(errs))


def adapt_clips(clips: list[Clip], *, checkpoint=None, minutes: float = DEFAULT_MINUTES,
                config: AdaptConfig | None = None, teacher: teacher_lib.TeacherSettings | None = None,
                holdout: float = 0.125, split_by_time: bool = False, cache_dir="default",
                progress: bool = True, stop=None, log=print, model=None) -> tuple[dict, dict, dict]:
    """``(variables, model_config, report)``: the model of ``checkpoint`` (None: shipped;
    ``model``: an already loaded :func:`load_model` tuple) adapted to ``clips`` (module doc).
    ``minutes``: the budget of the whole job (labels included); the fine-tuning gets what the
    labels leave, less :data:`RESERVE_SECONDS` (``config.max_steps`` overrides it).
    ``holdout``/``split_by_time``: the pairs kept apart (:func:`split_pairs`)."""
    t0 = time.perf_counter()
    config = config or AdaptConfig()
    teacher = teacher or teacher_lib.TeacherSettings()
    if not (minutes > 0 and np.isfinite(minutes)):
        raise ValueError(f"minutes must be a positive number, got {minutes}")
    model_, variables, static, model_config, pred = model or load_model(checkpoint)
    clips = landscape(clips)
    pairs = clip_pairs(clips)
    train_idx, held = split_pairs(pairs, holdout, every=not split_by_time)
    cache = teacher_lib.default_cache_dir() if cache_dir == "default" else cache_dir
    # the held-out pairs first (they are the check), then the others coarse to fine: labelling stops
    # after LABEL_SHARE of the budget (not with max_steps), so a short budget learns from pairs
    # spread over the whole footage instead of spending itself on labels
    order = held + teacher_lib.spread(train_idx)
    deadline = None if config.max_steps else t0 + LABEL_SHARE * minutes * 60.0
    log(f"teacher: labelling up to {len(pairs)} pairs of {len(clips)} clip(s) with the refined model")
    labels = teacher_lib.label_pairs(pred, clips, [pairs[i] for i in order], teacher, cache_dir=cache,
                                     progress=progress, stop=stop, deadline=deadline, minimum=len(held) + 1)
    held_set = set(held)
    held = [j for j in range(len(labels)) if order[j] in held_set]
    train_idx = [j for j in range(len(labels)) if order[j] not in held_set]
    if len(labels) < len(pairs):
        log(f"teacher: labelled {len(labels)} of {len(pairs)} pairs within {LABEL_SHARE:.0%} of the budget "
            "(spread over the footage)")
    kept = int(labels.keep.sum())
    reasons = {}
    for r, k in zip(labels.reason, labels.keep):
        if not k:
            key = r.split(":")[0].split(" (")[0]
            reasons[key] = reasons.get(key, 0) + 1
    two_motion = int(np.sum(labels.two_motion & labels.keep))
    log(f"teacher: kept {kept} of {len(labels)} pairs" + (f" (dropped: {reasons})" if reasons else "")
        + (f", {two_motion} labelled by the camera's motion against a moving object" if two_motion else "")
        + (f"; {labels.seconds:.1f} s refining" if labels.seconds else " (read from the cache)"))
    if not any(labels.keep[i] for i in train_idx):
        raise ValueError(f"the teacher trusted none of the {len(train_idx)} pairs to learn from "
                         f"(dropped: {reasons or 'none kept'}): footage too uniform, too dark or too short to learn from")
    footage = ft.Footage.of(pred, clips, [np.asarray(pred.constant_depth_bases(c.size_hw), np.float32) for c in clips])
    before = heldout_error(model_, variables, footage, labels, held, clips)
    synthetic = None
    if config.synthetic_batch:
        synthetic = ft.SyntheticPool.render(config.synthetic_pool, pred.height, pred.width, config.seed,
                                            pred.channel_order)
    budget = minutes * 60.0 - (time.perf_counter() - t0) - RESERVE_SECONDS
    if not config.max_steps:
        if budget < 10:
            raise ValueError(f"--minutes {minutes:g} leaves {max(budget, 0):.0f} s to learn after labelling "
                             f"({time.perf_counter() - t0:.0f} s): give more minutes or fewer frames")
        config = dataclasses.replace(config, seconds=budget)
    log(f"adapting: {'%d steps' % config.max_steps if config.max_steps else '%.0f s' % config.seconds}, "
        f"batch {config.batch_size} + {config.synthetic_batch if synthetic is not None else 0} synthetic, "
        f"lr {config.learning_rate:g}, training {config.trainable!r}")
    new_vars, history = ft.finetune(model_, variables, static, pred.depth_sigmas or (), footage, labels, train_idx,
                                    config, synthetic, progress=progress, stop=stop)
    after = heldout_error(model_, new_vars, footage, labels, held, clips)
    report = {
        "clips": [{"name": c.name, "frames": int(len(c.frames)), "size_hw": list(c.size_hw)} for c in clips],
        "pairs": len(pairs), "pairs_labelled": len(labels), "pairs_learned_from": history["pairs_learned"],
        "pairs_held_out": len(held), "held_out_kept": int(sum(labels.keep[i] for i in held)),
        "teacher_kept": kept, "teacher_dropped": reasons, "teacher_two_motion": two_motion,
        "teacher_seconds": labels.seconds,
        "heldout_error_before_px": before, "heldout_error_after_px": after,
        "ratio": None if not before or after is None else after / before,
        "steps": history["steps"], "train_seconds": history["seconds"],
        "total_seconds": time.perf_counter() - t0, "config": dataclasses.asdict(config),
        "teacher": {"refine": repr(teacher.refine), "fb_scale": teacher.fb_scale,
                    "min_trusted": teacher.min_trusted, "two_motions": teacher.two_motions},
        "checkpoint": "shipped" if checkpoint is None else os.fspath(checkpoint),
        "log": history["log"],
    }
    if before is not None and after is not None:
        log(f"network alone against the teacher on {report['held_out_kept']} held-out pairs: "
            f"{before:.2f} -> {after:.2f} px ({after / before:.2f}x) after {history['steps']} steps "
            f"({history['seconds']:.0f} s)")
    return new_vars, model_config, report


def no_gain(report) -> str | None:
    """Why the adapted network is no better than the one it started from on the held-out pairs
    (its error against the teacher did not fall), or None: then it is not worth keeping."""
    before, after = report.get("heldout_error_before_px"), report.get("heldout_error_after_px")
    if before is None or after is None or after < before:
        return None
    return (f"the adaptation did not lower the network's error on the {report.get('held_out_kept')} held-out pairs "
            f"({before:.2f} -> {after:.2f} px after {report.get('steps')} steps): too few steps for the budget, "
            "or nothing new to learn from this footage")


def save(out_dir, variables, model_config, static, report, *, overwrite: bool = False) -> Path:
    """Writes the adapted checkpoint (``model.json``, ``weights.npz``, :data:`REPORT`) into
    ``out_dir`` all at once (:func:`camflow_jax.io.atomic.atomic_dir`): an interrupted or failed
    save leaves what was there before."""
    from camflow_jax.models import checkpoint as ckpt

    out = Path(os.fspath(out_dir)).absolute()
    with atomic.atomic_dir(out, owned=lambda n: n in OWNED, overwrite=overwrite) as tmp:
        ckpt.save_compact(tmp, model_config, variables, bases=np.asarray(static),
                          info={"adapted": {k: report[k] for k in ("clips", "heldout_error_before_px",
                                                                   "heldout_error_after_px", "steps", "checkpoint")}},
                          overwrite=True)
        Path(tmp, REPORT).write_text(strict_json(report, nonfinite="mark", indent=2))
    return out


def adapt(inputs, out_dir, *, checkpoint=None, minutes: float = DEFAULT_MINUTES, max_frames: int | None = None,
          overwrite: bool = False, **kwargs) -> dict:
    """Adapts the model of ``checkpoint`` (None: shipped) to the videos or frame folders
    ``inputs`` and saves it in ``out_dir`` (:func:`save`); returns the report. A network no
    better than its start on the held-out pairs (:func:`no_gain`) is a ValueError, nothing
    written. ``kwargs``: as
    :func:`adapt_clips`. The output folder is checked before any work (an existing checkpoint
    there is replaced only with ``overwrite``; the inputs and the source checkpoint are never
    written)."""
    out = os.fspath(out_dir)
    sources = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    protected = sources + ([os.fspath(checkpoint)] if checkpoint is not None else [])
    atomic.check_output_dir(out, lambda n: n in OWNED, overwrite, inputs=protected)
    from camflow_jax.models import checkpoint as ckpt

    shipped = ckpt.pretrained_path().parent.resolve()
    if Path(out).resolve() == shipped or shipped in Path(out).resolve().parents:
        raise ValueError(f"{out} is inside the shipped models' folder {shipped}: choose another output folder")
    clips = read_clips(sources, max_frames)
    loaded = kwargs.pop("model", None) or load_model(checkpoint)
    variables, model_config, report = adapt_clips(clips, checkpoint=checkpoint, minutes=minutes, model=loaded, **kwargs)
    why = no_gain(report)
    if why:
        raise ValueError(f"{why}; nothing was written to {out} (give more --minutes)")
    save(out, variables, model_config, loaded[2], report, overwrite=overwrite)
    return report


def self_train(clips: list[Clip], out_dir, *, rounds: int = 2, checkpoint=None, minutes: float = DEFAULT_MINUTES,
               evaluate=None, log=print, **kwargs) -> list[dict]:
    """Label -> train -> relabel: round r adapts the model of round r - 1 (the first: of
    ``checkpoint``, None: shipped) to ``clips``, with labels made by that model refined (a better
    start for the refinement, so the labels may improve). Round r's model is saved as
    ``out_dir/round_<r>``, the last also as ``out_dir`` itself. ``evaluate``: an optional
    callable ``(model, variables) -> dict`` of held-out numbers, called for the start and after
    each round. ``kwargs``: as :func:`adapt_clips` (the held-out pairs and the fine-tuning
    settings, the same every round). Returns each round's report."""
    from camflow_jax.predictor import Predictor

    out = Path(os.fspath(out_dir))
    loaded = load_model(checkpoint)
    reports = []
    previous = None if evaluate is None else evaluate(loaded[0], loaded[1])
    for r in range(1, int(rounds) + 1):
        log(f"self-training round {r}/{rounds}")
        variables, model_config, report = adapt_clips(clips, checkpoint=checkpoint, minutes=minutes, model=loaded,
                                                      log=log, **kwargs)
        report["round"] = r
        if evaluate is not None:
            report["evaluation_before"], report["evaluation"] = previous, evaluate(loaded[0], variables)
            previous = report["evaluation"]
            log(f"round {r}: {json.dumps(report['evaluation'])}")
        save(out / f"round_{r}", variables, model_config, loaded[2], report, overwrite=True)
        reports.append(report)
        loaded = (loaded[0], variables, loaded[2], model_config, Predictor(loaded[0], variables, loaded[2], model_config))
    save(out, loaded[1], loaded[3], loaded[2], reports[-1], overwrite=True)
    summary = [{k: rep.get(k) for k in ("round", "teacher_kept", "heldout_error_before_px", "heldout_error_after_px",
                                        "ratio", "steps", "total_seconds", "evaluation_before", "evaluation")}
               for rep in reports]
    (out / "selftrain.json").write_text(strict_json(summary, nonfinite="mark", indent=2))
    return reports


def self_train_config(config, workdir, log=print) -> list[dict]:
    """:func:`self_train` as a training config asks for it (``config.selftrain``, configs/selftrain.py):
    the footage of ``selftrain.footage`` (:func:`camflow_jax.adaptation.footage.footage_inputs`),
    ``init_from`` (empty: the shipped model), each clip's last ``holdout`` share scored and never
    learned from."""
    from camflow_jax.adaptation.footage import footage_inputs

    st = config.selftrain
    clips = read_clips(footage_inputs(st.footage), int(st.max_frames))
    minutes, kw = selftrain_settings(st)
    adapt_cfg = AdaptConfig(**kw, seed=int(config.seed))
    return self_train(clips, workdir, rounds=int(st.rounds), checkpoint=config.init_from or None,
                      minutes=float(minutes), log=log, config=adapt_cfg, holdout=float(st.holdout),
                      split_by_time=True)
