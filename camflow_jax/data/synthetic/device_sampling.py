"""Random parts of the device renderer (``synthetic_device``): scenes, camera motions and the
appearance of the frames, from ``jax.random`` keys.

The same distributions as the host sampler (both read :mod:`camflow_jax.data.synthetic.spec`) (``camflow_jax.data.synthetic.sample_intrinsics``,
``sample_scene``, ``sample_camera_motion`` and ``synthetic_appearance.sample_appearance``; their
docstrings give the numbers), drawn with ``jax.random`` instead of numpy: the draws differ, the
distributions are the same. Everything has a fixed shape so that it jits and vmaps: a scene is
``MAX_PLANES`` plane slots with an ``active`` mask, in the host's plane order

    slot 0: far background (always), slot 1: ground (probability 0.85),
    slots 2-7: occluding layers (3-6 active), slot 8: side wall (probability 0.35),
    slots 9-10: moving objects (1-2 active).

Texture ids index the device texture bank (``synthetic_device.TextureBank``), i.e. the host's
texture list it was built from. :func:`scene_to_host` and :func:`appearance_to_host` turn a
sampled scene / appearance into the host's objects, so that both renderers can render the same
scene (the tests use this). :func:`apply_appearance` turns a clean rendering into a uint8
frame (weather, exposure jitter, sensor noise) like ``synthetic_appearance.apply_appearance``.

All values are float32 (the host samples in float64; the geometry is the same up to that
rounding). Pure functions of their key: nothing happens at import.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from camflow_jax.data.synthetic.appearance import CATEGORIES, normal_quantiles
from camflow_jax.data.synthetic.render import Plane, Scene
from camflow_jax.data.synthetic.spec import APPEARANCE, INTRINSICS, MOTION, REFERENCE_HEIGHT, REFERENCE_WIDTH, SCENE

__all__ = [
    "MAX_PLANES",
    "SHAPE_INFINITE",
    "SHAPE_RECT",
    "SHAPE_ELLIPSE",
    "DeviceScene",
    "rotation_matrix",
    "matmul",
    "matvec",
    "euler",
    "sample_intrinsics",
    "sample_scene",
    "sample_camera_motion",
    "sample_appearance",
    "particle_limits",
    "UniformStream",
    "uniforms_from_bits",
    "frame_uniforms",
    "noise_words",
    "scene_to_host",
    "appearance_to_host",
    "apply_appearance",
]

#: The most occluding layers and moving objects the spec draws, and the slots of a scene.
_MAX_LAYERS, _MAX_MOVERS = SCENE.layers[1] - 1, SCENE.movers[1] - 1
MAX_PLANES = 3 + _MAX_LAYERS + _MAX_MOVERS  # background, ground, layers, wall, movers
_SLOT_BG, _SLOT_GROUND, _SLOT_LAYERS, _SLOT_WALL, _SLOT_MOVERS = 0, 1, 2, 2 + _MAX_LAYERS, 3 + _MAX_LAYERS
SHAPE_INFINITE, SHAPE_RECT, SHAPE_ELLIPSE = 0, 1, 2
_SHAPE_NAMES = ("infinite", "rect", "ellipse")


@dataclasses.dataclass(frozen=True)
class DeviceScene:
    """A padded scene (arrays with a leading ``[MAX_PLANES]`` axis unless noted; float32).

    Fields mirror ``synthetic_render.Plane``: origin, axis_u, axis_v ``[P, 3]``; extent ``[P, 2]``
    (unused for infinite planes); shape ``[P]`` int32 (``SHAPE_*``); texture ``[P]`` int32 (bank
    index); texel, tex_angle ``[P]``; tex_offset ``[P, 2]``; colour, velocity, spin ``[P, 3]``;
    active ``[P]`` bool; far ``[]`` (depth of rays that hit nothing); sky ``[3]``.
    """

    origin: jax.Array
    axis_u: jax.Array
    axis_v: jax.Array
    extent: jax.Array
    shape: jax.Array
    texture: jax.Array
    texel: jax.Array
    tex_angle: jax.Array
    tex_offset: jax.Array
    colour: jax.Array
    velocity: jax.Array
    spin: jax.Array
    active: jax.Array
    far: jax.Array
    sky: jax.Array

    def moving(self) -> jax.Array:
        """``[P]`` bool: the plane has a rigid motion (the host's ``Plane.moving``)."""
        return jnp.any(self.velocity != 0, -1) | jnp.any(self.spin != 0, -1)


jax.tree_util.register_dataclass(DeviceScene, data_fields=[f.name for f in dataclasses.fields(DeviceScene)],
                                 meta_fields=[])


# ----------------------------------------------------------------------------------------------
# Rotations (batched over leading axes)
# ----------------------------------------------------------------------------------------------

def matmul(a, b) -> jax.Array:
    """``a @ b`` for small ``[..., 3, 3]`` matrices, as elementwise products and sums (XLA's dot
    emitters can round differently from one compiled program to another; this cannot)."""
    return jnp.sum(a[..., :, :, None] * b[..., None, :, :], -2)


def matvec(m, v) -> jax.Array:
    """``m @ v`` for ``[..., 3, 3]`` and ``[..., 3]``, elementwise (see :func:`matmul`)."""
    return jnp.sum(m * v[..., None, :], -1)


def _matrix(rows) -> jax.Array:
    return jnp.stack([jnp.stack(r, -1) for r in rows], -2)


def _rx(a):
    c, s, o, z = jnp.cos(a), jnp.sin(a), jnp.ones_like(a), jnp.zeros_like(a)
    return _matrix([[o, z, z], [z, c, -s], [z, s, c]])


def _ry(a):
    c, s, o, z = jnp.cos(a), jnp.sin(a), jnp.ones_like(a), jnp.zeros_like(a)
    return _matrix([[c, z, s], [z, o, z], [-s, z, c]])


def _rz(a):
    c, s, o, z = jnp.cos(a), jnp.sin(a), jnp.ones_like(a), jnp.zeros_like(a)
    return _matrix([[c, -s, z], [s, c, z], [z, z, o]])


def euler(yaw, pitch, roll) -> jax.Array:
    """``Ry(yaw) Rx(pitch) Rz(roll)`` (radians; broadcast over leading axes) -> ``[..., 3, 3]``."""
    yaw, pitch, roll = jnp.broadcast_arrays(*(jnp.asarray(a, jnp.float32) for a in (yaw, pitch, roll)))
    return matmul(matmul(_ry(yaw), _rx(pitch)), _rz(roll))


def rotation_matrix(rotvec) -> jax.Array:
    """Rodrigues, batched: ``[..., 3]`` rotation vectors (radians) -> ``[..., 3, 3]``; the zero
    vector gives the identity exactly."""
    r = jnp.asarray(rotvec, jnp.float32)
    theta = jnp.sqrt(jnp.sum(r * r, -1))
    k = r / jnp.where(theta > 0, theta, 1.0)[..., None]
    z = jnp.zeros_like(theta)
    kx = _matrix([[z, -k[..., 2], k[..., 1]], [k[..., 2], z, -k[..., 0]], [-k[..., 1], k[..., 0], z]])
    eye = jnp.eye(3, dtype=jnp.float32)
    return eye + jnp.sin(theta)[..., None, None] * kx + (1 - jnp.cos(theta))[..., None, None] * matmul(kx, kx)


def _deg(x):
    return x * jnp.float32(math.pi / 180)


# ----------------------------------------------------------------------------------------------
# Intrinsics, scene, camera motion
# ----------------------------------------------------------------------------------------------

#: Uniform draws each sampler takes from its stream (upper bounds, checked as they are taken).
N_INTRINSICS, N_SCENE, N_MOTION, N_LOOK, N_FRAME_SCALARS = 4, 200, 9, 24, 3


def uniforms_from_bits(bits) -> jax.Array:
    """uint32 random words -> float32 uniforms in [0, 1) (23 random mantissa bits, as
    ``jax.random.uniform``)."""
    return jax.lax.bitcast_convert_type((bits >> 9) | np.uint32(0x3F800000), jnp.float32) - 1.0


class UniformStream:
    """Uniform draws taken in order from one array of uniforms: a pair draws all its random
    numbers with one ``jax.random.bits`` call (each call is a whole threefry computation, about
    half a second of XLA compile time on CPU; a pair used to need a dozen).

    ``UniformStream(values)`` takes a 1-D float32 array in [0, 1);
    ``UniformStream.from_key(key, n)`` draws ``n``."""

    def __init__(self, values):
        self.u, self.i = values, 0
        self.n = values.shape[0]

    @classmethod
    def from_key(cls, key, n: int) -> "UniformStream":
        return cls(jax.random.uniform(key, (n,), jnp.float32))

    def take(self, n: int) -> jax.Array:
        if self.i + n > self.n:
            raise AssertionError("UniformStream: too few draws reserved")
        v = self.u[self.i:self.i + n]
        self.i += n
        return v

    def __call__(self, lo, hi, shape=()):
        return lo + (hi - lo) * self.take(math.prod(shape)).reshape(shape)

    def integers(self, lo: int, hi: int, shape=()):
        """Uniform integers in ``[lo, hi)``."""
        return jnp.clip(jnp.floor(self(float(lo), float(hi), shape)), lo, hi - 1).astype(jnp.int32)

    def normal(self, shape=()):
        """Standard normal (Box-Muller on two uniforms)."""
        u1 = self(0.0, 1.0, shape)
        u2 = self(0.0, 1.0, shape)
        return jnp.sqrt(-2 * jnp.log1p(-u1)) * jnp.cos(2 * math.pi * u2)


def _stream(u, n: int) -> UniformStream:
    """``u`` if it is a :class:`UniformStream`, else ``n`` uniforms drawn from the key ``u``."""
    return u if isinstance(u, UniformStream) else UniformStream.from_key(u, n)


def sample_intrinsics(u, height: int, width: int) -> jax.Array:
    """``K = (fx, fy, cx, cy)`` float32 ``[4]`` (the host's distribution); ``u``: a key or a
    :class:`UniformStream` (likewise below)."""
    u = _stream(u, N_INTRINSICS)
    fx = u(*INTRINSICS.focal) * width
    fy = fx * (1 + u(*INTRINSICS.aspect))
    cx = (width - 1) / 2 + u(*INTRINSICS.centre) * width
    cy = (height - 1) / 2 + u(*INTRINSICS.centre) * height
    return jnp.stack([fx, fy, cx, cy]).astype(jnp.float32)


def _facing(centre, su, sv, rot):
    """Origin of a finite plane of size (su, sv) centred at ``centre`` with axes rot[:, 0:2]."""
    eu, ev = rot[..., :, 0], rot[..., :, 1]
    return centre - 0.5 * su[..., None] * eu - 0.5 * sv[..., None] * ev, eu, ev


def sample_scene(u, K, height: int, width: int, num_textures: int) -> DeviceScene:
    """A random scene for the camera at the identity pose (``synthetic.sample_scene``'s
    distribution; see its docstring), padded to ``MAX_PLANES`` slots (module docstring)."""
    s = SCENE
    fx, fy, cx, cy = (K[i] for i in range(4))
    px = 1.0 / fx
    u = _stream(u, N_SCENE)
    z_near = u(*s.z_near)
    z_far = u(*s.z_far)
    pitch = _deg(u(*s.camera_pitch))
    roll = _deg(u(*s.camera_roll))
    cam = matmul(_rz(roll), _rx(pitch))  # level -> camera

    # Background: infinite, tilted up to +-10 degrees.
    bg_rot = matmul(cam, euler(_deg(u(*s.background_tilt)), _deg(u(*s.background_tilt)), 0.0))
    bg_origin = cam[:, 2] * z_far
    bg_texel = z_far * px * u(*s.background_texel)

    # Ground: infinite, hc below the camera.
    ground_on = u(0.0, 1.0) < s.ground_probability
    hc = u(*s.ground_height)
    z_bottom = hc * fy / jnp.maximum(height - cy, 1.0)
    g_origin = matvec(cam, jnp.stack([0.0, hc, 0.0]))
    g_texel = z_bottom * px * u(*s.ground_texel)

    # Occluding layers: the first at z_near, the others log-uniform in [z_near, z_far / 2].
    nl = _MAX_LAYERS
    n_layers = u.integers(*s.layers, ())
    lz = jnp.exp(u(0.0, 1.0, (nl,)) * (jnp.log(s.layer_far * z_far) - jnp.log(z_near)) + jnp.log(z_near))
    lz = lz.at[0].set(z_near)
    lu = u(*s.layer_x, (nl,)) * width
    lv = u(*s.layer_y, (nl,)) * height
    lc = lz[:, None] * jnp.stack([(lu - cx) / fx, (lv - cy) / fy, jnp.ones(nl)], -1)
    lpw = u(*s.layer_width, (nl,)) * width
    lph = lpw * jnp.exp(u(math.log(s.layer_aspect[0]), math.log(s.layer_aspect[1]), (nl,)))
    lrot = euler(_deg(u(*s.layer_yaw, (nl,))), _deg(u(*s.layer_pitch, (nl,))),
                 _deg(u(*s.layer_roll, (nl,))))
    l_ellipse = u(0.0, 1.0, (nl,)) < s.layer_ellipse_probability
    l_su, l_sv = lpw * lz * px, lph * lz * px
    l_origin, l_eu, l_ev = _facing(lc, l_su, l_sv, lrot)
    l_texel = lz * px * u(*s.layer_texel, (nl,))

    # Side wall: a long rectangle turned 55-75 degrees, receding from 1.2 z_near.
    wall_on = u(0.0, 1.0) < s.wall_probability
    side = jnp.where(u(0.0, 1.0) < 0.5, 1.0, -1.0)
    z0 = s.wall_near * z_near
    length = u(*s.wall_length) * z_far
    half_width = z0 * (width / 2) / fx * u(*s.wall_offset)
    angle = _deg(u(*s.wall_angle)) * side
    w_eu = matvec(cam, jnp.stack([jnp.sin(angle), 0.0, jnp.cos(angle)]))
    w_ev = cam[:, 1]
    top = -u(*s.wall_top) * z0 * height / (2 * fy)
    w_origin = matvec(cam, jnp.stack([side * half_width, top, z0]))
    w_extent = jnp.stack([length, u(*s.wall_height) * jnp.abs(top)])
    w_texel = z0 * px * u(*s.wall_texel)

    # Moving objects.
    nm = _MAX_MOVERS
    n_movers = u.integers(*s.movers, ())
    mz = z_near * u(*s.mover_depth, (nm,))
    mu = u(*s.mover_x, (nm,)) * width
    mv = u(*s.mover_y, (nm,)) * height
    mc = mz[:, None] * jnp.stack([(mu - cx) / fx, (mv - cy) / fy, jnp.ones(nm)], -1)
    mpw = u(*s.mover_width, (nm,)) * width
    mph = mpw * jnp.exp(u(math.log(s.mover_aspect[0]), math.log(s.mover_aspect[1]), (nm,)))
    mrot = euler(_deg(u(*s.mover_yaw, (nm,))), _deg(u(*s.mover_pitch, (nm,))), 0.0)
    shift = u(*s.mover_shift, (nm,)) * (width / REFERENCE_WIDTH) * mz * px
    phi = u(0.0, 2 * math.pi, (nm,))
    velocity = jnp.stack([shift * jnp.cos(phi), shift * jnp.sin(phi), u(*s.mover_advance, (nm,)) * mz], -1)
    spin = _deg(u(*s.mover_spin, (nm,)))[:, None] * jnp.cross(mrot[:, :, 0], mrot[:, :, 1])
    m_ellipse = u(0.0, 1.0, (nm,)) < s.mover_ellipse_probability
    m_su, m_sv = mpw * mz * px, mph * mz * px
    m_origin, m_eu, m_ev = _facing(mc, m_su, m_sv, mrot)
    m_texel = mz * px * u(*s.mover_texel, (nm,))

    one = lambda v: jnp.asarray(v, jnp.float32)[None]  # noqa: E731
    origin = jnp.concatenate([bg_origin[None], g_origin[None], l_origin, w_origin[None], m_origin])
    axis_u = jnp.concatenate([bg_rot[None, :, 0], cam[None, :, 0], l_eu, w_eu[None], m_eu])
    axis_v = jnp.concatenate([bg_rot[None, :, 1], cam[None, :, 2], l_ev, w_ev[None], m_ev])
    zeros2 = jnp.zeros((2, 2), jnp.float32)
    extent = jnp.concatenate([zeros2, jnp.stack([l_su, l_sv], -1), w_extent[None], jnp.stack([m_su, m_sv], -1)])
    shape = jnp.concatenate([jnp.full(2, SHAPE_INFINITE), jnp.where(l_ellipse, SHAPE_ELLIPSE, SHAPE_RECT),
                             jnp.full(1, SHAPE_RECT), jnp.where(m_ellipse, SHAPE_ELLIPSE, SHAPE_RECT)])
    shape = shape.astype(jnp.int32)
    texel = jnp.concatenate([one(bg_texel), one(g_texel), l_texel, one(w_texel), m_texel])
    active = jnp.concatenate([jnp.ones(1, bool), ground_on[None], jnp.arange(nl) < n_layers, wall_on[None],
                              jnp.arange(nm) < n_movers])
    zeros3 = jnp.zeros((MAX_PLANES - nm, 3), jnp.float32)
    # Per-plane texture parameters (synthetic._texture_kw), drawn for every slot.
    lo = jnp.full(MAX_PLANES, s.brightness[0]).at[0].set(s.background_brightness[0])
    hi = jnp.full(MAX_PLANES, s.brightness[1]).at[0].set(s.background_brightness[1])
    colour = (lo + (hi - lo) * u(0.0, 1.0, (MAX_PLANES,)))[:, None] * (
        1 + u(*s.colour_jitter, (MAX_PLANES, 3)))
    sky = u(*s.sky) * jnp.array(s.sky_tint, jnp.float32)
    return DeviceScene(
        origin=origin.astype(jnp.float32), axis_u=axis_u.astype(jnp.float32), axis_v=axis_v.astype(jnp.float32),
        extent=extent.astype(jnp.float32), shape=shape,
        texture=u.integers(0, num_textures, (MAX_PLANES,)).astype(jnp.int32),
        texel=texel.astype(jnp.float32),
        tex_angle=u(0.0, 2 * math.pi, (MAX_PLANES,)),
        tex_offset=u(*s.texture_offset, (MAX_PLANES, 2)),
        colour=colour.astype(jnp.float32),
        velocity=jnp.concatenate([zeros3, velocity]).astype(jnp.float32),
        spin=jnp.concatenate([zeros3, spin]).astype(jnp.float32),
        active=active, far=(s.far_factor * z_far).astype(jnp.float32), sky=sky)


def sample_camera_motion(u, z_near, K, width: int, scale=1.0):
    """Relative pose ``(R [3, 3], t [3])`` float32, ``X2 = R X1 + t``
    (``synthetic.sample_camera_motion``'s distribution)."""
    s = MOTION
    u = _stream(u, N_MOTION)
    scale = jnp.asarray(scale, jnp.float32)
    yp = jnp.clip(s.yaw_pitch_sigma * u.normal((2,)), -s.yaw_pitch_limit, s.yaw_pitch_limit) * scale
    roll = jnp.clip(s.roll_sigma * u.normal(), -s.roll_limit, s.roll_limit) * scale
    R = euler(_deg(yp[0]), _deg(yp[1]), _deg(roll))
    parallax = u(*s.parallax) * (width / REFERENCE_WIDTH) * scale
    phi = u(0.0, 2 * math.pi)
    lateral = parallax * z_near / K[0]
    t = jnp.stack([lateral * jnp.cos(phi), lateral * jnp.sin(phi), u(*s.advance) * z_near * scale])
    return R, t.astype(jnp.float32)


# ----------------------------------------------------------------------------------------------
# Appearance
# ----------------------------------------------------------------------------------------------

def particle_limits(height: int, width: int) -> tuple[int, int, int, int]:
    """Static sizes of the weather layers at ``height x width``: (most rain streaks, samples per
    streak, most snow flakes, largest flake radius) — the host's counts are
    ``int(U{300..1200} * area)`` and ``int(U{150..700} * area)`` with ``area`` relative to 576x320."""
    s = APPEARANCE
    area = width * height / (float(REFERENCE_WIDTH) * REFERENCE_HEIGHT)
    scale = width / float(REFERENCE_WIDTH)
    rain = max(int((s.rain_count[1] - 1) * area), 1)
    # points on the longest streak (rounded ends)
    steps = int(math.ceil(s.rain_length[1] * scale * s.streak_length[1] + 1.5)) + 1
    snow = max(int((s.snow_count[1] - 1) * area), 1)
    return rain, steps, snow, max(1, int(round(s.snow_radius * scale)))


def sample_appearance(u, depth_scale, height: int, width: int) -> dict:
    """Pair-level appearance parameters of every category (``sample_appearance`` of the host,
    whose docstring gives the distributions): a dict of float32/int32 scalars and ``[3]``
    vectors; the category picks which ones apply."""
    s = APPEARANCE
    area = width * height / (float(REFERENCE_WIDTH) * REFERENCE_HEIGHT)
    scale = width / float(REFERENCE_WIDTH)
    u = _stream(u, N_LOOK)
    t_far = u(*s.fog_transmission)
    airlight = u(*s.airlight) * (1 + u(*s.airlight_jitter, (3,))) + jnp.array(s.airlight_tint)
    return {
        "noise": u(*s.noise),
        "beta": -jnp.log(t_far) / jnp.maximum(depth_scale, 1e-6),
        "airlight": airlight.astype(jnp.float32),
        "dark": u(*s.dark),
        "cast": 1 + u(*s.cast, (3,)),
        "shot": u(*s.shot),
        "read": u(*s.read),
        "rain_count": jnp.floor(u.integers(*s.rain_count, ()) * area).astype(jnp.int32),
        "rain_angle": _deg(u(*s.rain_angle)),
        "rain_length": u(*s.rain_length) * scale,
        "rain_brightness": u(*s.rain_brightness),
        "snow_count": jnp.floor(u.integers(*s.snow_count, ()) * area).astype(jnp.int32),
        "snow_haze": u(*s.snow_haze),
    }


# ----------------------------------------------------------------------------------------------
# Conversion to the host renderer's objects
# ----------------------------------------------------------------------------------------------

def scene_to_host(scene: DeviceScene, textures):
    """The host ``synthetic_render.Scene`` of one sampled scene (numpy or device arrays without a
    batch axis). ``textures``: the host mip pyramids the device bank was built from (texture
    ids are bank indices; the host scene keeps the ones in use, renumbered, like
    ``synthetic.sample_scene``)."""

    s = jax.tree.map(lambda a: np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a),
                     scene)
    slots = [k for k in range(MAX_PLANES) if bool(s.active[k])]
    used = sorted({int(s.texture[k]) for k in slots})
    remap = {old: new for new, old in enumerate(used)}
    planes = []
    for k in slots:
        shape = _SHAPE_NAMES[int(s.shape[k])]
        planes.append(Plane(origin=s.origin[k], axis_u=s.axis_u[k], axis_v=s.axis_v[k],
                            extent=None if shape == "infinite" else (float(s.extent[k, 0]), float(s.extent[k, 1])),
                            shape=shape, texture=remap[int(s.texture[k])], texel=float(s.texel[k]),
                            tex_angle=float(s.tex_angle[k]),
                            tex_offset=(float(s.tex_offset[k, 0]), float(s.tex_offset[k, 1])),
                            colour=s.colour[k], velocity=s.velocity[k], spin=s.spin[k]))
    return Scene(planes=tuple(planes), textures=tuple(textures[i] for i in used), far=float(s.far), sky=s.sky)


