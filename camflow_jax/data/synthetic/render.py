"""Ray casting of textured planar scenes and the camera-induced flow between two views.

Conventions (docs/design.md, "Conventions", plus the ones fixed here):

- Intrinsics ``K = (fx, fy, cx, cy)`` in pixels; pixel centres at integer coordinates. The ray of
  pixel (x, y) is ``d = ((x - cx) / fx, (y - cy) / fy, 1)`` in camera coordinates (x right,
  y down, z forward), so the ray parameter of a hit IS its depth (camera z).
- A camera pose ``(R, t)`` maps world points to camera points: ``X_cam = R X_world + t``. The
  dataset puts camera 1 at the identity, so world coordinates = camera-1 coordinates and the
  relative pose of a pair is ``X2 = R X1 + t``.
- A plane is ``origin + u * axis_u + v * axis_v``; finite planes cover ``u in [0, extent_u]``,
  ``v in [0, extent_v]`` (rectangle) or the inscribed ellipse. Moving planes have a rigid motion
  parametrised by time ``tau`` (frame 1 of a pair is tau = 0, frame 2 is tau = 1): their centre
  moves by ``tau * velocity`` and they turn by the rotation vector ``tau * spin`` about it.

Ray casting per plane in camera coordinates (plane origin P, unit normal n, axes e_u, e_v):
``z = (n . P) / (n . d)``, ``u = z (e_u . d) - e_u . P``, ``v = z (e_v . d) - e_v . P``. Every dot
product with ``d`` is affine in (x, y), i.e. a row vector plus a column vector, so a plane costs a
handful of whole-image array operations; finite planes are only cast inside the bounding box of
their projected corners. A z-buffer keeps the nearest hit. Colour comes from the plane's texture
mip pyramid (trilinear: bilinear ``cv2.remap`` inside two levels chosen from the pixel footprint).

Flow (:func:`reprojection_flow`): back-project pixel p of view a with its depth,
``X_a = D_a(p) d(p)``, move it to view b, ``X_b = R X_a + t``, project, ``p' = pi(X_b)``; flow is
``p' - p``. Validity (:func:`flow_validity`): the pixel shows a static surface, ``X_b`` lies in front
of camera b, ``p'`` is inside view b (``0 <= x' < W-1``, ``0 <= y' < H-1``, the reference warp's
support), and view b sees that point: ``1 / z_b >= (1 - tol) * invD_b(p')`` where ``invD_b`` is
view b's inverse-depth map read bilinearly. Inverse depth is affine in pixel coordinates on a
plane, so the bilinear read is exact inside a surface; across an occlusion edge it mixes in the
nearer surface, which conservatively marks pixels next to depth edges invalid (like GHOF-Cam's
dilated masks).
"""

from __future__ import annotations

import dataclasses
import functools

import cv2
import numpy as np

__all__ = [
    "Plane",
    "Scene",
    "rotation_matrix",
    "pixel_rays",
    "cast_rays",
    "shade",
    "render_view",
    "reprojection_flow",
    "flow_validity",
    "relative_pose",
]

_Z_MIN = 1e-3  # hits closer than this (in depth units) are ignored: behind or at the camera
_LOOKUP_COLS = 1024  # cv2.remap needs both map sides < 32767: point lists are folded into rows
# Texture level of detail follows the footprint's long axis (factor cos^-_LOD_COS_POWER):
# 1 = the major axis (blurs surfaces seen at grazing angles, never aliases; aliasing would make
# the two views of a surface disagree), 0.5 = geometric mean of the two axes.
_LOD_COS_POWER = 1.0
# Level-of-detail bias (levels): minification up to 2^0.3 = 1.23x reads level 0 alone. Textures
# are pre-blurred (sigma 0.6 texel), so this stays alias-free, and it spares most fronto-parallel
# planes the second texture read.
_LOD_BIAS = 0.3


def rotation_matrix(rotvec) -> np.ndarray:
    """Rodrigues: ``[3, 3]`` rotation by the angle ``|rotvec|`` (radians) about ``rotvec``."""
    r = np.asarray(rotvec, np.float64).reshape(3)
    theta = float(np.linalg.norm(r))
    if theta < 1e-12:
        return np.eye(3)
    k = r / theta
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(theta) * kx + (1 - np.cos(theta)) * (kx @ kx)


