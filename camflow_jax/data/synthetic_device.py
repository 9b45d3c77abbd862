"""A JAX renderer of the synthetic parallax scenes: training batches made on the accelerator.

The host renderer (``camflow_jax.data.synthetic``, numpy and OpenCV, one pair at a time on a
CPU core) is the reference; this module renders the same kind of pairs with ``jax.numpy``:
pure, jitted, vmapped over the batch, deterministic in ``(seed, step)``. Per pair:

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

Differences from the host, by design: bilinear texture reads use exact float weights (OpenCV's
``remap`` quantises the sampling position to 1/32 texel and rounds every read and blend to
uint8), rain streaks are splatted points rather than OpenCV's anti-aliased lines, and snow flakes
combine by maximum rather than by drawing order. ``docs/synthetic.md`` gives the measured
agreement.

Usage::

    bank = procedural_bank(seed=0, count=24)            # once; device arrays
    batch = render_batch(bank, seed, step, batch_size=8, height=320, width=576)

``batch`` has the keys, dtypes and layout of ``pipeline.train_dataset``'s batches of
``SyntheticPairs(label="flow")`` (``need_depth=True`` adds depth1, depth2 and K, as
``prepare_pair(need_depth=True)`` does). On a mesh, :func:`make_sharded_renderer` renders each
device's rows of the global batch on that device; row ``r`` of step ``s`` is the same pair
whatever the device count.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from camflow_jax.data import synthetic_device_sampling as smp
from camflow_jax.data.synthetic_appearance import CATEGORIES
from camflow_jax.data.synthetic_device_sampling import MAX_PLANES, DeviceScene

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
    "apply_appearance",
    "render_pair",
    "row_key",
    "render_batch",
    "make_sharded_renderer",
]

_Z_MIN = 1e-3  # as synthetic_render
_LOD_COS_POWER = 1.0
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
    sizes = _level_sizes(size)
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
    from camflow_jax.data.synthetic_textures import TEXTURE_SIZE, procedural_textures

    return texture_bank(procedural_textures(seed, count, TEXTURE_SIZE if size is None else size))


def photo_bank(directory) -> TextureBank:
    """The bank of every photo in ``directory`` (``list_texture_files`` / ``load_texture``: central
    square, 512 px; about 1.4 MB of device memory each)."""
    from camflow_jax.data.synthetic_textures import list_texture_files, load_texture

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
    moved = centre + tau * scene.velocity + jnp.einsum("pij,pj->pi", rot, origin - centre)
    mv = (scene.moving() & (tau != 0))[:, None]  # exactly the frame-1 pose at tau = 0
    origin = jnp.where(mv, moved, origin)
    au = jnp.where(mv, jnp.einsum("pij,pj->pi", rot, au), au)
    av = jnp.where(mv, jnp.einsum("pij,pj->pi", rot, av), av)
    Pc = origin @ R.T + t
    eu, ev = au @ R.T, av @ R.T
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


def _unpack(words):
    return jnp.stack([(words >> s) & 0xFF for s in (0, 8, 16)], -1).astype(jnp.float32)


def _texel_words(bank: TextureBank, tex, level, x, y):
    """The 4 packed texels (a list of uint32 arrays) around level-0 texel coordinates ``(x, y)`` at
    mip ``level`` (per pixel; level ``L`` texel ``i`` is centred on level-0 ``2^L i``), wrapped
    around (power-of-two sides: a bit mask), and the bilinear weights ``(ax, ay)``."""
    size = jnp.right_shift(jnp.int32(bank.size), level)
    # Level l starts after levels 0..l-1: sum of (S / 2^m)^2 = 4 (S^2 - size^2) / 3.
    base = tex * bank.texels.shape[1] + (4 * (bank.size * bank.size) - 4 * size * size) // 3
    scale = jnp.exp2(-level.astype(jnp.float32))
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


def _bilinear_packed(words, ax, ay):
    """Bilinear blend of the 4 packed texels of :func:`_texel_words`, per channel rounded to an
    integer and packed again (one word per pixel, like the host's uint8 reads; a packed result
    also keeps XLA from recomputing the gathers per channel)."""
    out = jnp.zeros(ax.shape, jnp.int32)
    words = [jax.lax.bitcast_convert_type(w, jnp.int32) for w in words]
    for c in range(3):
        t = [((w >> (8 * c)) & 0xFF).astype(jnp.float32) for w in words]
        v = (1 - ay) * ((1 - ax) * t[0] + ax * t[1]) + ay * ((1 - ax) * t[2] + ax * t[3])
        out = out | (jnp.floor(v + 0.5).astype(jnp.int32) << (8 * c))
    return out


def _blend_packed(a, b, fr):
    """``round((1 - fr) a + fr b)`` per channel of two packed texels."""
    out = jnp.zeros(a.shape, jnp.int32)
    for c in range(3):
        va = ((a >> (8 * c)) & 0xFF).astype(jnp.float32)
        vb = ((b >> (8 * c)) & 0xFF).astype(jnp.float32)
        out = out | (jnp.floor((1 - fr) * va + fr * vb + 0.5).astype(jnp.int32) << (8 * c))
    return out


def shade(bank: TextureBank, scene: DeviceScene, depth, ids, R, t, K, tau=0.0):
    """Colour ``[H, W, 3]`` float32 (0..255) of a ray-cast view (``synthetic_render.shade``):
    texture coordinates ``(tu, tv) = z (A d) + b``, level of detail
    ``log2(z |d|^2 / (f |n . d| texel)) - 0.3`` clipped to the pyramid, trilinear filtering, times
    the plane colour; the sky colour where nothing is hit.

    Like the host, every bilinear read and the blend of two levels are rounded to integers
    (uint8 texels); unlike the host (OpenCV ``remap``), the sampling position is not quantised
    to 1/32 texel. Per-pixel plane parameters are scalar gathers from a transposed table (fast
    on XLA:CPU, unlike row gathers)."""
    height, width = depth.shape
    Pc, eu, ev, n = _planes_in_camera(scene, R, t, tau)
    ca, sa = jnp.cos(scene.tex_angle)[:, None], jnp.sin(scene.tex_angle)[:, None]
    au = (ca * eu - sa * ev) / scene.texel[:, None]
    av = (sa * eu + ca * ev) / scene.texel[:, None]
    bu = scene.tex_offset[:, 0] - jnp.sum(au * Pc, -1)
    bv = scene.tex_offset[:, 1] - jnp.sum(av * Pc, -1)
    lod_offset = jnp.log2(jnp.sqrt(K[0] * K[1]) * scene.texel) + _LOD_BIAS
    table = jnp.concatenate([au, av, bu[:, None], bv[:, None], n, lod_offset[:, None], scene.colour,
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
        ld = (1 + _LOD_COS_POWER) / 2 * jnp.log2(px * px + py * py + 1.0)
        lod = jnp.log2(depth) + ld - _LOD_COS_POWER * jnp.log2(jnp.maximum(ndot, 0.05)) - q[11]
        lod = jnp.clip(lod, 0.0, top)
        level = jnp.minimum(lod.astype(jnp.int32), top - 1)
        fr = lod - level
    packed = _bilinear_packed(*_texel_words(bank, tex, level, tu, tv))
    if top > 0:
        packed = _blend_packed(packed, _bilinear_packed(*_texel_words(bank, tex, level + 1, tu, tv)), fr)
    packed = _materialize(packed)
    return colour * jnp.where((ids == 0)[..., None], 255.0, _unpack(packed))


# ----------------------------------------------------------------------------------------------
# Appearance
# ----------------------------------------------------------------------------------------------

def _blur(img, sigma: float):
    """``cv2.GaussianBlur(img, (0, 0), sigma)`` of a float32 ``[H, W]`` image (7 taps for the
    sigmas used here, reflect-101 borders)."""
    r = int(round(sigma * 8 + 1)) | 1
    r //= 2
    k = np.exp(-((np.arange(-r, r + 1)) ** 2) / (2 * sigma * sigma))
    k = (k / k.sum()).astype(np.float32)
    h, w = img.shape
    p = jnp.pad(img, ((0, 0), (r, r)), mode="reflect")
    img = sum(float(k[i]) * p[:, i:i + w] for i in range(2 * r + 1))
    p = jnp.pad(img, ((r, r), (0, 0)), mode="reflect")
    return sum(float(k[i]) * p[i:i + h] for i in range(2 * r + 1))


def _splat(shape, x, y, value, op: str):
    """Scatter ``value`` at integer pixels ``(x, y)`` of a zero ``[H, W]`` image (``op``: "add" or
    "max"); pixels outside the image are dropped."""
    h, w = shape
    ok = (x >= 0) & (x < w) & (y >= 0) & (y < h)
    idx = jnp.where(ok, y * w + x, h * w).reshape(-1)
    ref = jnp.zeros(h * w, jnp.float32).at[idx]
    out = ref.add(value.reshape(-1), mode="drop") if op == "add" else ref.max(value.reshape(-1), mode="drop")
    return out.reshape(h, w)


def _rain_layer(u, look, height: int, width: int):
    """Streaks of ``look["rain_count"]`` (host ``_rain_layer``): rounded end points as on the
    host, each streak splatted as points at most 1 px apart (bilinear weights, coverage 1 per
    pixel along the streak), clipped to 1, blurred (sigma 0.7), times the brightness."""
    n, m_max, _, _ = smp.particle_limits(height, width)
    lo = jnp.array([-0.1 * width, -0.1 * height], jnp.float32)
    start = lo + u(0.0, 1.0, (n, 2)) * jnp.array([1.2 * width, 1.2 * height], jnp.float32)
    ang = look["rain_angle"] + 0.03 * u.normal((n,))
    length = look["rain_length"] * u(0.6, 1.4, (n,))
    end = start + jnp.stack([jnp.sin(ang), jnp.cos(ang)], -1) * length[:, None]
    start, end = jnp.round(start), jnp.round(end)
    seg_len = jnp.sqrt(jnp.sum((end - start) ** 2, -1))
    m = jnp.maximum(jnp.ceil(seg_len), 1.0)
    k = jnp.arange(m_max, dtype=jnp.float32)
    pts = start[:, None] + (end - start)[:, None] * (k[None, :] / m[:, None])[..., None]  # [n, m_max, 2]
    weight = jnp.where((k[None, :] <= m[:, None]) & (jnp.arange(n) < look["rain_count"])[:, None],
                       ((seg_len + 1) / (m + 1))[:, None], 0.0)
    x0, y0 = jnp.floor(pts[..., 0]), jnp.floor(pts[..., 1])
    ax, ay = pts[..., 0] - x0, pts[..., 1] - y0
    x0, y0 = x0.astype(jnp.int32), y0.astype(jnp.int32)
    xs = jnp.stack([x0, x0 + 1, x0, x0 + 1])
    ys = jnp.stack([y0, y0, y0 + 1, y0 + 1])
    ws = jnp.stack([(1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay]) * weight
    layer = jnp.minimum(_splat((height, width), xs, ys, ws, "add"), 1.0)
    return _blur(layer, 0.7) * look["rain_brightness"]


def _snow_layer(u, look, height: int, width: int):
    """Flakes of ``look["snow_count"]`` (host ``_snow_layer``): integer centres, radius
    ``min(Geometric(0.55), max_radius)``, opacity ``U(0.5, 1)``, coverage ``clip(r + 0.5 - d, 0, 1)``,
    overlaps combined by maximum, blurred (sigma 0.8), clipped to 1."""
    _, _, n, rmax = smp.particle_limits(height, width)
    xs = u.integers(0, width, (n,))
    ys = u.integers(0, height, (n,))
    radius = jnp.minimum(jnp.floor(jnp.log1p(-u(0.0, 1.0, (n,))) / math.log(1 - 0.55)) + 1, rmax)
    alpha = u(0.5, 1.0, (n,)) * (jnp.arange(n) < look["snow_count"])
    o = jnp.arange(-rmax, rmax + 1)  # coverage vanishes beyond r + 0.5
    oy, ox = jnp.meshgrid(o, o, indexing="ij")
    d = jnp.sqrt((ox * ox + oy * oy).astype(jnp.float32))
    cover = jnp.clip(radius[:, None, None] + 0.5 - d, 0.0, 1.0) * alpha[:, None, None]
    layer = _splat((height, width), xs[:, None, None] + ox, ys[:, None, None] + oy, cover, "max")
    return jnp.minimum(_blur(layer, 0.8), 1.0)


def _standard_normal(key, shape):
    """Standard-normal samples from 16 random bits each, by inverse-CDF lookup at
    ``(k + 1/2) / 65536`` (the host's ``synthetic_appearance.standard_normal``: tails cut at
    ±4.3 sigma, immaterial for sensor noise; half the random bits of ``jax.random.normal`` and
    a table read instead of ``erf_inv``)."""
    table = jax.scipy.special.ndtri((jnp.arange(65536, dtype=jnp.float32) + 0.5) / 65536)
    n = math.prod(shape)
    bits = jax.random.bits(key, ((n + 1) // 2,), jnp.uint32)
    idx = jnp.concatenate([bits & 0xFFFF, bits >> 16])[:n].astype(jnp.int32)
    return table.at[idx].get(mode="promise_in_bounds").reshape(shape)


def apply_appearance(clean, depth, look: dict, category_id, key):
    """One frame (``synthetic_appearance.apply_appearance``): clean float RGB ``[H, W, 3]`` and its
    depth -> uint8 RGB. ``category_id`` (index into ``CATEGORIES``) may be traced: every
    category's effect is computed and the right one selected."""
    height, width = depth.shape
    cat = jnp.asarray(category_id)
    n_rain, _, n_snow, _ = smp.particle_limits(height, width)
    k_uniform, k_noise = jax.random.split(key)
    u = smp.UniformStream(k_uniform, 3 + 5 * n_rain + 4 * n_snow)
    gain = 1 + u(-0.03, 0.03)
    bias = u(-3.0, 3.0)
    img = clean.astype(jnp.float32)
    air = look["airlight"]
    beta = look["beta"] * u(0.97, 1.03)
    fog = air + (img - air) * jnp.exp(depth * -beta)[..., None]
    rain = img * 0.9 + 0.1 * 128 + _rain_layer(u, look, height, width)[..., None]
    haze = look["snow_haze"]
    keep = 1 - _snow_layer(u, look, height, width)
    snow = ((img * (1 - haze) + (haze * 255 - 245)) * keep[..., None]) + 245.0
    idx = CATEGORIES.index
    img = jnp.where(cat == idx("FOG"), fog,
                    jnp.where(cat == idx("RAIN"), rain, jnp.where(cat == idx("SNOW"), snow, img)))
    dark = look["dark"]
    low = jnp.maximum(img * (look["cast"] * gain * dark) + bias * dark, 0.0)
    is_ll = cat == idx("LL")
    img = jnp.where(is_ll, low, img * gain + bias)
    sigma = jnp.where(is_ll, jnp.sqrt(low * look["shot"] + look["read"] ** 2), look["noise"])
    img = img + _standard_normal(k_noise, img.shape) * sigma + 0.5
    return jnp.clip(img, 0, 255).astype(jnp.uint8)


