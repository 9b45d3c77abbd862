"""The network fine-tuned on teacher labels, mixed with synthetic pairs with exact labels
(docs/adaptation.md, "What is trained, and how").

One step: a batch of footage pairs, each in one direction drawn at random (``directions=1``,
the default: the network's forward-only pass, half its work) or in both, whose loss is the
teacher-weighted L1 distance between the network's flows and the label flows
(:mod:`camflow_jax.adaptation.teacher`), and a batch of the embedded synthetic scenes
(:class:`camflow_jax.data.synthetic.SyntheticScenes`, exact flows and depth), whose loss is the
plain L1 distance; the two are mixed by ``synthetic_share`` (the share that keeps the network
from forgetting what it knew). BatchNorm statistics stay frozen (the network runs in inference
mode: a few hundred frames of one clip would give noisy statistics); Adam, at the rate
``schedule`` gives each step (constant by default: :func:`learning_rate`), updates the
parameters ``trainable`` names. The loop runs until its time budget or step count is spent.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from camflow_jax.adaptation import occluders
from camflow_jax.adaptation.config import TRAINABLE, AdaptConfig
from camflow_jax.models import basis_set
from camflow_jax.models.camflow import preprocess

__all__ = ["Footage", "SyntheticPool", "finetune", "footage_batch", "learning_rate", "network_flows", "optimizer",
           "synthetic_batch", "trainable_mask"]

def _path(p) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in p)


@jax.jit
def _averaged(avg, params, decay):
    return jax.tree.map(lambda a, p: decay * a + (1 - decay) * p, avg, params)


def learning_rate(cfg: AdaptConfig, step: int, elapsed: float, first: float) -> float:
    """The rate of step ``step`` (0-based) of a run configured by ``cfg`` (its ``schedule``), ``elapsed``
    seconds into it, its first step (compilation included) having taken ``first`` seconds."""
    if cfg.schedule == "constant":
        return cfg.learning_rate
    if cfg.max_steps:
        done = step / cfg.max_steps
    else:
        done = (elapsed - first) / max(cfg.seconds - first, 1e-9) if step else 0.0
    return cfg.learning_rate * 0.5 * (1.0 + math.cos(math.pi * min(max(done, 0.0), 1.0)))


def average_decay(step: int, decay: float) -> float:
    """The running average's decay after ``step`` steps: ``decay``, but at most ``(1 + step) /
    (10 + step)``, so that the first steps are not averaged with the starting weights for long."""
    return min(decay, (1 + step) / (10 + step))


def trainable_mask(params, choice: str):
    """A pytree of bools like ``params``: True for the parameters ``choice`` trains."""
    prefixes = TRAINABLE[choice]
    return jax.tree_util.tree_map_with_path(lambda p, _: any(_path(p).startswith(x) for x in prefixes), params)


@dataclasses.dataclass
class Footage:
    """Network inputs of labelled footage: ``gray[c]`` the preprocessed frames of clip ``c``
    ``[T, h, w, 1]`` and ``bases[c]`` its basis set ``[N, h, w, 2]`` (numpy)."""
    gray: list
    bases: list

    @classmethod
    def of(cls, predictor, clips, bases) -> "Footage":
        h, w = predictor.height, predictor.width
        prep = jax.jit(functools.partial(preprocess, height=h, width=w, channel_order=predictor.channel_order))
        gray = [np.concatenate([np.asarray(prep(c.frames[i:i + 16])) for i in range(0, len(c.frames), 16)])
                for c in clips]
        return cls(gray, list(bases))


@dataclasses.dataclass
class SyntheticPool:
    """Synthetic pairs at the network size: preprocessed images, exact flows, depths, K."""
    g1: np.ndarray
    g2: np.ndarray
    flow_f: np.ndarray
    flow_b: np.ndarray
    depth1: np.ndarray
    depth2: np.ndarray
    K: np.ndarray

    @classmethod
    def render(cls, num: int, height: int, width: int, seed: int = 0, channel_order: str = "rgb") -> "SyntheticPool":
        from camflow_jax.data.synthetic import SyntheticScenes

        scenes = SyntheticScenes(seed=90_000 + seed, num_samples=num, height=height, width=width)
        rows = [scenes[i] for i in range(num)]
        prep = jax.jit(functools.partial(preprocess, height=height, width=width, channel_order=channel_order))
        col = lambda k: np.stack([r[k] for r in rows])  # noqa: E731
        return cls(np.asarray(prep(col("img1"))), np.asarray(prep(col("img2"))), col("flow_f").astype(np.float32),
                   col("flow_b").astype(np.float32), col("depth1").astype(np.float32),
                   col("depth2").astype(np.float32), col("K").astype(np.float32))


def optimizer(params, trainable: str) -> optax.GradientTransformation:
    """Adam without its rate on the parameters ``trainable`` names, zero on the others: the step
    multiplies its updates by ``-lr`` (:func:`make_step`, :func:`learning_rate`)."""
    mask = trainable_mask(params, trainable)
    return optax.chain(optax.masked(optax.scale_by_adam(), mask),
                       optax.masked(optax.set_to_zero(), jax.tree.map(lambda m: not m, mask)))


def _l1(pred, label, weight):
    """Weighted mean of |du| + |dv| (``weight`` ``[B, h, w]``)."""
    err = jnp.abs(pred - label).sum(-1)
    return (weight * err).sum() / jnp.maximum(weight.sum(), 1e-6)


def make_step(model, tx, static, sigmas, synthetic_share: float, *, directions: int):
    """The jitted step ``(params, opt_state, batch_stats, real, syn, lr) -> (params, opt_state,
    terms)``: ``tx`` scales the gradients (Adam without its rate), the step moves the parameters
    by ``-lr`` times that (the rate a traced scalar, so a schedule does not recompile).
    ``directions`` 2: the loss of both directions of each pair; 1: the forward direction of each
    row alone (the network's forward-only pass, half its work), the batches' rows having been
    turned round at random (:func:`footage_batch`, :func:`synthetic_batch`)."""
    share = float(synthetic_share)
    one = directions == 1

    def loss_fn(params, batch_stats, real, syn):
        v = {"params": params, "batch_stats": batch_stats}
        # one basis set for both directions (bases_b None): the network sums it without copying it
        # per pair and direction
        out = model.apply(v, real["g1"], real["g2"], real["bases"], None, train=False, confidence=False,
                          forward_only=one)
        lf = jnp.einsum("bk,khwc->bhwc", real["cf"], real["bases"])
        l_real = _l1(out["flow_f"], lf, real["wf"])
        if not one:
            lb = jnp.einsum("bk,khwc->bhwc", real["cb"], real["bases"])
            l_real = 0.5 * (l_real + _l1(out["flow_b"], lb, real["wb"]))
        terms = {"footage": l_real}
        if syn is None:
            return l_real, terms
        per_image = jax.vmap(lambda d, k: basis_set.with_depth_bases(static, d, k, sigmas))
        bf = per_image(syn["depth1"], syn["K"])
        ones = jnp.ones(syn["flow_f"].shape[:3])
        bb = None if one else per_image(syn["depth2"], syn["K"])
        so = model.apply(v, syn["g1"], syn["g2"], bf, bb, train=False, confidence=False, forward_only=one)
        l_syn = _l1(so["flow_f"], syn["flow_f"], ones)
        if not one:
            l_syn = 0.5 * (l_syn + _l1(so["flow_b"], syn["flow_b"], ones))
        terms["synthetic"] = l_syn
        return (1 - share) * l_real + share * l_syn, terms

    @jax.jit
    def step(params, opt_state, batch_stats, real, syn, lr):
        (loss, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch_stats, real, syn)
        updates, opt_state = tx.update(grads, opt_state, params)
        updates = jax.tree.map(lambda u: -lr * u, updates)
        return optax.apply_updates(params, updates), opt_state, dict(terms, loss=loss)

    return step


@functools.partial(jax.jit, static_argnums=0)
def _forward(model, variables, g1, g2, bases):
    out = model.apply(variables, g1, g2, bases, None, train=False, confidence=False)
    return out["flow_f"], out["flow_b"]


def network_flows(model, variables, footage: Footage, pairs, batch: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """The network's flows ``[n, h, w, 2]`` (forward, backward) of ``pairs`` (``(clip, t1,
    t2)``) at the network size."""
    ff, fb = [], []
    for lo in range(0, len(pairs), batch):
        sub = pairs[lo:lo + batch]
        c = sub[0][0]
        if any(p[0] != c for p in sub):  # one basis set per call: a clip at a time
            for p in sub:
                a, b = network_flows(model, variables, footage, [p], 1)
                ff.append(a)
                fb.append(b)
            continue
        g1 = np.stack([footage.gray[c][a] for _, a, _ in sub])
        g2 = np.stack([footage.gray[c][b] for _, _, b in sub])
        a, b = _forward(model, variables, g1, g2, footage.bases[c])
        ff.append(np.asarray(a))
        fb.append(np.asarray(b))
    return np.concatenate(ff), np.concatenate(fb)


def footage_batch(footage: Footage, labels, clip: int, pick, rng: np.random.Generator, occluded: float = 0.0,
                  turned=None) -> dict:
    """One step's footage batch: the images of the labelled pairs ``pick`` (indices into
    ``labels``, all of clip ``clip``), their label coefficients and weights, the clip's bases.
    Each pair gets, with probability ``occluded``, a moving occluder cut from a random frame of
    the clip (:mod:`camflow_jax.adaptation.occluders`); its label stays the camera's motion.
    ``turned`` (bools, one a pair): those pairs are turned round (image 2 first, the backward
    label as the forward one), for a step on one direction a row."""
    g = footage.gray[clip]
    g1 = np.stack([g[labels.pairs[i][1]] for i in pick])
    g2 = np.stack([g[labels.pairs[i][2]] for i in pick])
    for j in range(len(pick)):
        if occluded and rng.uniform() < occluded:
            g1[j], g2[j] = occluders.occlude(g1[j], g2[j], g[rng.integers(len(g))], rng)
    wf, wb = (np.stack(w) for w in zip(*(labels.weights(i) for i in pick)))
    out = {"g1": g1, "g2": g2, "cf": labels.coeffs_f[pick], "cb": labels.coeffs_b[pick],
           "wf": wf, "wb": wb, "bases": footage.bases[clip]}
    return out if turned is None else _turned(out, np.asarray(turned, bool), ("g1", "g2"), ("cf", "cb"), ("wf", "wb"))


def _turned(batch: dict, turned: np.ndarray, *swaps) -> dict:
    """``batch`` with, in the rows ``turned``, the two arrays of each pair of keys ``swaps`` exchanged."""
    out = dict(batch)
    for a, b in swaps:
        out[a] = np.where(turned.reshape((-1,) + (1,) * (batch[a].ndim - 1)), batch[b], batch[a])
        out[b] = np.where(turned.reshape((-1,) + (1,) * (batch[b].ndim - 1)), batch[a], batch[b])
    return out


def synthetic_batch(synthetic: SyntheticPool, pick, turned=None) -> dict:
    """The synthetic pairs ``pick`` of the pool; ``turned``: those rows turned round (as
    :func:`footage_batch`)."""
    out = {k: getattr(synthetic, k)[pick] for k in ("g1", "g2", "flow_f", "flow_b", "depth1", "depth2", "K")}
    return out if turned is None else _turned(out, np.asarray(turned, bool), ("g1", "g2"), ("flow_f", "flow_b"),
                                              ("depth1", "depth2"))


def finetune(model, variables, static, sigmas, footage: Footage, labels, train_idx, cfg: AdaptConfig,
             synthetic: SyntheticPool | None = None, *, progress: bool = True, stop=None) -> tuple[dict, dict]:
    """``(variables, history)``: the model's ``variables`` fine-tuned on the kept labels among
    ``train_idx`` (indices into ``labels``), mixed with ``synthetic`` (module doc). ``stop``: a
    callable polled after each step that raises to stop (the variables then are not returned).
    ``history``: steps, seconds, the loss terms every 10 steps."""
    idx = [i for i in train_idx if labels.keep[i]]
    if not idx:
        raise ValueError("the teacher kept no pair to learn from (every pair was dropped: "
                         "too little texture, implausible, or not improved by the refinement)")
    rng = np.random.default_rng(cfg.seed)
    params, batch_stats = variables["params"], variables["batch_stats"]
    tx = optimizer(params, cfg.trainable)
    opt_state = tx.init(params)
    use_syn = synthetic is not None and cfg.synthetic_batch > 0
    step_fn = make_step(model, tx, jnp.asarray(static), tuple(sigmas), cfg.synthetic_share if use_syn else 0.0,
                        directions=cfg.directions)
    one = cfg.directions == 1
    by_clip: dict = {}
    for i in idx:
        by_clip.setdefault(labels.pairs[i][0], []).append(i)
    clips = sorted(by_clip)
    share = np.array([len(by_clip[c]) for c in clips], np.float64)
    t0 = time.perf_counter()
    history = {"steps": 0, "seconds": 0.0, "log": []}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=int(round(cfg.seconds)) if not cfg.max_steps else cfg.max_steps,
                   desc="adapting", unit="s" if not cfg.max_steps else "step", file=sys.stderr, dynamic_ncols=True)
    avg = params if cfg.average else None
    first = 0.0
    try:
        step = 0
        while True:
            c = clips[rng.choice(len(clips), p=share / share.sum())]
            pick = rng.choice(by_clip[c], size=cfg.batch_size, replace=len(by_clip[c]) < cfg.batch_size)
            real = footage_batch(footage, labels, c, pick, rng, cfg.occluders,
                                 rng.uniform(size=len(pick)) < 0.5 if one else None)
            syn = None
            if use_syn:
                s = rng.choice(len(synthetic.g1), size=cfg.synthetic_batch, replace=False)
                syn = synthetic_batch(synthetic, s, rng.uniform(size=len(s)) < 0.5 if one else None)
            lr = learning_rate(cfg, step, time.perf_counter() - t0, first)
            params, opt_state, terms = step_fn(params, opt_state, batch_stats, real, syn, np.float32(lr))
            step += 1
            if step == 1:
                jax.block_until_ready(params)
                first = time.perf_counter() - t0
            if avg is not None:
                avg = _averaged(avg, params, np.float32(average_decay(step, cfg.average)))
            if step % 10 == 0 or step == 1:
                history["log"].append({"step": step, "time": time.perf_counter() - t0, "lr": lr,
                                       **{k: float(v) for k, v in jax.device_get(terms).items()}})
            if stop is not None:
                stop()
            elapsed = time.perf_counter() - t0
            if bar is not None:
                bar.n = step if cfg.max_steps else min(int(elapsed), bar.total)
                bar.refresh()
            if (cfg.max_steps and step >= cfg.max_steps) or (not cfg.max_steps and elapsed >= cfg.seconds):
                break
        jax.block_until_ready(params)
    finally:
        if bar is not None:
            bar.close()
    history.update(steps=step, seconds=time.perf_counter() - t0, pairs_learned=len(idx))
    return {"params": params if avg is None else avg, "batch_stats": batch_stats}, history