@dataclasses.dataclass(frozen=True)
class Plane:
    """One textured plane of a scene (world coordinates, float64 vectors ``[3]``).

    Attributes:
      origin: the point (u, v) = (0, 0).
      axis_u, axis_v: orthonormal in-plane axes; the normal is ``axis_u x axis_v``.
      extent: (size_u, size_v) in world units, or None for an infinite plane.
      shape: "rect", "ellipse" (inscribed in the extent) or "infinite".
      texture: index into ``Scene.textures``.
      texel: world units per level-0 texel.
      tex_angle: rotation (radians) of the texture in the plane.
      tex_offset: (ou, ov) texel offset.
      colour: per-channel multiplier ``[3]`` applied to the texture (tint x shading).
      velocity, spin: rigid motion per unit time (zero for static planes); the plane's centre
        moves by ``tau * velocity`` and the plane turns by ``rotation_matrix(tau * spin)`` about it.
    """

    origin: np.ndarray
    axis_u: np.ndarray
    axis_v: np.ndarray
    extent: tuple[float, float] | None
    shape: str
    texture: int
    texel: float
    tex_angle: float = 0.0
    tex_offset: tuple[float, float] = (0.0, 0.0)
    colour: np.ndarray = dataclasses.field(default_factory=lambda: np.ones(3))
    velocity: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    spin: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))

    moving: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # Cached: the renderer asks for it per plane and per view.
        object.__setattr__(self, "moving", bool(np.any(np.asarray(self.velocity) != 0)
                                                or np.any(np.asarray(self.spin) != 0)))

    def at_time(self, tau: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(origin, axis_u, axis_v)`` at time ``tau``."""
        if not self.moving or tau == 0:
            return self.origin, self.axis_u, self.axis_v
        if self.extent is None:
            centre = self.origin
        else:
            centre = self.origin + 0.5 * (self.extent[0] * self.axis_u + self.extent[1] * self.axis_v)
        rot = rotation_matrix(tau * np.asarray(self.spin))
        origin = centre + tau * np.asarray(self.velocity) + rot @ (self.origin - centre)
        return origin, rot @ self.axis_u, rot @ self.axis_v


@dataclasses.dataclass(frozen=True)
class Scene:
    """Planes plus the mip pyramids they reference. ``far`` is the depth given to rays that hit
    nothing (only possible for cameras turned far from the scene's designed view)."""

    planes: tuple[Plane, ...]
    textures: tuple[tuple[np.ndarray, ...], ...]
    far: float
    sky: np.ndarray = dataclasses.field(default_factory=lambda: np.array([200.0, 210.0, 225.0]))

    def static_table(self) -> np.ndarray:
        """Bool ``[len(planes) + 1]``: entry k+1 says plane k is static; entry 0 (no hit) is True."""
        return np.array([True] + [not p.moving for p in self.planes])


def _check_k(K) -> tuple[float, float, float, float]:
    K = np.asarray(K, np.float64).reshape(-1)
    if K.shape != (4,) or not np.all(np.isfinite(K)) or K[0] <= 0 or K[1] <= 0:
        raise ValueError(f"K must be 4 finite numbers (fx, fy, cx, cy) with fx, fy > 0, got {K}")
    return float(K[0]), float(K[1]), float(K[2]), float(K[3])


def _check_pose(R, t) -> tuple[np.ndarray, np.ndarray]:
    R = np.asarray(R, np.float64)
    t = np.asarray(t, np.float64)
    if R.shape != (3, 3) or t.shape not in ((3,), (3, 1)) or not (np.all(np.isfinite(R)) and np.all(np.isfinite(t))):
        raise ValueError(f"pose must be finite R [3, 3] and t [3], got shapes {R.shape} and {t.shape}")
    return R, t.reshape(3)


def pixel_rays(K, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Ray components ``dx [W] = (x - cx) / fx`` and ``dy [H] = (y - cy) / fy`` (d_z = 1)."""
    fx, fy, cx, cy = _check_k(K)
    return ((np.arange(width) - cx) / fx), ((np.arange(height) - cy) / fy)


def _bbox(corners_cam: np.ndarray, K, height: int, width: int):
    """Pixel bounding box (y0, y1, x0, x1) of projected corners, or the full frame when a corner
    is behind the camera; None when the box misses the frame."""
    if np.any(corners_cam[:, 2] <= _Z_MIN):
        return 0, height, 0, width
    fx, fy, cx, cy = K
    x = fx * corners_cam[:, 0] / corners_cam[:, 2] + cx
    y = fy * corners_cam[:, 1] / corners_cam[:, 2] + cy
    x0, x1 = max(int(np.floor(x.min())) - 1, 0), min(int(np.ceil(x.max())) + 2, width)
    y0, y1 = max(int(np.floor(y.min())) - 1, 0), min(int(np.ceil(y.max())) + 2, height)
    if x0 >= x1 or y0 >= y1:
        return None
    return y0, y1, x0, x1


def _plane_in_camera(plane: Plane, R, t, tau):
    origin, au, av = plane.at_time(tau)
    P = R @ origin + t
    eu = R @ au
    ev = R @ av
    return P, eu, ev, np.cross(eu, ev)


def cast_rays(scene: Scene, R, t, K, height: int, width: int, tau: float = 0.0):
    """Z-buffer ray casting of ``scene`` seen by the camera ``X_cam = R X_world + t``.

    Returns ``(depth [H, W] float32, ids [H, W] int16)``; ``ids`` is the index of the visible plane
    plus one (0 = no hit, depth ``scene.far``). Moving planes are placed at time ``tau``.
    """
    Kt = _check_k(K)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0
               for v in (height, width)):
        raise ValueError(f"height and width must be positive integers, got {height!r}, {width!r}")
    R, t = _check_pose(R, t)
    dx, dy = pixel_rays(Kt, height, width)
    depth = np.full((height, width), np.inf, np.float32)
    ids = np.zeros((height, width), np.int16)
    with np.errstate(divide="ignore", invalid="ignore"):
        for k, plane in enumerate(scene.planes):
            _cast_plane(k, plane, R, t, tau, Kt, dx, dy, depth, ids)
    depth[ids == 0] = scene.far
    return depth, ids


def _cast_plane(k, plane, R, t, tau, Kt, dx, dy, depth, ids) -> None:
    """Z-buffer update of ``depth`` / ``ids`` (in place) with plane ``k``."""
    height, width = depth.shape
    P, eu, ev, n = _plane_in_camera(plane, R, t, tau)
    if plane.extent is None:
        box = (0, height, 0, width)
    else:
        su, sv = plane.extent
        corners = np.stack([P, P + su * eu, P + sv * ev, P + su * eu + sv * ev])
        box = _bbox(corners, Kt, height, width)
        if box is None:
            return
    y0, y1, x0, x1 = box
    bx = dx[x0:x1]
    by = dy[y0:y1, None]
    den = (n[0] * bx + n[2]).astype(np.float32) + (n[1] * by).astype(np.float32)
    z = np.float32(n @ P) / den  # den = 0 (ray parallel to the plane) gives inf: no hit
    hit = (z > _Z_MIN) & (z < np.float32(1e30))
    if plane.extent is not None:
        u = z * ((eu[0] * bx + eu[2]).astype(np.float32) + (eu[1] * by).astype(np.float32))
        u -= np.float32(eu @ P)
        v = z * ((ev[0] * bx + ev[2]).astype(np.float32) + (ev[1] * by).astype(np.float32))
        v -= np.float32(ev @ P)
        su, sv = plane.extent
        if plane.shape == "ellipse":
            uu = (u - su / 2) / np.float32(su / 2)
            vv = (v - sv / 2) / np.float32(sv / 2)
            hit &= (uu * uu + vv * vv) <= 1.0
        else:
            hit &= (u >= 0) & (u <= su) & (v >= 0) & (v <= sv)
    zb = depth[y0:y1, x0:x1]
    closer = hit & (z < zb)
    zb[closer] = z[closer]
    ids[y0:y1, x0:x1][closer] = k + 1


def _lookup(texture: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Bilinear, wrap-around samples ``[N, C]`` uint8 of ``texture`` at texel coords x, y [N]."""
    n = x.shape[0]
    size = np.float32(texture.shape[0])
    rows = -(-n // _LOOKUP_COLS)
    mx = np.zeros(rows * _LOOKUP_COLS, np.float32)
    my = np.zeros(rows * _LOOKUP_COLS, np.float32)
    # Wrapping into [0, size) first: remap's in-range path is several times faster than its
    # border path, and small coordinates keep its fixed-point arithmetic exact.
    inv = np.float32(1.0) / size
    mx[:n] = x - size * np.floor(x * inv)
    my[:n] = y - size * np.floor(y * inv)
    out = cv2.remap(texture, mx.reshape(rows, _LOOKUP_COLS), my.reshape(rows, _LOOKUP_COLS),
                    cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)
    return out.reshape(rows * _LOOKUP_COLS, -1)[:n]


def _rgba(pyramid) -> tuple[np.ndarray, ...]:
    if pyramid[0].shape[-1] == 4:
        return pyramid
    return tuple(cv2.cvtColor(np.ascontiguousarray(level), cv2.COLOR_RGB2RGBA) for level in pyramid)


@functools.lru_cache(maxsize=8)
def _ray_tables(K: tuple, height: int, width: int):
    """Flat ``[H*W]`` float32 ray components dx, dy and ``(1 + c) / 2 * log2(|d|^2)`` with
    ``c = _LOD_COS_POWER`` (cached per camera)."""
    dx, dy = pixel_rays(K, height, width)
    DX = np.tile(dx.astype(np.float32), height)
    DY = np.repeat(dy.astype(np.float32), width)
    L = ((1 + _LOD_COS_POWER) / 2 * np.log2(DX * DX + DY * DY + 1.0)).astype(np.float32)
    for a in (DX, DY, L):
        a.flags.writeable = False
    return DX, DY, L


def shade(scene: Scene, depth: np.ndarray, ids: np.ndarray, R, t, K, tau: float = 0.0) -> np.ndarray:
    """Colour ``[H, W, 3]`` float32 (0..255 scale) of a ray-cast view (see :func:`cast_rays`).

    Texture coordinates are affine in the ray times depth: ``(tu, tv) = z (A d) + b`` with
    ``A`` = rotated in-plane axes over the texel size. Level of detail per pixel: the pixel's
    footprint on the plane is about ``L = z |d| / f`` across the viewing direction and
    ``L / cos(theta)`` along it (theta = angle between ray and normal, ``cos = |n . d| / |d|``);
    the level is ``log2(L / (cos(theta)^c * texel)) - 0.3`` with ``c = 1`` (the long axis:
    surfaces at grazing angles get blurred rather than aliased, so both views of a surface agree;
    0.3 = a small sharpening bias), blended linearly between the two nearest pyramid levels
    (trilinear filtering).

    Speed: texels are RGBA so one texel is one 32-bit word (whole-texel gathers and scatters);
    the plane colour is applied once at the end; and for a finite plane the level is bounded by
    its value at the projected corners (in the field of view the level is a convex function of
    the pixel position: ``-(1 + c) log2(n . d)`` plus ``(1 + c) / 2 log2(1 + |d_xy|^2)``), so a
    plane magnified everywhere skips the per-pixel level computation; the same holds for an
    infinite plane in front of the camera over the whole image, bounded at the image corners.
    """
    Kt = _check_k(K)
    fx, fy, cx, cy = Kt
    f_mean = float(np.sqrt(fx * fy))
    R, t = _check_pose(R, t)
    height, width = depth.shape
    DX, DY, LD = _ray_tables(Kt, height, width)
    f32 = np.float32
    flat_ids = ids.reshape(-1)
    texels = np.empty(height * width, np.uint32)  # packed RGBA of the unlit texture
    texels[flat_ids == 0] = np.uint32(0xFFFFFFFF)  # sky: white, tinted by the colour table
    colour_lut = np.ones((len(scene.planes) + 1, 3), np.float32)
    colour_lut[0] = np.asarray(scene.sky, np.float32) / 255.0
    flat_depth = depth.reshape(-1)
    for k, plane in enumerate(scene.planes):
        pix = np.flatnonzero(flat_ids == k + 1)
        if pix.size == 0:
            continue
        colour_lut[k + 1] = plane.colour
        P, eu, ev, n = _plane_in_camera(plane, R, t, tau)
        ca, sa = np.cos(plane.tex_angle), np.sin(plane.tex_angle)
        au = (ca * eu - sa * ev) / plane.texel
        av = (sa * eu + ca * ev) / plane.texel
        bu = plane.tex_offset[0] - au @ P
        bv = plane.tex_offset[1] - av @ P
        px = DX.take(pix)
        py = DY.take(pix)
        z = flat_depth.take(pix)
        tu = z * (f32(au[0]) * px + f32(au[1]) * py + f32(au[2])) + f32(bu)
        tv = z * (f32(av[0]) * px + f32(av[1]) * py + f32(av[2])) + f32(bv)
        pyramid = _rgba(scene.textures[plane.texture])
        top = len(pyramid) - 1
        lod_offset = np.log2(f_mean * plane.texel) + _LOD_BIAS
        if top == 0 or _max_corner_lod(plane, P, eu, ev, n, lod_offset, Kt, height, width) <= 0.0:
            texels[pix] = _lookup(pyramid[0], tu, tv).view(np.uint32)[:, 0]
            continue
        ndot = np.abs(f32(n[0]) * px + f32(n[1]) * py + f32(n[2]))
        lod = (np.log2(z) + LD.take(pix) - f32(_LOD_COS_POWER) * np.log2(np.maximum(ndot, f32(0.05)))
               - f32(lod_offset))
        np.clip(lod, 0.0, top, out=lod)
        level = np.minimum(lod.astype(np.int32), top - 1)
        counts = np.bincount(level, minlength=top)
        for lev in np.flatnonzero(counts):
            sel = slice(None) if counts[lev] == pix.size else np.flatnonzero(level == lev)
            s = f32(0.5 ** lev)
            x, y = tu[sel] * s, tv[sel] * s
            fr = lod[sel] - f32(lev)
            a = _lookup(pyramid[lev], x, y)
            if fr.max() > 1e-3:
                b = _lookup(pyramid[lev + 1], x * f32(0.5), y * f32(0.5))
                m = a.shape[0]
                # (1 - fr) a + fr b, rounded; OpenCV's per-pixel blend beats numpy broadcasting
                a = cv2.blendLinear(a.reshape(m, 1, 4), b.reshape(m, 1, 4),
                                    (f32(1) - fr).reshape(m, 1), fr.reshape(m, 1)).reshape(m, 4)
            texels[pix[sel]] = a.view(np.uint32)[:, 0]
    out = np.take(colour_lut, ids, axis=0)  # [H, W, 3]; much faster than colour_lut[ids]
    out *= texels.view(np.uint8).reshape(height, width, 4)[..., :3]
    return out


def _max_corner_lod(plane: Plane, P, eu, ev, n, lod_offset: float, K, height: int, width: int) -> float:
    """Upper bound of the level of detail over the pixels of a plane, or +inf when the bound does
    not apply. The level is convex in the pixel position wherever the plane is in front of the
    camera and ``|d_xy| < 1``, so its maximum over a convex region is at a vertex: the projected
    corners of a finite plane, or the four image corners for an infinite plane that is in front
    of the camera over the whole image (the far background, typically)."""
    if plane.extent is None:
        fx, fy, cx, cy = K
        xs = (np.array([0.0, width - 1.0, 0.0, width - 1.0]) - cx) / fx
        ys = (np.array([0.0, 0.0, height - 1.0, height - 1.0]) - cy) / fy
        d = np.stack([xs, ys, np.ones(4)], 1)
        with np.errstate(divide="ignore"):
            z = (n @ P) / (d @ n)
    else:
        su, sv = plane.extent
        corners = np.stack([P, P + su * eu, P + sv * ev, P + su * eu + sv * ev])
        z = corners[:, 2]
        if np.all(z > _Z_MIN):
            d = corners / z[:, None]
    if not np.all((z > _Z_MIN) & np.isfinite(z)):
        return np.inf
    r2 = d[:, 0] ** 2 + d[:, 1] ** 2
    if np.any(r2 >= 1.0):
        return np.inf
    ndot = np.maximum(np.abs(d @ n), 0.05)
    lod = (np.log2(z) + (1 + _LOD_COS_POWER) / 2 * np.log2(r2 + 1.0)
           - _LOD_COS_POWER * np.log2(ndot) - lod_offset)
    return float(lod.max())


def render_view(scene: Scene, R, t, K, height: int, width: int, tau: float = 0.0,
                return_ids: bool = False):
    """Renders ``scene`` from the camera ``X_cam = R X_world + t`` with intrinsics ``K``.

    Args:
      scene: from :func:`camflow_jax.data.synthetic.scenes.sample_scene` (or hand-built).
      R, t: camera pose ``[3, 3]``, ``[3]``; the identity pose is the view the scene was
        designed for. Small rotations (a few degrees) and translations (a fraction of the
        nearest depth) keep the frame filled.
      K: (fx, fy, cx, cy) in pixels of the ``height x width`` image.
      tau: time at which moving planes are placed (0 = first frame of a pair, 1 = second).
      return_ids: also return the plane-id map (0 = nothing hit, k+1 = plane k).
    Returns:
      ``(image uint8 [H, W, 3] RGB, depth float32 [H, W])`` (plus ``ids int16 [H, W]``). The image
      is the clean radiance (no weather, noise or exposure change: see
      ``camflow_jax.data.synthetic.appearance``).
    """
    depth, ids = cast_rays(scene, R, t, K, height, width, tau)
    img = shade(scene, depth, ids, R, t, K, tau)
    img = np.clip(img + 0.5, 0, 255).astype(np.uint8)
    return (img, depth, ids) if return_ids else (img, depth)


def relative_pose(R_a, t_a, R_b, t_b) -> tuple[np.ndarray, np.ndarray]:
    """``(R_ab, t_ab)`` with ``X_b = R_ab X_a + t_ab`` for cameras ``X_i = R_i X_world + t_i``."""
    R_a, R_b = np.asarray(R_a, np.float64), np.asarray(R_b, np.float64)
    R_ab = R_b @ R_a.T
    return R_ab, np.asarray(t_b, np.float64) - R_ab @ np.asarray(t_a, np.float64)


def reprojection_flow(depth: np.ndarray, K, R, t) -> tuple[np.ndarray, np.ndarray]:
    """Flow ``[H, W, 2]`` float32 that a static scene with depth map ``depth`` (view a) undergoes
    when the camera moves by ``X_b = R X_a + t``; also returns ``z_b [H, W]`` (depth in view b).

    ``p' = (fx X_b / Z_b + cx, fy Y_b / Z_b + cy)``, ``flow = p' - p``. Where ``Z_b <= 0`` the
    point is behind camera b: the flow is computed with ``Z_b`` clamped to a tiny positive value
    (finite but meaningless; :func:`flow_validity` excludes it).
    """
    depth = np.asarray(depth, np.float32)
    if depth.ndim != 2:
        raise ValueError(f"depth must be [H, W], got shape {depth.shape}")
    if not (np.all(np.isfinite(depth)) and depth.min() > 0):
        raise ValueError("depth must be finite and positive everywhere")
    fx, fy, cx, cy = _check_k(K)
    R, t = _check_pose(R, t)
    h, w = depth.shape
    dx, dy = pixel_rays((fx, fy, cx, cy), h, w)
    # Row i of R dotted with d is affine in (x, y): a row vector plus a column vector.
    a = [(R[i, 0] * dx + R[i, 2]).astype(np.float32)[None, :] + (R[i, 1] * dy).astype(np.float32)[:, None]
         for i in range(3)]
    xb = depth * a[0] + np.float32(t[0])
    yb = depth * a[1] + np.float32(t[1])
    zb = depth * a[2] + np.float32(t[2])
    inv = 1.0 / np.maximum(zb, np.float32(1e-6))
    flow = np.empty((h, w, 2), np.float32)
    flow[..., 0] = (xb * inv) * np.float32(fx) + np.float32(cx) - np.arange(w, dtype=np.float32)[None, :]
    flow[..., 1] = (yb * inv) * np.float32(fy) + np.float32(cy) - np.arange(h, dtype=np.float32)[:, None]
    return flow, zb


def flow_validity(flow: np.ndarray, z_b: np.ndarray, depth_b: np.ndarray, static: np.ndarray,
                  tol: float = 0.01) -> np.ndarray:
    """``[H, W]`` float32 in {0, 1}: static, in front of camera b, inside view b
    (``0 <= x' < W-1``, ``0 <= y' < H-1``) and not occluded there
    (``1 / z_b >= (1 - tol) * bilinear(1 / depth_b)(p')``)."""
    h, w = flow.shape[:2]
    mx = flow[..., 0] + np.arange(w, dtype=np.float32)[None, :]
    my = flow[..., 1] + np.arange(h, dtype=np.float32)[:, None]
    inside = (mx >= 0) & (mx < w - 1) & (my >= 0) & (my < h - 1) & (z_b > _Z_MIN)
    inv_b = (1.0 / np.asarray(depth_b, np.float32)).astype(np.float32)
    # Out-of-frame coordinates are excluded by `inside`; clamp so remap's fixed point is safe.
    seen = cv2.remap(inv_b, np.clip(mx, -2, w + 1), np.clip(my, -2, h + 1), cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REPLICATE)
    with np.errstate(divide="ignore"):
        visible = (1.0 / np.maximum(z_b, np.float32(_Z_MIN))) >= (1.0 - tol) * seen
    return (inside & visible & static).astype(np.float32)
