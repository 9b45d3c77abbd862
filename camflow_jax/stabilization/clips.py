"""Synthetic shaky clips with a known smooth camera path, and ground-truth residual measures.

Every clip is a pure function of its arguments (seeded ``numpy`` Generator). Each frame t is
the *smooth* view of the scene at time t, displaced by a known jitter homography J_t
(``jitter[t]``, smooth-frame pixels -> shaky-frame pixels); jitter is white noise, i.i.d. over
frames, so almost all of its energy is above the stabilizer's pass band.

* :func:`planar_clip` — a seamless procedural texture (``camflow_jax.data.synthetic.textures``)
  seen through a smooth similarity path S_t (pan + slow sway of rotation and zoom); frame t is
  the texture warped by G_t = J_t S_t (exact ground truth, no parallax; the texture is built
  once, then each frame is one warp).
  J_t = a rotation about the frame centre (``jitter_deg`` std) plus a translation
  (``jitter`` std, fraction of the width).
* :func:`parallax_clip` — a random 3D scene of the synthetic renderer
  (``camflow_jax.data.synthetic.scenes``: ground, occluding layers at several depths, moving objects)
  filmed by a camera whose smooth path translates sideways and forwards (parallax) and pans
  slowly; the jitter is a camera rotation R_t (``jitter_deg`` std per axis), so the shaky frame
  is exactly the smooth frame warped by J_t = K R_t K^-1 (a rotation about the camera centre has
  no parallax). Translational shake is deliberately excluded: its parallax cannot be undone by
  any 2D warp, so it has no exact 2D ground truth.

Residual (:func:`residual_motion`, :func:`highfreq_rms`): points u fixed in the smooth frame
appear in the input at z_t = J_t(u) and, after stabilization with update field B_t and zoom
about the centre c, at q_t = c + zoom (y_t - c) with y_t = z_t + B_t(z_t), where the smooth
clip zoomed alike shows them at c + zoom (u - c). The deviations d_in = z_t - u and
d_out = zoom (y_t - u) are compared after removing low frequencies: the smooth path itself may
drift (a stabilizer need not reproduce it exactly), but anything above ``cutoff`` cycles per
frame is shake left in the video.

Robustness clips (moving content that must not move the camera path):

* :func:`moving_object_clip` — :func:`planar_clip`'s background with a large textured
  rectangle (``object_fraction`` of the frame area) sliding across the world plane; with
  ``with_object=False`` the identical clip without it (same seed: same background, path and
  shake), so the two can be compared. ``pair_homographies`` are the background's.
* :func:`shake_video` — any real frame sequence (e.g. OpenCV's ``vtest.avi``, a still camera
  filming walking people) shaken by a seeded known motion: a slow sway plus white jitter,
  zoomed about the centre so no border is ever exposed. ``jitter`` holds the exact J_t.
* :func:`pair_motion_error` — RMS distance between estimated per-pair flows and the exact
  background homographies' flows (the camera path's per-step error, in pixels).
"""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np

from camflow_jax.data.synthetic.render import cast_rays, render_view, rotation_matrix
from camflow_jax.data.synthetic.scenes import sample_intrinsics, sample_scene
from camflow_jax.data.synthetic.textures import procedural_texture, procedural_textures
from camflow_jax.stabilization.render import forward_points

__all__ = ["ShakyClip", "degrade", "planar_clip", "parallax_clip", "planar_jitter", "residual_motion", "highfreq_rms",
           "apply_homography_np", "moving_object_clip", "shake_video", "pair_motion_error",
           "homography_flow_np"]


