"""The refinement of one pair as the Predictor runs it: :class:`PairRefiner`.

Given the network's estimate of a landscape pair at the input's resolution, it works at the
refinement's working size (the input, or shrunk so its longer side is ``RefineConfig.max_size``;
a detail level up to ``RefineConfig.detail_size``), in jitted calls per pair:

1. the pair's image pyramids and detail stacks (:func:`camflow_jax.refine.pyramid.pair_pyramids`,
   :func:`~camflow_jax.refine.pyramid.detail_stacks`: each image once);
2. per direction, two calls, compiled once for both directions and run in two threads on a
   multi-core CPU: its basis set (the network's static bases resized to the working size, as a
   :class:`~camflow_jax.refine.pyramid.BasisPyramid` cached per size, joined with depth bases
   built from that direction's depth) and its start coefficients (``RefineConfig.starts``);
   then the solver (:func:`camflow_jax.refine.solver.refine_with_pyramids`);
3. the forward flow's homography.

Host work around them (cv2, cheap): grey images and depth resized to the working size, the
SIFT start, and the refined flows and weights resized back.

The jitted pieces keep their traced programs on disk (:class:`camflow_jax.compilation.exported.ExportedJit`)
and their compiled ones in JAX's persistent compilation cache, so a fresh process refining a
pair of a size it saw before neither traces nor compiles them.
"""

from __future__ import annotations

import concurrent.futures
import threading

import cv2
import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax import bases as bases_mod
from camflow_jax.compilation import cache
from camflow_jax.compilation.exported import ExportedJit
from camflow_jax.compilation.memo import BoundedMemo
from camflow_jax.geometry import classical, device, host
from camflow_jax.io.cpus import usable_cpus
from camflow_jax.refine import pyramid as refine_pyramid
from camflow_jax.refine import solver as refine_solver
from camflow_jax.refine.config import RefineConfig, shrunk_size

__all__ = ["PairRefiner", "PERCENTILE_STRIDE"]

#: The refinement's depth bases take the percentiles that scale them from every k-th pixel in x
#: and y (:func:`camflow_jax.bases.depth_translational_components`).
PERCENTILE_STRIDE = 4


def flow_homography(flow):
    """The homography of a flow ``[h, w, 2]``, fitted at every other pixel (a quarter of the
    DLT's work; exact for a homography flow: :func:`camflow_jax.geometry.device.fit_homography_strided`)."""
    return device.fit_homography_strided(flow, 2)


