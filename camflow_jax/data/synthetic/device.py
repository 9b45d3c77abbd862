"""A JAX renderer of the synthetic parallax scenes: training batches made on the accelerator.

The host renderer (``camflow_jax.data.synthetic``, numpy and OpenCV, one pair at a time on a
CPU core) is the reference; this module renders the same kind of pairs with ``jax.numpy``:
pure, jitted, rows vmapped in chunks, deterministic in ``(seed, step)``. Per pair:

- intrinsics, scene (padded to ``MAX_PLANES`` plane slots with a mask) and camera motion drawn
  from a ``jax.random`` key with the host's distributions (``synthetic_device_sampling``),
  including the host's rule of redrawing a motion (at most 6 tries) that leaves less than 30 %
  of image 1 valid;
- z-buffered ray casting of the planes (moving planes placed at ``tau`` = 0 and 1), the same
  float32 arithmetic as ``synthetic_render.cast_rays``;
- texture colour from a :class:`TextureBank` (every mip level of every texture, packed RGBA,
  held on the device) with the host's level-of-detail rule and trilinear filtering;
- the five appearance categories (``synthetic_appearance``): fog, low light, rain streaks and
  snow flakes (drawn by splatting), exposure jitter and sensor noise;
- flows in both directions, validity masks, depth and K from the geometry.

Differences from the host, by design: texture reads, like the host's, round every bilinear
read and mip blend to integers, but weigh in 1/256 steps where OpenCV's ``remap`` quantises the
sampling position to 1/32 texel (a read can differ by one level); rain streaks are splatted
points rather than OpenCV's anti-aliased lines, and snow flakes combine by maximum rather than
by drawing order; the random draws differ (same distributions). ``docs/synthetic.md`` gives
the measured agreement.

Usage::

    bank = procedural_bank(seed=0, count=24)            # once; device arrays
    batch = render_batch(bank, seed, step, batch_size=8, height=320, width=576)

``batch`` has the keys, dtypes and layout of ``pipeline.train_dataset``'s batches of
``SyntheticPairs(label="flow")`` (``need_depth=True`` adds depth1, depth2 and K, as
``prepare_pair(need_depth=True)`` does). On a mesh, :func:`make_sharded_renderer` renders each
device's rows of the global batch on that device; row ``r`` of step ``s`` is the same pair
whatever the device count.

Speed on CPU (XLA:CPU) shaped some choices, noted where they are made: one threefry call per
pair, scalar (not row) gathers, packed texels, an explicit materialisation point.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from camflow_jax.data.synthetic import device_sampling as smp
from camflow_jax.data.synthetic.appearance import CATEGORIES
from camflow_jax.data.synthetic.device_sampling import MAX_PLANES, DeviceScene
from camflow_jax.data.synthetic.textures import TEXTURE_SIZE, list_texture_files, load_texture, procedural_textures

__all__ = [
    "MAX_PLANES",
    "DeviceScene",
    "TextureBank",
    "texture_bank",
    "procedural_bank",
    "photo_bank",
    "replicate_bank",
    "cast_rays",
    "shade",
    "reprojection_flow",
    "flow_validity",
    "render_pair",
    "sample_key",
    "CATEGORY_ORDERS",
    "row_categories",
    "render_batch",
    "make_sharded_renderer",
]

_Z_MIN = 1e-3  # as synthetic_render
_LOD_COS_POWER = 1.0  # shade's formula is written for this value (the host's default)
_LOD_BIAS = 0.3
_MIN_LEVEL_SIZE = 8  # as synthetic_textures.mip_pyramid
_MIN_VALID_FRACTION = 0.3  # as synthetic.render_pair
_MOTION_ATTEMPTS = 6


# ----------------------------------------------------------------------------------------------
# Texture bank
# ----------------------------------------------------------------------------------------------

def _level_sizes(size: int) -> tuple[int, ...]:
    sizes = [size]
    while sizes[-1] // 2 >= _MIN_LEVEL_SIZE:
        sizes.append(sizes[-1] // 2)
    return tuple(sizes)


@dataclasses.dataclass(frozen=True)
class TextureBank:
    """Mip pyramids on the device: ``texels [N, T]`` uint32, texture ``j``'s levels 0, 1, ...
    (sides ``size, size / 2, ... >= 8``) row-major one after the other, one packed RGBA texel
    per word (red in the low byte). ``size`` is static."""

    texels: jax.Array
    size: int

    @property
    def num_textures(self) -> int:
        return self.texels.shape[0]

    @property
    def level_sizes(self) -> tuple[int, ...]:
        return _level_sizes(self.size)


jax.tree_util.register_dataclass(TextureBank, data_fields=["texels"], meta_fields=["size"])


def texture_bank(pyramids: Sequence[Sequence[np.ndarray]]) -> TextureBank:
    """Packs host mip pyramids (``synthetic_textures.procedural_textures`` or ``load_texture``
    results, all of one size) into a :class:`TextureBank` on the default device."""
    if len(pyramids) == 0:
        raise ValueError("texture_bank needs at least one texture")
    size = int(pyramids[0][0].shape[0])
    if size < _MIN_LEVEL_SIZE or size & (size - 1):
        raise ValueError(f"texture side must be a power of two >= {_MIN_LEVEL_SIZE} (wrap-around by bit "
                         f"mask), got {size}")
    sizes = _level_sizes(size)
    if len(pyramids) * sum(s * s for s in sizes) >= 2 ** 31:
        raise ValueError(f"{len(pyramids)} textures of {size} px exceed the bank's int32 texel indices")
    rows = []
    for j, pyr in enumerate(pyramids):
        if len(pyr) != len(sizes) or any(lv.shape[:2] != (s, s) for lv, s in zip(pyr, sizes)):
            raise ValueError(f"texture {j}: expected mip levels of sides {sizes}, got "
                             f"{[lv.shape for lv in pyr]} (all textures must have one size)")
        levels = []
        for lv in pyr:
            lv = np.asarray(lv, np.uint8)
            if lv.shape[2] == 3:
                lv = np.concatenate([lv, np.full(lv.shape[:2] + (1,), 255, np.uint8)], -1)
            levels.append(np.ascontiguousarray(lv).view("<u4").reshape(-1))
        rows.append(np.concatenate(levels))
    return TextureBank(texels=jnp.asarray(np.stack(rows).astype(np.uint32)), size=size)


def procedural_bank(seed: int, count: int, size: int | None = None) -> TextureBank:
    """The bank of ``synthetic_textures.procedural_textures(seed, count, size)`` (what
    ``SyntheticScenes(seed=seed, num_textures=count)`` uses)."""

    return texture_bank(procedural_textures(seed, count, TEXTURE_SIZE if size is None else size))


def photo_bank(directory) -> TextureBank:
    """The bank of every photo in ``directory`` (``list_texture_files`` / ``load_texture``: central
    square, 512 px; about 1.4 MB of device memory each)."""

    return texture_bank([load_texture(f) for f in list_texture_files(directory)])


def replicate_bank(bank: TextureBank, mesh: jax.sharding.Mesh) -> TextureBank:
    """The bank replicated on every device of ``mesh`` (once, before :func:`make_sharded_renderer`)."""
    return jax.device_put(bank, NamedSharding(mesh, P()))


# ----------------------------------------------------------------------------------------------
# Geometry: ray casting, flow, validity
# ----------------------------------------------------------------------------------------------

def _rays(K, height: int, width: int):
    return ((jnp.arange(width, dtype=jnp.float32) - K[2]) / K[0],
            (jnp.arange(height, dtype=jnp.float32) - K[3]) / K[1])


def _affine(c, dx, dy):
    """``c . (dx, dy, 1)`` over the image: ``(c0 dx + c2)`` per column plus ``c1 dy`` per row."""
    return (c[0] * dx + c[2])[None, :] + (c[1] * dy)[:, None]


def _planes_in_camera(scene: DeviceScene, R, t, tau):
    """Per-slot ``(P, e_u, e_v, n)`` ``[MAX_PLANES, 3]`` in the camera ``X = R X_world + t``, moving
    planes placed at time ``tau`` (``synthetic_render.Plane.at_time``; ``tau`` may be traced)."""
    origin, au, av = scene.origin, scene.axis_u, scene.axis_v
    tau = jnp.asarray(tau, jnp.float32)
    finite = (scene.shape != smp.SHAPE_INFINITE)[:, None]
    centre = jnp.where(finite, origin + 0.5 * (scene.extent[:, :1] * au + scene.extent[:, 1:] * av), origin)
    rot = smp.rotation_matrix(tau * scene.spin)
    moved = centre + tau * scene.velocity + smp.matvec(rot, origin - centre)
    mv = (scene.moving() & (tau != 0))[:, None]  # exactly the frame-1 pose at tau = 0
    origin = jnp.where(mv, moved, origin)
    au = jnp.where(mv, smp.matvec(rot, au), au)
    av = jnp.where(mv, smp.matvec(rot, av), av)
    Pc = smp.matvec(R, origin) + t
    eu, ev = smp.matvec(R, au), smp.matvec(R, av)
    return Pc, eu, ev, jnp.cross(eu, ev)


def cast_rays(scene: DeviceScene, R, t, K, height: int, width: int, tau: float = 0.0):
    """Z-buffer ray casting (``synthetic_render.cast_rays``): ``(depth [H, W] float32,
    ids [H, W] int32)``, ids = slot + 1 of the visible plane, 0 = no hit (depth ``scene.far``)."""
    Pc, eu, ev, n = _planes_in_camera(scene, R, t, tau)
    dx, dy = _rays(K, height, width)
    per_plane = (Pc, eu, ev, n, jnp.sum(n * Pc, -1), jnp.sum(eu * Pc, -1), jnp.sum(ev * Pc, -1),
                 scene.extent, scene.shape, scene.active, jnp.arange(1, MAX_PLANES + 1, dtype=jnp.int32))

    def step(carry, p):
        depth, ids = carry
        _, e_u, e_v, nk, nP, uP, vP, ext, shape, active, k1 = p
        z = nP / _affine(nk, dx, dy)  # a ray parallel to the plane gives inf or nan: no hit
        u = z * _affine(e_u, dx, dy) - uP
        v = z * _affine(e_v, dx, dy) - vP
        su, sv = ext[0], ext[1]
        uu = (u - su / 2) / (su / 2)
        vv = (v - sv / 2) / (sv / 2)
        inside = jnp.where(shape == smp.SHAPE_INFINITE, True,
                           jnp.where(shape == smp.SHAPE_ELLIPSE, uu * uu + vv * vv <= 1.0,
                                     (u >= 0) & (u <= su) & (v >= 0) & (v <= sv)))
        closer = active & (z > _Z_MIN) & (z < 1e30) & inside & (z < depth)
        return (jnp.where(closer, z, depth), jnp.where(closer, k1, ids)), None

    init = (jnp.full((height, width), jnp.inf, jnp.float32), jnp.zeros((height, width), jnp.int32))
    (depth, ids), _ = jax.lax.scan(step, init, per_plane)
    return jnp.where(ids == 0, scene.far, depth), ids


def reprojection_flow(depth, K, R, t):
    """``(flow [H, W, 2], z_b [H, W])`` of a static scene with depth map ``depth`` when the camera
    moves by ``X_b = R X_a + t`` (``synthetic_render.reprojection_flow``)."""
    h, w = depth.shape
    dx, dy = _rays(K, h, w)
    xb, yb, zb = (depth * _affine(R[i], dx, dy) + t[i] for i in range(3))
    inv = 1.0 / jnp.maximum(zb, 1e-6)
    fx = (xb * inv) * K[0] + K[2] - jnp.arange(w, dtype=jnp.float32)[None, :]
    fy = (yb * inv) * K[1] + K[3] - jnp.arange(h, dtype=jnp.float32)[:, None]
    return jnp.stack([fx, fy], -1), zb


def _bilinear_replicate(img, x, y):
    """Bilinear read of ``img [H, W]`` at ``(x, y)`` with replicated borders."""
    h, w = img.shape
    x0, y0 = jnp.floor(x), jnp.floor(y)
    ax, ay = x - x0, y - y0
    x0, y0 = x0.astype(jnp.int32), y0.astype(jnp.int32)
    flat = img.reshape(-1)

    def tap(yy, xx):
        return flat[jnp.clip(yy, 0, h - 1) * w + jnp.clip(xx, 0, w - 1)]

    return ((1 - ay) * ((1 - ax) * tap(y0, x0) + ax * tap(y0, x0 + 1))
            + ay * ((1 - ax) * tap(y0 + 1, x0) + ax * tap(y0 + 1, x0 + 1)))


def flow_validity(flow, z_b, depth_b, static, tol: float = 0.01):
    """``[H, W]`` float32 in {0, 1} (``synthetic_render.flow_validity``): static, in front of
    camera b, inside view b and not occluded there (inverse-depth test)."""
    h, w = flow.shape[:2]
    mx = flow[..., 0] + jnp.arange(w, dtype=jnp.float32)[None, :]
    my = flow[..., 1] + jnp.arange(h, dtype=jnp.float32)[:, None]
    inside = (mx >= 0) & (mx < w - 1) & (my >= 0) & (my < h - 1) & (z_b > _Z_MIN)
    seen = _bilinear_replicate(1.0 / depth_b, jnp.clip(mx, -2, w + 1), jnp.clip(my, -2, h + 1))
    visible = 1.0 / jnp.maximum(z_b, _Z_MIN) >= (1.0 - tol) * seen
    return (inside & visible & static).astype(jnp.float32)


# ----------------------------------------------------------------------------------------------
# Shading
# ----------------------------------------------------------------------------------------------

def _materialize(x):
    """``x`` as the result of a (trivial) reduction: XLA:CPU then computes ``x`` once into a
    buffer instead of fusing its computation into, and repeating it for, every element of a
    consumer that reads each element several times (optimization barriers do not survive to
    fusion on CPU)."""
    return jnp.max(jnp.stack([x, jnp.zeros_like(x)]), 0)


def _log2(x):
    """``log2(x)`` for ``x > 0`` (float32, error ~1e-7), from the exponent bits and a short
    series in multiplications and additions only: the same bits in every compiled program
    (XLA:CPU's own ``log``/``exp`` may round the last bit differently in its scalar and vector
    code)."""
    m, e = jnp.frexp(x)  # x = m 2^e, m in [0.5, 1)
    small = m < np.float32(np.sqrt(0.5))
    m = jnp.where(small, 2 * m, m)
    e = jnp.where(small, e - 1, e).astype(jnp.float32)
    s = (m - 1) / (m + 1)  # |s| < 0.172
    s2 = s * s
    ln = 2 * s * (1 + s2 * (1 / 3 + s2 * (1 / 5 + s2 * (1 / 7 + s2 * (1 / 9)))))
    return e + ln * np.float32(1 / np.log(2))


def _unpack(words):
    return jnp.stack([(words >> s) & 0xFF for s in (0, 8, 16)], -1).astype(jnp.float32)


def _texel_words(bank: TextureBank, tex, level, x, y):
    """The 4 packed texels (a list of uint32 arrays) around level-0 texel coordinates ``(x, y)`` at
    mip ``level`` (per pixel; level ``L`` texel ``i`` is centred on level-0 ``2^L i``), wrapped
    around (power-of-two sides: a bit mask), and the bilinear weights ``(ax, ay)``."""
    size = jnp.right_shift(jnp.int32(bank.size), level)
    # Level l starts after levels 0..l-1: sum of (S / 2^m)^2 = 4 (S^2 - size^2) / 3.
    base = tex * bank.texels.shape[1] + (4 * (bank.size * bank.size) - 4 * size * size) // 3
    scale = jax.lax.bitcast_convert_type((127 - level) << 23, jnp.float32)  # 2^-level, exactly
    x, y = x * scale, y * scale
    x0, y0 = jnp.floor(x), jnp.floor(y)
    ax, ay = x - x0, y - y0
    mask = size - 1
    x0, y0 = x0.astype(jnp.int32) & mask, y0.astype(jnp.int32) & mask
    x1, y1 = (x0 + 1) & mask, (y0 + 1) & mask
    flat = bank.texels.reshape(-1)
    r0, r1 = base + y0 * size, base + y1 * size
    words = [flat.at[i].get(mode="promise_in_bounds") for i in (r0 + x0, r0 + x1, r1 + x0, r1 + x1)]
    return words, ax, ay


_WEIGHT_BITS = 8  # bilinear and mip-blend weights in 1/256 steps


def _fixed(w):
    """Weight in [0, 1] -> integer in [0, 2^_WEIGHT_BITS] (nearest)."""
    return jnp.floor(w * (1 << _WEIGHT_BITS) + 0.5).astype(jnp.int32)


def _bilinear_packed(words, ax, ay):
    """Bilinear blend of the 4 packed texels of :func:`_texel_words` in integer fixed point
    (weights in 1/256 steps, the result rounded to an integer per channel like the host's uint8
    reads) and packed again: one word per pixel. Integer arithmetic makes the result exactly
    reproducible whatever the compiled program (floating-point rounding could flip a channel
    by one level), and a packed result keeps XLA from recomputing the gathers per channel."""
    one = 1 << _WEIGHT_BITS
    wx, wy = _fixed(ax), _fixed(ay)
    words = [jax.lax.bitcast_convert_type(w, jnp.int32) for w in words]
    out = jnp.zeros(ax.shape, jnp.int32)
    for c in range(3):
        t = [(w >> (8 * c)) & 0xFF for w in words]
        v = ((one - wx) * t[0] + wx * t[1]) * (one - wy) + ((one - wx) * t[2] + wx * t[3]) * wy
        out = out | (((v + (1 << (2 * _WEIGHT_BITS - 1))) >> (2 * _WEIGHT_BITS)) << (8 * c))
    return out


def _blend_packed(a, b, fr):
    """``round((1 - fr) a + fr b)`` per channel of two packed texels (fixed point, as above)."""
    one = 1 << _WEIGHT_BITS
    wf = _fixed(fr)
    out = jnp.zeros(a.shape, jnp.int32)
    for c in range(3):
        va, vb = (a >> (8 * c)) & 0xFF, (b >> (8 * c)) & 0xFF
        out = out | ((((one - wf) * va + wf * vb + (one >> 1)) >> _WEIGHT_BITS) << (8 * c))
    return out


def shade(bank: TextureBank, scene: DeviceScene, depth, ids, R, t, K, tau=0.0):
    """Colour ``[H, W, 3]`` float32 (0..255) of a ray-cast view (``synthetic_render.shade``):
    texture coordinates ``(tu, tv) = z (A d) + b``, level of detail
    ``log2(z |d|^2 / (f |n . d| texel)) - 0.3`` clipped to the pyramid, trilinear filtering, times
    the plane colour; the sky colour where nothing is hit.

    Like the host, every bilinear read and the blend of two levels are rounded to integers
    (uint8 texels); the weights come in 1/256 steps where OpenCV's ``remap`` quantises the
    sampling position to 1/32 texel. Per-pixel plane parameters are scalar gathers from a
    transposed table (fast on XLA:CPU, unlike row gathers)."""
    height, width = depth.shape
    Pc, eu, ev, n = _planes_in_camera(scene, R, t, tau)
    ca, sa = jnp.cos(scene.tex_angle)[:, None], jnp.sin(scene.tex_angle)[:, None]
    au = (ca * eu - sa * ev) / scene.texel[:, None]
    av = (sa * eu + ca * ev) / scene.texel[:, None]
    bu = scene.tex_offset[:, 0] - jnp.sum(au * Pc, -1)
    bv = scene.tex_offset[:, 1] - jnp.sum(av * Pc, -1)
    # The host's level of detail, log2(z) + log2(|d|^2) - log2(|n . d|) - log2(f texel) - 0.3
    # (c = 1), taken as the log2 of one product (see _log2).
    lod_scale = 1.0 / (jnp.sqrt(K[0] * K[1]) * scene.texel * np.float32(2 ** _LOD_BIAS))
    table = jnp.concatenate([au, av, bu[:, None], bv[:, None], n, lod_scale[:, None], scene.colour,
                             scene.texture[:, None].astype(jnp.float32)], -1)  # [P, 16]
    sky = jnp.zeros(16, jnp.float32).at[12:15].set(scene.sky / 255.0)  # row 0: no hit
    table = jnp.concatenate([sky[None], table]).T  # [16, P + 1]
    q = [table[j].at[ids].get(mode="promise_in_bounds") for j in range(16)]
    dx, dy = _rays(K, height, width)
    px, py = dx[None, :], dy[:, None]
    tu = depth * (q[0] * px + q[1] * py + q[2]) + q[6]
    tv = depth * (q[3] * px + q[4] * py + q[5]) + q[7]
    tex = q[15].astype(jnp.int32)
    colour = jnp.stack(q[12:15], -1)
    top = len(bank.level_sizes) - 1
    if top == 0:
        level, fr = jnp.zeros_like(ids), jnp.zeros_like(depth)
    else:
        ndot = jnp.abs(q[8] * px + q[9] * py + q[10])
        lod = _log2(depth * (px * px + py * py + 1.0) / jnp.maximum(ndot, 0.05) * q[11])
        lod = jnp.clip(lod, 0.0, top)
        level = jnp.minimum(lod.astype(jnp.int32), top - 1)
        fr = lod - level
    packed = _bilinear_packed(*_texel_words(bank, tex, level, tu, tv))
    if top > 0:
        packed = _blend_packed(packed, _bilinear_packed(*_texel_words(bank, tex, level + 1, tu, tv)), fr)
    packed = _materialize(packed)
    return colour * jnp.where((ids == 0)[..., None], 255.0, _unpack(packed))


# ----------------------------------------------------------------------------------------------
# Pairs and batches
# ----------------------------------------------------------------------------------------------

def render_pair(bank: TextureBank, key, category_id, height: int, width: int, motion_scale=1.0) -> dict:
    """One labelled pair from ``key`` (``synthetic.render_pair``'s procedure). Returns float32
    depth1, depth2 ``[H, W]``, K ``[4]``, flow_f, flow_b ``[H, W, 2]``, valid_f, valid_b ``[H, W]``,
    R ``[3, 3]``, t ``[3]``; uint8 img1, img2 ``[H, W, 3]``; int32 category_id; and, to check or
    re-render it, scene (:class:`DeviceScene`), look (appearance parameters), clean1, clean2
    (float32 ``[H, W, 3]`` before appearance) and ids1, ids2 (int32 slot + 1)."""
    # Every random number of the pair from one threefry call (see smp.UniformStream).
    n_frame, n_words = smp.frame_uniforms(height, width), smp.noise_words(height, width)
    n_u = (smp.N_INTRINSICS + smp.N_SCENE + smp.N_LOOK + _MOTION_ATTEMPTS * smp.N_MOTION + 2 * n_frame)
    bits = jax.random.bits(key, (n_u + 2 * n_words,), jnp.uint32)
    u = smp.UniformStream(smp.uniforms_from_bits(bits[:n_u]))
    K = smp.sample_intrinsics(smp.UniformStream(u.take(smp.N_INTRINSICS)), height, width)
    scene = smp.sample_scene(smp.UniformStream(u.take(smp.N_SCENE)), K, height, width, bank.num_textures)
    look_u = smp.UniformStream(u.take(smp.N_LOOK))
    motion_u = u.take(_MOTION_ATTEMPTS * smp.N_MOTION).reshape(_MOTION_ATTEMPTS, smp.N_MOTION)
    frame_u = u.take(2 * n_frame).reshape(2, n_frame)
    words = bits[n_u:].reshape(2, n_words)
    eye, zero = jnp.eye(3, dtype=jnp.float32), jnp.zeros(3, jnp.float32)
    depth1, ids1 = cast_rays(scene, eye, zero, K, height, width, 0.0)
    static = jnp.concatenate([jnp.ones(1, bool), ~scene.moving()])
    sub = depth1[::4, ::4].reshape(-1)
    z_near, depth_scale = jnp.percentile(sub, 2), jnp.percentile(sub, 90)

    def attempt(i):
        R, t = smp.sample_camera_motion(smp.UniformStream(motion_u[i]), z_near, K, width, motion_scale)
        depth2, ids2 = cast_rays(scene, R, t, K, height, width, 1.0)
        flow_f, z2 = reprojection_flow(depth1, K, R, t)
        valid_f = flow_validity(flow_f, z2, depth2, static[ids1])
        return jnp.mean(valid_f), (R, t, depth2, ids2, flow_f, valid_f)

    def retry(state):  # the host keeps the best motion and stops at the first good enough one
        i, frac, best = state
        f, cand = attempt(i)
        better = f > frac
        return i + 1, jnp.maximum(f, frac), jax.tree.map(lambda a, b: jnp.where(better, a, b), cand, best)

    zero_best = (eye, zero, depth1, ids1, jnp.zeros((height, width, 2)), jnp.zeros((height, width)))
    _, _, best = jax.lax.while_loop(lambda s: (s[0] < _MOTION_ATTEMPTS) & (s[1] < _MIN_VALID_FRACTION),
                                    retry, (jnp.int32(0), jnp.float32(-1.0), zero_best))
    R, t, depth2, ids2, flow_f, valid_f = best
    R_b, t_b = R.T, -smp.matvec(R.T, t)
    flow_b, z1 = reprojection_flow(depth2, K, R_b, t_b)
    valid_b = flow_validity(flow_b, z1, depth1, static[ids2])
    # Both views in one vmapped program (half the code to compile).
    depths, ids = jnp.stack([depth1, depth2]), jnp.stack([ids1, ids2])
    clean1, clean2 = jax.vmap(shade, (None, None, 0, 0, 0, 0, None, 0))(
        bank, scene, depths, ids, jnp.stack([eye, R]), jnp.stack([zero, t]), K, jnp.array([0.0, 1.0]))
    look = smp.sample_appearance(look_u, depth_scale, height, width)
    img1, img2 = jax.vmap(lambda c, d, fu, w: smp.apply_appearance(c, d, look, category_id, uniforms=fu, words=w))(
        jnp.stack([clean1, clean2]), depths, frame_u, words)
    return {
        "img1": img1, "img2": img2,
        "depth1": depth1, "depth2": depth2, "K": K, "flow_f": flow_f, "flow_b": flow_b,
        "valid_f": valid_f, "valid_b": valid_b, "R": R, "t": t,
        "category_id": jnp.asarray(category_id, jnp.int32),
        "scene": scene, "look": look, "clean1": clean1, "clean2": clean2, "ids1": ids1, "ids2": ids2,
    }


def sample_key(seed, index):
    """Key of sample ``index`` of ``seed``: ``fold_in(key(seed), index)``. Row ``r`` of the batch
    of step ``s`` is sample ``s * batch_size + r`` (like ``SyntheticScenes``, sample ``i`` of a
    seed is a pure function of ``(seed, i)`` and the sizes)."""
    return jax.random.fold_in(jax.random.key(seed), index)


#: How rows get their category: "cycle" (sample ``i`` gets ``categories[i % n]``, so every batch
#: holds the same fixed mix) or "random" (drawn per sample from its key: the mix of a batch varies
#: like that of the host pipeline's shuffled batches).
CATEGORY_ORDERS = ("cycle", "random")


def row_categories(seed, indices, num_categories: int, order: str = "cycle") -> jax.Array:
    """Category (an index into the rendered ``categories``) of samples ``indices`` of ``seed``.

    ``"cycle"``: ``i % num_categories``. ``"random"``: uniform on ``[0, num_categories)``, drawn
    from ``fold_in(sample_key(seed, i), 2)``, independently per sample. The host pipeline shuffles
    its ``SyntheticScenes`` (whose sample ``i`` has category ``i % n``), so the number of rows of a
    category in one of its batches is about Binomial(B, 1/n): with B = 8 and 5 categories, 0 low
    light (LL) rows in 17 % of the batches and 3 or more in 20 %. A cycle gives every batch 1 or 2
    LL rows, never more (with batch-statistics BatchNorm the dark rows are then always normalised
    among mostly bright ones). The trainer's feed uses "random", the host's distribution. (The
    cycle was suspected of a low-light gap of device-rendered training; that gap was the spread
    between draws of training scenes: docs/performance.md, "Device rendering".)"""
    if order not in CATEGORY_ORDERS:
        raise ValueError(f"category order must be one of {CATEGORY_ORDERS}, got {order!r}")
    indices = jnp.asarray(indices, jnp.int32)
    if order == "cycle":
        return indices % num_categories
    flat = indices.reshape(-1)
    cats = jax.vmap(lambda i: jax.random.randint(jax.random.fold_in(sample_key(seed, i), 2), (), 0,
                                                 num_categories))(flat)
    return cats.astype(jnp.int32).reshape(indices.shape)


def _crop(s: dict, key, height: int, width: int) -> dict:
    """Random same-offset crop of a rendered pair (``pipeline.prepare_pair``'s crop)."""
    h0, w0 = s["img1"].shape[:2]
    u = jax.random.uniform(key, (2,))
    top = jnp.minimum(jnp.floor(u[0] * (h0 - height + 1)), h0 - height).astype(jnp.int32)
    left = jnp.minimum(jnp.floor(u[1] * (w0 - width + 1)), w0 - width).astype(jnp.int32)
    out = {}
    for k, v in s.items():
        if isinstance(v, jax.Array) and v.ndim >= 2 and v.shape[:2] == (h0, w0):
            out[k] = jax.lax.dynamic_slice(v, (top, left) + (0,) * (v.ndim - 2), (height, width) + v.shape[2:])
        else:
            out[k] = v
    out["K"] = s["K"] - jnp.stack([0.0, 0.0, left.astype(jnp.float32), top.astype(jnp.float32)])
    return out


def _rows(bank, seed, step, rows, *, batch_size, height, width, categories, motion_scale, render_size,
          need_depth, extras, rows_per_chunk, category_order="cycle"):
    cat_ids = jnp.asarray([CATEGORIES.index(c) for c in categories], jnp.int32)
    rh, rw = render_size or (height, width)
    step = jnp.asarray(step, jnp.int32)

    def one(row):
        index = step * batch_size + row
        key = sample_key(seed, index)
        s = render_pair(bank, key, cat_ids[row_categories(seed, index, len(categories), category_order)], rh, rw,
                        motion_scale)
        if (rh, rw) != (height, width):
            s = _crop(s, jax.random.fold_in(key, 1), height, width)
        out = {"img1": s["img1"], "img2": s["img2"], "flow_f": s["flow_f"], "flow_b": s["flow_b"],
               "label_mask_f": s["valid_f"], "label_mask_b": s["valid_b"], "category_id": s["category_id"],
               "gt_flow_f": s["flow_f"], "gt_valid_f": s["valid_f"]}
        if need_depth:
            out.update(depth1=s["depth1"], depth2=s["depth2"], K=s["K"])
        if extras:
            out.update({k: s[k] for k in ("depth1", "depth2", "K", "R", "t", "scene", "look", "clean1", "clean2",
                                          "ids1", "ids2")})
        return out

    # Rows are rendered in a loop over chunks of `rows_per_chunk` (vmapped inside a chunk): the
    # same compiled chunk whatever the number of rows, so a row's result does not depend on how
    # many rows a device renders (bit for bit), and with chunks of 1 the motion retries and the
    # weather branch run only for the rows that need them.
    chunks = jax.lax.map(jax.vmap(one), rows.reshape(-1, rows_per_chunk))
    return jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:]), chunks)