@dataclasses.dataclass
class ShakyClip:
    """A generated clip and its ground truth.

    Attributes:
      frames: uint8 RGB ``[T, H, W, 3]``.
      jitter: ``[T, 3, 3]`` J_t, smooth-frame pixels -> shaky-frame pixels.
      fps: nominal frame rate (for the Hz-based metrics).
      kind: 'planar' or 'parallax'.
      smooth_frames: the same clip without jitter (``[T, H, W, 3]``) when requested, else None.
      pair_homographies: planar clips: ``[T-1, 3, 3]`` exact homographies frame t -> t+1
        (G_{t+1} G_t^-1); None for parallax clips (their motion is not a homography).
      info: generation parameters.
    """

    frames: np.ndarray
    jitter: np.ndarray
    fps: float
    kind: str
    smooth_frames: np.ndarray | None = None
    pair_homographies: np.ndarray | None = None
    info: dict = dataclasses.field(default_factory=dict)


def apply_homography_np(H, pts) -> np.ndarray:
    """Maps points ``[..., 2]`` by ``H`` ``[3, 3]`` (homogeneous divide), float64."""
    pts = np.asarray(pts, np.float64)
    ph = np.concatenate([pts, np.ones(pts.shape[:-1] + (1,))], axis=-1)
    q = ph @ np.asarray(H, np.float64).T
    return q[..., :2] / q[..., 2:3]


def _similarity(angle, scale, tx, ty) -> np.ndarray:
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    return np.array([[c, -s, tx], [s, c, ty], [0.0, 0.0, 1.0]])


def _translate(x, y) -> np.ndarray:
    return np.array([[1.0, 0, x], [0, 1.0, y], [0, 0, 1.0]])


def _check_sizes(num_frames, height, width):
    if num_frames < 2 or height < 16 or width < 16:
        raise ValueError(f"need num_frames >= 2 and frames of at least 16x16, got {num_frames} "
                         f"frames of {width}x{height}")


def planar_jitter(rng, num_frames, height, width, jitter, jitter_deg):
    """``[T, 3, 3]`` white shake J_t: a rotation about the frame centre (``jitter_deg`` std,
    degrees) and a translation (``jitter`` std, fraction of the width), drawn from ``rng``."""
    c = ((width - 1) / 2.0, (height - 1) / 2.0)
    ang = np.deg2rad(rng.normal(0.0, jitter_deg, num_frames))
    tr = rng.normal(0.0, jitter * width, (num_frames, 2))
    return np.stack([_translate(*(np.array(c) + tr[t])) @ _similarity(ang[t], 1.0, 0, 0)
                     @ _translate(-c[0], -c[1]) for t in range(num_frames)])


def _feature_texture(rng, size: int) -> np.ndarray:
    """Seamless procedural texture (``synthetic_textures.procedural_texture``) with a dense
    sprinkle of small shapes, so every view has plenty of corners and blobs for matching."""

    tex = procedural_texture(rng, size)
    n = int(size * size / 300)
    pos = rng.uniform(0, size, (n, 2))
    radius = np.exp(rng.uniform(np.log(2.0), np.log(9.0), n))
    colours = rng.uniform(0, 255, (n, 3))
    kinds = rng.integers(0, 3, n)
    # Draw on a 3x3 tiling and keep the centre so that shapes crossing an edge wrap around.
    big = np.tile(tex, (3, 3, 1))
    for (x, y), r, col, kind in zip(pos + size, radius, colours, kinds):
        col = tuple(float(v) for v in col)
        if kind == 0:
            cv2.circle(big, (int(x), int(y)), int(r), col, -1, cv2.LINE_AA)
        elif kind == 1:
            cv2.rectangle(big, (int(x - r), int(y - r / 2)), (int(x + r), int(y + r / 2)), col, -1,
                          cv2.LINE_AA)
        else:
            a = rng.uniform(0, np.pi)
            d = np.array([np.cos(a), np.sin(a)]) * 2 * r
            cv2.line(big, (int(x - d[0]), int(y - d[1])), (int(x + d[0]), int(y + d[1])), col, 2,
                     cv2.LINE_AA)
    return np.ascontiguousarray(big[size:2 * size, size:2 * size])


