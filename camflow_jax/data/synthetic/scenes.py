"""Procedural synthetic parallax scenes: the embedded default dataset.

See docs/design.md, "Synthetic data".

Each sample is a pair of views of a random 3D scene of textured planes (far background, ground
plane, occluding finite layers, a side wall now and then, 1–2 independently moving objects),
seen by a pinhole camera that moves by a random rotation of a few degrees and a translation big
enough for clear parallax (lateral and forward). Labels come from geometry, not from an
estimator:

- ``flow_f`` (image-1 grid): back-project pixel p with ``depth1``, apply ``X2 = R X1 + t``,
  project; ``warp(img2, flow_f) ≈ img1`` on valid pixels. ``flow_b`` likewise from ``depth2``
  with the inverse motion ``X1 = R^T (X2 - t)``.
- ``valid_f`` / ``valid_b``: the pixel shows a static surface, it lands inside the other view and
  the other view sees it (inverse-depth test, see ``synthetic_render.flow_validity``).
- ``homography``: the least-squares homography of ``flow_f`` over ``valid_f``, i.e.
  ``argmin_H sum_p |H(p) - (p + flow_f(p))|^2`` (geometric error, image 1 -> image 2), the same
  criterion as ``cv2.findHomography(..., method=0)``; algebraic DLT start, Levenberg–Marquardt.
  For speed the sum runs over the valid pixels of a stride grid (``homography_fit_stride``: every
  4th row and column at 320x576, every pixel below 160 px); the flow is smooth, so this changes
  the label by a small fraction of a pixel.
- ``points1`` / ``points2``: 32 valid (static, visible) pixels and their image-2 positions.
- ``R``, ``t`` (extra keys): the relative pose, ``X2 = R X1 + t`` in camera coordinates.

Determinism: sample ``i`` of ``SyntheticScenes(seed=s, ...)`` is a pure function of ``(s, i)`` and
the constructor arguments; every random draw comes from ``rng = np.random.default_rng([s, i])``,
in this order: intrinsics, scene, camera motion(s), appearance, frame-1 and frame-2 effects,
points (the procedural texture bank comes from ``default_rng([s, 7919, j])``). Another seed gives
an independent, held-out set of scenes and textures. Category of sample ``i``:
``categories[i % len(categories)]`` (so any ``len(categories)`` consecutive indices cover every
category).

To render your own camera paths (e.g. shaky clips for stabilization)::

    rng = np.random.default_rng(0)
    textures = procedural_textures(seed=0, count=24)
    K = sample_intrinsics(rng, 320, 576)
    scene = sample_scene(rng, textures, K, 320, 576)     # designed for the identity pose
    R, t = sample_camera_motion(rng, z_near=3.0, K=K, width=576)  # or any path of poses
    image, depth = render_view(scene, R, t, K, 320, 576, tau=0.5)  # X_cam = R X_world + t
    # weather/exposure/noise: synthetic_appearance.sample_appearance / apply_appearance
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import os
from typing import Sequence

import numpy as np

from camflow_jax.data.synthetic.appearance import CATEGORIES, apply_appearance, sample_appearance
from camflow_jax.data.synthetic.render import (
    Plane,
    Scene,
    cast_rays,
    flow_validity,
    relative_pose,
    render_view,
    reprojection_flow,
    rotation_matrix,
    shade,
)
from camflow_jax.data.synthetic.spec import INTRINSICS, MOTION, REFERENCE_WIDTH, SCENE
from camflow_jax.data.synthetic.textures import (
    list_texture_files,
    load_texture,
    procedural_textures,
)

__all__ = [
    "CATEGORIES",
    "NUM_POINTS",
    "SyntheticScenes",
    "Plane",
    "Scene",
    "sample_intrinsics",
    "sample_scene",
    "sample_camera_motion",
    "render_view",
    "render_pair",
    "reprojection_flow",
    "relative_pose",
    "fit_homography_lsq",
    "homography_fit_stride",
    "procedural_textures",
]

#: Number of sparse correspondences per sample.
NUM_POINTS = 32
_MIN_VALID_FRACTION = 0.3  # camera motions leaving less of image 1 valid are redrawn
_MOTION_ATTEMPTS = 6


# ----------------------------------------------------------------------------------------------
# Scene and camera sampling
# ----------------------------------------------------------------------------------------------

def sample_intrinsics(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """``K = (fx, fy, cx, cy)`` float32: ``fx ~ U(0.9, 1.1) W``, ``fy = fx (1 + U(-0.02, 0.02))``,
    principal point within ±2 % of the image centre ``((W-1)/2, (H-1)/2)``."""
    fx = rng.uniform(*INTRINSICS.focal) * width
    fy = fx * (1 + rng.uniform(*INTRINSICS.aspect))
    cx = (width - 1) / 2 + rng.uniform(*INTRINSICS.centre) * width
    cy = (height - 1) / 2 + rng.uniform(*INTRINSICS.centre) * height
    return np.array([fx, fy, cx, cy], np.float32)


def _euler(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """``Ry(yaw) Rx(pitch) Rz(roll)`` (radians)."""
    return (rotation_matrix([0, yaw, 0]) @ rotation_matrix([pitch, 0, 0])
            @ rotation_matrix([0, 0, roll]))


def _facing_plane(centre, size, rot, **kw) -> Plane:
    """Finite plane of ``size = (su, sv)`` centred at ``centre``, axes ``rot @ e_x``, ``rot @ e_y``
    (so ``rot = I`` faces the camera)."""
    eu, ev = rot[:, 0], rot[:, 1]
    origin = np.asarray(centre, np.float64) - 0.5 * size[0] * eu - 0.5 * size[1] * ev
    return Plane(origin=origin, axis_u=eu, axis_v=ev, extent=(float(size[0]), float(size[1])), **kw)


def _texture_kw(rng, n_textures: int, texel: float, brightness=SCENE.brightness) -> dict:
    colour = rng.uniform(*brightness) * (1 + rng.uniform(*SCENE.colour_jitter, 3))
    return dict(texture=int(rng.integers(n_textures)), texel=float(texel),
                tex_angle=float(rng.uniform(0, 2 * np.pi)),
                tex_offset=(float(rng.uniform(*SCENE.texture_offset)), float(rng.uniform(*SCENE.texture_offset))),
                colour=colour)


def sample_scene(rng: np.random.Generator, textures: Sequence, K, height: int, width: int) -> Scene:
    """A random scene designed for the camera at the identity pose with intrinsics ``K``.

    World units are arbitrary (depth scale is irrelevant for flow); with ``z_near ~ U(2.5, 5)``:
    - background: infinite plane at ``z_far ~ U(30, 120)``, tilted up to ±10°;
    - ground (probability 0.85): infinite plane ``U(1, 2.5)`` below the camera, camera pitched
      ``U(-4, 12)``° down and rolled ±3°, so depth varies continuously down the image;
    - 3–6 occluding layers (rectangles, some ellipses) at log-uniform depths in
      ``[z_near, 0.5 z_far]`` (the first at ``z_near``), 12–45 % of the width, turned ±35° (yaw),
      ±20° (pitch), ±15° (roll);
    - a side wall (probability 0.35): a long plane turned 55–75°, receding from ``1.2 z_near``;
    - 1–2 moving objects at depths ``U(1.1, 4) z_near`` that shift 8–40 px (at 576 wide) and turn
      up to ±8° between ``tau = 0`` and ``tau = 1``.
    Texels are sized to about 0.8–1.6 px at the plane's reference depth (slightly magnified:
    sharp, alias-free, and mostly a single texture read). ``textures`` is a
    sequence of mip pyramids; the returned scene keeps only the ones it uses. The numbers:
    :data:`camflow_jax.data.synthetic.spec.SCENE`.
    """
    s = SCENE
    fx, fy, cx, cy = (float(v) for v in np.asarray(K, np.float64).reshape(4))
    n_tex = len(textures)
    if n_tex == 0:
        raise ValueError("sample_scene needs at least one texture")
    px_size = 1.0 / fx  # world size of a pixel at depth 1
    z_near = rng.uniform(*s.z_near)
    z_far = rng.uniform(*s.z_far)
    pitch = np.deg2rad(rng.uniform(*s.camera_pitch))
    roll = np.deg2rad(rng.uniform(*s.camera_roll))
    cam = rotation_matrix([0, 0, roll]) @ rotation_matrix([pitch, 0, 0])  # level -> camera
    planes: list[Plane] = []

    bg_rot = cam @ _euler(np.deg2rad(rng.uniform(*s.background_tilt)), np.deg2rad(rng.uniform(*s.background_tilt)), 0)
    bg_centre = cam @ np.array([0.0, 0.0, z_far])
    planes.append(Plane(origin=bg_centre, axis_u=bg_rot[:, 0], axis_v=bg_rot[:, 1], extent=None,
                        shape="infinite",
                        **_texture_kw(rng, n_tex, z_far * px_size * rng.uniform(*s.background_texel),
                                      s.background_brightness)))

    if rng.random() < s.ground_probability:
        hc = rng.uniform(*s.ground_height)
        z_bottom = hc * fy / max(height - cy, 1.0)  # ground depth at the bottom row (level camera)
        planes.append(Plane(origin=cam @ np.array([0.0, hc, 0.0]), axis_u=cam[:, 0], axis_v=cam[:, 2],
                            extent=None, shape="infinite",
                            **_texture_kw(rng, n_tex, z_bottom * px_size * rng.uniform(*s.ground_texel))))

    n_layers = int(rng.integers(*s.layers))
    for j in range(n_layers):
        z = z_near if j == 0 else float(np.exp(rng.uniform(np.log(z_near), np.log(s.layer_far * z_far))))
        u = rng.uniform(*s.layer_x) * width
        v = rng.uniform(*s.layer_y) * height
        centre = z * np.array([(u - cx) / fx, (v - cy) / fy, 1.0])
        pw = rng.uniform(*s.layer_width) * width
        ph = pw * np.exp(rng.uniform(np.log(s.layer_aspect[0]), np.log(s.layer_aspect[1])))
        rot = _euler(np.deg2rad(rng.uniform(*s.layer_yaw)), np.deg2rad(rng.uniform(*s.layer_pitch)),
                     np.deg2rad(rng.uniform(*s.layer_roll)))
        shape = "ellipse" if rng.random() < s.layer_ellipse_probability else "rect"
        planes.append(_facing_plane(centre, (pw * z * px_size, ph * z * px_size), rot, shape=shape,
                                    **_texture_kw(rng, n_tex, z * px_size * rng.uniform(*s.layer_texel))))

    if rng.random() < s.wall_probability:
        side = 1.0 if rng.random() < 0.5 else -1.0
        z0 = s.wall_near * z_near
        length = rng.uniform(*s.wall_length) * z_far
        half_width = z0 * (width / 2) / fx * rng.uniform(*s.wall_offset)
        angle = np.deg2rad(rng.uniform(*s.wall_angle)) * side
        axis_u = cam @ np.array([np.sin(angle), 0.0, np.cos(angle)])
        axis_v = cam[:, 1]
        top = -rng.uniform(*s.wall_top) * z0 * height / (2 * fy)
        origin = cam @ np.array([side * half_width, top, z0])
        planes.append(Plane(origin=origin, axis_u=axis_u, axis_v=axis_v,
                            extent=(float(length), float(rng.uniform(*s.wall_height) * abs(top))),
                            shape="rect", **_texture_kw(rng, n_tex, z0 * px_size * rng.uniform(*s.wall_texel))))

    for _ in range(int(rng.integers(*s.movers))):
        z = z_near * rng.uniform(*s.mover_depth)
        u = rng.uniform(*s.mover_x) * width
        v = rng.uniform(*s.mover_y) * height
        centre = z * np.array([(u - cx) / fx, (v - cy) / fy, 1.0])
        pw = rng.uniform(*s.mover_width) * width
        ph = pw * np.exp(rng.uniform(np.log(s.mover_aspect[0]), np.log(s.mover_aspect[1])))
        rot = _euler(np.deg2rad(rng.uniform(*s.mover_yaw)), np.deg2rad(rng.uniform(*s.mover_pitch)), 0.0)
        shift = rng.uniform(*s.mover_shift) * width / REFERENCE_WIDTH * z * px_size
        phi = rng.uniform(0, 2 * np.pi)
        velocity = np.array([shift * np.cos(phi), shift * np.sin(phi), rng.uniform(*s.mover_advance) * z])
        spin = np.deg2rad(rng.uniform(*s.mover_spin)) * np.cross(rot[:, 0], rot[:, 1])
        shape = "ellipse" if rng.random() < s.mover_ellipse_probability else "rect"
        planes.append(_facing_plane(centre, (pw * z * px_size, ph * z * px_size), rot, shape=shape,
                                    velocity=velocity, spin=spin,
                                    **_texture_kw(rng, n_tex, z * px_size * rng.uniform(*s.mover_texel))))

    # Keep only the textures in use and renumber (the scene is self-contained).
    used = sorted({p.texture for p in planes})
    remap = {old: new for new, old in enumerate(used)}
    planes = [dataclasses.replace(p, texture=remap[p.texture]) for p in planes]
    sky = rng.uniform(*s.sky) * np.array(s.sky_tint)
    return Scene(planes=tuple(planes), textures=tuple(textures[i] for i in used), far=float(s.far_factor * z_far),
                 sky=sky)


def sample_camera_motion(rng: np.random.Generator, z_near: float, K, width: int, scale: float = 1.0):
    """Random relative pose ``(R [3, 3], t [3])`` float64 with ``X2 = R X1 + t``.

    Rotation: yaw and pitch ``N(0, 1.2°)`` clipped to ±3.5°, roll ``N(0, 0.8°)`` clipped to ±2.5°
    (about 12 px of flow per degree at 576 wide). Translation: lateral parallax of
    ``U(4, 36) * W / 576`` px at depth ``z_near`` in a uniform direction, plus a forward/backward
    component ``U(-0.08, 0.08) z_near`` (up to ~23 px radial flow at the image edge for the
    nearest surfaces). ``scale`` multiplies every angle and translation (the same random draws),
    e.g. 1.6 for the 25-35 px mean flows of real handheld or stereo pairs at 576 wide. The
    numbers: :data:`camflow_jax.data.synthetic.spec.MOTION`.
    """
    s = MOTION
    fx = float(np.asarray(K).reshape(4)[0])
    scale = float(scale)
    yaw, pitch = np.clip(rng.normal(0, s.yaw_pitch_sigma, 2), -s.yaw_pitch_limit, s.yaw_pitch_limit) * scale
    roll = np.clip(rng.normal(0, s.roll_sigma), -s.roll_limit, s.roll_limit) * scale
    R = _euler(np.deg2rad(yaw), np.deg2rad(pitch), np.deg2rad(roll))
    parallax = rng.uniform(*s.parallax) * width / REFERENCE_WIDTH * scale
    phi = rng.uniform(0, 2 * np.pi)
    lateral = parallax * z_near / fx
    t = np.array([lateral * np.cos(phi), lateral * np.sin(phi), rng.uniform(*s.advance) * z_near * scale])
    return R, t


# ----------------------------------------------------------------------------------------------
# Homography pseudo-label
# ----------------------------------------------------------------------------------------------

def _hartley(pts: np.ndarray) -> np.ndarray:
    c = pts.mean(0)
    d = np.sqrt(((pts - c) ** 2).sum(1)).mean()
    s = np.sqrt(2) / max(d, 1e-12)
    return np.array([[s, 0, -s * c[0]], [0, s, -s * c[1]], [0, 0, 1.0]])


def fit_homography_lsq(p: np.ndarray, q: np.ndarray, iters: int = 30) -> np.ndarray:
    """Least-squares homography ``argmin_H sum_i |H(p_i) - q_i|^2`` (float64 ``[3, 3]``, H[2,2]=1).

    Hartley-normalised points; start from the algebraic DLT (smallest eigenvector of A^T A),
    then Levenberg–Marquardt on the geometric error over the 8 parameters with h9 = 1. The
    normalisation of q is an isotropic similarity, so the minimiser is that of the pixel error.

    Speed: with m = (x, y, 1) / w the Jacobian rows are ``[m, 0, -u m_xy]`` and ``[0, m, -v m_xy]``,
    so ``J^T J`` and ``J^T r`` are assembled from a few ``[N, 3]`` moment products instead of an
    ``[2N, 8]`` Jacobian (the same for A^T A of the DLT).
    """
    p = np.asarray(p, np.float64).reshape(-1, 2)
    q = np.asarray(q, np.float64).reshape(-1, 2)
    if p.shape != q.shape or p.shape[0] < 4:
        raise ValueError(f"need >= 4 matching point pairs, got {p.shape} and {q.shape}")
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
        raise ValueError("fit_homography_lsq: points must be finite")
    T1, T2 = _hartley(p), _hartley(q)
    m = np.empty((p.shape[0], 3))
    m[:, 0] = p[:, 0] * T1[0, 0] + T1[0, 2]
    m[:, 1] = p[:, 1] * T1[1, 1] + T1[1, 2]
    m[:, 2] = 1.0
    X = q[:, 0] * T2[0, 0] + T2[0, 2]
    Y = q[:, 1] * T2[1, 1] + T2[1, 2]

    # Algebraic DLT: rows (m, 0, -X m) and (0, m, -Y m).
    S = m.T @ m
    SX = (m * X[:, None]).T @ m
    SY = (m * Y[:, None]).T @ m
    SXY2 = (m * (X * X + Y * Y)[:, None]).T @ m
    Z = np.zeros((3, 3))
    M = np.block([[S, Z, -SX], [Z, S, -SY], [-SX, -SY, SXY2]])
    _, vecs = np.linalg.eigh(M)
    hn = vecs[:, 0]
    h = (hn / hn[8])[:8]

    def residual(h8):
        w = m @ np.array([h8[6], h8[7], 1.0])
        if np.any(w <= 1e-9):  # a point crossing the line at infinity: reject the step
            return None
        iw = 1.0 / w
        u = (m @ h8[0:3]) * iw
        v = (m @ h8[3:6]) * iw
        return u, v, iw, float(((u - X) ** 2 + (v - Y) ** 2).sum())

    state = residual(h)
    if state is None:  # degenerate DLT start: start from the identity map in pixel coordinates
        H0 = T2 @ np.linalg.inv(T1)
        h = (H0 / H0[2, 2]).reshape(-1)[:8]
        state = residual(h)
    lam = 1e-3
    for _ in range(iters):
        u, v, iw, cost = state
        a = m * iw[:, None]  # m / w
        ru, rv = u - X, v - Y
        A = a.T @ a
        Au = (a * u[:, None]).T @ a[:, :2]
        Av = (a * v[:, None]).T @ a[:, :2]
        C = (a[:, :2] * (u * u + v * v)[:, None]).T @ a[:, :2]
        JtJ = np.zeros((8, 8))
        JtJ[0:3, 0:3] = A
        JtJ[3:6, 3:6] = A
        JtJ[0:3, 6:8] = -Au
        JtJ[3:6, 6:8] = -Av
        JtJ[6:8, 0:3] = -Au.T
        JtJ[6:8, 3:6] = -Av.T
        JtJ[6:8, 6:8] = C
        g = np.concatenate([a.T @ ru, a.T @ rv, -(a[:, :2].T @ (u * ru + v * rv))])
        new = None
        while lam < 1e12:
            step = np.linalg.solve(JtJ + lam * np.diag(np.diag(JtJ)), -g)
            trial = residual(h + step)
            if trial is not None and trial[3] < cost:
                new = trial
                h = h + step
                lam = max(lam / 10, 1e-12)
                break
            lam *= 10
        if new is None:
            break
        state = new
        if cost - new[3] <= 1e-12 * cost:
            break
    Hn = np.append(h, 1.0).reshape(3, 3)
    H = np.linalg.inv(T2) @ Hn @ T1
    return H / H[2, 2]


# ----------------------------------------------------------------------------------------------
# One sample
# ----------------------------------------------------------------------------------------------

def homography_fit_stride(height: int, width: int) -> int:
    """Grid stride of the pixels the homography label is fitted on: ``max(1, min(H, W) // 80)``
    (4 at 320x576, 1 below 160 px)."""
    return max(1, min(height, width) // 80)


def _homography_label(flow_f: np.ndarray, valid_f: np.ndarray) -> np.ndarray:
    """Least-squares homography of ``flow_f`` over the valid pixels of the stride grid
    (rows and columns ``0, s, 2s, ...``; the identity if fewer than 4 are valid)."""
    s = homography_fit_stride(*valid_f.shape)
    sub = valid_f[::s, ::s]
    ys, xs = np.divmod(np.flatnonzero(sub), sub.shape[1])
    if ys.size < 4:  # degenerate (not seen in practice)
        return np.eye(3)
    ys, xs = ys * s, xs * s
    p = np.stack([xs, ys], 1).astype(np.float64)
    return fit_homography_lsq(p, p + flow_f[ys, xs])


def render_pair(rng: np.random.Generator, textures: Sequence, height: int, width: int,
                category: str, motion_scale: float = 1.0, homography: bool = True) -> dict:
    """Draws intrinsics, a scene and a camera motion from ``rng`` and renders one labelled pair
    (the dict of :class:`SyntheticScenes` items; see the module docstring). ``homography=False``
    leaves the ``homography`` label out (it draws nothing from ``rng``, so every other field is
    the same)."""
    K = sample_intrinsics(rng, height, width)
    scene = sample_scene(rng, textures, K, height, width)
    eye, zero = np.eye(3), np.zeros(3)
    depth1, ids1 = cast_rays(scene, eye, zero, K, height, width, tau=0.0)
    static = scene.static_table()
    static1 = np.take(static, ids1)
    # Depth statistics on a sub-grid (a full-image percentile costs milliseconds).
    depth_sub = depth1[::4, ::4]
    z_near = float(np.percentile(depth_sub, 2))
    best = None
    for _ in range(_MOTION_ATTEMPTS):
        R, t = sample_camera_motion(rng, z_near, K, width, motion_scale)
        depth2, ids2 = cast_rays(scene, R, t, K, height, width, tau=1.0)
        flow_f, z2 = reprojection_flow(depth1, K, R, t)
        valid_f = flow_validity(flow_f, z2, depth2, static1)
        frac = float(valid_f.mean())
        if best is None or frac > best[0]:
            best = (frac, R, t, depth2, ids2, flow_f, valid_f)
        if frac >= _MIN_VALID_FRACTION:
            break
    _, R, t, depth2, ids2, flow_f, valid_f = best
    R_b, t_b = relative_pose(R, t, eye, zero)
    flow_b, z1 = reprojection_flow(depth2, K, R_b, t_b)
    valid_b = flow_validity(flow_b, z1, depth1, np.take(static, ids2))

    clean1 = shade(scene, depth1, ids1, eye, zero, K, tau=0.0)
    clean2 = shade(scene, depth2, ids2, R, t, K, tau=1.0)
    look = sample_appearance(rng, category, float(np.percentile(depth_sub, 90)), width, height)
    img1 = apply_appearance(clean1, depth1, look, rng)
    img2 = apply_appearance(clean2, depth2, look, rng)

    flat_valid = np.flatnonzero(valid_f)
    if flat_valid.size > 0:
        pick = np.sort(flat_valid[rng.choice(flat_valid.size, NUM_POINTS,
                                             replace=flat_valid.size < NUM_POINTS)])
        ys, xs = np.divmod(pick, width)
        points1 = np.stack([xs, ys], 1).astype(np.float32)
        points2 = points1 + flow_f[ys, xs]
    else:  # degenerate (not seen in practice)
        points1 = np.zeros((NUM_POINTS, 2), np.float32)
        points2 = points1.copy()
    out = {
        "img1": img1,
        "img2": img2,
        "depth1": depth1,
        "depth2": depth2,
        "K": K,
        "flow_f": flow_f,
        "flow_b": flow_b,
        "valid_f": valid_f,
        "valid_b": valid_b,
        "points1": points1,
        "points2": points2.astype(np.float32),
        "R": R.astype(np.float32),
        "t": t.astype(np.float32),
        "category": category,
        "category_id": np.int32(CATEGORIES.index(category)),
    }
    if homography:
        out["homography"] = _homography_label(flow_f, valid_f).astype(np.float32)
    return out


# ----------------------------------------------------------------------------------------------
# Data source
# ----------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def _procedural_bank(seed: int, count: int) -> tuple:
    return tuple(procedural_textures(seed, count))


class _PhotoTextures:
    """Lazy sequence of photo mip pyramids (read on first use, at most ``cache`` kept)."""

    def __init__(self, files: list[str], cache: int = 256):
        self.files = files
        self._cache: dict[int, tuple] = {}
        self._limit = cache

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, j: int):
        if j not in self._cache:
            if len(self._cache) >= self._limit:
                self._cache.pop(next(iter(self._cache)))
            self._cache[j] = load_texture(self.files[j])
        return self._cache[j]


def _check_int(name: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


class SyntheticScenes:
    """Random-access source of synthetic parallax pairs (grain ``RandomAccessDataSource``).

    Args:
      seed: non-negative int; selects the scenes (and procedural textures). Another seed is a
        held-out split.
      num_samples: ``len()`` of the source.
      height, width: image size (>= 32 each).
      categories: subset of ``CATEGORIES``; sample i gets ``categories[i % len(categories)]``.
      textures_dir: folder of .png/.jpg photos used as textures instead of procedural ones
        (central square crop, resized to 512 px, read on demand).
      num_textures: size of the procedural texture bank (built once per process, on first use).
      motion_scale: multiplies the camera's rotation angles and translation
        (:func:`sample_camera_motion`); 1 gives a mean flow of about 20 px at 576 wide.
      homography: compute the ``homography`` label. Its least-squares fit is about a fifth of a
        small sample's rendering time; training on flow labels does not read it, so its source
        passes False and the items lack the key. Every other field is the same either way.

    ``source[i]`` returns a dict of numpy arrays: img1, img2 uint8 [H,W,3]; depth1, depth2
    float32 [H,W]; K float32 [4]; flow_f, flow_b float32 [H,W,2]; valid_f, valid_b float32 [H,W];
    homography float32 [3,3] (unless ``homography=False``); points1, points2 float32 [32,2];
    R float32 [3,3], t float32 [3] (X2 = R X1 + t); category str; category_id int32.
    """

    def __init__(self, seed: int = 0, num_samples: int = 1000, height: int = 320, width: int = 576,
                 categories: Sequence[str] = CATEGORIES, textures_dir: str | os.PathLike | None = None,
                 num_textures: int = 24, motion_scale: float = 1.0, homography: bool = True):
        if not (isinstance(motion_scale, numbers.Real) and np.isfinite(motion_scale) and 0 < motion_scale <= 10):
            raise ValueError(f"motion_scale must be a finite number in (0, 10], got {motion_scale!r}")
        self.motion_scale = float(motion_scale)
        if not isinstance(homography, (bool, np.bool_)):
            raise ValueError(f"homography must be True or False, got {homography!r}")
        self.homography = bool(homography)
        self.seed = _check_int("seed", seed, 0)
        self.num_samples = _check_int("num_samples", num_samples, 0)
        self.height = _check_int("height", height, 32, 8192)
        self.width = _check_int("width", width, 32, 8192)
        self.num_textures = _check_int("num_textures", num_textures, 1)
        if isinstance(categories, str):
            categories = (categories,)
        categories = tuple(categories)
        bad = [c for c in categories if c not in CATEGORIES]
        if not categories or bad:
            raise ValueError(f"categories must be a non-empty subset of {CATEGORIES}, got {categories}")
        self.categories = categories
        self.textures_dir = None if textures_dir is None else os.fspath(textures_dir)
        self._files = list_texture_files(self.textures_dir) if self.textures_dir is not None else None
        self._textures = None

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (f"SyntheticScenes(seed={self.seed}, num_samples={self.num_samples}, "
                f"height={self.height}, width={self.width}, categories={self.categories}, "
                f"textures_dir={self.textures_dir!r}, num_textures={self.num_textures}, "
                f"motion_scale={self.motion_scale}, homography={self.homography})")

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_textures"] = None  # rebuilt lazily in each worker process
        return state

    @property
    def textures(self) -> Sequence:
        if self._textures is None:
            if self._files is not None:
                self._textures = _PhotoTextures(self._files)
            else:
                self._textures = _procedural_bank(self.seed, self.num_textures)
        return self._textures

    def category_of(self, index: int) -> str:
        return self.categories[index % len(self.categories)]

    def __getitem__(self, index) -> dict:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"SyntheticScenes index must be an integer, got {type(index).__name__}")
        index = int(index)
        if not -self.num_samples <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for SyntheticScenes of length {self.num_samples}")
        index %= self.num_samples
        rng = np.random.default_rng([self.seed, index])
        return render_pair(rng, self.textures, self.height, self.width, self.category_of(index),
                           self.motion_scale, self.homography)
