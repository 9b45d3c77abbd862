"""Training loop: ``train_and_evaluate(config, workdir)`` (flag-free; notebooks and tests call it).

One code path for 1 CPU, N GPUs and multi-host TPU (docs/training.md, "What a step does"). The
pieces live in their own modules: the jitted steps, optimizer and mesh in
:mod:`camflow_jax.training.steps`; the train state, ``init_from``, restore and save in
:mod:`camflow_jax.training.state`; the workdir's lock, metadata and metric files in
:mod:`camflow_jax.training.workdir`; the training batches a config asks for in
:mod:`camflow_jax.training.feed`; the held-out evaluation in :mod:`camflow_jax.training.heldout`.
This module checks a config, turns it into a model, runs the loop and shows progress.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from camflow_jax import configs, models
from camflow_jax.adaptation import run as adapt_run
from camflow_jax.compilation import cache
from camflow_jax.data import datasets, pipeline
from camflow_jax.estimators import registry
from camflow_jax.models import basis_set
from camflow_jax.training import state
from camflow_jax.training import workdir as workdir_lib
from camflow_jax.training.feed import prepare_kwargs, train_feed
from camflow_jax.training.heldout import HeldoutEvaluator
from camflow_jax.training.signals import GracefulStop, StopRequested, TrainingInterrupted
from camflow_jax.training.state import init_train_state
from camflow_jax.training.steps import jit_steps, lr_schedule, make_mesh, make_optimizer

# ----------------------------------------------------------------------------------------------
# Config -> model (the data: camflow_jax.training.feed)
# ----------------------------------------------------------------------------------------------

def model_config_from(config) -> dict:
    """The ``model.json`` model config a training config describes: the
    :class:`~camflow_jax.models.ModelConfig` fields, the input size and the bases
    (:func:`camflow_jax.models.basis_set.spec_from_training_config`)."""
    spec = basis_set.spec_from_training_config(config)
    sizes, names = models.group_layout(spec["num_homography"], spec["num_stochastic"],
                                       basis_set.num_depth_bases(spec["depth_sigmas"]) if spec["use_depth"] else 0)
    arch = models.ModelConfig(group_sizes=sizes, group_names=names,
                              **{k: config.model[k] for k in models.NETWORK_FIELDS})
    return {**arch.to_dict(), "height": int(config.model.height), "width": int(config.model.width), "bases": spec}


#: The range of every numeric training setting the types alone do not bound: key -> (lowest,
#: highest or None, what the bound means). Checked by :func:`validate_config`, one line naming
#: the key. keep_checkpoints=0 kept no checkpoint at all (issue 63: the trained weights lost
#: without a word); Orbax's own words refused -1.
SETTING_RANGES = {
    "keep_checkpoints": (1, None, "how many of the newest checkpoints are kept; 0 would keep none "
                                  "and lose the trained weights"),
    "checkpoint_every": (0, None, "steps between checkpoints; 0 = only at the end"),
    "eval_every": (0, None, "steps between held-out evaluations; 0 = only at the end"),
    "log_every": (1, None, "steps between progress lines"),
    "num_steps": (0, None, "optimizer steps"),
    "num_epochs": (0, None, "epochs; 0 = num_steps decides"),
    "batch_size": (1, None, "the global batch"),
    "data.num_train": (1, None, "training pairs"),
    "data.num_eval": (0, None, "held-out pairs"),
    "data.render_height": (0, None, "px; 0 = the network size + a margin"),
    "data.render_width": (0, None, "px; 0 = the network size + a margin"),
    "data.resize_height": (0, None, "px; 0 = no resize"),
    "data.resize_width": (0, None, "px; 0 = no resize"),
    "data.frame_gap": (1, None, "frames between the two of a pair"),
    "data.prefetch": (1, None, "batches prepared ahead"),
    "data.read_threads": (0, None, "reading threads per process"),
    "data.motion_scale": ("(0", None, "the synthetic camera motion's magnitude"),
    "bases.num_stochastic": (0, None, "stochastic bases"),
    "optim.b1": ("[0", "1)", "Adam's first-moment decay"),
    "optim.b2": ("[0", "1)", "Adam's second-moment decay"),
    "optim.decay_rate": ("(0", "1]", "the learning rate's factor per epoch"),
    "optim.steps_per_epoch": (0, None, "0 = the training-set size // batch_size"),
    "optim.grad_clip": (0, None, "the global-norm clip; 0 = off"),
}


def _setting(config, key):
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def _within(v, lo, hi) -> tuple[bool, str]:
    """(v within the bounds, the bounds in words); a string bound is open '(' / ')' or closed."""
    lo_open, lo_v = (lo[0] == "(", float(lo[1:])) if isinstance(lo, str) else (False, lo)
    ok = v > lo_v if lo_open else v >= lo_v
    if hi is None:
        return ok, f"{'>' if lo_open else '>='} {lo_v:g}"
    hi_open, hi_v = hi[-1] == ")", float(hi[:-1])
    ok = ok and (v < hi_v if hi_open else v <= hi_v)
    return ok, f"in {'(' if lo_open else '['}{lo_v:g}, {hi_v:g}{')' if hi_open else ']'}"


def validate_settings(config) -> None:
    """Every numeric setting of :data:`SETTING_RANGES` within its range (ValueError naming the
    key, what it means and the value), and the choices the ranges cannot say."""
    for key, (lo, hi, what) in SETTING_RANGES.items():
        try:
            v = _setting(config, key)
        except (KeyError, AttributeError):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
            raise ValueError(f"config key {key} must be a finite number ({what}), got {v!r}")
        ok, bound = _within(v, lo, hi)
        if not ok:
            raise ValueError(f"config key {key} must be {bound} ({what}), got {v!r}")
    nh = config.bases.num_homography
    if nh not in (0, 8, 12):
        raise ValueError(f"config key bases.num_homography must be 12 (second order), 8 (first order) or 0, got {nh!r}")
    sig = config.bases.depth_sigmas
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) and x > 0 for x in sig):
        raise ValueError(f"config key bases.depth_sigmas must be a tuple of finite numbers > 0 (blurs in px; "
                         f"() = the default for the width), got {sig!r}")


def validate_config(config) -> None:
    configs.check(config)  # every key known (configs/default.py), of the default's type
    validate_settings(config)
    h, w = config.model.height, config.model.width
    if h % 64 or w % 64 or h <= 0 or w <= 0:
        raise ValueError(f"model.height/width must be positive multiples of 64, got {h}x{w}")
    if config.batch_size <= 0 or config.num_steps < 0 or config.get("num_epochs", 0) < 0:
        raise ValueError("batch_size must be > 0, num_steps and num_epochs >= 0")
    lr = config.optim.learning_rate
    if not (isinstance(lr, (int, float)) and np.isfinite(lr) and lr > 0):
        raise ValueError(f"optim.learning_rate must be a finite number > 0, got {lr!r}")
    for key in ("motion", "feature", "smooth", "alpha"):
        v = config.loss[key]
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
            raise ValueError(f"loss.{key} must be a finite number >= 0, got {v!r}")
    if not 0 <= config.data.read_nice <= 19:
        raise ValueError(f"data.read_nice must be in 0..19 (0 = the trainer's priority), got {config.data.read_nice}")
    pipeline.resolve_num_workers(config.data.num_workers)  # >= 0, or -1 (auto): else a ValueError
    validate_render(config.data)
    validate_heldout(config)
    validate_selftrain(config.selftrain)
    if config.get("stop_after_seconds", 0) < 0:
        raise ValueError("stop_after_seconds must be >= 0 (0 = no limit)")
    for name in config.eval_baselines:
        registry.resolve(name)  # an unknown name is a one-line error before anything is built
    n_dev = jax.device_count()
    if config.batch_size % n_dev:
        raise ValueError(f"batch_size {config.batch_size} is not divisible by the {n_dev} devices")


RENDER_MODES = ("host", "device")


def validate_heldout(config) -> None:
    """``data.eval_path`` (GHOF-Cam, :mod:`camflow_jax.training.heldout`): an existing file, and
    its depth maps (``data.eval_depth_dir``) when the model has depth bases; checked before
    training rather than at the first evaluation."""
    data = config.data
    if not data.eval_path or data.num_eval <= 0:
        return
    if not Path(data.eval_path).is_file():
        raise FileNotFoundError(f"data.eval_path: no GHOF-Cam file {data.eval_path}")
    if config.bases.use_depth and not data.eval_depth_dir:
        raise ValueError("data.eval_path with bases.use_depth=True needs data.eval_depth_dir (the GHOF-Cam depth "
                         "maps of the ghof_cam benchmark), or bases.use_depth=False")
    if data.eval_depth_dir and not Path(data.eval_depth_dir).is_dir():
        raise FileNotFoundError(f"data.eval_depth_dir: no folder {data.eval_depth_dir}")


def validate_selftrain(st) -> None:
    """``selftrain`` (configs/default.py): one line naming the key that is off."""
    from camflow_jax.adaptation.config import AdaptConfig, selftrain_settings

    if st.rounds < 0:
        raise ValueError(f"config key selftrain.rounds must be >= 0 (0 = ordinary training), got {st.rounds}")
    if not st.rounds:
        return
    if not st.footage:
        raise ValueError("config key selftrain.footage is empty: give the video, frame folder or folder of clips "
                         "to self-train on (--config.selftrain.footage=DIR)")
    minutes, kw = selftrain_settings(st)
    if not (np.isfinite(minutes) and minutes > 0):
        raise ValueError(f"config key selftrain.minutes must be a finite number > 0, got {minutes!r}")
    if not 0 < st.holdout < 1:
        raise ValueError(f"config key selftrain.holdout must be a share in (0, 1), got {st.holdout!r}")
    if st.max_frames < 3:
        raise ValueError(f"config key selftrain.max_frames must be >= 3, got {st.max_frames!r}")
    try:  # the adaptation's own checks of its settings (one copy): learning_rate, synthetic_batch, ...
        AdaptConfig(**kw)
    except ValueError as e:
        raise ValueError(f"config key selftrain.{e}") from None


def validate_render(data) -> None:
    """``data.render``: 'host' (the grain pipeline) or 'device' (the synthetic flow-labelled
    scenes rendered on the mesh, :mod:`camflow_jax.training.feed`)."""
    if data.render not in RENDER_MODES:
        raise ValueError(f"data.render must be 'host' or 'device', got {data.render!r}")
    if data.render == "device":
        if data.name != "synthetic" or data.label != "flow":
            raise ValueError("data.render='device' renders the synthetic scenes with flow labels: it needs "
                             f"data.name='synthetic' and data.label='flow', got {data.name!r} and {data.label!r}")
        if data.resize_height or data.resize_width:
            raise ValueError("data.render='device' does not resize: data.resize_height/width must be 0")


def with_step_count(config, num_train: int) -> tuple[ml_collections.ConfigDict, int]:
    """``(config, steps_per_epoch)``; with ``num_epochs`` set, a copy whose ``num_steps`` follows
    from the data size (the paper states its recipe in epochs)."""
    steps_per_epoch = config.optim.steps_per_epoch or max(num_train // config.batch_size, 1)
    if config.get("num_epochs", 0):
        config = config.copy_and_resolve_references()
        config.num_steps = int(config.num_epochs) * steps_per_epoch
    return config, steps_per_epoch


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------

def train_and_evaluate(config: ml_collections.ConfigDict, workdir, stop: GracefulStop | None = None) -> dict:
    """Trains (resuming from ``workdir`` if it holds checkpoints) and evaluates on the held-out
    pairs. Returns the final summary (also written to ``workdir/summary.json``).

    ``stop``: a :class:`~camflow_jax.training.signals.GracefulStop` the loop reports to (the CLI
    passes one): once it has received a signal, the loop saves what is unsaved and raises
    :class:`~camflow_jax.training.signals.TrainingInterrupted`.

    The compiled steps are kept in JAX's persistent compilation cache, in a per-user folder
    unless the user set up JAX's own (:func:`camflow_jax.compilation.cache.enable`): a run
    resumed, or started again at the same settings, does not compile them again."""
    cache.enable()
    t_start, is_main = time.time(), jax.process_index() == 0
    validate_config(config)
    workdir = Path(workdir).absolute()
    workdir_lib.prepare(workdir)
    if config.selftrain.rounds:  # rounds of label -> fine-tune -> relabel (configs/selftrain.py)
        with workdir_lib.locked(workdir, enabled=is_main):
            reports = adapt_run.self_train_config(config, workdir, log=workdir_lib.log)
        return {"selftrain": [{k: r.get(k) for k in ("round", "heldout_error_before_px", "heldout_error_after_px")}
                              for r in reports], "wall_seconds": time.time() - t_start}
    stop = stop if stop is not None else GracefulStop()  # not entered: never requested
    with workdir_lib.locked(workdir, enabled=is_main):
        model_config = model_config_from(config)
        workdir_lib.check_resumable(workdir, model_config)
        model = models.build_model(model_config)
        train_source = datasets.training_source(config.data, config.model.height, config.model.width, "train")
        config, steps_per_epoch = with_step_count(config, len(train_source))
        mesh = make_mesh()
        repl, data_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        tx = make_optimizer(config, steps_per_epoch)
        tstate = init_train_state(config, model, tx, jax.random.key(config.seed), repl)
        static = workdir_lib.saved_static_bases(workdir)
        if static is None:
            static = basis_set.static_bases(model_config)
            if config.init_from:
                tstate, static = state.start_from(config.init_from, tstate, tx, model_config["group_names"],
                                                  static, repl, workdir_lib.log)
        if is_main:
            workdir_lib.write_metadata(workdir, config.to_json_best_effort(indent=2), model_config, static)
        static = jax.device_put(jnp.asarray(static), repl)
        mngr = state.checkpoint_manager(workdir, config.keep_checkpoints)
        stop.manager = mngr
        feed = train_feed(config, train_source, mesh)
        tstate, train_iter, start = state.restore_latest(mngr, tstate, feed.dataset, workdir_lib.log)
        writer = workdir_lib.MetricWriter(workdir, start, enabled=is_main)
        p_train, p_eval = jit_steps(model, tx, config, repl, data_sharding)
        evaluator = HeldoutEvaluator(config, prepare_kwargs(config), p_eval, static, data_sharding, writer, workdir if is_main else None,
                                     stop=stop)
        n_params = models.count_params(tstate["params"])
        workdir_lib.log(f"CamFlow {model_config['group_sizes']} ({n_params:,} params) at {config.model.height}x"
             f"{config.model.width}, batch {config.batch_size} on {jax.device_count()} "
             f"{jax.devices()[0].platform} device(s), {jax.process_count()} process(es); "
             f"steps {start + 1}..{config.num_steps}, {steps_per_epoch} steps/epoch")
        workers, auto = pipeline.resolve_num_workers(config.data.num_workers), config.data.num_workers < 0
        clamped = pipeline.clamped_workers_note(config.data.num_workers)
        if clamped and is_main and feed.mode != "device":
            print(f"warning: {clamped}", file=sys.stderr, flush=True)
        if feed.mode == "device":
            workdir_lib.log(f"data: rendered on the device(s) (data.render=device), step s = render_batch(seed "
                 f"{train_source.scenes.seed}, s)")
        elif workers or auto:
            workdir_lib.log(f"data: {workers} worker process(es)"
                 + (f" (data.num_workers=-1: {pipeline.usable_cpus()} usable cores)" if auto else ""))

        progress, schedule = Progress(start, config.num_steps, config.batch_size), lr_schedule(config, steps_per_epoch)
        stop_after, last_saved, stopped_early, done = float(config.stop_after_seconds or 0), start, False, start
        try:
            for step in range(start + 1, config.num_steps + 1):
                tstate, terms = p_train(tstate, feed.put(next(train_iter)), static)
                done = step
                stop.ran_step()
                time_up = bool(stop_after) and progress.elapsed() > stop_after and step < config.num_steps
                save_now = ((config.checkpoint_every and step % config.checkpoint_every == 0)
                            or step == config.num_steps or time_up)
                log_now = step % config.log_every == 0 or step == config.num_steps or step == start + 1
                if save_now or log_now:
                    terms = check_finite(terms, step, last_saved)
                if log_now:
                    lr = float(schedule(step - 1))  # the rate this step used
                    writer.write_scalars(step, {**terms, "lr": lr, **progress.update(step)})
                    workdir_lib.log(progress.line(step, terms, lr))
                if save_now:
                    state.save(mngr, step, tstate, train_iter)
                    last_saved = step
                    stop.saved()
                stop.check()
                if time_up:
                    stopped_early = True
                    workdir_lib.log(f"stopping at step {step} after {_fmt_time(progress.elapsed())} (stop_after_seconds="
                         f"{stop_after:g}); run the same command again to resume")
                    break
                if config.eval_every and step % config.eval_every == 0 and step != config.num_steps:
                    evaluator(tstate, step)
            state.wait(mngr)
            train_time = progress.elapsed()
            final_step = int(jax.device_get(tstate["step"]))
            final_eval = None if stopped_early else evaluator(tstate, final_step)
        except StopRequested:
            if done != last_saved:
                check_finite(terms, done, last_saved)  # a diverged state is never saved
                state.save(mngr, done, tstate, train_iter)
            state.wait(mngr)
            stop.saved()
            raise TrainingInterrupted(stop.signum, done) from None

        summary = {"final_step": final_step, "steps_run": final_step - start, "train_seconds": train_time,
                   "stopped_early": stopped_early, "eval": final_eval,
                   "wall_seconds": time.time() - t_start, "params": n_params,
                   "devices": jax.device_count(), "processes": jax.process_count(),
                   "platform": jax.devices()[0].platform}
        writer.close()
        mngr.close()
        if is_main:
            workdir_lib.write_text(workdir / "summary.json", json.dumps(summary, indent=2))
        workdir_lib.log(f"done: step {final_step}, {summary['steps_run']} steps in {_fmt_time(train_time)} "
             f"(wall {_fmt_time(summary['wall_seconds'])}); workdir {workdir}")
        return summary


def _fmt_time(s: float) -> str:
    s = int(max(s, 0))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class DivergedError(RuntimeError):
    """Training produced non-finite values; nothing of the diverged state was saved."""


def check_finite(terms, step: int, last_saved) -> dict[str, float]:
    """The step's loss terms on the host; any non-finite one is a :class:`DivergedError`."""
    terms = {k: float(v) for k, v in jax.device_get(terms).items()}
    bad = sorted(k for k, v in terms.items() if not np.isfinite(v))
    if bad:
        raise DivergedError(
            f"training diverged at step {step}: non-finite {', '.join(bad)}; nothing after step "
            f"{last_saved or 0} was saved (lower optim.learning_rate, set optim.grad_clip, or check the data)")
    return terms