def _check(batch_size, height, width, categories, render_size, rows_per_chunk, local=None, category_order="cycle"):
    if category_order not in CATEGORY_ORDERS:
        raise ValueError(f"category_order must be one of {CATEGORY_ORDERS}, got {category_order!r}")
    categories = (categories,) if isinstance(categories, str) else tuple(categories)
    bad = [c for c in categories if c not in CATEGORIES]
    if not categories or bad:
        raise ValueError(f"categories must be a non-empty subset of {CATEGORIES}, got {categories}")
    if batch_size < 1 or height < 32 or width < 32:
        raise ValueError(f"need batch_size >= 1 and height, width >= 32, got {batch_size}, {height}, {width}")
    if render_size is not None:
        render_size = (int(render_size[0]), int(render_size[1]))
        if render_size[0] < height or render_size[1] < width:
            raise ValueError(f"render_size {render_size} must be at least the output size {(height, width)}")
    rows = batch_size if local is None else local
    if rows_per_chunk < 1 or rows % rows_per_chunk:
        raise ValueError(f"rows_per_chunk {rows_per_chunk} must divide the {rows} rows rendered per device")
    return categories, render_size


_STATIC = ("batch_size", "height", "width", "categories", "render_size", "need_depth", "extras", "rows_per_chunk",
           "category_order")


