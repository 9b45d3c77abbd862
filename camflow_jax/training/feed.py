"""Where the training loop's batches come from: a :class:`Feed` per ``data.render`` mode.

The loop needs two things of its data: an iterable to start (or resume) an iterator from, whose
iterator the checkpoints save and restore (grain's checkpoint handler: ``get_state`` /
``set_state``), and a way to turn what the iterator yields into the global batch on the mesh.

- ``data.render = "host"``: the grain pipeline (``data/pipeline.py``) renders and prepares each
  pair on the host; :func:`camflow_jax.training.steps.host_to_global` puts each batch on the mesh.
- ``data.render = "device"``: :func:`camflow_jax.data.synthetic.device.make_sharded_renderer`
  renders the batch on the mesh, each device its own rows of the global batch. The batch of
  training step ``s`` (counted from 1) is ``render_batch(bank, seed, s, category_order="random")``: a pure function of
  ``(seed, s)``, so the checkpoint keeps only the next step, and a resumed run renders what the
  uninterrupted run would have.

:func:`train_feed` reads the config and picks one (the loop calls it); :func:`make_train_dataset`
is the host pipeline of a config alone (the benchmarks vary its read options);
:func:`prepare_kwargs` what a config asks of each pair.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable, Iterable

import grain
import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from camflow_jax.data import pipeline
from camflow_jax.data.synthetic import device as synthetic_device
from camflow_jax.training.steps import host_to_global

__all__ = ["Feed", "RenderedBatches", "RenderedIterator", "host_feed", "device_feed", "device_bank", "train_feed",
           "make_train_dataset", "prepare_kwargs"]


@dataclasses.dataclass(frozen=True)
class Feed:
    """``dataset``: what :func:`camflow_jax.training.state.restore_latest` starts iterators from;
    ``put(item)``: an item of such an iterator as the global batch on the mesh; ``mode``:
    ``"host"`` or ``"device"``."""

    dataset: Iterable
    put: Callable
    mode: str


def host_feed(dataset, to_global: Callable) -> Feed:
    """The grain pipeline's batches (``dataset``: a grain ``IterDataset``), put on the mesh by
    ``to_global`` (``host_to_global``)."""
    return Feed(dataset=dataset, put=to_global, mode="host")


def device_bank(seed: int, num_textures: int, textures_dir=None):
    """The texture bank the host's ``SyntheticScenes(seed, num_textures=..., textures_dir=...)``
    draws from: its photos when ``textures_dir`` is set, else its procedural textures."""
    if textures_dir is not None:
        return synthetic_device.photo_bank(textures_dir)
    return synthetic_device.procedural_bank(seed=seed, count=num_textures)


def device_feed(mesh: jax.sharding.Mesh, bank, *, seed: int, batch_size: int, height: int, width: int,
                render_size: tuple[int, int], motion_scale: float, need_depth: bool,
                categories=synthetic_device.CATEGORIES, rows_per_chunk: int | None = None,
                category_order: str = "random") -> Feed:
    """Batches rendered on ``mesh`` (axis ``"data"``) from ``bank`` (replicated here).

    ``rows_per_chunk`` (rows vmapped together; see ``render_batch``): None = 1 on CPUs (a row
    skips the weather and motion redraws it does not need), a device's whole share of the
    batch on accelerators.

    ``category_order``: "random" (the default) draws each row's category, so that the mix of
    categories varies from batch to batch as in the host pipeline's shuffled batches; "cycle"
    gives every batch the same mix (``render_batch``'s default; see ``row_categories``)."""
    local = batch_size // mesh.shape["data"]
    if rows_per_chunk is None:
        rows_per_chunk = 1 if jax.devices()[0].platform == "cpu" else local
    render = synthetic_device.make_sharded_renderer(
        mesh, batch_size=batch_size, height=height, width=width, categories=categories,
        render_size=render_size, need_depth=need_depth, rows_per_chunk=rows_per_chunk, category_order=category_order)
    bank = synthetic_device.replicate_bank(bank, mesh)
    return Feed(dataset=RenderedBatches(render, bank, int(seed), float(motion_scale)), put=lambda b: b,
                mode="device")


class RenderedBatches:
    """Iterable of device-rendered global batches; each iterator starts at training step 1."""

    def __init__(self, render: Callable, bank, seed: int, motion_scale: float):
        self.render, self.bank, self.seed, self.motion_scale = render, bank, seed, motion_scale

    def __iter__(self) -> "RenderedIterator":
        return RenderedIterator(self, next_step=1)


class RenderedIterator:
    """Yields the batches of training steps ``next_step, next_step + 1, ...`` (dispatched
    asynchronously: the render runs on the devices ahead of the step that reads it).

    Checkpointed by grain's handler as bytes: ``{"render": "device", "seed", "next_step"}``. A
    data position written by the host pipeline, or for another seed, is refused (the restore
    then names it)."""

    def __init__(self, batches: RenderedBatches, next_step: int):
        self.batches, self.next_step = batches, int(next_step)

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        b = self.batches
        batch = b.render(b.bank, b.seed, self.next_step, b.motion_scale)
        self.next_step += 1
        return batch

    def get_state(self) -> bytes:
        return json.dumps({"render": "device", "seed": self.batches.seed, "next_step": self.next_step}).encode()

    def set_state(self, state: bytes) -> None:
        saved = json.loads(state)
        if not isinstance(saved, dict) or saved.get("render") != "device":
            raise ValueError("the checkpoint's data position is the host pipeline's (data.render='host'); "
                             "resume with that setting or train into a new workdir")
        if saved["seed"] != self.batches.seed:
            raise ValueError(f"the checkpoint rendered data.train_seed={saved['seed']}, "
                             f"not {self.batches.seed}")
        self.next_step = int(saved["next_step"])

    def start_prefetch(self) -> None:
        """Grain's handler calls this after a restore; rendering is dispatched on demand."""


# ----------------------------------------------------------------------------------------------
# From a training config
# ----------------------------------------------------------------------------------------------

def prepare_kwargs(config) -> dict:
    """The :func:`camflow_jax.data.pipeline.prepare_pair` arguments a training config asks for."""
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
        num_workers=config.data.num_workers, read_nice=config.data.read_nice, **read)


def train_feed(config, source, mesh, **read_overrides) -> Feed:
    """The training batches ``data.render`` asks for (:mod:`camflow_jax.training.feed`): the grain
    pipeline of ``source`` put on ``mesh`` (``read_overrides`` as in :func:`make_train_dataset`),
    or, with 'device', the scenes ``source`` would render (its seed and texture bank, the
    render size, motion scale and categories) rendered on ``mesh``."""
    data_sharding = NamedSharding(mesh, P("data"))
    if config.data.render == "host":
        return host_feed(make_train_dataset(config, source, **read_overrides),
                                  lambda batch: host_to_global(batch, data_sharding))
    scenes = source.scenes  # sources.SyntheticPairs(SyntheticScenes(...), "flow")
    bank = device_bank(scenes.seed, scenes.num_textures, scenes.textures_dir)
    return device_feed(mesh, bank, seed=scenes.seed, batch_size=config.batch_size,
                                height=config.model.height, width=config.model.width,
                                render_size=(scenes.height, scenes.width), motion_scale=scenes.motion_scale,
                                categories=scenes.categories, need_depth=bool(config.bases.use_depth))