class PairRefiner:
    """Refines a network's estimate of a pair in the span of its bases (see the module's doc).

    Args:
      static_bases: ``[N_static, h, w, 2]`` the network's homography + stochastic bases at its
        own size ``h x w``.
      num_depth: the number of depth bases (0: CamFlow, no depth group).
      depth_sigmas: the depth pyramid's blurs at the network's width.
      basis_groups: ``((name, count), ...)``, the basis layout ``RefineConfig.active`` refers to.
    """

    def __init__(self, static_bases, num_depth: int = 0, depth_sigmas=None, basis_groups=None):
        cache.enable()
        self.static_bases = static_bases
        self.height, self.width = (int(s) for s in static_bases.shape[1:3])
        self.num_depth = int(num_depth)
        self.depth_sigmas = depth_sigmas
        self.basis_groups = basis_groups
        # Three jitted pieces (bases, images, one direction), each compiled once per working
        # size: one jit around all of them ran 1.2-1.4x slower on a 2-core CPU (XLA fused the
        # depth-basis construction into the solver's consumers; docs/refinement.md, "Cost").
        # Each keyed by what it reads besides its arguments (the static bases are an argument).
        key = (self.height, self.width, self.num_depth,
               None if depth_sigmas is None else tuple(float(s) for s in depth_sigmas), basis_groups)
        self._basis_pyramid = ExportedJit(self._basis_pyramid_impl, name="PairRefiner.basis_pyramid",
                                          static_argnames=("size", "cfg", "detail_hw"))
        self._refine_images = ExportedJit(self._refine_images_impl, name="PairRefiner.images",
                                          static_argnames=("cfg",))
        # A direction as two calls: in one program XLA fused the depth bases' samples at the
        # detail level into the solver's consumers, ~3.5 ms more a direction at 320x576
        # (docs/performance.md, "The refinement's cost").
        self._direction_bases = ExportedJit(self._direction_bases_impl, name="PairRefiner.direction_bases",
                                            key=key, static_argnames=("size", "input_hw", "detail_hw", "cfg"))
        self._refine_direction = ExportedJit(self._solve_direction_impl, name="PairRefiner.direction", key=key,
                                             static_argnames=("cfg",))
        # a constant depth's depth bases (e.g. none given: the Predictor's ones), built once per size
        self._depth_pyramid = ExportedJit(self._depth_pyramid_impl, name="PairRefiner.depth_pyramid", key=key,
                                          static_argnames=("size", "input_hw", "detail_hw", "cfg"))
        self._depth_cache = BoundedMemo(4)
        self._flow_homography = ExportedJit(flow_homography, name="PairRefiner.flow_homography")
        # the batched path (refine_batch): every pair of a batch, both directions, in one program
        self._refine_batch = ExportedJit(self._refine_batch_impl, name="PairRefiner.batch", key=key,
                                         static_argnames=("input_hw", "cfg"))
        self._static_cache = BoundedMemo(1)  # one size at a time: bounded memory
        self._pool = None  # two threads for the pair's directions on a multi-core CPU (_in_parallel)
        self._pool_lock = threading.Lock()

    def working_size(self, h: int, w: int, cfg: "RefineConfig") -> tuple[int, int]:
        """The refinement's resolution for an ``h x w`` (landscape) input: the input itself, or
        shrunk so its longer side is ``cfg.max_size``."""
        return shrunk_size(h, w, cfg.max_size)

    def fit_config(self, h: int, w: int, cfg: "RefineConfig") -> tuple["RefineConfig", str]:
        """``(settings, note)`` for an ``h x w`` (landscape) input: ``cfg`` and no note when its
        pyramid fits the working size, else :meth:`RefineConfig.fit_to` of it (the levels the
        pair allows) and a note saying so (``refine_info["note"]``)."""
        hw = self.working_size(h, w, cfg)
        fitted = cfg.fit_to(max(hw))
        if fitted is cfg:
            return cfg, ""
        coarsest = max(hw) / 2 ** (cfg.levels - 1)
        return fitted, (f"a {w}x{h} pair is too small for the refinement's {cfg.levels} pyramid levels (set for "
                        f"{cfg.max_size} px; the coarsest would be {coarsest:.3g} px): refined with {fitted.levels}, "
                        "the settings of its coarsest ones (RefineConfig.fit_to)")

    def detail_size(self, h: int, w: int, cfg: "RefineConfig") -> tuple[int, int] | None:
        """The refinement's detail level's resolution for an ``h x w`` (landscape) input, or
        None when it has none: the input itself, or shrunk so its longer side is
        ``cfg.detail_size``, when that is larger than the working size
        (:meth:`working_size`)."""
        if cfg.detail_size is None:
            return None
        hd, wd = shrunk_size(h, w, cfg.detail_size)
        hw, ww = self.working_size(h, w, cfg)
        return (hd, wd) if hd >= hw and wd >= ww and (hd, wd) != (hw, ww) else None

    def _static_refine_bases(self, size, cfg, detail_hw=None):
        """The network's static bases at the refinement's working ``size``, resized as its
        output flow is (align-corners, values scaled) so their coefficients mean what the
        network's do, as a :class:`camflow_jax.refine.BasisPyramid` for ``cfg``, with their
        samples at the detail level's pixels when ``detail_hw`` (its size) is given. Cached per
        size and config (a video or a benchmark of equal frames builds it once; both directions
        of a pair share it)."""
        key = (size, cfg.levels, cfg.strides, detail_hw, cfg.detail_stride if detail_hw else None)
        return self._static_cache.get(key, lambda: self._basis_pyramid(self.static_bases, size=tuple(size), cfg=cfg,
                                                                       detail_hw=detail_hw))

    @staticmethod
    def _basis_pyramid_impl(static_bases, *, size, cfg, detail_hw):
        """The static bases resized to ``size`` (jitted with the pyramid: one program, where the
        resize as eager operations compiled ~25 small ones per size)."""
        (h, w), (sh, sw) = size, static_bases.shape[1:3]
        u = device.resize_bilinear_align_corners(static_bases[..., :1], h, w)[..., 0] * (w / sw)
        v = device.resize_bilinear_align_corners(static_bases[..., 1:], h, w)[..., 0] * (h / sh)
        bp = refine_pyramid.basis_pyramid((u, v), cfg)
        return bp if detail_hw is None else refine_pyramid.with_detail(bp, detail_hw, cfg.detail_stride)

    def _depth_bases(self, depth, K, cfg):
        """Depth bases built at the working size from the depth map (sharper than resized
        network-size ones), scaled to the network grid's pixel units so their coefficients
        compare with the network's (a :class:`camflow_jax.refine.BasisPyramid`)."""
        h, w = depth.shape
        sigmas = tuple(float(s) * w / self.width for s in self.depth_sigmas)
        # the percentiles that scale each basis from every 4th pixel in x and y: 16x fewer values
        # (~1 ms a direction at 288 px), scales within ~1 % of the exact ones
        du, dv = bases_mod.depth_translational_components(depth, K, sigmas, percentile_stride=PERCENTILE_STRIDE)
        return refine_pyramid.basis_pyramid((du * (w / self.width), dv * (h / self.height)), cfg)

    def _refine_pair(self, static_bp, g1, g2, d1, d2, K, coeffs, hflows, detail, *, input_hw, cfg,
                     constant_depth=None):
        """Both directions of a pair at the working size: the images' pyramids (each image once:
        it is image 2 of one direction and image 1 of the other) and detail stacks in one jitted
        call, then each direction in two more (its basis set: the shared static part, depth bases
        from its own depth, and its start coefficients; then its refinement), compiled once for
        both (:meth:`_direction`).
        ``K`` is the input's intrinsics, resized here; ``coeffs`` ``[2, N]`` and ``hflows``
        ``[2, h, w, 2]`` (forward, backward); ``detail``: None or the grey images at the detail
        size (:meth:`detail_size`); ``coeffs`` of the forward direction alone (``[1, N]``)
        refine it alone. ``constant_depth``: the value where ``d1`` and ``d2`` hold it everywhere
        (:meth:`host_inputs`): their depth bases are then built once and kept
        (:meth:`_depth_of`). Returns :func:`camflow_jax.refine.refine_with_pyramids`'s dict (numpy)
        with a leading axis of 2 (1), plus ``noisy`` and the forward flow's homography.

        Several calls rather than one: the pair as one computation needs more scratch memory than
        glibc's malloc keeps for reuse (32 MiB), so every call mapped it afresh and the kernel
        faulted and zeroed it in (docs/refinement.md, "Cost (eighth round)")."""
        p1, p2, noisy, stacks = self._refine_images(g1, g2, detail, cfg=cfg)
        dets = (None, None) if stacks is None else ((stacks[0], stacks[1]), (stacks[1], stacks[0]))
        depths = [self._depth_of(d, K, constant_depth, **self._bases_static(p1, dets[0], input_hw), cfg=cfg)
                  for d in (d1, d2)]
        directions = ((p1, p2, depths[0], dets[0]), (p2, p1, depths[1], dets[1]))[:len(coeffs)]  # forward only: one
        runs = self._in_parallel(
            [lambda i=i, pa=pa, pb=pb, d=d, det=det: self._direction(
                static_bp, pa, pb, d, coeffs[i], hflows[i], det, input_hw=input_hw, cfg=cfg)
             for i, (pa, pb, d, det) in enumerate(directions)],
            on_cpu=isinstance(p1[-1], jax.Array) and all(dev.platform == "cpu" for dev in p1[-1].devices()))
        hom = self._flow_homography(runs[0]["flow"])
        runs, noisy, hom = jax.device_get((runs, noisy, hom))  # stacked on the host: no eager ops
        out = {k: np.stack([r[k] for r in runs]) for k in runs[0]}
        out["noisy"] = noisy
        out["homography"] = hom
        return out

    def _in_parallel(self, calls, *, on_cpu: bool) -> list:
        """The results of independent jitted ``calls`` (zero-argument callables; the pair's two
        directions), each ready. On a CPU with several cores they run in threads of their own:
        XLA:CPU runs a computation this small inline on the calling thread, its ops one after
        the other on about one core, so two calls from one thread do not overlap even when
        dispatched without waiting, while from two threads they do (a pair's refinement at
        320x576 on 2 cores: ~31 -> ~21 ms, results bit-identical; docs/refinement.md, "Cost").
        Elsewhere (an accelerator, where dispatch is asynchronous; one core) they run in turn."""
        if not on_cpu or len(calls) < 2 or usable_cpus() < 2:
            return [jax.block_until_ready(c()) for c in calls]
        with self._pool_lock:  # the Predictor may refine several pairs at once, from threads of its own
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="camflow-refine")
        default_device = jax.config.jax_default_device  # the caller's (a thread-local setting) holds in the threads

        def run(call):
            with jax.default_device(default_device):  # None: JAX's own default
                return jax.block_until_ready(call())

        futures = [self._pool.submit(run, c) for c in calls]
        return [f.result() for f in futures]

    @staticmethod
    def _refine_images_impl(g1, g2, detail, *, cfg):
        """(pyramid 1, pyramid 2, noisy, detail stacks or None) of a pair (jitted)."""
        p1, p2, noisy = refine_pyramid.pair_pyramids(g1, g2, cfg)
        stacks = None if detail is None else refine_pyramid.detail_stacks(detail[0], detail[1], cfg, noisy)
        return p1, p2, noisy, stacks

    def _depth_of(self, d, K, constant, *, size, input_hw, detail_hw, cfg):
        """A direction's depth for :meth:`_direction_bases_impl`: ``(d, K)`` (its depth bases are
        built in that call), or, for a depth ``d`` that holds the value ``constant`` everywhere,
        the depth bases' :class:`camflow_jax.refine.BasisPyramid` built once per size, intrinsics
        and value, and kept (a video without depth: ~3-5 ms less a direction at 360x480)."""
        if not self.num_depth or constant is None:
            return d, K
        key = (size, input_hw, detail_hw, cfg, np.asarray(K, np.float32).tobytes(), float(constant))
        return self._depth_cache.get(key, lambda: self._depth_pyramid(d, K, size=size, input_hw=input_hw,
                                                                      detail_hw=detail_hw, cfg=cfg))

    def _direction(self, static_bp, pa, pb, depth, coeffs, hflow, detail, *, input_hw, cfg):
        """One direction's refinement as two jitted calls (:meth:`_direction_bases_impl`, then
        :meth:`_solve_direction_impl`); the backward is the same calls with the images, depth
        and starts swapped. ``depth``: :meth:`_depth_of`'s."""
        bp, starts = self._direction_bases(static_bp, depth, coeffs, hflow, **self._bases_static(pa, detail, input_hw),
                                           cfg=cfg)
        return self._refine_direction(self._with_static_full(bp, static_bp), pa, pb, starts, detail, cfg=cfg)

    @staticmethod
    def _bases_static(pa, detail, input_hw) -> dict:
        """:meth:`_direction_bases_impl`'s static sizes for image pyramid ``pa`` and ``detail``."""
        return {"size": tuple(pa[-1].shape[:2]), "input_hw": input_hw,
                "detail_hw": None if detail is None else tuple(detail[0].shape[:2])}

    @staticmethod
    def _with_static_full(bp, static_bp):
        """``bp`` (:meth:`_direction_bases_impl`'s, without the static groups' full-size maps)
        with them put back in front."""
        return bp._replace(full=tuple(static_bp.full) + tuple(bp.full))

    def _depth_pyramid_impl(self, d, K, *, size, input_hw, detail_hw, cfg):
        """The depth bases of depth ``d`` (working size) and the input's intrinsics ``K`` as a
        :class:`camflow_jax.refine.BasisPyramid`, with their samples at the detail level's
        pixels when ``detail_hw`` is given."""
        depth_bp = self._depth_bases(d, device.resize_intrinsics(K, input_hw, tuple(size)), cfg)
        if detail_hw is not None:  # the static part's detail samples are cached with it
            depth_bp = refine_pyramid.with_detail(depth_bp, detail_hw, cfg.detail_stride)
        return depth_bp

    def _direction_bases_impl(self, static_bp, depth, coeffs, hflow, *, size, input_hw, detail_hw, cfg):
        """A direction's basis set (the static part joined with the depth bases of ``depth``:
        ``(d, K)``, built here by :meth:`_depth_pyramid_impl`, or that pyramid already built) and
        its start coefficients: ``(BasisPyramid, starts [S, N])``. ``size``: the working size.
        The static groups' full-size maps are left out of the result (returned from a call, an
        input is copied): :meth:`_with_static_full` puts them back."""
        if self.num_depth:
            depth_bp = depth if isinstance(depth, refine_pyramid.BasisPyramid) else self._depth_pyramid_impl(
                *depth, size=size, input_hw=input_hw, detail_hw=detail_hw, cfg=cfg)
            bp = refine_pyramid.join_basis_pyramids(static_bp, depth_bp)
        else:
            bp = static_bp
        starts = self._starts_impl(bp, coeffs, hflow, cfg=cfg)
        return bp._replace(full=bp.full[len(static_bp.full):]), starts

    def _solve_direction_impl(self, bp, pa, pb, starts, detail, *, cfg):
        """A direction's solve (:func:`camflow_jax.refine.solver.refine_with_pyramids`)."""
        return refine_solver.refine_with_pyramids(pa, pb, bp, starts, cfg, self.basis_groups, detail)

    def _refine_direction_impl(self, static_bp, pa, pb, d, K, coeffs, hflow, detail, *, input_hw, cfg):
        """:meth:`_direction` as one traced function (the batched program vmaps it)."""
        bp, starts = self._direction_bases_impl(static_bp, (d, K), coeffs, hflow,
                                                **self._bases_static(pa, detail, input_hw), cfg=cfg)
        return self._solve_direction_impl(self._with_static_full(bp, static_bp), pa, pb, starts, detail, cfg=cfg)

    @staticmethod
    def stack_host_inputs(hosts: list) -> dict:
        """:meth:`host_inputs` of several pairs of one input size as batched arrays (a leading
        axis B): what :meth:`refine_batch` takes, to be sent to the device in one transfer."""
        keys = ("g1", "g2", "d1", "d2", "K", "hflows") + (() if hosts[0]["detail"] is None else ("detail",))
        return {k: np.stack([x[k] for x in hosts]) for k in keys}

    def refine_batch(self, batch, coeffs_f, coeffs_b, *, input_hw, cfg):
        """The refinement of B landscape pairs of one input size ``input_hw``, both directions
        of each, as one jitted program: ``batch`` is :meth:`stack_host_inputs`' dict (numpy or
        already on the device), ``coeffs_f``, ``coeffs_b`` ``[B, N]`` the network's (they may
        stay on the device; ``coeffs_b`` None: the forward direction alone). Returns device
        arrays, each with leading axes (B, 2) (B, 1 forward only) but ``noisy`` and
        ``homography`` (B): :meth:`finish` takes one pair's slice, on the host."""
        cfg = self.fit_config(*input_hw, cfg)[0]  # as host_inputs fitted it (finish adds the note)
        h, w = batch["g1"].shape[1:3]
        dsize = None if "detail" not in batch else tuple(int(v) for v in batch["detail"].shape[2:4])
        static_bp = self._static_refine_bases((h, w), cfg, dsize)
        return self._refine_batch(static_bp, batch, coeffs_f, coeffs_b, input_hw=tuple(input_hw), cfg=cfg)

    def _refine_batch_impl(self, static_bp, batch, coeffs_f, coeffs_b, *, input_hw, cfg):
        """:meth:`refine_batch`'s program: the pair's images (:meth:`_refine_images_impl`) and
        its two directions (:meth:`_refine_direction_impl`, vmapped over the directions), vmapped
        over the pairs. On an accelerator one program per batch is what keeps it busy; XLA:CPU
        runs the vmapped normal equations slower than separate calls (:func:`refine_pair`'s doc),
        so the Predictor uses this on the CPU only where it measured faster."""

        def pair(x, cf, cb):
            detail = x.get("detail")
            p1, p2, noisy, stacks = self._refine_images_impl(x["g1"], x["g2"], detail, cfg=cfg)
            both = lambda a, b: jax.tree.map(lambda u, v: jnp.stack([u, v]), a, b)  # noqa: E731
            dets = None if stacks is None else (both(stacks[0], stacks[1]), both(stacks[1], stacks[0]))

            def direction(pa, pb, d, c, hflow, det):
                return self._refine_direction_impl(static_bp, pa, pb, d, x["K"], c, hflow, det,
                                                   input_hw=input_hw, cfg=cfg)

            if cb is None:  # the forward direction alone (a leading axis of 1)
                one = lambda a: jax.tree.map(lambda u: u[None], a)  # noqa: E731
                runs = jax.vmap(direction)(one(p1), one(p2), x["d1"][None], cf[None].astype(jnp.float32),
                                           x["hflows"][:1], None if stacks is None else one(stacks))
            else:
                runs = jax.vmap(direction)(both(p1, p2), both(p2, p1), jnp.stack([x["d1"], x["d2"]]),
                                           jnp.stack([cf, cb]).astype(jnp.float32), x["hflows"], dets)
            return {**runs, "noisy": noisy, "homography": flow_homography(runs["flow"][0])}

        return jax.vmap(pair)(batch, coeffs_f, coeffs_b)

    def _starts_impl(self, bases, coeffs, hflow, *, cfg):
        """``[S, N]`` start coefficients, in ``cfg.starts`` order, for one direction (``bases``:
        a :class:`camflow_jax.refine.BasisPyramid`)."""
        h, w = bases.full[0][0].shape[1:]
        coarse = refine_pyramid.pyramid_sizes(h, w, cfg.levels)[-1]
        starts = []
        for name in cfg.starts:
            if name == "network":
                starts.append(coeffs)
            elif name == "zero":
                starts.append(jnp.zeros_like(coeffs))
            else:  # "homography": a feature homography's flow, projected on the bases
                full = jnp.stack([jnp.concatenate([u for u, _ in bases.full]),
                                  jnp.concatenate([v for _, v in bases.full])], axis=-1)
                starts.append(refine_solver.project_flow(hflow, full, coarse))
        return jnp.stack(starts)

    def _feature_start(self, img1, img2):
        """Flows of a SIFT + MAGSAC homography (forward, backward), or zeros when it fails."""
        H0, W0 = img1.shape[:2]
        Hm = classical.feature_homography(img1, img2, "sift", "magsac")
        if Hm is None:
            z = np.zeros((H0, W0, 2), np.float32)
            return z, z
        return host.homography_flow(Hm, H0, W0), host.homography_flow(np.linalg.inv(Hm), H0, W0)

    def host_inputs(self, img1, img2, depth1, depth2, K, cfg) -> dict:
        """The host's part before the jitted refinement of a landscape pair (numpy, cv2: cheap):
        grey images and depth resized to the working size (area / bilinear, half-pixel
        centres), the detail level's grey images, the SIFT start's flows when ``cfg.starts``
        asks for it, the sizes: ``size`` (working), ``dsize`` (detail or None),
        ``input_hw``, ``constant_depth``: the value both depths hold everywhere, or None, and
        ``cfg``, ``levels_note``: the settings the pair is refined with and why they differ from
        ``cfg`` (:meth:`fit_config`)."""
        H0, W0 = img1.shape[:2]
        cfg, levels_note = self.fit_config(H0, W0, cfg)
        h, w = size = self.working_size(H0, W0, cfg)

        def down(x, interp=cv2.INTER_AREA):
            x = np.asarray(x, np.float32)
            return x if (h, w) == (H0, W0) else cv2.resize(x, (w, h), interpolation=interp)

        grey = [np.asarray(host.gray(x), np.float32) for x in (img1, img2)]  # refine.gray's channel mean
        g1, g2 = down(grey[0]), down(grey[1])
        constant = None  # the value of a depth that holds one everywhere (both images)
        if self.num_depth:
            d1, d2 = down(depth1, cv2.INTER_LINEAR), down(depth2, cv2.INTER_LINEAR)
            K = np.asarray(K, np.float32)
            constant = host.constant_value(d1, d2)
        else:
            d1 = d2 = np.zeros((1, 1), np.float32)
            K = np.zeros(4, np.float32)
        detail = None
        dsize = self.detail_size(H0, W0, cfg)
        if dsize is not None:
            hd, wd = dsize
            detail = np.stack([x if (hd, wd) == (H0, W0) else cv2.resize(x, (wd, hd), interpolation=cv2.INTER_AREA)
                               for x in grey])
        if "homography" in cfg.starts:
            hflows = np.stack([host.resize_flow(f, h, w) for f in self._feature_start(img1, img2)])
        else:
            hflows = np.zeros((2, 1, 1, 2), np.float32)
        return {"g1": g1, "g2": g2, "d1": d1, "d2": d2, "K": K, "hflows": hflows, "detail": detail,
                "size": size, "dsize": dsize, "input_hw": (H0, W0), "constant_depth": constant, "cfg": cfg,
                "levels_note": levels_note}

    def __call__(self, img1, img2, depth1, depth2, K, out, cfg) -> dict:
        """The refined results for a landscape pair (numpy), the network's (``out``: the network's
        outputs at the input size, numpy) kept as ``net_*``.

        Host work around the jitted refinement (cv2, cheap): :meth:`host_inputs` before, and
        :meth:`finish` (the refined flows and weights resized back) after."""
        prepared = self.host_inputs(img1, img2, depth1, depth2, K, cfg)
        cfg = prepared["cfg"]  # the levels the pair allows (fit_config)
        # the network's forward_only results (no coeffs_b): the forward direction alone
        coeffs = np.stack([out[k] for k in ("coeffs_f", "coeffs_b") if k in out]).astype(np.float32)
        detail = None if prepared["detail"] is None else (prepared["detail"][0], prepared["detail"][1])
        p = prepared
        res = self._refine_pair(self._static_refine_bases(p["size"], cfg, p["dsize"]), p["g1"], p["g2"],
                                p["d1"], p["d2"], p["K"], coeffs, p["hflows"], detail,
                                input_hw=p["input_hw"], cfg=cfg, constant_depth=p["constant_depth"])  # numpy
        return self.finish(res, out, prepared, cfg)

    def finish(self, res, out, prepared, cfg) -> dict:
        """The pair's results (numpy) from the refinement's ``res`` (one pair, numpy: a leading
        axis of 2 for the directions), the network's ``out`` and :meth:`host_inputs`' ``prepared``:
        flows and weights resized back to the input, the homography moved to its grid, the
        network's kept as ``net_*``, and ``refine_info``."""
        (H0, W0), (h, w), dsize = prepared["input_hw"], prepared["size"], prepared["dsize"]
        cfg = prepared.get("cfg", cfg)
        new = {"net_" + k: out[k] for k in ("flow_f", "flow_b", "homography", "coeffs_f", "coeffs_b") if k in out}
        flows, wts = res["flow"], res["weights"]  # a leading axis of 2, or 1 (the forward alone)
        Hw = np.asarray(res["homography"], np.float64)
        if (h, w) != (H0, W0):
            flows = [host.resize_flow(f, H0, W0) for f in flows]
            wts = [cv2.resize(m, (W0, H0), interpolation=cv2.INTER_LINEAR) for m in wts]
            # working pixel x_w sits at x = (x_w + 0.5) s - 0.5 on the input grid (half-pixel)
            sx, sy = W0 / w, H0 / h
            A = np.array([[sx, 0, 0.5 * sx - 0.5], [0, sy, 0.5 * sy - 0.5], [0, 0, 1.0]])
            Hw = A @ Hw @ np.linalg.inv(A)
        for i, d in enumerate("fb"[:len(flows)]):
            new[f"flow_{d}"] = np.asarray(flows[i], np.float32)
            new[f"weights_{d}"] = np.asarray(wts[i], np.float32)
            new[f"coeffs_{d}"] = res["coeffs"][i]
        new["homography"] = Hw / Hw[2, 2]
        improved = [bool(v) for v in res["improved"]]
        first = "the network's estimate" if cfg.starts[0] == "network" else f"the {cfg.starts[0]} start"
        note = ("" if all(improved) else f"refinement could not lower the photometric cost of {first} ("
                + ", ".join(d for d, ok in zip(("forward", "backward"), improved) if not ok)
                + f"); {first} is kept there")
        if bool(res["noisy"]):
            note = "; ".join(x for x in (note, f"noisy images: refined with a {cfg.noise_presmooth:g}-px pre-blur "
                                                "(RefineConfig.noise_presmooth)") if x)
        note = "; ".join(x for x in (prepared.get("levels_note", ""), note) if x)
        new["refine_info"] = {
            "cost_before": [float(v) for v in res["cost_before"]],
            "cost_after": [float(v) for v in res["cost_after"]],
            "improved": improved,
            "iterations": [[int(i) for i in it] for it in res["iterations"]],
            "start": [cfg.starts[int(i)] for i in res["start"]],
            "start_costs": [[float(c) for c in cs] for cs in res["start_costs"]],
            "working_size_hw": [h, w],
            "detail_size_hw": None if dsize is None else list(dsize),
            "noisy": bool(res["noisy"]),
            "note": note,
        }
        return new