def planar_clip(num_frames: int = 60, height: int = 96, width: int = 160, seed: int = 0, *,
                fps: float = 30.0, jitter: float = 0.015, jitter_deg: float = 0.5,
                pan: tuple[float, float] = (0.006, 0.002), sway_deg: float = 2.0,
                zoom_sway: float = 0.03, noise_std: float = 0.0,
                with_smooth: bool = False, _overlay=None) -> ShakyClip:
    """Planar shaky clip (module doc). ``pan`` is in frame widths per frame; the rotation sway
    (amplitude ``sway_deg``) and zoom sway (relative amplitude ``zoom_sway``) have periods of
    4 and 6 seconds; ``noise_std`` adds Gaussian sensor noise (grey levels).

    ``_overlay(img, G, k, texture_size)`` (internal, :func:`moving_object_clip`) draws moving
    content into frame k (world -> frame homography G) before the noise is added."""
    _check_sizes(num_frames, height, width)
    rng = np.random.default_rng([seed, 611])
    texture = _feature_texture(rng, 1024)
    # About 1.8 texels per pixel at any frame size, so small test frames keep enough detail.
    size = max(64, int(round(1024 * min(1.0, width / 576.0))))
    if size != 1024:
        texture = cv2.resize(texture, (size, size), interpolation=cv2.INTER_AREA)
    c = ((width - 1) / 2.0, (height - 1) / 2.0)
    t = np.arange(num_frames, dtype=np.float64)
    start = rng.uniform(0, size, 2)
    centre = start[None] + np.outer(t, np.array(pan) * width)
    rot = np.deg2rad(sway_deg) * np.sin(2 * np.pi * t / (4.0 * fps) + rng.uniform(0, 2 * np.pi))
    scale = 1.0 + zoom_sway * np.sin(2 * np.pi * t / (6.0 * fps) + rng.uniform(0, 2 * np.pi))
    smooth = np.stack([_translate(*c) @ _similarity(rot[k], scale[k], 0, 0)
                       @ _translate(-centre[k, 0], -centre[k, 1]) for k in range(num_frames)])
    jit = planar_jitter(rng, num_frames, height, width, jitter, jitter_deg)

    def render(G, k=None):
        img = cv2.warpPerspective(texture, G, (width, height), flags=cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_WRAP)
        if _overlay is not None and k is not None:
            img = _overlay(img, G, k, size)
        if noise_std > 0:
            img = np.clip(img + rng.normal(0, noise_std, img.shape), 0, 255).astype(np.uint8)
        return img

    G = np.stack([jit[k] @ smooth[k] for k in range(num_frames)])
    frames = np.stack([render(g, k) for k, g in enumerate(G)])
    smooth_frames = np.stack([render(S, k) for k, S in enumerate(smooth)]) if with_smooth else None
    pairs = np.stack([G[k + 1] @ np.linalg.inv(G[k]) for k in range(num_frames - 1)])
    pairs /= pairs[:, 2:3, 2:3]
    info = dict(seed=seed, jitter=jitter, jitter_deg=jitter_deg, pan=tuple(pan),
                sway_deg=sway_deg, zoom_sway=zoom_sway, noise_std=noise_std, texture_size=size)
    return ShakyClip(frames, jit, float(fps), "planar", smooth_frames, pairs, info)


