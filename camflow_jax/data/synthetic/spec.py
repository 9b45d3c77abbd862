"""The distributions of the synthetic scenes, in one frozen spec that both renderers read: the
host's (:mod:`.scenes`, :mod:`.appearance`: numpy draws) and the device's
(:mod:`.device_sampling`: a stream of JAX uniforms). The samplers' docstrings describe the
distributions in words; the numbers live here.

A pair ``(low, high)`` is a uniform draw (an integer pair: ``integers(low, high)``, high
excluded); angles are in degrees; pixel sizes are at :data:`REFERENCE_WIDTH` x
:data:`REFERENCE_HEIGHT` and scale with the frame. Changing a number changes both renderers and
every seeded dataset.
"""

from __future__ import annotations

import dataclasses

__all__ = ["REFERENCE_WIDTH", "REFERENCE_HEIGHT", "IntrinsicsSpec", "SceneSpec", "MotionSpec", "AppearanceSpec",
           "INTRINSICS", "SCENE", "MOTION", "APPEARANCE"]

#: The frame size the pixel sizes of the spec are given at (GHOF's 576 x 320).
REFERENCE_WIDTH, REFERENCE_HEIGHT = 576, 320


@dataclasses.dataclass(frozen=True)
class IntrinsicsSpec:
    """``K = (fx, fy, cx, cy)``."""

    focal: tuple = (0.9, 1.1)  # fx / W
    aspect: tuple = (-0.02, 0.02)  # fy = fx (1 + U)
    centre: tuple = (-0.02, 0.02)  # principal point offset from the image centre, a fraction of the side


@dataclasses.dataclass(frozen=True)
class SceneSpec:
    """A scene for the camera at the identity pose (``sample_scene``): depths in world units
    (``z_near``-relative where named so), positions and sizes as fractions of the frame, texel
    sizes as multiples of a pixel's footprint at the plane's reference depth."""

    z_near: tuple = (2.5, 5.0)
    z_far: tuple = (30.0, 120.0)
    camera_pitch: tuple = (-4.0, 12.0)
    camera_roll: tuple = (-3.0, 3.0)
    far_factor: float = 10.0  # the scene's far limit, in z_far
    sky: tuple = (170.0, 230.0)
    sky_tint: tuple = (0.92, 0.97, 1.05)
    # textures (every plane)
    brightness: tuple = (0.6, 1.15)
    colour_jitter: tuple = (-0.15, 0.15)
    texture_offset: tuple = (0.0, 512.0)  # texels
    # background: infinite, at z_far
    background_tilt: tuple = (-10.0, 10.0)  # yaw and pitch
    background_texel: tuple = (0.8, 1.4)
    background_brightness: tuple = (0.8, 1.2)
    # ground: infinite, below the camera
    ground_probability: float = 0.85
    ground_height: tuple = (1.0, 2.5)
    ground_texel: tuple = (0.9, 1.6)
    # occluding layers: the first at z_near, the others log-uniform in [z_near, layer_far z_far]
    layers: tuple = (3, 7)
    layer_far: float = 0.5
    layer_x: tuple = (0.05, 0.95)
    layer_y: tuple = (0.05, 0.85)
    layer_width: tuple = (0.12, 0.45)
    layer_aspect: tuple = (0.5, 2.0)  # log-uniform height / width
    layer_yaw: tuple = (-35.0, 35.0)
    layer_pitch: tuple = (-20.0, 20.0)
    layer_roll: tuple = (-15.0, 15.0)
    layer_ellipse_probability: float = 0.25
    layer_texel: tuple = (0.9, 1.6)
    # side wall: a long rectangle receding from wall_near z_near
    wall_probability: float = 0.35
    wall_near: float = 1.2
    wall_length: tuple = (0.3, 0.8)  # z_far
    wall_offset: tuple = (0.7, 1.0)  # of the half frame width at its near end
    wall_angle: tuple = (55.0, 75.0)
    wall_top: tuple = (1.0, 3.0)  # above the centre, in half frame heights at its near end
    wall_height: tuple = (1.5, 3.0)  # of its top
    wall_texel: tuple = (0.8, 1.4)
    # moving objects
    movers: tuple = (1, 3)
    mover_depth: tuple = (1.1, 4.0)  # z_near
    mover_x: tuple = (0.15, 0.85)
    mover_y: tuple = (0.2, 0.8)
    mover_width: tuple = (0.1, 0.25)
    mover_aspect: tuple = (0.6, 1.6)  # log-uniform height / width
    mover_yaw: tuple = (-20.0, 20.0)
    mover_pitch: tuple = (-10.0, 10.0)
    mover_shift: tuple = (8.0, 40.0)  # px at REFERENCE_WIDTH
    mover_advance: tuple = (-0.05, 0.05)  # along the optical axis, of its depth
    mover_spin: tuple = (-8.0, 8.0)
    mover_ellipse_probability: float = 0.5
    mover_texel: tuple = (0.9, 1.6)


@dataclasses.dataclass(frozen=True)
class MotionSpec:
    """The relative camera pose (``sample_camera_motion``), before its ``scale``."""

    yaw_pitch_sigma: float = 1.2  # normal, clipped to +-yaw_pitch_limit
    yaw_pitch_limit: float = 3.5
    roll_sigma: float = 0.8
    roll_limit: float = 2.5
    parallax: tuple = (4.0, 36.0)  # px at depth z_near, at REFERENCE_WIDTH
    advance: tuple = (-0.08, 0.08)  # z_near


@dataclasses.dataclass(frozen=True)
class AppearanceSpec:
    """The photometric categories (``sample_appearance``; ``apply_appearance`` per frame)."""

    gain_jitter: float = 0.03  # per frame: gain 1 + U(-j, j)
    bias_jitter: float = 3.0  # per frame: bias U(-j, j)
    noise: tuple = (0.5, 1.5)  # Gaussian sensor noise sigma (all but LL)
    fog_transmission: tuple = (0.05, 0.35)  # at the scene's 90th-percentile depth
    fog_frame_jitter: tuple = (0.97, 1.03)  # per frame, of the density
    airlight: tuple = (170.0, 235.0)
    airlight_jitter: tuple = (-0.04, 0.04)  # per channel
    airlight_tint: tuple = (0.0, 2.0, 8.0)
    dark: tuple = (0.1, 0.3)
    cast: tuple = (-0.15, 0.15)  # per channel
    shot: tuple = (0.3, 1.5)
    read: tuple = (1.0, 3.0)
    rain_count: tuple = (300, 1201)  # per REFERENCE_WIDTH x REFERENCE_HEIGHT
    rain_angle: tuple = (-25.0, 25.0)
    rain_length: tuple = (10.0, 35.0)  # px at REFERENCE_WIDTH
    rain_brightness: tuple = (25.0, 70.0)
    snow_count: tuple = (150, 701)  # per REFERENCE_WIDTH x REFERENCE_HEIGHT
    snow_radius: int = 4  # px at REFERENCE_WIDTH, the largest flake's
    snow_haze: tuple = (0.03, 0.12)
    # per frame: each streak's and flake's own draws
    streak_angle_sigma: float = 0.03  # radians, normal around the pair's angle
    streak_length: tuple = (0.6, 1.4)  # of the pair's length
    flake_radius_p: float = 0.55  # radius min(Geometric(p), the largest)
    flake_opacity: tuple = (0.5, 1.0)


INTRINSICS = IntrinsicsSpec()
SCENE = SceneSpec()
MOTION = MotionSpec()
APPEARANCE = AppearanceSpec()
