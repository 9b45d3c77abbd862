"""grain input pipelines: sources from a config, resize/crop of training pairs, batching.

The global batch of step k is the same whatever the number of processes: each process reads
the rows ``[p * b, (p + 1) * b)`` of it (``b`` = global batch / process count), so a run on
several hosts sees exactly the data of a single-host run.

Everything the pipeline runs per pair (the sources' reads and labels, resize, crop, depth and
intrinsics updates) is numpy/OpenCV, never JAX: it runs in grain's read threads and worker
processes, and a worker process that touched ``jax.numpy`` would initialise a JAX backend of
its own (on a GPU machine that fails: "Unable to initialize backend 'cuda'").
tests/data/test_train_workers.py trains with workers whose JAX cannot start.
"""

from __future__ import annotations

import os
import sys
import threading

import cv2
import grain
import numpy as np

from camflow_jax.data import depth as depth_lib
from camflow_jax.geometry import host
from camflow_jax.io.cpus import usable_cpus

_ALWAYS = ("img1", "img2", "flow_f", "flow_b", "label_mask_f", "label_mask_b", "category_id")


def _resize_pair(s: dict, h: int, w: int) -> dict:
    """Resizes every field of a training pair to h x w (flows rescaled, K updated)."""
    h0, w0 = s["img1"].shape[:2]
    if (h0, w0) == (h, w):
        return s
    out = dict(s)
    sx, sy = w / w0, h / h0
    for k in ("img1", "img2"):
        out[k] = cv2.resize(s[k], (w, h), interpolation=cv2.INTER_LINEAR)
    for k in ("flow_f", "flow_b", "gt_flow_f"):
        if k in s:
            out[k] = cv2.resize(s[k], (w, h), interpolation=cv2.INTER_LINEAR) * np.float32([sx, sy])
    for k in ("label_mask_f", "label_mask_b", "gt_valid_f"):
        if k in s:  # nearest: never blends valid with invalid pixels
            out[k] = cv2.resize(s[k], (w, h), interpolation=cv2.INTER_NEAREST)
    for k in ("depth1", "depth2"):
        if k in s:  # the image's geometry (evaluation and inference resize depth the same way)
            out[k] = depth_lib.resize_depth(s[k], h, w)
    if "K" in s:
        out["K"] = host.resize_intrinsics(s["K"], (h0, w0), (h, w))
    return out


def _crop_pair(s: dict, top: int, left: int, h: int, w: int) -> dict:
    """Same-offset crop of both frames: flow vectors are unchanged, K's principal point shifts."""
    out = {}
    for k, v in s.items():
        if isinstance(v, np.ndarray) and v.ndim >= 2 and k != "K":
            out[k] = np.ascontiguousarray(v[top:top + h, left:left + w])
        else:
            out[k] = v
    if "K" in s:
        out["K"] = host.crop_intrinsics(s["K"], top, left)
    return out


def prepare_pair(sample: dict, height: int, width: int, resize=(0, 0),
                 rng: np.random.Generator | None = None, need_depth: bool = False) -> dict:
    """Resize (optional) then crop a training pair to the network size ``height x width``.

    A random crop when ``rng`` is given (training), else the centre crop (evaluation).
    """
    missing = [k for k in _ALWAYS if k not in sample]
    if missing:
        raise ValueError(f"training pair lacks {missing}")
    s = dict(sample)
    if resize and resize[0] and resize[1]:
        s = _resize_pair(s, int(resize[0]), int(resize[1]))
    h0, w0 = s["img1"].shape[:2]
    if h0 < height or w0 < width:
        s = _resize_pair(s, max(h0, height), max(w0, width))
        h0, w0 = s["img1"].shape[:2]
    if rng is None:
        top, left = (h0 - height) // 2, (w0 - width) // 2
    else:
        top, left = int(rng.integers(0, h0 - height + 1)), int(rng.integers(0, w0 - width + 1))
    s = _crop_pair(s, top, left, height, width)
    if need_depth:
        if "depth1" not in s or "K" not in s:
            raise ValueError("bases.use_depth=True needs depth1/depth2 and K from the data "
                             "(set data.depth_pattern, or bases.use_depth=False)")
    out = {k: s[k] for k in _ALWAYS}
    out["img1"], out["img2"] = s["img1"].astype(np.uint8), s["img2"].astype(np.uint8)
    for k in ("flow_f", "flow_b", "label_mask_f", "label_mask_b"):
        out[k] = s[k].astype(np.float32)
    if need_depth:
        out.update(depth1=s["depth1"].astype(np.float32), depth2=s["depth2"].astype(np.float32),
                   K=np.asarray(s["K"], np.float32))
    if "gt_flow_f" in s:
        out["gt_flow_f"], out["gt_valid_f"] = s["gt_flow_f"].astype(np.float32), s["gt_valid_f"].astype(np.float32)
    out["category_id"] = np.int32(s["category_id"])
    return out


#: ``data.num_workers`` value meaning "choose from the machine" (:func:`resolve_num_workers`).
AUTO_WORKERS = -1
#: Cores left to the trainer's own process (its train-step dispatch, host-to-device copies and
#: the threads that collect the workers' batches) when the worker count is chosen automatically.
RESERVED_CORES = 2
#: At most this many automatic workers: each is a process with its own copy of the pipeline and
#: its own prefetched batches, so memory grows with the count.
MAX_AUTO_WORKERS = 16