def moving_object_clip(num_frames: int = 60, height: int = 96, width: int = 160, seed: int = 0, *,
                       object_fraction: float = 0.25, with_object: bool = True,
                       travel: float = 0.6, **planar_kwargs) -> ShakyClip:
    """:func:`planar_clip` plus a large moving textured object (module doc).

    The object is a rectangle of the frame's aspect covering ``object_fraction`` of the frame
    area, with its own feature texture, lying on the world plane and sliding across it by
    ``travel`` frame widths over the clip (plus a slow vertical bob), so in the video it moves
    with the camera *and* by itself, like a passing car. ``with_object=False`` returns the same
    clip (same seed: same background, smooth path and shake) without it. ``info["object_mask"]``
    is ``[T, H, W]`` bool (where the object is drawn); ``pair_homographies`` are the
    background's exact motion.
    """
    if not 0.0 < object_fraction < 1.0:
        raise ValueError(f"object_fraction must be in (0, 1), got {object_fraction}")
    _check_sizes(num_frames, height, width)
    rng = np.random.default_rng([seed, 617])
    oh = max(4, int(round(height * np.sqrt(object_fraction))))
    ow = max(4, int(round(width * np.sqrt(object_fraction))))
    # the object's own texture, at the background's texel density (planar_clip scales its
    # 1024-texel texture by width / 576), so it offers as many features per pixel as the rest
    tex = _feature_texture(rng, 512)
    scale = min(1.0, width / 576.0)
    tex = cv2.resize(tex, (max(8, int(round(512 * scale))),) * 2, interpolation=cv2.INTER_AREA)
    reps = (int(np.ceil(oh / tex.shape[0])), int(np.ceil(ow / tex.shape[1])), 1)
    patch = np.ascontiguousarray(np.tile(tex, reps)[:oh, :ow])
    phase = rng.uniform(0, 2 * np.pi)
    masks = []

    def overlay(img, G, k, size):
        # object's top-left corner in frame-0 smooth coordinates: slides right, bobs slowly
        u = k / max(num_frames - 1, 1)
        x0 = (0.5 - travel / 2 + travel * u) * width - ow / 2
        y0 = 0.5 * (height - oh) + 0.08 * height * np.sin(2 * np.pi * u + phase)
        # frame-0 pixel -> world: the inverse of the clip's first world->frame homography
        world = np.linalg.inv(first[0]) @ _translate(x0, y0)
        A = G @ world
        obj = cv2.warpPerspective(patch, A, (width, height), flags=cv2.INTER_LINEAR)
        m = cv2.warpPerspective(np.ones((oh, ow), np.float32), A, (width, height),
                                flags=cv2.INTER_LINEAR)[..., None]
        masks.append(m[..., 0] > 0.5)
        return np.clip(img * (1 - m) + obj * m + 0.5, 0, 255).astype(np.uint8)

    first: list = []

    def overlay_first(img, G, k, size):
        if k == 0 and not first:
            first.append(G)
        return overlay(img, G, k, size)

    clip = planar_clip(num_frames, height, width, seed,
                       _overlay=overlay_first if with_object else None, **planar_kwargs)
    info = dict(clip.info, object_fraction=object_fraction if with_object else 0.0,
                travel=travel)
    if with_object:
        info["object_mask"] = np.stack(masks[:num_frames])
    return dataclasses.replace(clip, kind="moving_object" if with_object else "planar",
                               info=info)