# ----------------------------------------------------------------------------------------------
# Pairs and batches
# ----------------------------------------------------------------------------------------------

def render_pair(bank: TextureBank, key, category_id, height: int, width: int, motion_scale=1.0) -> dict:
    """One labelled pair from ``key`` (``synthetic.render_pair``'s procedure). Returns float32
    depth1, depth2 ``[H, W]``, K ``[4]``, flow_f, flow_b ``[H, W, 2]``, valid_f, valid_b ``[H, W]``,
    R ``[3, 3]``, t ``[3]``; uint8 img1, img2 ``[H, W, 3]``; int32 category_id; and, to check or
    re-render it, scene (:class:`DeviceScene`), look (appearance parameters), clean1, clean2
    (float32 ``[H, W, 3]`` before appearance) and ids1, ids2 (int32 slot + 1)."""
    k_intr, k_scene, k_motion, k_look, k_fx1, k_fx2 = jax.random.split(key, 6)
    K = smp.sample_intrinsics(k_intr, height, width)
    scene = smp.sample_scene(k_scene, K, height, width, bank.num_textures)
    eye, zero = jnp.eye(3, dtype=jnp.float32), jnp.zeros(3, jnp.float32)
    depth1, ids1 = cast_rays(scene, eye, zero, K, height, width, 0.0)
    static = jnp.concatenate([jnp.ones(1, bool), ~scene.moving()])
    sub = depth1[::4, ::4].reshape(-1)
    z_near, depth_scale = jnp.percentile(sub, 2), jnp.percentile(sub, 90)
    motion_keys = jax.random.split(k_motion, _MOTION_ATTEMPTS)

    def attempt(i):
        R, t = smp.sample_camera_motion(motion_keys[i], z_near, K, width, motion_scale)
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
    R_b, t_b = R.T, -(R.T @ t)
    flow_b, z1 = reprojection_flow(depth2, K, R_b, t_b)
    valid_b = flow_validity(flow_b, z1, depth1, static[ids2])
    # Both views in one vmapped program (half the code to compile).
    depths, ids = jnp.stack([depth1, depth2]), jnp.stack([ids1, ids2])
    clean1, clean2 = jax.vmap(shade, (None, None, 0, 0, 0, 0, None, 0))(
        bank, scene, depths, ids, jnp.stack([eye, R]), jnp.stack([zero, t]), K, jnp.array([0.0, 1.0]))
    look = smp.sample_appearance(k_look, depth_scale, height, width)
    img1, img2 = jax.vmap(apply_appearance, (0, 0, None, None, 0))(
        jnp.stack([clean1, clean2]), depths, look, category_id, jnp.stack([k_fx1, k_fx2]))
    return {
        "img1": img1, "img2": img2,
        "depth1": depth1, "depth2": depth2, "K": K, "flow_f": flow_f, "flow_b": flow_b,
        "valid_f": valid_f, "valid_b": valid_b, "R": R, "t": t,
        "category_id": jnp.asarray(category_id, jnp.int32),
        "scene": scene, "look": look, "clean1": clean1, "clean2": clean2, "ids1": ids1, "ids2": ids2,
    }


