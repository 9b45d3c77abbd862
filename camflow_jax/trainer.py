"""Training loop: ``train_and_evaluate(config, workdir)`` (flag-free; notebooks and tests call it).

One code path for 1 CPU, N GPUs and multi-host TPU: a 1-D ``data`` mesh over all devices, the
batch sharded along it, the train state replicated and donated, one ``jax.jit`` step. With
several processes (``jax.distributed.initialize()`` done by the caller) each process feeds
its rows of the global batch.

Workdir layout: ``config.json``, ``model.json`` (loadable by :func:`camflow_jax.checkpoint.load_model`),
``static_bases.npy``, ``checkpoints/<step>/{state,data}`` (Orbax; data = grain iterator state),
``metrics.jsonl`` (one JSON object per logged step), ``eval_<step>.json``, ``summary.json``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from camflow_jax import baselines, bases as bases_lib, checkpoint, evaluate, losses, metrics, models
from camflow_jax.data import pipeline

# ----------------------------------------------------------------------------------------------
# Config -> model description
# ----------------------------------------------------------------------------------------------

def depth_sigmas(config) -> tuple[float, ...]:
    return tuple(config.bases.depth_sigmas) or bases_lib.default_depth_sigmas(config.model.width)


def model_config_from(config) -> dict:
    """The model config (network + input size + bases) a training config describes."""
    b = config.bases
    sizes, names = models.group_layout(b.num_homography, b.num_stochastic,
                                       3 * len(depth_sigmas(config)) if b.use_depth else 0)
    return {**config.model.to_dict(), "group_sizes": sizes, "group_names": names,
            "bases": {"num_homography": int(b.num_homography), "num_stochastic": int(b.num_stochastic),
                      "seed": int(b.seed), "orthogonal_to_homography": bool(b.orthogonal_to_homography),
                      "use_depth": bool(b.use_depth), "depth_sigmas": list(depth_sigmas(config))}}


def validate_config(config) -> None:
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
    if config.get("stop_after_seconds", 0) < 0:
        raise ValueError("stop_after_seconds must be >= 0 (0 = no limit)")
    n_dev = jax.device_count()
    if config.batch_size % n_dev:
        raise ValueError(f"batch_size {config.batch_size} is not divisible by the {n_dev} devices")


# ----------------------------------------------------------------------------------------------
# State, optimizer, sharding
# ----------------------------------------------------------------------------------------------

def _path_str(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def lr_schedule(config, steps_per_epoch: int) -> optax.Schedule:
    """Adam learning rate, x ``decay_rate`` after every epoch (paper recipe)."""
    return optax.exponential_decay(config.optim.learning_rate, transition_steps=max(steps_per_epoch, 1),
                                   decay_rate=config.optim.decay_rate, staircase=True)


def make_optimizer(config, steps_per_epoch: int) -> optax.GradientTransformation:
    o = config.optim
    tx = optax.adam(lr_schedule(config, steps_per_epoch), b1=o.b1, b2=o.b2)
    if o.grad_clip:
        tx = optax.chain(optax.clip_by_global_norm(o.grad_clip), tx)
    frozen = frozen_prefixes(config)
    if frozen:
        def labels(params):
            paths = [_path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
            unknown = [f for f in frozen if not any(_matches(p, f) for p in paths)]
            if unknown:
                valid = sorted({"/".join(p.split("/")[:2]) for p in paths} | {p.split("/")[0] for p in paths})
                raise ValueError(f"optim.freeze: {unknown} match no parameter; valid prefixes include {valid}")
            return jax.tree_util.tree_map_with_path(
                lambda p, _: "frozen" if any(_matches(_path_str(p), f) for f in frozen) else "train", params)
        tx = optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)
    return tx


#: Parameters of the shallow feature net (the features the feature-consistency loss compares).
SHALLOW_FEATURES = "features"


def frozen_prefixes(config) -> tuple[str, ...]:
    """Parameter-path prefixes kept fixed: ``optim.freeze``, plus the shallow feature net when
    the feature-consistency loss is on and ``optim.auto_freeze`` is set. Trainable shallow
    features under that loss can descend towards a constant image (which every warp matches);
    the authors' release froze them for the same reason."""
    frozen = tuple(str(f).strip("/") for f in config.optim.freeze)
    if config.optim.get("auto_freeze", True) and float(config.loss.feature) > 0 and SHALLOW_FEATURES not in frozen:
        frozen += (SHALLOW_FEATURES,)
    return frozen