def shake_video(frames, seed: int = 0, *, fps: float = 30.0, jitter: float = 0.01,
                jitter_deg: float = 0.3, sway: float = 0.02, sway_period_s: float = 4.0,
                zoom: float | None = None) -> ShakyClip:
    """A seeded known shake applied to real frames ``[T, H, W, 3]`` (module doc).

    Frame t of the result is source frame t warped by G_t = J_t S_t Z: Z a centred zoom (the
    margin that keeps every warp inside the source; default from the shake's size), S_t a slow
    horizontal and vertical sway of ``sway`` frame widths (period ``sway_period_s``, the smooth
    path a stabilizer may keep), J_t white jitter as :func:`planar_jitter` (``jitter`` std of
    the translation in widths, ``jitter_deg`` std of the rotation). The result's ``jitter`` is
    J_t and ``pair_homographies`` the exact G_{t+1} G_t^-1, both correct for the whole frame
    only where the source camera was still (moving people are the source's own motion).
    """
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be [T, H, W, 3], got shape {frames.shape}")
    num_frames, height, width = frames.shape[:3]
    _check_sizes(num_frames, height, width)
    rng = np.random.default_rng([seed, 619])
    jit = planar_jitter(rng, num_frames, height, width, jitter, jitter_deg)
    t = np.arange(num_frames) / float(fps)
    ph = rng.uniform(0, 2 * np.pi, 2)
    sx = sway * width * np.sin(2 * np.pi * t / sway_period_s + ph[0])
    sy = 0.5 * sway * width * np.sin(2 * np.pi * t / (1.5 * sway_period_s) + ph[1])
    if zoom is None:
        # 4 sigma of translation + sway, and the corner shift of a 4-sigma rotation
        reach = 4 * jitter * width + sway * width + np.deg2rad(4 * jitter_deg) * 0.5 * np.hypot(height, width)
        zoom = 1.0 + 2.0 * reach / min(height, width)
    c = ((width - 1) / 2.0, (height - 1) / 2.0)
    Z = _translate(*c) @ _similarity(0.0, float(zoom), 0, 0) @ _translate(-c[0], -c[1])
    G = np.stack([jit[k] @ _translate(sx[k], sy[k]) @ Z for k in range(num_frames)])
    out = np.stack([cv2.warpPerspective(f, g, (width, height), flags=cv2.INTER_LINEAR,
                                        borderMode=cv2.BORDER_REFLECT) for f, g in zip(frames, G)])
    pairs = np.stack([G[k + 1] @ np.linalg.inv(G[k]) for k in range(num_frames - 1)])
    pairs /= pairs[:, 2:3, 2:3]
    info = dict(seed=seed, jitter=jitter, jitter_deg=jitter_deg, sway=sway,
                sway_period_s=sway_period_s, zoom=float(zoom))
    return ShakyClip(out, jit, float(fps), "shaken_video", None, pairs, info)


def degrade(clip: ShakyClip, *, gain: float = 1.0, noise_std: float = 0.0, blur_sigma: float = 0.0,
            seed: int = 0) -> ShakyClip:
    """``clip`` made harder to measure, its ground truth unchanged: each frame blurred
    (Gaussian, ``blur_sigma`` px: less texture), scaled by ``gain`` (< 1: darker) and given
    fresh Gaussian sensor noise (``noise_std`` grey levels, independent per frame and pixel,
    seeded), then rounded to uint8. None of it moves the image, so ``jitter`` and
    ``pair_homographies`` stay exact."""
    if not (np.isfinite(gain) and gain > 0):
        raise ValueError(f"gain must be positive, got {gain}")
    if not (np.isfinite(noise_std) and noise_std >= 0) or not (np.isfinite(blur_sigma) and blur_sigma >= 0):
        raise ValueError(f"noise_std and blur_sigma must be >= 0, got {noise_std} and {blur_sigma}")
    rng = np.random.default_rng([seed, 620])
    out = []
    for f in np.asarray(clip.frames):
        x = f.astype(np.float32)
        if blur_sigma > 0:
            x = cv2.GaussianBlur(x, (0, 0), blur_sigma, borderType=cv2.BORDER_REFLECT)
        x = x * gain
        if noise_std > 0:
            x = x + rng.normal(0.0, noise_std, x.shape).astype(np.float32)
        out.append(np.clip(np.round(x), 0, 255).astype(np.uint8))
    info = {**clip.info, "degraded": {"gain": gain, "noise_std": noise_std, "blur_sigma": blur_sigma, "seed": seed}}
    return dataclasses.replace(clip, frames=np.stack(out), info=info)


def homography_flow_np(H, height: int, width: int) -> np.ndarray:
    """``[H, W, 2]`` displacement x -> H(x) - x on the pixel grid (float64)."""
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
    p = np.stack([xs, ys], -1)
    return apply_homography_np(H, p) - p