@functools.partial(jax.jit, static_argnames=_STATIC)
def _render_batch_jit(bank, seed, step, motion_scale, **kw):
    return _rows(bank, seed, step, jnp.arange(kw["batch_size"], dtype=jnp.int32), motion_scale=motion_scale, **kw)


def render_batch(bank: TextureBank, seed, step, *, batch_size: int, height: int, width: int,
                 categories: Sequence[str] = CATEGORIES, motion_scale=1.0,
                 render_size: tuple[int, int] | None = None, need_depth: bool = True,
                 extras: bool = False, rows_per_chunk: int = 1, category_order: str = "cycle") -> dict:
    """The global training batch of step ``step`` (jitted; ``seed``, ``step`` and
    ``motion_scale`` are traced, so every step reuses one compiled program).

    Row ``r`` is sample ``i = step * batch_size + r``, rendered from :func:`sample_key`
    ``(seed, i)`` with category ``categories[i % len(categories)]`` (like ``SyntheticScenes``:
    any ``len(categories)`` consecutive samples cover every category); ``category_order="random"``
    draws each sample's category instead (:func:`row_categories`; what the trainer's device feed
    uses, so that batches mix categories like the host pipeline's shuffled ones). ``render_size=(rh, rw)``
    renders at that size and takes a random ``height x width`` crop (K shifted), as the host
    pipeline does with ``data.render_height/width`` (its default is ``(h + h // 8, w + w // 8)``);
    None renders at the output size. Rows are rendered ``rows_per_chunk`` at a time (vmapped),
    chunk after chunk: 1 suits CPUs (a row skips the weather of other categories); an
    accelerator may want whole batches. Rows are the same bit for bit for a given
    ``rows_per_chunk`` (floating-point details of a different chunk size can differ in the last
    bits).

    Returns (leading batch axis ``B``): img1, img2 uint8 ``[B, H, W, 3]``; flow_f, flow_b,
    gt_flow_f float32 ``[B, H, W, 2]``; label_mask_f, label_mask_b, gt_valid_f float32 ``[B, H, W]``;
    category_id int32 ``[B]``; with ``need_depth``: depth1, depth2 ``[B, H, W]`` and K ``[B, 4]``
    float32. ``extras=True`` adds R, t, scene, look, clean1, clean2, ids1, ids2 (see
    :func:`render_pair`).
    """
    categories, render_size = _check(batch_size, height, width, categories, render_size, rows_per_chunk,
                                     category_order=category_order)
    return _render_batch_jit(bank, seed, step, motion_scale, batch_size=batch_size, height=height, width=width,
                             categories=categories, render_size=render_size, need_depth=need_depth, extras=extras,
                             rows_per_chunk=rows_per_chunk, category_order=category_order)


