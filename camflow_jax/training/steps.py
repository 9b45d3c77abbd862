"""The jitted train and eval steps, the optimizer and the device mesh (docs/training.md,
"What a step does").

The train state is one pytree ``{'step', 'params', 'batch_stats', 'opt_state'}``. The steps run
under one ``jax.jit`` with explicit shardings over a 1-D ``data`` mesh: the batch is sharded
along it, the state replicated and donated. The same code runs on 1 CPU, N GPUs and multi-host.
"""

from __future__ import annotations

import jax
import numpy as np
import optax
from jax.sharding import AxisType, Mesh

from camflow_jax import models
from camflow_jax.models import basis_set
from camflow_jax.training import losses

#: Parameters of the shallow feature net (the features the feature-consistency loss compares).
SHALLOW_FEATURES = "features"


def path_str(path) -> str:
    """``'met/head_depth/out/kernel'`` of a jax tree path."""
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def lr_schedule(config, steps_per_epoch: int) -> optax.Schedule:
    """Adam learning rate, x ``decay_rate`` after every epoch (paper recipe)."""
    return optax.exponential_decay(config.optim.learning_rate, transition_steps=max(steps_per_epoch, 1),
                                   decay_rate=config.optim.decay_rate, staircase=True)


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


def make_optimizer(config, steps_per_epoch: int) -> optax.GradientTransformation:
    """Adam with the epoch schedule, optional global-norm clipping and frozen prefixes."""
    o = config.optim
    tx = optax.adam(lr_schedule(config, steps_per_epoch), b1=o.b1, b2=o.b2)
    if o.grad_clip:
        tx = optax.chain(optax.clip_by_global_norm(o.grad_clip), tx)
    frozen = frozen_prefixes(config)
    if frozen:
        def labels(params):
            paths = [path_str(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
            unknown = [f for f in frozen if not any(_matches(p, f) for p in paths)]
            if unknown:
                valid = sorted({"/".join(p.split("/")[:2]) for p in paths} | {p.split("/")[0] for p in paths})
                raise ValueError(f"optim.freeze: {unknown} match no parameter; valid prefixes include {valid}")
            return jax.tree_util.tree_map_with_path(
                lambda p, _: "frozen" if any(_matches(path_str(p), f) for f in frozen) else "train", params)
        tx = optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()}, labels)
    return tx


def make_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), ("data",), axis_types=(AxisType.Auto,))


def host_to_global(batch, data_sharding):
    """This process's rows of a batch -> global arrays sharded along the data axis."""
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(data_sharding, np.asarray(x)), batch)


def _assemble_bases(static, batch, use_depth, sigmas):
    """Per-direction basis sets: static bases, plus depth bases of image 1 / image 2."""
    if not use_depth:
        return static, static
    per_image = jax.vmap(lambda d, k: basis_set.with_depth_bases(static, d, k, sigmas))
    return per_image(batch["depth1"], batch["K"]), per_image(batch["depth2"], batch["K"])


def make_steps(model, tx, config):
    """``(train_step(state, batch, static) -> (state, terms), eval_step(state, batch, static) ->
    flow_f)``, not yet jitted."""
    h, w = config.model.height, config.model.width
    use_depth = bool(config.bases.use_depth)
    sigmas = basis_set.depth_sigmas(config.bases.depth_sigmas, config.model.width)
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
                         batch_stats=batch_stats, opt_state=opt_state)
        # The NLL excludes non-finite elements, so a diverged model reports a small, finite
        # loss; the parameter norm is what reveals it (checked on the host by the trainer).
        terms = dict(terms, grad_norm=optax.tree.norm(grads), param_norm=optax.tree.norm(new_state["params"]))
        return new_state, terms

    def eval_step(state, batch, static):
        out, _ = forward({"params": state["params"], "batch_stats": state["batch_stats"]}, batch, static, False)
        return out["flow_f"]

    return train_step, eval_step


def jit_steps(model, tx, config, repl, data_sharding):
    """(train step with the state donated, eval step), jitted with the mesh's shardings."""
    train_step, eval_step = make_steps(model, tx, config)
    p_train = jax.jit(train_step, in_shardings=(repl, data_sharding, repl), out_shardings=(repl, repl),
                      donate_argnums=(0,))
    p_eval = jax.jit(eval_step, in_shardings=(repl, data_sharding, repl), out_shardings=repl)
    return p_train, p_eval