def _matches(path: str, prefix: str) -> bool:
    """Whole path components: 'met/head_depth' matches 'met/head_depth/out/kernel', not
    'met/head_depth2/...'."""
    return path == prefix or path.startswith(prefix + "/")


def make_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), ("data",), axis_types=(AxisType.Auto,))


_GROUP_PARAM = re.compile(r"^(?:tokens|norm|head)_(\w+)$|^ca_(\w+)_level_\d+$")


def _group_of(path: str) -> str | None:
    """The basis group a parameter path belongs to (``met/head_depth/out/kernel`` -> 'depth')."""
    for part in path.split("/"):
        m = _GROUP_PARAM.match(part)
        if m:
            return m.group(1) or m.group(2)
    return None


def init_from_checkpoint(fresh: dict, loaded: dict, new_groups) -> tuple[dict, dict]:
    """``fresh`` (``{'params', 'batch_stats'}``) with every array of ``loaded`` copied in by path.

    Strict both ways, so a renamed or reshaped group cannot silently keep its random init:
    every loaded array must land on a same-path, same-shape array, and every array left fresh
    must belong to a basis group in ``new_groups`` (the depth group when starting CamFlow+
    from CamFlow). Returns ``(variables, report)``; ``report`` counts arrays and scalars.
    """
    new_groups = set(new_groups)
    out, loaded_n, fresh_n, loaded_p, fresh_p = {}, 0, 0, 0, 0
    problems = []
    for coll in ("params", "batch_stats"):
        target, source = checkpoint.flatten(fresh.get(coll, {})), checkpoint.flatten(loaded.get(coll, {}))
        for path, x in source.items():
            if path not in target:
                problems.append(f"{coll}/{path} has no counterpart in the model")
            elif np.shape(x) != target[path].shape:
                problems.append(f"{coll}/{path} is {tuple(np.shape(x))} in the checkpoint, "
                                f"{tuple(target[path].shape)} in the model")
        for path, x in target.items():
            if path in source and np.shape(source[path]) == x.shape:
                loaded_n, loaded_p = loaded_n + 1, loaded_p + x.size
            elif path not in source and _group_of(path) in new_groups:
                fresh_n, fresh_p = fresh_n + 1, fresh_p + x.size
            elif path not in source:
                problems.append(f"{coll}/{path} is missing from the checkpoint")

        def pick(p, x, source=source):
            y = source.get(_path_str(p))
            return x if y is None or np.shape(y) != x.shape else jnp.asarray(y, x.dtype)

        out[coll] = jax.tree_util.tree_map_with_path(pick, fresh.get(coll, {}))
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError(f"config.init_from does not fit this model: {'; '.join(problems[:5])}{more}")
    return out, {"loaded_arrays": loaded_n, "loaded_values": int(loaded_p), "fresh_arrays": fresh_n,
                 "fresh_values": int(fresh_p), "fresh_groups": sorted(new_groups)}


# ----------------------------------------------------------------------------------------------
# Steps
# ----------------------------------------------------------------------------------------------

def _assemble_bases(static, batch, use_depth, sigmas):
    """Per-direction basis sets: static bases, plus depth bases of image 1 / image 2."""
    if not use_depth:
        return static, static
    dep = jax.vmap(lambda d, k: bases_lib.depth_translational_bases(d, k, sigmas))
    b = batch["img1"].shape[0]
    st = jnp.broadcast_to(static, (b,) + static.shape)
    return (jnp.concatenate([st, dep(batch["depth1"], batch["K"])], axis=1),
            jnp.concatenate([st, dep(batch["depth2"], batch["K"])], axis=1))


