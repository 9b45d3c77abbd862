"""The refinement's settings: :class:`RefineConfig` (working size, pyramid, iterations, robust
width, starts, the basis schedule) and the basis-group schedule helpers (:func:`active_stages`,
:func:`default_groups`). docs/refinement.md explains each setting and how it was chosen."""

from __future__ import annotations

import dataclasses
import math

from camflow_jax.models.camflow import group_layout
from camflow_jax.models.config import DEPTH_GROUP, GROUP_NAMES

__all__ = ['RefineConfig', 'LOOPS', 'shrunk_size', 'active_stages', 'default_groups', 'NOISE_SIZE', 'NOISE_BLOCK', 'OUT_OF_FRAME_WIDTHS']


def shrunk_size(h: int, w: int, longest: int) -> tuple[int, int]:
    """``h x w`` itself, or shrunk (aspect kept, at least 8 px a side) so its longer side is
    ``longest``: the refinement's working size for ``longest = RefineConfig.max_size``."""
    s = min(1.0, longest / max(h, w))
    return max(8, round(h * s)), max(8, round(w * s))


#: Out-of-frame pixels cost as much as a residual of this many Cauchy widths.
OUT_OF_FRAME_WIDTHS = 3.0


#: The noise test (:func:`pair_pyramids`) looks at the grey image halved until its longer side
#: is at most this (the default working size), so ``noise_ratio`` means the same at every size.
NOISE_SIZE = 288
#: The ways a level's iterations can run (:attr:`RefineConfig.loop`).
LOOPS = ("while", "unrolled")
#: The smallest longer side (pixels) the coarsest pyramid level of ``max_size`` may have: ``levels``
#: beyond it are refused (RefineConfig(levels=8) at 288 px would align 3 px images).
MIN_COARSEST = 8


#: The noise test's blocks (pixels a side); an image needs NOISE_BLOCK + 2 a side for one.
NOISE_BLOCK = 8


def _parse_active(entry) -> tuple[tuple[str, ...], ...] | int:
    """An ``active`` entry as an int (first k bases; 0 and ``"all"``: every basis) or its stages
    (tuples of group names). ValueError on anything else."""
    if isinstance(entry, str):
        if entry.strip() == "all":
            return 0
        stages = []
        for stage in entry.split(">"):
            names = tuple(g.strip() for g in stage.split("+"))
            for g in names:
                if g not in GROUP_NAMES and not (
                        g.startswith(DEPTH_GROUP) and g[len(DEPTH_GROUP):].isdigit()):
                    raise ValueError(f"active: unknown basis group {g!r} in {entry!r}; groups are "
                                     f"{list(GROUP_NAMES)} and {DEPTH_GROUP}<s> (depth level s), "
                                     f"joined by '+', stages by '>', or 'all'")
            stages.append(names)
        return tuple(stages)
    if isinstance(entry, (bool, float)) or not isinstance(entry, int) and not hasattr(entry, "__index__"):
        raise ValueError(f"active: an entry is 'all', a count >= 0 or a group schedule string, got {entry!r}")
    if int(entry) < 0:
        raise ValueError(f"active: a count must be >= 0, got {entry}")
    return int(entry)


def default_groups(n: int) -> tuple[tuple[str, int], ...]:
    """The basis layout ``((group, count), ...)`` assumed for ``n`` bases when none is given:
    CamFlow's order, the first 12 homography, the next 12 stochastic, the rest depth."""
    sizes, names = group_layout(min(12, n), min(12, max(0, n - 12)), max(0, n - 24))
    return tuple(zip(names, sizes))