def appearance_to_host(look: dict, category: str, height: int, width: int) -> dict:
    """The host's ``sample_appearance`` dict for ``category`` with the device's values (to run
    ``synthetic_appearance.apply_appearance`` on the same parameters)."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; expected one of {CATEGORIES}")
    f = {k: np.asarray(v) for k, v in look.items()}
    p = {"category": category, "gain_jitter": APPEARANCE.gain_jitter, "bias_jitter": APPEARANCE.bias_jitter,
         "noise": float(f["noise"])}
    if category == "FOG":
        p.update(beta=float(f["beta"]), airlight=f["airlight"].astype(np.float64).tolist())
    elif category == "LL":
        p.update(dark=float(f["dark"]), cast=f["cast"].astype(np.float64).tolist(), shot=float(f["shot"]),
                 read=float(f["read"]))
    elif category == "RAIN":
        p.update(count=int(f["rain_count"]), angle=float(f["rain_angle"]), length=float(f["rain_length"]),
                 brightness=float(f["rain_brightness"]))
    elif category == "SNOW":
        p.update(count=int(f["snow_count"]), max_radius=particle_limits(height, width)[3],
                 haze=float(f["snow_haze"]))
    return p


# ----------------------------------------------------------------------------------------------
# Appearance of the frames (synthetic_appearance.apply_appearance)
# ----------------------------------------------------------------------------------------------

def _exp(x):
    """``exp(x)`` (float32, relative error a few 1e-7; 0 below ``2^-126``) from multiplications,
    additions and the exponent bits only: the same bits in every compiled program (XLA:CPU's
    own ``exp`` rounds the last bit differently in its scalar and vector code)."""
    y = x * np.float32(1 / np.log(2))
    k = jnp.floor(y + 0.5)
    f = (y - k) * np.float32(np.log(2))  # |f| <= 0.347
    p = 1 + f * (1 + f * (1 / 2 + f * (1 / 6 + f * (1 / 24 + f * (1 / 120 + f * (1 / 720 + f * (1 / 5040)))))))
    k = jnp.clip(k, -127, 127).astype(jnp.int32)
    scale = jax.lax.bitcast_convert_type((k + 127) << 23, jnp.float32)  # 2^k (0 for k = -127)
    return p * scale


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
    n, m_max, _, _ = particle_limits(height, width)
    lo = jnp.array([-0.1 * width, -0.1 * height], jnp.float32)
    start = lo + u(0.0, 1.0, (n, 2)) * jnp.array([1.2 * width, 1.2 * height], jnp.float32)
    ang = look["rain_angle"] + APPEARANCE.streak_angle_sigma * u.normal((n,))
    length = look["rain_length"] * u(*APPEARANCE.streak_length, (n,))
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
    _, _, n, rmax = particle_limits(height, width)
    xs = u.integers(0, width, (n,))
    ys = u.integers(0, height, (n,))
    radius = jnp.minimum(jnp.floor(jnp.log1p(-u(0.0, 1.0, (n,))) / math.log(1 - APPEARANCE.flake_radius_p)) + 1,
                         rmax)
    alpha = u(*APPEARANCE.flake_opacity, (n,)) * (jnp.arange(n) < look["snow_count"])
    o = jnp.arange(-rmax, rmax + 1)  # coverage vanishes beyond r + 0.5
    oy, ox = jnp.meshgrid(o, o, indexing="ij")
    d = jnp.sqrt((ox * ox + oy * oy).astype(jnp.float32))
    cover = jnp.clip(radius[:, None, None] + 0.5 - d, 0.0, 1.0) * alpha[:, None, None]
    layer = _splat((height, width), xs[:, None, None] + ox, ys[:, None, None] + oy, cover, "max")
    return jnp.minimum(_blur(layer, 0.8), 1.0)


def noise_words(height: int, width: int) -> int:
    """Random words the sensor noise of one ``height x width`` RGB frame takes (16 bits a value)."""
    return (height * width * 3 + 1) // 2


def frame_uniforms(height: int, width: int) -> int:
    """Uniforms one frame's appearance takes: exposure, fog jitter, rain streaks, snow flakes."""
    n_rain, _, n_snow, _ = particle_limits(height, width)
    return N_FRAME_SCALARS + 5 * n_rain + 4 * n_snow