def pair_motion_error(flows, pair_homographies, height: int, width: int,
                      mask=None) -> float:
    """RMS (pixels of the ``height x width`` frames) of estimated per-pair flows minus the exact
    background motion.

    ``flows``: ``[T-1, h, w, 2]`` forward flows on any grid of the frame's aspect, in pixels of
    that grid (e.g. the stabilizer's working grid, :class:`pipeline.ClipMotion` ``flows``); they are
    compared at the grid's pixel centres (half-pixel convention) with the exact homographies'
    displacement, scaled to full pixels. ``mask`` ``[T-1, h, w]`` bool: only those pixels count
    (default all).
    """
    flows = np.asarray(flows, np.float64)
    Hs = np.asarray(pair_homographies, np.float64)
    if flows.ndim != 4 or flows.shape[-1] != 2 or flows.shape[0] != Hs.shape[0]:
        raise ValueError(f"flows [T-1, h, w, 2] and T-1 homographies needed, got {flows.shape} "
                         f"and {Hs.shape}")
    h, w = flows.shape[1:3]
    sx, sy = width / w, height / h
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    p = np.stack([(xs + 0.5) * sx - 0.5, (ys + 0.5) * sy - 0.5], -1)
    err = []
    for f, H in zip(flows, Hs):
        exact = apply_homography_np(H, p) - p
        err.append(f * np.array([sx, sy]) - exact)
    err = np.stack(err)
    sq = (err ** 2).sum(-1)
    if mask is not None:
        sq = sq[np.asarray(mask, bool)]
    return float(np.sqrt(sq.mean()))


def parallax_clip(num_frames: int = 60, height: int = 96, width: int = 160, seed: int = 0, *,
                  fps: float = 30.0, jitter_deg: float = 0.3, parallax: float = 0.08,
                  forward: float = 0.05, pan_deg: float = 1.5, move_objects: bool = True,
                  with_smooth: bool = False) -> ShakyClip:
    """Parallax shaky clip rendered by the synthetic scene renderer (module doc).

    The camera centre moves sideways by ``parallax`` frame widths of image motion at the
    nearest depth over the clip (and vertically by a third of that, on a half sine), forwards by
    ``forward`` x the nearest depth, and yaws through ``pan_deg`` degrees; all centred on the
    pose the scene was designed for. Moving objects move through their whole motion
    (``tau`` 0 -> 1) over the clip unless ``move_objects`` is False.
    """

    _check_sizes(num_frames, height, width)
    rng = np.random.default_rng([seed, 613])
    textures = procedural_textures(seed, 8, 512)
    K = sample_intrinsics(rng, height, width)
    scene = sample_scene(rng, textures, K, height, width)
    depth0, _ = cast_rays(scene, np.eye(3), np.zeros(3), K, height, width)
    z_near = float(np.percentile(depth0, 2))
    fx, fy, cx, cy = (float(v) for v in K)
    Kmat = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
    u = np.linspace(-0.5, 0.5, num_frames)
    lateral = parallax * width * z_near / fx
    direction = rng.uniform(0, 2 * np.pi)
    centres = np.stack([lateral * u * np.cos(direction),
                        lateral / 3 * np.sin(np.pi * (u + 0.5)) * np.sin(direction),
                        forward * z_near * u], axis=-1)
    yaw = np.deg2rad(pan_deg) * u
    jit_rot = np.deg2rad(rng.normal(0.0, jitter_deg, (num_frames, 3)))
    frames, smooth_frames, jit = [], [], []
    for k in range(num_frames):
        R_s = rotation_matrix([0.0, yaw[k], 0.0])
        t_s = -R_s @ centres[k]
        R_j = rotation_matrix(jit_rot[k])
        tau = (k / max(num_frames - 1, 1)) if move_objects else 0.0
        img, _ = render_view(scene, R_j @ R_s, R_j @ t_s, K, height, width, tau=tau)
        frames.append(img)
        if with_smooth:
            smooth_frames.append(render_view(scene, R_s, t_s, K, height, width, tau=tau)[0])
        J = Kmat @ R_j @ np.linalg.inv(Kmat)
        jit.append(J / J[2, 2])
    info = dict(seed=seed, jitter_deg=jitter_deg, parallax=parallax, forward=forward,
                pan_deg=pan_deg, move_objects=move_objects, K=K.tolist(), z_near=z_near)
    return ShakyClip(np.stack(frames), np.stack(jit), float(fps), "parallax",
                     np.stack(smooth_frames) if with_smooth else None, None, info)


