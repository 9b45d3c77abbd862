"""Occluders pasted into footage pairs (camflow_jax.adaptation.occluders), against explicit
pixel loops and the ellipse's closed-form area."""

import numpy as np
import pytest

from camflow_jax.adaptation import finetune as ft
from camflow_jax.adaptation import occluders
from camflow_jax.adaptation.config import AdaptConfig
from camflow_jax.adaptation.teacher import Labels


def _loop_paste(image, source, center, radii, source_center):
    """The occluder drawn pixel by pixel: inside the ellipse, the source pixel at the same offset
    from its centre."""
    out = image.copy()
    h, w = image.shape[:2]
    for y in range(h):
        for x in range(w):
            if ((y - center[0]) / radii[0]) ** 2 + ((x - center[1]) / radii[1]) ** 2 <= 1:
                out[y, x] = source[y - center[0] + source_center[0], x - center[1] + source_center[1]]
    return out


def test_paste_matches_a_pixel_loop_in_both_images_and_sticks_out_of_the_frame():
    rng = np.random.default_rng(0)
    img, src = rng.random((2, 24, 40, 1), dtype=np.float32)
    before = img.copy()
    occ = occluders.Occluder(radii=(5, 9), source_center=(10, 20), center1=(2, 37), center2=(15, 30))
    for which, c in ((1, occ.center1), (2, occ.center2)):
        out, mask = occluders.paste(img, src, occ, which)
        np.testing.assert_array_equal(out, _loop_paste(img, src, c, occ.radii, occ.source_center))
        np.testing.assert_array_equal(out[~mask], img[~mask])
    assert occluders.paste(img, src, occ, 1)[1].sum() < np.pi * 5 * 9 * 0.6  # clipped by the frame's corner
    np.testing.assert_array_equal(img, before)  # the input is not written to


def test_an_occluder_inside_the_frame_moves_by_its_shift_and_has_the_ellipse_area():
    img = np.zeros((64, 96, 1), np.float32)
    occ = occluders.Occluder(radii=(10, 16), source_center=(20, 30), center1=(25, 30), center2=(32, 55))
    m1, m2 = occluders.paste(img, img, occ, 1)[1], occluders.paste(img, img, occ, 2)[1]
    np.testing.assert_array_equal(np.roll(m1, (7, 25), axis=(0, 1)), m2)
    assert abs(m1.sum() - np.pi * 10 * 16) < 0.05 * np.pi * 10 * 16


@pytest.mark.parametrize("hw", [(128, 256), (9, 7), (480, 640)])
def test_sampled_occluders_stay_in_their_ranges_and_inside_the_source(hw):
    h, w = hw
    rng = np.random.default_rng(1)
    for _ in range(300):
        occ = occluders.sample(rng, h, w)
        (ry, rx), (sy, sx) = occ.radii, occ.source_center
        assert 0 <= sy - ry and sy + ry < h and 0 <= sx - rx and sx + rx < w  # every pixel cut exists
        assert 0 <= occ.center1[0] < h and 0 <= occ.center1[1] < w
        shift = np.hypot(occ.center2[0] - occ.center1[0], occ.center2[1] - occ.center1[1])
        assert shift <= occluders.MAX_SHIFT * w + 1
        if min(h, w) >= 128:  # large enough that rounding and clipping do not bend the area
            share = np.pi * ry * rx / (h * w)
            assert occluders.AREA[0] * 0.7 <= share <= occluders.AREA[1] * 1.3
        src = np.arange(h * w, dtype=np.float32).reshape(h, w, 1)
        occluders.paste(src, src, occ, 2)  # never indexes outside the source


def _labels(n):
    return Labels(pairs=[(0, t, t + 1) for t in range(n)], coeffs_f=np.arange(n * 3, dtype=np.float32).reshape(n, 3),
                  coeffs_b=-np.arange(n * 3, dtype=np.float32).reshape(n, 3),
                  weight_f=np.full((n, 8, 16), 255, np.uint8), weight_b=np.full((n, 8, 16), 128, np.uint8),
                  keep=np.ones(n, bool), reason=[""] * n)


def test_the_footage_batch_occludes_the_images_only_and_keeps_the_labels():
    rng = np.random.default_rng(2)
    gray = rng.random((6, 32, 64, 1), dtype=np.float32)
    footage = ft.Footage([gray], [np.zeros((3, 32, 64, 2), np.float32)])
    labels = _labels(5)
    pick = np.array([0, 3, 4, 1])
    plain = ft.footage_batch(footage, labels, 0, pick, np.random.default_rng(3), 0.0)
    np.testing.assert_array_equal(plain["g1"], gray[pick])
    np.testing.assert_array_equal(plain["g2"], gray[pick + 1])
    occ = ft.footage_batch(footage, labels, 0, pick, np.random.default_rng(3), 1.0)
    for k in ("cf", "cb", "wf", "wb", "bases"):
        np.testing.assert_array_equal(occ[k], plain[k])
    np.testing.assert_array_equal(occ["cf"], labels.coeffs_f[pick])
    np.testing.assert_allclose(occ["wb"], 128 / 255)
    for j in range(len(pick)):
        for key in ("g1", "g2"):
            changed = (occ[key][j] != plain[key][j])[..., 0]
            assert changed.any() and changed.mean() < 0.5, (key, j, changed.mean())


def test_the_occluder_share_is_checked():
    with pytest.raises(ValueError, match="occluders must be a share in"):
        AdaptConfig(occluders=1.5)


def test_a_turned_footage_batch_reads_those_pairs_backwards():
    """Rows turned round for a one-direction step: image t + 1 first, the backward label and
    weights as the forward ones (read from the frames and the labels themselves)."""
    rng = np.random.default_rng(4)
    gray = rng.random((6, 32, 64, 1), dtype=np.float32)
    footage = ft.Footage([gray], [np.zeros((3, 32, 64, 2), np.float32)])
    labels = _labels(5)
    pick = np.array([0, 3, 4, 1])
    turned = np.array([True, False, True, False])
    b = ft.footage_batch(footage, labels, 0, pick, np.random.default_rng(3), 0.0, turned)
    for j, (t, r) in enumerate(zip(pick, turned)):
        np.testing.assert_array_equal(b["g1"][j], gray[t + 1] if r else gray[t])
        np.testing.assert_array_equal(b["g2"][j], gray[t] if r else gray[t + 1])
        np.testing.assert_array_equal(b["cf"][j], (labels.coeffs_b if r else labels.coeffs_f)[t])
        np.testing.assert_array_equal(b["cb"][j], (labels.coeffs_f if r else labels.coeffs_b)[t])
        np.testing.assert_allclose(b["wf"][j], (128 if r else 255) / 255)
