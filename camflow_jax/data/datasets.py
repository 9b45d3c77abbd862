"""The datasets, training and evaluation, in one registry (docs/training.md, docs/evaluation.md,
docs/real_images.md). Each :class:`Dataset` may be read for training (:func:`training_source`:
a random-access source of training pairs from a ``config.data``), for evaluation
(:func:`load_dataset`: a benchmark source with ``categories``), or both.

Training: ``synthetic`` (rendered on the fly), ``ghof``, ``cahomo`` and ``frames`` (a folder of
videos' frames labelled by SIFT + MAGSAC++ homographies); :mod:`camflow_jax.data.sources` has
the readers.

Benchmarks (random-access sources with ``categories``; the readers live in
:mod:`camflow_jax.data.benchmarks`, which the training sources share for the GHOF intrinsics and
the band-wise gyro flow, and :mod:`camflow_jax.data.synthetic.scenes`):

* ``ghof_cam``, ``ghof``, ``cahomo``: the public benchmark files (``data`` = their path);
* ``synthetic``: the held-out ``SyntheticScenes(seed, num, height, width)`` (no download; the
  same generator as the training pipeline's ``data.name = "synthetic"`` evaluation split, which
  uses ``data.eval_seed`` / ``data.num_eval``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from camflow_jax.data import benchmarks, sources
from camflow_jax.data.synthetic.scenes import CATEGORIES, SyntheticScenes

__all__ = ["Dataset", "REGISTRY", "DATASETS", "TRAIN_DATASETS", "training_source", "load_dataset", "categories"]


@dataclass(frozen=True)
class Dataset:
    """A registered dataset: ``load(data, **options)`` builds its benchmark source (None: not an
    evaluation set), ``train(data_cfg, height, width, split)`` its training source (None: not a
    training set)."""
    name: str
    description: str
    needs_data: bool
    load: Callable | None = None
    train: Callable | None = None


def _ghof_cam(data, *, depth_dir=None, intrinsics=None, **_):
    kw = {} if intrinsics is None else {"intrinsics": intrinsics}
    return benchmarks.GHOFCam(data, depth_dir=depth_dir, **kw)


def _ghof(data, *, depth_dir=None, intrinsics=None, **_):
    kw = {} if intrinsics is None else {"intrinsics": intrinsics}
    return benchmarks.GHOFBenchmark(data, depth_dir=depth_dir, **kw)


def _cahomo(data, *, depth_dir=None, intrinsics=None, list_file=None, **_):
    return benchmarks.CAHomoTest(data, list_file=list_file, depth_dir=depth_dir, intrinsics=intrinsics)


def _synthetic(data, *, num=None, seed=1000, size=(320, 576), **_):
    n = 100 if num is None else int(num)
    return SyntheticScenes(seed=seed, num_samples=n, height=int(size[0]), width=int(size[1]),
                           textures_dir=data)


def _synthetic_train(data_cfg, height: int, width: int, split: str):
    rh = data_cfg.render_height or (height + height // 8)
    rw = data_cfg.render_width or (width + width // 8)
    seed, n = ((data_cfg.train_seed, data_cfg.num_train) if split == "train"
               else (data_cfg.eval_seed, data_cfg.num_eval))
    scenes = SyntheticScenes(seed=seed, num_samples=n, height=rh, width=rw,
                             motion_scale=data_cfg.get("motion_scale", 1.0),
                             homography=data_cfg.label == "homography")
    return sources.SyntheticPairs(scenes, data_cfg.label)


#: name -> :class:`Dataset`; the evaluation sets in the order the CLI lists them, then the
#: training-only ones.
REGISTRY = {d.name: d for d in (
    Dataset("ghof_cam", "GHOF-Cam.npy (GT camera flow, mask, homography field)", True, load=_ghof_cam),
    Dataset("ghof", "GHOF_Clean_*.npy / GHOF_Final_*.npy (gyro homographies, optical flow); training: "
            "the GHOF training folder", True, load=_ghof,
            train=lambda c, h, w, split: sources.GhofTrain(c.path, c.depth_pattern)),
    Dataset("cahomo", "CAHomo test folder (6 annotated point pairs per image pair); training: the "
            "CAHomo training folder", True, load=_cahomo, train=lambda c, h, w, split: sources.CahomoTrain(c.path)),
    Dataset("synthetic", "held-out SyntheticScenes(seed, num, HxW); data = optional texture folder",
            False, load=_synthetic, train=_synthetic_train),
    Dataset("frames", "training: a folder of videos' frames, pairs labelled by SIFT + MAGSAC++ homographies",
            True, train=lambda c, h, w, split: sources.FramePairs(c.path, c.frame_gap)),
)}
#: The evaluation datasets (``evaluate --dataset``).
DATASETS = tuple(n for n, d in REGISTRY.items() if d.load is not None)
#: The training datasets (``config.data.name``).
TRAIN_DATASETS = tuple(n for n, d in REGISTRY.items() if d.train is not None)


def training_source(data_cfg, height: int, width: int, split: str = "train"):
    """The training pair source a ``config.data`` describes (``split``: 'train' or 'eval')."""
    spec = REGISTRY.get(data_cfg.name)
    if spec is None or spec.train is None:
        raise ValueError(f"unknown data.name {data_cfg.name!r}; choose {', '.join(TRAIN_DATASETS)}")
    if spec.needs_data and not data_cfg.path:
        raise ValueError(f"data.name={data_cfg.name!r} needs data.path (the dataset folder)")
    return spec.train(data_cfg, height, width, split)


def load_dataset(dataset: str, data=None, *, num: int | None = None, seed: int = 1000,
                 size: tuple[int, int] = (320, 576), depth_dir=None, intrinsics=None,
                 list_file: str | None = None):
    """Returns a random-access source with ``categories`` for one of :data:`DATASETS`."""
    spec = REGISTRY.get(dataset)
    if spec is None or spec.load is None:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {DATASETS}")
    if spec.needs_data and data is None:
        raise ValueError(f"--data is required for dataset {dataset!r} (path to the benchmark)")
    return spec.load(data, num=num, seed=seed, size=size, depth_dir=depth_dir, intrinsics=intrinsics,
                     list_file=list_file)


def categories(source) -> tuple[str, ...]:
    """The table columns of a source (its ``categories``; the synthetic ones otherwise)."""
    cats = getattr(source, "categories", None)
    if cats is None:
            cats = CATEGORIES
    return tuple(cats)