def residual_motion(jitter, updates, height: int, width: int, zoom: float = 1.0,
                    grid: int = 5, margin: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Deviations from the smooth path of points fixed in the smooth frame (module doc).

    Args:
      jitter: ``[T, 3, 3]`` J_t of the clip.
      updates: ``[T, h, w, 2]`` update fields B_t (working pixels) used for rendering.
      zoom: the rendering zoom.
      grid, margin: a ``grid x grid`` lattice of points inside the frame minus ``margin``.
    Returns:
      ``(d_in, d_out)``, each ``[T, grid * grid, 2]`` full pixels: z_t - u and
      zoom (z_t + B_t(z_t) - u) (the output deviation as seen in the zoomed output).
    """
    jitter = np.asarray(jitter, np.float64)
    updates = np.asarray(updates)
    if jitter.shape[0] != updates.shape[0]:
        raise ValueError(f"{jitter.shape[0]} jitter homographies but {updates.shape[0]} updates")
    xs = np.linspace(margin * (width - 1), (1 - margin) * (width - 1), grid)
    ys = np.linspace(margin * (height - 1), (1 - margin) * (height - 1), grid)
    u = np.stack(np.meshgrid(xs, ys), -1).reshape(-1, 2)
    c = np.array([(width - 1) / 2.0, (height - 1) / 2.0])
    d_in, d_out = [], []
    for J, B in zip(jitter, updates):
        z = apply_homography_np(J, u)
        d_in.append(z - u)
        # q - (c + zoom (u - c)) = zoom (z + B(z) - u)
        d_out.append(forward_points(z, B, height, width, zoom) - (c + zoom * (u - c)))
    return np.stack(d_in), np.stack(d_out)


def highfreq_rms(signal, cutoff: float = 0.1, window: bool = False) -> float:
    """RMS of the part of ``signal`` ``[T, ...]`` above ``cutoff`` cycles per frame.

    Each series (over the leading time axis) is detrended by its least-squares line, its
    spectrum above ``cutoff`` kept (``np.fft.rfft``), and the RMS taken over everything
    (Parseval, so no inverse transform is needed). ``window``: a Hann window before the
    transform (energy renormalised by the window's mean square), so a large slow motion left in
    the signal (e.g. a smooth sway a stabilizer removed but the reference keeps) does not leak
    into the high band; white shake reads the same either way in expectation.
    """
    s = np.asarray(signal, np.float64)
    n = s.shape[0]
    if n < 4:
        raise ValueError(f"need at least 4 frames, got {n}")
    s = s.reshape(n, -1)
    t = np.arange(n) - (n - 1) / 2.0
    s = s - s.mean(0)
    s = s - np.outer(t, (t @ s) / (t @ t))
    if window:
        hann = np.hanning(n)
        s = s * hann[:, None] / np.sqrt(np.mean(hann ** 2))
    spec = np.fft.rfft(s, axis=0)
    f = np.fft.rfftfreq(n)
    keep = f > cutoff
    # Parseval for the real FFT: interior bins count twice, DC and Nyquist once.
    weight = np.where((f == 0) | (np.isclose(f, 0.5) & (n % 2 == 0)), 1.0, 2.0)
    energy = (weight[keep, None] * np.abs(spec[keep]) ** 2).sum() / n
    return float(np.sqrt(energy / s.size))