def active_stages(entry, groups) -> tuple[tuple[int, ...], ...]:
    """The basis indices refined by each stage of one ``active`` entry, for a basis set laid
    out as ``groups`` (``((name, count), ...)`` in basis order, e.g. a model's
    ``zip(group_names, group_sizes)``). Groups the set lacks are skipped, and so is a stage left
    empty (a level whose stages are all empty refines nothing) or equal to the one before it
    (CamFlow without depth: ``"homography > homography+depth0"`` is one homography stage); the
    depth group splits into levels of 3 (f^x, f^y, f^z per level)."""
    n = sum(k for _, k in groups)
    parsed = _parse_active(entry)
    if isinstance(parsed, int):
        return (tuple(range(min(parsed, n) if parsed else n)),)
    spans, lo = {}, 0
    for name, k in groups:
        spans[name] = range(lo, lo + k)
        if name == DEPTH_GROUP:
            for s in range(k // 3):
                spans[f"{DEPTH_GROUP}{s}"] = range(lo + 3 * s, lo + 3 * s + 3)
        lo += k
    out = []
    for stage in parsed:
        idx = tuple(sorted({i for g in stage for i in spans.get(g, ())}))
        if idx and (not out or idx != out[-1]):  # a stage the set reduces to its predecessor's: once
            out.append(idx)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class RefineConfig:
    """Settings of :func:`refine_motion` (hashable: a static argument of ``jax.jit``).

    levels: pyramid levels (the finest is the working resolution). A pair too small for them is
      refined with the levels it allows (:meth:`fit_to`, with a note in ``refine_info``).
    iterations: LM iterations per level, coarsest first (at most; a level stops on convergence).
      The default gives the finest level 10 (6 until the tenth round: on development pairs,
      with 6 detail iterations instead of 4, 0.61 -> 0.57 and 0.73 -> 0.69 px, no pair worse;
      docs/refinement.md, "More iterations at the finest levels"). The coarsest level's 8 (12
      until the eleventh round; each of its two basis stages gets them) came with the narrower
      Cauchy width: on the same pairs 0.401 -> 0.393 and 0.402 -> 0.381 px with ~6 fewer
      iterations per direction (6 gave 0.402 and 0.381).
    strides: per level (coarsest first), use every k-th pixel in x and y (the bases stay exact
      at the sampled pixels, so a stride thins the data without biasing the fixed point).
    max_size: images whose longer side exceeds it are refined at this size (the caller resizes).
    local_sigma: Gaussian window (pixels of each level) of the local normalisation.
    presmooth: Gaussian blur (pixels of each level) before normalising (noise, aliasing).
    epsilon: floor of the local standard deviation, in grey levels (0..255): flat regions stay
      flat instead of amplifying noise.
    sigma_min: floor of the robust scale (normalised units).
    cauchy_width: the Cauchy penalty's width c in units of the robust scale sigma. A residual of
      c gets weight 1/2. 0.7 was chosen on development pairs (seeds 7 and 8, 100 pairs each at
      320x576) in the eleventh round: with depth 0.57 -> 0.40 and 0.69 -> 0.40 px, without depth
      3.17 -> 2.95 and 3.54 -> 3.24, against the textbook 2.385 (95 % efficiency on Gaussian
      noise), which lets weather, occlusions and parallax pull the solution
      (docs/refinement.md, "Choices").
    damping: initial LM lambda.
    tol: convergence threshold (pixels of the level) on the flow change of an accepted step.
    active: per level (coarsest first), which bases are refined there (the others keep their
      values): ``"all"`` (or 0); an int k, the first k bases; or stages by basis group, run one
      after the other at that level, each with the level's iteration budget: stages are joined
      by ``">"``, a stage's groups by ``"+"``, a group is ``"homography"``, ``"stochastic"``,
      ``"depth"`` or ``"depth<s>"`` (the depth bases of depth level s: f^x, f^y, f^z). A group
      the basis set lacks is skipped (:func:`active_stages`). The default refines the
      homography first, then with the sharpest depth bases (the camera's translation) at the
      coarsest level, adds the second depth level at the middle one and everything (stochastic
      bases, blurred depth) only at the finest: the network's start puts little weight on
      the depth bases, and letting all 36 bases move at once from there sent pairs into wrong
      minima (docs/refinement.md, "Basis schedule").
    starts: which candidate starts to try ("network", "zero", "homography": a feature
      homography when the caller can compute one); the first is the reference for
      ``cost_before``.
    retry_starts: starts added (to ``starts``) for a second refinement of a pair whose refined
      directions contradict each other in part of the image (the Predictor's check:
      :func:`camflow_jax.geometry.plausibility.forward_backward_errors` worse than
      ``MAX_FB_REGION``): the network can start the refinement in a wrong basin for part of the
      image (a 1.2x zoom), where the homography or zero start reaches the right one. The retry is
      kept when its directions agree better (``refine_info["retry"]``). ``()``: no retry.
    select_after: with several starts, each runs only up to this level (0 = the coarsest), and
      the one with the lowest robust cost there goes on alone (None: every start runs to the
      finest level and the final cost decides; the cheaper choice only skips the losers'
      finer levels).
    noise_presmooth: the pre-blur (pixels of each level) used instead of ``presmooth`` when the
      pair is noisy: when either image's :func:`noise_ratio` exceeds ``noise_ratio`` (dark,
      high-gain frames, where the 1-px pre-blur leaves the normalised images noise-dominated
      and the refinement wanders off). None: never. The threshold sits between the clean and
      the low-light synthetic images and above real photographs with fine texture
      (docs/refinement.md, "Noisy images").
    noise_ratio: the threshold of the noise test (noise floor over median local contrast).
    esm: the Jacobian uses the mean of both images' gradients, grad phi(I_2)(x + F) and
      grad phi(I_1)(x), instead of image 2's alone (efficient second-order minimisation: near the
      solution the step is second-order accurate at first-order cost). On development pairs it
      lowered the EPE at the same iteration budget (docs/refinement.md, "Choices").
    detail_size: a last level above the working size (None: none): when the input is larger
      than ``max_size``, ``detail_iterations`` more iterations over every basis at every
      ``detail_stride``-th pixel of the input itself, or of the input shrunk to this longer side
      (the caller resizes; :meth:`camflow_jax.refine.pairs.PairRefiner.detail_size`). The bases
      there are the working-size ones enlarged bilinearly at those pixels, as the output flow
      is enlarged, so the level refines exactly the flow the caller gets, against the sharper
      images; the flow, weights and costs stay at the working size. It runs only when
      ``detail_size`` exceeds the working size (never for ``at_size(576)``). On development
      pairs it took the mean EPE from 0.84 to 0.67 and 0.95 to 0.74 px (every 8th pixel) for
      about 5 ms a pair (docs/refinement.md, "Detail level").
    detail_iterations: LM iterations at the detail level (at most).
    detail_stride: the detail level uses every k-th pixel in x and y (5: 7,424 pixels at
      320x576, 2.6x the working size's finest level at its stride 4; on development pairs it
      gave 0.61 and 0.73 px against 0.68 and 0.80 for 8, for about 2 ms more a pair:
      docs/refinement.md, "Detail level").
    loop: how a level's iterations run (the results are the same): ``"while"``, a loop that
      stops once the pair has converged (vmapped over a batch: once every pair has), or
      ``"unrolled"``, every iteration of the budget as straight-line code with a converged pair's
      state frozen: no loop test per iteration (on a GPU each test is a device-to-host copy) for
      a program several times larger and a longer compile. At the default budget most
      directions use every iteration at the finer levels (docs/refinement.md, "Batched
      refinement on an accelerator"); which is faster on an accelerator is for a device to say.
    """

    levels: int = 3
    iterations: tuple[int, ...] = (8, 10, 10)
    strides: tuple[int, ...] = (1, 2, 4)
    max_size: int = 288
    local_sigma: float = 4.0
    presmooth: float = 1.0
    epsilon: float = 2.0
    sigma_min: float = 0.02
    cauchy_width: float = 0.7
    damping: float = 1e-3
    tol: float = 0.02
    active: tuple[int | str, ...] = ("homography > homography+depth0", "homography+depth0+depth1", "all")
    starts: tuple[str, ...] = ("network",)
    retry_starts: tuple[str, ...] = ("homography", "zero")
    select_after: int | None = None
    noise_presmooth: float | None = 2.0
    noise_ratio: float = 0.17
    esm: bool = True
    detail_size: int | None = 576
    detail_iterations: int = 6
    detail_stride: int = 5
    loop: str = "while"

    def __post_init__(self):
        if self.levels < 1:
            raise ValueError(f"refinement needs at least one level, got {self.levels}")
        coarsest = self.max_size / 2 ** (self.levels - 1)
        if coarsest < MIN_COARSEST:  # a level of a few pixels holds nothing to align (issue 63)
            most = 1 + max(0, int(math.floor(math.log2(max(self.max_size, 1) / MIN_COARSEST))))
            raise ValueError(f"refinement setting levels={self.levels} halves the working size (max_size "
                             f"{self.max_size} px) {self.levels - 1} times: the coarsest level would be "
                             f"{coarsest:.3g} px, under {MIN_COARSEST} px; use at most {most} levels, or a "
                             "larger max_size (RefineConfig.at_size)")
        if len(self.iterations) != self.levels or any(int(i) < 0 for i in self.iterations):
            raise ValueError(f"iterations must give {self.levels} non-negative counts (coarsest "
                             f"first), got {self.iterations}")
        if len(self.strides) != self.levels or any(int(k) < 1 for k in self.strides):
            raise ValueError(f"strides must give {self.levels} positive steps (coarsest first), got {self.strides}")
        if len(self.active) != self.levels:
            raise ValueError(f"active must give {self.levels} entries (coarsest first), got {self.active}")
        for a in self.active:
            _parse_active(a)  # raises on a bad entry
        if self.max_size < 16:
            raise ValueError(f"max_size must be >= 16, got {self.max_size}")
        if self.detail_size is not None and (isinstance(self.detail_size, bool) or int(self.detail_size) < 16):
            raise ValueError(f"detail_size must be None or >= 16, got {self.detail_size}")
        if isinstance(self.detail_iterations, bool) or int(self.detail_iterations) < 0:
            raise ValueError(f"detail_iterations must be >= 0, got {self.detail_iterations}")
        if isinstance(self.detail_stride, bool) or int(self.detail_stride) < 1:
            raise ValueError(f"detail_stride must be >= 1, got {self.detail_stride}")
        for name in ("local_sigma", "epsilon", "sigma_min", "cauchy_width", "damping", "tol"):
            v = getattr(self, name)
            if not (v == v and 0 < v < float("inf")):
                raise ValueError(f"refinement setting {name} must be a positive number, got {v}")
        if not (self.presmooth == self.presmooth and 0 <= self.presmooth < float("inf")):
            raise ValueError(f"presmooth must be >= 0, got {self.presmooth}")
        if self.noise_presmooth is not None and not (
                self.noise_presmooth == self.noise_presmooth and 0 <= self.noise_presmooth < float("inf")):
            raise ValueError(f"noise_presmooth must be None or >= 0, got {self.noise_presmooth}")
        if not (self.noise_ratio == self.noise_ratio and 0 < self.noise_ratio < float("inf")):
            raise ValueError(f"noise_ratio must be a positive number, got {self.noise_ratio}")
        if self.select_after is not None and not 0 <= int(self.select_after) < self.levels:
            raise ValueError(f"select_after must be None or a level in 0..{self.levels - 1}, got {self.select_after}")
        if self.loop not in LOOPS:
            raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {self.loop!r}")
        known = {"network", "zero", "homography"}
        if not self.starts or any(s not in known for s in self.starts) or len(set(self.starts)) != len(self.starts):
            raise ValueError(f"starts must be distinct names from {sorted(known)}, got {self.starts}")
        if any(s not in known for s in self.retry_starts) or len(set(self.retry_starts)) != len(self.retry_starts):
            raise ValueError(f"retry_starts must be distinct names from {sorted(known)} (or empty), got {self.retry_starts}")
        object.__setattr__(self, "iterations", tuple(int(i) for i in self.iterations))
        object.__setattr__(self, "strides", tuple(int(i) for i in self.strides))
        object.__setattr__(self, "active", tuple(a if isinstance(a, str) else int(a) for a in self.active))
        object.__setattr__(self, "starts", tuple(self.starts))
        object.__setattr__(self, "retry_starts", tuple(self.retry_starts))
        object.__setattr__(self, "detail_size", None if self.detail_size is None else int(self.detail_size))
        object.__setattr__(self, "detail_iterations", int(self.detail_iterations))
        object.__setattr__(self, "detail_stride", int(self.detail_stride))

    @classmethod
    def at_size(cls, max_size: int, **changes) -> "RefineConfig":
        """The default settings carried to a larger working size: one pyramid level more per
        doubling of the default's 288 px (rounded), so the coarsest level keeps its size and
        reach (exactly for 576, 1152, ...; within a factor sqrt(2) otherwise); each new finer level doubles the stride (the same number of sampled pixels per
        level) and gets 4 iterations. ``at_size(288)`` is the default;
        ``at_size(576)`` is ``levels=4, iterations=(8, 10, 10, 4), strides=(1, 2, 4, 8)`` and the
        default's ``active`` with ``"all"`` at the new level. ~3-4x slower at 576. With the
        eleventh round's defaults it is more precise on finely textured real images (Aloe with
        depth 0.209 against 0.332 px) but not on the synthetic benchmark's average (0.22
        against 0.21 px: RE better, rain and snow worse). In the seventh round, with the wider
        Cauchy width, it gave 0.45 against 0.67 there. Dark, noisy frames need the noise test
        there. docs/refinement.md, "Working resolution".
        ``changes``: other settings, as :meth:`replace`."""
        base = cls()
        if not max_size >= base.max_size:
            raise ValueError(f"at_size needs max_size >= {base.max_size} (the default's), got {max_size}")
        extra = int(round(math.log2(max_size / base.max_size)))
        cfg = dataclasses.replace(
            base, max_size=int(max_size), levels=base.levels + extra,
            iterations=base.iterations + (4,) * extra,
            strides=base.strides + tuple(base.strides[-1] * 2 ** (i + 1) for i in range(extra)),
            active=base.active + ("all",) * extra)
        return cfg.replace(**changes)

    def fit_to(self, longest: int) -> "RefineConfig":
        """These settings for a working size whose longer side is ``longest`` px (a pair smaller than
        ``max_size`` is refined at its own size): the config itself when its levels fit, else the
        levels the pair allows, as :class:`camflow_jax.refine.pairs.PairRefiner` refines it:

        * a config set for more than 288 px (:meth:`at_size`: one level more per doubling) gets
          one level fewer per halving of ``max_size`` down to the working size (or 288 px), never
          fewer than the default's 3: ``at_size(4608)`` on a 192 px pair is ``at_size(288)``'s
          levels, as ``--refine-size`` does (its finer levels' strides, every 16th to 64th pixel,
          left a small pair a few samples a row and the refinement fell back silently);
        * then no level under :data:`MIN_COARSEST` px on its longer side (the rule the config's
          own check applies to ``max_size``; a level of 1 px ended in JAX's "too small to
          calculate a numerical gradient").

        The kept levels are the coarsest ones, with their iterations and strides (each stays at
        about the size it was set for); the finest kept level refines what the config's finest
        level does (its ``active`` entry), so every basis the config refines still is.
        ``max_size`` becomes the working size (the pair is refined at its own size as before),
        which makes ``fit_to`` idempotent; ``select_after`` is kept within the levels."""
        longest = int(longest)
        if longest >= self.max_size:
            return self
        base = type(self)
        set_for = round(math.log2(self.max_size / base.max_size)) if self.max_size > base.max_size else 0
        fits = round(math.log2(max(longest, base.max_size) / base.max_size))
        levels = self.levels - max(0, min(set_for - fits, self.levels - base.levels))
        by_size = 1 + int(math.floor(math.log2(longest / MIN_COARSEST))) if longest >= MIN_COARSEST else 1
        levels = max(1, min(levels, by_size))
        if levels == self.levels:
            return self
        return self.replace(levels=levels, iterations=self.iterations[:levels], strides=self.strides[:levels],
                            active=self.active[:levels - 1] + (self.active[-1],), max_size=max(16, longest),
                            select_after=None if self.select_after is None else min(self.select_after, levels - 1))

    def replace(self, **changes) -> "RefineConfig":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown refinement setting(s) {sorted(unknown)}; valid: "
                             f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)