class Progress:
    """Rates and ETA of the progress lines. The first step of a run (or of a resumed run)
    includes compiling the step, so the ETA's rate is measured from the end of that step on
    (:meth:`update` is called after the host has fetched the step's loss, i.e. after the step
    finished)."""

    def __init__(self, start: int, total: int, batch_size: int):
        self.start, self.total, self.batch_size = start, total, batch_size
        self.t_start = self.t_last = time.time()
        self.step_last, self.t_first = start, None

    def elapsed(self) -> float:
        return time.time() - self.t_start

    def update(self, step: int) -> dict[str, float]:
        """Scalars of the interval since the last update (``steps_per_sec`` of the first
        interval includes the compilation)."""
        now = time.time()
        sps = (step - self.step_last) / max(now - self.t_last, 1e-9)
        self.t_last, self.step_last = now, step
        if self.t_first is None:
            self.t_first, self.first_seconds = now, now - self.t_start
        return {"steps_per_sec": sps, "pairs_per_sec": sps * self.batch_size, "time": now - self.t_start}

    def eta(self) -> float | None:
        """Seconds left at the rate since the first step; None until a step after it finished."""
        done = self.step_last - self.start - 1
        if self.t_first is None or done <= 0:
            return None
        return (self.total - self.step_last) * (self.t_last - self.t_first) / done

    def line(self, step: int, terms: dict, lr: float) -> str:
        eta = self.eta()
        speed = (f"first step {self.first_seconds:.1f}s (includes compilation)" if eta is None else
                 f"{(self.step_last - self.start - 1) / max(self.t_last - self.t_first, 1e-9):.2f} steps/s | "
                 f"ETA {_fmt_time(eta)}")
        return (f"step {step}/{self.total} | loss {terms['total']:.4f} (motion {terms['motion']:.4f}, "
                f"feature {terms['feature']:.4f}, smooth {terms['smooth']:.4f}) | lr {lr:.2e} | {speed}")