def row_key(seed, step, row):
    """Key of row ``row`` of the global batch of step ``step``:
    ``fold_in(fold_in(key(seed), step), row)``."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), step), row)


def _crop(s: dict, key, height: int, width: int) -> dict:
    """Random same-offset crop of a rendered pair (``pipeline.prepare_pair``'s crop)."""
    h0, w0 = s["img1"].shape[:2]
    kt, kl = jax.random.split(key)
    top = jax.random.randint(kt, (), 0, h0 - height + 1)
    left = jax.random.randint(kl, (), 0, w0 - width + 1)
    out = {}
    for k, v in s.items():
        if isinstance(v, jax.Array) and v.ndim >= 2 and v.shape[:2] == (h0, w0):
            out[k] = jax.lax.dynamic_slice(v, (top, left) + (0,) * (v.ndim - 2), (height, width) + v.shape[2:])
        else:
            out[k] = v
    out["K"] = s["K"] - jnp.stack([0.0, 0.0, left.astype(jnp.float32), top.astype(jnp.float32)])
    return out


def _rows(bank, seed, step, rows, *, batch_size, height, width, categories, motion_scale, render_size,
          need_depth, extras):
    cat_ids = jnp.asarray([CATEGORIES.index(c) for c in categories], jnp.int32)
    rh, rw = render_size or (height, width)
    step = jnp.asarray(step, jnp.int32)

    def one(row):
        k_pair, k_crop = jax.random.split(row_key(seed, step, row))
        cat = cat_ids[(step * batch_size + row) % len(categories)]
        s = render_pair(bank, k_pair, cat, rh, rw, motion_scale)
        if (rh, rw) != (height, width):
            s = _crop(s, k_crop, height, width)
        out = {"img1": s["img1"], "img2": s["img2"], "flow_f": s["flow_f"], "flow_b": s["flow_b"],
               "label_mask_f": s["valid_f"], "label_mask_b": s["valid_b"], "category_id": s["category_id"],
               "gt_flow_f": s["flow_f"], "gt_valid_f": s["valid_f"]}
        if need_depth:
            out.update(depth1=s["depth1"], depth2=s["depth2"], K=s["K"])
        if extras:
            out.update({k: s[k] for k in ("depth1", "depth2", "K", "R", "t", "scene", "look", "clean1", "clean2",
                                          "ids1", "ids2")})
        return out

    return jax.vmap(one)(rows)


def _check(batch_size, height, width, categories, render_size):
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
    return categories, render_size


@functools.partial(jax.jit, static_argnames=("batch_size", "height", "width", "categories", "render_size",
                                             "need_depth", "extras"))
def _render_batch_jit(bank, seed, step, motion_scale, *, batch_size, height, width, categories, render_size,
                      need_depth, extras):
    return _rows(bank, seed, step, jnp.arange(batch_size, dtype=jnp.int32), batch_size=batch_size,
                 height=height, width=width, categories=categories, motion_scale=motion_scale,
                 render_size=render_size, need_depth=need_depth, extras=extras)


def render_batch(bank: TextureBank, seed, step, *, batch_size: int, height: int, width: int,
                 categories: Sequence[str] = CATEGORIES, motion_scale=1.0,
                 render_size: tuple[int, int] | None = None, need_depth: bool = True,
                 extras: bool = False) -> dict:
    """The global training batch of step ``step`` (jitted; ``seed``, ``step`` and
    ``motion_scale`` are traced, so every step reuses one compiled program).

    Row ``r`` is rendered from :func:`row_key` ``(seed, step, r)``; its category is
    ``categories[(step * batch_size + r) % len(categories)]`` (like ``SyntheticScenes``, any
    ``len(categories)`` consecutive samples cover every category). ``render_size=(rh, rw)``
    renders at that size and takes a random ``height x width`` crop (K shifted), as the host
    pipeline does with ``data.render_height/width`` (its default is ``(h + h // 8, w + w // 8)``);
    None renders at the output size.

    Returns (leading batch axis ``B``): img1, img2 uint8 ``[B, H, W, 3]``; flow_f, flow_b,
    gt_flow_f float32 ``[B, H, W, 2]``; label_mask_f, label_mask_b, gt_valid_f float32 ``[B, H, W]``;
    category_id int32 ``[B]``; with ``need_depth``: depth1, depth2 ``[B, H, W]`` and K ``[B, 4]``
    float32. ``extras=True`` adds R, t, scene, look, clean1, clean2, ids1, ids2 (see
    :func:`render_pair`).
    """
    categories, render_size = _check(batch_size, height, width, categories, render_size)
    return _render_batch_jit(bank, seed, step, motion_scale, batch_size=batch_size, height=height, width=width,
                             categories=categories, render_size=render_size, need_depth=need_depth, extras=extras)


def make_sharded_renderer(mesh: jax.sharding.Mesh, *, batch_size: int, height: int, width: int,
                          axis: str = "data", categories: Sequence[str] = CATEGORIES,
                          render_size: tuple[int, int] | None = None, need_depth: bool = True,
                          extras: bool = False):
    """``fn(bank, seed, step, motion_scale=1.0) -> batch``: :func:`render_batch`'s global batch as
    arrays sharded ``P(axis)`` over ``mesh``, each device rendering only its own rows
    (``shard_map``; rows ``[i * b, (i + 1) * b)`` on the ``i``-th device of ``axis``,
    ``b = batch_size / mesh.shape[axis]``). The result equals :func:`render_batch`'s whatever the
    device count. Pass the bank through :func:`replicate_bank` once."""
    categories, render_size = _check(batch_size, height, width, categories, render_size)
    n = mesh.shape[axis]
    if batch_size % n:
        raise ValueError(f"batch_size {batch_size} must be divisible by the {n} devices of mesh axis {axis!r}")
    local = batch_size // n

    def body(bank, seed, step, motion_scale):
        rows = jax.lax.axis_index(axis) * local + jnp.arange(local, dtype=jnp.int32)
        return _rows(bank, seed, step, rows, batch_size=batch_size, height=height, width=width,
                     categories=categories, motion_scale=motion_scale, render_size=render_size,
                     need_depth=need_depth, extras=extras)

    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P(), P(), P(), P()), out_specs=P(axis))
    fn = jax.jit(mapped, out_shardings=NamedSharding(mesh, P(axis)))
    return lambda bank, seed, step, motion_scale=1.0: fn(bank, jnp.int32(seed), jnp.int32(step),
                                                         jnp.float32(motion_scale))