def resolve_num_workers(num_workers, cpus: int | None = None) -> int:
    """The number of grain worker processes ``data.num_workers`` asks for: itself when >= 0
    (0: read in the training process), and for :data:`AUTO_WORKERS` (-1) one per usable core
    (``cpus``, default :func:`usable_cpus`) less :data:`RESERVED_CORES`, at most
    :data:`MAX_AUTO_WORKERS` and at least 0 (so 0 on a 2-core machine, 14 on 16 cores); a count
    above the usable cores is clamped to them. Any other value is a ValueError."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < AUTO_WORKERS:
        raise ValueError(f"data.num_workers must be an integer >= 0, or {AUTO_WORKERS} to choose from the "
                         f"machine's cores, got {num_workers!r}")
    cpus = usable_cpus() if cpus is None else int(cpus)
    if num_workers != AUTO_WORKERS:
        # More worker processes than usable cores only compete for them (64 on 2 cores: 8x
        # slower): clamped, and the trainer says so (clamped_workers_note).
        return min(int(num_workers), max(cpus, 1))
    return max(0, min(cpus - RESERVED_CORES, MAX_AUTO_WORKERS))


def clamped_workers_note(num_workers, cpus: int | None = None) -> str | None:
    """The warning when ``data.num_workers`` asks for more processes than there are usable
    cores (:func:`resolve_num_workers` clamps it), else None."""
    got = resolve_num_workers(num_workers, cpus)
    if num_workers == AUTO_WORKERS or got == num_workers:
        return None
    return (f"data.num_workers={num_workers} is more than the {got} usable core(s) of this process: "
            f"using {got} worker process(es)")


def lower_thread_priority(nice: int) -> bool:
    """Raises the calling thread's nice value to ``nice`` (Linux, where nice is per thread; a
    no-op elsewhere, for ``nice <= 0`` and where it is already at least that). Returns whether
    it changed. Without privileges a thread cannot lower it again."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) >= nice:
            return False
        os.setpriority(os.PRIO_PROCESS, tid, min(int(nice), 19))
    except OSError:  # a sandbox that forbids it: run at the normal priority
        return False
    return True


class _PrepareRandom(grain.transforms.RandomMap):
    """The random crop of a training pair. With ``nice > 0``, every thread that runs it other than
    the main thread of the process that built the pipeline (grain's read threads, worker
    processes) lowers its own priority on its first call: on a small CPU machine the train
    step's threads then get the cores first and the reads fill the gaps between its ops."""

    def __init__(self, nice: int = 0, **kw):
        self.kw, self.nice, self._owner = kw, int(nice), os.getpid()
        self._seen: set[int] = set()

    def __getstate__(self):  # grain's worker processes get a copy
        return {**self.__dict__, "_seen": set()}

    def random_map(self, element, rng):
        if self.nice > 0:
            tid = threading.get_native_id()
            if tid not in self._seen:
                self._seen.add(tid)
                if os.getpid() != self._owner or threading.current_thread() is not threading.main_thread():
                    lower_thread_priority(self.nice)
        return prepare_pair(element, rng=rng, **self.kw)


def train_dataset(source, *, seed: int, global_batch: int, process_index: int, process_count: int,
                  prepare_kwargs: dict, num_workers: int = 0, prefetch: int = 2,
                  read_threads: int = 1, read_nice: int = 0) -> grain.IterDataset:
    """Shuffled, repeated, randomly cropped batches of this process's rows of the global batch.

    ``read_threads`` threads prepare batches ahead, at most ``prefetch`` of them. grain's defaults
    (16 threads, 500 batches) compete with the train step for the cores on small CPU machines
    and buffer hundreds of batches (500 batches of 8 pairs at 320x576 with their labels and
    depth are tens of GiB). ``read_nice > 0``: those threads (and worker processes) run at that
    nice value (Linux), so they take the cores only when the train step leaves them idle; the
    README's 64x128 run is ~4% faster with 19 on 2 cores (docs/performance.md).
    ``num_workers``: grain worker processes (0: none; -1: :func:`resolve_num_workers` chooses).
    """
    if global_batch % process_count:
        raise ValueError(f"batch_size {global_batch} must be divisible by the {process_count} processes")
    local = global_batch // process_count
    num_workers = resolve_num_workers(num_workers)
    ds = grain.MapDataset.source(source).shuffle(seed=seed).repeat(None)
    ds = ds.random_map(_PrepareRandom(nice=read_nice, **prepare_kwargs), seed=seed)
    ds = ds.batch(local, drop_remainder=True)[process_index::process_count]
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=max(int(read_threads), 0),
                                              prefetch_buffer_size=max(int(prefetch), 1)))
    if num_workers > 0:
        from absl import flags

        if not flags.FLAGS.is_parsed():
            # grain's worker processes read absl flags; outside an absl app (notebooks, argparse
            # tools) they are unparsed and grain fails. Use the flags' defaults.
            flags.FLAGS.mark_as_parsed()
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers, per_worker_buffer_size=prefetch))
    return it


def eval_batches(source, batch: int, prepare_kwargs: dict):
    """Centre-cropped evaluation batches (every sample once, the last batch may be short)."""
    ds = grain.MapDataset.source(source).map(lambda s: prepare_pair(s, **prepare_kwargs))
    return ds.batch(batch, drop_remainder=False).to_iter_dataset()