def make_steps(model, tx, config):
    h, w = config.model.height, config.model.width
    use_depth, sigmas = bool(config.bases.use_depth), depth_sigmas(config)
    weights = {k: v if isinstance(v, (bool, str)) else float(v) for k, v in config.loss.to_dict().items()}

    def forward(variables, batch, static, train):
        g1 = models.preprocess(batch["img1"], h, w)
        g2 = models.preprocess(batch["img2"], h, w)
        ba, bb = _assemble_bases(static, batch, use_depth, sigmas)
        if train:
            return model.apply(variables, g1, g2, ba, bb, train=True, mutable=["batch_stats"])
        return model.apply(variables, g1, g2, ba, bb, train=False), None

    def train_step(state, batch, static):
        def loss_fn(params):
            out, mut = forward({"params": params, "batch_stats": state["batch_stats"]}, batch, static, True)
            lb = {k: batch[k] for k in ("flow_f", "flow_b", "label_mask_f", "label_mask_b")}
            if use_depth:
                lb.update(depth1=batch["depth1"], depth2=batch["depth2"])
            loss, terms = losses.total_loss(out, lb, weights)
            return loss, (terms, mut["batch_stats"])

        (_, (terms, batch_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        new_state = dict(state, step=state["step"] + 1, params=optax.apply_updates(state["params"], updates),
                         batch_stats=batch_stats, opt_state=opt_state,
                         rng=jax.random.key_data(jax.random.split(jax.random.wrap_key_data(state["rng"]))[0]))
        # The NLL excludes non-finite elements, so a diverged model reports a small, finite
        # loss; the parameter norm is what reveals it (checked on the host, see _check_finite).
        terms = dict(terms, grad_norm=optax.tree.norm(grads), param_norm=optax.tree.norm(new_state["params"]))
        return new_state, terms

    def eval_step(state, batch, static):
        out, _ = forward({"params": state["params"], "batch_stats": state["batch_stats"]}, batch, static, False)
        return out["flow_f"]

    return train_step, eval_step


# ----------------------------------------------------------------------------------------------
# Setup pieces shared by train_and_evaluate and tools/benchmark.py
# ----------------------------------------------------------------------------------------------

def prepare_kwargs(config) -> dict:
    """``pipeline.prepare_pair`` arguments of a training config."""
    return dict(height=config.model.height, width=config.model.width,
                resize=(config.data.resize_height, config.data.resize_width),
                need_depth=bool(config.bases.use_depth))


def make_train_dataset(config, source, **read_overrides) -> grain.IterDataset:
    """This process's training batches; ``read_overrides`` (``read_threads``, ``prefetch``)
    replace the config's read options (the benchmark varies them)."""
    read = dict(read_threads=config.data.read_threads, prefetch=config.data.prefetch)
    read.update({k: v for k, v in read_overrides.items() if v is not None})
    return pipeline.train_dataset(
        source, seed=config.seed, global_batch=config.batch_size, process_index=jax.process_index(),
        process_count=jax.process_count(), prepare_kwargs=prepare_kwargs(config),
        num_workers=config.data.num_workers, **read)


def init_train_state(config, model, tx, key, sharding) -> dict:
    """The freshly initialized train state, placed with ``sharding``."""
    def init_state(key, variables):
        return {"step": jnp.zeros((), jnp.int32), "params": variables["params"],
                "batch_stats": variables.get("batch_stats", {}), "opt_state": tx.init(variables["params"]),
                "rng": jax.random.key_data(jax.random.fold_in(key, 1))}

    # Drawn on the host (numpy, seeded by the key): identical on every process, no init compile.
    variables = jax.tree.map(jnp.asarray, models.init_variables(
        model, key, config.model.height, config.model.width, identity_motion=config.identity_init))
    return jax.jit(init_state, out_shardings=sharding)(key, variables)


def jit_steps(model, tx, config, repl, data_sharding):
    """(train step with the state donated, eval step), jitted with the mesh's shardings."""
    train_step, eval_step = make_steps(model, tx, config)
    p_train = jax.jit(train_step, in_shardings=(repl, data_sharding, repl), out_shardings=(repl, repl),
                      donate_argnums=(0,))
    p_eval = jax.jit(eval_step, in_shardings=(repl, data_sharding, repl), out_shardings=repl)
    return p_train, p_eval


def host_to_global(batch, data_sharding):
    """This process's rows of a batch -> global arrays sharded along the data axis."""
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(data_sharding, np.asarray(x)), batch)


# ----------------------------------------------------------------------------------------------
# Evaluation on the held-out set
# ----------------------------------------------------------------------------------------------

def _eval_targets(b):
    if "gt_flow_f" in b:
        return b["gt_flow_f"], b["gt_valid_f"]
    return b["flow_f"], b["label_mask_f"]


def evaluate_heldout(predict, eval_source, prepare_kwargs, batch_size, baseline_names, cache: dict):
    """Per-category EPE (published all-pixel form and valid-pixel mean) of the model and of the
    baselines on the held-out pairs. ``cache`` keeps baseline results across calls."""
    records = {"camflow": []}
    need_baselines = "baselines" not in cache
    base_records = {n: [] for n in baseline_names}
    for b in pipeline.eval_batches(eval_source, batch_size, prepare_kwargs):
        flows = np.asarray(predict(b))
        gt, valid = _eval_targets(b)
        for i in range(len(flows)):
            cat = int(b["category_id"][i])
            records["camflow"].append((cat, metrics.epe_all_pixels(flows[i], gt[i], valid[i]),
                                       metrics.epe_valid(flows[i], gt[i], valid[i])))
            if need_baselines:
                for n in baseline_names:
                    f, _ = baselines.estimate_flow(n, b["img1"][i], b["img2"][i])
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


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------

def _log(msg: str) -> None:
    if jax.process_index() == 0:
        print(msg, flush=True)


def _fmt_time(s: float) -> str:
    s = int(max(s, 0))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def check_resumable(workdir, model_config) -> None:
    """Refuses a workdir whose checkpoints belong to another model, before anything is built
    (orbax would otherwise fail deep inside the restore with a shape mismatch)."""
    workdir = Path(workdir)
    if checkpoint.latest_step(workdir / "checkpoints") is None or not (workdir / "model.json").exists():
        return
    saved = checkpoint.read_model_config(workdir)
    wanted = json.loads(json.dumps(models.resolve_config(model_config)))
    differ = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
    if differ:
        details = ", ".join(f"{k}: {saved.get(k)} -> {wanted.get(k)}" for k in differ)
        raise ValueError(f"{workdir} holds checkpoints of a different model ({details}); train into a new "
                         "workdir, or use config.init_from to start from those weights")


class DivergedError(RuntimeError):
    """Training produced non-finite values; nothing of the diverged state was saved."""


def _check_finite(terms: dict, step: int, last_saved) -> None:
    bad = sorted(k for k, v in terms.items() if not np.isfinite(v))
    if bad:
        raise DivergedError(
            f"training diverged at step {step}: non-finite {', '.join(bad)}; nothing after step "
            f"{last_saved or 0} was saved (lower optim.learning_rate, set optim.grad_clip, or check the data)")


def _lock_workdir(workdir: Path):
    """An exclusive lock on ``workdir/.lock`` for the run's lifetime (released by the OS when
    the process ends, however it ends): two trainers in one workdir would overwrite each
    other's checkpoints."""
    import fcntl

    f = open(workdir / ".lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise ValueError(f"{workdir} is in use by another trainer ({holder}); wait for it or use another workdir")
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    return f


def train_and_evaluate(config: ml_collections.ConfigDict, workdir) -> dict:
    """Trains (resuming from ``workdir`` if it holds checkpoints) and evaluates. Returns the
    final summary (also written to ``workdir/summary.json``)."""
    validate_config(config)
    workdir = Path(workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    # Held for the whole run and released however it ends (a failed call in a notebook must
    # not leave the workdir locked).
    lock = _lock_workdir(workdir) if jax.process_index() == 0 else None
    try:
        return _train_and_evaluate(config, workdir)
    finally:
        if lock is not None:
            lock.close()


def _train_and_evaluate(config, workdir: Path) -> dict:
    t_start = time.time()
    is_main = jax.process_index() == 0
    h, w = config.model.height, config.model.width
    model_config = model_config_from(config)
    check_resumable(workdir, model_config)
    model = models.build_model(model_config)

    # --- data -----------------------------------------------------------------------------
    prepare = prepare_kwargs(config)
    train_source = pipeline.make_source(config.data, h, w, "train")
    eval_source = pipeline.make_source(config.data, h, w, "eval") if config.data.name == "synthetic" else None
    steps_per_epoch = config.optim.steps_per_epoch or max(len(train_source) // config.batch_size, 1)
    if config.get("num_epochs", 0):
        # The paper states its recipe in epochs: the step count follows from the data size.
        config = config.copy_and_resolve_references()
        config.num_steps = int(config.num_epochs) * steps_per_epoch
    train_ds = make_train_dataset(config, train_source)

    # --- state ----------------------------------------------------------------------------
    mesh = make_mesh()
    repl, data_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    tx = make_optimizer(config, steps_per_epoch)
    schedule = lr_schedule(config, steps_per_epoch)

    key = jax.random.key(config.seed)
    state = init_train_state(config, model, tx, key, repl)
    static = np.asarray(checkpoint.model_bases(model_config))
    resuming = checkpoint.latest_step(workdir / "checkpoints") is not None
    if resuming and (workdir / "static_bases.npy").is_file():
        static = np.load(workdir / "static_bases.npy")  # e.g. a released model's own bases
    elif config.init_from:
        _, loaded, loaded_bases, loaded_config = checkpoint.load_model(config.init_from)
        new_groups = set(model_config["group_names"]) - set(loaded_config.get("group_names") or [])
        fresh = {"params": state["params"], "batch_stats": state["batch_stats"]}
        variables, report = init_from_checkpoint(fresh, loaded, new_groups)
        state = jax.device_put(dict(state, **variables, opt_state=tx.init(variables["params"])), repl)
        if loaded_bases.shape == static.shape:
            static = loaded_bases  # a released model is only meaningful with its own bases
        _log(f"init_from {config.init_from}: {report['loaded_arrays']} arrays ({report['loaded_values']:,} "
             f"values) loaded; {report['fresh_arrays']} arrays ({report['fresh_values']:,} values) of new "
             f"group(s) {report['fresh_groups']} start from the initialization")
    static_dev = jax.device_put(jnp.asarray(static), repl)
    if is_main:
        (workdir / "config.json").write_text(config.to_json_best_effort(indent=2))
        (workdir / "model.json").write_text(json.dumps({"format": checkpoint.FORMAT, "model_config":
                                                        models.resolve_config(model_config)}, indent=2))
        np.save(workdir / "static_bases.npy", static)

    mngr = ocp.CheckpointManager(workdir / "checkpoints", item_names=("state", "data"),
                                 options=ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints, create=True))
    start = 0
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=repl), state)
    failed = []
    for step in sorted(mngr.all_steps(), reverse=True):
        # The newest intact checkpoint wins. Unreadable newer ones (a run killed while writing,
        # a disk error) are moved aside, never deleted, once an older one has restored; if none
        # restores, nothing is moved (the code or config likely changed) and the run stops.
        train_iter = iter(train_ds)
        try:
            restored = mngr.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=grain.checkpoint.CheckpointRestore(train_iter)))
        except Exception as e:  # orbax/tensorstore raise many types for damaged folders
            failed.append((step, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))
            continue
        state, start = restored["state"], step
        for bad, why in failed:
            aside = workdir / "checkpoints" / f"damaged_{bad}_{int(time.time())}"
            _log(f"checkpoint step {bad} is unreadable ({why}); moved to {aside.name}")
            if is_main:
                (workdir / "checkpoints" / str(bad)).rename(aside)
        if failed:
            mngr.reload()
        _log(f"resumed from {workdir / 'checkpoints' / str(start)} at step {start}")
        break
    else:
        train_iter = iter(train_ds)
        if failed:
            raise ValueError(f"no checkpoint in {workdir / 'checkpoints'} could be restored (step {failed[0][0]}: "
                             f"{failed[0][1]}); nothing was moved. If they were written by another version "
                             "of the code or config, resume with that version, or train into a new workdir")
    if is_main and (workdir / "metrics.jsonl").is_file():
        # Steps after the restored checkpoint are run again: drop their old lines.
        lines = (workdir / "metrics.jsonl").read_text().splitlines(keepends=True)
        keep = [ln for ln in lines if ln.strip() and json.loads(ln).get("step", 0) <= start]
        if len(keep) != len(lines):
            tmp = workdir / "metrics.jsonl.tmp"
            tmp.write_text("".join(keep))
            tmp.replace(workdir / "metrics.jsonl")

    p_train, p_eval = jit_steps(model, tx, config, repl, data_sharding)
    n_params = models.count_params(state["params"])
    _log(f"CamFlow {model_config['group_sizes']} ({n_params:,} params) at {h}x{w}, batch {config.batch_size} "
         f"on {jax.device_count()} {jax.devices()[0].platform} device(s), {jax.process_count()} process(es); "
         f"steps {start + 1}..{config.num_steps}, {steps_per_epoch} steps/epoch")

    eval_cache: dict = {}
    categories = _category_names(config)

    def run_eval(step):
        if eval_source is None:
            return None

        def predict(b):
            n = len(b["img1"])
            pad = (-n) % jax.device_count()  # eval batches must split evenly over devices
            bb = {k: np.concatenate([v, np.repeat(v[-1:], pad, 0)]) if pad else v for k, v in b.items()}
            return np.asarray(jax.device_get(p_eval(state, host_to_global(bb, data_sharding), static_dev)))[:n]

        records = evaluate_heldout(predict, eval_source, prepare, max(config.batch_size, jax.device_count()),
                                   tuple(config.eval_baselines), eval_cache)
        table = summarize(records, categories)
        if is_main:
            (workdir / f"eval_{step}.json").write_text(json.dumps(table, indent=2))
            _log(f"eval at step {step} on {len(records['camflow'])} held-out pairs "
                 "(EPE px; 'epe' = published all-pixel form over the valid mask, 'epe_valid' = mean over valid pixels)")
            for metric in ("epe", "epe_valid"):
                _log(evaluate.format_table(table, metric, categories, markdown=True))
        return table

    # --- loop -----------------------------------------------------------------------------
    metrics_file = open(workdir / "metrics.jsonl", "a") if is_main else None
    t_last, step_last = time.time(), start
    t_loop = time.time()
    stop_after = float(config.get("stop_after_seconds", 0) or 0)
    last_saved, stopped_early = start, False
    for step in range(start + 1, config.num_steps + 1):
        batch = host_to_global(next(train_iter), data_sharding)
        state, terms = p_train(state, batch, static_dev)
        time_up = bool(stop_after) and time.time() - t_loop > stop_after and step < config.num_steps
        save_now = ((config.checkpoint_every and step % config.checkpoint_every == 0)
                    or step == config.num_steps or time_up)
        if save_now:
            _check_finite({k: float(v) for k, v in jax.device_get(terms).items()}, step, last_saved)
        if step % config.log_every == 0 or step == config.num_steps or step == start + 1:
            terms = {k: float(v) for k, v in jax.device_get(terms).items()}
            _check_finite(terms, step, last_saved)
            now = time.time()
            sps = (step - step_last) / max(now - t_last, 1e-9)
            t_last, step_last = now, step
            eta = (config.num_steps - step) / sps if sps > 0 else 0
            lr = float(schedule(step - 1))  # the rate this step used
            if is_main:
                metrics_file.write(json.dumps({"step": step, **terms, "lr": lr, "steps_per_sec": sps,
                                               "pairs_per_sec": sps * config.batch_size, "time": now - t_start}) + "\n")
                metrics_file.flush()
            _log(f"step {step}/{config.num_steps} | loss {terms['total']:.4f} (motion {terms['motion']:.4f}, "
                 f"feature {terms['feature']:.4f}, smooth {terms['smooth']:.4f}) | lr {lr:.2e} | "
                 f"{sps:.2f} steps/s | ETA {_fmt_time(eta)}")
        if save_now:
            mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                    data=grain.checkpoint.CheckpointSave(train_iter)))
            last_saved = step
        if time_up:
            stopped_early = True
            _log(f"stopping at step {step} after {_fmt_time(time.time() - t_loop)} (stop_after_seconds="
                 f"{stop_after:g}); run the same command again to resume")
            break
        if config.eval_every and step % config.eval_every == 0 and step != config.num_steps:
            run_eval(step)
    mngr.wait_until_finished()
    train_time = time.time() - t_loop
    if metrics_file:
        metrics_file.close()

    # --- final evaluation and summary -------------------------------------------------------
    final_step = int(jax.device_get(state["step"]))
    table = None if stopped_early else run_eval(final_step)
    summary = {"final_step": final_step, "steps_run": final_step - start, "train_seconds": train_time,
               "stopped_early": stopped_early,
               "wall_seconds": time.time() - t_start, "params": n_params, "devices": jax.device_count(),
               "processes": jax.process_count(), "platform": jax.devices()[0].platform, "eval": table}
    if is_main:
        (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
        _log(f"done: step {final_step}, {summary['steps_run']} steps in {_fmt_time(train_time)} "
             f"(wall {_fmt_time(summary['wall_seconds'])}); workdir {workdir}")
    mngr.close()
    return summary


def _category_names(config):
    if config.data.name == "synthetic":
        from camflow_jax.data.synthetic import CATEGORIES

        return CATEGORIES
    return ("ALL",)