def _standard_normal(words, shape):
    """Standard-normal samples from 16 random bits each (``words``: uint32, two values a word),
    by inverse-CDF lookup at ``(k + 1/2) / 65536``: the host's ``synthetic_appearance.standard_normal``
    and its table (tails cut at ±4.3 sigma, immaterial for sensor noise; half the random bits of
    ``jax.random.normal`` and a table read instead of ``erf_inv``)."""
    n = math.prod(shape)
    idx = jnp.concatenate([words & 0xFFFF, words >> 16])[:n].astype(jnp.int32)
    return jnp.asarray(normal_quantiles()).at[idx].get(mode="promise_in_bounds").reshape(shape)


def apply_appearance(clean, depth, look: dict, category_id, key=None, *, uniforms=None, words=None):
    """One frame (``synthetic_appearance.apply_appearance``): clean float RGB ``[H, W, 3]`` and its
    depth -> uint8 RGB. ``category_id`` (index into ``CATEGORIES``, may be traced) picks the
    weather with ``lax.switch``: only that category's layer is made (under a vmap over the
    category, every branch runs and the right one is selected). Randomness: ``key``, or the
    pre-drawn ``uniforms`` (:func:`frame_uniforms` of them) and noise ``words``
    (:func:`noise_words` uint32)."""
    height, width = depth.shape
    if key is not None:
        k1, k2 = jax.random.split(key)
        uniforms = jax.random.uniform(k1, (frame_uniforms(height, width),))
        words = jax.random.bits(k2, (noise_words(height, width),), jnp.uint32)
    cat = jnp.asarray(category_id, jnp.int32)
    u = UniformStream(uniforms)
    gain = 1 + u(-APPEARANCE.gain_jitter, APPEARANCE.gain_jitter)
    bias = u(-APPEARANCE.bias_jitter, APPEARANCE.bias_jitter)
    beta = look["beta"] * u(*APPEARANCE.fog_frame_jitter)
    n_rain, _, n_snow, _ = particle_limits(height, width)
    u_rain = UniformStream(u.take(5 * n_rain))
    u_snow = UniformStream(u.take(4 * n_snow))
    img = clean.astype(jnp.float32)

    def fog(img):
        air = look["airlight"]
        return air + (img - air) * _exp(depth * -beta)[..., None]

    def rain(img):
        return img * 0.9 + 0.1 * 128 + _rain_layer(u_rain, look, height, width)[..., None]

    def snow(img):
        keep = 1 - _snow_layer(u_snow, look, height, width)
        haze = look["snow_haze"]
        return ((img * (1 - haze) + (haze * 255 - 245)) * keep[..., None]) + 245.0

    branches = {"FOG": fog, "RAIN": rain, "SNOW": snow}
    img = jax.lax.switch(cat, [branches.get(c, lambda img: img) for c in CATEGORIES], img)
    dark = look["dark"]
    low = jnp.maximum(img * (look["cast"] * gain * dark) + bias * dark, 0.0)
    is_ll = cat == CATEGORIES.index("LL")
    img = jnp.where(is_ll, low, img * gain + bias)
    sigma = jnp.where(is_ll, jnp.sqrt(low * look["shot"] + look["read"] ** 2), look["noise"])
    img = img + _standard_normal(words, img.shape) * sigma + 0.5
    return jnp.clip(img, 0, 255).astype(jnp.uint8)
