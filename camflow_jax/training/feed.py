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

This module gets plain values (the loop reads the config: ``loop.train_feed``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable, Iterable

import jax

from camflow_jax.data.synthetic import device as synthetic_device

__all__ = ["Feed", "RenderedBatches", "RenderedIterator", "host_feed", "device_feed", "device_bank"]


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