def make_sharded_renderer(mesh: jax.sharding.Mesh, *, batch_size: int, height: int, width: int,
                          axis: str = "data", categories: Sequence[str] = CATEGORIES,
                          render_size: tuple[int, int] | None = None, need_depth: bool = True,
                          extras: bool = False, rows_per_chunk: int = 1, category_order: str = "cycle"):
    """``fn(bank, seed, step, motion_scale=1.0) -> batch``: :func:`render_batch`'s global batch as
    arrays sharded ``P(axis)`` over ``mesh``, each device rendering only its own rows
    (``shard_map``; rows ``[i * b, (i + 1) * b)`` on the ``i``-th device of ``axis``,
    ``b = batch_size / mesh.shape[axis]``, which ``rows_per_chunk`` must divide). The result
    equals :func:`render_batch`'s with the same ``rows_per_chunk``, whatever the device count.
    Pass the bank through :func:`replicate_bank` once."""
    n = mesh.shape[axis]
    if batch_size % n:
        raise ValueError(f"batch_size {batch_size} must be divisible by the {n} devices of mesh axis {axis!r}")
    local = batch_size // n
    categories, render_size = _check(batch_size, height, width, categories, render_size, rows_per_chunk, local,
                                     category_order)
    kw = dict(batch_size=batch_size, height=height, width=width, categories=categories, render_size=render_size,
              need_depth=need_depth, extras=extras, rows_per_chunk=rows_per_chunk, category_order=category_order)

    def body(bank, seed, step, motion_scale):
        rows = jax.lax.axis_index(axis) * local + jnp.arange(local, dtype=jnp.int32)
        return _rows(bank, seed, step, rows, motion_scale=motion_scale, **kw)

    # No collectives inside: every device renders its rows independently (check_vma=False spares
    # the scan and while-loop carries the varying-axis annotations).
    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(), P()), out_specs=P(axis), check_vma=False)
    fn = jax.jit(mapped, out_shardings=NamedSharding(mesh, P(axis)))
    return lambda bank, seed, step, motion_scale=1.0: fn(bank, jnp.int32(seed), jnp.int32(step),
                                                         jnp.float32(motion_scale))
